"""check_desktop: the fake backend conforms; a broken backend gets every failure listed."""

from __future__ import annotations

import numpy as np
import pytest

from legato_gym import DesktopConfig, check_desktop
from legato_gym.backends.fake import FakeDesktop, default_tasks
from legato_gym.contract import ActResult, Observation, Task, Waited
from legato_gym.errors import ConformanceError


def test_fake_desktop_conforms() -> None:
    passed = check_desktop(lambda: FakeDesktop(DesktopConfig(screen=(320, 240))))
    assert "episode 1: evaluate() after FAIL == 1.0" in passed
    assert "episode 2: evaluate() after DONE == 0.0" in passed
    assert "observe() before reset()" in passed
    assert "observe() after close()" in passed


def test_fake_desktop_conforms_on_its_own_task() -> None:
    task = default_tasks()[0]
    passed = check_desktop(lambda: FakeDesktop(DesktopConfig(screen=(320, 240))), task)
    assert "episode 1: evaluate() after FAIL" in passed


class BrokenDesktop:
    """Keeps no lifecycle, returns a wrong-sized screenshot, grades out of range, fails its second close."""

    def __init__(self) -> None:
        self.closes = 0
        self.shot = np.zeros((10, 10, 3), dtype=np.float32)

    @property
    def screen_size(self) -> tuple[int, int]:
        return (64, 48)

    def reset(self, task: Task) -> str | None:
        return 3  # type: ignore[return-value]  # not a word for the reset's kind

    def wait_after_reset(self) -> Waited:
        return Waited(seconds=-1.0, ready=True)

    def observe(self) -> Observation:
        return Observation(screenshot=self.shot, instruction="something else")  # type: ignore[arg-type]

    def act(self, action: str) -> ActResult:
        return ActResult(act_s=0.0)

    def wait_before_eval(self) -> Waited:
        return Waited(seconds=0.0, ready=True)

    def evaluate(self) -> float:
        return 2.0

    def close(self) -> None:
        self.closes += 1
        if self.closes > 1:
            raise RuntimeError("already closed")


def test_broken_desktop_gets_every_failure_listed() -> None:
    with pytest.raises(ConformanceError) as info:
        check_desktop(BrokenDesktop)
    message = str(info.value)
    failures = info.value.failures
    for expected in (
        "episode 1: reset(task) returns its reset kind (a word) or None",
        "episode 1: wait_after_reset().seconds",
        "episode 1: observe().screenshot.shape",
        "episode 1: observe().screenshot.dtype",
        "episode 1: observe().instruction",
        "episode 1: observe() returns a new array each call",
        "episode 1: evaluate() after FAIL",
        "close() again (idempotent)",
        "observe() after close()",
        "observe() before reset()",
        "evaluate() before reset()",
    ):
        assert any(f.startswith(expected) for f in failures), expected
        assert expected in message
    assert "(48, 64, 3)" in message


def test_factory_that_raises() -> None:
    def factory() -> FakeDesktop:
        raise OSError("no display")

    with pytest.raises(ConformanceError, match=r"factory.*no display"):
        check_desktop(factory)
