"""An independent check that a fast reset left the VM as its first boot (for tests and benchmarks).

:func:`audit_fast_resets` wraps a desktop's fast reset so that, each time it reports the VM clean and before
the next task's setup runs, the VM is listed again by other means than the reset's own probes: its processes
(``ps``: none but first boot's, the session's adopted helpers and those it activated since), its windows
(``wmctrl -l``), ``/home/user`` (``tar --diff`` against the first-boot baseline, and no path the baseline lacks),
the VM user's entries of ``/tmp``, and whether ``sudo`` holds a credential. Each check is recorded as a :class:`Audit`.

Runs in desktop-env's interpreter, on an :class:`~legato_gym.backends.osworld.OSWorldDesktop`'s inner desktop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from legato_gym.backends.osworld.desktop import BASELINE_TAR
from legato_gym.backends.osworld.session_helpers import SUDO_SCRIPT, TMP_SCRIPT, is_session_helper

__all__ = ["Audit", "ResetAuditor", "audit_fast_resets"]

#: What the session's own long-lived processes write in /home/user after the restore, whatever the agent did
#: (the reset still restores each; the audit leaves them out): GNOME Shell, which lives across fast resets,
#: compiles a shader when it first draws something new into Mesa's cache, and saves its application usage
#: counts (``application_state``: kept in its memory, they order the overview's search results; see
#: docs/osworld.md); Nautilus's tag database drops its ``.meta.isrunning`` lock when Nautilus exits idle; tracker's
#: miner, which the session activates when files in home change (the restore changes them all), indexes them,
#: and its extractor's GStreamer builds its plugin registry the first time it reads a media file's metadata.
SESSION_WRITES = (
    ".cache/mesa_shader_cache",
    ".local/share/gnome-shell/application_state",
    ".local/share/nautilus/tags/.meta.isrunning",
    ".cache/tracker3",
    ".cache/gstreamer-1.0",
)
#: Differences between /home/user and the baseline tar the reset restored (empty: the same): files whose
#: contents, sizes, modes or links differ, and paths the tar does not hold, bar :data:`SESSION_WRITES`.
_HOME_DIFF = (
    "cd /home/user && { { tar --diff -f " + BASELINE_TAR + " 2>&1 | grep -v 'Mod time differs' || true; "
    "comm -13 <(tar -tf " + BASELINE_TAR + " | sed 's|^\\./||; s|/$||' | grep -v '^\\.\\?$' | sort -u) "
    "<(find . -mindepth 1 | sed 's|^\\./||' | sort -u); } | grep -vF "
    + " ".join(f"-e {path}" for path in SESSION_WRITES)
    + " || true; }"
)


@dataclass(frozen=True)
class Audit:
    """What one fast reset left that first boot did not have (all empty: clean)."""

    processes: tuple[str, ...] = ()
    windows: tuple[str, ...] = ()
    home: tuple[str, ...] = ()
    tmp: tuple[str, ...] = ()
    sudo: str = ""

    @property
    def clean(self) -> bool:
        return not (self.processes or self.windows or self.home or self.tmp or self.sudo)


@dataclass
class ResetAuditor:
    """The first-boot listings and every audit since (see the module docstring)."""

    impl: Any
    audits: list[Audit] = field(default_factory=list)

    def _run(self, command: str | list[str], **kwargs: Any) -> str:
        return str(self.impl._execute(command, timeout=120, **kwargs).get("output") or "")

    def check(self) -> Audit:
        impl = self.impl
        probe = impl._procs([], kill=False)
        activated = {int(pid): str(command) for pid, command in dict(probe.get("helpers") or {}).items()}
        # a helper the session activated after the reset's kill (the restore's file changes wake tracker) is the
        # session's, as the next reset's kill would adopt it, and so is what such a helper started (tracker's
        # extractor runs GStreamer's plugin scanner); anything else not of first boot is the episode's
        spawned = set(probe.get("spawned") or ())
        extra = sorted(
            pid
            for pid in set(probe["pids"]) - set(impl._baseline_pids) - spawned
            if not (pid in activated and is_session_helper(activated[pid]))
        )
        names = self._run(f"ps -o args= -p {','.join(map(str, extra))} || true", shell=True) if extra else ""
        windows = set(impl._windows()) - set(impl._baseline_windows)
        tmp_now = set(self._run(["sh", "-c", TMP_SCRIPT, "tmp", "list"]).split("\n")) - {""}
        tmp = tmp_now - set(impl._baseline_tmp.split("\n"))
        sudo = self._run(SUDO_SCRIPT, shell=True).strip()
        audit = Audit(
            processes=tuple(line for line in names.splitlines() if line.strip()),
            windows=tuple(sorted(windows)),
            home=tuple(line for line in self._run(["bash", "-c", _HOME_DIFF]).splitlines() if line.strip()),
            tmp=tuple(sorted(tmp)),
            sudo="" if sudo in ("absent", impl._baseline_sudo) else sudo,
        )
        self.audits.append(audit)
        return audit


def audit_fast_resets(impl: Any) -> ResetAuditor:
    """Check the VM after every fast reset that reports it clean, before the task's setup runs."""
    auditor = ResetAuditor(impl)
    reset = impl._fast_reset

    def checked(deadline: float) -> bool:
        clean = bool(reset(deadline))
        if clean:
            auditor.check()
        return clean

    impl._fast_reset = checked
    return auditor
