"""`legato rl profile`: figures, the rebuilt desktop timeline, the pictures and the HTML report, bad input."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from _run_kit import Try, collect_small_run, write_run
from typer.testing import CliRunner

from legato_gym.errors import MissingDependencyError
from legato_rl.cli.app import app
from legato_rl.profile import LATENCY_KINDS, PHASES, build_timeline, profile_run
from legato_rl.store import ErrorInfo, RecordError, RolloutStore, read_records
from legato_rl.summary import summarize_run

pytest.importorskip("matplotlib", reason="the pictures need matplotlib: pip install 'legatolabs[plots]'")
Image = pytest.importorskip("PIL.Image")

T0 = 1_800_000_000.0
PROFILE_KEYS = {
    "schema", "run", "in_progress", "torn_tail_bytes", "summary", "desktops", "latency_s", "errors", "files"
}  # fmt: skip


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real batch on fake desktops against the reference policy server."""
    return collect_small_run(tmp_path_factory.mktemp("collected") / "run")


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["rl", "profile", *args])


def _spans(lanes: dict[str, list[tuple[float, float]]], phase: str) -> list[tuple[float, float]]:
    return [(round(start - T0, 6), round(width, 6)) for start, width in lanes[phase]]


# --- the timeline -----------------------------------------------------------------------------------------


def test_timeline_lays_phases_on_the_recorded_skeleton(tmp_path: Path) -> None:
    # try i starts at T0 + 20 i: reset 1 s; per step (started at +1, +4.75): model 2 s, then act 0.5, wait 1
    # (ready 0.25 + fixed 0.75), obs 0.25; eval 0.5; it ends 2 + 3.75 * steps s after its start (_run_kit.write_run)
    write_run(
        tmp_path / "run",
        [
            Try("ga", "ok", 1.0, desktop=0),
            Try("ga", "ok", 0.0, desktop=1),
            Try("gb", "cancelled", None, desktop=0, steps=1),
            Try("gb", "skipped", None, desktop=None, steps=0),
        ],
        t0=T0,
    )
    timeline = build_timeline(read_records(tmp_path / "run"))
    assert timeline.start == T0 and timeline.end == T0 + 45.75  # the skipped record (no desktop) is not drawn
    assert sorted(timeline.intervals) == [0, 1]
    d0 = timeline.intervals[0]
    assert _spans(d0, "reset") == [(0.0, 1.0), (40.0, 1.0)]
    assert _spans(d0, "model") == [(1.0, 2.0), (4.75, 2.0), (41.0, 2.0)]
    # the actions of a step end where the next step starts; the last step's, with eval, where the try ends
    assert _spans(d0, "act") == [(3.0, 0.5), (7.25, 0.5), (43.5, 0.5)]
    assert _spans(d0, "wait") == [(3.5, 1.0), (7.75, 1.0), (44.0, 1.0)]
    assert _spans(d0, "obs") == [(4.5, 0.25), (8.75, 0.25), (45.0, 0.25)]
    assert _spans(d0, "eval") == [(9.0, 0.5), (45.25, 0.5)]
    assert _spans(d0, "other") == [(0.0, 9.5), (40.0, 5.75)]  # whole tries: the phases are drawn over them
    assert _spans(d0, "idle") == [(9.5, 30.5)]
    assert _spans(timeline.intervals[1], "idle") == [(0.0, 20.0), (29.5, 16.25)]
    assert [(s.desktop, s.status) for s in timeline.tries] == [(0, "ok"), (1, "ok"), (0, "cancelled")]
    assert timeline.busy_seconds(0) == pytest.approx(9.5 + 5.75)


def test_profile_figures_per_desktop_and_latency(tmp_path: Path) -> None:
    write_run(tmp_path / "run", [Try("ga", "ok", 1.0, desktop=0), Try("ga", "ok", 0.0, desktop=1, steps=3)], t0=T0)
    profile = profile_run(tmp_path / "run", plots=False)
    assert profile.files == {} and not (tmp_path / "run" / "profile").exists()
    assert profile.summary.to_json() == summarize_run(tmp_path / "run").to_json()
    usage = {d.desktop: d for d in profile.desktops}
    assert usage[0].tries == usage[1].tries == 1
    assert usage[0].busy_s == pytest.approx(9.5) and usage[0].utilization == pytest.approx(9.5 / 33.25)
    phase_s = usage[1].phase_s
    assert phase_s["model"] == pytest.approx(6.0) and phase_s["wait"] == pytest.approx(3.0)
    assert phase_s["idle"] == pytest.approx(20.0)
    assert phase_s["other"] == pytest.approx(0.5)
    assert sum(v for k, v in phase_s.items() if k != "idle") == pytest.approx(13.25)  # the phases tile the try
    assert set(profile.latency_s) == set(LATENCY_KINDS)
    assert profile.latency_s["model"] == {"n": 5, "p50": 2.0, "p95": 2.0, "p99": 2.0, "max": 2.0}
    assert profile.latency_s["wait"]["n"] == 5 and profile.latency_s["wait"]["p50"] == pytest.approx(1.0)
    assert profile.latency_s["reset"]["n"] == 2


def test_profile_splits_reset_times_by_the_records_reset_kind(tmp_path: Path) -> None:
    kinds = ["fast", "revert", None, "fast"]  # None: a record of a backend that does not say, or an older one
    write_run(tmp_path / "run", [Try(f"g{i // 2}", "ok", 1.0, reset_kind=kind) for i, kind in enumerate(kinds)])
    profile = profile_run(tmp_path / "run", plots=False)
    assert profile.latency_s["reset"]["n"] == 4  # every reset, said or not
    assert profile.latency_s["reset fast"]["n"] == 2 and profile.latency_s["reset revert"]["n"] == 1
    assert profile.latency_s["reset fast"]["p50"] == pytest.approx(1.0)  # reset_s + wait_after_reset_s
    assert list(profile.latency_s)[: len(LATENCY_KINDS)] == list(LATENCY_KINDS)


# --- pictures and report ----------------------------------------------------------------------------------


def _check_png(path: Path, min_width: int) -> None:
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    with Image.open(path) as image:
        assert image.width >= min_width and image.height >= 200
        colors = image.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) > 20  # drawn, not blank


def test_profile_of_a_real_run_writes_pngs_html_and_json(collected: Path) -> None:
    profile = profile_run(collected)
    target = collected / "profile"
    assert profile.files == {
        "timeline": target / "timeline.png",
        "latency": target / "latency.png",
        "report": target / "report.html",
        "json": target / "profile.json",
    }
    _check_png(profile.files["timeline"], 1000)
    _check_png(profile.files["latency"], 1000)
    report = profile.files["report"].read_text(encoding="utf-8")
    assert report.count('src="data:image/png;base64,') == 2
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", report)  # self-contained
    for label in ("success rate", "rollouts per hour", "model call p50 / p95 / p99", "prefix-cache hit rate"):
        assert label in report
    saved = json.loads(profile.files["json"].read_text())
    assert saved == json.loads(json.dumps(profile.to_json()))
    assert set(saved) == PROFILE_KEYS and saved["schema"] == "legato.profile/v0"
    assert saved["summary"]["n_records"] == len(list(read_records(collected)))
    assert {d["desktop"] for d in saved["desktops"]} == {0, 1}
    for d in saved["desktops"]:
        assert set(d["phase_s"]) == set(PHASES) and d["phase_s"]["model"] > 0


def test_cli_json_and_out_dir(collected: Path, tmp_path: Path) -> None:
    result = _cli(str(collected), "--json", "--out", str(tmp_path / "pics"))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == PROFILE_KEYS
    summary = data["summary"]
    for key in (
        "status_counts", "success_rate", "rollouts_per_hour", "phase_share", "model_latency_s", "retried_calls",
        "errors", "prefix_cache_hit_rate", "share_steps_with_logprobs", "share_steps_with_token_ids",
    ):  # fmt: skip
        assert key in summary
    assert summary["share_steps_with_token_ids"] == 1.0 and summary["success_rate"] == 1.0
    assert data["files"]["report"] == str(tmp_path / "pics" / "report.html")
    assert sorted(p.name for p in (tmp_path / "pics").iterdir()) == [
        "latency.png", "profile.json", "report.html", "timeline.png"
    ]  # fmt: skip


def test_cli_table(collected: Path, tmp_path: Path) -> None:
    result = _cli(str(collected), "--no-plots")
    assert result.exit_code == 0, result.output
    for label in ("success rate", "rollouts per hour", "steps with token ids", "model", "desktop"):
        assert label in result.stdout


# --- bad input --------------------------------------------------------------------------------------------


def test_missing_matplotlib_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_run(tmp_path / "run", [Try("ga", "ok", 1.0)])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingDependencyError, match=r"legatolabs\[plots\]"):
        profile_run(tmp_path / "run")
    assert profile_run(tmp_path / "run", plots=False).summary.n_records == 1
    # by default the CLI prints the figures and says how to get the pictures
    result = _cli(str(tmp_path / "run"))
    assert result.exit_code == 0 and "legatolabs[plots]" in result.output and "success rate" in result.output
    # asked for pictures explicitly, it refuses with the extra named
    result = _cli(str(tmp_path / "run"), "--plots")
    assert result.exit_code == 2 and "legatolabs[plots]" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("case", ["missing", "empty", "no-manifest"])
def test_not_a_run_exits_2_with_a_clear_message(tmp_path: Path, case: str) -> None:
    run = tmp_path / "run"
    if case == "empty":
        run.mkdir()
    elif case == "no-manifest":
        write_run(run, [Try("ga", "ok", 1.0)])
        (run / "run.json").unlink()
    with pytest.raises(RecordError):
        profile_run(run, plots=False)
    result = _cli(str(run))
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "Traceback" not in result.output
    assert {"missing": "does not exist", "empty": "not a legato run", "no-manifest": "run.json"}[case] in result.output


def test_run_in_progress_and_torn_tail_are_noted(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run, [Try("ga", "ok", 1.0), Try("ga", "ok", 0.0)])
    with RolloutStore(run):
        profile = profile_run(run, plots=False)
        assert profile.in_progress and profile.summary.n_records == 2
        result = _cli(str(run), "--no-plots")
        assert result.exit_code == 0 and "still being written" in result.output
    torn = b'{"schema":"legato.rollout/v0","rollout_id":"ga/a2'
    with open(run / "rollouts.jsonl", "ab") as file:
        file.write(torn)
    profile = profile_run(run, plots=False)
    assert not profile.in_progress and profile.torn_tail_bytes == len(torn) and profile.summary.n_records == 2
    result = _cli(str(run), "--no-plots")
    assert result.exit_code == 0 and "torn record" in result.output


# --- errors and failed calls (issue 14, item 9) -----------------------------------------------------------


def _error_run(run: Path) -> None:
    timeout = ErrorInfo("policy", "PolicyTimeout", "no answer from http://127.0.0.1:8001/v1 within 60.0 s")
    write_run(
        run,
        [
            Try("ga", "ok", 1.0, desktop=0),
            # one step, then a policy call that failed after 30 s (its retries included): no grading
            Try("ga", "error", None, desktop=1, steps=1, error=timeout, failed_call_s=30.0),
            Try("gb", "error", None, desktop=0, steps=0, error=ErrorInfo(
                "policy", "PolicyTimeout", "no answer from http://127.0.0.1:8002/v1 within 60.0 s"
            ), failed_call_s=12.0),
            Try("gb", "error", None, desktop=1, steps=0, error=ErrorInfo("policy", "PolicyHTTPError", "HTTP 400")),
            Try("gc", "retried", None, desktop=0, steps=0),
            Try("gc", "error", None, desktop=1, steps=0),
        ],
        t0=T0,
    )  # fmt: skip


def test_failed_call_time_is_a_phase_of_its_own(tmp_path: Path) -> None:
    _error_run(tmp_path / "run")
    timeline = build_timeline(read_records(tmp_path / "run"))
    d1 = timeline.intervals[1]
    # try 1 starts at +20: reset 1 s, its step's model call 2 s then its actions 1.75 s, then the failed call
    assert _spans(d1, "model") == [(21.0, 2.0)]
    assert _spans(d1, "act") == [(23.0, 0.5)] and _spans(d1, "obs")[-1] == (24.5, 0.25)
    assert _spans(d1, "failed_call") == [(24.75, 30.0)]
    assert [s for s in _spans(d1, "eval") if 20 <= s[0] < 60] == []  # a try ended by a failed call is not graded
    assert _spans(timeline.intervals[0], "failed_call") == [(41.0, 12.0)]  # failed at its first call
    profile = profile_run(tmp_path / "run", plots=False)
    usage = {d.desktop: d for d in profile.desktops}
    assert usage[1].phase_s["failed_call"] == pytest.approx(30.0) and usage[0].phase_s["failed_call"] == 12.0
    share = profile.summary.phase_share
    desktop_s = sum(r.timing.total_s for r in read_records(tmp_path / "run"))
    assert share["failed_call"] == pytest.approx(42.0 / desktop_s)
    assert sum(v for v in share.values() if v is not None) == pytest.approx(1.0)


def test_errors_are_counted_by_kind_with_the_top_messages(tmp_path: Path) -> None:
    _error_run(tmp_path / "run")
    profile = profile_run(tmp_path / "run", plots=False)
    policy, env = profile.errors["policy"], profile.errors["env"]
    assert (policy.error, policy.retried, env.error, env.retried) == (3, 0, 1, 1)
    # the two timeouts differ only in a port number: one message, counted twice, shown as first seen
    assert policy.top == (
        (2, "PolicyTimeout", "no answer from http://127.0.0.1:8001/v1 within 60.0 s"),
        (1, "PolicyHTTPError", "HTTP 400"),
    )
    assert env.top == ((2, "DesktopCrashed", "gone"),)
    assert profile.to_json()["errors"]["policy"]["top"][0] == {
        "count": 2, "type": "PolicyTimeout", "message": "no answer from http://127.0.0.1:8001/v1 within 60.0 s"
    }  # fmt: skip
    result = _cli(str(tmp_path / "run"), "--no-plots")
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "errors by kind" in out and "failed_call" in out
    assert "2× PolicyTimeout: no answer from" in out and "1× PolicyHTTPError: HTTP 400" in out
