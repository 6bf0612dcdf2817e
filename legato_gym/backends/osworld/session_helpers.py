"""What a fast reset tells apart in a GNOME session: the session's own helpers, and what the agent left.

OSWorld's VM runs a GNOME session whose helpers come and go by themselves: D-Bus and systemd start them on
demand (``gvfsd-*``, ``nautilus --gapplication-service``, ``at-spi2-registryd``, ``tracker-miner-*``,
``evolution-*``, ``gsd-*``, ``pulseaudio``...) and some exit when idle (``pulseaudio`` after 20 s,
``gvfsd-trash``...). Counted as the agent's processes they turn every fast reset into a revert. So the process
probe (:data:`PROCS_SCRIPT`, run in the VM) treats as the session's:

* an **activated** process: its parent is the init (PID 1), the user's ``systemd``, or a bus daemon
  (``dbus-daemon``, ``dbus-broker``) -- what D-Bus/systemd activation starts, never what an action or an app
  the agent opened starts (those are children of the server, of the shell or of the app);
* a first-boot activated process that is gone has **exited when idle** (not missing); the session starts it
  again on demand;
* an activated process still there after the kill, whose command line is a first-boot helper's or matches
  :data:`SESSION_HELPERS`, was **restarted by the session** (re-activated at once): it is adopted as a
  first-boot process, not a survivor;
* what such a helper started (tracker's extractor runs GStreamer's plugin scanner) is the session's too: the
  listing names it (``spawned``) and the audit leaves it out.

Everything else is as before: every process not of first boot is killed, one that survives the kill or a
first-boot process that is not a helper (the shell, the bus, the server) gone makes the reset unverified.

Two more checks of a fast reset (:data:`TMP_SCRIPT`, :data:`SUDO_SCRIPT`): ``/tmp`` is put back to its
first-boot listing (the user's files and directories the agent added there are removed; anything it cannot
remove makes the reset unverified), and a ``sudo`` used during the episode (a credential cached where first
boot had none) makes the reset unverified, since what ran as root is outside ``/home/user``.
"""

from __future__ import annotations

import re

__all__ = ["PROCS_SCRIPT", "SESSION_HELPERS", "SUDO_SCRIPT", "TMP_SCRIPT", "is_session_helper"]

#: Command lines of GNOME session helpers that D-Bus or systemd may (re)start at any time (regular expressions
#: matched against the start of the command line, its program's path or name).
SESSION_HELPERS: tuple[str, ...] = (
    r"(/usr/libexec/|/usr/lib/[^ ]*/)?gvfs[a-z0-9-]*",
    r"(/usr/libexec/)?gsd-[a-z0-9-]+",
    r"(/usr/libexec/)?(tracker|localsearch)[a-z0-9-]*",
    r"(/usr/libexec/)?evolution-[a-z0-9-]+",
    r"(/usr/libexec/)?at-spi2?-[a-z-]+",
    r"(/usr/libexec/)?dconf-service",
    r"(/usr/libexec/)?xdg-[a-z-]*(portal|document|permission)[a-z-]*",
    r"(/usr/libexec/)?goa-[a-z-]+",
    r"(/usr/libexec/)?gnome-shell-calendar-server",
    r"(/usr/libexec/)?ibus-[a-z-]+|ibus-daemon",
    r"(/usr/bin/)?(pulseaudio|pipewire[a-z-]*|wireplumber)",
    r"(/usr/bin/)?nautilus --gapplication-service",
    r"(/usr/libexec/)?(gnome-keyring-daemon|geoclue|colord|upowerd|zeitgeist[a-z-]*)",
)
_HELPERS_RE = re.compile(r"^(?:" + "|".join(f"(?:{p})" for p in SESSION_HELPERS) + r")(?: |$)")


def is_session_helper(command: str) -> bool:
    """Whether an *activated* process's command line is a session helper's (:data:`SESSION_HELPERS`) or a bus
    daemon's (D-Bus starts one for a session that asks)."""
    program = command.split(" ", 1)[0].rsplit("/", 1)[-1]
    return bool(_HELPERS_RE.match(command)) or program in ("dbus-daemon", "dbus-broker")


#: The process probe: ``python3 -c PROCS_SCRIPT KEEP MODE TIMEOUT [HELPERS]``. ``list`` prints
#: ``{"pids", "helpers", "spawned"}`` (activated processes: pid -> command line; processes a session helper
#: started, such as the ``gst-plugin-scanner`` tracker's extractor runs); ``kill`` kills every process
#: of the VM user not in KEEP (nor the probe's own ancestors) and prints ``{"killed", "survivors", "missing",
#: "adopted", "exited"}`` (see the module docstring). Standard library only; runs with the VM's ``python3``.
PROCS_SCRIPT = r"""
import json, os, re, signal, sys, time
keep = set(json.loads(sys.argv[1])); kill = sys.argv[2] == "kill"; timeout = float(sys.argv[3])
helpers = {int(k): v for k, v in json.loads(sys.argv[4] if len(sys.argv) > 4 else "{}").items()}
HELPERS = re.compile(@HELPERS@)
BUSES = ("systemd", "dbus-daemon", "dbus-broker", "dbus-broker-lau")
uid = os.getuid()
spare = set()
pid = os.getpid()
while pid > 1:
    spare.add(pid)
    try:
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except Exception:
        break
def info(p):
    try:
        if os.stat(f"/proc/{p}").st_uid != uid:
            return None
        fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        if fields[0] in "ZX":
            return None
        cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        return int(fields[1]), cmd
    except Exception:
        return None
def comm(p):
    try:
        return open(f"/proc/{p}/comm").read().strip()
    except Exception:
        return ""
def procs():
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            got = info(int(d))
            if got is not None:
                out[int(d)] = got
    return out
def activated(ppid):
    return ppid == 1 or comm(ppid) in BUSES
if not kill:
    now = procs()
    pids = sorted(set(now) - spare)
    def of_helper(p):
        for _ in range(64):  # up its ancestors to an activated session helper
            p = now[p][0]
            if p not in now:
                return False
            if activated(now[p][0]) and HELPERS.match(now[p][1]):
                return True
        return False
    print(json.dumps({"pids": pids, "helpers": {p: now[p][1] for p in pids if activated(now[p][0])},
                      "spawned": [p for p in pids if of_helper(p)]}))
    sys.exit(0)
targets = set(procs()) - keep - spare
for p in targets:
    try:
        os.kill(p, signal.SIGKILL)
    except Exception:
        pass
known = set(helpers.values())
end = time.monotonic() + timeout
while True:
    now = procs()
    left = sorted(set(now) - keep - spare)
    adopted = {p: now[p][1] for p in left if activated(now[p][0]) and (now[p][1] in known or HELPERS.match(now[p][1]))}
    survivors = [p for p in left if p not in adopted]
    if not survivors or time.monotonic() > end:
        break
    time.sleep(0.02)
gone = sorted(keep - set(now))
exited = [p for p in gone if p in helpers]
print(json.dumps({"killed": len(targets), "survivors": survivors, "missing": [p for p in gone if p not in helpers],
                  "adopted": adopted, "exited": exited}))
""".replace("@HELPERS@", repr(_HELPERS_RE.pattern))

#: ``/tmp`` back to first boot: ``sh -c TMP_SCRIPT tmp-reset LISTING`` removes the VM user's entries of ``/tmp``
#: not named in LISTING (one name a line, the first-boot listing that ``list`` printed) and exits 0, or 1 with
#: what it could not remove. ``sh -c TMP_SCRIPT tmp-list`` prints the first-boot listing.
TMP_SCRIPT = r"""
mode=$1
if [ "$mode" = list ]; then find /tmp -mindepth 1 -maxdepth 1 -user "$(id -u)" -printf '%f\n' | sort; exit 0; fi
keep=$(printf '%s\n' "$2")
find /tmp -mindepth 1 -maxdepth 1 -user "$(id -u)" -printf '%f\n' | while IFS= read -r name; do
  printf '%s\n' "$keep" | grep -qxF -- "$name" && continue
  rm -rf -- "/tmp/$name" 2>/dev/null || true
done
left=$(find /tmp -mindepth 1 -maxdepth 1 -user "$(id -u)" -printf '%f\n' | sort | grep -vxF -- "$keep" || true)
[ -z "$left" ] || { echo "$left"; exit 1; }
"""

#: Whether ``sudo`` holds a cached credential (the agent used it): prints ``cached``, ``none`` or ``absent``.
SUDO_SCRIPT = (
    "command -v sudo >/dev/null 2>&1 || { echo absent; exit 0; }; "
    "if sudo -n true >/dev/null 2>&1; then echo cached; else echo none; fi"
)
