"""Seeded latencies and faults at run time: what the fake desktop's options inject into each call."""

from __future__ import annotations

import logging
import os
import threading

import numpy as np

from legato_gym.backends.fake.options import CRASH_EXIT_CODE, FakeOptions, Latency
from legato_gym.contract import Waited
from legato_gym.errors import AgentFault, DeadlineExceeded, DesktopCrashed

__all__ = ["Injector"]

logger = logging.getLogger(__name__)


class Injector:
    """Spends the configured latencies and strikes the configured faults, from two seeded streams.

    Latencies and faults draw from separate generators, so enabling one never shifts the other; every call
    draws the same count whatever the options, so the same seed and calls give the same latencies and faults.

    Args:
        options: the fake's latencies and faults.
        seed: seeds both streams; ``None`` for fresh entropy.
    """

    def __init__(self, options: FakeOptions, seed: int | None) -> None:
        self.options = options
        self._latency_rng = np.random.default_rng(None if seed is None else [seed, 1])
        self._fault_rng = np.random.default_rng(None if seed is None else [seed, 2])
        self._wake = threading.Event()

    def wake(self) -> None:
        """End the wait in progress and every later one (the desktop is closing)."""
        self._wake.set()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less if :meth:`wake` is called."""
        if seconds > 0:
            self._wake.wait(seconds)

    def spend(self, phase: str, deadline: float) -> float:
        """Spend the phase's latency.

        Raises:
            DeadlineExceeded: the latency is over ``deadline`` (raised once the deadline has passed).
        """
        latency = self.options.latency.get(phase, Latency()).sample(self._latency_rng)
        if latency > deadline:
            self.sleep(deadline)
            raise DeadlineExceeded(
                f"fake {phase} took {latency:.1f}s, over its {deadline:.1f}s deadline (options.latency.{phase}; "
                "raise DesktopConfig.timeouts to allow it)"
            )
        self.sleep(latency)
        return latency

    def settle(self, deadline: float) -> Waited:
        """A ready-signal wait: the settle latency, ``ready=False`` when it is over ``deadline``."""
        latency = self.options.latency.get("settle", Latency()).sample(self._latency_rng)
        self.sleep(min(latency, deadline))
        return Waited(seconds=min(latency, deadline), ready=latency <= deadline)

    def strike(self, phase: str) -> None:
        """Crash or hang if the dice say so, for a phase listed in ``options.faults.phases``.

        Raises:
            DesktopCrashed: an injected crash (with ``crash_mode="exit"`` the process exits instead).
            AgentFault: an injected crash with ``crash_mode="agent"``: the agent destroyed the desktop.
            DeadlineExceeded: an injected hang, after ``hang_seconds``.
        """
        faults = self.options.faults
        if phase not in faults.phases:
            return
        crash, hang = float(self._fault_rng.random()), float(self._fault_rng.random())
        if crash < faults.crash:
            if faults.crash_mode == "exit":
                logger.error("fake desktop: injected crash during %s, exiting the process", phase)
                os._exit(CRASH_EXIT_CODE)
            if faults.crash_mode == "agent":  # as a local desktop reports a fork bomb that hit its bound
                raise AgentFault(
                    "pids", f"the agent's actions hit the desktop's bounds during {phase} (injected fault)"
                )
            raise DesktopCrashed(f"the fake desktop crashed during {phase} (injected fault, options.faults.crash)")
        if hang < faults.hang:
            logger.warning("fake desktop: injected hang during %s for %.0fs", phase, faults.hang_seconds)
            self.sleep(faults.hang_seconds)
            raise DeadlineExceeded(
                f"the fake desktop hung for {faults.hang_seconds:.0f}s during {phase} (injected fault, "
                "options.faults.hang)"
            )

    def setup_fails(self) -> bool:
        """Draw whether this reset's setup fails (``options.faults.setup``); one draw per reset."""
        return float(self._fault_rng.random()) < self.options.faults.setup
