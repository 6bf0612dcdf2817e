"""Batching: per-desktop results into Gymnasium's batched ``(obs, rewards, terminated, truncated, infos)``.

In a batch a failed desktop's row has a zero screenshot, reward 0, ``truncated=True`` and its error in
``info["error"]`` (mask ``info["_error"]``). Infos are batched as Gymnasium's ``VectorEnv._add_info`` does,
for partial batches too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from legato_gym.vector.pool import Slot
from legato_gym.vector.results import Result

__all__ = ["Batch", "add_info", "assemble", "single_obs"]

Obs = dict[str, Any]
Batch = tuple[Obs, npt.NDArray[np.float64], Any, Any, dict[str, Any]]


def assemble(
    slots: Sequence[Slot], rows: list[tuple[int, Result | None]], shape: tuple[int, ...], *, full: bool
) -> Batch:
    """Batch results; a ``None`` result (a desktop not reset) repeats that desktop's last observation.

    Args:
        slots: every desktop's slot (their last observations are read and kept).
        rows: ``(env_id, result)`` per row of the batch.
        shape: one screenshot's shape.
        full: the batch covers every desktop (only then a row's view is kept as its last observation).
    """
    count = len(rows)
    screens = np.empty((count, *shape), dtype=np.uint8)
    instructions: list[str] = []
    rewards = np.zeros(count, dtype=np.float64)
    terminated = np.zeros(count, dtype=np.bool_)
    truncated = np.zeros(count, dtype=np.bool_)
    infos: dict[str, Any] = {}
    for row, (env_id, result) in enumerate(rows):
        slot = slots[env_id]
        if result is None:
            if slot.last_screen is not None:
                screens[row] = np.asarray(slot.last_screen)
            else:
                screens[row] = 0
            instructions.append(slot.last_instruction)
            continue
        screen = result.decode() if result.error is None else None
        if screen is not None:
            screens[row] = screen
        else:
            screens[row] = 0
        result.from_shm, result.screen = False, None
        if slot.unconsumed is result:
            slot.unconsumed = None
        instructions.append(result.instruction)
        rewards[row] = result.reward
        terminated[row] = result.terminated
        truncated[row] = result.truncated or result.error is not None
        info = dict(result.info or {})
        info["env_id"] = env_id
        if result.error is not None:
            info["error"] = result.error
        add_info(infos, info, row, count)
        # Keep a view for reset(reset_mask) only from full batches: a row of a partial batch would keep
        # that whole batch alive for as long as its desktop stays busy.
        slot.last_screen = screens[row] if full else None
        slot.last_instruction = result.instruction
    obs = {"screenshot": screens, "instruction": tuple(instructions)}
    return obs, rewards, terminated, truncated, infos


def single_obs(slot: Slot, result: Result, shape: tuple[int, ...]) -> Obs:
    """One desktop's observation from ``result`` (kept as the desktop's last one).

    A screenshot that came as a PNG only and was not decoded stays a
    :class:`~legato_gym.vector.ray_host.LazyScreenshot`.
    """
    screen: Any
    if result.lazy and result.png is not None:
        from legato_gym.vector.ray_host import LazyScreenshot

        screen = LazyScreenshot(result.png, result.shape)
    else:
        screen = result.screen if result.screen is not None else np.zeros(shape, np.uint8)
    slot.last_screen, slot.last_instruction = screen, result.instruction
    return {"screenshot": screen, "instruction": result.instruction}


def add_info(infos: dict[str, Any], info: Mapping[str, Any], row: int, count: int) -> dict[str, Any]:
    """Gymnasium's ``VectorEnv._add_info`` for a batch of ``count`` rows (partial batches included)."""
    for key, value in info.items():
        if isinstance(value, dict):
            array: Any = add_info(infos.get(key, {}), value, row, count)
        else:
            array = infos.get(key)
            if array is None:
                if type(value) in (int, float, bool) or isinstance(value, np.number):
                    array = np.zeros(count, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((count, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(count, fill_value=None, dtype=object)
            array[row] = value
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(count, dtype=np.bool_)
        mask[row] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos
