"""The VM's GNOME session around the apps, and the baseline home and system files of all the apps together.

OSWorld's VM opens documents in the app for their type (:data:`MIME_DEFAULTS`), folders in nautilus, PDFs in
evince (which windows open maximized is :data:`..sandbox.shell.APP_WINDOWS`); ctrl+alt+t opens gnome-terminal
(:func:`openbox_keybinds`). The desktop's baseline home (:func:`baseline_files`) and the system files shown
changed inside the sandbox (:func:`system_files`) are gathered here from each app's module.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from legato_gym.backends.local.apps.catalog import APPS
from legato_gym.backends.local.apps.media import videos_types
from legato_gym.backends.local.apps.thunderbird import thunderbird_system_files

__all__ = [
    "AUDIO_BASELINE",
    "AUDIO_CLIENT",
    "AUDIO_VOLUME",
    "DBUS_SERVICES",
    "DISABLED_SERVICES",
    "GTK4_RENDERER",
    "MIME_DEFAULTS",
    "SKELETON",
    "TERMINALS",
    "audio_files",
    "baseline_files",
    "environment",
    "mime_defaults",
    "openbox_keybinds",
    "skeleton_files",
    "system_files",
    "terminal_command",
]

#: Default application per MIME type, as the VM's GNOME has them (desktop file names), from each app's record
#: (:attr:`.catalog.App.mime`).
MIME_DEFAULTS: dict[str, str] = {mime: desktop for app in APPS for desktop, types in app.mime for mime in types}


def _mimeapps(defaults: Mapping[str, str]) -> str:
    lines = ["[Default Applications]", *(f"{mime}={app}" for mime, app in defaults.items()), ""]
    return "\n".join(lines)


def mime_defaults(videos_desktop: str | Path | None = None) -> dict[str, str]:
    """:data:`MIME_DEFAULTS`, with the video types GNOME Videos registers opening in it (when it is installed)."""
    videos = videos_types() if videos_desktop is None else videos_types(videos_desktop)
    return {**MIME_DEFAULTS, **dict.fromkeys(videos, "org.gnome.Totem.desktop")}


def baseline_files() -> dict[str, bytes]:
    """Files of the baseline home (paths relative to ``/home/user``) that set the apps up as the VM has them:
    each app's own (:attr:`.catalog.App.files`), the MIME defaults, the home's skeleton and the sound volume."""
    mimeapps = _mimeapps(mime_defaults()).encode()
    files: dict[str, bytes] = {}
    for app in APPS:
        if app.files is not None:
            files.update(app.files())
    return {
        **files,
        ".config/mimeapps.list": mimeapps,
        ".local/share/applications/mimeapps.list": mimeapps,
        **skeleton_files(),
        **audio_files(),
    }


#: The sound server's volume in the baseline home (percent): OSWorld's os task 28cc3b7e has the agent turn
#: it up to the maximum, 100, which is also where a first PulseAudio start would leave it.
AUDIO_VOLUME = 50
#: Run once in the first sandbox, before the baseline home is captured, when PulseAudio is installed: start
#: it on its null sink (the desktop has no sound device), set :data:`AUDIO_VOLUME`, and stop it, which
#: saves the volume in ``~/.config/pulse`` as the VM's sound server keeps it. An app or the agent that talks
#: to the sound server later starts it (:data:`AUDIO_CLIENT`), and it restores that volume.
AUDIO_BASELINE = (
    f"pulseaudio --start && pactl set-sink-volume @DEFAULT_SINK@ {AUDIO_VOLUME}% && pulseaudio --kill; "
    'for _ in $(seq 100); do pgrep -u "$(id -u)" -x pulseaudio >/dev/null || break; sleep 0.05; done; '
    '! pgrep -u "$(id -u)" -x pulseaudio >/dev/null'
)

#: PulseAudio's client settings in the baseline home: the first client starts the sound server (autospawn),
#: as systemd's socket starts it on the VM; Debian turns autospawn off for systemd sessions, which the
#: desktop does not have.
AUDIO_CLIENT = ".config/pulse/client.conf"


def audio_files() -> dict[str, bytes]:
    """The baseline home's PulseAudio client settings (:data:`AUDIO_CLIENT`), when PulseAudio is installed."""
    if not shutil.which("pulseaudio"):
        return {}
    return {AUDIO_CLIENT: b"autospawn = yes\n"}


#: GTK 4's renderer inside the desktop (``GSK_RENDERER``): cairo, in software, drawing only what changed.
GTK4_RENDERER = "cairo"


def environment() -> dict[str, str]:
    """Environment variables the apps need inside the desktop.

    LibreOffice draws with GTK 3, as on the VM's GNOME, when ``libreoffice-gtk3`` is installed (with no
    desktop environment to detect it would pick its bare X11 plugin, which reads fast repeated keys as
    auto-repeat and drops them, and has no accessibility tree).

    GTK 4 apps (nautilus) draw with cairo (:data:`GTK4_RENDERER`), as the VM's GTK 3 nautilus does. GTK 4's
    default GL renderer runs on Mesa's software rasterizer here (no GPU): its threads take about a quarter of
    a core to animate nautilus's "Loading…" spinner alone. On a busy host (other desktops running, or this one
    just reset) a frame then outlasts the frame interval, GTK's redraw (priority 120) is always due, and the
    idle callback (priority 180) in which nautilus shows the listed files and ends loading does not run: the
    spinner turns for 15 s to over a minute, and the screen never settles. Cairo redraws only what changed.
    """
    env = {"GSK_RENDERER": GTK4_RENDERER}
    if Path("/usr/lib/libreoffice/program/libvclplug_gtk3lo.so").exists():
        env["SAL_USE_VCLPLUGIN"] = "gtk3"
    return env


#: D-Bus services the sandbox's session bus does not start (none now). Tracker's file indexer
#: (``tracker-miner-fs-3``, Debian ``tracker-miner-fs``) starts on demand, as the VM runs it: GNOME Videos browses
#: through it and shows a "Browse Error" dialog when it cannot start. It was disabled once because nautilus
#: showed "Loading…" until the indexer's first query timed out; with GTK 4 drawn by cairo (:data:`GTK4_RENDERER`)
#: nautilus lists folders at once with the indexer running (tests/gym/test_local_files.py).
DISABLED_SERVICES: tuple[str, ...] = ()
DBUS_SERVICES = "/usr/share/dbus-1/services"


def system_files() -> dict[str, str]:
    """System files the sandbox shows changed (absolute path inside to text; each exists on the host).

    The :data:`DISABLED_SERVICES` fail to start, and Thunderbird's files are changed as
    :func:`.thunderbird.thunderbird_system_files` says. The host's files are left as they are.
    """
    files: dict[str, str] = {}
    for name in DISABLED_SERVICES:
        if Path(DBUS_SERVICES, f"{name}.service").is_file():
            files[f"{DBUS_SERVICES}/{name}.service"] = f"[D-BUS Service]\nName={name}\nExec=/bin/false\n"
    files.update(thunderbird_system_files())
    return files


#: The programs the desktop's terminal shortcut (ctrl+alt+t, as GNOME binds it) may run, first found wins.
TERMINALS = ("gnome-terminal", "xterm")
#: Shell start-up files a fresh Ubuntu home has (copied from ``/etc/skel``): the prompt, and the terminal
#: title ``user@host: dir`` that OSWorld's ``wmctrl -lx`` checks read.
SKELETON = ("/etc/skel/.bashrc", "/etc/skel/.profile", "/etc/skel/.bash_logout")


def terminal_command(which: Any = shutil.which) -> str | None:
    """What the VM's ctrl+alt+t runs here: the first of :data:`TERMINALS` installed (``None``: none is)."""
    return next((name for name in TERMINALS if which(name)), None)


def openbox_keybinds(which: Any = shutil.which) -> str:
    """openbox ``<keybind>`` rules of the VM's GNOME that run a program (inside the sandbox): ctrl+alt+t."""
    terminal = terminal_command(which)
    if terminal is None:
        return ""
    return f'    <keybind key="C-A-t"><action name="Execute"><command>{terminal}</command></action></keybind>\n'


#: The VM user's folders by their XDG names (``~/.config/user-dirs.dirs``, as ``xdg-user-dirs-update`` writes it at
#: the first login): GTK's file chooser, the file manager's sidebar and the file indexer read them.
USER_DIRS = (
    ("DESKTOP", "Desktop"), ("DOWNLOAD", "Downloads"), ("TEMPLATES", "Templates"), ("PUBLICSHARE", "Public"),
    ("DOCUMENTS", "Documents"), ("MUSIC", "Music"), ("PICTURES", "Pictures"), ("VIDEOS", "Videos"),
)  # fmt: skip


def skeleton_files() -> dict[str, bytes]:
    """The home's shell start-up files from ``/etc/skel`` (those that exist) and the user's folders by their XDG
    names as the first login leaves them, relative to ``/home/user``."""
    files = {Path(path).name: Path(path).read_bytes() for path in SKELETON if Path(path).is_file()}
    files[".config/user-dirs.dirs"] = "".join(f'XDG_{key}_DIR="$HOME/{folder}"\n' for key, folder in USER_DIRS).encode()
    files[".config/user-dirs.locale"] = b"en_US\n"
    return files
