"""legato_gym: computer-use desktops as Gymnasium environments.

Importing this package registers ``legato/FakeDesktop-v0`` (and the ids of the other backends that are
built) with Gymnasium::

    import gymnasium as gym
    import legato_gym  # noqa: F401  (registers the legato/ ids)

    env = gym.make("legato/FakeDesktop-v0")
    obs, info = env.reset(seed=0)
"""

from legato_gym.backends import backend_names, get_backend, make_desktop
from legato_gym.config import DesktopConfig, Timeouts
from legato_gym.contract import SPECIAL_ACTIONS, ActResult, Desktop, Observation, Task, Waited
from legato_gym.errors import (
    BackendUnavailableError,
    ConfigError,
    DeadlineExceeded,
    DesktopCrashed,
    DesktopError,
    LegatoError,
    MissingDependencyError,
    SetupError,
    StateError,
    TaskFileError,
    UnknownTaskError,
    UnsupportedTaskError,
)

__version__ = "0.1.0"

__all__ = [
    "SPECIAL_ACTIONS",
    "ActResult",
    "BackendUnavailableError",
    "ConfigError",
    "DeadlineExceeded",
    "Desktop",
    "DesktopConfig",
    "DesktopCrashed",
    "DesktopError",
    "LegatoError",
    "MissingDependencyError",
    "Observation",
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
    "get_backend",
    "make_desktop",
]
