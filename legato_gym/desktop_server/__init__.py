"""The in-desktop HTTP server: OSWorld's VM server protocol, standard library only.

It runs *inside* each local desktop's sandbox (so every command it runs is sandboxed too) and answers the
same paths, fields and status codes as OSWorld's ``desktop_env/server/main.py`` (a Flask app on port 5000
in the VM), so OSWorld's controllers and getters can talk to it. Differences, all deliberate:

* it listens on a unix socket (``--listen unix:PATH``; the sandbox has no network, so the socket file is
  how the host reaches it), on a listening socket the host passes in (``--listen fd:N``) or, outside a
  sandbox, on TCP (``--listen tcp:HOST:PORT``);
* ``/screenshot`` reads the X server's framebuffer file (``Xvfb -fbdir``) instead of ``pyautogui``, so it
  needs no third-party package; the pointer is pasted in as OSWorld's server pastes it (:mod:`.pointer`,
  XFixes through ``ctypes``);
* ``--mode osworld`` (``LocalOptions.server_mode``) also reproduces what OSWorld's real server does that a
  client sees: an X connection leaked per ``/screenshot`` and its death once X is full, Flask's HTML
  415/400/500 pages, form-only ``/file``, ``/window_size`` and ``/setup/upload`` (:data:`.httpd.JSON_ROUTES`,
  :data:`.httpd.FORM_ROUTES`); the default mode, ``legato``, has none of these faults;
* ``/run_bash_script`` does not have OSWorld's undefined ``_append_event`` bug (it answers 200, not 500);
* ``/accessibility`` and ``/terminal`` read AT-SPI in a helper process run by the system's interpreter
  (``--atspi-python``, ``/usr/bin/python3``: Debian's ``python3-pyatspi`` and ``gi`` are built for it,
  not for the desktop's venv), so the server itself imports neither. The tree has OSWorld's XML format
  (:func:`.atspi.atspi_tree`), with these differences: the applications come in the registry's order
  (OSWorld walks them in threads and appends them as they finish); a node whose reading fails is left
  out, not its later siblings with it; characters XML cannot hold and attribute names that are not XML
  names are dropped (OSWorld's lxml would refuse the node); Chromium's application node is named
  ``Google Chrome``, as the VM's Chrome is (Chromium answers to ``google-chrome`` here, and desktop-env's
  getters look for that name). Without AT-SPI ``/accessibility`` answers 500 and ``/terminal``
  ``{"output": null}``;
* routes OSWorld serves that need GNOME or network (wallpaper, download_file, recording) answer as
  OSWorld's do when their tool is missing;
* one route of legato's own, ``POST /legato/action``, runs an agent action (pyautogui code) in a fresh
  child forked from a fork server that has already imported pyautogui (:class:`.actions.ActionRunner`): a
  new process per action, as OSWorld's ``python -c``, without paying the interpreter start and the import.

The modules: :mod:`.image` (the PNG writer and framebuffer reader, shared with :mod:`legato_gym.png`),
:mod:`.actions` (the fork server), :mod:`.atspi` (the AT-SPI helper and its XML), :mod:`.handlers` (one
method per route), :mod:`.httpd` (routes, bodies, the listening server), :mod:`.cli` (the command line).

Run: ``python FOLDER --listen unix:/run/legato/server.sock --fb /run/legato-fb``, FOLDER being this
package's folder (the sandbox binds it read-only at ``/run/legato-server``); on the host also
``python -m legato_gym.desktop_server ...``.

How it imports, both ways: the modules import only the standard library (pyautogui is imported by the
fork server at run time, never by a module) and each other by relative imports (``from .image import
...``), and this ``__init__`` imports nothing. On the host they are ``legato_gym.desktop_server.*``
(tests import them so). Run as a folder, with no ``legato_gym`` to import them from, ``__main__.py``
first loads the folder as a package named ``legato_desktop_server`` and drops the folder from
``sys.path``, so the relative imports work and no module of the folder is a top-level module that an
action's imports could find; that also holds under ``python -I`` (the AT-SPI helper's isolated mode).
"""
