"""The episode state of one desktop in a vector env: a :class:`Phase` and the one method that changes it.

Every change of a desktop's phase goes through :meth:`EpisodeState.advance`, which looks the change up in
:data:`TRANSITIONS`; the worker pool reports what happened (:class:`Event`), the public surface asks
:meth:`EpisodeState.require_steppable` before it sends a step. Autoreset is disabled, so an ended episode
stays ended until the caller resets it.
"""

from __future__ import annotations

import enum

from legato_gym.errors import DesktopError, StateError

__all__ = ["TRANSITIONS", "EpisodeState", "Event", "Phase"]


class Phase(enum.Enum):
    """Where a desktop's episode is."""

    NEW = "new"  #: needs a reset: never reset, or its desktop was replaced
    RUNNING = "running"  #: can step
    ENDED = "ended"  #: terminated, truncated or failed: needs a reset
    #: it was running when its desktop died with no call of the episode in flight (its caller was waiting on
    #: a model, say): the next step or truncate fails with that error, not with a :class:`StateError`
    LOST = "lost"


class Event(enum.Enum):
    """What happened to a desktop, as the worker pool reports it."""

    RESET_SENT = "reset sent"  #: a reset was asked for: a held loss is dropped
    RESET_DONE = "reset done"  #: the reset succeeded
    STEPPED = "stepped"  #: a step succeeded and the episode goes on
    ENDED = "ended"  #: a step terminated or truncated the episode, or a truncate graded it
    FAILED = "failed"  #: a reset, step or truncate failed; the desktop's worker is still up
    REPLACED = "replaced"  #: the desktop's worker is gone while one of the episode's calls was in flight
    LOST_IDLE = "lost idle"  #: the desktop's worker is gone while none of the episode's calls was in flight
    LOSS_TAKEN = "loss taken"  #: a step or truncate took the held loss (and fails with it)
    START_FAILED = "start failed"  #: no worker could be started for the desktop (a held loss stays held)


#: ``(phase, event) -> next phase``; a pair not listed leaves the phase as it is.
TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    (Phase.LOST, Event.RESET_SENT): Phase.NEW,
    **{(phase, Event.RESET_DONE): Phase.RUNNING for phase in Phase},
    **{(phase, Event.ENDED): Phase.ENDED for phase in Phase},
    **{(phase, Event.FAILED): Phase.ENDED for phase in Phase},
    **{(phase, Event.REPLACED): Phase.NEW for phase in Phase},
    (Phase.RUNNING, Event.LOST_IDLE): Phase.LOST,
    (Phase.NEW, Event.LOST_IDLE): Phase.NEW,
    (Phase.ENDED, Event.LOST_IDLE): Phase.NEW,
    (Phase.LOST, Event.LOSS_TAKEN): Phase.NEW,
    (Phase.RUNNING, Event.START_FAILED): Phase.NEW,
    (Phase.ENDED, Event.START_FAILED): Phase.NEW,
}


class EpisodeState:
    """One desktop's :class:`Phase`, and the error a :attr:`Phase.LOST` episode holds for its next call.

    Example::

        >>> state = EpisodeState(0)
        >>> state.advance(Event.RESET_DONE)
        >>> state.phase
        <Phase.RUNNING: 'running'>
    """

    def __init__(self, env_id: int) -> None:
        self.env_id = env_id
        self.phase = Phase.NEW
        self.lost: DesktopError | None = None

    def advance(self, event: Event, error: DesktopError | None = None) -> DesktopError | None:
        """Apply ``event``; the one place a desktop's phase changes.

        Args:
            event: what happened.
            error: for :attr:`Event.LOST_IDLE`, the failure a running episode now holds.

        Returns:
            For :attr:`Event.LOSS_TAKEN`, the held error (``None`` when the episode holds none).
        """
        before = self.phase
        self.phase = TRANSITIONS.get((before, event), before)
        taken = None
        if self.phase is Phase.LOST:
            if before is not Phase.LOST:
                self.lost = error
        else:
            taken, self.lost = self.lost, None
        return taken if event is Event.LOSS_TAKEN else None

    @property
    def steppable(self) -> bool:
        """Whether a step or truncate may be sent (a :attr:`Phase.LOST` one fails with the held error)."""
        return self.phase in (Phase.RUNNING, Phase.LOST)

    def require_steppable(self, call: str) -> None:
        """Raise unless a step or truncate may be sent.

        Raises:
            StateError: the episode needs a reset; the message says why and which call makes one.
        """
        if self.steppable:
            return
        why = "its episode ended" if self.phase is Phase.ENDED else "it was not reset (or its desktop was replaced)"
        raise StateError(
            f"{call}: env {self.env_id} needs a reset because {why}; "
            "call reset(options={'reset_mask': mask}), send_reset([env_id]) or areset(env_id, task)"
        )
