"""The osworld backend's first-boot processes: taken once the VM's process list holds still."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from legato_gym.backends.osworld import desktop as osworld_desktop
from legato_gym.backends.osworld.options import OSWorldOptions


class _Listings:
    """Stands in for the VM's process listing: one answer a call, the last one repeated."""

    def __init__(self, *answers: list[int]) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self, keep: list[int], *, kill: bool) -> dict[str, Any]:
        assert keep == [] and not kill
        self.calls += 1
        return {"pids": self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]}


def _settled(listings: _Listings, kill_timeout: float = 5.0) -> list[int]:
    vm = SimpleNamespace(_procs=listings, options=OSWorldOptions(kill_timeout=kill_timeout))
    return osworld_desktop._VMDesktop._settled_pids(vm, time.monotonic() + 60)  # type: ignore[arg-type]


def test_a_helper_that_exits_as_the_desktop_comes_up_is_not_a_first_boot_process() -> None:
    # pid 39 (a `which` run by an import) is there at the first listing only; 40 starts and stays.
    listings = _Listings([5, 9, 31, 39], [5, 9, 31, 40], [5, 9, 31, 40])

    assert _settled(listings) == [5, 9, 31, 40]
    assert listings.calls == 3


def test_a_still_desktop_is_listed_twice_only() -> None:
    listings = _Listings([5, 9, 31])

    assert _settled(listings) == [5, 9, 31]
    assert listings.calls == 2
