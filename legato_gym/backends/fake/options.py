"""The fake backend's options (:class:`FakeOptions`, ``DesktopConfig.options``): per-phase latencies and
seeded faults.

Give them typed, or as the equivalent mapping (a YAML or JSON config), read once by
:meth:`~legato_gym.options.BackendOptions.from_mapping`::

    DesktopConfig(options=FakeOptions(latency={"act": Latency(0.2, sigma=0.5)}, faults=Faults(crash=0.01)))
    DesktopConfig(options={"latency": {"act": {"median": 0.2, "sigma": 0.5}}, "faults": {"crash": 0.01}})

The fields, their defaults and what each one does are drawn in :mod:`legato_gym.backends.fake`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np

from legato_gym.options import BackendOptions, invalid, seconds
from legato_gym.suggest import suggest

__all__ = ["CRASH_EXIT_CODE", "FAULT_PHASES", "LATENCY_PHASES", "FakeOptions", "Faults", "Latency"]

#: Exit status of a worker killed by an injected crash with ``crash_mode="exit"``.
CRASH_EXIT_CODE = 70

#: Phases that take a latency (``FakeOptions.latency``).
LATENCY_PHASES = ("reset", "act", "settle", "evaluate")

#: Calls where an injected crash or hang may strike (``Faults.phases``).
FAULT_PHASES = ("reset", "wait_after_reset", "observe", "act", "wait_before_eval", "evaluate")


@dataclass(frozen=True)
class Latency:
    """A phase's latency: ``median * exp(sigma * N(0, 1))`` seconds, capped at ``max`` (fixed when sigma is 0).

    In a mapping, a plain number is a fixed latency (``{"act": 0.2}``).
    """

    median: float = 0.0
    sigma: float = 0.0
    max: float | None = None

    def __post_init__(self) -> None:
        seconds(self, "median", "sigma", *(("max",) if self.max is not None else ()))

    @classmethod
    def from_scalar(cls, value: object) -> Latency:
        """A fixed latency of ``value`` seconds (what a plain number means in a mapping)."""
        return cls(median=value)  # type: ignore[arg-type]  # __post_init__ checks it

    def sample(self, rng: np.random.Generator) -> float:
        """Draw one latency in seconds (always draws once, so the stream stays aligned across settings)."""
        z = float(rng.standard_normal())
        if self.median <= 0:
            return 0.0
        value = self.median * math.exp(self.sigma * z)
        return min(value, self.max) if self.max is not None else value


@dataclass(frozen=True)
class Faults:
    """Seeded fault injection; see :mod:`legato_gym.backends.fake` for each field."""

    crash: float = 0.0
    crash_mode: Literal["raise", "exit", "agent"] = "raise"
    hang: float = 0.0
    hang_seconds: float = 3600.0
    setup: float = 0.0
    phases: frozenset[str] = frozenset({"reset", "act", "evaluate"})

    def __post_init__(self) -> None:
        for name in ("crash", "hang", "setup"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                invalid(self, name, "must be a probability between 0 and 1")
        if self.crash_mode not in ("raise", "exit", "agent"):
            invalid(self, "crash_mode", "must be 'raise', 'exit' or 'agent'")
        seconds(self, "hang_seconds")
        if isinstance(self.phases, str):
            invalid(self, "phases", "must be a set of phases such as frozenset({'act'})")
        for phase in self.phases:
            if phase not in FAULT_PHASES:
                invalid(self, "phases", f"unknown phase {phase!r}; use {', '.join(FAULT_PHASES)}")


@dataclass(frozen=True)
class FakeOptions(BackendOptions):
    """The fake backend's options (``DesktopConfig.options``); all optional: no latency and no faults.

    Attributes:
        latency: seconds per phase (:data:`LATENCY_PHASES`), fixed or lognormal.
        faults: seeded crashes, hangs and setup failures.
    """

    backend: ClassVar[str] = "fake"

    latency: Mapping[str, Latency] = field(default_factory=dict)
    faults: Faults = field(default_factory=Faults)

    def __post_init__(self) -> None:
        for phase in self.latency:
            if phase not in LATENCY_PHASES:
                hint = suggest(str(phase), LATENCY_PHASES)
                invalid(self, "latency", f"unknown key {phase!r}{hint} (known: {', '.join(LATENCY_PHASES)})")
