"""Chromium as OSWorld's Google Chrome, and the programs legato puts on the sandbox's ``PATH``.

Chromium answers to ``google-chrome`` (and a task's ``pkill chrome`` finds it), keeps its profile where
OSWorld's Chrome does (``~/.config/google-chrome``), past its first run, and runs without its own namespace
sandbox (``--no-sandbox``): the desktop's sandbox refuses new user namespaces, and is the isolation.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from legato_gym.backends.local import vscode

__all__ = ["CHROME_PROFILE", "CHROMIUM_FLAGS", "bin_entries", "chrome_files", "chromium_binary", "sandbox_which"]

#: Chrome's user data folder, where OSWorld's getters read Preferences, Bookmarks, History.
CHROME_PROFILE = ".config/google-chrome"

#: Chrome's first-run state: the profile has been used, the default-browser question was answered. And the
#: theme Chrome gives itself in the VM's GNOME session, GTK (``extensions.theme.system_theme`` 1): in a session
#: that is not GNOME, as the desktop's, it takes the classic one (0), which OSWorld's ``chrome_appearance_mode_ui``
#: reads as light mode, and which shows the Mode dropdown the GTK theme hides.
CHROME_PREFERENCES: dict[str, Any] = {
    "browser": {"check_default_browser": False, "has_seen_welcome_page": True},
    "distribution": {"skip_first_run_ui": True, "suppress_first_run_default_browser_prompt": True},
    "extensions": {"theme": {"system_theme": 1}},
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
    # Local Network Access came after the VM's Chrome, and with it a migration that writes a marker into
    # profile.default_content_setting_values at Chromium's first exit: OSWorld's data_delete_automacally reads
    # any value there as "delete data on close" set. Off, the key holds only what the user sets, as on the VM.
    "--disable-features=LocalNetworkAccessChecks",
)

_CHROME_DESKTOP = """[Desktop Entry]
Version=1.0
Name=Google Chrome
Exec=google-chrome %U
Terminal=false
Type=Application
Icon=chromium
Categories=Network;WebBrowser;
MimeType=text/html;application/xhtml+xml;x-scheme-handler/http;x-scheme-handler/https;
Actions=new-window;new-private-window;

[Desktop Action new-window]
Name=New Window
Exec=google-chrome

[Desktop Action new-private-window]
Name=New Incognito Window
Exec=google-chrome --incognito
"""


def chrome_files() -> dict[str, bytes]:
    """Baseline home files (relative to ``/home/user``): Chrome's profile past its first run, its desktop file."""
    return {
        f"{CHROME_PROFILE}/First Run": b"",
        f"{CHROME_PROFILE}/Default/Preferences": json.dumps(CHROME_PREFERENCES).encode(),
        ".local/share/applications/google-chrome.desktop": _CHROME_DESKTOP.encode(),
    }


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
