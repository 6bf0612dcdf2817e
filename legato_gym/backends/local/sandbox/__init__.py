"""The bubblewrap sandbox that holds a desktop's window manager, apps, in-desktop server and everything an
agent runs.

Isolation, per sandbox (docs/backends.md says what this guarantees and what it does not):

* namespaces: pid, net, ipc, uts, mount (and cgroup where available); the net namespace has only ``lo``,
  so the sandbox reaches neither the network nor the host's loopback services. A seccomp filter refuses
  new user namespaces (``unshare -Ur`` fails) and a few kernel interfaces desktops do not use
  (:mod:`legato_gym.backends.local.limits`);
* identity: when legato is root, bwrap runs as root without a user namespace only to build the mounts;
  its entry then sets the rlimits and drops, with ``setpriv``, to the desktop's own unprivileged host uid
  (shown as ``user`` inside) with no capabilities, an empty bounding set and ``no_new_privs``, before
  anything else runs. Without root, bwrap maps the caller's uid to 1000 in a user namespace;
* filesystem: an empty root with only the system folders the apps need bound read-only (``/usr``,
  ``/etc``, ... :data:`.spec.SYSTEM_PATHS`) and the desktop interpreter's folders (its prefixes and where
  pyautogui lives). Nothing else of the host is there: not ``/root``, ``/home``, the project checkout or
  a new folder at the host's root. The writable places are ``/home/user``, ``/tmp``, ``/dev/shm`` and
  ``/run/user/1000`` (the session bus's folder, where OSWorld's VM has it), each a tmpfs of bounded size
  (the runtime folder is in ``/tmp``); the root, ``/dev`` and every bind
  are read-only. ``/home/user`` is filled from the home baseline (a tar) at every start, so nothing an
  episode wrote survives it;
* the window manager (openbox, with no menu and no exit binding; its one launcher, ctrl+alt+t, opens the
  terminal inside, as GNOME does) runs inside, restarted if it exits, so nothing the agent reaches on the
  screen starts a program outside or ends the desktop;
* lifecycle: ``--die-with-parent`` (the kernel kills the sandbox when legato's process dies) and
  ``--new-session``; resetting kills the pid namespace's init, which takes every process inside with it.

The host reaches the in-desktop server through a unix socket that the host creates, binds in a folder
only it can see, and passes into the sandbox as an already-listening file descriptor: the sandbox has no
path to replace, so the host never follows one the agent could have pointed elsewhere.

The modules: :mod:`.spec` (how each sandbox is built, where its files are), :mod:`.files` (the files it
is given), :mod:`.session` (what runs inside, and its environment), :mod:`.bwrap` (bwrap's command
line), :mod:`.identity` (the uid lease, the privilege drop, the cgroup join) and :mod:`.instance`
(:class:`Sandbox`: start, check, kill). Every public name is importable from here.
"""

from legato_gym.backends.local.sandbox.bwrap import RELAY_FILE, SERVER_DIR
from legato_gym.backends.local.sandbox.identity import UidLease, drop_to, joined_cgroup
from legato_gym.backends.local.sandbox.instance import Sandbox
from legato_gym.backends.local.sandbox.session import (
    ACCESSIBILITY_ON,
    ATSPI_PYTHON,
    DEVTOOLS_PORT,
    SESSION_BUS,
    SESSION_BUS_DIR,
    VLC_HTTP_PORT,
    accessibility_bus,
    atspi_installed,
    atspi_readable,
)
from legato_gym.backends.local.sandbox.spec import ACTION_MODULES, SYSTEM_PATHS, SandboxSpec, interpreter_paths

__all__ = [
    "ACCESSIBILITY_ON",
    "ACTION_MODULES",
    "ATSPI_PYTHON",
    "DEVTOOLS_PORT",
    "RELAY_FILE",
    "SERVER_DIR",
    "SESSION_BUS",
    "SESSION_BUS_DIR",
    "SYSTEM_PATHS",
    "VLC_HTTP_PORT",
    "Sandbox",
    "SandboxSpec",
    "UidLease",
    "accessibility_bus",
    "atspi_installed",
    "atspi_readable",
    "drop_to",
    "interpreter_paths",
    "joined_cgroup",
]
