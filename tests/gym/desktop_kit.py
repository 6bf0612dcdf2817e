"""Small helpers the desktop tests and their scenario scripts share (no imports but the standard library's, so
that a scenario run under desktop-env's interpreter can use them too)."""

from __future__ import annotations

import time
from typing import Any


def wait_for(condition: object, seconds: float = 20) -> bool:
    """Poll ``condition()`` until it holds (True) or ``seconds`` pass (False)."""
    assert callable(condition)
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def play(desktop: Any, task: Any, actions: list[str]) -> float:
    """One episode of ``task`` on ``desktop``: reset, its ready wait, ``actions``, the wait before grading, the
    grade."""
    desktop.reset(task)
    desktop.wait_after_reset()
    for action in actions:
        desktop.act(action)
    desktop.wait_before_eval()
    return float(desktop.evaluate())


def active_window(desktop: Any) -> int:
    """The root's ``_NET_ACTIVE_WINDOW`` on ``desktop``'s display (0: none)."""
    from Xlib import X  # type: ignore[import-untyped]

    from legato_gym.backends.local.xstate import open_display

    screen = open_display(desktop.display.name)
    try:
        root = screen.screen().root
        active = root.get_full_property(screen.intern_atom("_NET_ACTIVE_WINDOW"), X.AnyPropertyType)
        return int(active.value[0]) if active is not None and len(active.value) else 0
    finally:
        screen.close()
