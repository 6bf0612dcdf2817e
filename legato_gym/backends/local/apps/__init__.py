"""What the local desktop knows about each of OSWorld's apps: profiles, first-run settings, defaults, readiness.

One record per app (:mod:`.catalog`: :class:`App` in :data:`APPS`) holds what every consumer needs of it:
executables and the names tasks call it by, its files and MIME types, its window rule, ready rule,
write-back, warm-up and dock launchers; the modules below hold the details the records point to.

OSWorld's VM (Ubuntu 22.04, GNOME) has its apps set up by hand once: no tip of the day, no "Keep current
format" question on saving an ``.xlsx`` (the tasks' post-config saves with ``ctrl+s`` and nothing else), no
Chrome first-run page, documents opening in the app for their type, and windows opening maximized. This
package holds that knowledge as data, one module per app, so that the desktop's baseline home
(:func:`baseline_files`), the programs it puts on ``PATH`` inside the sandbox (:func:`bin_entries`), the
window manager's placement rules (:data:`..sandbox.shell.APP_WINDOWS`) and the ready signal after a ``launch``
(:func:`ready_title`) all come from one place:

- :mod:`.office`: LibreOffice's profile; :mod:`.chrome`: Chromium as ``google-chrome``, and legato's
  programs on the sandbox's ``PATH``; :mod:`.thunderbird` (with :mod:`.cityhash`): Thunderbird's profile
  and window class; :mod:`.media`: GIMP and VLC.
- :mod:`.gnome`: the VM's GNOME session (MIME defaults, window rules, ctrl+alt+t, the environment, D-Bus
  services), and the baseline home and system files of all the apps together.
- :mod:`.ready`: which setup steps map a window, and what its title shows once the app has loaded.
"""

from legato_gym.backends.local.apps.catalog import (
    APPS,
    App,
    ReadyRule,
    WarmUp,
    WindowRule,
    WriteBack,
    app_for_program,
    app_named,
    dock_launchers,
    window_table,
)
from legato_gym.backends.local.apps.chrome import (
    CHROME_PROFILE,
    CHROMIUM_FLAGS,
    bin_entries,
    chrome_files,
    chromium_binary,
    sandbox_which,
)
from legato_gym.backends.local.apps.gnome import (
    AUDIO_BASELINE,
    DBUS_SERVICES,
    DISABLED_SERVICES,
    GTK4_RENDERER,
    MIME_DEFAULTS,
    SKELETON,
    TERMINALS,
    USER_DIRS,
    baseline_files,
    environment,
    openbox_keybinds,
    skeleton_files,
    system_files,
    terminal_command,
)
from legato_gym.backends.local.apps.media import (
    GIMP_PROFILE,
    GIMP_TITLE,
    GIMP_WARMUP,
    VLC_CONFIG,
    VLC_HTTP_PASSWORD,
    VLC_TITLE,
    gimp_profile_key,
    gimp_title,
    media_files,
    vlc_http_installed,
    vlcrc,
)
from legato_gym.backends.local.apps.office import LIBREOFFICE_PROFILE, libreoffice_files
from legato_gym.backends.local.apps.ready import (
    WINDOWLESS,
    loads_after_title,
    open_title,
    opens_window,
    ready_title,
    ready_titles,
)
from legato_gym.backends.local.apps.thunderbird import (
    THUNDERBIRD_PREFS,
    THUNDERBIRD_PROFILE,
    THUNDERBIRD_SYSPREF,
    install_hash,
    thunderbird_dir,
    thunderbird_files,
    thunderbird_system_files,
)

__all__ = [
    "APPS",
    "AUDIO_BASELINE",
    "CHROME_PROFILE",
    "CHROMIUM_FLAGS",
    "DBUS_SERVICES",
    "DISABLED_SERVICES",
    "GIMP_PROFILE",
    "GIMP_TITLE",
    "GIMP_WARMUP",
    "GTK4_RENDERER",
    "LIBREOFFICE_PROFILE",
    "MIME_DEFAULTS",
    "SKELETON",
    "TERMINALS",
    "THUNDERBIRD_PREFS",
    "THUNDERBIRD_PROFILE",
    "THUNDERBIRD_SYSPREF",
    "USER_DIRS",
    "VLC_CONFIG",
    "VLC_HTTP_PASSWORD",
    "VLC_TITLE",
    "WINDOWLESS",
    "App",
    "ReadyRule",
    "WarmUp",
    "WindowRule",
    "WriteBack",
    "app_for_program",
    "app_named",
    "baseline_files",
    "bin_entries",
    "chrome_files",
    "chromium_binary",
    "dock_launchers",
    "environment",
    "gimp_profile_key",
    "gimp_title",
    "install_hash",
    "libreoffice_files",
    "loads_after_title",
    "media_files",
    "open_title",
    "openbox_keybinds",
    "opens_window",
    "ready_title",
    "ready_titles",
    "sandbox_which",
    "skeleton_files",
    "system_files",
    "terminal_command",
    "thunderbird_dir",
    "thunderbird_files",
    "thunderbird_system_files",
    "vlc_http_installed",
    "vlcrc",
    "window_table",
]
