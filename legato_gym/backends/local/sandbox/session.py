"""What runs inside a sandbox, in order: the command its entry shell runs, and the environment it runs in.

The entry (:func:`entry_command`) starts the session bus and AT-SPI's accessibility bus (where
installed), the window manager (restarted if it exits), unpacks the home baseline, waits for openbox,
then starts the port relay and replaces itself with the in-desktop server on the listening socket the host passed
in. When legato is root it first sets the rlimits and drops to the desktop's own uid (:func:`.identity.drop_to`);
without root the sandbox's pid 1 runs it (:mod:`legato_gym.desktop_server.supervise`). Either way a part of the
sandbox the agent cannot reach outlives the server and says how it ended (:data:`SERVER_ENDED`).
"""

from __future__ import annotations

import functools
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from legato_gym.backends.local import apps
from legato_gym.backends.local.sandbox.identity import drop_to
from legato_gym.backends.local.sandbox.shell import prelude, session_environment, wm_command
from legato_gym.backends.local.sandbox.spec import Inside, SandboxSpec
from legato_gym.desktop_server.atspi import ATSPI_PYTHON

__all__ = [
    "ACCESSIBILITY_ON",
    "ATSPI_PYTHON",
    "DEVTOOLS_PORT",
    "SERVER_ENDED",
    "SESSION_BUS",
    "SESSION_BUS_DIR",
    "VLC_HTTP_PORT",
    "accessibility_bus",
    "atspi_installed",
    "atspi_readable",
    "entry_command",
    "environment",
]

#: The sandbox's exit status when its server ended while the part of the sandbox the agent cannot reach lived
#: (the root shell with root; the sandbox's pid 1 without): the server was killed or exited from inside the
#: sandbox, not by the host (:meth:`.Sandbox.server_ended`).
SERVER_ENDED = 86
#: Chrome's DevTools port inside the desktop (OSWorld's VM: Chrome on 1337, socat from 9222 to it).
DEVTOOLS_PORT = 9222
#: VLC's HTTP interface inside the desktop (OSWorld's VM: port 8080, password ``password``; see the apps package).
VLC_HTTP_PORT = 8080
_WM_MARKER = "/tmp/runtime-user/.legato-wm-ready"
#: The session bus, where OSWorld's VM has it (tasks export this address before running ``gsettings``).
SESSION_BUS_DIR = "/run/user/1000"
SESSION_BUS = f"unix:path={SESSION_BUS_DIR}/bus"
#: AT-SPI (Debian ``at-spi2-core``): the accessibility bus's launcher and the registry the apps join.
ATSPI_LAUNCHER = "/usr/libexec/at-spi-bus-launcher"
ATSPI_REGISTRY = "/usr/libexec/at-spi2-registryd"
#: Apps publish their accessibility trees, as on the VM's GNOME: GTK always does with its bridge; these turn
#: it on for Chromium (with its ``--force-renderer-accessibility`` for the page), Gecko and Qt.
ACCESSIBILITY_ON = {"ACCESSIBILITY_ENABLED": "1", "GNOME_ACCESSIBILITY": "1", "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1"}


def atspi_installed(which: Callable[[str], str | None] = shutil.which) -> bool:
    """Whether AT-SPI's bus launcher and registry are installed, with the session bus they run on and
    ``dbus-send`` (which starts them)."""
    return all(Path(p).exists() for p in (ATSPI_LAUNCHER, ATSPI_REGISTRY)) and all(
        which(tool) is not None for tool in ("dbus-daemon", "dbus-send")
    )


@functools.lru_cache(maxsize=4)
def _imports_pyatspi(python: str) -> bool:
    try:
        probe = subprocess.run([python, "-I", "-c", "import pyatspi"], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def atspi_readable(which: Callable[[str], str | None] = shutil.which) -> bool:
    """Whether the desktop's server can read the accessibility tree: AT-SPI runs (:func:`atspi_installed`)
    and :data:`ATSPI_PYTHON` imports pyatspi (Debian ``python3-pyatspi``; probed in a child process)."""
    return atspi_installed(which) and _imports_pyatspi(ATSPI_PYTHON)


def accessibility_bus() -> str:
    """The entry's part that starts AT-SPI's accessibility bus, as GNOME's session does, before any app.

    Asking the session bus for the accessibility bus's address starts ``at-spi-bus-launcher`` (D-Bus
    activation) and its bus, and answers once that bus is up, so no app waits for it. The launcher also
    publishes the address on the X root window (``AT_SPI_BUS``), which the X server keeps across a fast
    reset: started first, it names this sandbox's bus there before any app or the server's reader looks.
    Empty without AT-SPI (:func:`atspi_installed`).
    """
    if not atspi_installed():
        return ""
    ask = (
        "dbus-send --session --print-reply=literal --reply-timeout=30000 --dest=org.a11y.Bus /org/a11y/bus "
        "org.a11y.Bus.GetAddress"
    )
    return f"{ask} </dev/null >/dev/null 2>&1 4>&- || true; "


def _session_bus() -> str:
    """The entry's part that starts the session bus (dconf, so that ``gsettings`` keeps what it sets, and
    other services start on it on demand) and waits for its socket; nothing without ``dbus-daemon``.

    With AT-SPI installed it then starts the accessibility bus (:func:`accessibility_bus`)."""
    if shutil.which("dbus-daemon") is None:
        return ""
    bus = f"{SESSION_BUS_DIR}/bus"
    return (
        f"dbus-daemon --session --address={SESSION_BUS} --nofork --nopidfile </dev/null >/dev/null 2>&1 4>&- & "
        f"while [ ! -S {bus} ]; do sleep 0.005; done; "
        f"{accessibility_bus()}"
    )


def environment(display_number: int, session: str = "openbox") -> dict[str, str]:
    """The whole environment inside the sandbox (bwrap clears the host's), for the desktop's ``session``."""
    return {
        "PATH": f"{Inside.BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/home/user",
        "USER": "user",
        "LOGNAME": "user",
        "SHELL": "/bin/bash",
        "TERM": "xterm",
        "LANG": "C.UTF-8",
        "DISPLAY": f":{display_number}",
        "XDG_RUNTIME_DIR": "/tmp/runtime-user",
        "DBUS_SESSION_BUS_ADDRESS": SESSION_BUS,
        **(ACCESSIBILITY_ON if atspi_installed() else {"NO_AT_BRIDGE": "1"}),
        **apps.environment(),
        **session_environment(session),
    }


def entry_command(spec: SandboxSpec) -> list[str]:
    """The command bwrap runs as the sandbox's first process.

    The listening socket of the server is its stdin (moved to fd 3 for the server); the port relay's
    listening socket is its stdout, moved to fd 4 for the relay at once.
    """
    # openbox is restarted if it exits (the agent may run `openbox --exit` or kill it), and does not
    # inherit the server's socket
    openbox = f"openbox --config-file {Inside.OPENBOX}/rc.xml"
    wm = wm_command(spec.session, openbox, _WM_MARKER)
    server = (
        f"python {Inside.SERVER} --listen fd:3 --fb {Inside.FB} --open-file-timeout {spec.open_file_timeout:g} "
        f"--atspi-python {ATSPI_PYTHON} --mode {spec.server_mode}{'' if spec.pointer else ' --no-pointer'}"
    )
    if spec.server_mode == "osworld":  # restarted when it dies, as OSWorld's systemd unit restarts its server
        server = f"exec 3<&0 </dev/null 4>&-; while :; do {server}; sleep 0.5; done"
    else:
        server = f"exec {server} 3<&0 </dev/null 4>&-"
    # the window manager first, so that its pid inside (a root property) is the same in every sandbox
    user_entry = (
        "exec 4>&1 >/dev/null; "
        "mkdir -p -m 700 /tmp/runtime-user; "
        f"{_session_bus()}"
        f"{prelude(spec.session, _WM_MARKER)}"
        f"(while :; do {wm}; sleep 0.2; done) </dev/null >/dev/null 2>&1 4>&- & "
        f"if [ -f {Inside.BASELINE} ]; then tar -xf {Inside.BASELINE} -C /home/user || exit 3; fi; "
        f"while [ ! -e {_WM_MARKER} ]; do sleep 0.005; done; "
        f"python {Inside.RELAY} --fd 4 --port {DEVTOOLS_PORT} --port {VLC_HTTP_PORT} "
        "</dev/null 2>/dev/null & " + server
    )
    uid = spec.host_uid
    limits = spec.limits
    rlimits = ["prlimit", f"--nproc={limits.max_processes}", f"--data={limits.memory_bytes}", "--"]
    if uid is None:
        # the sandbox's pid 1 (bwrap --as-pid-1) runs the entry and outlives its server to tell how it ended:
        # nothing inside can signal a pid namespace's init (:mod:`legato_gym.desktop_server.supervise`)
        supervise = ["python", "-I", "-S", f"{Inside.SERVER}/supervise.py", str(SERVER_ENDED), "--"]
        return [*supervise, *rlimits, "/bin/sh", "-c", user_entry]
    # root stays as the parent of the dropped entry (which becomes the server), without the sockets: when the
    # server ends, for whatever reason, it says so and the sandbox exits SERVER_ENDED. Only processes of the
    # desktop's uid inside (the agent's) or the memory bound can end the server; a kill from outside ends
    # this shell or the sandbox's init first, with another status.
    dropped = shlex.join([*rlimits, *drop_to(uid, ["/bin/sh", "-c", user_entry])])
    root_entry = (
        f"chown {uid}:{uid} /home/user {SESSION_BUS_DIR} || exit 1; "
        f"exec 9<&0; {dropped} <&9 9<&- & exec 9<&- </dev/null >/dev/null; wait $!; "
        f'echo "legato: the desktop server ended with status $?" >&2; exit {SERVER_ENDED}'
    )
    return ["/bin/sh", "-c", root_entry]
