"""One batch's own knobs: :class:`CollectOptions`, the owner of their defaults."""

from __future__ import annotations

from dataclasses import dataclass

from legato_gym import ConfigError

__all__ = ["CollectOptions"]


@dataclass(frozen=True)
class CollectOptions:
    """The knobs of one batch, and the one place that holds their defaults.

    Each field is the :func:`collect` argument of the same name (described there), whose default it is; the
    CLI's ``legato rl collect`` options default to them too.
    """

    desktops: int = 4
    group: int = 4
    oversample: float = 0.0
    max_steps: int = 15
    rollout_timeout: float | None = None
    env_retries: int = 1
    image_max: int = 20
    backend: str = "osworld"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.desktops < 1:
            raise ConfigError(f"desktops={self.desktops!r}: give at least 1 desktop (e.g. --desktops 4)")
        if self.max_steps < 1:
            raise ConfigError(f"max_steps={self.max_steps!r} must be >= 1 (e.g. --max-steps 15)")
        if self.env_retries < 0:
            raise ConfigError(f"env_retries={self.env_retries!r} must be >= 0")
        if self.rollout_timeout is not None and not self.rollout_timeout > 0:
            raise ConfigError(f"rollout_timeout={self.rollout_timeout!r} must be a positive number of seconds")
        if self.image_max < 1:
            raise ConfigError(f"image_max={self.image_max!r} must be >= 1 (screenshots kept in the prompt)")
