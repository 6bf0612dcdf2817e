"""The fake backend's options: per-phase latencies and seeded faults, read from ``DesktopConfig.options``.

The option keys, their defaults and what each one does are drawn in :mod:`legato_gym.backends.fake`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from legato_gym.errors import ConfigError
from legato_gym.tasks import suggest

__all__ = ["CRASH_EXIT_CODE", "FAULT_PHASES", "LATENCY_PHASES", "FakeOptions", "Faults", "Latency"]

#: Exit status of a worker killed by an injected crash with ``crash_mode="exit"``.
CRASH_EXIT_CODE = 70

#: Phases that take a latency (``options.latency``).
LATENCY_PHASES = ("reset", "act", "settle", "evaluate")

#: Calls where an injected crash or hang may strike (``options.faults.phases``).
FAULT_PHASES = ("reset", "wait_after_reset", "observe", "act", "wait_before_eval", "evaluate")

_FAULT_KEYS = frozenset({"crash", "crash_mode", "hang", "hang_seconds", "setup", "phases"})


@dataclass(frozen=True)
class Latency:
    """A phase's latency: ``median * exp(sigma * N(0, 1))`` seconds, capped at ``max`` (fixed when sigma is 0)."""

    median: float = 0.0
    sigma: float = 0.0
    max: float | None = None

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
    crash_mode: Literal["raise", "exit"] = "raise"
    hang: float = 0.0
    hang_seconds: float = 3600.0
    setup: float = 0.0
    phases: frozenset[str] = frozenset({"reset", "act", "evaluate"})


@dataclass(frozen=True)
class FakeOptions:
    """The fake backend's options, read from ``DesktopConfig.options`` by :meth:`from_mapping`."""

    latency: Mapping[str, Latency] = field(default_factory=dict)
    faults: Faults = field(default_factory=Faults)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> FakeOptions:
        """Validate and read the options.

        Raises:
            ConfigError: an unknown key or a bad value; the message names the key path and the fix.
        """
        _only(options, {"latency", "faults"}, "options")
        latency_in = options.get("latency") or {}
        if not isinstance(latency_in, Mapping):
            raise ConfigError(f"options.latency={latency_in!r} must map phases ({', '.join(LATENCY_PHASES)}) to s")
        _only(latency_in, set(LATENCY_PHASES), "options.latency")
        latency = {phase: _latency(value, f"options.latency.{phase}") for phase, value in latency_in.items()}
        return cls(latency=latency, faults=_faults(options.get("faults") or {}))


def _faults(faults_in: Any) -> Faults:
    if not isinstance(faults_in, Mapping):
        raise ConfigError(f"options.faults={faults_in!r} must be an object such as {{'crash': 0.01}}")
    _only(faults_in, set(_FAULT_KEYS), "options.faults")
    rates = {name: _probability(faults_in.get(name, 0.0), f"options.faults.{name}") for name in ("crash", "hang")}
    setup = _probability(faults_in.get("setup", 0.0), "options.faults.setup")
    mode = faults_in.get("crash_mode", "raise")
    if mode not in ("raise", "exit"):
        raise ConfigError(f"options.faults.crash_mode={mode!r} must be 'raise' or 'exit'")
    hang_seconds = _seconds(faults_in.get("hang_seconds", 3600.0), "options.faults.hang_seconds")
    phases_in = faults_in.get("phases", ["reset", "act", "evaluate"])
    if isinstance(phases_in, str) or not isinstance(phases_in, Sequence):
        raise ConfigError(f"options.faults.phases={phases_in!r} must be a list such as ['act']")
    for phase in phases_in:
        if phase not in FAULT_PHASES:
            raise ConfigError(f"options.faults.phases: unknown phase {phase!r}; use {', '.join(FAULT_PHASES)}")
    return Faults(
        crash=rates["crash"],
        crash_mode="exit" if mode == "exit" else "raise",
        hang=rates["hang"],
        hang_seconds=hang_seconds,
        setup=setup,
        phases=frozenset(phases_in),
    )


def _only(mapping: Mapping[str, Any], allowed: set[str], where: str) -> None:
    known = sorted(allowed)
    for key in mapping:
        if key not in allowed:
            hint = suggest(str(key), known)
            raise ConfigError(f"{where}: unknown key {key!r}{hint} (known: {', '.join(known)})")


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or math.isinf(value):
        raise ConfigError(f"{where}={value!r} must be a finite number of seconds >= 0")
    return float(value)


def _probability(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"{where}={value!r} must be a probability between 0 and 1")
    return float(value)


def _latency(value: Any, where: str) -> Latency:
    if isinstance(value, Mapping):
        _only(value, {"median", "sigma", "max"}, where)
        cap = value.get("max")
        return Latency(
            median=_seconds(value.get("median", 0.0), f"{where}.median"),
            sigma=_seconds(value.get("sigma", 0.0), f"{where}.sigma"),
            max=None if cap is None else _seconds(cap, f"{where}.max"),
        )
    return Latency(median=_seconds(value, where))
