"""What the local desktop knows about each of OSWorld's apps: profiles, first-run settings, defaults, readiness.

OSWorld's VM (Ubuntu 22.04, GNOME) has LibreOffice and Google Chrome set up by hand once: no tip of the day,
no "Keep current format" question on saving an ``.xlsx`` (the tasks' post-config saves with ``ctrl+s`` and
nothing else), no Chrome first-run page, documents opening in the app for their type, and windows opening
maximized. This module holds that knowledge as data, so that the desktop's baseline home
(:func:`baseline_files`), the programs it puts on ``PATH`` inside the sandbox (:func:`bin_entries`), the
window manager's placement rules (:data:`OPENBOX_APPLICATIONS`) and the ready signal after a ``launch``
(:func:`ready_title`) all come from one place.

Chromium answers to ``google-chrome`` (and a task's ``pkill chrome`` finds it), keeps its
profile where OSWorld's Chrome does (``~/.config/google-chrome``), and runs without its own namespace
sandbox (``--no-sandbox``): the desktop's sandbox refuses new user namespaces, and is the isolation.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CHROME_PROFILE",
    "CHROMIUM_FLAGS",
    "LIBREOFFICE_PROFILE",
    "MIME_DEFAULTS",
    "OPENBOX_APPLICATIONS",
    "baseline_files",
    "bin_entries",
    "chromium_binary",
    "environment",
    "opens_window",
    "ready_title",
    "ready_titles",
]

#: LibreOffice's user profile (``-env:UserInstallation`` default) in the VM's home.
LIBREOFFICE_PROFILE = ".config/libreoffice/4/user"
#: Chrome's user data folder, where OSWorld's getters read Preferences, Bookmarks, History.
CHROME_PROFILE = ".config/google-chrome"

#: LibreOffice settings as the VM has them: (node path, property, type, value).
LIBREOFFICE_SETTINGS: tuple[tuple[str, str, str, str], ...] = (
    ("/org.openoffice.Office.Common/Misc", "ShowTipOfTheDay", "boolean", "false"),
    ("/org.openoffice.Office.Common/Misc", "FirstRun", "boolean", "false"),
    # the "get involved" and "donate" infobars are shown when these are more than 180 days ago
    ("/org.openoffice.Office.Common/Misc", "LastTimeGetInvolvedShown", "long", "4102444800"),
    ("/org.openoffice.Office.Common/Misc", "LastTimeDonateShown", "long", "4102444800"),
    # saving in a Microsoft format asks "Use Excel 2007-365!" / "Keep current format" unless this is off
    ("/org.openoffice.Office.Common/Save/Document", "WarnAlienFormat", "boolean", "false"),
    ("/org.openoffice.Office.Recovery/RecoveryInfo", "Enabled", "boolean", "false"),
    ("/org.openoffice.Office.Impress/Misc", "StartWithTemplate", "boolean", "false"),  # no template dialog
    ("/org.openoffice.Setup/Product", "ooSetupLastVersion", "string", "99.0"),  # no "what's new" infobar
    ("/org.openoffice.Setup/Office", "FirstStartWizardCompleted", "boolean", "true"),
)

#: Chrome's first-run state: the profile has been used, the default-browser question was answered.
CHROME_PREFERENCES: dict[str, Any] = {
    "browser": {"check_default_browser": False, "has_seen_welcome_page": True},
    "distribution": {"skip_first_run_ui": True, "suppress_first_run_default_browser_prompt": True},
    "profile": {"exit_type": "Normal", "exited_cleanly": True},
    "session": {"restore_on_startup": 5},
}

#: Flags every ``google-chrome`` inside the desktop gets (before the task's own).
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--password-store=basic",
    "--test-type",  # no "unsupported command-line flag: --no-sandbox" infobar
)

#: Default application per MIME type, as the VM's GNOME has them (desktop file names).
MIME_DEFAULTS: dict[str, str] = {
    **dict.fromkeys(
        (
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            "application/vnd.ms-excel",
            "application/vnd.oasis.opendocument.spreadsheet",
            "text/csv",
        ),
        "libreoffice-calc.desktop",
    ),
    **dict.fromkeys(
        (
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "application/msword",
            "application/vnd.oasis.opendocument.text",
            "application/rtf",
        ),
        "libreoffice-writer.desktop",
    ),
    **dict.fromkeys(
        (
            "application/vnd.openxmlformats-officedocument.presentationml.presentation",
            "application/vnd.ms-powerpoint",
            "application/vnd.oasis.opendocument.presentation",
        ),
        "libreoffice-impress.desktop",
    ),
    **dict.fromkeys(
        ("text/html", "x-scheme-handler/http", "x-scheme-handler/https", "application/xhtml+xml"),
        "google-chrome.desktop",
    ),
    # GNOME opens plain text, and empty files (``file`` calls them inode/x-empty), in its text editor
    **dict.fromkeys(("text/plain", "inode/x-empty", "application/x-zerosize"), "org.xfce.mousepad.desktop"),
}

_CHROME_DESKTOP = """[Desktop Entry]
Version=1.0
Name=Google Chrome
Exec=google-chrome %U
Terminal=false
Type=Application
Icon=chromium
Categories=Network;WebBrowser;
MimeType=text/html;application/xhtml+xml;x-scheme-handler/http;x-scheme-handler/https;
"""

#: openbox ``<applications>`` rules: the VM's GNOME opens these apps maximized.
OPENBOX_APPLICATIONS = """  <applications>
    <application class="libreoffice*"><maximized>yes</maximized></application>
    <application class="Soffice"><maximized>yes</maximized></application>
    <application class="Chromium*"><maximized>yes</maximized></application>
    <application class="Google-chrome"><maximized>yes</maximized></application>
  </applications>
"""


def _xcu(settings: Sequence[tuple[str, str, str, str]]) -> str:
    items = "".join(
        f'<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop></item>\n'
        for path, name, _kind, value in settings
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
        f"{items}</oor:items>\n"
    )


def _mimeapps(defaults: Mapping[str, str]) -> str:
    lines = ["[Default Applications]", *(f"{mime}={app}" for mime, app in defaults.items()), ""]
    return "\n".join(lines)


def baseline_files() -> dict[str, bytes]:
    """Files of the baseline home (paths relative to ``/home/user``) that set the apps up as the VM has them."""
    return {
        f"{LIBREOFFICE_PROFILE}/registrymodifications.xcu": _xcu(LIBREOFFICE_SETTINGS).encode(),
        f"{CHROME_PROFILE}/First Run": b"",
        f"{CHROME_PROFILE}/Default/Preferences": json.dumps(CHROME_PREFERENCES).encode(),
        ".config/mimeapps.list": _mimeapps(MIME_DEFAULTS).encode(),
        ".local/share/applications/mimeapps.list": _mimeapps(MIME_DEFAULTS).encode(),
        ".local/share/applications/google-chrome.desktop": _CHROME_DESKTOP.encode(),
    }


def environment() -> dict[str, str]:
    """Environment variables the apps need inside the desktop.

    LibreOffice draws with GTK 3, as on the VM's GNOME, when ``libreoffice-gtk3`` is installed (with no
    desktop environment to detect it would pick its bare X11 plugin, which reads fast repeated keys as
    auto-repeat and drops them, and has no accessibility tree).
    """
    if Path("/usr/lib/libreoffice/program/libvclplug_gtk3lo.so").exists():
        return {"SAL_USE_VCLPLUGIN": "gtk3"}
    return {}


def chromium_binary(which: Any = shutil.which) -> str | None:
    """The Chromium executable itself (not Debian's ``/usr/bin/chromium`` wrapper script), if installed."""
    found = which("chromium") or which("chromium-browser")
    if not found:
        return None
    for candidate in ("/usr/lib/chromium/chromium", "/usr/lib/chromium-browser/chromium-browser"):
        if os.access(candidate, os.X_OK):
            return candidate
    return str(found)


def bin_entries(which: Any = shutil.which) -> dict[str, str | Path]:
    """Programs for the sandbox's own ``PATH`` folder: name to a script's text, or to a symlink's target.

    ``google-chrome`` runs Chromium (through the ``chrome`` symlink) with :data:`CHROMIUM_FLAGS` and the
    profile in ``~/.config/google-chrome``; ``pkill`` and ``pgrep`` read the pattern ``chrome`` as Chrome's
    or Chromium's processes. Empty when Chromium is not installed.
    """
    binary = chromium_binary(which)
    if binary is None:
        return {}
    flags = " ".join(shlex.quote(flag) for flag in CHROMIUM_FLAGS)
    script = (
        "#!/bin/sh\n"
        "# legato: Chromium as OSWorld's google-chrome (its profile folder, no first run, no namespace sandbox)\n"
        f'exec /run/legato-bin/chrome {flags} --user-data-dir="$HOME/{CHROME_PROFILE}" "$@"\n'
    )
    entries: dict[str, str | Path] = {"chrome": Path(binary), "google-chrome": script, "google-chrome-stable": script}
    for tool in ("pkill", "pgrep"):
        real = which(tool)
        if real:
            entries[tool] = _PROCESS_PATTERN.format(tool=real)
    return entries


#: ``pkill``/``pgrep`` that find Chromium where a task names Chrome: Chromium names its processes
#: ``chromium``, and OSWorld's Chrome tasks restart the browser with ``pkill chrome``.
_PROCESS_PATTERN = """#!/bin/sh
# legato: Chromium stands in for Google Chrome; the pattern chrome also finds its processes
for arg; do
  shift
  if [ "$arg" = chrome ]; then set -- "$@" 'chrom(e|ium)'; else set -- "$@" "$arg"; fi
done
exec {tool} "$@"
"""


_OFFICE_TITLES = {"--calc": "LibreOffice Calc", "--writer": "LibreOffice Writer", "--impress": "LibreOffice Impress"}
_DOCUMENT = (".xlsx", ".xls", ".ods", ".csv", ".docx", ".doc", ".odt", ".rtf", ".pptx", ".ppt", ".odp", ".pdf")


def _words(command: str | Sequence[str]) -> list[str]:
    if isinstance(command, str):
        try:
            return shlex.split(command)
        except ValueError:
            return command.split()
    return [str(word) for word in command]


def ready_title(command: str | Sequence[str]) -> str | None:
    """What a ``launch`` step's window title shows once the app has loaded (``None``: any window will do).

    LibreOffice maps a window before its document is loaded; the document's window is titled with the
    file's name (``report.xlsx - LibreOffice Calc``), or with the component for a new document. Chrome's
    window is titled ``... - Chromium`` once its first page has a title.
    """
    words = _words(command)
    names = [Path(word).name for word in words]
    if not names:
        return None
    program = next((n for n in names if "=" not in n and n not in ("env", "sudo")), "")
    if program in ("libreoffice", "soffice"):
        if "--convert-to" in words or "--headless" in words:
            return None
        documents = [Path(w).name for w in words[1:] if w.lower().endswith(_DOCUMENT)]
        if documents:
            return documents[-1]
        for flag, title in _OFFICE_TITLES.items():
            if flag in words:
                return title
        return "LibreOffice"
    if program in ("google-chrome", "google-chrome-stable", "chromium", "chrome"):
        return "Chromium"
    return None


def ready_titles(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """The titles that show a task's setup has loaded: each ``launch`` step's :func:`ready_title`, and the
    file name of each ``open`` step (its window is titled with it once the document is loaded)."""
    titles = []
    for step in steps:
        params = step.get("parameters") or {}
        title = None
        if step.get("type") == "launch":
            title = ready_title(params.get("command", ""))
        elif step.get("type") == "open" and params.get("path"):
            title = Path(str(params["path"])).name
        if title is not None:
            titles.append(title)
    return titles


#: Programs that OSWorld's setups launch and that map no window (the DevTools port forwarder, killers).
WINDOWLESS = frozenset({"socat", "pkill", "killall", "kill", "sleep", "tinyproxy", "xdotool", "wmctrl"})


def opens_window(command: str | Sequence[str]) -> bool:
    """Whether a ``launch`` step's program maps a window (the ready signal waits for one per launch)."""
    words = [Path(word).name for word in _words(command) if "=" not in word]
    program = next((w for w in words if w not in ("env", "sudo")), "")
    if program in ("libreoffice", "soffice") and ("--convert-to" in words or "--headless" in words):
        return False
    return program not in WINDOWLESS
