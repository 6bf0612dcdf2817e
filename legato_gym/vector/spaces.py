"""A Box space with one scalar bound pair, cheap at any shape: the vector env's batched screenshot space.

Gymnasium's :class:`~gymnasium.spaces.Box` stores ``low`` and ``high`` (and two boolean masks) at the full
shape of the space. For the batched screenshots of 256 desktops at 1920x1080, ``(256, 1080, 1920, 3)``, that
is 3.2 GB of bounds that are 0 and 255 everywhere, and ``batch_space`` spends some 40 s of CPU building them.
:class:`UniformBox` is a real ``Box`` (``isinstance`` holds, ``sample``, ``contains``, ``==``, ``repr``, pickling
and ``batch_space`` behave as Gymnasium's) whose bounds are stride-0 views of one scalar each, so it costs
nothing whatever its shape. Importing this module registers it with Gymnasium's ``batch_space``, so
batching a ``UniformBox`` gives another one.
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import deepcopy
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

__all__ = ["UniformBox"]


class UniformBox(spaces.Box):  # type: ignore[misc]
    """A :class:`gymnasium.spaces.Box` whose bounds are the same two scalars everywhere.

    Args:
        low: the lower bound of every element.
        high: the upper bound of every element.
        shape: the shape of the space.
        dtype: the element type.
        seed: seeds :meth:`sample` (an int, or a ``numpy.random.Generator`` to use).

    Example:
        >>> space = UniformBox(0, 255, (256, 1080, 1920, 3), np.uint8)
        >>> space
        Box(0, 255, (256, 1080, 1920, 3), uint8)
        >>> space.low.strides
        (0, 0, 0, 0)
    """

    def __init__(
        self,
        low: float,
        high: float,
        shape: Sequence[int],
        dtype: npt.DTypeLike,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        scalar = spaces.Box(low, high, (1,), np.dtype(dtype))  # Gymnasium's own checks of bounds and dtype
        self.dtype = scalar.dtype
        self._shape = tuple(int(dim) for dim in shape)
        ones = (1,) * len(self._shape)
        self.low = np.broadcast_to(scalar.low.reshape(ones), self._shape)
        self.high = np.broadcast_to(scalar.high.reshape(ones), self._shape)
        self.bounded_below = np.broadcast_to(scalar.bounded_below.reshape(ones), self._shape)
        self.bounded_above = np.broadcast_to(scalar.bounded_above.reshape(ones), self._shape)
        self._low, self._high = scalar.low[0], scalar.high[0]
        self._bounded = (bool(scalar.bounded_below[0]), bool(scalar.bounded_above[0]))
        self.low_repr, self.high_repr = str(self._low), str(self._high)
        spaces.Space.__init__(self, self._shape, self.dtype, seed)

    def is_bounded(self, manner: Literal["both", "below", "above"] = "both") -> bool:
        """Whether the box is bounded ``"below"``, ``"above"`` or on ``"both"`` sides."""
        below, above = self._bounded
        if manner == "both":
            return below and above
        if manner == "below":
            return below
        if manner == "above":
            return above
        raise ValueError(f"manner is not in {{'below', 'above', 'both'}}, actual value: {manner}")

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is in the space (compared through its extremes, without full-size temporaries)."""
        if not isinstance(x, np.ndarray) or x.shape != self.shape or x.size == 0:
            return bool(super().contains(x))
        return bool(np.can_cast(x.dtype, self.dtype) and x.min() >= self._low and x.max() <= self._high)

    def __eq__(self, other: object, /) -> bool:
        if isinstance(other, UniformBox):
            return (
                self.shape == other.shape
                and self.dtype == other.dtype
                and bool(np.isclose(self._low, other._low))
                and bool(np.isclose(self._high, other._high))
            )
        return bool(super().__eq__(other))

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (self._low.item(), self._high.item(), self._shape, self.dtype),
            {"_np_random": self._np_random},
        )


@batch_space.register(UniformBox)
def _batch_uniform_box(space: UniformBox, n: int = 1) -> UniformBox:
    return UniformBox(space._low.item(), space._high.item(), (n, *space.shape), space.dtype, deepcopy(space.np_random))
