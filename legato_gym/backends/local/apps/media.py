"""GIMP and VLC as OSWorld's VM has them: their profiles, titles, and VLC's HTTP interface.

OSWorld's GIMP tasks launch ``gimp FILE``, export with shift+ctrl+e in their post-config, and read GIMP's
profile (gimprc, sessionrc, action-history) under :data:`GIMP_PROFILE`, made once per host by a headless
first start (:data:`GIMP_WARMUP`), in single-window mode and maximized. Its VLC tasks launch
``vlc --no-audio``, read ``~/.config/vlc/vlcrc`` (:func:`media_files`), and ask VLC's HTTP interface (port
8080, password ``password``, relayed to the grader as Chrome's DevTools port is) what it plays.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "GIMP_IMAGES",
    "GIMP_PROFILE",
    "GIMP_TITLE",
    "GIMP_TYPES",
    "GIMP_WARMUP",
    "VIDEOS_DESKTOP",
    "VLC_CONFIG",
    "VLC_HTTP_PASSWORD",
    "VLC_MEDIA",
    "VLC_SETTINGS",
    "VLC_TITLE",
    "VLC_TYPES",
    "gimp_files",
    "gimp_profile_key",
    "gimp_title",
    "media_files",
    "videos_types",
    "vlc_files",
    "vlc_http_installed",
    "vlcrc",
]

#: GIMP's profile folder, where desktop-env's ``gimp_config_file`` getter reads (relative to ``/home/user``).
GIMP_PROFILE = ".config/GIMP/2.10"
#: GIMP's default window layout (Debian's gimp-data), which the baseline's ``sessionrc`` starts from.
GIMP_SYSTEM_SESSIONRC = "/etc/gimp/2.0/sessionrc"
#: GIMP's window title with no image open (single-window mode, GIMP's default, as on the VM).
GIMP_TITLE = "GNU Image Manipulation Program"
#: Files GIMP titles its window with (``[name] (imported)-1.0 (RGB color 8-bit ...) 320x200 – GIMP``).
GIMP_IMAGES = (".png", ".jpg", ".jpeg", ".xcf", ".bmp", ".gif", ".tif", ".tiff", ".webp")
#: VLC's configuration file, where desktop-env's ``vlc_config`` getter reads (relative to ``/home/user``).
VLC_CONFIG = ".config/vlc/vlcrc"
#: Every VLC window's title ends with it (``tone.wav - VLC media player``, or the media's title).
VLC_TITLE = "VLC media player"
#: The password of VLC's HTTP interface, as desktop-env's ``vlc_playing_info`` getter sends it.
VLC_HTTP_PASSWORD = "password"
#: Media files VLC plays (an ``open`` step on one maps a VLC window).
VLC_MEDIA: tuple[str, ...] = (
    *(".mp4", ".mkv", ".webm", ".avi", ".mov", ".mpg", ".mpeg", ".ogv", ".flv"),
    *(".mp3", ".wav", ".ogg", ".flac", ".m4a", ".opus"),
)

#: ``vlcrc`` as the VM has it, by section: the HTTP interface on (OSWorld's VLC getters read it), the
#: privacy and network-access question answered, and audio through a dummy output, since the desktop has no
#: sound device (VLC otherwise opens an "Errors" window each time it plays sound).
VLC_SETTINGS: dict[str, dict[str, str]] = {
    "qt": {"qt-privacy-ask": "0"},
    "core": {"extraintf": "http", "aout": "adummy", "metadata-network-access": "0"},
    "lua": {"http-password": VLC_HTTP_PASSWORD},
}
#: Run once per host in a sandbox to give GIMP's profile what its first start writes (the plug-in database,
#: ``pluginrc``, that GIMP otherwise builds at every first start, for seconds): headless, no data or fonts.
GIMP_WARMUP = "gimp -i -d -f -b '(gimp-quit 0)' </dev/null >/dev/null 2>&1"

#: Image types opened in GIMP (``gimp.desktop``).
GIMP_TYPES = ("image/x-xcf", "image/png", "image/jpeg", "image/bmp", "image/gif", "image/tiff", "image/webp")
#: Audio and video types opened in VLC (``vlc.desktop``).
VLC_TYPES = (
    *(f"video/{kind}" for kind in ("mp4", "mpeg", "webm", "ogg", "quicktime", "x-matroska", "x-msvideo", "x-flv")),
    *(f"audio/{kind}" for kind in ("mpeg", "mp4", "ogg", "flac", "x-wav", "wav", "x-vorbis+ogg", "x-flac")),
)

#: GNOME Videos (totem), the VM's default video player. The video types it registers open in it, but for
#: :data:`VLC_TYPES`: the VM opens an ``.mp4`` in VLC (multi_apps 9f3bb592's setup waits for VLC's window),
#: and desktop-env's ``default_video_player`` getter answers the app most of the video types open in, which
#: is GNOME Videos until the agent makes it VLC (multi_apps 937087b6).
VIDEOS_DESKTOP = "/usr/share/applications/org.gnome.Totem.desktop"


def videos_types(desktop_file: str | Path = VIDEOS_DESKTOP) -> tuple[str, ...]:
    """The video types GNOME Videos' desktop file registers, but :data:`VLC_TYPES` (none without it)."""
    try:
        text = Path(desktop_file).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    types = next((line.partition("=")[2] for line in text.splitlines() if line.startswith("MimeType=")), "")
    return tuple(t for t in dict.fromkeys(types.split(";")) if t.startswith("video/") and t not in VLC_TYPES)


def gimp_profile_key(which: Any = shutil.which) -> str | None:
    """A name for GIMP's prepared profile on this host (:data:`GIMP_WARMUP`), which changes with the GIMP
    install and its plug-ins; ``None`` when GIMP is not installed."""
    gimp = which("gimp")
    if not gimp:
        return None
    parts = [GIMP_WARMUP]
    for path in (os.path.realpath(gimp), *sorted(glob.glob("/usr/lib/gimp/*/plug-ins"))):
        with contextlib.suppress(OSError):
            info = os.stat(path)
            parts.append(f"{path}:{info.st_size}:{info.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def vlcrc(settings: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """The text of a ``vlcrc`` holding ``settings`` (default :data:`VLC_SETTINGS`), section by section."""
    lines = []
    for section, values in (VLC_SETTINGS if settings is None else settings).items():
        lines += [f"[{section}]", *(f"{key}={value}" for key, value in values.items()), ""]
    return "\n".join(lines)


def media_files(system_sessionrc: str | Path = GIMP_SYSTEM_SESSIONRC) -> dict[str, bytes]:
    """The baseline home's VLC configuration (:func:`vlc_files`) and GIMP's window layout (:func:`gimp_files`)."""
    return {**vlc_files(), **gimp_files(system_sessionrc)}


def vlc_files() -> dict[str, bytes]:
    """The baseline home's VLC configuration (:data:`VLC_SETTINGS`)."""
    return {VLC_CONFIG: vlcrc().encode()}


def gimp_files(system_sessionrc: str | Path = GIMP_SYSTEM_SESSIONRC) -> dict[str, bytes]:
    """GIMP's window layout in the baseline home.

    GIMP's layout is its system default (single-window mode, docks shown) with the window maximized, as
    the VM's GNOME shows it: GIMP itself restores its window's size and un-maximizes it after mapping, so a
    window manager rule alone does not hold. The rest of GIMP's profile comes from a first start
    (:data:`GIMP_WARMUP`). Without GIMP's system ``sessionrc``, nothing.
    """
    files: dict[str, bytes] = {}
    with contextlib.suppress(OSError):
        layout = Path(system_sessionrc).read_text()
        files[f"{GIMP_PROFILE}/sessionrc"] = layout.replace('(maximized "no")', '(maximized "yes")').encode()
    return files


def gimp_title(path: str) -> str | None:
    """What GIMP's window title shows once the image at ``path`` is loaded (``None``: a file it would not
    show at once, such as raw data, which asks for its layout first)."""
    name = Path(path)
    if name.suffix.lower() not in GIMP_IMAGES:
        return None
    return f"[{name.stem}]"


def vlc_http_installed(which: Any = shutil.which) -> bool:
    """Whether VLC and its Lua HTTP interface (``vlc-plugin-base``'s ``lua/intf/http.luac``) are installed."""
    if not which("vlc"):
        return False
    patterns = ("vlc/lua/intf/http.lua*", "*/vlc/lua/intf/http.lua*")
    return any(any(Path(root).glob(pattern)) for root in _LIB_ROOTS for pattern in patterns)


_LIB_ROOTS = ("/usr/lib", "/usr/lib64", "/usr/local/lib")
