"""The lookalike session's window manager: xfwm4, with title bars drawn as mutter draws them under Yaru.

openbox draws a title button as a rectangle under a one-colour mask and gives every title bar an even number of
rows, so under it Yaru's grey discs were squares, an own-size window had a 1 px row under its client and square
top corners. xfwm4 (Debian's 4.18) draws each part of a frame from a full-colour picture, the top corners from
shaped ones, so the theme drawn here (:func:`write_theme`) puts the VM's title bar on mutter's pixels: 37 rows
with the highlight on top and the line under them, 22 px discs where mutter puts them, no border, no bottom row,
rounded top corners (at its own size; none when maximized, as mutter's).

Its settings are an xfconf channel (:func:`settings_channel`) and its key bindings another
(:func:`shortcuts_channel`): only what the VM's mutter binds and the apps do not need. Both are system files in
the desktop's lookalike folder, which the sandbox's ``XDG_CONFIG_DIRS`` names first
(:func:`.shell.session_environment`); ``xfconfd`` starts on the session bus when xfwm4 asks for them. Anything in
the desktop may change them with ``xfconf-query`` for the episode, as an agent on the VM may change mutter's with
``gsettings``; a reset starts a new sandbox, and with it xfconfd and xfwm4 from the files.

xfwm4 has no per-app rules, runs no programs and opens no menu of mutter's: the panel (:mod:`.panel`) opens the
table's apps maximized (:data:`.shell.APP_WINDOWS`), binds ctrl+alt+t, publishes the work area without the top bar
and the dock, and opens GNOME's window menu on a title bar's right-click.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legato_gym.backends.local.sandbox.lookalike import TITLE_BAR_COLOURS

__all__ = [
    "BAR",
    "THEME_NAME",
    "VM",
    "Colours",
    "command",
    "installed",
    "settings_channel",
    "shortcuts_channel",
    "write_files",
    "write_theme",
]

#: mutter's title bar under Yaru: 36 rows and a 1 px line; 22 px discs, their box's top 7 px under the bar's,
#: 12 px apart, the close disc's box 7 px from the frame's right end, at its own size and maximized alike (its
#: discs' centres: :data:`.lookalike.YARU_TITLE_BUTTONS`).
BAR = 37
DISC = 22
DISC_TOP = 7
DISC_RADIUS = 10.8  # fitted to mutter's anti-aliased disc
CORNER = 12
CORNER_RADIUS = 11.75  # fitted to the pixels mutter covers more than half at its rounded top corners
BUTTON_OFFSET = 7
BUTTON_SPACING = 12
#: xfwm4 centres the title between its left and right buttons, mutter in the whole bar: a blank "stick"
#: button as wide as the right-hand group (3 x 22 + 2 x 12 = 90) puts it where mutter's is.
SPACER = 3 * DISC + 2 * BUTTON_SPACING
#: The buttons' order (xfwm4's ``button_layout``): the spacer at the left, the title, then Ubuntu's
#: minimize, maximize and close (``:minimize,maximize,close``).
BUTTON_LAYOUT = "T|HMC"
SUPERSAMPLE = 16
#: The theme's folder and the settings' folder inside the desktop's lookalike folder.
THEME_NAME = "xfwm4-theme"
CONFIG_NAME = "xdg"
_CHANNELS = "xfce4/xfconf/xfce-perchannel-xml"


@dataclass(frozen=True)
class Colours:
    """A title bar's greys (0-255) and its title's colours: focused, then unfocused (``i...``)."""

    bar: int
    top: int
    line: int
    disc: int
    hover: int
    pressed: int
    symbol: int
    ibar: int
    itop: int
    iline: int
    isymbol: int
    text: str
    itext: str


def _vm() -> Colours:
    """OSWorld's VM (Yaru 22.04): the focused bar's colours as the lookalike has them
    (:data:`.lookalike.TITLE_BAR_COLOURS`, read from the VM's screenshot); an unfocused bar as Yaru's backdrop under
    mutter (measured on Debian's), its symbols and title lighter."""
    c = {name: rgb[0] for name, rgb in TITLE_BAR_COLOURS.items()}
    return Colours(
        c["bar"], c["top"], c["line"], c["button"], c["hover"], c["pressed"], c["symbol"],
        250, 254, 209, 160, "#3d3d3d", "#929292",
    )  # fmt: skip


VM = _vm()


def _coverage(inside: Callable[[Any, Any], Any], width: int, height: int) -> Any:
    """How much of each pixel of a ``width`` x ``height`` picture ``inside(x, y)`` covers (pixel centres +0.5)."""
    import numpy as np

    ys, xs = np.mgrid[0 : height * SUPERSAMPLE, 0 : width * SUPERSAMPLE]
    fx, fy = (xs + 0.5) / SUPERSAMPLE, (ys + 0.5) / SUPERSAMPLE
    return inside(fx, fy).reshape(height, SUPERSAMPLE, width, SUPERSAMPLE).mean(axis=(1, 3))


def _column(c: Colours, focused: bool) -> Any:
    import numpy as np

    column = np.full(BAR, float(c.bar if focused else c.ibar))
    column[0] = c.top if focused else c.itop
    column[-1] = c.line if focused else c.iline
    return column


def _symbol(kind: str) -> Any:
    """A button's 8 px symbol as mutter draws Yaru's 16 px icons, its coverage in the disc's 22 px box."""
    import numpy as np

    mask = np.zeros((DISC, DISC))
    if kind == "hide":
        mask[13, 7:15] = 1
    elif kind == "maximize":
        mask[7, 7:15] = mask[14, 7:15] = mask[7:15, 7] = mask[7:15, 14] = 1
    elif kind == "maximize-toggled":
        mask[9, 7:13] = mask[14, 7:13] = mask[9:15, 7] = mask[9:15, 12] = 1
        mask[7, 9:15] = mask[7:13, 14] = 0.5  # the square behind, half as dark
    elif kind == "close":  # two 1.3 px strokes with butt ends, corner to corner less 0.4 px (fitted)

        def cross(fx: Any, fy: Any) -> Any:
            px, py = fx - DISC / 2, fy - DISC / 2
            hit = np.zeros(px.shape, bool)
            for side in (1, -1):
                along, across = (side * px + py) / np.sqrt(2), (side * px - py) / np.sqrt(2)
                hit |= (np.abs(across) <= 0.65) & (np.abs(along) <= 3.6 * np.sqrt(2))
            return hit

        mask = _coverage(cross, DISC, DISC)
    return mask


def _button(c: Colours, kind: str, state: str) -> Any:
    import numpy as np
    from PIL import Image

    focused = state != "inactive"
    pixels = np.repeat(_column(c, focused)[:, None], DISC, axis=1)
    box = slice(DISC_TOP, DISC_TOP + DISC)
    if focused:  # an unfocused window's buttons have no disc (Yaru's backdrop)
        shade = {"active": c.disc, "prelight": c.hover, "pressed": c.pressed}[state]
        disc = _coverage(lambda x, y: (x - DISC / 2) ** 2 + (y - DISC / 2) ** 2 <= DISC_RADIUS**2, DISC, DISC)
        pixels[box] = pixels[box] * (1 - disc) + shade * disc
    symbol = _symbol(kind)
    pixels[box] = pixels[box] * (1 - symbol) + (c.symbol if focused else c.isymbol) * symbol
    return Image.fromarray(np.round(pixels).astype(np.uint8), "L").convert("RGB")


def _corner(c: Colours, focused: bool, right: bool) -> Any:
    """A top corner rounded as mutter's, the top row's highlight following the curve. Its shape is 1 bit: xfwm4
    shapes the frame's windows, and without a compositor nothing blends the edge with what lies behind."""
    import numpy as np
    from PIL import Image

    centre = CORNER_RADIUS if not right else CORNER - CORNER_RADIUS

    def rounded(inset: float) -> Any:
        def inside(x: Any, y: Any) -> Any:
            within = (y >= inset) & ((x >= inset) if not right else (x <= CORNER - inset))
            square = (y >= CORNER_RADIUS) | ((x >= centre) if not right else (x <= centre))
            return within & (square | ((x - centre) ** 2 + (y - CORNER_RADIUS) ** 2 <= (CORNER_RADIUS - inset) ** 2))

        return _coverage(inside, CORNER, BAR)

    outer, inner = rounded(0.0), rounded(1.0)
    body = np.repeat(_column(c, focused)[:, None], CORNER, axis=1)
    body[0] = c.bar if focused else c.ibar
    with np.errstate(invalid="ignore", divide="ignore"):
        grey = np.where(outer > 0, ((c.top if focused else c.itop) * (outer - inner) + body * inner) / outer, 0)
    grey[-1] = c.line if focused else c.iline
    alpha = np.where(outer >= 0.5, 255, 0)
    g = np.round(grey).astype(np.uint8)
    return Image.fromarray(np.dstack([g, g, g, alpha.astype(np.uint8)]), "RGBA")


def write_theme(folder: Path, c: Colours = VM) -> None:
    """Write an xfwm4 theme (``themerc`` and its PNGs) of mutter's title bar under Yaru into ``folder``.

    No side, bottom or bottom-corner pictures: xfwm4 gives those parts no size, so the frame is the bar alone
    (``_NET_FRAME_EXTENTS`` 0, 0, 37, 0 at every size). Use it with :data:`BUTTON_LAYOUT`.
    """
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for focused, name in ((True, "active"), (False, "inactive")):
        strip = Image.fromarray(np.round(_column(c, focused)).astype(np.uint8)[:, None], "L").convert("RGB")
        for part in range(1, 6):
            strip.save(folder / f"title-{part}-{name}.png")
        _corner(c, focused, right=False).save(folder / f"top-left-{name}.png")
        _corner(c, focused, right=True).save(folder / f"top-right-{name}.png")
    for state in ("active", "inactive", "prelight", "pressed"):
        column = np.round(_column(c, state != "inactive")).astype(np.uint8)
        blank = Image.fromarray(np.repeat(column[:, None], SPACER, axis=1), "L").convert("RGB")
        blank.save(folder / f"stick-{state}.png")
        blank.save(folder / f"stick-toggled-{state}.png")
        for kind in ("hide", "maximize", "maximize-toggled", "close"):
            _button(c, kind, state).save(folder / f"{kind}-{state}.png")
    (folder / "themerc").write_text(
        "# mutter's title bar under Yaru, drawn by legato (legato_gym/backends/local/sandbox/xfwm.py)\n"
        f"active_text_color={c.text}\ninactive_text_color={c.itext}\n"
        "title_shadow_active=false\ntitle_shadow_inactive=false\nfull_width_title=true\n"
        "title_vertical_offset_active=0\ntitle_vertical_offset_inactive=0\nshow_app_icon=false\n"
        f"button_offset={BUTTON_OFFSET}\nmaximized_offset={BUTTON_OFFSET}\nbutton_spacing={BUTTON_SPACING}\n"
    )


def _channel(name: str, body: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<channel name="{name}" version="1.0">\n{body}</channel>\n'


def _rows(values: dict[str, tuple[str, str]], indent: str) -> str:
    return "".join(f'{indent}<property name="{k}" type="{t}" value="{v}"/>\n' for k, (t, v) in values.items())


def settings_channel(theme: str, font: tuple[str, int, str], work_area: tuple[int, int, int, int]) -> str:
    """xfwm4's settings (its ``xfwm4`` channel): the theme at ``theme`` (a folder's path), Ubuntu's buttons behind
    the spacer, the title centred in ``font`` (name, size, weight), the top bar's rows and the dock's columns kept
    free (margins around ``work_area``: x, y, width, height), new windows centred as mutter's, and nothing mutter
    does not do: no compositor, no shadow, no roll-up by the wheel, no tiling by dragging to an edge, no moving to
    the next workspace at the screen's edge.

    Two workspaces, as GNOME's dynamic workspaces have while windows are open (the one shown and an empty one
    after it): the window menu's Move to Workspace Right has somewhere to go (:mod:`.panel`). A window activated
    from elsewhere (the dock, the overview) is brought to the workspace shown, so the screen looks as GNOME's,
    which shows the window's workspace and drops the empty one left behind."""
    name, size, weight = font
    left, top, _, _ = work_area
    general = {
        "margin_left": ("int", str(left)),
        "margin_top": ("int", str(top)),
        "theme": ("string", theme),
        "button_layout": ("string", BUTTON_LAYOUT),
        "title_font": ("string", f"{name} {weight} {size}"),
        "title_alignment": ("string", "center"),
        "use_compositing": ("bool", "false"),
        "show_frame_shadow": ("bool", "false"),
        "workspace_count": ("int", "2"),
        "activate_action": ("string", "bring"),
        "placement_mode": ("string", "center"),
        "placement_ratio": ("int", "100"),
        "mousewheel_rollup": ("bool", "false"),
        "tile_on_move": ("bool", "false"),
        "wrap_windows": ("bool", "false"),
        "wrap_workspaces": ("bool", "false"),
        "scroll_workspaces": ("bool", "false"),
        "double_click_action": ("string", "maximize"),
        "easy_click": ("string", "Alt"),
        "cycle_minimum": ("bool", "true"),
        "cycle_preview": ("bool", "false"),
    }
    return _channel("xfwm4", f'  <property name="general" type="empty">\n{_rows(general, "    ")}  </property>\n')


#: The key bindings xfwm4 keeps (the VM's mutter has them too): switching windows and closing one; Escape and
#: the arrows act only while a move, a resize or the switcher is under way. Debian's defaults also take keys the
#: apps need (ctrl+F1 to F12, alt+F6 to F12, ctrl+alt+arrows...): the custom set replaces them.
SHORTCUTS = {
    "<Alt>Tab": "cycle_windows_key",
    "<Alt><Shift>Tab": "cycle_reverse_windows_key",
    "<Alt>F4": "close_window_key",
    "Escape": "cancel_key",
    "Left": "left_key",
    "Right": "right_key",
    "Up": "up_key",
    "Down": "down_key",
}


def shortcuts_channel() -> str:
    """xfwm4's key bindings (the ``xfce4-keyboard-shortcuts`` channel): :data:`SHORTCUTS`, overriding the defaults."""
    keys = {k.replace("<", "&lt;").replace(">", "&gt;"): ("string", v) for k, v in SHORTCUTS.items()}
    custom = {"override": ("bool", "true")}
    body = (
        '  <property name="xfwm4" type="empty">\n    <property name="custom" type="empty">\n'
        f"{_rows(custom, '      ')}{_rows(keys, '      ')}    </property>\n  </property>\n"
    )
    return _channel("xfce4-keyboard-shortcuts", body)


def write_files(folder: Path, inside: str, font: tuple[str, int, str], work_area: tuple[int, int, int, int]) -> None:
    """Write the theme and both channels into the lookalike ``folder``, bound at ``inside`` in the sandbox."""
    write_theme(folder / THEME_NAME)
    channels = folder / CONFIG_NAME / _CHANNELS
    channels.mkdir(parents=True, exist_ok=True)
    (channels / "xfwm4.xml").write_text(settings_channel(f"{inside}/{THEME_NAME}", font, work_area))
    (channels / "xfce4-keyboard-shortcuts.xml").write_text(shortcuts_channel())


def installed() -> bool:
    """Whether xfwm4 is installed (Debian ``xfwm4``; the lookalike session falls back to openbox without it)."""
    return shutil.which("xfwm4") is not None


def command() -> str:
    """xfwm4's command inside: no compositor, no session manager, and no more of GTK than it draws with.

    Its frames are the theme's pictures, so its own GTK (the alt+tab switcher) takes the built-in Adwaita rather
    than parsing Yaru's stylesheet (2 MiB); ``GDK_GL=disable`` keeps GTK from probing GLX at start-up (which maps
    Mesa's llvmpipe into it: 56 MiB); no accessibility bridge (it would start AT-SPI's registry on an idle
    desktop) and no GVfs (it would start ``gvfsd``). Measured: 6.4 MiB private, 9.5 MiB PSS, against 8.8 and 13.5
    without these (``benchmarks/local_sessions.py``)."""
    quiet = "GDK_GL=disable GTK_THEME=Adwaita NO_AT_BRIDGE=1 GTK_A11Y=none GIO_USE_VFS=local"
    return f"{quiet} xfwm4 --compositor=off --sm-client-disable"
