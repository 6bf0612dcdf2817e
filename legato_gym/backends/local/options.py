"""The local backend's options (:class:`LocalOptions`, ``DesktopConfig.options``) and its graders.

Give them typed, or as the equivalent mapping (a YAML or JSON config), read once by
:meth:`~legato_gym.options.BackendOptions.from_mapping`::

    DesktopConfig(options=LocalOptions(memory_mb=2048, grader="local"))
    DesktopConfig(options={"memory_mb": 2048, "grader": "local"})
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import ClassVar

from legato_gym.backends.local.sandbox import SYSTEM_PATHS
from legato_gym.backends.local.sandbox.shell import SESSIONS
from legato_gym.options import BackendOptions, invalid, rename_field, seconds

__all__ = ["GRADERS", "LocalOptions", "resolve_grader"]

#: The local backend's graders: desktop-env's own (``osworld``), the built-in one (``local``), or the first
#: where desktop-env imports, the second elsewhere (``auto``).
GRADERS = ("auto", "osworld", "local")


def resolve_grader(grader: str, python: str | None = None) -> str:
    """The grader a desktop run by ``python`` (default: this interpreter) uses for the option ``grader``.

    ``"auto"`` is ``"osworld"`` when that interpreter is desktop-env's (``legato osworld setup`` records it, or
    ``desktop_env`` imports here) and ``"local"`` otherwise; the others are themselves.

    Example::

        resolve_grader("auto")  # "local" in legato's own interpreter, "osworld" in desktop-env's
    """
    if grader != "auto":
        return grader
    here = python is None or os.path.realpath(python) == os.path.realpath(sys.executable)
    if here and importlib.util.find_spec("desktop_env") is not None:
        return "osworld"
    if python is not None:
        from legato_gym.desktopenv.venv import recorded_python

        recorded = recorded_python()
        if recorded is not None and os.path.realpath(recorded) == os.path.realpath(python):
            return "osworld"
    return "local"


@dataclass(frozen=True)
class LocalOptions(BackendOptions):
    """Options of the local backend (``DesktopConfig.options``).

    Attributes:
        memory_mb: memory bound of each desktop, in MiB: its processes and the files its apps write to
            memory (``/tmp``, the home).
        max_processes: bound on the processes (threads included) of each desktop.
        tmpfs_mb: size bound of each of a desktop's in-memory folders (home, ``/tmp``, ``/dev/shm``), in MiB.
        sandbox_python: interpreter run inside the sandbox for the server and for actions (``python``); it
            needs ``pyautogui`` (``pip install 'legatolabs[local]'``). Default: ``DesktopConfig.worker_python``
            or the current interpreter. ``python=`` is its old name, accepted for one release with a
            ``DeprecationWarning``.
        uid_first: when legato is root, each desktop runs as an unprivileged host uid of its own (its X
            server, window manager, apps and actions), leased from ``uid_first`` on; pick a range that no
            host user or subordinate-uid range uses.
        uid_count: how many uids the range has (at most this many desktops at once on the host).
        system_paths: host folders bound read-only into the sandbox for the apps (the default binds the
            system folders, not ``/opt``, ``/srv``, ``/home``, ``/root`` or a folder of your own).
        extra_paths: more host folders bound read-only at the same place (apps installed under ``/opt``).
        settle_s: the screen counts as settled after this long without a change.
        screen_watch: how the ready signal after an action sees the screen change. ``"damage"`` (the
            default): the desktop's server reads X DAMAGE events (:mod:`legato_gym.desktop_server.damage`)
            and counts the quiet period from when the focused app took the action's last input, so a screen
            that stayed still costs no wait beyond the action's own pause; where the server cannot (no
            DAMAGE extension, no python-xlib, the ``"exec"`` runner) the host compares frames instead.
            ``"frames"``: the host compares frames from the action's end on, as before (a 0.1 s wait at
            least). Both mean the same: no change, and the apps idle, for ``max(settle_s, 0.1)`` s.
        busy_s: the longest a ready signal waits for a screen, or apps, that keep changing (a playing video,
            an animation): after that the desktop is taken as it is, and the wait is reported not ready.
        poll_s: interval between screen checks.
        window_timeout: how long to wait for launched windows to map before giving up on that signal.
        kill_timeout: how long reset waits for the sandbox's processes and windows to be gone before it
            restarts the whole desktop instead.
        pyautogui_pause: ``pyautogui.PAUSE`` for actions. ``None`` (the default) keeps pyautogui's own 0.1 s
            after every call, as OSWorld's ``python -c`` does; 0 is the fast setting (the ready signal that
            follows every action does the waiting), at the cost of an action that relied on the pause (a click,
            then a sleep-free read of what it opened) behaving unlike on OSWorld's VM.
        sync_input: after every ``pyautogui`` call of an action (and every key it releases), wait until the
            focused app has taken the input, by two ``_NET_WM_PING`` round trips through its event loop
            (:mod:`legato_gym.desktop_server.input_sync`; the ``"fork"`` runner only). On by default: without
            it, LibreOffice runs shortcut and cursor keys that arrive with typed text after that text (it
            posts them to its own queue), so a one-action ``hotkey('ctrl', 'home'); press('down');
            typewrite(...)`` types in the wrong cell whenever Calc is slower than the keys (docs/backends.md).
        action_runner: ``"fork"`` (default) runs each action in a fresh child of a fork server inside the
            sandbox that has already imported pyautogui; ``"exec"`` runs a fresh ``python -c`` through
            ``/execute``, as OSWorld's ``PythonController`` does (slower: an interpreter start and the
            import, about 110 ms, per action). Both kill an action (and what it started, with ``"fork"``)
            that overruns ``timeouts.act``.
        state_dir: where desktops keep their private files (default: the system temp dir).
        grader: ``"osworld"`` runs setup, post-config and grading with desktop-env's own
            ``SetupController``, getters and metrics (:mod:`legato_gym.desktopenv.session`) over a
            loopback TCP forwarder into the sandbox; the desktop must then run in desktop-env's interpreter
            (``DesktopConfig.worker_python`` from ``legato osworld setup``). ``"local"`` grades with
            :mod:`.evaluators` (OSWorld's semantics, re-implemented for a few getters and metrics, no extra
            interpreter). ``"auto"`` (the default) is ``"osworld"`` where desktop-env imports and ``"local"``
            elsewhere (:func:`resolve_grader`); ``LocalDesktop.grader`` says which one grades.
        session: the desktop's session. ``"lookalike"`` (the default): xfwm4 drawing mutter's title bars
            (openbox where it is not installed) with a top bar and a dock of legato's own that look and act as
            OSWorld's VM's GNOME Shell where an agent sees or clicks (top bar rows 0-26, dock columns 0-69 with
            the VM's launchers, maximized windows in the work area beside them, an overview with the app grid;
            :mod:`.sandbox.lookalike`, :mod:`.sandbox.xfwm`), at about 1.4x the memory
            of openbox alone. ``"gnome"``: GNOME Shell itself with the Ubuntu dock and the Yaru theme
            (:mod:`.sandbox.shell`; Debian ``gnome-shell gnome-shell-extension-dashtodock yaru-theme-*``;
            about 3.7x). ``"openbox"``: the window manager alone on a black root window, maximized windows
            filling the screen (docs/backends.md).
        download_cache: with ``grader="osworld"``, the host cache for setup downloads, shared by all
            desktops and kept across runs (default ``~/.cache/legato/osworld-downloads``).
        prestart: start each desktop's next episode ahead (:mod:`.prestart`, on by default): a whole fresh
            desktop, X server included, is built in the background once an episode's setup is ready (from a
            desktop's second episode on), and the next reset switches to it; after a task that opened
            LibreOffice, it has a LibreOffice waiting with no window, to which the next such task's setup
            hands its document. Once a desktop has been given the same task twice in a row, the next
            desktop is set up for that task too, and a reset of it again is only the switch. Costs a second
            desktop's memory (PSS about 85 MiB, about 130 MiB with LibreOffice waiting, what the task's apps
            take when set up ahead) and its start's CPU during the episode. Off (or ``fast_reset`` off):
            every reset is made in place.
        file_cache: the persistent, URL-keyed cache of OSWorld's task files (:mod:`.file_cache`) that setup
            downloads and ``cloud_file`` gold files are read from first, shared by all desktops and never
            wiped by a reset (default ``$LEGATO_FILE_CACHE`` or ``~/.cache/legato/files``).
        server_mode: how the in-desktop server answers (:mod:`legato_gym.desktop_server`). ``"legato"`` (the
            default): OSWorld's protocol without its faults. ``"osworld"``: also what OSWorld's real server
            does that a client sees (``docs/osworld.md``, "The stand-in VM's server mode"): it leaks an X
            connection per ``/screenshot`` and dies once X is full, answers bodies of the wrong kind with
            Flask's HTML 415/400 pages and unhandled errors with its HTML 500 page. The osworld backend's
            stand-in VMs use it to meet what only the real VM does.
        pointer: paste the pointer into screenshots where and as OSWorld's server does (its image's top-left
            corner at the pointer's position): the observations and the server's ``/screenshot``.
    """

    backend: ClassVar[str] = "local"

    memory_mb: int = 4096
    max_processes: int = 1024
    tmpfs_mb: int = 2048
    sandbox_python: str | None = None
    uid_first: int = 1_640_000
    uid_count: int = 4096
    system_paths: tuple[str, ...] = SYSTEM_PATHS
    extra_paths: tuple[str, ...] = ()
    settle_s: float = 0.1
    screen_watch: str = "damage"
    busy_s: float = 3.0
    poll_s: float = 0.02
    window_timeout: float = 10.0
    kill_timeout: float = 5.0
    pyautogui_pause: float | None = None
    sync_input: bool = True
    action_runner: str = "fork"
    state_dir: str | None = None
    grader: str = "auto"
    download_cache: str | None = None
    file_cache: str | None = None
    prestart: bool = True
    server_mode: str = "legato"
    pointer: bool = True
    session: str = "lookalike"

    #: Old field names still read (for one release, with a ``DeprecationWarning``): old name -> new name.
    renamed_fields: ClassVar[dict[str, str]] = {"python": "sandbox_python"}

    def __post_init__(self) -> None:
        for name, least in (("memory_mb", 64), ("max_processes", 16), ("tmpfs_mb", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                invalid(self, name, f"must be an integer >= {least}")
        if self.action_runner not in ("fork", "exec"):
            invalid(self, "action_runner", "choose 'fork' or 'exec'")
        if self.server_mode not in ("legato", "osworld"):
            invalid(self, "server_mode", "choose 'legato' or 'osworld' (OSWorld's real server, faults included)")
        if self.screen_watch not in ("damage", "frames"):
            invalid(self, "screen_watch", "choose 'damage' (X DAMAGE in the desktop) or 'frames' (compare frames)")
        if self.session not in SESSIONS:
            invalid(self, "session", f"choose {', '.join(map(repr, SESSIONS))}")
        if self.grader not in GRADERS:
            invalid(self, "grader", f"choose {', '.join(map(repr, GRADERS))}")
        seconds(self, "settle_s", "busy_s", "poll_s", "window_timeout", "kill_timeout", positive=True)
        pause = self.pyautogui_pause
        if pause is not None and (isinstance(pause, bool) or not isinstance(pause, (int, float)) or not pause >= 0):
            invalid(self, "pyautogui_pause", "give seconds >= 0, or None for pyautogui's own 0.1 s as in OSWorld")


rename_field(LocalOptions, "python", "sandbox_python")
