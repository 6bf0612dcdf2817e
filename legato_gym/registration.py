"""Gymnasium ids for legato's desktops.

:func:`register_envs` runs when :mod:`legato_gym` is imported (when gymnasium is installed), so
``gymnasium.make("legato/FakeDesktop-v0")`` and ``gymnasium.make_vec("legato/FakeDesktop-v0", num_envs=8)``
work after ``import legato_gym``. The ids are those of :data:`legato_gym.backends.BACKENDS` (a backend's one
line), registered without importing any backend.

The ids register no ``max_episode_steps``, so that ``gymnasium.make(id)`` adds no ``TimeLimit``: the env
applies its own step limit (``max_steps``, default 15) and grades the step that reaches it, and
``env.spec.max_episode_steps`` reports that limit. ``gymnasium.make(id, max_episode_steps=N)`` still adds
Gymnasium's ``TimeLimit``; the env then ends and grades its episodes on step ``N`` (see
:class:`~legato_gym.env.DesktopEnv`), and ``make_vec`` passes ``N`` to the vector env as its ``max_steps``.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import gymnasium

from legato_gym.backends import BACKENDS

if TYPE_CHECKING:
    from gymnasium.envs.registration import EnvSpec

__all__ = ["ENV_IDS", "register_envs", "with_step_limit"]

#: Every id registered by :func:`register_envs`, with its backend (read from :data:`BACKENDS`).
ENV_IDS: dict[str, str] = {spec.gym_id: name for name, spec in BACKENDS.items() if spec.gym_id is not None}


def register_envs() -> None:
    """Register legato's ids with Gymnasium. Idempotent; a no-op under gymnasium < 1 (a worker's interpreter)."""
    if int(gymnasium.__version__.split(".")[0]) < 1:
        return
    for backend, spec in BACKENDS.items():
        env_id = spec.gym_id
        if env_id is None or env_id in gymnasium.registry:
            continue
        gymnasium.register(
            id=env_id,
            entry_point="legato_gym.env:DesktopEnv",
            vector_entry_point="legato_gym.vector:make_vector_env",
            kwargs={"backend": backend},
            # Observations and rewards of the fake desktop are deterministic for a seed, but every info dict
            # carries wall-clock timings, so no two steps' infos are equal (check_env compares them).
            nondeterministic=True,
        )


def with_step_limit(spec: EnvSpec | None, max_steps: int) -> EnvSpec | None:
    """``spec`` reporting ``max_steps`` as its ``max_episode_steps`` (a copy when it said otherwise)."""
    if spec is None or spec.max_episode_steps == max_steps:
        return spec
    spec = copy.copy(spec)
    spec.max_episode_steps = max_steps
    return spec
