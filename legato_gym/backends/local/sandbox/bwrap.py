"""bubblewrap's command line for one sandbox: the mounts, the namespaces, the environment and the entry."""

from __future__ import annotations

import os
from pathlib import Path

import legato_gym.desktop_server
from legato_gym.backends.local import apps
from legato_gym.backends.local.sandbox.lookalike import LOOKALIKE_DIR
from legato_gym.backends.local.sandbox.session import SESSION_BUS_DIR, entry_command, environment
from legato_gym.backends.local.sandbox.shell import GNOME_DIR
from legato_gym.backends.local.sandbox.spec import Inside, SandboxLayout, SandboxSpec, interpreter_paths

__all__ = ["RELAY_FILE", "SERVER_DIR", "bwrap_argv", "mounts"]

#: The in-desktop server's folder (:mod:`legato_gym.desktop_server`), run inside as ``python Inside.SERVER``.
SERVER_DIR = Path(legato_gym.desktop_server.__file__).parent
RELAY_FILE = Path(__file__).parent.with_name("relay.py")


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def mounts(spec: SandboxSpec, layout: SandboxLayout) -> list[str]:
    """bwrap's arguments that build the sandbox's file system (read-only but for bounded tmpfs folders)."""
    size = str(spec.limits.tmpfs_bytes)
    # the writable, bounded folders first, so that a bind below one of them (an interpreter under /tmp)
    # lands on top of it
    argv = ["--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", "/home", "--perms", "0755"]
    argv += ["--dir", "/var", "--dev", "/dev", "--proc", "/proc"]
    argv += ["--size", size, "--perms", "1777", "--tmpfs", "/dev/shm"]
    argv += ["--size", size, "--perms", "1777", "--tmpfs", "/tmp"]
    argv += ["--size", size, "--perms", "0700", "--tmpfs", "/home/user"]
    argv += ["--perms", "0755", "--dir", "/run/user", "--size", size, "--perms", "0700", "--tmpfs", SESSION_BUS_DIR]
    argv += ["--symlink", "/tmp", "/var/tmp"]
    bound: list[str] = []
    made: set[str] = {"/run", "/home", "/var", "/tmp", "/home/user", "/dev", "/run/user", SESSION_BUS_DIR}

    def parents(path: str) -> None:  # as 0755: bwrap would make the missing ones 0700
        parts = Path(path).parts
        for i in range(2, len(parts)):
            parent = str(Path(*parts[:i]))
            if parent not in made and not _covered(parent, bound):
                argv.extend(["--perms", "0755", "--dir", parent])
                made.add(parent)

    for path in spec.system_paths:
        if os.path.islink(path):
            parents(path)
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            parents(path)
            argv += ["--ro-bind", path, path]
            bound.append(path)
    for path in sorted({*interpreter_paths(spec.python), *spec.extra_paths}):
        if _covered(path, bound) or not os.path.isdir(path):
            continue
        parents(path)
        argv += ["--ro-bind", path, path]
        bound.append(path)
    x_inside = f"/tmp/.X11-unix/X{layout.display_number}"
    argv += ["--perms", "0755", "--dir", "/tmp/.X11-unix", "--ro-bind", str(layout.x_socket), x_inside]
    argv += ["--ro-bind", str(layout.bin_dir), Inside.BIN]
    argv += ["--ro-bind", str(SERVER_DIR), Inside.SERVER]
    argv += ["--ro-bind", str(RELAY_FILE), Inside.RELAY]
    argv += ["--ro-bind", str(layout.fb_path), Inside.FB]
    argv += ["--ro-bind", str(layout.openbox_dir), Inside.OPENBOX]
    if spec.session == "gnome":
        argv += ["--ro-bind", str(layout.gnome_dir), GNOME_DIR]
    if spec.session == "lookalike":
        argv += ["--ro-bind", str(layout.lookalike_dir), LOOKALIKE_DIR]
    argv += ["--ro-bind", str(layout.etc_dir / "passwd"), "/etc/passwd"]
    argv += ["--ro-bind", str(layout.etc_dir / "group"), "/etc/group"]
    for inside in apps.system_files():
        changed = layout.system_copy(inside)
        if _covered(inside, bound) and changed.is_file():
            argv += ["--ro-bind", str(changed), inside]
    if layout.baseline.exists():
        argv += ["--ro-bind", str(layout.baseline), Inside.BASELINE]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
    return argv


def bwrap_argv(spec: SandboxSpec, layout: SandboxLayout, seccomp_fd: int, info_fd: int) -> list[str]:
    """bwrap's whole command line: :func:`mounts`, the environment, the namespaces and the entry.

    ``seccomp_fd`` is the filter bwrap installs (:func:`..limits.seccomp_filter`); bwrap writes the
    sandbox's pids as JSON on ``info_fd``.
    """
    argv = ["bwrap", *mounts(spec, layout), "--clearenv"]
    for key, value in environment(layout.display_number, spec.session).items():
        argv += ["--setenv", key, value]
    if spec.host_uid is None:  # unprivileged legato: a user namespace maps our uid to 1000 inside
        argv += ["--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000"]
        argv += ["--as-pid-1"]  # the entry's supervisor is the namespace's init: nothing inside can signal it
    else:  # root: no user namespace; the entry drops to the uid with no capabilities before running anything
        argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    argv += ["--hostname", f"desk{layout.display_number}", "--chdir", "/home/user"]
    argv += ["--seccomp", str(seccomp_fd), "--info-fd", str(info_fd), "--die-with-parent", "--new-session"]
    return [*argv, *entry_command(spec)]
