"""The desktop's session (``LocalOptions.session``): openbox with the VM's look (``"lookalike"``, the default:
:mod:`.lookalike`, :mod:`.panel`), openbox alone on a black root window, or GNOME Shell as the VM has it.

``"gnome"`` runs Debian's GNOME Shell 43 as the X11 window manager and compositor (Mesa's software GL) inside
the sandbox, in a session mode of legato's own (:data:`MODE`): the Yaru shell theme, the Ubuntu dock
(``dash-to-dock``, with the settings Ubuntu's ``ubuntu-dock`` ships) and the VM's launchers in the VM's
order (:data:`FAVORITES`). The settings are schema overrides compiled into a folder of the desktop's own
(:func:`write_gnome_files`): they are the defaults, as Ubuntu's own overrides are on the VM, so ``gsettings
reset`` gives them back and a task's ``gsettings set`` changes them in the session's dconf as on the VM. A small
extension of legato's own (:data:`READY_EXTENSION`) marks the session ready once the shell's start-up is
complete, as openbox's ``--startup`` does, and binds ctrl+alt+t to the terminal as the VM's does (Ubuntu's
settings daemon binds it; Debian's 43 has no such key: :data:`SHORTCUT_SCHEMA`).
"""

from __future__ import annotations

import functools
import json
import logging
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from legato_gym.backends.local.apps.catalog import window_table
from legato_gym.backends.local.apps.gnome import terminal_command
from legato_gym.errors import MissingDependencyError

logger = logging.getLogger(__name__)

__all__ = [
    "APP_WINDOWS",
    "FAVORITES",
    "GNOME_DIR",
    "MODE",
    "READY_EXTENSION",
    "SESSIONS",
    "gnome_environment",
    "gnome_installed",
    "lookalike_schemas",
    "openbox_applications",
    "opens_as",
    "prelude",
    "session_environment",
    "wm_command",
    "write_gnome_files",
]

#: The sessions a local desktop can run (``LocalOptions.session``): openbox alone, GNOME Shell, or openbox with
#: legato's own top bar and dock that look and act as the VM's (:mod:`.lookalike`, :mod:`.panel`).
SESSIONS = ("openbox", "gnome", "lookalike")
#: Where the desktop's GNOME files are bound inside the sandbox (data folder and compiled schemas).
GNOME_DIR = "/run/legato-gnome"
#: The GNOME Shell session mode (``gnome-shell --mode``), as Ubuntu's ``ubuntu`` mode is.
MODE = "legato"
DASH_TO_DOCK = "dash-to-dock@micxgx.gmail.com"
READY_EXTENSION = "legato-ready@legato"
#: The sandbox's own system bus (:func:`prelude`), in its runtime folder.
SYSTEM_BUS = "/tmp/runtime-user/system-bus"
SYSTEM_SCHEMAS = Path("/usr/share/glib-2.0/schemas")

#: The VM's dock launchers, top to bottom (reference/osworld-vm-look.md); those not installed are left out
#: by GNOME Shell itself (Ubuntu Software, Help here).
FAVORITES = (
    "google-chrome.desktop",
    "thunderbird.desktop",
    "code.desktop",
    "vlc.desktop",
    "libreoffice-writer.desktop",
    "libreoffice-calc.desktop",
    "libreoffice-impress.desktop",
    "gimp.desktop",
    "org.gnome.Nautilus.desktop",
    "snap-store_ubuntu-software.desktop",
    "yelp.desktop",
)

#: The VM's settings (Ubuntu 22.04's ``ubuntu-settings`` and ``ubuntu-dock`` overrides), and no animations:
#: the shell's transitions would keep the screen changing for a quarter of a second after each click.
_OVERRIDES = {
    "org.gnome.shell": {
        "favorite-apps": "[" + ", ".join(f"'{app}'" for app in FAVORITES) + "]",
        "enabled-extensions": f"['{DASH_TO_DOCK}', '{READY_EXTENSION}']",
        "welcome-dialog-last-shown-version": "'999'",
    },
    "org.gnome.desktop.interface": {
        "enable-animations": "false",
        "gtk-theme": "'Yaru'",
        "icon-theme": "'Yaru'",
        "cursor-theme": "'Yaru'",
        "clock-show-date": "true",
        "enable-hot-corners": "true",
    },
    "org.gnome.desktop.wm.preferences": {"button-layout": "':minimize,maximize,close'"},
    "org.gnome.desktop.background": {
        "picture-uri": f"'file://{GNOME_DIR}/share/backgrounds/legato-jammy.png'",
        "picture-uri-dark": f"'file://{GNOME_DIR}/share/backgrounds/legato-jammy.png'",
        "picture-options": "'zoom'",
        "primary-color": "'#2c001e'",
    },
    "org.gnome.desktop.screensaver": {"lock-enabled": "false", "idle-activation-enabled": "false"},
    "org.gnome.desktop.session": {"idle-delay": "uint32 0"},
    "org.gnome.mutter": {"dynamic-workspaces": "true", "edge-tiling": "true"},
    "org.gnome.shell.extensions.dash-to-dock": {
        "dock-fixed": "true",
        "extend-height": "true",
        "dock-position": "'LEFT'",
        "dash-max-icon-size": "48",
        "icon-size-fixed": "true",
        "show-apps-at-top": "false",
        "show-trash": "true",
        "show-mounts": "true",
        "disable-overview-on-startup": "true",
        "running-indicator-style": "'DOTS'",
        "custom-theme-shrink": "true",
        "transparency-mode": "'FIXED'",
        "background-opacity": "0.8",
        "apply-custom-theme": "false",
        "animation-time": "0.0",
        "show-delay": "0.0",
        "hide-delay": "0.0",
    },
}

#: How each app's window opens on the VM, by its ``WM_CLASS`` class as the app sets it (a trailing ``*``
#: matches any rest): ``"maximized"`` (into the work area right of the dock and under the top bar) or ``"own
#: size"`` (where and as large as the app asks). Windows of a class not listed open at their own size, as
#: GNOME opens them. Drawn from each app's record (:attr:`.apps.catalog.App.window`): the one table for every
#: session. GNOME's extension applies it, openbox's rules are made from it (:func:`openbox_applications`).
#: Only normal windows are maximized (not an app's dialogs). On the VM Files opens at its own size (its
#: screenshot: mutter maximizes only windows nearly as large as the screen).
APP_WINDOWS: dict[str, str] = dict(window_table())


def opens_as(wm_class: str) -> str:
    """How a window of ``WM_CLASS`` class ``wm_class`` opens (:data:`APP_WINDOWS`, case-insensitively)."""
    cls = wm_class.lower()
    for pattern, how in APP_WINDOWS.items():
        pattern = pattern.lower()
        if cls == pattern or (pattern.endswith("*") and cls.startswith(pattern[:-1])):
            return how
    return "own size"


def openbox_applications() -> str:
    """openbox's ``<applications>`` rules made from :data:`APP_WINDOWS` (openbox matches the class as spelt)."""
    rules = [
        f'    <application class="{pattern}" type="normal"><maximized>yes</maximized></application>\n'
        for pattern, how in APP_WINDOWS.items()
        if how == "maximized"
    ]
    return "  <applications>\n" + "".join(rules) + "  </applications>\n"


_EXTENSION_JS = """// legato: marks the session ready (the file named by LEGATO_WM_READY) once GNOME Shell's start-up
// is done, opens the windows of the apps that open maximized on the VM maximized (windows.json: legato's table),
// and opens the terminal on ctrl+alt+t as the VM's (Ubuntu's) settings daemon does (shortcuts.json)
const { Gio, GLib, Meta, Shell } = imports.gi;
const Main = imports.ui.main;
const Me = imports.misc.extensionUtils.getCurrentExtension();

let _table = {};
let _created = 0;
let _keys = null;

function _read(name) {
    const [, bytes] = GLib.file_get_contents(`${Me.path}/${name}`);
    return JSON.parse(new TextDecoder().decode(bytes));
}

function _bindTerminal() {
    const command = _read('shortcuts.json').terminal;
    if (!command)
        return;
    _keys = new Gio.Settings({ schema_id: 'org.gnome.shell.extensions.legato' });
    Main.wm.addKeybinding('terminal', _keys, Meta.KeyBindingFlags.IGNORE_AUTOREPEAT,
        Shell.ActionMode.NORMAL | Shell.ActionMode.OVERVIEW, () => {
            try {
                GLib.spawn_command_line_async(command);
            } catch (e) {
                logError(e, 'legato: the terminal shortcut');
            }
        });
}

function _opensMaximized(window) {
    if (window.get_window_type() !== Meta.WindowType.NORMAL)
        return false;
    const cls = (window.get_wm_class() || '').toLowerCase();
    for (const [spelt, how] of Object.entries(_table)) {
        const pattern = spelt.toLowerCase();
        const hit = pattern.endsWith('*') ? cls.startsWith(pattern.slice(0, -1)) : cls === pattern;
        if (hit)
            return how === 'maximized';
    }
    return false;
}

function _ready() {
    const path = GLib.getenv('LEGATO_WM_READY');
    if (path)
        GLib.file_set_contents(path, '');
}

function init() {}

function enable() {
    _table = _read('windows.json');
    _bindTerminal();
    _created = global.display.connect('window-created', (display, window) => {
        if (_opensMaximized(window))
            window.maximize(Meta.MaximizeFlags.BOTH);
    });
    if (Main.layoutManager._startingUp)
        Main.layoutManager.connect('startup-complete', () => _ready());
    else
        _ready();
}

function disable() {
    global.display.disconnect(_created);
    if (_keys !== null)
        Main.wm.removeKeybinding('terminal');
    _keys = null;
}
"""

#: The extension's settings schema: the terminal shortcut's keys, Ubuntu's (its settings daemon's ``terminal``
#: media key, which Debian's gnome-settings-daemon 43 does not have).
SHORTCUT_SCHEMA = "org.gnome.shell.extensions.legato"
_SCHEMA_XML = f"""<?xml version="1.0" encoding="UTF-8"?>
<schemalist>
  <schema id="{SHORTCUT_SCHEMA}" path="/org/gnome/shell/extensions/legato/">
    <key name="terminal" type="as">
      <default>['&lt;Primary&gt;&lt;Alt&gt;t']</default>
      <summary>Launch terminal</summary>
    </key>
  </schema>
</schemalist>
"""


def gnome_installed() -> bool:
    """Whether GNOME Shell and the Ubuntu dock (``dash-to-dock``) are installed."""
    return shutil.which("gnome-shell") is not None and Path("/usr/share/gnome-shell/extensions", DASH_TO_DOCK).is_dir()


def require_gnome() -> None:
    """Raise :class:`MissingDependencyError` naming the Debian packages of the GNOME session when one is missing."""
    if not gnome_installed() or shutil.which("glib-compile-schemas") is None:
        raise MissingDependencyError(
            "the local option session='gnome' needs GNOME Shell and the Ubuntu dock; install them with "
            "`apt-get install -y --no-install-recommends gnome-shell gnome-shell-extension-dashtodock "
            "yaru-theme-gnome-shell yaru-theme-gtk yaru-theme-icon libglib2.0-bin`, or use session='openbox'"
        )


#: VS Code's launcher, third in the VM's dock: ``code`` runs code-server in a Chromium app window here
#: (:mod:`..vscode`); the icon is the theme's text editor, VS Code's own is not in Debian.
_CODE_DESKTOP = """[Desktop Entry]
Name=Visual Studio Code
Comment=Code Editing. Redefined.
Exec=code %F
Icon=accessories-text-editor
Type=Application
StartupWMClass=Code
Categories=Utility;TextEditor;Development;IDE;
"""

#: The wallpaper's file name (in the desktop's GNOME data folder): a gradient in the colours of Ubuntu 22.04's
#: default wallpaper (the VM's "Jammy Jellyfish"), whose artwork is not in Debian.
WALLPAPER = "legato-jammy.png"
#: The wallpaper's colours, read from the VM's screenshot: its top left and its bottom right.
_WALLPAPER_STOPS = ((0x2C, 0x00, 0x1E), (0xA2, 0x2C, 0x1B))


def _write_wallpaper(path: Path, size: tuple[int, int] = (960, 540)) -> None:
    import numpy as np
    from PIL import Image

    width, height = size
    ramp = (np.linspace(0, 1, width)[None, :] * 0.6 + np.linspace(0, 1, height)[:, None] * 0.4)[..., None]
    start, end = (np.array(stop, dtype=np.float64) for stop in _WALLPAPER_STOPS)
    pixels = (start + (end - start) * ramp**1.5).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels, "RGB").save(path)


#: The lookalike session's settings: the VM's favourites, which its dock shows (:mod:`.panel`). Only those: its
#: apps take their look from xsettingsd, not from GSettings (:func:`session_environment`).
LOOKALIKE_OVERRIDES = {"org.gnome.shell": {"favorite-apps": _OVERRIDES["org.gnome.shell"]["favorite-apps"]}}


def _override_file(overrides: dict[str, dict[str, str]] = _OVERRIDES) -> str:
    lines = []
    for schema, keys in overrides.items():
        lines.append(f"[{schema}]")
        lines.extend(f"{key}={value}" for key, value in keys.items())
        lines.append("")
    return "\n".join(lines)


def write_gnome_files(folder: Path) -> None:
    """Write the GNOME session's files into ``folder`` (bound at :data:`GNOME_DIR`): the session mode, the
    ready extension, and the system's schemas compiled with legato's overrides."""
    require_gnome()
    share = folder / "share" / "gnome-shell"
    (share / "modes").mkdir(parents=True, exist_ok=True)
    mode = {
        "parentMode": "user",
        "stylesheetName": "Yaru/gnome-shell.css",
        "themeResourceName": "theme/Yaru/gnome-shell-theme.gresource",
        "enabledExtensions": [DASH_TO_DOCK, READY_EXTENSION],
    }
    (share / "modes" / f"{MODE}.json").write_text(json.dumps(mode, indent=2))
    extension = share / "extensions" / READY_EXTENSION
    extension.mkdir(parents=True, exist_ok=True)
    metadata = {
        "uuid": READY_EXTENSION,
        "name": "legato ready",
        "description": "Marks the session ready for legato; opens the VM's maximized apps maximized",
        "shell-version": ["43"],
    }
    (extension / "metadata.json").write_text(json.dumps(metadata))
    (extension / "extension.js").write_text(_EXTENSION_JS)
    (extension / "windows.json").write_text(json.dumps(APP_WINDOWS))
    (extension / "shortcuts.json").write_text(json.dumps({"terminal": terminal_command()}))
    (folder / "share" / "applications").mkdir(exist_ok=True)
    (folder / "share" / "applications" / "code.desktop").write_text(_CODE_DESKTOP)
    _write_wallpaper(folder / "share" / "backgrounds" / WALLPAPER)
    schemas = folder / "schemas"
    _compile_schemas(schemas, _OVERRIDES, {f"{SHORTCUT_SCHEMA}.gschema.xml": _SCHEMA_XML})


def _compile_schemas(schemas: Path, overrides: dict[str, dict[str, str]], extra: dict[str, str]) -> None:
    """Compile the system's schemas, the ``extra`` schema files (name: text) and ``overrides`` into ``schemas``."""
    schemas.mkdir(parents=True, exist_ok=True)
    for source in SYSTEM_SCHEMAS.iterdir():
        if source.suffix in (".xml", ".override"):
            shutil.copyfile(source, schemas / source.name)
    (schemas / "99_legato.gschema.override").write_text(_override_file(overrides))
    for name, text in extra.items():
        (schemas / name).write_text(text)
    subprocess.run(["glib-compile-schemas", str(schemas)], check=True, capture_output=True, timeout=60)


@functools.lru_cache(maxsize=1)
def lookalike_schemas() -> bytes | None:
    """The lookalike session's compiled schemas (``gschemas.compiled``): the system's, with the VM's favourites
    as ``org.gnome.shell favorite-apps``' default (:data:`LOOKALIKE_OVERRIDES`), so that ``gsettings reset``
    gives them back and a ``gsettings set`` changes them in the session's dconf as on the VM. Compiled once per
    process; ``None`` where ``glib-compile-schemas`` or GNOME Shell's schema is not installed (the dock then shows
    the VM's launchers, and a task that reads the setting is refused: :mod:`..coverage`)."""
    if shutil.which("glib-compile-schemas") is None or not (SYSTEM_SCHEMAS / "org.gnome.shell.gschema.xml").is_file():
        return None
    with tempfile.TemporaryDirectory(prefix="legato-schemas-") as folder:
        try:
            _compile_schemas(Path(folder), LOOKALIKE_OVERRIDES, {})
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning("could not compile the lookalike session's GSettings schemas: %s", exc)
            return None
        return (Path(folder) / "gschemas.compiled").read_bytes()


def gnome_environment() -> dict[str, str]:
    """The environment inside a GNOME session's sandbox, as the VM's session has it."""
    return {
        "XDG_DATA_DIRS": f"{GNOME_DIR}/share:/usr/local/share:/usr/share",
        "GSETTINGS_SCHEMA_DIR": f"{GNOME_DIR}/schemas",
        "XDG_SESSION_TYPE": "x11",
        "XDG_CURRENT_DESKTOP": "ubuntu:GNOME",
        "XDG_SESSION_DESKTOP": "ubuntu",
        "DESKTOP_SESSION": "ubuntu",
        "GNOME_SHELL_SESSION_MODE": MODE,
        "LIBGL_ALWAYS_SOFTWARE": "1",
        "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={SYSTEM_BUS}",
    }


#: The lookalike session's pointer: Yaru's cursors, at GNOME's size, as the VM's (openbox and the apps load
#: them through libXcursor), so that the pointer pasted into screenshots looks as OSWorld's server pastes it.
LOOKALIKE_ENVIRONMENT = {"XCURSOR_THEME": "Yaru", "XCURSOR_SIZE": "24"}


def session_environment(session: str) -> dict[str, str]:
    """The variables ``session`` adds to the sandbox's environment (:func:`gnome_environment` for GNOME)."""
    if session == "gnome":
        return gnome_environment()
    if session != "lookalike":
        return {}
    from legato_gym.backends.local.sandbox import fonts, xfwm
    from legato_gym.backends.local.sandbox.lookalike import FONTCONFIG_NAME, LOOKALIKE_DIR, SCHEMAS_NAME

    found = dict(LOOKALIKE_ENVIRONMENT) if Path("/usr/share/icons/Yaru/cursors").is_dir() else {}
    if lookalike_schemas() is not None:  # the VM's favourites by default (.lookalike.write_lookalike_files)
        found["GSETTINGS_SCHEMA_DIR"] = f"{LOOKALIKE_DIR}/{SCHEMAS_NAME}"
    if fonts.installed():  # the Ubuntu fonts' folders (.fonts.fontconfig_conf), for the title bars and the apps
        found["FONTCONFIG_FILE"] = f"{LOOKALIKE_DIR}/{FONTCONFIG_NAME}"
    if xfwm.installed():  # xfwm4's settings, system files xfconfd reads before /etc/xdg's (.xfwm.write_files)
        found["XDG_CONFIG_DIRS"] = f"{LOOKALIKE_DIR}/{xfwm.CONFIG_NAME}:/etc/xdg"
    return found


def prelude(session: str, marker: str = "") -> str:
    """The entry's part that runs before the session's window manager: for GNOME, an empty system bus; for
    the lookalike session, its panel (:mod:`.panel`, restarted if it exits), which creates ``marker`` once
    the window manager keeps maximized windows off its top bar and dock.

    GNOME Shell's status indicators connect to the system bus at start-up (and the shell exits when they
    cannot); the sandbox has no host bus to reach, so it gets a bus of its own with no service on it: the
    indicators show what the VM's show with nothing to report (no battery, no network manager).
    """
    if session == "lookalike":
        from legato_gym.backends.local.sandbox import fonts
        from legato_gym.backends.local.sandbox.lookalike import LOOKALIKE_DIR, XSETTINGS_NAME

        panel = f"python {LOOKALIKE_DIR}/panel.py {LOOKALIKE_DIR} {marker}"
        settings = ""  # the VM's GTK settings (.fonts.XSETTINGS) for the apps, as its gsd-xsettings gives them
        if fonts.xsettingsd_installed():
            xsettingsd = f"xsettingsd -c {LOOKALIKE_DIR}/{XSETTINGS_NAME}"
            settings = f"(while :; do {xsettingsd}; sleep 1; done) </dev/null >/dev/null 2>&1 4>&- & "
        return f"{settings}(while :; do {panel}; sleep 0.2; done) </dev/null >/dev/null 2>&1 4>&- & "
    if session != "gnome":
        return ""
    return (
        f"dbus-daemon --session --address=unix:path={SYSTEM_BUS} --nofork --nopidfile "
        "</dev/null >/dev/null 2>&1 4>&- & "
        f"while [ ! -S {SYSTEM_BUS} ]; do sleep 0.005; done; "
    )


def wm_command(session: str, openbox: str, marker: str) -> str:
    """The shell command that runs the session's window manager once; it creates ``marker`` when ready.

    ``openbox`` is openbox's own command without ``--startup``: alone, it touches the marker from there; in the
    lookalike session the panel does (:func:`prelude`), whose window manager is xfwm4 (:mod:`.xfwm`), or openbox
    where xfwm4 is not installed.
    """
    if session == "openbox":
        return f"{openbox} --startup {shlex.quote('touch ' + marker)}"
    if session == "lookalike":
        from legato_gym.backends.local.sandbox import xfwm

        return xfwm.command() if xfwm.installed() else openbox
    return f"LEGATO_WM_READY={marker} gnome-shell --x11 --replace --mode={MODE}"
