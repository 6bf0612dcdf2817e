"""Files and messages (issue 14, items 7 and 9): a bad --out, a read-only folder or a full disk gets one clear
line and a non-zero exit, never a traceback, and a resume on a good disk completes the batch; an export leaves
no temporary file after a kill; messages keep their brackets; custom backends say why they do not import."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _run_kit import Try, write_run
from rich.console import Console
from typer.testing import CliRunner

from legato_gym import BackendUnavailableError, MissingDependencyError
from legato_gym.backends import resolve_backend
from legato_rl.cli.app import app
from legato_rl.export import export_steps
from legato_rl.store import PolicyStamp, RolloutRecord, RolloutStore, StorageError, read_records, write_json_atomic
from legato_rl.store import files as store_files

LEGATO = Path(sys.executable).with_name("legato")
FAKE = ["--backend", "fake", "--policy-url", "embedded", "--group", "1", "--desktops", "2", "--quiet"]


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _one_error_line(result: Any, *fragments: str) -> None:
    """The command failed with exit 2 and said so in one ``error:`` line holding every fragment."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, OSError)
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _mount(*options: str) -> Any:
    """A fixture body: a tmpfs mounted with ``options`` (root only), unmounted afterwards; skips when impossible."""

    @contextlib.contextmanager
    def mounted(where: Path) -> Iterator[Path]:
        where.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(where)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        try:
            yield where
        finally:
            subprocess.run(["umount", "-l", str(where)], check=False)

    return mounted


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody can write to: a read-only tmpfs as root (root ignores mode bits), else chmod 0555."""
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    with _mount("ro", "size=1m")(tmp_path / "ro") as folder:
        yield folder


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 300 kB tmpfs: a run of the fake suite (about 1.5 MB) fills it after a few records."""
    with _mount("size=300k")(tmp_path / "disk") as folder:
        yield folder


# --- --out problems: one line, exit 2 ---------------------------------------------------------------------


def test_collect_into_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a folder")
    _one_error_line(_cli("rl", "collect", *FAKE, "--out", str(tmp_path / "afile")), "is a file, not a folder")
    _one_error_line(
        _cli("rl", "collect", *FAKE, "--out", str(tmp_path / "afile" / "run")), "a part of the path is a file"
    )


def test_collect_export_and_profile_into_a_read_only_folder_are_one_line(tmp_path: Path, read_only_dir: Path) -> None:
    _one_error_line(_cli("rl", "collect", *FAKE, "--out", str(read_only_dir / "run")), str(read_only_dir / "run"))
    write_run(tmp_path / "run", [Try("ga", "ok", 1.0)])
    result = _cli("rl", "export", str(tmp_path / "run"), "--out", str(read_only_dir / "train.jsonl"))
    _one_error_line(result, str(read_only_dir / "train.jsonl"), "then export again")
    result = _cli("rl", "profile", str(tmp_path / "run"), "--out", str(read_only_dir / "pics"), "--no-plots")
    assert result.exit_code == 0  # no pictures: nothing to write
    pytest.importorskip("matplotlib")
    result = _cli("rl", "profile", str(tmp_path / "run"), "--out", str(read_only_dir / "pics"), "--plots")
    _one_error_line(result, str(read_only_dir / "pics"), "give --out another folder")
    assert list(read_only_dir.iterdir()) == []


def test_a_full_disk_stops_collect_with_one_line_and_a_resume_on_a_good_disk_completes(small_disk: Path) -> None:
    out = small_disk / "run"
    command = [str(LEGATO), "rl", "collect", "--backend", "fake", "--policy-url", "embedded", "--out", str(out),
               "--quiet"]  # fmt: skip
    full = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert full.returncode == 2, full.stderr
    assert "Traceback" not in full.stderr
    errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the disk is full [ENOSPC]" in errors[0], full.stderr
    data = (out / "rollouts.jsonl").read_bytes()
    assert data.endswith(b"\n")  # the record cut short by the full disk was taken back
    written = len(data.splitlines())
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)  # space again
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    records = list(read_records(out))
    assert len(records) > written
    final = [(r.group_id, r.attempt) for r in records if r.status != "retried"]
    assert len(final) == len(set(final)) == 11 * 4  # the fake suite x --group 4: none lost, none twice
    assert {r.status for r in records} == {"ok"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status_counts"]["ok"] == 44 and summary["groups_short"] == 0


# --- the store's file layer, with an injected ENOSPC --------------------------------------------------------


def _record(i: int) -> RolloutRecord:
    return RolloutRecord(
        rollout_id=f"g/a{i}/t0", task_id="t", domain=None, group_id="g", attempt=i, policy=PolicyStamp("m", None),
        status="skipped",
    )  # fmt: skip


def test_a_record_cut_short_by_a_full_disk_is_taken_back_and_the_store_refuses_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RolloutStore(tmp_path)
    store.append(_record(0))
    real_write = os.write

    def half_then_full(fd: int, data: Any) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store_files.os, "write", half_then_full)
    with pytest.raises(StorageError, match=r"rollouts\.jsonl: the disk is full \[ENOSPC\]; free some space") as info:
        store.append(_record(1))
    assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)
    monkeypatch.setattr(store_files.os, "write", real_write)
    assert (tmp_path / "rollouts.jsonl").read_bytes().count(b"\n") == 1
    assert (tmp_path / "rollouts.jsonl").read_bytes().endswith(b"\n")
    with pytest.raises(StorageError, match="disk is full"):  # no record after a failed write, even with space
        store.append(_record(2))
    store.close()
    with RolloutStore(tmp_path) as again:  # the resume
        again.append(_record(1))
    assert [r.attempt for r in read_records(tmp_path)] == [0, 1]


def test_a_message_file_that_cannot_be_written_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RolloutStore(tmp_path)

    class Full:
        def __init__(self, path: Any, mode: str) -> None:
            self.file = open(path, mode)  # noqa: SIM115

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store_files, "open", Full, raising=False)
    with pytest.raises(StorageError, match=r"messages/.*\.json: the disk is full"):
        store.put_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    monkeypatch.undo()
    assert list((tmp_path / "messages").iterdir()) == []
    with pytest.raises(StorageError):  # a record could refer to the file that is missing: refused
        store.append(_record(0))
    store.close()


def test_write_json_atomic_translates_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(store_files.os, "fsync", fsync)
    with pytest.raises(StorageError, match="quota"):
        write_json_atomic(tmp_path / "summary.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []


# --- export: no temporary file survives a kill --------------------------------------------------------------

_HOLD = """
import sys
from pathlib import Path
import legato_rl.export.steps as export

def hold(root):
    print("writing", flush=True)
    sys.stdin.read()  # blocks until the test ends it
    yield from ()

export.read_records = hold
sys.argv = ["legato", "rl", "export", sys.argv[1], "--out", sys.argv[2]]
from legato_rl.cli.app import main
main()
"""


def _stale(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.*.tmp"))


def _start_export(run: Path, out: Path) -> subprocess.Popen[str]:
    """A real ``legato rl export`` held in the middle of writing its temporary file."""
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(run), str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "writing"
    assert len(_stale(out)) >= 1
    return child


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_export_leaves_no_temporary_file(tmp_path: Path, how: signal.Signals) -> None:
    write_run(tmp_path / "run", [Try("ga", "ok", 1.0), Try("ga", "ok", 0.0)])
    out = tmp_path / "out" / "train.jsonl"
    child = _start_export(tmp_path / "run", out)
    child.send_signal(how)
    _, stderr = child.communicate(timeout=60)
    assert "Traceback" not in stderr
    if how == signal.SIGTERM:  # it cleans up after itself
        assert child.returncode == 128 + signal.SIGTERM and _stale(out) == []
    else:  # it could not: the next export removes what it left
        assert child.returncode == -signal.SIGKILL and len(_stale(out)) == 1
    left = set(_stale(out))
    live = _start_export(tmp_path / "run", out)  # an export still writing keeps its file
    try:
        writing = set(_stale(out)) - left
        assert len(writing) == 1
        stats = export_steps(tmp_path / "run", out)
        assert stats.rows == 4 and out.is_file()
        assert set(_stale(out)) == writing  # the killed export's file is gone, the live one's kept
    finally:
        live.kill()
        live.communicate(timeout=60)
    export_steps(tmp_path / "run", out)
    assert _stale(out) == []


# --- messages -----------------------------------------------------------------------------------------------


def test_install_hints_keep_their_brackets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import legato_rl.cli.collect as collect_cli

    def missing(name: str) -> Any:
        raise MissingDependencyError("the local backend needs Xvfb: pip install 'legatolabs[local]' [/not-markup]")

    monkeypatch.setattr(collect_cli, "resolve_backend", missing)
    _one_error_line(
        _cli("rl", "collect", *FAKE, "--out", str(tmp_path / "run")), "pip install 'legatolabs[local]' [/not-markup]"
    )


def test_probe_table_shows_server_text_as_written() -> None:
    from legato_rl.cli.probe import Check, _table

    console = Console(record=True, width=300)
    console.print(_table([Check("model served", "fail", "the server has ['a'] [bold]b[/bold]", "pass [x]")], "m"))
    text = console.export_text()
    assert "[bold]b[/bold]" in text and "pass [x]" in text


def test_version() -> None:
    from legato_gym import __version__

    result = _cli("--version")
    assert result.exit_code == 0 and result.output.strip() == f"legato {__version__}"


@pytest.fixture
def no_cwd_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder is ``tmp_path`` and, as for the ``legato`` console script, not on ``sys.path``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p and os.path.abspath(p) != str(tmp_path)])
    return tmp_path


def test_a_custom_backend_that_is_not_on_the_path_says_so(no_cwd_on_path: Path) -> None:
    name = f"legato_test_backend_{uuid.uuid4().hex[:8]}"
    with pytest.raises(BackendUnavailableError) as info:
        resolve_backend(f"{name}:Desk")
    message = str(info.value)
    assert f"no module named {name!r}" in message and "current folder is not on it" in message
    assert "PYTHONPATH" in message
    (no_cwd_on_path / f"{name}.py").write_text("class Desk:\n    pass\n")
    with pytest.raises(BackendUnavailableError, match="is in the current folder, but the current folder is not on"):
        resolve_backend(f"{name}:Desk")


def test_a_custom_backend_that_fails_to_import_says_why(no_cwd_on_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"legato_test_backend_{uuid.uuid4().hex[:8]}"
    (no_cwd_on_path / f"{name}.py").write_text(
        textwrap.dedent("""
            import legato_no_such_dependency
            class Desk:
                pass
        """)
    )
    monkeypatch.syspath_prepend(str(no_cwd_on_path))
    with pytest.raises(BackendUnavailableError, match="No module named 'legato_no_such_dependency'") as info:
        resolve_backend(f"{name}:Desk")
    assert "importing it raised ModuleNotFoundError" in str(info.value)
    good = f"{name}_ok"
    (no_cwd_on_path / f"{good}.py").write_text("class Desk:\n    pass\n")
    with pytest.raises(BackendUnavailableError, match="has no 'Desks'; did you mean 'Desk'"):
        resolve_backend(f"{good}:Desks")
    assert resolve_backend(f"{good}:Desk").desktop_class.__name__ == "Desk"
    _one_error_line(_cli("rl", "collect", "--backend", f"{name}:Desk", "--policy-url", "embedded", "--out", "r"),
                    "legato_no_such_dependency")  # fmt: skip


def test_resume_with_another_temperature_is_refused_naming_it(tmp_path: Path) -> None:
    out = str(tmp_path / "run")
    first = _cli("rl", "collect", *FAKE, "--out", out, "--temperature", "0.7")
    assert first.exit_code == 0, first.output
    _one_error_line(
        _cli("rl", "collect", *FAKE, "--out", out, "--temperature", "1.0"),
        "--temperature: the run has 0.7, this command gives 1.0",
        "another --out",
    )
    _one_error_line(_cli("rl", "collect", *FAKE, "--out", out, "--temperature", "0.7", "--max-tokens", "99"),
                    "--max-tokens: the run has 2048, this command gives 99")  # fmt: skip


def test_resume_with_the_tasks_reordered_is_one_line_naming_them_and_runs_nothing(tmp_path: Path) -> None:
    """The issue's case: a finished run resumed with its tasks in another order ran them all again."""
    from legato_gym.backends.fake import default_tasks

    tasks = [{"task_id": t.task_id, "domain": t.domain, "config": dict(t.config)} for t in default_tasks(None)[:4]]
    given, reordered = tmp_path / "tasks.json", tmp_path / "reordered.json"
    given.write_text(json.dumps(tasks))
    reordered.write_text(json.dumps([tasks[1], tasks[0], *tasks[2:]]))
    out = tmp_path / "run"
    first = _cli("rl", "collect", *FAKE, "--out", str(out), "--tasks", str(given))
    assert first.exit_code == 0, first.output
    records = (out / "rollouts.jsonl").read_bytes()
    a, b = (f"fake/{t['task_id']}" for t in tasks[:2])
    _one_error_line(
        _cli("rl", "collect", *FAKE, "--out", str(out), "--tasks", str(reordered)),
        f"--tasks: the same 4 tasks in another order (2 moved: task 0 was {a}, now {b}, task 1 was {b}, now {a})",
        "give the run's tasks as they were (the same tasks, in the same order); or give another --out",
    )
    assert (out / "rollouts.jsonl").read_bytes() == records
