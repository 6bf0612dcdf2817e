"""legato_gym: computer-use desktops as Gymnasium environments.

Importing this package registers ``legato/FakeDesktop-v0`` (and the ids of the other backends that are
built) with Gymnasium::

    import gymnasium as gym
    import legato_gym  # noqa: F401  (registers the legato/ ids)

    env = gym.make("legato/FakeDesktop-v0")
    obs, info = env.reset(seed=0)
"""

from typing import TYPE_CHECKING

from legato_gym.backends import Backend, Finished, RayNeeds, backend_names, get_backend, make_desktop, resolve_backend
from legato_gym.config import DesktopConfig, Timeouts
from legato_gym.contract import SPECIAL_ACTIONS, ActResult, Desktop, Observation, Task, Waited
from legato_gym.episode import Episode
from legato_gym.errors import (
    ActionError,
    AgentFault,
    BackendUnavailableError,
    ConfigError,
    ConformanceError,
    DeadlineExceeded,
    DesktopCrashed,
    DesktopError,
    LegatoError,
    MissingDependencyError,
    ReplyTooLarge,
    SetupError,
    StateError,
    TaskFileError,
    UnknownTaskError,
    UnsupportedTaskError,
)
from legato_gym.options import BackendOptions

if TYPE_CHECKING:
    from legato_gym.conformance import check_desktop
    from legato_gym.env import DesktopEnv
    from legato_gym.tasks import load_tasks

__version__ = "0.1.0"

try:
    from legato_gym.registration import register_envs as _register_envs
except ImportError:  # gymnasium is absent (a desktop worker under another interpreter): no ids to register
    pass
else:
    _register_envs()


def __getattr__(name: str) -> object:
    # DesktopEnv needs gymnasium; importing it lazily keeps this package importable without it. The task
    # loader and the conformance checker are lazy too: every desktop worker imports this package, and needs
    # neither.
    if name == "DesktopEnv":
        from legato_gym.env import DesktopEnv

        return DesktopEnv
    if name == "load_tasks":
        from legato_gym.tasks import load_tasks

        return load_tasks
    if name == "check_desktop":
        from legato_gym.conformance import check_desktop

        return check_desktop
    raise AttributeError(f"module 'legato_gym' has no attribute {name!r}")


__all__ = [
    "SPECIAL_ACTIONS",
    "ActResult",
    "ActionError",
    "AgentFault",
    "Backend",
    "BackendOptions",
    "BackendUnavailableError",
    "ConfigError",
    "ConformanceError",
    "DeadlineExceeded",
    "Desktop",
    "DesktopConfig",
    "DesktopCrashed",
    "DesktopEnv",
    "DesktopError",
    "Episode",
    "Finished",
    "LegatoError",
    "MissingDependencyError",
    "Observation",
    "RayNeeds",
    "ReplyTooLarge",
    "SetupError",
    "StateError",
    "Task",
    "TaskFileError",
    "Timeouts",
    "UnknownTaskError",
    "UnsupportedTaskError",
    "Waited",
    "__version__",
    "backend_names",
    "check_desktop",
    "get_backend",
    "load_tasks",
    "make_desktop",
    "resolve_backend",
]
