"""LibreOffice as OSWorld's VM has it: a profile past its first run that asks nothing on saving.

The VM's LibreOffice shows no tip of the day, no infobars and no template dialog, and saves an ``.xlsx`` with
``ctrl+s`` without the "Keep current format" question (the tasks' post-config saves with nothing else).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["LIBREOFFICE_PROFILE", "LIBREOFFICE_SETTINGS", "libreoffice_files"]

#: LibreOffice's user profile (``-env:UserInstallation`` default) in the VM's home.
LIBREOFFICE_PROFILE = ".config/libreoffice/4/user"

#: LibreOffice settings as the VM has them: (node path, property, type, value).
LIBREOFFICE_SETTINGS: tuple[tuple[str, str, str, str], ...] = (
    ("/org.openoffice.Office.Common/Misc", "ShowTipOfTheDay", "boolean", "false"),
    ("/org.openoffice.Office.Common/Misc", "FirstRun", "boolean", "false"),
    # the "get involved" and "donate" infobars are shown when these are more than 180 days ago
    ("/org.openoffice.Office.Common/Misc", "LastTimeGetInvolvedShown", "long", "4102444800"),
    ("/org.openoffice.Office.Common/Misc", "LastTimeDonateShown", "long", "4102444800"),
    # saving in a Microsoft format asks "Use Excel 2007-365!" / "Keep current format" unless this is off
    ("/org.openoffice.Office.Common/Save/Document", "WarnAlienFormat", "boolean", "false"),
    ("/org.openoffice.Office.Recovery/RecoveryInfo", "Enabled", "boolean", "false"),
    # no "Select a Template" dialog when Impress starts: Misc/NewDoc/AutoPilot up to 7.x, StartWithTemplate after
    ("/org.openoffice.Office.Impress/Misc/NewDoc", "AutoPilot", "boolean", "false"),
    ("/org.openoffice.Office.Impress/Misc", "StartWithTemplate", "boolean", "false"),
    ("/org.openoffice.Setup/Product", "ooSetupLastVersion", "string", "99.0"),  # no "what's new" infobar
    ("/org.openoffice.Setup/Office", "FirstStartWizardCompleted", "boolean", "true"),
)


def _xcu(settings: Sequence[tuple[str, str, str, str]]) -> str:
    items = "".join(
        f'<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop></item>\n'
        for path, name, _kind, value in settings
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
        f"{items}</oor:items>\n"
    )


def libreoffice_files() -> dict[str, bytes]:
    """Baseline home files (relative to ``/home/user``): the profile's settings (:data:`LIBREOFFICE_SETTINGS`)."""
    return {f"{LIBREOFFICE_PROFILE}/registrymodifications.xcu": _xcu(LIBREOFFICE_SETTINGS).encode()}
