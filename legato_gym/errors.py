"""Every error legato raises, in one tree.

::

    LegatoError
    ├── ConfigError                 bad input from the user: names the value and the fix
    │   ├── TaskFileError           a tasks file or task config that cannot be read
    │   ├── UnknownTaskError        a task id or domain that does not exist (with "did you mean")
    │   ├── UnsupportedTaskError    a task whose setup or evaluator this backend cannot honour
    │   └── BackendUnavailableError a backend that is not built, or whose extra is not installed
    ├── ActionError                 an action string outside the action space (parsed, never executed)
    ├── MissingDependencyError      an optional dependency is missing; names the extra to install
    ├── StateError                  a call made in the wrong lifecycle state; says which call was expected
    ├── ConformanceError            a backend breaks the desktop contract (check_desktop lists every failure)
    ├── AgentFault                  the agent's own actions destroyed or exhausted the desktop: its failure
    └── DesktopError                the desktop itself failed (infrastructure, never the agent)
        ├── SetupError              the task's setup failed
        ├── DesktopCrashed          the desktop (or its worker process) died
        ├── ReplyTooLarge           a desktop answered more bytes than its cap (legato_gym.bounds.ReadCaps)
        └── DeadlineExceeded        a phase overran its deadline (a hang)

``legato_rl`` adds its own branch (policy errors) under :class:`LegatoError`.

Every :class:`DesktopError` may carry the ``env_id`` of the desktop it came from and, when it crossed a
process boundary, the remote traceback as text.
"""

from __future__ import annotations

__all__ = [
    "ActionError",
    "AgentFault",
    "BackendUnavailableError",
    "ConfigError",
    "ConformanceError",
    "DeadlineExceeded",
    "DesktopCrashed",
    "DesktopError",
    "LegatoError",
    "MissingDependencyError",
    "ReplyTooLarge",
    "SetupError",
    "StateError",
    "TaskFileError",
    "UnknownTaskError",
    "UnsupportedTaskError",
]


class LegatoError(Exception):
    """Base class of every error legato raises."""


class ConfigError(LegatoError, ValueError):
    """Bad input from the user. The message names the offending value and how to fix it."""


class TaskFileError(ConfigError):
    """A tasks file, or one of its entries, cannot be read as tasks."""


class UnknownTaskError(ConfigError, LookupError):
    """A task id or domain that does not exist; the message suggests the closest match."""


class UnsupportedTaskError(ConfigError):
    """A task whose setup or evaluator this backend cannot honour."""


class BackendUnavailableError(ConfigError):
    """A backend that is not built yet, or whose optional dependency is not installed."""


class ActionError(LegatoError, ValueError):
    """An action string that is not in the action space (unknown call, bad argument, not a literal).

    Raised by :func:`legato_gym.actions.parse_action`. It is the agent's mistake, not the desktop's: a desktop
    that receives such an action records it and leaves its state unchanged, as a real desktop does when the
    action's code fails inside it.
    """


class MissingDependencyError(LegatoError, ImportError):
    """An optional dependency is missing; the message names the extra that installs it."""


class StateError(LegatoError, RuntimeError):
    """A call made in the wrong lifecycle state (e.g. ``step`` before ``reset``)."""


class ConformanceError(LegatoError, AssertionError):
    """A desktop backend breaks the desktop contract; raised by :func:`legato_gym.conformance.check_desktop`.

    Attributes:
        failures: one line per failed check.
    """

    def __init__(self, message: str, failures: list[str] | None = None) -> None:
        super().__init__(message)
        self.failures = list(failures or [])


class AgentFault(LegatoError):
    """The agent's own actions destroyed or exhausted the desktop: the episode is the agent's failure.

    Raised by a desktop's ``act`` (or its grading) when the evidence says so (docs/reliability.md, "A desktop
    the agent destroys"): the desktop's cgroup hit its process or memory bound during the agent's actions,
    the in-desktop server was killed from inside the sandbox, or an answer overran its cap
    (:class:`ReplyTooLarge`) after the agent acted. :class:`~legato_gym.episode.Episode` ends the episode
    on it, graded 0, with the cause in ``info["agent_fault"]``; it is never retried as a desktop failure.

    Args:
        cause: one word: ``pids``, ``memory``, ``server_killed`` or ``reply_too_large``.
        message: what happened, with the evidence.
    """

    CAUSES = ("pids", "memory", "server_killed", "reply_too_large")

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause

    def __str__(self) -> str:
        return f"{self.cause}: {super().__str__()}"

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.cause, self.args[0]))


class DesktopError(LegatoError):
    """The desktop failed: an infrastructure failure, never counted against the agent.

    Args:
        message: what happened.
        env_id: index of the desktop in its vector env, when known.
        remote_traceback: the traceback text from the worker process, when there is one.
    """

    def __init__(self, message: str, *, env_id: int | None = None, remote_traceback: str | None = None):
        super().__init__(message)
        self.env_id = env_id
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        text = super().__str__()
        if self.env_id is not None:
            text = f"[env {self.env_id}] {text}"
        return text

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_desktop_error, (type(self), self.args, self.env_id, self.remote_traceback))


def _rebuild_desktop_error(
    cls: type[DesktopError], args: tuple[object, ...], env_id: int | None, tb: str | None
) -> DesktopError:
    err = cls(*args, env_id=env_id, remote_traceback=tb)  # type: ignore[arg-type]
    return err


class SetupError(DesktopError):
    """The task's setup failed on the desktop."""


class DesktopCrashed(DesktopError):
    """The desktop, or the worker process driving it, died."""


class ReplyTooLarge(DesktopError):
    """A desktop answered more bytes than its cap; the host stopped reading at the cap.

    A :class:`DesktopError` where nothing says who made the answer that large (a reset); during the agent's
    actions or the grading that follows them the desktop turns it into :class:`AgentFault`.
    """


class DeadlineExceeded(DesktopError, TimeoutError):
    """A phase (reset, act, wait, grading) overran its deadline."""
