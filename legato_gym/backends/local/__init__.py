"""The ``local`` backend: real, sandboxed X desktops on this host that speak OSWorld's protocol.

Each desktop is an Xvfb display with openbox, and a bubblewrap sandbox (private home, pid/net/ipc
namespaces, read-only system) holding the apps and an in-desktop server that answers OSWorld's VM HTTP
protocol over a unix socket. Needs the Debian packages ``xvfb openbox bubblewrap wmctrl xdotool xterm``
(plus a text editor such as ``mousepad``) and ``pip install 'legatolabs[local]'`` (pyautogui).
"""

from legato_gym.backends.local.desktop import LocalDesktop
from legato_gym.backends.local.options import LocalOptions
from legato_gym.backends.local.tasks import default_tasks, osworld_tasks, solution

__all__ = ["LocalDesktop", "LocalOptions", "default_tasks", "osworld_tasks", "solution"]
