"""Input that reaches apps in order: after each pyautogui call of an action, wait until the focused app took it.

Why: LibreOffice runs a shortcut key (Calc's ctrl+home and cursor keys, accelerators) *asynchronously*: its
key handler posts the command as a user event that runs after the input already queued, while typed text is
handled at once. An action that sends ``hotkey('ctrl', 'home'); press('down', presses=5); typewrite('=SUM(...)')``
faster than Calc handles it (pyautogui with ``PAUSE = 0``, or a loaded machine where Calc does not get the CPU
within pyautogui's 0.1 s pause) has its events queued together, and Calc types the formula before it moves:
the formula lands in A1. XTest delivers events in order; the reordering is in the app.

The cure is a round trip through the app's own event loop: EWMH's ``_NET_WM_PING``. The app answers a
ping when its main loop reads it, so after the key events before it (the X server delivers a client's
events in order); a second ping, sent once the first was answered, is read after the commands that those
keys posted have run. :func:`install` makes pyautogui wait so after each command key it releases (a named
key, or a key with ctrl, alt or super held: :func:`is_text`) and at the end of every public call (in
``_handlePause``, before its ``PAUSE`` sleep), in each action's process (see :mod:`.actions`). Typed text
is not waited for: apps keep it in order. pyautogui's semantics (``PAUSE``, ``FAILSAFE``) are untouched.
An app that does not answer pings (no ``_NET_WM_PING`` in its ``WM_PROTOCOLS``), or not within
:data:`PING_TIMEOUT_S`, is not waited for further: a window that let a ping time out is not pinged again by the
same action (VLC's Qt window lists ``_NET_WM_PING`` but never answers; each of its command keys and calls
waited the whole timeout, 45 s for ``press(['tab'] * 8)``).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import itertools
import select
import sys
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "COMMAND_MODIFIERS",
    "PING_ROUNDS",
    "PING_TIMEOUT_S",
    "install",
    "install_on_import",
    "is_text",
    "wait_input_taken",
]

#: Pings sent one after the other: the first is answered after the queued input, the second after what that
#: input posted to the app's own queue.
PING_ROUNDS = 2
#: The longest one call waits for the focused app (a hung app is not waited for longer).
PING_TIMEOUT_S = 5.0

_serial = itertools.count(1)


def _focused_window(display: Any) -> int | None:
    """The active top-level window (``_NET_ACTIVE_WINDOW``, set by the window manager) if it answers pings."""
    root = display.screen().root
    active = root.get_full_property(display.intern_atom("_NET_ACTIVE_WINDOW"), 0)
    if active is None or not active.value or not active.value[0]:
        return None
    window_id = int(active.value[0])
    window = display.create_resource_object("window", window_id)
    protocols = window.get_full_property(display.intern_atom("WM_PROTOCOLS"), 0)
    if protocols is None or display.intern_atom("_NET_WM_PING") not in list(protocols.value):
        return None
    return window_id


def wait_input_taken(
    display: Any, rounds: int = PING_ROUNDS, timeout: float = PING_TIMEOUT_S, unanswered: set[int] | None = None
) -> bool:
    """Ping the focused app ``rounds`` times, each after the previous answer; whether every ping was answered.

    ``display`` is a python-xlib ``Display`` (its own connection: the root's SubstructureNotify events it
    selects to see the answers are read here and dropped). ``unanswered``: windows that let a ping time out
    before, not pinged again; a window whose ping times out here is added to it.
    """
    from Xlib import X  # type: ignore[import-untyped]
    from Xlib.protocol import event as xevent  # type: ignore[import-untyped]

    deadline = time.monotonic() + timeout
    try:
        window_id = _focused_window(display)
    except Exception:  # a window that went away between the lookups: nothing to wait for
        return False
    if window_id is None or (unanswered is not None and window_id in unanswered):
        return False
    root = display.screen().root
    root.change_attributes(event_mask=X.SubstructureNotifyMask)
    wm_protocols = display.intern_atom("WM_PROTOCOLS")
    ping = display.intern_atom("_NET_WM_PING")
    window = display.create_resource_object("window", window_id)
    try:
        for _ in range(rounds):
            stamp = next(_serial) & 0x7FFFFFFF
            message = xevent.ClientMessage(
                window=window, client_type=wm_protocols, data=(32, [ping, stamp, window_id, 0, 0])
            )
            window.send_event(message, event_mask=0)
            display.flush()
            if not _await_pong(display, root.id, ping, stamp, window_id, deadline):
                if unanswered is not None:
                    unanswered.add(window_id)
                return False
        return True
    finally:
        with contextlib.suppress(Exception):
            root.change_attributes(event_mask=X.NoEventMask)
            display.flush()


def _await_pong(display: Any, root_id: int, ping: int, stamp: int, window_id: int, deadline: float) -> bool:
    from Xlib import X  # type: ignore[import-untyped]

    while True:
        while display.pending_events():
            event = display.next_event()
            if event.type != X.ClientMessage or event.window.id != root_id:
                continue
            values = event.data[1]
            if values[0] == ping and values[1] == stamp and values[2] == window_id:
                return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        select.select([display.fileno()], [], [], remaining)
        display.pending_events()  # reads what arrived into the queue


#: Keys that, held, make the keys pressed with them a command (a shortcut) rather than text.
COMMAND_MODIFIERS = frozenset(
    {"ctrl", "ctrlleft", "ctrlright", "alt", "altleft", "altright", "win", "winleft", "winright", "super", "command"}
)


def is_text(key: str, held: frozenset[str] | set[str]) -> bool:
    """Whether releasing ``key`` (a pyautogui key name) with ``held`` keys down typed text, not a command.

    Apps handle typed text in order with other text; what may run late is a command key (a named key such
    as ``down``, ``enter`` or ``tab``, or any key with ctrl, alt or super held), so only those are waited for.
    """
    return len(key) == 1 and key.isprintable() and not (held & COMMAND_MODIFIERS)


def install(
    pyautogui: types.ModuleType,
    connect: Callable[[], Any] | None = None,
    on_taken: Callable[[], None] | None = None,
) -> None:
    """Make this ``pyautogui`` module wait until the focused app took the input of every call and command key.

    After each public call (before its ``PAUSE`` sleep), and after each command key is released (see
    :func:`is_text`), the focused app is pinged (:func:`wait_input_taken`). ``connect`` opens the X
    connection the pings go on (default: a new python-xlib ``Display``, opened at the first wait).
    ``on_taken`` is called after each of those waits (answered or not): the ready signal after the action
    counts its quiet period from the last one (:mod:`.damage`). A window that let a ping time out is not
    waited for again by this ``pyautogui``.
    """
    original_pause = pyautogui._handlePause  # type: ignore[attr-defined]
    platform = getattr(pyautogui, "platformModule", None)
    original_key_down = getattr(platform, "_keyDown", None)
    original_key_up = getattr(platform, "_keyUp", None)
    state: dict[str, Any] = {}
    held: set[str] = set()
    unanswered: set[int] = set()

    def sync() -> None:
        with contextlib.suppress(Exception):  # no X, a closed display: pyautogui's own behaviour stays
            if "display" not in state:
                state["display"] = (connect or _connect)()
            wait_input_taken(state["display"], unanswered=unanswered)
        if on_taken is not None:
            with contextlib.suppress(Exception):
                on_taken()

    def handle_pause(_pause: bool) -> None:
        if _pause:
            sync()
        original_pause(_pause)

    def key_down(key: str) -> None:
        assert original_key_down is not None
        original_key_down(key)
        held.add(key)

    def key_up(key: str) -> None:
        assert original_key_up is not None
        original_key_up(key)
        held.discard(key)
        if not is_text(key, held):
            sync()

    pyautogui._handlePause = handle_pause  # type: ignore[attr-defined]
    if platform is not None and original_key_down is not None and original_key_up is not None:
        platform._keyDown = key_down
        platform._keyUp = key_up


def _connect() -> Any:
    from Xlib import display  # type: ignore[import-untyped]

    return display.Display()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``hook(module)`` right after the module ``name`` is executed by an import."""

    def __init__(self, name: str, hook: Callable[[types.ModuleType], None]) -> None:
        self.name = name
        self.hook = hook

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        hook = self.hook

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: types.ModuleType) -> None:
                loader.exec_module(module)
                hook(module)

        spec.loader = _Loader()
        return spec


def install_on_import(on_taken: Callable[[], None] | None = None) -> None:
    """Install :func:`install` on ``pyautogui`` when this process imports it (or now, if it already has)."""

    def hook(module: types.ModuleType) -> None:
        install(module, on_taken=on_taken)

    module = sys.modules.get("pyautogui")
    if module is not None:
        hook(module)
        return
    sys.meta_path.insert(0, _AfterImport("pyautogui", hook))
