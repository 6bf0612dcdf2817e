"""The ``lookalike`` session's pictures and layout, drawn on the host: OSWorld's VM shell at a fraction of its cost.

``LocalOptions(session="lookalike")`` runs xfwm4 (:mod:`.xfwm`: the VM's title bars; openbox where it is not
installed) with a top bar and a dock of legato's own
(:mod:`.panel`, one small python-xlib process inside the sandbox) that look and act as the VM's GNOME
Shell does where an agent sees or clicks: the top bar (rows 0-26: Activities, the focused app's name, the
clock centred on the work area and Ubuntu's bell of unseen notifications right of it, status icons), the
Ubuntu dock (columns 0-69: the favourites, ``org.gnome.shell favorite-apps``, the VM's launchers in the VM's
order by default; then the running apps that are not favourites and Trash; a dot per window of a running
app, Show Applications at the bottom), the work area right of the dock and under
the top bar (the window manager's margins), GNOME 43's window picker, an app grid and a search, and a launcher's
right-click menu (the app's windows, Pin to Dash or Unpin).

Everything the panel shows is drawn here once per screen size with Pillow (:func:`write_lookalike_files`)
into the desktop's own folder, bound read-only at :data:`LOOKALIKE_DIR`: raw pixmaps (zlib) and a manifest
with the layout. The wallpaper is not among them: it is the root window's background, which the host paints
(:func:`wallpaper`, :func:`.xstate.prepare_display`) and the X server keeps across fast resets, so a reset
sends it again only when something in the sandbox changed it. Inside, the panel only copies the pictures
into X pixmaps and copies rectangles around (text is glyphs copied from a pre-drawn strip), so it imports
neither Pillow nor numpy (docs/benchmarks.md: its memory and idle CPU).
"""

from __future__ import annotations

import functools
import json
import shutil
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legato_gym.backends.local.sandbox import drawn, fonts
from legato_gym.backends.local.xstate import Wallpaper

__all__ = [
    "APPS",
    "LAUNCHERS",
    "LOOKALIKE_DIR",
    "TITLE_BAR_HEIGHT",
    "AppEntry",
    "Layout",
    "layout",
    "lookalike_margins",
    "lookalike_theme",
    "wallpaper",
    "write_lookalike_files",
]

#: Where the desktop's lookalike files are bound inside the sandbox (the panel, its pictures, its manifest).
LOOKALIKE_DIR = "/run/legato-lookalike"
PANEL_FILE = Path(__file__).with_name("panel.py")
#: The panel's module inside (:data:`PANEL_FILE`, under this name): ``python panel.py FOLDER MARKER`` runs
#: :data:`_PANEL_LAUNCHER`, which imports it from the bytecode the host compiled (:func:`_panel_bytecode`).
#: Compiled from its source at every start, the compiler's memory stayed in the panel for good: 5 of its 17 MiB.
PANEL_MODULE = "legato_panel"
_PANEL_LAUNCHER = f"import sys\n\nimport {PANEL_MODULE}\n\nsys.exit({PANEL_MODULE}.main(sys.argv))\n"
#: The sandbox's fontconfig configuration (:func:`.fonts.fontconfig_conf`) and xsettingsd's, in that folder.
FONTCONFIG_NAME = "fonts.conf"
XSETTINGS_NAME = "xsettingsd.conf"
#: The session's compiled GSettings schemas (:func:`.shell.lookalike_schemas`), a folder in that folder.
SCHEMAS_NAME = "schemas"
#: The desktop files the sandbox has (it binds the host's ``/usr``), whose apps the dock can show.
APPLICATIONS = Path("/usr/share/applications")

#: The VM's colours (reference/osworld-vm-look.md, read from its screenshot).
BAR_COLOUR = (19, 19, 19)
#: A top bar's button while its menu is open (Yaru's ``.panel-button:checked``: 20 % of #f2f2f2 over the bar), a
#: pill inside the button's 3 px border.
BAR_BUTTON_LIT = (64, 64, 64)
#: The date menu's selected day (Yaru's ``.calendar-day-base:selected``: 20 % of #f7f7f7 over the menu), a
#: circle as today's.
DAY_SELECTED = (73, 73, 73)
#: A top bar's button under the pointer (Yaru's ``.panel-button:hover``: 15 % of #f2f2f2 over the bar).
BAR_BUTTON_HOVER = (52, 52, 52)
DOT_COLOUR = (233, 84, 32)
#: The dock is a dark band at 80 % over the wallpaper: ``0.8 * DOCK_TINT + 0.2 * wallpaper``.
DOCK_TINT = (20, 19, 20)
DOCK_OPACITY = 0.8
#: The overview's background and its search field (GNOME 42's dark overview, Yaru).
OVERVIEW_COLOUR = (36, 31, 35)
SEARCH_COLOUR = (60, 56, 59)
#: The top bar's menus, dialogs and the dock's menu: Yaru's dark shell theme (``gnome-shell.css`` of
#: ``yaru-theme-gnome-shell``): ``.popup-menu-content`` #1d1d1d with a 15 % white border and 15 px corners, a
#: hovered or focused item 10 % white over it, separators #464646, a submenu #343434, text #F7F7F7 (dimmed: 50 %),
#: a modal dialog's buttons #2c2c2c, today in the calendar Ubuntu's orange.
MENU_COLOUR = (29, 29, 29)
MENU_HIGHLIGHT = (51, 51, 51)
MENU_BORDER = (62, 62, 62)
MENU_SEPARATOR = (70, 70, 70)
SUBMENU_COLOUR = (52, 52, 52)
BUTTON_COLOUR = (44, 44, 44)
#: A button that cannot be pressed (Yaru's ``.button:insensitive``: 5 % white over the popover, its text at
#: 50 %): the date menu's Clear while the notification list is empty, as GNOME makes it non-reactive then.
INSENSITIVE_BUTTON = (40, 40, 40)
INSENSITIVE_TEXT = (144, 144, 144)
TEXT_COLOUR = (247, 247, 247)
DIM_COLOUR = (138, 138, 138)
#: The icons drawn for the system menu's rows (:func:`_menu_icons`), in this order, each ``MENU_ICON`` square.
MENU_ICONS = ("network", "volume", "settings", "lock", "power", "right", "down", "check")
MENU_ICON = 16
#: The wallpaper: Ubuntu 22.04's "Jammy Jellyfish" (its artwork is not in Debian), drawn as the VM's screenshot
#: shows it: large flat facets, folds of the jellyfish meeting at two points, over a fan of purple to orange.
#: Positions are the artwork's pixels at 1920x1080 (GNOME "zoom"s it to cover other screens, centred); colours
#: are gradients ``(r, g, b)`` at the artwork's top left, then their change across its width and down its height,
#: fitted to the screenshot's visible wallpaper (its right strip, top strip and bottom left; mean error 2.1 per
#: channel). The fan's colour also turns with the angle about the upper point (:data:`WALLPAPER_FAN`); the
#: facets are painted over it in this order.
WALLPAPER_POINTS = ((1762, 496), (154, 576))
WALLPAPER_FAN = ((45, 5, 70), (81, 33, 9), (57, 26, -18), (-47, -19, -36), (-20, -8, -25))
WALLPAPER_FACETS: tuple[tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int, int], ...]], ...] = (
    # the dark band at the left, and the tip below it: a dark cone and a light one
    (((1435, -4000), (-805, 4000), (-4000, 4000), (-4000, -4000)), ((15, -9, 7), (131, 49, 88), (55, 24, 38))),
    (((154, 576), (-805, 4000), (2027, 4000)), ((6, -16, 1), (277, 123, 203), (80, 38, 57))),
    (((154, 576), (2027, 4000), (4417, 4000)), ((28, -7, 15), (146, 81, 89), (110, 47, 84))),
    # the folds at the upper point: a dark one, the top one, the right one, the orange one below
    (((1762, 496), (-3813, -4000), (-702, -4000)), ((9, -11, 8), (71, 34, 43), (9, -11, -39))),
    (((1762, 496), (-702, -4000), (3025, -4000)), ((-5, 3, 102), (135, 36, -30), (72, 21, -18))),
    (((1762, 496), (3025, -4000), (4000, -4000), (4000, 7002)), ((-341, -214, -43), (469, 252, 113), (98, 45, -16))),
    (((1762, 496), (4000, 7002), (4000, 4000), (2218, 4000)), ((377, 222, 332), (-359, -242, -320), (150, 66, 12))),
)
#: The artwork's size: the screen it shows whole on.
WALLPAPER_ART = (1920, 1080)

BAR_HEIGHT = 27
DOCK_WIDTH = 70
#: Launcher cells: 48 px icons centred at x = 35, y = 65 + 68 k at 1920x1080, as on the VM.
ICON = 48
CELL = 68
FIRST_CENTRE = 65
#: Show Applications' centre, this far above the screen's bottom (y ~ 1040 at 1080).
SHOW_APPS_FROM_BOTTOM = 40

#: Debian's package database: an install or removal changes it (the pictures stored by :mod:`.drawn` drawn anew).
_PACKAGES = "/var/lib/dpkg/status"
_ICON_THEMES = ("/usr/share/icons/Yaru", "/usr/share/icons/hicolor", "/usr/share/icons/Adwaita")
_FONTS = {
    "regular": (
        "/usr/share/fonts/opentype/cantarell/Cantarell-Regular.otf",
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    ),
    "bold": (
        "/usr/share/fonts/opentype/cantarell/Cantarell-Bold.otf",
        "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
    ),
}


@dataclass(frozen=True)
class AppEntry:
    """An app of the dock or the app grid.

    Attributes:
        key: its desktop file's name without ``.desktop`` (the VM's favourite's id).
        name: the name GNOME shows (top bar, app grid, menus).
        command: what a click runs inside the sandbox (``[]``: not installed here, the launcher only shows).
        icons: icon names, first found wins (Yaru's, then hicolor's).
        classes: lower-case ``WM_CLASS`` values (either part; a trailing ``*`` matches any rest) of its windows,
            for the running-app dots and the top bar's name.
    """

    key: str
    name: str
    command: tuple[str, ...]
    icons: tuple[str, ...]
    classes: tuple[str, ...]


#: The VM's dock launchers, top to bottom (reference/osworld-vm-look.md); Ubuntu Software and Help are shown
#: where the VM has them, but open nothing (neither is in Debian).
LAUNCHERS: tuple[AppEntry, ...] = (
    AppEntry(
        "google-chrome",
        "Google Chrome",
        ("google-chrome",),
        ("google-chrome", "chromium"),
        ("google-chrome", "chromium*"),
    ),
    AppEntry("thunderbird", "Thunderbird Mail", ("thunderbird",), ("thunderbird",), ("thunderbird*",)),
    AppEntry("code", "Visual Studio Code", ("code",), ("code", "accessories-text-editor"), ("code",)),
    AppEntry("vlc", "VLC media player", ("vlc",), ("vlc",), ("vlc",)),
    AppEntry(
        "libreoffice-writer",
        "LibreOffice Writer",
        ("libreoffice", "--writer"),
        ("libreoffice-writer",),
        ("libreoffice-writer",),
    ),
    AppEntry(
        "libreoffice-calc", "LibreOffice Calc", ("libreoffice", "--calc"), ("libreoffice-calc",), ("libreoffice-calc",)
    ),
    AppEntry(
        "libreoffice-impress",
        "LibreOffice Impress",
        ("libreoffice", "--impress"),
        ("libreoffice-impress",),
        ("libreoffice-impress",),
    ),
    AppEntry("gimp", "GNU Image Manipulation Program", ("gimp",), ("gimp",), ("gimp*",)),
    AppEntry(
        "org.gnome.Nautilus",
        "Files",
        ("nautilus", "--new-window"),
        ("org.gnome.Nautilus", "system-file-manager"),
        ("org.gnome.nautilus",),
    ),
    AppEntry("snap-store_ubuntu-software", "Ubuntu Software", (), ("org.gnome.Software", "ubuntusoftware"), ()),
    AppEntry("yelp", "Help", (), ("help-app", "help-browser"), ("yelp",)),
)
#: The dock's Trash, under a separator (a click opens it in Files).
TRASH = AppEntry("trash", "Trash", ("nautilus", "--new-window", "trash:///"), ("user-trash",), ())
#: The icon of an app whose desktop file the host did not see, or of a window no app claims (GNOME's).
GENERIC_ICONS = ("application-x-executable", "applications-other")
#: The app grid: the launchers that open something, then the other apps of the desktop, by name.
APPS: tuple[AppEntry, ...] = (
    *(app for app in LAUNCHERS if app.command),
    AppEntry(
        "org.gnome.Terminal",
        "Terminal",
        ("gnome-terminal",),
        ("org.gnome.Terminal", "utilities-terminal"),
        ("gnome-terminal*",),
    ),
    AppEntry("org.xfce.mousepad", "Text Editor", ("mousepad",), ("text-editor", "org.xfce.mousepad"), ("mousepad",)),
    AppEntry("org.gnome.Evince", "Document Viewer", ("evince",), ("org.gnome.Evince", "evince"), ("evince",)),
    AppEntry("org.gnome.Totem", "Videos", ("totem",), ("org.gnome.Totem", "totem"), ("totem",)),
)
#: An app's icon where the theme has none for it (GNOME's fallback).
GENERIC_ICON = ("application-x-executable", "applications-other")
#: Icons of the windows of classes no app above claims (lower-case ``WM_CLASS`` values, a trailing ``*`` any rest;
#: the first icon found wins, as :attr:`AppEntry.icons`): the window picker's, and the top bar's by
#: :data:`OTHER_NAMES`.
OTHER_ICONS = (
    (("xterm",), ("xterm-color", "xterm")),
    (("soffice", "libreoffice*"), ("libreoffice-startcenter", "libreoffice-main")),
)
#: Names the top bar shows for windows of classes no app above claims.
OTHER_NAMES = {
    "gnome-terminal-server": "Terminal",
    "mousepad": "Text Editor",
    "evince": "Document Viewer",
    "totem": "Videos",
    "xterm": "XTerm",
    "soffice": "LibreOffice",
}


def installed_apps(folder: Path = APPLICATIONS) -> tuple[AppEntry, ...]:
    """The apps of the desktop files in ``folder`` that are neither a launcher nor in the app grid, as GNOME's app
    system knows them (the dock shows one when it is a favourite or runs): its name, its Exec line (in a
    terminal when it says ``Terminal=true``), its icon and its window class (``StartupWMClass``, else the
    desktop file's name, as GNOME matches windows to apps). Hidden ones (deleted, in desktop-file terms) are
    left out."""
    from legato_gym.backends.local.apps.gnome import terminal_command
    from legato_gym.backends.local.sandbox.panel import desktop_groups, exec_argv

    known = {app.key for app in (*LAUNCHERS, *APPS)}
    terminal = terminal_command()
    found = []
    for path in sorted(folder.glob("*.desktop")):
        entry = desktop_groups(path).get("Desktop Entry", {})
        argv = exec_argv(entry.get("Exec", ""))
        if path.stem in known or entry.get("Type") != "Application" or entry.get("Hidden") == "true" or not argv:
            continue
        if entry.get("Terminal") == "true":
            if terminal is None:
                continue
            argv = [terminal, "--", *argv] if terminal == "gnome-terminal" else [terminal, "-e", *argv]
        icon = entry.get("Icon", "")
        wm_class = (entry.get("StartupWMClass") or path.stem).lower()
        found.append(
            AppEntry(path.stem, entry.get("Name") or path.stem, tuple(argv), (icon,) if icon else (), (wm_class,))
        )
    return tuple(found)


def dock_apps() -> tuple[AppEntry, ...]:
    """Every app the dock can show (a favourite, a running app): the launchers, the app grid's others, then the
    installed desktop files' (:func:`installed_apps`); a window's app is the first whose classes match."""
    return (*LAUNCHERS, *(app for app in APPS if app not in LAUNCHERS), *installed_apps())


@dataclass(frozen=True)
class Layout:
    """Where the panel's parts are on a screen (pixels), as GNOME Shell lays them out at scale 1.

    GNOME keeps the top bar at 27 px and the dock at 70 px at every screen size; the dock's icons shrink when
    its launchers do not fit the screen's height, as dash-to-dock's do.
    """

    width: int
    height: int
    cell: int
    icon: int
    first_centre: int
    show_apps_centre: int

    @property
    def work_area(self) -> tuple[int, int, int, int]:
        """``(x, y, width, height)`` that maximized windows fill: right of the dock, under the top bar."""
        return (DOCK_WIDTH, BAR_HEIGHT, self.width - DOCK_WIDTH, self.height - BAR_HEIGHT)

    def launcher_centre(self, index: int, favourites: int = len(LAUNCHERS)) -> int:
        """The y of launcher ``index``'s centre: the ``favourites``, then after a separator the running apps that
        are not and Trash."""
        gap = 0 if index < favourites or not favourites else self.cell // 4
        return self.first_centre + self.cell * index + gap


def layout(screen: tuple[int, int]) -> Layout:
    """The panel's layout on a ``screen`` of ``(width, height)``."""
    width, height = screen
    show_apps = height - SHOW_APPS_FROM_BOTTOM
    items = len(LAUNCHERS) + 1  # and Trash
    room = show_apps - CELL // 2 - (FIRST_CENTRE - CELL // 2) - CELL // 4 - CELL // 2
    cell = min(CELL, max(24, room // items))
    icon = min(ICON, max(16, cell - 20))
    return Layout(width, height, cell, icon, BAR_HEIGHT + 4 + cell // 2, show_apps)


def _find_icon(names: Sequence[str], size: int) -> Path | None:
    for name in names:  # a desktop file's Icon may be a picture's path
        if name.startswith("/") and name.endswith(".png") and Path(name).is_file():
            return Path(name)
    for theme in _ICON_THEMES:
        for folder in (f"{size}x{size}", "48x48", "256x256", "64x64", "128x128", "scalable"):
            for kind in ("apps", "places", "legacy", "mimetypes"):
                for name in names:
                    path = Path(theme, folder, kind, f"{name}.png")
                    if path.is_file():
                        return path
    return None


def _font(kind: str, size: int) -> Any:
    """The VM's font, Ubuntu (:mod:`.fonts`, from npm), of ``kind`` ("regular", "bold") at ``size`` pixels;
    Cantarell, then DejaVu, where it is not installed."""
    from PIL import ImageFont

    ubuntu = fonts.ubuntu_file(700 if kind == "bold" else 400)
    if ubuntu is not None:
        return ImageFont.truetype(str(ubuntu), size)
    fonts.say_missing()
    for path in _FONTS[kind]:
        if Path(path).is_file():
            return ImageFont.truetype(path, size)
    return ImageFont.load_default()


def _icon(names: Sequence[str], size: int) -> Any:
    from PIL import Image, ImageDraw

    path = _find_icon(names, size)
    if path is None:  # a grey rounded square, never an empty cell
        image = Image.new("RGBA", (size, size))
        ImageDraw.Draw(image).rounded_rectangle((2, 2, size - 3, size - 3), radius=size // 6, fill=(150, 150, 150))
        return image
    image = Image.open(path).convert("RGBA")
    return image if image.size == (size, size) else image.resize((size, size), Image.Resampling.LANCZOS)


@functools.lru_cache(maxsize=4)
def _wallpaper(screen: tuple[int, int]) -> Any:
    """Ubuntu 22.04's default wallpaper (:data:`WALLPAPER_FACETS`) on a ``screen`` of ``(width, height)``: zoomed
    to cover it, centred, as GNOME shows a wallpaper; each facet's edge antialiased."""
    import numpy as np
    from PIL import Image, ImageDraw

    width, height = screen
    art_w, art_h = WALLPAPER_ART
    scale = max(width / art_w, height / art_h)
    left, top = (art_w - width / scale) / 2, (art_h - height / scale) / 2  # the artwork's pixel at the corner
    u = ((np.arange(width) + 0.5) / scale + left)[None, :] / art_w
    v = ((np.arange(height) + 0.5) / scale + top)[:, None] / art_h

    def gradient(coefficients: Sequence[Sequence[int]], u: Any, v: Any, *terms: Any) -> Any:
        base = np.zeros((v.shape[0], u.shape[1], 3), dtype=np.float32)
        for term, colour in zip((1.0, u, v, *terms), coefficients, strict=False):
            base += np.asarray(term, dtype=np.float32)[..., None] * np.array(colour, dtype=np.float32)
        return base

    px, py = WALLPAPER_POINTS[0]
    angle = np.arctan2(-(v - py / art_h) * art_h / art_w, -(u - px / art_w))
    pixels = gradient(WALLPAPER_FAN, u, v, angle, angle * angle)
    k = 2  # the facets' edges drawn at twice the size, for their coverage
    for polygon, colours in WALLPAPER_FACETS:
        mask = Image.new("L", (width * k, height * k), 0)
        corners = [((x - left) * scale * k, (y - top) * scale * k) for x, y in polygon]
        ImageDraw.Draw(mask).polygon(corners, fill=255)
        small = mask.reduce(k)
        box = small.getbbox()
        if box is None:  # off this screen
            continue
        x0, y0, x1, y1 = box
        cover = np.asarray(small.crop(box), dtype=np.float32)[..., None] / 255
        under = pixels[y0:y1, x0:x1]
        under += (gradient(colours, u[:, x0:x1], v[y0:y1]) - under) * cover
    return Image.fromarray(np.rint(np.clip(pixels, 0, 255)).astype(np.uint8), "RGB")


def _raw(image: Any) -> bytes:
    """An image as the X server's 24-bit ZPixmap rows (BGRX), zlib-compressed."""
    return zlib.compress(image.convert("RGB").tobytes("raw", "BGRX"), 6)


#: FreeType's default LCD filter (``FT_LCD_FILTER_DEFAULT``), over a row of subpixels: what cairo applies to the
#: shell's text on the VM, whose top bar shows its colour fringes (red right of a stem, blue left: RGB order).
LCD_FILTER = (0x08, 0x4D, 0x56, 0x4D, 0x08)


def _draw_lcd(
    image: Any, runs: Sequence[tuple[tuple[float, float], str]], font: Any, fill: tuple[int, int, int]
) -> None:
    """Draw text ``runs`` (each its top-left corner and text) in ``font`` (Pillow's, at its size) on the RGB
    ``image`` with subpixel antialiasing as GNOME's is on the VM (``Xft/RGBA`` rgb): the glyphs at three times
    the width, filtered by :data:`LCD_FILTER`, each pixel's red, green and blue taking its left, middle and
    right third. The ink of each spot is the hinted glyph's (FreeType's at the font's own size: hinting puts its
    stems and x-height on whole rows, as the VM's slight hinting does), shared among the subpixels as the
    three-times-wide glyph has it."""
    import numpy as np
    from PIL import Image, ImageDraw

    width, height = image.size
    big = font.font_variant(size=font.size * 3)
    canvas, hinted = Image.new("L", (width * 3, height * 3), 0), Image.new("L", (width, height), 0)
    for (x, y), text in runs:
        ImageDraw.Draw(canvas).text((round(x * 3), round(y * 3)), text, font=big, fill=255)
        ImageDraw.Draw(hinted).text((round(x), round(y)), text, font=font, fill=255)
    thirds = np.asarray(canvas, dtype=np.float32).reshape(height, 3, width * 3).mean(axis=1) / 255
    taps = np.array(LCD_FILTER, dtype=np.float32) / 256
    padded = np.pad(thirds, ((0, 0), (2, 2)))
    filtered = sum(tap * padded[:, k : k + width * 3] for k, tap in enumerate(taps))
    wide = np.clip(filtered, 0, 1).reshape(height, width, 3)

    def spot(a: Any) -> Any:  # each pixel with its neighbours left and right
        padded = np.pad(a, ((0, 0), (1, 1)))
        return (padded[:, :-2] + padded[:, 1:-1] + padded[:, 2:]) / 3

    ink, shared = spot(np.asarray(hinted, dtype=np.float32) / 255), spot(wide.mean(axis=2))
    scale = np.where(shared > 0.02, ink / np.maximum(shared, 1e-6), 1.0)
    coverage = np.clip(wide * scale[..., None], 0, 1)
    under = np.asarray(image.convert("RGB"), dtype=np.float32)
    pixels = under + (np.array(fill, dtype=np.float32) - under) * coverage
    image.paste(Image.fromarray(np.rint(pixels).astype(np.uint8), "RGB"))


def _glyphs(
    kind: str, size: int, fg: tuple[int, int, int], bg: tuple[int, int, int], latin1: bool = False
) -> tuple[Any, dict[str, Any]]:
    """A strip of the printable ASCII characters (and Latin-1's, with ``latin1``: window titles) drawn in ``fg``
    over ``bg`` (:func:`_draw_lcd`), and where each
    one is: its x in the strip, its advance and the width to copy, which takes in the ink right of the advance
    (Ubuntu's "f", "r" and others reach into the next glyph's cell, a colour fringe a pixel further; the panel
    copies right to left, so that it is kept)."""
    import numpy as np
    from PIL import Image

    font = _font(kind, size)
    ascent, descent = font.getmetrics()
    height = ascent + descent
    chars = [*(chr(c) for c in range(32, 127)), *(chr(c) for c in range(161, 256) if latin1), "…"]
    advances = [round(font.getlength(c)) for c in chars]
    cells = [max(advance, font.getbbox(c)[2] + 1) for c, advance in zip(chars, advances, strict=True)]
    strip = Image.new("RGB", (sum(cells) + 2 * len(chars), height), bg)
    starts = [sum(cells[:i]) + 2 * i for i in range(len(chars))]
    _draw_lcd(strip, [((x, 0), char) for x, char in zip(starts, chars, strict=True)], font, fg)
    inked = (np.asarray(strip) != np.array(bg, dtype=np.uint8)).any(axis=(0, 2))  # the columns it drew on
    table: dict[str, list[int]] = {}
    for char, x, advance, cell in zip(chars, starts, advances, cells, strict=True):
        columns = inked[x : x + cell].nonzero()[0]
        table[char] = [x, advance, max(advance, int(columns[-1]) + 1 if len(columns) else 0)]
    return strip, {"height": height, "chars": table}


def _text_width(table: dict[str, Any], text: str) -> int:
    return sum(table["chars"].get(c, table["chars"]["?"])[1] for c in text)


#: The focused app's icon, left of its name in the top bar (GNOME 42's app menu: 16 px, its symbolic icon where the
#: theme has one, else its own), and where it goes. Measured from the VM's screenshot: Files' icon at x 117-132
#: (:data:`APP_ICON_GAP` right of Activities' button), rows 5-20, its name's ink from x 140.
APP_ICON = 16
APP_ICON_GAP = 23
APP_NAME_GAP = 6


def _bar_icon(names: Sequence[str], fg: tuple[int, int, int], bg: tuple[int, int, int]) -> Any:
    """An app's icon as the top bar shows it on ``bg``: where the theme has its symbolic icon (Files' folder
    outline on the VM), the outline of its 16 px icon in ``fg``, as GNOME draws symbolic icons in the text's
    colour (Pillow draws no SVG: the outline is the icon's edge, a pixel wide); else its own icon."""
    from PIL import Image, ImageChops, ImageFilter

    icon = _icon(names, APP_ICON)
    image = Image.new("RGB", icon.size, bg)
    symbolic = any(
        Path(theme, "scalable", "apps", f"{name}-symbolic.svg").is_file() for theme in _ICON_THEMES for name in names
    )
    if not symbolic:
        image.paste(icon, (0, 0), icon)
        return image
    k = 4  # the edge drawn at four times the size, then made smaller: a pixel wide and smooth
    alpha = _icon(names, APP_ICON * k).getchannel("A").point(lambda a: 255 if a > 127 else 0)
    edge = ImageChops.subtract(alpha, alpha.filter(ImageFilter.MinFilter(2 * k - 1)))
    mask = edge.resize(icon.size, Image.Resampling.BOX)
    image.paste(Image.new("RGB", icon.size, fg), (0, 0), mask)
    return image


def _bar_icons(background: tuple[int, int, int]) -> tuple[Any, dict[str, int]]:
    """The top bar's app icons side by side on ``background`` (:func:`_bar_icon`), and each app name's place
    in the strip (0: :data:`GENERIC_ICON`, for a name no app has)."""
    from PIL import Image

    icons: dict[str, Sequence[str]] = {"": GENERIC_ICON}
    for app in (*LAUNCHERS, *APPS):
        icons.setdefault(app.name, (*app.icons, *GENERIC_ICON))
    for classes, found in OTHER_ICONS:
        icons.setdefault(OTHER_NAMES.get(classes[0], classes[0]), (*found, *GENERIC_ICON))
    strip = Image.new("RGB", (APP_ICON * len(icons), APP_ICON), background)
    for i, names in enumerate(icons.values()):
        strip.paste(_bar_icon(names, (238, 238, 236), background), (i * APP_ICON, 0))
    return strip, {name: i for i, name in enumerate(icons)}


#: The status icons' button at the top bar's right (a click there opens the system menu).
STATUS_WIDTH = 106
#: The columns at the bar's right that its lit status button repaints (:func:`_status_lit`).
STATUS_LIT_WIDTH = 116


def _status_icons(bar: Any, right: int) -> None:
    """The VM's status icons at the top bar's right (wired network, volume, power), drawn in white."""
    from PIL import ImageDraw

    draw = ImageDraw.Draw(bar)
    white = (238, 238, 236)
    cy = BAR_HEIGHT // 2
    x = right - 33  # power: an open ring and its bar
    draw.arc((x - 7, cy - 7, x + 7, cy + 7), start=-60, end=240, fill=white, width=2)
    draw.line((x, cy - 8, x, cy - 1), fill=white, width=2)
    x = right - 62  # volume: a speaker and two waves
    draw.polygon(
        ((x - 8, cy - 3), (x - 5, cy - 3), (x - 1, cy - 7), (x - 1, cy + 7), (x - 5, cy + 3), (x - 8, cy + 3)),
        fill=white,
    )
    draw.arc((x - 4, cy - 5, x + 4, cy + 5), start=-50, end=50, fill=white, width=2)
    draw.arc((x - 4, cy - 9, x + 8, cy + 9), start=-50, end=50, fill=white, width=2)
    x = right - 90  # wired network: three boxes joined
    draw.rectangle((x - 3, cy - 8, x + 3, cy - 3), fill=white)
    draw.rectangle((x - 9, cy + 3, x - 3, cy + 8), fill=white)
    draw.rectangle((x + 3, cy + 3, x + 9, cy + 8), fill=white)
    draw.line((x, cy - 3, x, cy), fill=white, width=2)
    draw.line((x - 6, cy, x + 6, cy), fill=white, width=2)
    draw.line((x - 6, cy, x - 6, cy + 3), fill=white, width=2)
    draw.line((x + 6, cy, x + 6, cy + 3), fill=white, width=2)


def _status_lit(colour: tuple[int, int, int] = BAR_BUTTON_LIT) -> Any:
    """The status icons' end of the top bar with the lit pill behind them (their menu open; ``colour``
    :data:`BAR_BUTTON_HOVER`: under the pointer): the icons with the button's 12 px of padding, drawn four times
    as large and scaled down (round ends as smooth as GNOME's)."""
    from PIL import Image, ImageDraw

    width, scale = STATUS_LIT_WIDTH, 4
    big = Image.new("RGB", (width * scale, BAR_HEIGHT * scale), BAR_COLOUR)
    ImageDraw.Draw(big).rounded_rectangle(
        ((width - 111) * scale, 3 * scale, (width - 13) * scale - 1, (BAR_HEIGHT - 3) * scale - 1),
        radius=(BAR_HEIGHT - 6) * scale // 2,
        fill=colour,
    )
    image = big.resize((width, BAR_HEIGHT), Image.Resampling.LANCZOS)
    _status_icons(image, width)
    return image


def _menu_icons(bg: tuple[int, int, int]) -> Any:
    """The system menu's symbolic icons side by side (:data:`MENU_ICONS`), white over ``bg``, drawn four times as
    large and scaled down (smooth edges as GNOME's symbolic icons)."""
    import math

    from PIL import Image, ImageDraw

    k = 4
    size = MENU_ICON * k
    strip = Image.new("RGB", (size * len(MENU_ICONS), size), bg)
    draw = ImageDraw.Draw(strip)
    fg = TEXT_COLOUR
    w = 2 * k
    for i, name in enumerate(MENU_ICONS):
        x0, c = i * size, size // 2
        cx = x0 + c
        if name == "network":  # three boxes joined, as the wired-network icon
            draw.rectangle((cx - 3 * k, 1 * k, cx + 3 * k, 6 * k), fill=fg)
            draw.rectangle((x0 + 1 * k, 10 * k, x0 + 7 * k, 15 * k), fill=fg)
            draw.rectangle((x0 + 9 * k, 10 * k, x0 + 15 * k, 15 * k), fill=fg)
            draw.rectangle((cx - k, 6 * k, cx + k, 8 * k), fill=fg)
            draw.rectangle((x0 + 3 * k, 7 * k, x0 + 13 * k, 8 * k + k // 2), fill=fg)
            draw.rectangle((x0 + 3 * k, 7 * k, x0 + 5 * k, 10 * k), fill=fg)
            draw.rectangle((x0 + 11 * k, 7 * k, x0 + 13 * k, 10 * k), fill=fg)
        elif name == "volume":  # a speaker and two waves
            draw.polygon(
                (
                    (x0 + k, 5 * k),
                    (x0 + 4 * k, 5 * k),
                    (x0 + 8 * k, k),
                    (x0 + 8 * k, 15 * k),
                    (x0 + 4 * k, 11 * k),
                    (x0 + k, 11 * k),
                ),
                fill=fg,
            )
            draw.arc((x0 + 5 * k, 4 * k, x0 + 12 * k, 12 * k), start=-55, end=55, fill=fg, width=w)
            draw.arc((x0 + 5 * k, k, x0 + 15 * k, 15 * k), start=-55, end=55, fill=fg, width=w)
        elif name == "settings":  # a cog: a ring with eight teeth
            for t in range(8):
                a = t * math.pi / 4
                dx, dy = math.cos(a), math.sin(a)
                draw.line((cx + dx * 4 * k, c + dy * 4 * k, cx + dx * 7 * k, c + dy * 7 * k), fill=fg, width=3 * k)
            draw.ellipse((cx - 5 * k, c - 5 * k, cx + 5 * k, c + 5 * k), fill=fg)
            draw.ellipse((cx - 2 * k, c - 2 * k, cx + 2 * k, c + 2 * k), fill=bg)
        elif name == "lock":  # a shackle over a body
            draw.arc((cx - 4 * k, k, cx + 4 * k, 11 * k), start=180, end=360, fill=fg, width=w)
            draw.line((cx - 4 * k + k, 5 * k, cx - 4 * k + k, 8 * k), fill=fg, width=w)
            draw.line((cx + 4 * k - k, 5 * k, cx + 4 * k - k, 8 * k), fill=fg, width=w)
            draw.rounded_rectangle((cx - 6 * k, 7 * k, cx + 6 * k, 15 * k), radius=k, fill=fg)
        elif name == "power":  # an open ring and its bar
            draw.arc((cx - 6 * k, c - 6 * k, cx + 6 * k, c + 6 * k), start=-60, end=240, fill=fg, width=w)
            draw.line((cx, c - 7 * k, cx, c), fill=fg, width=w)
        elif name == "right":  # a submenu's chevron
            draw.line(((cx - 2 * k, c - 4 * k), (cx + 2 * k, c), (cx - 2 * k, c + 4 * k)), fill=fg, width=w)
        elif name == "down":  # an open submenu's chevron
            draw.line(((cx - 4 * k, c - 2 * k), (cx, c + 2 * k), (cx + 4 * k, c - 2 * k)), fill=fg, width=w)
        elif name == "check":  # the window menu's tick (Always on Top, Always on Visible Workspace)
            draw.line(((cx - 5 * k, c), (cx - 2 * k, c + 4 * k), (cx + 5 * k, c - 4 * k)), fill=fg, width=w)
    return strip.resize((MENU_ICON * len(MENU_ICONS), MENU_ICON), Image.Resampling.LANCZOS)


#: Ubuntu's indicator of unseen notifications (GNOME 42's ``MessagesIndicator``: the symbolic bell with a ring wave
#: each side), right of the clock's label: measured on the VM's screenshot, a 16 px icon (its ink x 1059-1070,
#: rows 5-20), its box 17 px right of the label's end, drawn in the bar's icon colour.
MESSAGE_INDICATOR = 16
MESSAGE_INDICATOR_GAP = 17
MESSAGE_INDICATOR_COLOUR = (242, 242, 242)
#: The en space (half an em) GNOME's clock puts between the date and the time: 7.5 px in the bar's 15 px font
#: (the Ubuntu build here has no U+2002, so the panel leaves the gap itself); 7 puts the time's digits on the VM's
#: columns.
CLOCK_GAP = 7


def _message_indicator(bg: tuple[int, int, int], off: bool = False) -> Any:
    """The bell of :data:`MESSAGE_INDICATOR` over ``bg``, drawn eight times as large and scaled down: the
    outline of a bell on its base line, the clapper under it, a ring wave each side of its top (fitted to the
    VM's pixels: 2 % of full ink off, on average, over its 16 x 16 box). ``off``: Do Not Disturb's
    (``notifications-disabled-symbolic``, which GNOME shows there instead while it is on): the bell without its
    waves, struck through from top left to bottom right."""
    from PIL import Image, ImageDraw

    k, size = 8, MESSAGE_INDICATOR
    mask = Image.new("L", (size * k, size * k), 0)
    draw = ImageDraw.Draw(mask)
    radius, centre_y = 5.9 * k, 5.6 * k
    middle = size * k / 2
    wave = (middle - radius, centre_y - radius, middle + radius, centre_y + radius)
    if not off:
        draw.arc(wave, start=170, end=255, fill=255, width=k)
        draw.arc(wave, start=285, end=370, fill=255, width=k)
    left = ((3.0, 12.2), (4.2, 11), (4.5, 9.5), (4.7, 7), (5.5, 4), (6.1, 3), (6.9, 2.5))
    outline = [*left, *((size - x, y) for x, y in reversed(left))]
    draw.line([(x * k, y * k) for x, y in outline], fill=255, width=k, joint="curve")
    draw.rectangle((2 * k, 12 * k, 14 * k - 1, 13 * k - 1), fill=255)  # the base line
    draw.pieslice((6 * k, 12.1 * k, 10 * k - 1, 15.9 * k), 0, 180, fill=255)  # the clapper
    if off:  # the stroke, a gap cut each side of it
        draw.line((1 * k, 1 * k, 15 * k, 15 * k), fill=0, width=3 * k)
        draw.line((1 * k, 1 * k, 15 * k, 15 * k), fill=255, width=k)
    image = Image.new("RGB", (size, size), bg)
    image.paste(MESSAGE_INDICATOR_COLOUR, (0, 0, size, size), mask.resize((size, size), Image.Resampling.BOX))
    return image


def _bell(size: int) -> Any:
    """The notification list's empty-state icon (a bell), dimmed, on the menu's colour."""
    from PIL import Image, ImageDraw

    k = 4
    big = size * k
    image = Image.new("RGB", (big, big), MENU_COLOUR)
    draw = ImageDraw.Draw(image)
    fg = DIM_COLOUR
    draw.pieslice((big * 0.22, big * 0.12, big * 0.78, big * 0.7), start=180, end=360, fill=fg)
    draw.rectangle((big * 0.22, big * 0.41, big * 0.78, big * 0.72), fill=fg)
    draw.polygon(
        ((big * 0.22, big * 0.7), (big * 0.12, big * 0.8), (big * 0.88, big * 0.8), (big * 0.78, big * 0.7)), fill=fg
    )
    draw.ellipse((big * 0.4, big * 0.8, big * 0.6, big * 0.95), fill=fg)
    draw.ellipse((big * 0.45, big * 0.05, big * 0.55, big * 0.16), fill=fg)
    return image.resize((size, size), Image.Resampling.LANCZOS)


def _show_apps_icon(size: int) -> Any:
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (size, size))
    draw = ImageDraw.Draw(image)
    step = size // 4
    dot = max(2, size // 12)
    for row in range(3):
        for col in range(3):
            cx, cy = step * (col + 1), step * (row + 1)
            draw.ellipse((cx - dot, cy - dot, cx + dot, cy + dot), fill=(238, 238, 236))
    return image


#: GNOME 43's window picker under Yaru (``#overviewGroup`` #222222, ``.workspace-background``'s 30 px corners
#: and shadow), measured on the ``gnome`` session at 1920x1080 (docs/backends.md): the workspace is the work
#: area's wallpaper scaled into a card, x 242-1747, y 149-1005 on the screen (the work area's shape, centred
#: right of the dock, 122 px under the work area's top), the windows' previews laid out over it
#: (:func:`.panel.picker_slots`), the search entry 24 px under the bar. ``PICKER_CARD``: the card's top in
#: the work area, and its height over the screen's.
PICKER_COLOUR = (34, 34, 34)
PICKER_CARD = (122, 857 / 1080)
PICKER_SEARCH_Y = 24
PICKER_CORNER = 30
#: The next workspace's card, right of the current one: this far from it, and this much smaller (measured: from
#: x 1858, y 175-980 at 1920x1080, cut by the screen's edge).
PICKER_PEEK = (110, 805 / 857)
#: The previews' area: the card widened by this much (both ways, keeping its shape), as measured with three
#: windows whose row did not fit the card (GNOME's row then reaches 20 px past the card's sides).
PICKER_SLACK = 20
#: Between previews and rows: ``.window-picker``'s 6 px and the largest of a preview's chrome (its icon's 30 %
#: below the preview, 19.2 px, and 5 px for the hovered preview's growth), as GNOME adds them.
PICKER_SPACING = 30.2


def picker_card(screen: tuple[int, int]) -> tuple[int, int, int, int]:
    """The workspace's card in the window picker, ``(x, y, width, height)`` from the overview's top left (the
    work area's top left): the work area's shape at :data:`PICKER_CARD`'s height, centred across it."""
    width, height = screen
    work_w, work_h = width - DOCK_WIDTH, height - BAR_HEIGHT
    card_h = min(round(height * PICKER_CARD[1]), work_h - PICKER_CARD[0])
    card_w = round(card_h * work_w / work_h)
    return ((work_w - card_w) // 2, PICKER_CARD[0], card_w, card_h)


#: The title caption under the preview the pointer is on (Yaru's ``.window-caption``: #2a2a2a at 97.5 % in a
#: 1 px #464646 border, a pill with 6 px above and below the text and 12 px beside it), 6 px under the icon.
CAPTION_COLOUR = (42, 42, 42)
#: The app icon GNOME 43 puts on each preview (its ``windowPreview.js``): 64 px, centred, 70 % over the preview's
#: bottom; the app found by the window's class, as the top bar names it.
PICKER_ICON = 64
#: The icon of a window of no app above.
FALLBACK_ICON = ("application-x-executable",)


def _picker_icons() -> tuple[Any, list[list[str]]]:
    """The window picker's app icons side by side (RGBA, :data:`PICKER_ICON` square), the fallback last, and
    the classes each one is for."""
    from PIL import Image

    entries = [(list(app.classes), app.icons) for app in dict.fromkeys((*LAUNCHERS, *APPS)) if app.classes]
    entries += [(list(classes), icons) for classes, icons in OTHER_ICONS]
    strip = Image.new("RGBA", (PICKER_ICON * (len(entries) + 1), PICKER_ICON))
    for i, (_, icons) in enumerate([*entries, ([], FALLBACK_ICON)]):
        strip.paste(_icon(icons, PICKER_ICON), (i * PICKER_ICON, 0))
    return strip, [classes for classes, _ in entries]


def picker_area(screen: tuple[int, int]) -> tuple[int, int, int, int]:
    """Where the window picker lays out the previews (:func:`.panel.picker_slots`): the card widened by
    :data:`PICKER_SLACK` on each side, and as much taller in proportion, about its centre."""
    x, y, w, h = picker_card(screen)
    dy = round(PICKER_SLACK * h / w)
    return (x - PICKER_SLACK, y - dy, w + 2 * PICKER_SLACK, h + 2 * dy)


def _picker_background(screen: tuple[int, int]) -> Any:
    """The window picker without its windows: the overview's grey, the work area's wallpaper on a card with
    rounded corners and a soft shadow under it, and the next (empty) workspace's card peeking in at the right
    (:data:`PICKER_PEEK`), as GNOME's dynamic workspaces always have one after the last."""
    from PIL import Image, ImageDraw, ImageFilter

    width, height = screen
    x, y, w, h = picker_card(screen)
    gap, scale = PICKER_PEEK
    peek_w, peek_h = round(w * scale), round(h * scale)
    cards = ((x, y, w, h), (x + w + gap, y + (h - peek_h) // 2, peek_w, peek_h))
    image = Image.new("RGB", (width - DOCK_WIDTH, height - BAR_HEIGHT), PICKER_COLOUR)
    radius = max(2, round(PICKER_CORNER * w / (width - DOCK_WIDTH)))
    shadow = Image.new("L", image.size, 0)
    for cx, cy, cw, ch in cards:
        ImageDraw.Draw(shadow).rounded_rectangle((cx - 4, cy, cx + cw + 3, cy + ch + 7), radius=radius, fill=70)
    image.paste((0, 0, 0), mask=shadow.filter(ImageFilter.GaussianBlur(8)))
    work = _wallpaper(screen).crop((DOCK_WIDTH, BAR_HEIGHT, width, height))
    for cx, cy, cw, ch in cards:
        mask = Image.new("L", (cw, ch), 0)
        ImageDraw.Draw(mask).rounded_rectangle((0, 0, cw - 1, ch - 1), radius=radius, fill=255)
        image.paste(work.resize((cw, ch), Image.Resampling.LANCZOS), (cx, cy), mask)
    return image


TILE = (136, 128)
GRID_ICON = 64


def _tiles(apps: Sequence[AppEntry]) -> tuple[Any, dict[str, Any]]:
    """The app grid's tiles side by side (icon over name, on the overview's background)."""
    from PIL import Image, ImageDraw

    font = _font("regular", 14)
    strip = Image.new("RGB", (TILE[0] * len(apps), TILE[1]), OVERVIEW_COLOUR)
    draw = ImageDraw.Draw(strip)
    for i, app in enumerate(apps):
        icon = _icon(app.icons, GRID_ICON)
        x = i * TILE[0]
        strip.paste(icon, (x + (TILE[0] - GRID_ICON) // 2, 16), icon)
        name = app.name if font.getlength(app.name) <= TILE[0] - 8 else app.name[:16] + "…"
        width = font.getlength(name)
        draw.text((x + (TILE[0] - width) / 2, 16 + GRID_ICON + 12), name, font=font, fill=(238, 238, 236))
    return strip, {"width": TILE[0], "height": TILE[1]}


def _dock_icons(dock: Any, icons: Sequence[Sequence[str]], size: int) -> tuple[Any, bytes]:
    """The dock's icons side by side, each the first found of its names at ``size``, over the dock band's mean
    colour, and their mask: a bit per pixel, set where an icon has any ink (rows of the strip's width, least
    significant bit first, each padded to 32 bits, as the X server takes a depth-1 image). The panel copies an
    icon through its mask, so the band around it is the band's own; the band varies by a few levels only from
    top to bottom, which is all an icon's antialiased edge can differ from GNOME's blend over it."""
    import numpy as np
    from PIL import Image

    behind = tuple(int(v) for v in np.asarray(dock).reshape(-1, 3).mean(axis=0).round())
    strip = Image.new("RGB", (size * len(icons), size), behind)
    alpha = Image.new("L", strip.size, 0)
    for i, names in enumerate(icons):
        icon = _icon(names, size)
        strip.paste(icon, (i * size, 0), icon)
        alpha.paste(icon.getchannel("A"), (i * size, 0))
    ink = np.asarray(alpha) > 0
    padded = np.zeros((size, (strip.width + 31) // 32 * 32), dtype=bool)
    padded[:, : strip.width] = ink
    return strip, np.packbits(padded, axis=1, bitorder="little").tobytes()


def _dock_app(app: AppEntry, icon: int) -> dict[str, Any]:
    return {
        "name": app.name,
        "id": app.key,  # its desktop file's (the favourites' ids, the menus' app actions)
        "command": list(app.command),
        "classes": list(app.classes),
        "icon": icon,
    }


def _render(screen: tuple[int, int]) -> tuple[dict[str, bytes], dict[str, Any]]:
    from PIL import Image

    from legato_gym.backends.local.apps.gnome import AUDIO_VOLUME
    from legato_gym.backends.local.sandbox.shell import FAVORITES

    spot = layout(screen)
    width, height = screen
    files: dict[str, bytes] = {}
    images: dict[str, list[Any]] = {}

    def keep(name: str, image: Any) -> None:
        files[f"{name}.z"] = _raw(image)
        images[name] = [image.width, image.height, f"{name}.z"]

    wallpaper = _wallpaper(screen)  # the root's background (:func:`wallpaper`), under the dock's band
    bar = Image.new("RGB", (width, BAR_HEIGHT), BAR_COLOUR)
    bar_glyphs, bar_table = _glyphs("regular", 15, (238, 238, 236), BAR_COLOUR)
    text_y = (BAR_HEIGHT - bar_table["height"]) // 2
    _draw_lcd(bar, [((18, text_y), "Activities")], _font("regular", 15), (238, 238, 236))
    activities_end = 18 + _text_width(bar_table, "Activities") + 12
    _status_icons(bar, width)
    keep("bar", bar)
    keep("glyphs_bar", bar_glyphs)
    keep("glyphs_bar_lit", _glyphs("regular", 15, (238, 238, 236), BAR_BUTTON_LIT)[0])
    keep("status_lit", _status_lit())
    keep("glyphs_bar_hover", _glyphs("regular", 15, (238, 238, 236), BAR_BUTTON_HOVER)[0])
    keep("status_hover", _status_lit(BAR_BUTTON_HOVER))
    for state, colour in (("", BAR_COLOUR), ("_lit", BAR_BUTTON_LIT), ("_hover", BAR_BUTTON_HOVER)):
        keep(f"indicator{state}", _message_indicator(colour))
        keep(f"indicator_off{state}", _message_indicator(colour, off=True))
    app_icons, app_icon_index = _bar_icons(BAR_COLOUR)
    keep("app_icons", app_icons)
    keep("app_icons_lit", _bar_icons(BAR_BUTTON_LIT)[0])
    keep("app_icons_hover", _bar_icons(BAR_BUTTON_HOVER)[0])
    # the dock: the wallpaper under a dark band, and Show Applications; the panel puts the launchers on it (the
    # favourites, the running apps, Trash after a separator) from a strip of every app's icon
    band = wallpaper.crop((0, BAR_HEIGHT, DOCK_WIDTH, height))
    tint = Image.new("RGB", band.size, DOCK_TINT)
    dock = Image.blend(band, tint, DOCK_OPACITY)
    apps = dock_apps()
    icons, mask = _dock_icons(dock, [GENERIC_ICONS, *(app.icons for app in (*apps, TRASH))], spot.icon)
    keep("dock_icons", icons)
    files["dock_mask.z"] = zlib.compress(mask, 6)
    grid_icon = _show_apps_icon(spot.icon)
    dock.paste(
        grid_icon, (DOCK_WIDTH // 2 - spot.icon // 2, spot.show_apps_centre - BAR_HEIGHT - spot.icon // 2), grid_icon
    )
    keep("dock", dock)
    tiles, tile_table = _tiles(APPS)
    keep("tiles", tiles)
    search_glyphs, search_table = _glyphs("regular", 15, (238, 238, 236), SEARCH_COLOUR)
    hint_glyphs, _ = _glyphs("regular", 15, (154, 150, 152), SEARCH_COLOUR)
    keep("glyphs_search", search_glyphs)
    keep("glyphs_hint", hint_glyphs)
    # the menus' and dialogs' text: a style per (font, size, colour, background), as GNOME's stylesheet sets them
    menu_styles = {
        "menu": ("regular", 15, TEXT_COLOUR, MENU_COLOUR),
        "menu_hot": ("regular", 15, TEXT_COLOUR, MENU_HIGHLIGHT),
        "menu_dim": ("regular", 15, DIM_COLOUR, MENU_COLOUR),
        "menu_bold": ("bold", 15, TEXT_COLOUR, MENU_COLOUR),
        "submenu": ("regular", 15, TEXT_COLOUR, SUBMENU_COLOUR),
        "title": ("bold", 20, TEXT_COLOUR, MENU_COLOUR),
        "title_dim": ("bold", 20, DIM_COLOUR, MENU_COLOUR),
        "small": ("regular", 12, TEXT_COLOUR, MENU_COLOUR),
        "small_dim": ("regular", 12, DIM_COLOUR, MENU_COLOUR),
        "today": ("bold", 12, (255, 255, 255), DOT_COLOUR),
        "small_selected": ("regular", 12, (239, 239, 239), DAY_SELECTED),
        "button": ("regular", 15, TEXT_COLOUR, BUTTON_COLOUR),
        "button_off": ("regular", 15, INSENSITIVE_TEXT, INSENSITIVE_BUTTON),
        "caption": ("regular", 15, (238, 238, 236), CAPTION_COLOUR),
    }
    glyph_tables = {}
    for style, (kind, size, fg, bg) in menu_styles.items():
        strip, glyph_tables[style] = _glyphs(kind, size, fg, bg, latin1=style == "caption")
        keep(f"glyphs_{style}", strip)
    keep("menu_icons", _menu_icons(MENU_COLOUR))
    keep("menu_icons_hot", _menu_icons(MENU_HIGHLIGHT))
    keep("bell", _bell(48))
    # the window picker's background: loaded only while the overview is open, not kept in the X server
    files["picker.z"] = _raw(_picker_background(screen))
    icons, icon_classes = _picker_icons()
    files["picker_icons.z"] = zlib.compress(icons.tobytes("raw", "BGRA"), 6)
    card = picker_card(screen)
    manifest = {
        "screen": [width, height],
        "bar_height": BAR_HEIGHT,
        "dock_width": DOCK_WIDTH,
        "colours": {
            "bar": BAR_COLOUR,
            "dot": DOT_COLOUR,
            "overview": OVERVIEW_COLOUR,
            "search": SEARCH_COLOUR,
            "menu": MENU_COLOUR,
            "menu_hot": MENU_HIGHLIGHT,
            "menu_border": MENU_BORDER,
            "separator": MENU_SEPARATOR,
            "submenu": SUBMENU_COLOUR,
            "button": BUTTON_COLOUR,
            "button_off": INSENSITIVE_BUTTON,
            "today": DOT_COLOUR,
            "bar_lit": BAR_BUTTON_LIT,
            "bar_hover": BAR_BUTTON_HOVER,
            "day_selected": DAY_SELECTED,
            "caption": CAPTION_COLOUR,
            "caption_border": MENU_SEPARATOR,
        },
        "images": images,
        "glyphs": {
            "bar": bar_table,
            "bar_lit": bar_table,
            "bar_hover": bar_table,
            "search": search_table,
            "hint": search_table,
            **glyph_tables,
        },
        "menu_icons": {"names": list(MENU_ICONS), "size": MENU_ICON},
        "text_y": text_y,
        "clock": {
            "gap": CLOCK_GAP,
            "indicator": [MESSAGE_INDICATOR, MESSAGE_INDICATOR_GAP, (BAR_HEIGHT - MESSAGE_INDICATOR) // 2],
        },
        "activities": [0, activities_end],
        "activities_x": 18,  # its label's
        "app_icon_x": activities_end + APP_ICON_GAP,
        "app_name_x": activities_end + APP_ICON_GAP + APP_ICON + APP_NAME_GAP,
        "app_icons": {"size": APP_ICON, "y": (BAR_HEIGHT - APP_ICON) // 2, "index": app_icon_index},
        "status": [width - STATUS_WIDTH, width],
        "cell": spot.cell,
        "dock": {
            # every app the dock can show, its icon the strip's (0: the generic one), Trash apart
            "apps": [_dock_app(app, i + 1) for i, app in enumerate(apps)],
            "trash": _dock_app(TRASH, len(apps) + 1),
            "favorites": list(FAVORITES),  # where GSettings cannot be asked (shell.lookalike_schemas)
            "icon": spot.icon,
            "first_centre": spot.first_centre,
            "gap": spot.cell // 4,
            "mask": "dock_mask.z",
            "separator": [90, 84, 88],
        },
        "show_apps": spot.show_apps_centre,
        "apps": [{"name": a.name, "id": a.key, "command": list(a.command)} for a in APPS],
        "tile": tile_table,
        "picker": {
            "background": [width - DOCK_WIDTH, height - BAR_HEIGHT, "picker.z"],
            "card": list(card),
            "area": list(picker_area(screen)),
            "search_y": PICKER_SEARCH_Y,
            "spacing": PICKER_SPACING,
            "icons": [icons.width, icons.height, "picker_icons.z"],
            "icon_classes": icon_classes,
        },
        "names": {**OTHER_NAMES},
        "volume": AUDIO_VOLUME,  # the system menu's slider until the sound server says its own
    }
    return files, manifest


def lookalike_margins() -> str:
    """openbox's ``<margins>``: the top bar's rows and the dock's columns, kept free of windows as GNOME's
    struts keep them (the work area: ``_NET_WORKAREA``, where maximized windows go)."""
    return f"  <margins><top>{BAR_HEIGHT}</top><bottom>0</bottom><left>{DOCK_WIDTH}</left><right>0</right></margins>\n"


#: The lookalike's openbox theme (data of the package: ``themerc`` and its buttons' symbols), copied into the
#: desktop's lookalike folder and named there by its path (openbox takes a theme's absolute path as its name).
THEME_DIR = Path(__file__).with_name("themes") / "Yaru-lookalike"
#: The title bar's height under it, as mutter's under Yaru (``headerbar.default-decoration``: 28 px, 4 px of
#: padding above and below, a 1 px line): the top of ``_NET_FRAME_EXTENTS``; no border left, right or below.
TITLE_BAR_HEIGHT = 37
#: Its colours, measured from the VM's screenshot: the bar, its top row, the line under it, the buttons' symbols
#: and the grey disc behind each (Files' title buttons there); a hovered and a pressed button's, which the
#: screenshot does not show, darken the disc as Yaru's alpha does (0.10, 0.15, 0.25 of #3D3D3D in 22.10).
TITLE_BAR_COLOURS = {
    "bar": (241, 241, 241),
    "top": (252, 252, 252),
    "line": (201, 201, 201),
    "symbol": (85, 85, 85),
    "button": (234, 234, 234),
    "hover": (230, 230, 230),
    "pressed": (224, 224, 224),
}
#: Where mutter draws Yaru's minimize, maximize and close buttons on a window it decorates: each disc's centre
#: in pixels left of the frame's last column (a window at its own size, a maximized one) and under its top, and
#: the discs' diameter. Measured: mutter 43 with Yaru's GTK theme (Debian's yaru-theme-gtk 22.10) and Ubuntu's
#: ``button-layout`` ``':minimize,maximize,close'``, an xterm's frame, alone and under GNOME Shell (the ``gnome``
#: session): the same at both sizes. xfwm4's discs (:mod:`.xfwm`) are centred within :data:`TITLE_BUTTON_SLACK`
#: pixels of these; openbox's squares, where xfwm4 is not installed, within 6.
YARU_TITLE_BUTTONS = {"own size": (85.5, 51.5, 17.5), "maximized": (85.5, 51.5, 17.5), "top": 17.5, "diameter": 22}
TITLE_BUTTON_SLACK = 1
#: GNOME's title bar font on the VM, Ubuntu Bold 11 (:mod:`.fonts`); Cantarell Bold 11 stands in where the
#: Ubuntu font is not installed (:func:`title_font`).
TITLE_FONT = ("Ubuntu", 11, "Bold")
FALLBACK_TITLE_FONT = ("Cantarell", 11, "Bold")


def title_font() -> tuple[str, int, str]:
    """openbox's title bar font: :data:`TITLE_FONT` if the Ubuntu font is installed, else the fallback."""
    return TITLE_FONT if fonts.installed() else FALLBACK_TITLE_FONT


def lookalike_theme() -> str:
    """openbox's ``<theme>``: :data:`THEME_DIR` as copied into the sandbox, the title alone at the left of
    minimize, maximize and close (``LIMC``; the theme centres it), in :func:`title_font`, as mutter's title bars
    under Yaru are."""
    name, size, weight = title_font()
    fonts = "".join(
        f'<font place="{place}"><name>{name}</name><size>{size}</size><weight>{weight}</weight>'
        "<slant>Normal</slant></font>"
        for place in ("ActiveWindow", "InactiveWindow")
    )
    return f"  <theme><name>{LOOKALIKE_DIR}/theme</name><titleLayout>LIMC</titleLayout>{fonts}</theme>\n"


@functools.lru_cache(maxsize=4)
def wallpaper(screen: tuple[int, int]) -> Wallpaper:
    """The session's wallpaper on a ``screen`` of ``(width, height)``, as the root window's background: the X
    server shows it under every window and repaints it by itself; the panel's desktop window over it only takes
    the clicks on it."""
    width, height = screen
    return Wallpaper(width, height, _raw(_wallpaper((width, height))))


@functools.lru_cache(maxsize=4)
def _rendered(screen: tuple[int, int]) -> tuple[tuple[tuple[str, bytes], ...], str]:
    """The pictures and manifest for ``screen``: drawn once per machine and revision (:mod:`.drawn`)."""
    inputs: list[str | Path] = [
        APPLICATIONS,
        *_ICON_THEMES,
        *(path for paths in _FONTS.values() for path in paths),
        _PACKAGES,
    ]
    inputs += [fonts.install_dir(), *(path for weight in (400, 700) if (path := fonts.ubuntu_file(weight)))]
    return drawn.stored(screen, _draw, inputs)


def _draw(screen: tuple[int, int]) -> tuple[tuple[tuple[str, bytes], ...], str]:
    files, manifest = _render(screen)
    return tuple(sorted(files.items())), json.dumps(manifest)


@functools.cache
def _panel_bytecode() -> tuple[str, bytes]:
    """The panel's module compiled by this interpreter: where in the panel's folder its import looks for it
    (``__pycache__/legato_panel.cpython-311.pyc``) and the bytes, unchecked against the source's time (the
    copy's is another). A sandbox interpreter of another version looks for another name and compiles the source."""
    import py_compile
    import sys
    import tempfile

    cached = f"__pycache__/{PANEL_MODULE}.{sys.implementation.cache_tag}.pyc"
    with tempfile.TemporaryDirectory(prefix="legato-panel-") as tmp:
        compiled = Path(tmp) / "panel.pyc"
        invalidation = py_compile.PycInvalidationMode.UNCHECKED_HASH
        py_compile.compile(str(PANEL_FILE), str(compiled), doraise=True, invalidation_mode=invalidation)
        return cached, compiled.read_bytes()


def write_lookalike_files(folder: Path, screen: tuple[int, int]) -> None:
    """Write the lookalike session's files into ``folder`` (bound at :data:`LOOKALIKE_DIR`): the panel
    (:mod:`.panel`), its pictures for a ``screen`` of ``(width, height)`` and its manifest, and where xfwm4 is
    installed its theme and settings (:mod:`.xfwm`).

    The pictures are drawn once per screen size on this machine (about a second of Pillow; :mod:`.drawn` keeps
    them), then copied."""
    from legato_gym.backends.local import apps
    from legato_gym.backends.local.sandbox import xfwm
    from legato_gym.backends.local.sandbox.shell import APP_WINDOWS, lookalike_schemas

    files, drawn = _rendered(tuple(screen))  # type: ignore[arg-type]
    # how each app's windows open, and what ctrl+alt+t runs: the panel keeps both, whichever window manager runs
    terminal = apps.terminal_command()
    manifest = json.dumps({**json.loads(drawn), "windows": APP_WINDOWS, "terminal": [terminal] if terminal else []})
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files:
        (folder / name).write_bytes(data)
    (folder / "panel.json").write_text(manifest)
    (folder / "panel.py").write_text(_PANEL_LAUNCHER)
    shutil.copyfile(PANEL_FILE, folder / f"{PANEL_MODULE}.py")
    cached, bytecode = _panel_bytecode()
    (folder / cached).parent.mkdir(exist_ok=True)
    (folder / cached).write_bytes(bytecode)
    shutil.copytree(THEME_DIR, folder / "theme", dirs_exist_ok=True)
    if (conf := fonts.fontconfig_conf()) is not None:  # FONTCONFIG_FILE inside (.shell.session_environment)
        (folder / FONTCONFIG_NAME).write_text(conf)
    (folder / XSETTINGS_NAME).write_text(fonts.xsettings_conf())
    if xfwm.installed():
        xfwm.write_files(folder, LOOKALIKE_DIR, title_font(), layout(screen).work_area)
    if (schemas := lookalike_schemas()) is not None:  # GSETTINGS_SCHEMA_DIR inside (.shell.session_environment)
        (folder / SCHEMAS_NAME).mkdir(exist_ok=True)
        (folder / SCHEMAS_NAME / "gschemas.compiled").write_bytes(schemas)
