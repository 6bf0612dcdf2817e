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

Thunderbird starts on a set-up profile where OSWorld's getters read it (:data:`THUNDERBIRD_PROFILE`), with
the VM's window class (``/usr/bin/thunderbird`` is replaced inside the sandbox, :func:`system_files`) and no
first-run dialog; folders open in nautilus, PDFs in evince, and ctrl+alt+t opens gnome-terminal
(:func:`openbox_keybinds`), as on the VM's GNOME.

GIMP keeps its profile where OSWorld's getters read it (``~/.config/GIMP/2.10``), made once per host by a
headless first start (:data:`GIMP_WARMUP`), in single-window mode and maximized; VLC reads a ``vlcrc``
(:func:`media_files`) with its HTTP interface on (port 8080, password ``password``, relayed to the grader
as Chrome's DevTools port is) and no privacy question. Images open in GIMP, audio and video in VLC.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from legato_gym.backends.local import vscode
from legato_gym.backends.local.commands import command_words

__all__ = [
    "CHROME_PROFILE",
    "CHROMIUM_FLAGS",
    "GIMP_PROFILE",
    "GIMP_TITLE",
    "GIMP_WARMUP",
    "GTK4_RENDERER",
    "LIBREOFFICE_PROFILE",
    "MIME_DEFAULTS",
    "OPENBOX_APPLICATIONS",
    "THUNDERBIRD_PREFS",
    "THUNDERBIRD_PROFILE",
    "VLC_CONFIG",
    "VLC_HTTP_PASSWORD",
    "VLC_TITLE",
    "baseline_files",
    "bin_entries",
    "chromium_binary",
    "environment",
    "gimp_profile_key",
    "gimp_title",
    "install_hash",
    "media_files",
    "open_title",
    "openbox_keybinds",
    "opens_window",
    "ready_title",
    "ready_titles",
    "sandbox_which",
    "skeleton_files",
    "system_files",
    "thunderbird_dir",
    "thunderbird_files",
    "vlc_http_installed",
    "vlcrc",
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
    # no "Select a Template" dialog when Impress starts: Misc/NewDoc/AutoPilot up to 7.x, StartWithTemplate after
    ("/org.openoffice.Office.Impress/Misc/NewDoc", "AutoPilot", "boolean", "false"),
    ("/org.openoffice.Office.Impress/Misc", "StartWithTemplate", "boolean", "false"),
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
    "--force-renderer-accessibility",  # the page's contents in the AT-SPI tree, not only the browser's frame
)

#: Image types opened in GIMP (``gimp.desktop``).
GIMP_TYPES = ("image/x-xcf", "image/png", "image/jpeg", "image/bmp", "image/gif", "image/tiff", "image/webp")
#: Audio and video types opened in VLC (``vlc.desktop``).
VLC_TYPES = (
    *(f"video/{kind}" for kind in ("mp4", "mpeg", "webm", "ogg", "quicktime", "x-matroska", "x-msvideo", "x-flv")),
    *(f"audio/{kind}" for kind in ("mpeg", "mp4", "ogg", "flac", "x-wav", "wav", "x-vorbis+ogg", "x-flac")),
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
    # GNOME's file manager, PDF viewer and mail client (installing GIMP made it the PDF viewer otherwise)
    "inode/directory": "org.gnome.Nautilus.desktop",
    "application/pdf": "org.gnome.Evince.desktop",
    **dict.fromkeys(("x-scheme-handler/mailto", "message/rfc822"), "thunderbird.desktop"),
    # images in GIMP: the VM opens .xcf in GIMP and photos in GNOME's Image Viewer, which this desktop lacks
    **dict.fromkeys(GIMP_TYPES, "gimp.desktop"),
    # audio and video in VLC
    **dict.fromkeys(VLC_TYPES, "vlc.desktop"),
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
    <application class="Gimp*" type="normal"><maximized>yes</maximized></application>
    <application class="thunderbird"><maximized>yes</maximized></application>
    <application class="org.gnome.Nautilus"><maximized>yes</maximized></application>
    <application class="Evince"><maximized>yes</maximized></application>
    <application class="Code"><maximized>yes</maximized></application>
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
        **thunderbird_files(),
        **media_files(),
        **skeleton_files(),
        **vscode.baseline_files(),
    }


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
    entries.update(vscode.bin_entries(chromium_flags=CHROMIUM_FLAGS, which=which))  # `code`: code-server's window
    for tool in ("pkill", "pgrep"):
        real = which(tool)
        if real:
            entries[tool] = _PROCESS_PATTERN.format(tool=real)
    return entries


def sandbox_which(which: Any = shutil.which) -> Callable[[str], str | None]:
    """Find a program as the desktop's ``PATH`` does: legato's own (:func:`bin_entries`) first, then the host's.

    ``code`` is found once code-server and Chromium are installed, though no ``code`` is on the host's ``PATH``.
    """
    entries = bin_entries(which)

    def find(name: str) -> str | None:
        return f"/run/legato-bin/{name}" if name in entries else which(name)

    return find


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


def ready_title(command: str | Sequence[str]) -> str | None:
    """What a ``launch`` step's window title shows once the app has loaded (``None``: any window will do).

    LibreOffice maps a window before its document is loaded; the document's window is titled with the
    file's name (``report.xlsx - LibreOffice Calc``), or with the component for a new document. Chrome's
    window is titled ``... - Chromium`` once its first page has a title.
    """
    words = command_words(command)
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
    if program == "thunderbird":
        return "Mozilla Thunderbird"
    arguments = [w for w in words[1:] if not w.startswith("-")]
    if program == "nautilus":  # titled with the folder's name once it is listed ("Loading…" before)
        folder = arguments[-1].rstrip("/") if arguments else ""
        return "Home" if folder in ("", "~", "/home/user", "$HOME") else Path(folder).name
    if program == "evince" and arguments:  # "Document Viewer" until the file is loaded
        return Path(arguments[-1]).name
    if program == "code":
        return vscode.ready_title(words)
    if program in ("gimp", "gimp-2.10"):
        images = [w for w in words[names.index(program) + 1 :] if not w.startswith("-")]
        return gimp_title(images[-1]) if images else GIMP_TITLE
    if program == "vlc":
        return VLC_TITLE
    return None


def ready_titles(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """The titles that show a task's setup has loaded: each ``launch`` step's :func:`ready_title`, and for
    each ``open`` step what its app titles the window with once the file is loaded (:func:`open_title`)."""
    titles = []
    for step in steps:
        params = step.get("parameters") or {}
        title = None
        if step.get("type") == "launch":
            title = ready_title(params.get("command", ""))
        elif step.get("type") == "open" and params.get("path"):
            title = open_title(str(params["path"]))
        if title is not None:
            titles.append(title)
    return titles


#: Programs that OSWorld's setups launch and that map no window (the DevTools port forwarder, killers).
WINDOWLESS = frozenset({"socat", "pkill", "killall", "kill", "sleep", "tinyproxy", "xdotool", "wmctrl"})


def opens_window(command: str | Sequence[str]) -> bool:
    """Whether a ``launch`` step's program maps a window (the ready signal waits for one per launch)."""
    words = [Path(word).name for word in command_words(command) if "=" not in word]
    program = next((w for w in words if w not in ("env", "sudo")), "")
    if program in ("libreoffice", "soffice") and ("--convert-to" in words or "--headless" in words):
        return False
    if program == "code" and vscode.cli_only(words):
        return False
    return program not in WINDOWLESS


# ------------------------------------------------------------------------------------ Thunderbird
# OSWorld's Thunderbird tasks unpack a profile archive into ~/.thunderbird, launch /usr/bin/thunderbird, and
# close it in their post-config by its window class, Mail.thunderbird, before the getters read the profile's
# files (prefs.js, xulstore.json, msgFilterRules.dat) under THUNDERBIRD_PROFILE.

#: The profile folder OSWorld's Thunderbird getters read (relative to ``/home/user``).
THUNDERBIRD_PROFILE = ".thunderbird/t5q2a5hp.default-release"
#: Where Thunderbird's own executable lives (Debian and Ubuntu's packages), first found wins.
THUNDERBIRD_DIRS = ("/usr/lib/thunderbird", "/usr/lib64/thunderbird")
#: Thunderbird's system-wide default preferences file (Debian's ``syspref`` folder), extended in the sandbox.
THUNDERBIRD_SYSPREF = "/etc/thunderbird/pref/thunderbird.js"

#: Defaults (not locked: a profile's own prefs.js still wins) that keep what the VM's long-used Thunderbird
#: no longer shows off the screen: the account wizard on a profile without accounts, the "know your rights"
#: bar, the telemetry notice, the start page (a web page; the desktop is offline) and in-app appeals.
THUNDERBIRD_PREFS: tuple[tuple[str, bool], ...] = (
    ("mail.provider.suppress_dialog_on_startup", True),
    ("mail.rights.override", True),
    ("datareporting.policy.dataSubmissionPolicyBypassNotification", True),
    ("datareporting.policy.dataSubmissionEnabled", False),
    ("datareporting.healthreport.uploadEnabled", False),
    ("toolkit.telemetry.enabled", False),
    ("mailnews.start_page.enabled", False),
    ("mail.inappnotifications.enabled", False),
    ("mail.shell.checkDefaultClient", False),
)

#: The baseline profile's accounts: Local Folders only, as a Thunderbird that has been set up once.
_THUNDERBIRD_ACCOUNTS = (
    ("mail.account.account1.server", "server1"),
    ("mail.accountmanager.accounts", "account1"),
    ("mail.accountmanager.localfoldersserver", "server1"),
    ("mail.server.server1.directory-rel", "[ProfD]Mail/Local Folders"),
    ("mail.server.server1.hostname", "Local Folders"),
    ("mail.server.server1.name", "Local Folders"),
    ("mail.server.server1.type", "none"),
    ("mail.server.server1.userName", "nobody"),
)

_THUNDERBIRD_SCRIPT = """#!/bin/sh
# legato: Thunderbird as OSWorld's VM runs it: its main window's class is Mail.thunderbird (what the tasks'
# post-config closes; Thunderbird would otherwise name it after the profile group, thunderbird-default)
export MOZ_APP_LAUNCHER=/usr/bin/thunderbird DICPATH=/usr/share/hunspell
exec {binary} --name=thunderbird --class thunderbird "$@"
"""


def _js(value: object) -> str:
    return json.dumps(value)


def thunderbird_dir() -> Path | None:
    """The folder of Thunderbird's own executable (not Debian's ``/usr/bin/thunderbird`` script), if installed."""
    for folder in THUNDERBIRD_DIRS:
        if os.access(Path(folder, "thunderbird"), os.X_OK):
            return Path(folder)
    return None


def install_hash(folder: str | Path) -> str:
    """Thunderbird's (and Firefox's) install hash of its executable's folder, as ``profiles.ini`` keys it.

    A dedicated profile is recorded per install as ``[Install<hash>] Default=<path>``; without that entry a
    fresh Thunderbird makes a new, empty profile instead of using the one in ``profiles.ini``. The hash is
    CityHash64 of the folder's path in UTF-16, in upper-case hexadecimal (``/usr/lib/thunderbird`` is
    ``FDC34C9F024745EB``, the same on OSWorld's Ubuntu).
    """
    return f"{_city_hash64(str(folder).encode('utf-16-le')):016X}"


def thunderbird_files(folder: str | Path | None = None) -> dict[str, bytes]:
    """Baseline home files (relative to ``/home/user``): one profile at :data:`THUNDERBIRD_PROFILE`, set up.

    Empty when Thunderbird is not installed (``folder``: its executable's folder, found by default).
    """
    install = Path(folder) if folder is not None else thunderbird_dir()
    if install is None:
        return {}
    name = Path(THUNDERBIRD_PROFILE).name
    key = install_hash(install)
    profiles = (
        f"[Profile0]\nName=default-release\nIsRelative=1\nPath={name}\nDefault=1\n\n"
        f"[Install{key}]\nDefault={name}\nLocked=1\n\n[General]\nStartWithLastProfile=1\nVersion=2\n"
    )
    prefs = "".join(f"user_pref({_js(pref)}, {_js(value)});\n" for pref, value in _THUNDERBIRD_ACCOUNTS)
    return {
        ".thunderbird/profiles.ini": profiles.encode(),
        ".thunderbird/installs.ini": f"[{key}]\nDefault={name}\nLocked=1\n".encode(),
        f"{THUNDERBIRD_PROFILE}/prefs.js": prefs.encode(),
    }


#: D-Bus services the sandbox's session bus does not start. Tracker's file indexer answers no query while it
#: sets itself up in the sandbox, and nautilus shows "Loading…" (a spinner: the screen never settles) until
#: its query times out; without the indexer nautilus lists folders at once and searches them itself.
DISABLED_SERVICES = ("org.freedesktop.Tracker3.Miner.Files",)
DBUS_SERVICES = "/usr/share/dbus-1/services"


def system_files() -> dict[str, str]:
    """System files the sandbox shows changed (absolute path inside to text; each exists on the host).

    ``/usr/bin/thunderbird`` starts Thunderbird with the VM's window class, Thunderbird's system-wide
    defaults get :data:`THUNDERBIRD_PREFS`, and the :data:`DISABLED_SERVICES` fail to start. The host's files
    are left as they are.
    """
    files: dict[str, str] = {}
    for name in DISABLED_SERVICES:
        if Path(DBUS_SERVICES, f"{name}.service").is_file():
            files[f"{DBUS_SERVICES}/{name}.service"] = f"[D-BUS Service]\nName={name}\nExec=/bin/false\n"
    folder = thunderbird_dir()
    if folder is None:
        return files
    if Path("/usr/bin/thunderbird").is_file():
        files["/usr/bin/thunderbird"] = _THUNDERBIRD_SCRIPT.format(binary=shlex.quote(str(folder / "thunderbird")))
    syspref = Path(THUNDERBIRD_SYSPREF)
    if syspref.is_file():
        ours = "".join(f"pref({_js(pref)}, {_js(value)});\n" for pref, value in THUNDERBIRD_PREFS)
        files[THUNDERBIRD_SYSPREF] = f"{syspref.read_text()}\n// legato: as OSWorld's VM shows Thunderbird\n{ours}"
    return files


_M64 = (1 << 64) - 1
_K0, _K1, _K2, _K3 = 0xC3A5C85C97CB3127, 0xB492B66FBE98F273, 0x9AE16A3B2F90404F, 0xC949D7C7509E6557


def _f64(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 8], "little")


def _f32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 4], "little")


def _rot(value: int, shift: int) -> int:
    return value if shift == 0 else ((value >> shift) | (value << (64 - shift))) & _M64


def _shift_mix(value: int) -> int:
    return value ^ (value >> 47)


def _hash16(u: int, v: int) -> int:
    mul = 0x9DDFEA08EB382D69
    a = ((u ^ v) * mul) & _M64
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M64
    b ^= b >> 47
    return (b * mul) & _M64


def _weak32(data: bytes, at: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = _f64(data, at), _f64(data, at + 8), _f64(data, at + 16), _f64(data, at + 24)
    a = (a + w) & _M64
    b = _rot((b + a + z) & _M64, 21)
    c = a
    a = (a + x + y) & _M64
    b = (b + _rot(a, 44)) & _M64
    return (a + z) & _M64, (b + c) & _M64


def _city_short(data: bytes) -> int:
    n = len(data)
    if n > 16:  # 17 to 32 bytes
        a, b = (_f64(data, 0) * _K1) & _M64, _f64(data, 8)
        c, d = (_f64(data, n - 8) * _K2) & _M64, (_f64(data, n - 16) * _K0) & _M64
        return _hash16((_rot((a - b) & _M64, 43) + _rot(c, 30) + d) & _M64, (a + _rot(b ^ _K3, 20) - c + n) & _M64)
    if n > 8:
        a, b = _f64(data, 0), _f64(data, n - 8)
        return _hash16(a, _rot((b + n) & _M64, n)) ^ b
    if n >= 4:
        return _hash16((n + (_f32(data, 0) << 3)) & _M64, _f32(data, n - 4))
    if n:
        y, z = data[0] + (data[n >> 1] << 8), n + (data[n - 1] << 2)
        return (_shift_mix(((y * _K2) ^ (z * _K3)) & _M64) * _K2) & _M64
    return _K2


def _city_medium(data: bytes) -> int:  # 33 to 64 bytes
    n = len(data)
    z, a = _f64(data, 24), (_f64(data, 0) + (n + _f64(data, n - 16)) * _K0) & _M64
    b, c = _rot((a + z) & _M64, 52), _rot(a, 37)
    a = (a + _f64(data, 8)) & _M64
    c = (c + _rot(a, 7)) & _M64
    a = (a + _f64(data, 16)) & _M64
    vf, vs = (a + z) & _M64, (b + _rot(a, 31) + c) & _M64
    a, z = (_f64(data, 16) + _f64(data, n - 32)) & _M64, _f64(data, n - 8)
    b, c = _rot((a + z) & _M64, 52), _rot(a, 37)
    a = (a + _f64(data, n - 24)) & _M64
    c = (c + _rot(a, 7)) & _M64
    a = (a + _f64(data, n - 16)) & _M64
    wf, ws = (a + z) & _M64, (b + _rot(a, 31) + c) & _M64
    r = _shift_mix(((vf + ws) * _K2 + (wf + vs) * _K0) & _M64)
    return (_shift_mix((r * _K0 + vs) & _M64) * _K2) & _M64


def _city_hash64(data: bytes) -> int:
    """Google's CityHash64 (v1.0.3, the version Mozilla ships), for :func:`install_hash`."""
    n = len(data)
    if n <= 32:
        return _city_short(data)
    if n <= 64:
        return _city_medium(data)
    x, y = _f64(data, n - 40), (_f64(data, n - 16) + _f64(data, n - 56)) & _M64
    z = _hash16((_f64(data, n - 48) + n) & _M64, _f64(data, n - 24))
    v, w = _weak32(data, n - 64, n, z), _weak32(data, n - 32, (y + _K1) & _M64, x)
    x = (x * _K1 + _f64(data, 0)) & _M64
    for at in range(0, (n - 1) & ~63, 64):
        x = (_rot((x + y + v[0] + _f64(data, at + 8)) & _M64, 37) * _K1) & _M64
        y = (_rot((y + v[1] + _f64(data, at + 48)) & _M64, 42) * _K1) & _M64
        x ^= w[1]
        y = (y + v[0] + _f64(data, at + 40)) & _M64
        z = (_rot((z + w[0]) & _M64, 33) * _K1) & _M64
        v = _weak32(data, at, (v[1] * _K1) & _M64, (x + w[0]) & _M64)
        w = _weak32(data, at + 32, (z + w[1]) & _M64, (y + _f64(data, at + 16)) & _M64)
        z, x = x, z
    return _hash16((_hash16(v[0], w[0]) + _shift_mix(y) * _K1 + z) & _M64, (_hash16(v[1], w[1]) + x) & _M64)


# ------------------------------------------------------------------------------------ terminal, files, PDFs

#: The programs the desktop's terminal shortcut (ctrl+alt+t, as GNOME binds it) may run, first found wins.
TERMINALS = ("gnome-terminal", "xterm")
#: Shell start-up files a fresh Ubuntu home has (copied from ``/etc/skel``): the prompt, and the terminal
#: title ``user@host: dir`` that OSWorld's ``wmctrl -lx`` checks read.
SKELETON = ("/etc/skel/.bashrc", "/etc/skel/.profile", "/etc/skel/.bash_logout")


def openbox_keybinds(which: Any = shutil.which) -> str:
    """openbox ``<keybind>`` rules of the VM's GNOME that run a program (inside the sandbox): ctrl+alt+t."""
    terminal = next((name for name in TERMINALS if which(name)), None)
    if terminal is None:
        return ""
    return f'    <keybind key="C-A-t"><action name="Execute"><command>{terminal}</command></action></keybind>\n'


def skeleton_files() -> dict[str, bytes]:
    """The home's shell start-up files from ``/etc/skel`` (those that exist), relative to ``/home/user``."""
    return {Path(path).name: Path(path).read_bytes() for path in SKELETON if Path(path).is_file()}


# ------------------------------------------------------------------------------------ GIMP and VLC
# OSWorld's GIMP tasks launch `gimp FILE`, export with shift+ctrl+e in their post-config, and read GIMP's
# profile (gimprc, sessionrc, action-history) under GIMP_PROFILE; its VLC tasks launch `vlc --no-audio`, read
# ~/.config/vlc/vlcrc, and ask VLC's HTTP interface (port 8080, password "password") what it plays.

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
    """The baseline home's VLC configuration (:data:`VLC_SETTINGS`) and GIMP's window layout.

    GIMP's layout is its system default (single-window mode, docks shown) with the window maximized, as
    the VM's GNOME shows it: GIMP itself restores its window's size and un-maximizes it after mapping, so a
    window manager rule alone does not hold. The rest of GIMP's profile comes from a first start
    (:data:`GIMP_WARMUP`). Without GIMP's system ``sessionrc``, only VLC's file.
    """
    files = {VLC_CONFIG: vlcrc().encode()}
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


def open_title(path: str) -> str:
    """What the window of the app an ``open`` step starts for ``path`` shows once the file is loaded: GIMP's
    ``[name]`` for images, VLC's title for media, else the file's name (LibreOffice, the PDF viewer)."""
    suffix = Path(path).suffix.lower()
    if suffix in VLC_MEDIA:
        return VLC_TITLE
    if path.rstrip("/") in ("/home/user", "~"):  # the file manager titles the home folder "Home"
        return "Home"
    return gimp_title(path) or Path(path).name


def vlc_http_installed(which: Any = shutil.which) -> bool:
    """Whether VLC and its Lua HTTP interface (``vlc-plugin-base``'s ``lua/intf/http.luac``) are installed."""
    if not which("vlc"):
        return False
    patterns = ("vlc/lua/intf/http.lua*", "*/vlc/lua/intf/http.lua*")
    return any(any(Path(root).glob(pattern)) for root in _LIB_ROOTS for pattern in patterns)


_LIB_ROOTS = ("/usr/lib", "/usr/lib64", "/usr/local/lib")
