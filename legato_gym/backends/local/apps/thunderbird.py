"""Thunderbird as OSWorld's VM has it: a set-up profile where the getters read it, the VM's window class.

OSWorld's Thunderbird tasks unpack a profile archive into ~/.thunderbird, launch /usr/bin/thunderbird, and
close it in their post-config by its window class, Mail.thunderbird, before the getters read the profile's
files (prefs.js, xulstore.json, msgFilterRules.dat) under :data:`THUNDERBIRD_PROFILE`.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from legato_gym.backends.local.apps.cityhash import city_hash64

__all__ = [
    "THUNDERBIRD_DIRS",
    "THUNDERBIRD_PREFS",
    "THUNDERBIRD_PROFILE",
    "THUNDERBIRD_SYSPREF",
    "install_hash",
    "thunderbird_dir",
    "thunderbird_files",
    "thunderbird_system_files",
]

#: The profile folder OSWorld's Thunderbird getters read (relative to ``/home/user``).
THUNDERBIRD_PROFILE = ".thunderbird/t5q2a5hp.default-release"
#: Where Thunderbird's own executable lives (Debian and Ubuntu's packages), first found wins.
THUNDERBIRD_DIRS = ("/usr/lib/thunderbird", "/usr/lib64/thunderbird")
#: Thunderbird's system-wide default preferences file (Debian's ``syspref`` folder), extended in the sandbox.
THUNDERBIRD_SYSPREF = "/etc/thunderbird/pref/thunderbird.js"

#: Defaults (not locked: a profile's own prefs.js still wins) that keep what the VM's long-used Thunderbird
#: no longer shows off the screen: the account wizard on a profile without accounts, the "know your rights"
#: bar, the telemetry notice, the start page (a web page; the desktop is offline) and in-app appeals.
THUNDERBIRD_PREFS: tuple[tuple[str, bool], ...] = (
    ("mail.provider.suppress_dialog_on_startup", True),
    ("mail.rights.override", True),
    ("datareporting.policy.dataSubmissionPolicyBypassNotification", True),
    ("datareporting.policy.dataSubmissionEnabled", False),
    ("datareporting.healthreport.uploadEnabled", False),
    ("toolkit.telemetry.enabled", False),
    ("mailnews.start_page.enabled", False),
    ("mail.inappnotifications.enabled", False),
    ("mail.shell.checkDefaultClient", False),
)

#: The baseline profile's accounts: Local Folders only, as a Thunderbird that has been set up once.
_THUNDERBIRD_ACCOUNTS = (
    ("mail.account.account1.server", "server1"),
    ("mail.accountmanager.accounts", "account1"),
    ("mail.accountmanager.localfoldersserver", "server1"),
    ("mail.server.server1.directory-rel", "[ProfD]Mail/Local Folders"),
    ("mail.server.server1.hostname", "Local Folders"),
    ("mail.server.server1.name", "Local Folders"),
    ("mail.server.server1.type", "none"),
    ("mail.server.server1.userName", "nobody"),
)

_THUNDERBIRD_SCRIPT = """#!/bin/sh
# legato: Thunderbird as OSWorld's VM runs it: its main window's class is Mail.thunderbird (what the tasks'
# post-config closes; Thunderbird would otherwise name it after the profile group, thunderbird-default)
export MOZ_APP_LAUNCHER=/usr/bin/thunderbird DICPATH=/usr/share/hunspell
exec {binary} --name=thunderbird --class thunderbird "$@"
"""


def _js(value: object) -> str:
    return json.dumps(value)


def thunderbird_dir() -> Path | None:
    """The folder of Thunderbird's own executable (not Debian's ``/usr/bin/thunderbird`` script), if installed."""
    for folder in THUNDERBIRD_DIRS:
        if os.access(Path(folder, "thunderbird"), os.X_OK):
            return Path(folder)
    return None


def install_hash(folder: str | Path) -> str:
    """Thunderbird's (and Firefox's) install hash of its executable's folder, as ``profiles.ini`` keys it.

    A dedicated profile is recorded per install as ``[Install<hash>] Default=<path>``; without that entry a
    fresh Thunderbird makes a new, empty profile instead of using the one in ``profiles.ini``. The hash is
    CityHash64 of the folder's path in UTF-16, in upper-case hexadecimal (``/usr/lib/thunderbird`` is
    ``FDC34C9F024745EB``, the same on OSWorld's Ubuntu).
    """
    return f"{city_hash64(str(folder).encode('utf-16-le')):016X}"


def thunderbird_files(folder: str | Path | None = None) -> dict[str, bytes]:
    """Baseline home files (relative to ``/home/user``): one profile at :data:`THUNDERBIRD_PROFILE`, set up.

    Empty when Thunderbird is not installed (``folder``: its executable's folder, found by default).
    """
    install = Path(folder) if folder is not None else thunderbird_dir()
    if install is None:
        return {}
    name = Path(THUNDERBIRD_PROFILE).name
    key = install_hash(install)
    profiles = (
        f"[Profile0]\nName=default-release\nIsRelative=1\nPath={name}\nDefault=1\n\n"
        f"[Install{key}]\nDefault={name}\nLocked=1\n\n[General]\nStartWithLastProfile=1\nVersion=2\n"
    )
    prefs = "".join(f"user_pref({_js(pref)}, {_js(value)});\n" for pref, value in _THUNDERBIRD_ACCOUNTS)
    return {
        ".thunderbird/profiles.ini": profiles.encode(),
        ".thunderbird/installs.ini": f"[{key}]\nDefault={name}\nLocked=1\n".encode(),
        f"{THUNDERBIRD_PROFILE}/prefs.js": prefs.encode(),
    }


def thunderbird_system_files() -> dict[str, str]:
    """System files the sandbox shows changed for Thunderbird (absolute path inside to text), if installed.

    ``/usr/bin/thunderbird`` starts Thunderbird with the VM's window class, and Thunderbird's system-wide
    defaults get :data:`THUNDERBIRD_PREFS`. The host's files are left as they are.
    """
    files: dict[str, str] = {}
    folder = thunderbird_dir()
    if folder is None:
        return files
    if Path("/usr/bin/thunderbird").is_file():
        files["/usr/bin/thunderbird"] = _THUNDERBIRD_SCRIPT.format(binary=shlex.quote(str(folder / "thunderbird")))
    syspref = Path(THUNDERBIRD_SYSPREF)
    if syspref.is_file():
        ours = "".join(f"pref({_js(pref)}, {_js(value)});\n" for pref, value in THUNDERBIRD_PREFS)
        files[THUNDERBIRD_SYSPREF] = f"{syspref.read_text()}\n// legato: as OSWorld's VM shows Thunderbird\n{ours}"
    return files
