"""A policy server that cannot be used stops the batch early, with one clear error, and the same command run
again finishes the batch: a dead URL, a URL without ``/v1``, a model the server does not serve, a server that
goes away or fails every call mid-batch."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from legato_gym import DesktopConfig, Timeouts
from legato_gym.backends.fake import default_tasks
from legato_rl.cli.app import app
from legato_rl.collect import collect
from legato_rl.errors import PolicyUnavailable
from legato_rl.policy import PolicyConfig
from legato_rl.store import read_record_dicts
from legato_rl.testing import Faults, ReferencePolicyServer, ScriptedSolver
from legato_rl.testing.brains import Reply

SCREEN = (320, 240)
FINAL = {"ok", "truncated", "cancelled", "skipped", "surplus", "error"}


def _config() -> DesktopConfig:
    return DesktopConfig(screen=SCREEN, timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10))


def _dead_url() -> str:
    with ReferencePolicyServer() as server:  # a port that was just free, now closed again
        return server.url


def _run(policy: PolicyConfig, out: Path, n_tasks: int = 3, retries: int = 0, **kw: Any) -> dict[str, Any]:
    config = _config()
    policy = replace(policy, limits=replace(policy.limits, retries=retries))
    return collect(default_tasks(config)[:n_tasks], policy, out=out, group=2, backend="fake", desktop=config,
                   **{"desktops": 2, **kw})  # fmt: skip


def _check_finished(out: Path, n_attempts: int) -> None:
    records = list(read_record_dicts(out))
    finals = Counter((r["group_id"], r["attempt"]) for r in records if r["status"] in FINAL)
    assert len(finals) == n_attempts and set(finals.values()) == {1}, finals
    assert all(r["status"] in {"ok", "retried"} for r in records), Counter(r["status"] for r in records)
    assert all(r["error"]["kind"] == "policy" for r in records if r["status"] == "retried")


def test_a_dead_url_stops_before_anything_is_written_and_a_rerun_finishes(tmp_path: Path) -> None:
    url = _dead_url()
    with pytest.raises(PolicyUnavailable, match="did not answer") as caught:
        _run(PolicyConfig(url, "m"), tmp_path / "run")
    assert url in str(caught.value) and "start the server" in str(caught.value)
    assert not (tmp_path / "run" / "rollouts.jsonl").exists()
    with ReferencePolicyServer(brain=ScriptedSolver(), model="m") as server:
        summary = _run(PolicyConfig(server.url, "m"), tmp_path / "run")
    assert summary["status_counts"]["ok"] == 6
    _check_finished(tmp_path / "run", 6)


def test_a_url_without_v1_and_a_wrong_model_are_named_with_their_fix(tmp_path: Path) -> None:
    with ReferencePolicyServer(brain=ScriptedSolver(), model="Qwen/Qwen3-VL-8B-Instruct") as server:
        bare = server.url.removesuffix("/v1")
        with pytest.raises(PolicyUnavailable, match="ending in /v1"):
            _run(PolicyConfig(bare, server.model), tmp_path / "a")
        with pytest.raises(PolicyUnavailable, match="does not serve model 'Qwen/Qwen3-VL-8B'") as caught:
            _run(PolicyConfig(server.url, "Qwen/Qwen3-VL-8B"), tmp_path / "b")
        assert "did you mean 'Qwen/Qwen3-VL-8B-Instruct'" in str(caught.value)
        # the same out, with the right model: the first try wrote nothing that could be refused now
        summary = _run(PolicyConfig(server.url, server.model), tmp_path / "b")
    assert summary["status_counts"]["ok"] == 6


def test_one_dead_replica_among_live_ones_is_not_a_stop(tmp_path: Path) -> None:
    with ReferencePolicyServer(brain=ScriptedSolver()) as server:
        # a call that meets the dead replica is retried on the live one
        summary = _run(PolicyConfig((server.url, _dead_url()), server.model), tmp_path / "run", n_tasks=2, retries=1)
    assert summary["status_counts"]["ok"] == 4


def test_a_server_failing_every_call_stops_the_batch_and_a_resume_finishes_it(tmp_path: Path) -> None:
    after = 3  # the first calls are answered, then every call fails with HTTP 500
    faults = Faults(plan=lambda number, body: "500" if number >= after else None)
    with (
        ReferencePolicyServer(brain=ScriptedSolver(), faults=faults) as server,
        pytest.raises(PolicyUnavailable, match=r"calls in a row failed \(HTTP 500\)") as caught,
    ):
        _run(PolicyConfig(server.url, server.model), tmp_path / "run", n_tasks=8, desktops=2)
    assert "run the same command again" in str(caught.value)
    records = list(read_record_dicts(tmp_path / "run"))
    statuses = Counter(r["status"] for r in records)
    assert statuses["retried"] >= 8 and statuses["error"] == 0, statuses  # not one attempt recorded as final
    assert (tmp_path / "run" / "summary.json").exists()
    with ReferencePolicyServer(brain=ScriptedSolver(), model=server.model) as healthy:
        summary = _run(PolicyConfig(healthy.url, healthy.model), tmp_path / "run", n_tasks=8, desktops=2)
    assert summary["status_counts"]["ok"] == 16
    _check_finished(tmp_path / "run", 16)


class _StopsServer:
    """Answers like ScriptedSolver until call ``at``, then shuts its server down (from another thread)."""

    def __init__(self, at: int) -> None:
        self.solver, self.at, self.calls = ScriptedSolver(), at, 0
        self.server: ReferencePolicyServer | None = None
        self._lock = threading.Lock()

    def respond(self, messages: Sequence[Mapping[str, Any]]) -> Reply:
        with self._lock:
            self.calls += 1
            stop = self.calls == self.at
        if stop:
            assert self.server is not None
            threading.Thread(target=self.server.stop).start()
        return self.solver.respond(messages)


def test_a_server_that_goes_away_stops_the_batch_at_once(tmp_path: Path) -> None:
    brain = _StopsServer(at=4)
    server = ReferencePolicyServer(brain=brain)
    brain.server = server
    with server, pytest.raises(PolicyUnavailable, match="did not answer"):
        _run(PolicyConfig(server.url, server.model), tmp_path / "run", n_tasks=20)
    records = list(read_record_dicts(tmp_path / "run"))
    assert len(records) < 40, "the batch stopped early instead of failing every attempt"
    assert not [r for r in records if r["status"] == "error"], "an outage is never a final error"


def test_cli_names_the_url_and_exits_non_zero(tmp_path: Path) -> None:
    url = _dead_url()
    result = CliRunner().invoke(
        app, ["rl", "collect", "--backend", "fake", "--policy-url", url, "--model", "m", "--out", str(tmp_path / "r"),
              "--quiet"],
    )  # fmt: skip
    assert result.exit_code != 0
    assert url in result.output and "start the server" in result.output
    assert "Traceback" not in result.output
