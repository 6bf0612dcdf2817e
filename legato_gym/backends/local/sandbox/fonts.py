"""The VM's fonts and GTK settings for the ``lookalike`` session: Ubuntu, Ubuntu Mono, and an XSETTINGS manager.

OSWorld's VM draws GNOME and its apps in Ubuntu 11 (titles in Ubuntu Bold 11, terminals in Ubuntu Mono 13).
The Ubuntu font is not in Debian's main archive, but npm has it: the ``@fontsource/ubuntu`` and
``@fontsource/ubuntu-mono`` packages (:data:`UBUNTU_FONT_VERSION`) carry it as WOFF files, which FreeType and
fontconfig read as the TrueType font they wrap. ``scripts/test`` installs them with npm into
:func:`install_dir`; without them the lookalike draws in Cantarell (Debian ``fonts-cantarell``) and says how to
get them (:data:`SETUP_HINT`).

Inside the sandbox, the install is bound read-only at the same place (:func:`sandbox_paths`) and
``FONTCONFIG_FILE`` points at :func:`fontconfig_conf` (the system's configuration plus the two font folders),
so that openbox's title bars and every app find the family "Ubuntu". :func:`xsettings_conf` is what
``xsettingsd`` (Debian's XSETTINGS manager, which runs no programs) tells GTK apps, as the VM's
gsd-xsettings does: Yaru theme, icons and cursor, Ubuntu 11, Ubuntu Mono 13, subpixel antialiasing.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from pathlib import Path

__all__ = [
    "SETUP_HINT",
    "UBUNTU_FONT_VERSION",
    "XSETTINGS",
    "fontconfig_conf",
    "install_dir",
    "installed",
    "sandbox_paths",
    "say_missing",
    "ubuntu_file",
    "xsettings_conf",
    "xsettingsd_installed",
]

logger = logging.getLogger(__name__)

#: The ``@fontsource/ubuntu`` and ``@fontsource/ubuntu-mono`` release installed from npm (``scripts/test``).
UBUNTU_FONT_VERSION = "5.3.0"
_PACKAGES = ("ubuntu", "ubuntu-mono")
_INSTALL_ENV = "LEGATO_FONTS"
SETUP_HINT = (
    f"npm install --prefix ~/.cache/legato/fonts @fontsource/ubuntu@{UBUNTU_FONT_VERSION} "
    f"@fontsource/ubuntu-mono@{UBUNTU_FONT_VERSION} (scripts/test does; $LEGATO_FONTS moves it)"
)

#: What the VM's gsd-xsettings gives GTK apps (Ubuntu 22.04's defaults of ``org.gnome.desktop.interface`` and
#: ``org.gnome.desktop.wm.preferences``): its theme, icons, cursor and fonts, and subpixel antialiasing with
#: slight hinting (the VM's top bar text has colour fringes: reference/osworld-vm-desktop.png).
XSETTINGS: dict[str, str | int] = {
    "Net/ThemeName": "Yaru",
    "Net/IconThemeName": "Yaru",
    "Gtk/CursorThemeName": "Yaru",
    "Gtk/CursorThemeSize": 24,
    "Gtk/FontName": "Ubuntu 11",
    "Gtk/MonospaceFontName": "Ubuntu Mono 13",
    "Gtk/DecorationLayout": ":minimize,maximize,close",
    "Xft/Antialias": 1,
    "Xft/Hinting": 1,
    "Xft/HintStyle": "hintslight",
    "Xft/RGBA": "rgb",
    "Xft/DPI": 96 * 1024,
    "Net/EnableEventSounds": 1,
    "Net/EnableInputFeedbackSounds": 0,
}


def install_dir() -> Path:
    """The npm prefix the fonts are installed in: ``$LEGATO_FONTS`` or ``~/.cache/legato/fonts``."""
    return Path(os.environ.get(_INSTALL_ENV) or "~/.cache/legato/fonts").expanduser()


def _font_dirs(prefix: Path | None = None) -> tuple[Path, ...]:
    base = (prefix or install_dir()) / "node_modules" / "@fontsource"
    return tuple(base / package / "files" for package in _PACKAGES)


def ubuntu_file(weight: int = 400, prefix: Path | None = None) -> Path | None:
    """The Ubuntu font's Latin file of ``weight`` (400 regular, 700 bold), if installed under ``prefix``."""
    path = _font_dirs(prefix)[0] / f"ubuntu-latin-{weight}-normal.woff"
    return path if path.is_file() else None


def installed(prefix: Path | None = None) -> bool:
    """Whether Ubuntu and Ubuntu Mono are both installed under ``prefix`` (default :func:`install_dir`)."""
    mono = _font_dirs(prefix)[1] / "ubuntu-mono-latin-400-normal.woff"
    return ubuntu_file(400, prefix) is not None and ubuntu_file(700, prefix) is not None and mono.is_file()


@functools.lru_cache(maxsize=1)
def say_missing() -> None:
    """Log, once per process, that the Ubuntu font is missing and how to get it."""
    logger.info("the Ubuntu font is not installed: the lookalike desktop draws in Cantarell; to get it: %s", SETUP_HINT)


def sandbox_paths(session: str, prefix: Path | None = None) -> tuple[str, ...]:
    """Host folders a ``session`` desktop binds read-only at the same place: the two font folders (lookalike)."""
    if session != "lookalike":
        return ()
    if not installed(prefix):
        say_missing()
        return ()
    return tuple(str(folder.resolve()) for folder in _font_dirs(prefix))


def fontconfig_conf(prefix: Path | None = None) -> str | None:
    """The sandbox's fontconfig configuration: the system's, the Ubuntu fonts' folders (their WOFF files; the
    WOFF2 copies are left out), or ``None`` when the fonts are not installed."""
    if not installed(prefix):
        return None
    dirs = "".join(f"  <dir>{folder.resolve()}</dir>\n" for folder in _font_dirs(prefix))
    return (
        '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">\n<fontconfig>\n'
        "  <include>/etc/fonts/fonts.conf</include>\n"
        f"{dirs}"
        "  <selectfont><rejectfont><glob>*.woff2</glob></rejectfont></selectfont>\n"
        "</fontconfig>\n"
    )


def xsettings_conf(settings: dict[str, str | int] | None = None) -> str:
    """``xsettingsd``'s configuration file for ``settings`` (default :data:`XSETTINGS`)."""
    lines = []
    for name, value in (settings if settings is not None else XSETTINGS).items():
        lines.append(f"{name} {value}" if isinstance(value, int) else f'{name} "{value}"')
    return "\n".join(lines) + "\n"


def xsettingsd_installed() -> bool:
    """Whether Debian's ``xsettingsd`` is on ``PATH`` (the lookalike session runs it when it is)."""
    return shutil.which("xsettingsd") is not None
