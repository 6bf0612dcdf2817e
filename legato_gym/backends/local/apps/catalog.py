"""One record per app: everything the local desktop needs to know of it, in one place.

Each :class:`App` says which executables provide the app, the names OSWorld's tasks call it by
(``related_apps``), the files of its baseline home and the MIME types it opens, how the window manager places
its window, when a ``launch`` of it is ready, when its settings reach the disk, what a first start warms up,
and its launchers on the VM's dock. Every consumer iterates :data:`APPS` instead of keeping a table of its
own: the coverage check (``coverage.APPS``), the MIME defaults and openbox's rules (:mod:`.gnome`), the ready
signal (:mod:`.ready`), the write-back wait (``writeback.WRITERS``), the baseline home and GIMP's warm-up
(``lifecycle``), and, for the GNOME session, :func:`window_table` and :func:`dock_launchers`. Adding an app
is one record here (and its module beside this one when it needs files of its own).

Example::

    from legato_gym.backends.local.apps.catalog import APPS, app_for_program
    app_for_program("soffice").name  # "libreoffice"
    [app.name for app in APPS if app.window and app.window.maximized]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from legato_gym.backends.local import vscode
from legato_gym.backends.local.apps.chrome import chrome_files
from legato_gym.backends.local.apps.media import (
    GIMP_PROFILE,
    GIMP_TITLE,
    GIMP_TYPES,
    GIMP_WARMUP,
    VLC_MEDIA,
    VLC_TITLE,
    VLC_TYPES,
    gimp_files,
    gimp_profile_key,
    gimp_title,
    vlc_files,
)
from legato_gym.backends.local.apps.office import libreoffice_files
from legato_gym.backends.local.apps.thunderbird import thunderbird_files

__all__ = [
    "APPS",
    "VM_ONLY_LAUNCHERS",
    "App",
    "ReadyRule",
    "WarmUp",
    "WindowRule",
    "WriteBack",
    "app_for_program",
    "app_named",
    "dock_launchers",
    "window_table",
]


@dataclass(frozen=True)
class WindowRule:
    """How the VM's GNOME places the app's windows (openbox's rules, and the GNOME session's table).

    Attributes:
        classes: the window classes (``WM_CLASS``) as openbox matches them; ``*`` is a wildcard.
        maximized: its normal windows (not its dialogs) open maximized; ``False``: at the window's own size.
    """

    classes: tuple[str, ...]
    maximized: bool


@dataclass(frozen=True)
class ReadyRule:
    """When a ``launch`` of the app is ready: the title its window shows once the app has loaded.

    Attributes:
        programs: the program names a ``launch`` command runs it by.
        title: ``title(words, program)`` for the launch command's words and the program among them; ``None``:
            any window of it will do.
        windowless: ``windowless(names)`` for the command's words (file names): the launch maps no window (a
            conversion, a CLI call), so the ready signal does not wait for one.
        open_title: ``open_title(path)``: what its window shows once an ``open`` step's file has loaded in it;
            ``None``: the file is not one of its own.
        keeps_loading: a ready title ending with this means the app keeps working for seconds after showing it.
    """

    programs: frozenset[str]
    title: Callable[[Sequence[str], str], str | None]
    windowless: Callable[[Sequence[str]], bool] | None = None
    open_title: Callable[[str], str | None] | None = None
    keeps_loading: str | None = None


@dataclass(frozen=True)
class WriteBack:
    """The app writes its settings a while after a change; grading waits for it (``writeback``).

    Attributes:
        processes: its process names (``/proc/PID/comm``, 15 characters at most).
        paths: the folders it writes, relative to the home or absolute under ``/home/user``.
        getters: OSWorld getter types that read those files.
        delay_s: how long after the last change the file is on disk, with a margin.
    """

    processes: frozenset[str]
    paths: tuple[str, ...]
    getters: frozenset[str]
    delay_s: float


@dataclass(frozen=True)
class WarmUp:
    """What the app's first start writes into its profile, made once per host and kept (``lifecycle``).

    Attributes:
        command: run in the first sandbox, before the baseline home is captured.
        profile: the home-relative folder it fills, kept beside the desktops' state folders.
        key: a name for the prepared profile on this host, which changes with the install; ``None``: the app
            is not installed (no warm-up).
    """

    command: str
    profile: str
    key: Callable[[], str | None]


@dataclass(frozen=True)
class App:
    """One app of OSWorld's VM as the local desktop carries it.

    Attributes:
        name: the app's key (coverage verdicts and messages name it).
        executables: the executables that provide it, looked up on ``PATH`` (first found wins), and the
            programs of setup ``launch`` commands that count as it.
        related: ``related_apps`` spellings in OSWorld's data that name it (lower case).
        mime: ``(desktop file, MIME types)``: the types the VM opens in it by default (``mimeapps.list``).
        files: the files of its baseline home (paths relative to ``/home/user``).
        window: how its windows are placed (``None``: as the window manager likes).
        ready: when a ``launch`` of it is ready (``None``: once a window maps).
        write_back: its late settings writes (``None``: it writes at once).
        warm_up: its first start, made once per host (``None``: none needed).
        launchers: its desktop files on the VM's dock, top to bottom.
        dock_slot: where its launchers sit on the VM's dock (``None``: not on the dock).
    """

    name: str
    executables: tuple[str, ...]
    related: tuple[str, ...] = ()
    mime: tuple[tuple[str, tuple[str, ...]], ...] = ()
    files: Callable[[], Mapping[str, bytes]] | None = None
    window: WindowRule | None = None
    ready: ReadyRule | None = None
    write_back: WriteBack | None = None
    warm_up: WarmUp | None = None
    launchers: tuple[str, ...] = ()
    dock_slot: int | None = None


# ----------------------------------------------------------------------------------------- ready rules

_OFFICE_TITLES = {"--calc": "LibreOffice Calc", "--writer": "LibreOffice Writer", "--impress": "LibreOffice Impress"}
_DOCUMENT = (".xlsx", ".xls", ".ods", ".csv", ".docx", ".doc", ".odt", ".rtf", ".pptx", ".ppt", ".odp", ".pdf")


def _office_title(words: Sequence[str], program: str) -> str | None:
    # LibreOffice maps a window before its document is loaded; the document's window is titled with the
    # file's name (``report.xlsx - LibreOffice Calc``), or with the component for a new document.
    if "--convert-to" in words or "--headless" in words:
        return None
    documents = [Path(w).name for w in words[1:] if w.lower().endswith(_DOCUMENT)]
    if documents:
        return documents[-1]
    for flag, title in _OFFICE_TITLES.items():
        if flag in words:
            return title
    return "LibreOffice"


def _arguments(words: Sequence[str]) -> list[str]:
    return [w for w in words[1:] if not w.startswith("-")]


def _nautilus_title(words: Sequence[str], program: str) -> str | None:
    # titled with the folder's name once it is listed ("Loading…" before)
    arguments = _arguments(words)
    folder = arguments[-1].rstrip("/") if arguments else ""
    return "Home" if folder in ("", "~", "/home/user", "$HOME") else Path(folder).name


def _evince_title(words: Sequence[str], program: str) -> str | None:
    arguments = _arguments(words)  # "Document Viewer" until the file is loaded
    return Path(arguments[-1]).name if arguments else None


def _gimp_title(words: Sequence[str], program: str) -> str | None:
    names = [Path(word).name for word in words]
    images = [w for w in words[names.index(program) + 1 :] if not w.startswith("-")]
    return gimp_title(images[-1]) if images else GIMP_TITLE


def _office_windowless(names: Sequence[str]) -> bool:
    return "--convert-to" in names or "--headless" in names


def _home_title(path: str) -> str | None:
    return "Home" if path.rstrip("/") in ("/home/user", "~") else None  # the file manager titles it "Home"


def _vlc_open_title(path: str) -> str | None:
    return VLC_TITLE if Path(path).suffix.lower() in VLC_MEDIA else None


def _fixed(title: str) -> Callable[[Sequence[str], str], str | None]:
    def rule(words: Sequence[str], program: str) -> str | None:
        return title

    return rule


def _code_title(words: Sequence[str], program: str) -> str | None:
    return vscode.ready_title(words)


# ------------------------------------------------------------------------------------------------ apps

_OFFICE_TYPES = {
    "libreoffice-calc.desktop": (
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/vnd.ms-excel",
        "application/vnd.oasis.opendocument.spreadsheet",
        "text/csv",
    ),
    "libreoffice-writer.desktop": (
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/msword",
        "application/vnd.oasis.opendocument.text",
        "application/rtf",
    ),
    "libreoffice-impress.desktop": (
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "application/vnd.ms-powerpoint",
        "application/vnd.oasis.opendocument.presentation",
    ),
}


def _media_files() -> Mapping[str, bytes]:
    return {**vlc_files(), **gimp_files()}


#: The apps, in the order of the VM's ``mimeapps.list`` (the order :data:`.gnome.MIME_DEFAULTS` keeps).
APPS: tuple[App, ...] = (
    App(
        "libreoffice",
        ("libreoffice", "soffice"),
        related=(
            "libreoffice",
            "libreoffice_calc",
            "libreoffice calc",
            "libreoffice_writer",
            "libreoffice_impress",
            "calc",
            "writer",
        ),
        mime=tuple(_OFFICE_TYPES.items()),
        files=libreoffice_files,
        window=WindowRule(("libreoffice*", "Soffice"), maximized=True),
        ready=ReadyRule(frozenset({"libreoffice", "soffice"}), _office_title, windowless=_office_windowless),
        # configmgr's WriteThread writes one second after the last modification
        write_back=WriteBack(frozenset({"soffice.bin"}), (".config/libreoffice/",), frozenset(), 2.0),
        launchers=("libreoffice-writer.desktop", "libreoffice-calc.desktop", "libreoffice-impress.desktop"),
        dock_slot=4,
    ),
    App(
        "chrome",
        ("google-chrome", "chromium", "chromium-browser"),
        related=("chrome", "browser"),
        mime=(
            (
                "google-chrome.desktop",
                ("text/html", "x-scheme-handler/http", "x-scheme-handler/https", "application/xhtml+xml"),
            ),
        ),
        files=chrome_files,
        window=WindowRule(("Chromium*", "Google-chrome"), maximized=True),
        # titled "... - Chromium" once its first page has a title
        ready=ReadyRule(frozenset({"google-chrome", "google-chrome-stable", "chromium", "chrome"}), _fixed("Chromium")),
        # ImportantFileWriter's default commit interval is 10 s (Bookmarks: 2.5 s)
        write_back=WriteBack(
            frozenset({"chrome", "chromium"}),
            (".config/google-chrome/", ".config/chromium/"),
            frozenset(
                {
                    "bookmarks",
                    "chrome_font_size",
                    "data_delete_automacally",
                    "default_search_engine",
                    "enable_do_not_track",
                    "enable_enhanced_safety_browsing",
                    "enable_safe_browsing",
                    "enabled_experiments",
                    "find_installed_extension_name",
                    "find_unpacked_extension_path",
                    "new_startup_page",
                    "profile_name",
                }
            ),
            11.0,
        ),
        launchers=("google-chrome.desktop",),
        dock_slot=0,
    ),
    # GNOME's file manager, PDF viewer and mail client (installing GIMP made it the PDF viewer otherwise)
    App(
        "file manager",
        ("nautilus",),
        related=("file manager", "nautilus", "files"),
        mime=(("org.gnome.Nautilus.desktop", ("inode/directory",)),),
        window=WindowRule(("org.gnome.Nautilus",), maximized=False),
        ready=ReadyRule(frozenset({"nautilus"}), _nautilus_title, open_title=_home_title),
        launchers=("org.gnome.Nautilus.desktop",),
        dock_slot=6,
    ),
    # pdf is the PDF viewer: its tasks open PDFs (``open`` steps, which name no app) for the agent to read,
    # fill in or sort, in Evince on the VM
    App(
        "pdf viewer",
        ("evince",),
        related=("pdf viewer", "pdf", "evince"),
        mime=(("org.gnome.Evince.desktop", ("application/pdf",)),),
        window=WindowRule(("Evince",), maximized=True),
        ready=ReadyRule(frozenset({"evince"}), _evince_title),
    ),
    App(
        "thunderbird",
        ("thunderbird",),
        related=("thunderbird",),
        mime=(("thunderbird.desktop", ("x-scheme-handler/mailto", "message/rfc822")),),
        files=thunderbird_files,
        window=WindowRule(("thunderbird",), maximized=True),
        ready=ReadyRule(frozenset({"thunderbird"}), _fixed("Mozilla Thunderbird")),
        launchers=("thunderbird.desktop",),
        dock_slot=1,
    ),
    # images in GIMP: the VM opens .xcf in GIMP and photos in GNOME's Image Viewer, which this desktop lacks
    App(
        "gimp",
        ("gimp",),
        related=("gimp",),
        mime=(("gimp.desktop", GIMP_TYPES),),
        window=WindowRule(("Gimp*",), maximized=True),
        ready=ReadyRule(frozenset({"gimp", "gimp-2.10"}), _gimp_title, open_title=gimp_title),
        warm_up=WarmUp(GIMP_WARMUP, GIMP_PROFILE, gimp_profile_key),
        launchers=("gimp.desktop",),
        dock_slot=5,
    ),
    # audio, and the common video types, in VLC; the other video types in GNOME Videos (``gnome.mime_defaults``)
    App(
        "vlc",
        ("vlc",),
        related=("vlc", "ubuntu_media_player"),
        mime=(("vlc.desktop", VLC_TYPES),),
        files=_media_files,  # VLC's vlcrc, and GIMP's window layout beside it (``media.media_files``)
        window=WindowRule(("vlc",), maximized=False),
        ready=ReadyRule(frozenset({"vlc"}), _fixed(VLC_TITLE), open_title=_vlc_open_title),
        launchers=("vlc.desktop",),
        dock_slot=3,
    ),
    # GNOME opens plain text, and empty files (``file`` calls them inode/x-empty), in its text editor
    App(
        "text editor",
        ("mousepad", "gedit"),
        related=("text editor",),
        mime=(("org.xfce.mousepad.desktop", ("text/plain", "inode/x-empty", "application/x-zerosize")),),
        window=WindowRule(("Mousepad",), maximized=False),
    ),
    App(
        "vs_code",
        ("code", "codium"),
        related=("vs_code", "vscode"),
        files=vscode.baseline_files,
        window=WindowRule(("Code",), maximized=True),
        # VS Code's workbench (code-server in a browser window) titles the window with the file, then starts its
        # extension host and renders the editor for about 3 s more on 2 cores (measured)
        ready=ReadyRule(frozenset({"code"}), _code_title, windowless=vscode.cli_only, keeps_loading=vscode.APP_NAME),
        launchers=("code.desktop",),
        dock_slot=2,
    ),
    App(
        "terminal",
        ("xterm", "gnome-terminal"),
        related=("terminal",),
        window=WindowRule(("XTerm", "Gnome-terminal"), maximized=False),
    ),
    # GNOME Videos: the VM's default for most video types. It maximizes its own window when its state file
    # (~/.config/totem/state.ini) is missing, as on a first start on the VM (totem_setup_window)
    App(
        "video player",
        ("totem",),
        window=WindowRule(("Totem",), maximized=True),
    ),
)

#: Launchers of the VM's dock for apps this desktop does not carry (GNOME Shell leaves out those not
#: installed: Ubuntu Software and Help here), after the apps' own.
VM_ONLY_LAUNCHERS = ("snap-store_ubuntu-software.desktop", "yelp.desktop")

_BY_PROGRAM = {program: app for app in APPS if app.ready is not None for program in app.ready.programs}


def app_for_program(program: str) -> App | None:
    """The app whose ready rule a ``launch`` of ``program`` (a file name, no folder) follows."""
    return _BY_PROGRAM.get(program)


def app_named(name: str) -> App:
    """The record of the app called ``name`` (:attr:`App.name`).

    Raises:
        KeyError: no app has that name.
    """
    for app in APPS:
        if app.name == name:
            return app
    raise KeyError(f"no app is called {name!r}; the apps are {', '.join(app.name for app in APPS)}")


def window_table() -> dict[str, Literal["maximized", "own size"]]:
    """How each window class opens (spelt as the app sets it, a trailing ``*`` a wildcard), for every session."""
    return {
        cls: "maximized" if app.window.maximized else "own size"
        for app in APPS
        if app.window is not None
        for cls in app.window.classes
    }


def dock_launchers() -> tuple[str, ...]:
    """The VM's dock, top to bottom: the apps' launchers by :attr:`App.dock_slot`, then :data:`VM_ONLY_LAUNCHERS`."""
    docked = sorted((app for app in APPS if app.dock_slot is not None), key=lambda app: app.dock_slot or 0)
    return (*(launcher for app in docked for launcher in app.launchers), *VM_ONLY_LAUNCHERS)
