"""The sandbox's first process when legato is not root: it runs the sandbox's entry and says how its server ended.

Run inside the sandbox as pid 1 of its pid namespace (``bwrap --as-pid-1``), standard library only::

    python -I -S supervise.py STATUS -- ENTRY...

The entry (which ends as the in-desktop server, ``exec``) is its only child. When that child ends, for whatever
reason, it writes ``legato: the desktop server ended with status N`` to its stderr and exits ``STATUS``; the
kernel then ends every other process of the namespace. Nothing inside the sandbox can end it first or make
it say otherwise, although the agent's processes run as its uid:

* the kernel delivers no signal from inside a pid namespace to the namespace's pid 1 unless pid 1 handles it,
  and this one handles none (SIGKILL and SIGSTOP from inside are never delivered to it);
* it is non-dumpable, so processes of its uid can neither write its memory (``/proc/1/mem``) nor take its
  descriptors; the sandbox's seccomp filter refuses ``ptrace`` and ``pidfd_getfd`` too;
* it holds none of the server's sockets (its stdin and stdout are the listening sockets: it hands them to the
  entry and keeps ``/dev/null``).

So the host reads the sandbox's exit status: ``STATUS`` means the server ended from inside the sandbox (the
agent's doing); a sandbox killed from outside (its pid 1 killed by the host) exits otherwise. With root, the
sandbox's root shell does the same (:func:`legato_gym.backends.local.sandbox.session.entry_command`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_DUMPABLE = 4


def _not_dumpable() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            sys.stderr.write(f"legato: the sandbox's init could not make itself non-dumpable: {ctypes.get_errno()}\n")
    except (OSError, AttributeError) as exc:
        sys.stderr.write(f"legato: the sandbox's init could not make itself non-dumpable: {exc}\n")


def _status(wait_status: int) -> int:
    """A child's end as a shell says it: its exit code, or 128 plus the signal that killed it."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: supervise.py STATUS -- ENTRY...\n")
        return 2
    ended, entry = int(argv[1]), argv[3:]
    # no handler for any signal: then none sent from inside the namespace reaches pid 1
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _not_dumpable()
    child = os.fork()
    if child == 0:
        for name in ("SIGPIPE", "SIGXFSZ"):  # Python ignores them; a program it runs must get the default
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        try:
            os.execvp(entry[0], entry)
        except OSError as exc:
            sys.stderr.write(f"legato: could not run the sandbox's entry {entry[0]}: {exc}\n")
        os._exit(127)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the listening sockets are the entry's (the server's and the relay's) only
    os.dup2(null, 1)
    os.close(null)
    while True:  # reaps the namespace's orphans too, until its only child ends
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            return ended
        if pid == child:
            break
    try:
        sys.stderr.write(f"legato: the desktop server ended with status {_status(wait_status)}\n")
        sys.stderr.flush()
    except OSError:
        pass
    return ended


if __name__ == "__main__":
    sys.exit(main(sys.argv))
