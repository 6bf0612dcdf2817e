"""The files a sandbox is given from the host: its commands, its users, openbox's configuration and the
system files the apps need changed (all written once per desktop into its state folder, bound read-only)."""

from __future__ import annotations

import shlex
from pathlib import Path

from legato_gym.backends.local import apps
from legato_gym.backends.local.sandbox.lookalike import lookalike_margins, lookalike_theme, write_lookalike_files
from legato_gym.backends.local.sandbox.shell import openbox_applications, write_gnome_files
from legato_gym.backends.local.sandbox.spec import SandboxLayout, SandboxSpec

__all__ = ["OPENBOX_MENU", "OPENBOX_RC", "OPENBOX_THEME", "write_state_files"]

_SUDO_SHIM = r"""#!/bin/sh
# legato: the sandbox has no privileges to give, so `sudo CMD` runs CMD as the desktop's user (as OSWorld's
# VM user would after typing the password). Options are accepted and ignored; -S reads the password line.
while [ $# -gt 0 ]; do
  case "$1" in
    -S|--stdin) read -r _ || true; shift ;;
    -u|-g|-p|-C|-h|-D|-r|-t|-U|-T) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -eq 0 ] && exec "${SHELL:-/bin/sh}"
exec "$@"
"""

#: openbox's configuration inside the sandbox: no root menu, no key binding that exits, restarts or
#: reconfigures the window manager, and none that runs a program but the VM's own shortcuts (ctrl+alt+t opens
#: the terminal, inside the sandbox: :func:`.apps.openbox_keybinds`); window moves, focus and the window menu stay.
OPENBOX_RC = """<?xml version="1.0" encoding="UTF-8"?>
<openbox_config xmlns="http://openbox.org/3.4/rc">
  <resistance><strength>10</strength><screen_edge_strength>20</screen_edge_strength></resistance>
  <focus><focusNew>yes</focusNew><followMouse>no</followMouse></focus>
  <placement><policy>Smart</policy><center>yes</center></placement>
{theme}  <desktops><number>1</number></desktops>
{margins}  <menu><file>/run/legato-openbox/menu.xml</file><hideDelay>200</hideDelay></menu>
  <keyboard>
    <keybind key="A-Tab"><action name="NextWindow"/></keybind>
    <keybind key="A-S-Tab"><action name="PreviousWindow"/></keybind>
    <keybind key="A-F4"><action name="Close"/></keybind>
{keybinds}  </keyboard>
  <mouse>
    <dragThreshold>1</dragThreshold>
    <doubleClickTime>500</doubleClickTime>
    <context name="Frame">
      <mousebind button="A-Left" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
      <mousebind button="A-Left" action="Drag"><action name="Move"/></mousebind>
    </context>
    <context name="Titlebar">
      <mousebind button="Left" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
      <mousebind button="Left" action="Drag"><action name="Move"/></mousebind>
      <mousebind button="Left" action="DoubleClick"><action name="ToggleMaximize"/></mousebind>
    </context>
    <context name="Client">
      <mousebind button="Left" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
      <mousebind button="Middle" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
      <mousebind button="Right" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
    </context>
    <context name="Close"><mousebind button="Left" action="Click"><action name="Close"/></mousebind></context>
    <context name="Maximize">
      <mousebind button="Left" action="Click"><action name="ToggleMaximize"/></mousebind>
    </context>
    <context name="Iconify"><mousebind button="Left" action="Click"><action name="Iconify"/></mousebind></context>
    <context name="BLCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
    <context name="BRCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
    <context name="TLCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
    <context name="TRCorner"><mousebind button="Left" action="Drag"><action name="Resize"/></mousebind></context>
  </mouse>
{applications}</openbox_config>
"""
#: openbox's title bars in the plain session: its stock Clearlooks theme (the lookalike's: :func:`.lookalike_theme`).
OPENBOX_THEME = "  <theme><name>Clearlooks</name><titleLayout>NLIMC</titleLayout></theme>\n"
OPENBOX_MENU = """<?xml version="1.0" encoding="UTF-8"?>
<openbox_menu xmlns="http://openbox.org/3.4/menu"></openbox_menu>
"""


def write_state_files(spec: SandboxSpec, layout: SandboxLayout) -> None:
    """Write the sandbox's files into the desktop's state folder, unless an earlier sandbox of it did."""
    if layout.bin_dir.exists():
        return
    uid = spec.host_uid or 1000
    layout.bin_dir.mkdir(parents=True)
    # a script, not a symlink: the interpreter must see its own path to find its venv (pyvenv.cfg)
    wrapper = f'#!/bin/sh\nexec {shlex.quote(spec.python)} "$@"\n'
    for name in ("python", "python3"):
        (layout.bin_dir / name).write_text(wrapper)
        (layout.bin_dir / name).chmod(0o755)
    sudo = layout.bin_dir / "sudo"
    sudo.write_text(_SUDO_SHIM)
    sudo.chmod(0o755)
    for name, entry in apps.bin_entries().items():  # google-chrome and the like (the apps package)
        if isinstance(entry, Path):
            (layout.bin_dir / name).symlink_to(entry)
        else:
            (layout.bin_dir / name).write_text(entry)
            (layout.bin_dir / name).chmod(0o755)
    layout.etc_dir.mkdir(exist_ok=True)
    (layout.etc_dir / "passwd").write_text(
        f"root:x:0:0:root:/root:/bin/sh\nuser:x:{uid}:{uid}:user:/home/user:/bin/bash\n"
    )
    (layout.etc_dir / "group").write_text(f"root:x:0:\nuser:x:{uid}:\n")
    layout.openbox_dir.mkdir(exist_ok=True)
    rc = OPENBOX_RC.replace("{applications}", openbox_applications())
    rc = rc.replace("{margins}", lookalike_margins() if spec.session == "lookalike" else "")
    rc = rc.replace("{theme}", lookalike_theme() if spec.session == "lookalike" else OPENBOX_THEME)
    # in the lookalike session the panel runs the VM's shortcuts (as under xfwm4, which runs no programs)
    keybinds = "" if spec.session == "lookalike" else apps.openbox_keybinds()
    (layout.openbox_dir / "rc.xml").write_text(rc.replace("{keybinds}", keybinds))
    layout.system_dir.mkdir(exist_ok=True)  # system files shown changed inside (apps.system_files)
    for inside, text in apps.system_files().items():
        layout.system_copy(inside).write_text(text)
        layout.system_copy(inside).chmod(0o755)
    (layout.openbox_dir / "menu.xml").write_text(OPENBOX_MENU)
    if spec.session == "gnome":
        write_gnome_files(layout.gnome_dir)
    if spec.session == "lookalike":
        write_lookalike_files(layout.lookalike_dir, spec.screen)
