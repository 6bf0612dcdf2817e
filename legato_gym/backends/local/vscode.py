"""VS Code on the local desktop: code-server (VS Code 1.100 built for a browser) in a Chromium app window.

OSWorld's VM has Microsoft's VS Code; its tasks launch ``code`` or ``code PATH``, and desktop-env's getters
read the user's settings and key bindings in ``~/.config/Code/User`` and list extensions with
``code --list-extensions``. Debian has no VS Code; npm has code-server (:data:`CODE_SERVER_VERSION`, the
newest release that runs on Node 20), the same workbench served over HTTP. Inside the desktop, the
``code`` command (:func:`bin_entries`) is a small launcher that

* answers the extension flags (``--list-extensions``, ``--install-extension FILE.vsix``, ...) with
  code-server's own CLI, on the same folders;
* otherwise starts code-server on the sandbox's loopback (the sandbox has its own network namespace, so
  the port is private to the desktop), waits until it answers, and opens the folder, workspace or file
  in a Chromium ``--app`` window titled as VS Code titles its own (``test.py - Visual Studio Code``);
  the window's browser profile lives in ``/tmp``, which every reset replaces.

code-server keeps user data where VS Code does (``--user-data-dir ~/.config/Code``: its settings in
``User/settings.json``, key bindings in ``User/keybindings.json``) and extensions in
``~/.vscode/extensions``. The first-run noise is off without touching the user's own settings file (which
tasks compare byte for byte): telemetry, update checks, workspace trust and the getting-started override
by flags, the welcome page by the machine-scope settings (``~/.config/Code/Machine/settings.json``).

The desktop has no network, so the extension marketplace is out of reach: :func:`offline_reasons` names
the tasks that need it, and the coverage check refuses them when the tasks file is loaded.

Example::

    from legato_gym.backends.local import vscode
    vscode.installed()          # is code-server installed where the desktop looks for it?
    vscode.ready_title(["code", "/home/user/Desktop/test.py"])  # "test.py - Visual Studio Code"
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from legato_gym.backends.local.commands import command_words

__all__ = [
    "APP_NAME",
    "CODE_SERVER_VERSION",
    "EXTENSIONS_DIR",
    "PORT",
    "USER_DATA_DIR",
    "baseline_files",
    "bin_entries",
    "cli_only",
    "entry_point",
    "install_dir",
    "installed",
    "node_binary",
    "offline_reasons",
    "ready_title",
    "sandbox_paths",
]

#: The code-server release installed from npm (``scripts/test``); 4.103 and later need Node 22.
CODE_SERVER_VERSION = "4.100.3"
#: VS Code's user data folder in the VM's home (its ``User/settings.json`` is what the getters read).
USER_DATA_DIR = ".config/Code"
#: Where VS Code keeps the user's extensions.
EXTENSIONS_DIR = ".vscode/extensions"
#: The window title's app name, as VS Code's own (``activate_window`` steps look for it).
APP_NAME = "Visual Studio Code"
#: code-server's port on the sandbox's own loopback.
PORT = 8484
#: The flags that the launcher answers with code-server's CLI rather than by opening a window.
CLI_FLAGS = frozenset(
    {
        "--list-extensions",
        "--show-versions",
        "--install-extension",
        "--uninstall-extension",
        "--version",
        "-v",
        "--help",
        "-h",
    }
)
#: Settings of the machine scope (below the user's own): no welcome page, no release notes, no tips.
MACHINE_SETTINGS: dict[str, Any] = {
    "workbench.startupEditor": "none",
    # code-server names itself in the title; VS Code's own default title, with VS Code's name
    "window.title": "${dirty}${activeEditorShort}${separator}${rootName}${separator}${profileName}${separator}"
    + APP_NAME,
    "workbench.tips.enabled": False,
    "update.showReleaseNotes": False,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "extensions.ignoreRecommendations": True,
}
#: Chromium flags of the editor's window, after :data:`legato_gym.backends.local.apps.CHROMIUM_FLAGS`.
WINDOW_FLAGS = ("--class=Code", "--disable-features=Translate")

_INSTALL_ENV = "LEGATO_CODE_SERVER"
_MARKETPLACE_ID = re.compile(r"^[A-Za-z0-9][\w-]*\.[\w.-]+$")


def install_dir() -> Path:
    """The npm prefix code-server is installed in: ``$LEGATO_CODE_SERVER`` or ``~/.cache/legato/code-server``."""
    return Path(os.environ.get(_INSTALL_ENV) or "~/.cache/legato/code-server").expanduser()


def entry_point(prefix: Path | None = None) -> Path | None:
    """code-server's entry script under the npm prefix ``prefix`` (default :func:`install_dir`), if installed.

    An install counts only when its post-install step finished (VS Code's own modules are in place).
    """
    package = (prefix or install_dir()) / "node_modules" / "code-server"
    entry = package / "out" / "node" / "entry.js"
    if entry.is_file() and (package / "lib" / "vscode" / "node_modules.asar").exists():
        return entry
    return None


def node_binary(which: Any = shutil.which) -> str | None:
    """The ``node`` that runs code-server (its real path), if there is one on ``PATH``."""
    found = which("node")
    return os.path.realpath(found) if found else None


def installed(prefix: Path | None = None, which: Any = shutil.which) -> bool:
    """Whether code-server is installed under ``prefix`` (default :func:`install_dir`) with a ``node`` to run it."""
    return entry_point(prefix) is not None and node_binary(which) is not None


def sandbox_paths(prefix: Path | None = None, which: Any = shutil.which) -> tuple[str, ...]:
    """Host folders the desktop binds read-only for the editor: the code-server install and ``node``'s folder."""
    entry, node = entry_point(prefix), node_binary(which)
    if entry is None or node is None:
        return ()
    return (str(entry.parents[3].resolve()), os.path.dirname(node))


def cli_only(command: str | Sequence[str]) -> bool:
    """Whether a ``code ...`` command only runs code-server's CLI (lists or installs extensions: no window)."""
    words = command_words(command)
    return any(word.split("=", 1)[0] in CLI_FLAGS for word in words[1:])


def ready_title(command: str | Sequence[str]) -> str | None:
    """The window title that shows the editor has loaded what ``code ...`` opened (``None``: no window).

    VS Code titles its window ``FILE - APP`` for a file opened alone, ``FOLDER - APP`` for a folder,
    ``NAME (Workspace) - APP`` for a ``.code-workspace`` file and ``APP`` for an empty window; the page sets
    the title once the workbench runs (until then the window shows the address).
    """
    if cli_only(command):
        return None
    paths = [word for word in command_words(command)[1:] if not word.startswith("-")]
    if not paths:
        return APP_NAME
    path = paths[0].rstrip("/") or "/"
    name = Path(path).name or path
    if name.endswith(".code-workspace"):
        return f"{name[: -len('.code-workspace')]} (Workspace) - {APP_NAME}"
    return f"{name} - {APP_NAME}"


def bin_entries(
    prefix: Path | None = None, chromium_flags: Sequence[str] = (), which: Any = shutil.which
) -> dict[str, str]:
    """Programs for the sandbox's ``PATH`` folder: ``code`` (and its launcher), if code-server is installed.

    Args:
        prefix: code-server's npm prefix (default :func:`install_dir`).
        chromium_flags: the flags every Chromium of the desktop gets (the window adds its own).
        which: finds ``node``.
    """
    entry, node = entry_point(prefix), node_binary(which)
    if entry is None or node is None:
        return {}
    launcher = _LAUNCHER.format(
        node=node,
        entry=str(entry.resolve()),
        port=PORT,
        user_data=USER_DATA_DIR,
        extensions=EXTENSIONS_DIR,
        app_name=APP_NAME,
        cli_flags=sorted(CLI_FLAGS),
        chromium=[*chromium_flags, *WINDOW_FLAGS],
    )
    script = (
        "#!/bin/sh\n"
        "# legato: code-server in a Chromium app window stands in for VS Code (see legato-code.py)\n"
        'exec python /run/legato-bin/legato-code.py "$@"\n'
    )
    return {"code": script, "legato-code.py": launcher}


def baseline_files() -> dict[str, bytes]:
    """Files of the baseline home (relative to ``/home/user``): VS Code's user folder, the machine settings.

    The ``User`` folder exists, as on a VM where VS Code has run, with no ``settings.json`` of its own (the
    tasks' setups create or edit it); the welcome page is off in the machine scope.
    """
    return {
        f"{USER_DATA_DIR}/Machine/settings.json": (json.dumps(MACHINE_SETTINGS, indent=4) + "\n").encode(),
        f"{USER_DATA_DIR}/User/globalStorage/storage.json": b"{}\n",
        f"{EXTENSIONS_DIR}/extensions.json": b"[]",
    }


def offline_reasons(config: Mapping[str, Any]) -> list[str]:
    """Why an OSWorld task cannot run on a desktop without network, as far as VS Code is concerned.

    A setup that installs an extension by marketplace id (``code --install-extension ms-python.python``),
    and a task graded by ``is_extension_installed`` on ``code --list-extensions`` whose setup brings no
    ``.vsix`` file to install from, need the extension marketplace.
    """
    reasons: list[str] = []
    evaluator = config.get("evaluator") or {}
    steps = [s for s in [*(config.get("config") or []), *(evaluator.get("postconfig") or [])] if isinstance(s, Mapping)]
    has_vsix = False
    for step in steps:
        params = step.get("parameters") or {}
        text = json.dumps(params)
        has_vsix = has_vsix or ".vsix" in text
        if step.get("type") not in ("execute", "command", "launch"):
            continue
        words = command_words(params.get("command", ""))
        for i, word in enumerate(words[:-1]):
            target = words[i + 1]
            if word == "--install-extension" and not target.endswith(".vsix") and _MARKETPLACE_ID.match(target):
                reasons.append(
                    f"installs VS Code extension {target} from the marketplace in its setup (the desktop has no "
                    "network)"
                )
    funcs = evaluator.get("func")
    funcs = funcs if isinstance(funcs, list) else [funcs]
    results = evaluator.get("result")
    results = results if isinstance(results, list) else [results]
    lists = any(isinstance(r, Mapping) and "--list-extensions" in json.dumps(r.get("command", "")) for r in results)
    if "is_extension_installed" in funcs and lists and not has_vsix:
        expected = evaluator.get("expected")
        rules = expected.get("rules") if isinstance(expected, Mapping) else None
        wanted = rules.get("expected") if isinstance(rules, Mapping) else None
        reasons.append(
            f"the agent must install VS Code extension {wanted or '(unnamed)'} from the marketplace (the desktop "
            "has no network)"
        )
    return reasons


#: The in-desktop launcher, run by the sandbox's ``python``: stdlib only.
_LAUNCHER = '''"""legato: `code` inside the desktop, code-server standing in for VS Code (see legato's vscode.py)."""
import json, os, subprocess, sys, tempfile, time, urllib.parse, urllib.request

NODE = {node!r}
ENTRY = {entry!r}
PORT = {port!r}
HOME = os.path.expanduser("~")
USER_DATA = os.path.join(HOME, {user_data!r})
EXTENSIONS = os.path.join(HOME, {extensions!r})
STATE = os.path.join(tempfile.gettempdir(), "legato-code-server")  # /tmp: every reset replaces it
CLI_FLAGS = set({cli_flags!r})
CHROMIUM = {chromium!r}
BASE = [NODE, ENTRY, "--config", os.path.join(STATE, "config.yaml"), "--user-data-dir", USER_DATA,
        "--extensions-dir", EXTENSIONS]
SERVER = ["--bind-addr", "127.0.0.1:%d" % PORT, "--auth", "none", "--disable-telemetry", "--disable-update-check",
          "--disable-workspace-trust", "--disable-getting-started-override", "--ignore-last-opened",
          "--app-name", {app_name!r}]


def healthy():
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % PORT, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def ensure_server(deadline):
    if healthy():
        return
    log = open(os.path.join(STATE, "server.log"), "ab")
    subprocess.Popen(BASE + SERVER, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    while not healthy():
        if time.monotonic() > deadline:
            sys.exit("code: code-server did not answer on port %d within 120 s; see %s/server.log" % (PORT, STATE))
        time.sleep(0.05)


def address(paths):
    if not paths:
        return "?ew=true"
    path = os.path.abspath(os.path.expanduser(paths[0]))
    if os.path.isdir(path):
        return "?" + urllib.parse.urlencode({{"folder": path}})
    if path.endswith(".code-workspace"):
        return "?" + urllib.parse.urlencode({{"workspace": path}})
    uri = "vscode-remote://127.0.0.1:%d%s" % (PORT, urllib.parse.quote(path))
    return "?" + urllib.parse.urlencode({{"ew": "true", "payload": json.dumps([["openFile", uri]])}})


def main(args):
    for folder in (STATE, USER_DATA, EXTENSIONS):
        os.makedirs(folder, exist_ok=True)
    config = os.path.join(STATE, "config.yaml")
    if not os.path.exists(config):  # else code-server writes one, and says so on stdout
        with open(config, "w") as out:
            out.write("bind-addr: 127.0.0.1:%d\\nauth: none\\ncert: false\\n" % PORT)
    if any(arg.split("=", 1)[0] in CLI_FLAGS for arg in args):
        os.execv(NODE, BASE + args)
    ensure_server(time.monotonic() + 120)
    url = "http://127.0.0.1:%d/%s" % (PORT, address([a for a in args if not a.startswith("-")]))
    browser = ["/run/legato-bin/chrome", *CHROMIUM, "--user-data-dir=" + os.path.join(STATE, "window"),
               "--app=" + url]
    log = open(os.path.join(STATE, "window.log"), "ab")
    subprocess.Popen(browser, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


main(sys.argv[1:])
'''
