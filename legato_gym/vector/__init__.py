"""Vector envs: many desktops, each in its own worker process.

``gymnasium.make_vec("legato/FakeDesktop-v0", num_envs=8)`` returns a :class:`DesktopVectorEnv` through
:func:`make_vector_env`. The worker side (:mod:`~legato_gym.vector.worker`, and the transport below it:
:mod:`legato_gym.transport`) imports only the standard library and numpy; this package's ``__init__``
imports gymnasium lazily, so a worker under another interpreter never needs it.

Modules, parent side: :mod:`~legato_gym.vector.env` (the public :class:`DesktopVectorEnv`),
:mod:`~legato_gym.vector.inputs` (checking seeds, masks, actions, tasks), :mod:`~legato_gym.vector.batch`
(batched results), :mod:`~legato_gym.vector.state` (each desktop's episode phase),
:mod:`~legato_gym.vector.pool` (workers, deadlines, replacement), :mod:`~legato_gym.vector.requests`,
:mod:`~legato_gym.vector.results`. Workers are reached through :mod:`legato_gym.transport` (the handle
interface, local worker processes, the protocol, the screenshot buffer). Ray: :mod:`~legato_gym.vector.ray_env`,
:mod:`~legato_gym.vector.ray_cluster`, :mod:`~legato_gym.vector.ray_hosts`, :mod:`~legato_gym.vector.ray_host`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from legato_gym.errors import ConfigError

if TYPE_CHECKING:
    from legato_gym.vector.env import Deadlines, DesktopVectorEnv
    from legato_gym.vector.ray_env import RayDesktopVectorEnv, RayPlacement

__all__ = ["Deadlines", "DesktopVectorEnv", "RayDesktopVectorEnv", "RayPlacement", "make_vector_env"]


def make_vector_env(num_envs: int = 1, **kwargs: Any) -> DesktopVectorEnv:
    """The ``vector_entry_point`` of legato's Gymnasium ids: a :class:`DesktopVectorEnv`.

    Takes :class:`DesktopVectorEnv`'s arguments (``backend``, ``config``, ``max_steps``, ``tasks``, ``seed``,
    ``deadlines``, ``worker_env``, ``screenshots``, ``png``, ``copy``, ``pixels``). ``gymnasium.make_vec`` also passes
    ``max_episode_steps`` (the step limit, as for ``gymnasium.make``: a larger ``max_steps`` yields to it, a
    smaller one is a ``ConfigError``) and ``render_mode`` (only ``None``). ``ray`` (a cluster
    address or a :class:`~legato_gym.vector.ray_env.RayPlacement`) places the desktops on a Ray cluster
    (:class:`~legato_gym.vector.ray_env.RayDesktopVectorEnv`; host setup in docs/ray.md).

    Example::

        import gymnasium as gym
        import legato_gym  # noqa: F401  (registers legato/ ids)

        envs = gym.make_vec("legato/FakeDesktop-v0", num_envs=8)
    """
    from legato_gym.vector.env import DesktopVectorEnv

    max_episode_steps = kwargs.pop("max_episode_steps", None)
    max_steps = kwargs.get("max_steps")
    if max_episode_steps is not None and max_episode_steps != -1:  # -1: no limit of gymnasium's, as for make
        # As a TimeLimit around a DesktopEnv (gymnasium.make): the wrapper's limit, never one the spec hides.
        if isinstance(max_steps, int) and isinstance(max_episode_steps, int) and max_steps < max_episode_steps:
            raise ConfigError(
                f"max_steps={max_steps} ends episodes before max_episode_steps={max_episode_steps}, which the "
                f"spec would say; pass one limit (drop max_steps, or use max_episode_steps={max_steps})"
            )
        kwargs["max_steps"] = max_episode_steps
    render_mode = kwargs.pop("render_mode", None)
    if render_mode is not None:
        raise ConfigError(f"render_mode={render_mode!r}: desktops are not rendered; read obs['screenshot']")
    if kwargs.get("desktop") is not None:
        raise ConfigError("desktop=: a vector env builds its desktops in worker processes; pass backend= instead")
    kwargs.pop("desktop", None)
    ray = kwargs.pop("ray", None)
    if ray is not None:  # desktops on a Ray cluster: same surface (legato_gym.vector.ray_env)
        from legato_gym.vector.ray_env import RayDesktopVectorEnv

        return RayDesktopVectorEnv(num_envs, placement=ray, **kwargs)
    return DesktopVectorEnv(num_envs, **kwargs)


def __getattr__(name: str) -> Any:
    if name in ("DesktopVectorEnv", "Deadlines"):
        from legato_gym.vector import env

        return getattr(env, name)
    if name in ("RayDesktopVectorEnv", "RayPlacement"):
        from legato_gym.vector import ray_env

        return getattr(ray_env, name)
    raise AttributeError(f"module 'legato_gym.vector' has no attribute {name!r}")
