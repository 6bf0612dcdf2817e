"""UniformBox: the batched screenshot space, a real gymnasium Box with bounds that cost nothing."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from legato_gym.vector.spaces import UniformBox


def test_a_huge_uniform_box_holds_no_memory() -> None:
    space = UniformBox(0, 255, (256, 1080, 1920, 3), np.uint8)
    assert isinstance(space, spaces.Box)
    assert space.shape == (256, 1080, 1920, 3) and space.dtype == np.uint8
    for array in (space.low, space.high, space.bounded_below, space.bounded_above):
        assert array.shape == space.shape and array.strides == (0, 0, 0, 0)
    assert space.is_bounded() and space.is_bounded("below") and space.is_bounded("above")
    assert repr(space) == "Box(0, 255, (256, 1080, 1920, 3), uint8)"


def test_it_behaves_as_the_gymnasium_box_it_stands_for() -> None:
    ours = UniformBox(0, 255, (4, 6, 3), np.uint8, seed=1)
    theirs = spaces.Box(0, 255, (4, 6, 3), np.uint8, seed=1)
    assert ours == theirs and theirs == ours
    assert repr(ours) == repr(theirs)
    assert ours != UniformBox(0, 254, (4, 6, 3), np.uint8)
    assert ours != UniformBox(0, 255, (4, 6, 2), np.uint8)
    sample = ours.sample()
    assert ours.contains(sample) and theirs.contains(sample)
    np.testing.assert_array_equal(sample, theirs.sample())  # the same seed draws the same values
    assert not ours.contains(np.zeros((4, 6, 2), np.uint8))
    assert not ours.contains(np.zeros((4, 6, 3), np.float64))
    with pytest.warns(UserWarning, match="Casting"):
        assert ours.contains(np.zeros((4, 6, 3), np.uint8).tolist())  # a list is cast, as Box does
    assert not ours.contains(np.zeros((0, 6, 3), np.uint8))
    unit = UniformBox(-1.0, 1.0, (3,), np.float32)
    assert unit.contains(np.array([-1.0, 0.0, 1.0], np.float32))
    assert not unit.contains(np.array([0.0, 1.5, 0.0], np.float32))
    with pytest.raises(ValueError, match="manner"):
        ours.is_bounded("sideways")  # type: ignore[arg-type]


def test_copies_and_batches_stay_cheap() -> None:
    space = UniformBox(0, 255, (1080, 1920, 3), np.uint8, seed=3)
    space.np_random.integers(0, 1000, 4)  # a state other than the seed's
    for other in (copy.deepcopy(space), pickle.loads(pickle.dumps(space))):
        assert isinstance(other, UniformBox) and other == space
        assert other.low.strides == (0, 0, 0)
        state = copy.deepcopy(space.np_random)  # the RNG state travels with the copy
        np.testing.assert_array_equal(other.np_random.integers(0, 1000, 4), state.integers(0, 1000, 4))
    batched = batch_space(space, 256)
    assert isinstance(batched, UniformBox) and batched.shape == (256, 1080, 1920, 3)
    assert batched.low.strides == (0, 0, 0, 0)
    nested = batch_space(spaces.Dict({"screenshot": space}), 2)
    assert isinstance(nested["screenshot"], UniformBox) and nested["screenshot"].shape == (2, 1080, 1920, 3)
