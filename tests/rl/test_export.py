"""`legato rl export`: the exact fields, group advantages, images, Parquet round trips, streaming, bad input."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import os
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _run_kit import Try, collect_small_run, write_run
from typer.testing import CliRunner

import legato_rl.export.writers as export_writers
from legato_gym.errors import ConfigError, LegatoError, MissingDependencyError
from legato_rl.cli.app import app
from legato_rl.export import EXPORT_FIELDS, export_steps, parquet_schema
from legato_rl.store import (
    RecordError,
    RolloutStore,
    RunInProgressError,
    expand_prompt_ids,
    load_request,
    read_records,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

# Product.md's list, plus the identity fields a trainer joins on, the prompt's ids, the status and finish
# reason, and the server's weight version; nothing else, in this order.
FIELDS = [
    "rollout_id", "task_id", "group_id", "step_index", "status", "messages", "prompt_token_ids",
    "prompt_continues", "response_text", "response_reasoning", "response_token_ids", "response_logprobs",
    "response_tokens", "finish_reason", "reward", "advantage", "policy_version", "weight_version", "grader",
    "reset_kind",
]  # fmt: skip


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real batch on fake desktops against the reference policy server."""
    return collect_small_run(tmp_path_factory.mktemp("collected") / "run")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Groups with mixed, equal and excluded rewards, built record by record."""
    run = tmp_path_factory.mktemp("mixed") / "run"
    write_run(
        run,
        [
            Try("ga", "ok", 1.0),
            Try("ga", "ok", 0.0, steps=3),
            Try("ga", "truncated", 0.0, steps=1),
            Try("ga", "ok", 1.0),
            Try("ga", "ok", 1.0),
            Try("ga", "surplus", 0.0),  # finished after its group closed: not part of it
            Try("gb", "ok", 1.0),
            Try("gb", "ok", 1.0, token_ids=False),
            Try("gb", "cancelled", None, steps=1),
            Try("gb", "retried", None, steps=1),
            Try("gc", "ok", 0.5),
            Try("gc", "error", None),
            Try("gc", "ok", 0.0),
            Try("gd", "ok", 0.0, steps=0),  # graded without a single policy call: no rows
        ],
    )
    return run


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _images(messages: list[dict[str, Any]]) -> list[str]:
    return [
        part["image_url"]["url"]
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["rl", "export", *args])


def _tmp_files(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if name.endswith(".tmp")]


# --- what a row holds -------------------------------------------------------------------------------------


def test_rows_hold_exactly_the_listed_fields_from_a_real_collect(collected: Path, tmp_path: Path) -> None:
    out = tmp_path / "train.jsonl"
    stats = export_steps(collected, out)
    rows = _jsonl(out)
    assert list(EXPORT_FIELDS) == FIELDS
    records = [r for r in read_records(collected) if r.status in ("ok", "truncated")]
    assert stats.rows == len(rows) == sum(r.n_steps for r in records) > 0
    assert stats.rollouts == len(records) and stats.format == "jsonl" and stats.bytes == out.stat().st_size
    by_key = {(r.rollout_id, s.index): (r, s) for r in records for s in r.steps}
    assert len(by_key) == len(rows)
    for row in rows:
        assert list(row) == FIELDS
        record, step = by_key[(row["rollout_id"], row["step_index"])]
        assert row["task_id"] == record.task_id and row["group_id"] == record.group_id
        assert row["messages"] == load_request(collected, step.request, inline_images=False)["messages"]
        assert row["response_text"] == step.response.content
        assert row["response_reasoning"] == step.response.reasoning
        assert row["response_token_ids"] == list(step.response.token_ids or ())
        assert row["response_logprobs"] == list(step.response.logprobs or ())
        assert row["response_tokens"] is None  # the reference server returns token ids
        assert row["status"] == record.status and row["finish_reason"] == step.response.finish_reason == "stop"
        assert row["prompt_token_ids"] and row["prompt_continues"] is (step.index > 0)
        assert row["weight_version"] == "default"  # the server's label: never set to --version here
        assert row["reward"] == record.reward == 1.0
        assert row["advantage"] == 0.0  # the scripted solver succeeds every time: all-equal groups
        assert row["policy_version"] == "step-7"
        urls = _images(row["messages"])
        assert urls and all(url.startswith("legato-image://") for url in urls)
    excluded = {r.status for r in read_records(collected)} - {"ok", "truncated"}
    assert set(stats.excluded) == excluded


def test_advantages_use_completed_attempts_and_population_std(mixed: Path, tmp_path: Path) -> None:
    stats = export_steps(mixed, tmp_path / "train.jsonl")
    rows = _jsonl(tmp_path / "train.jsonl")
    per_rollout = {row["rollout_id"]: (row["group_id"], row["reward"], row["advantage"]) for row in rows}
    # ga: completed rewards 1, 0, 0, 1, 1 (the surplus 0 is not part of the group)
    mean, std = 0.6, math.sqrt((3 * 0.4**2 + 2 * 0.6**2) / 5)  # population std (ddof 0)
    for group, reward, advantage in per_rollout.values():
        if group == "ga":
            assert advantage == pytest.approx((reward - mean) / std)
        elif group == "gb":
            assert advantage == 0.0  # all equal
        elif group == "gc":
            assert advantage == pytest.approx(1.0 if reward == 0.5 else -1.0)
    assert {g for g, _, _ in per_rollout.values()} == {"ga", "gb", "gc"}  # gd's rollout has no steps
    assert sum(1 for g, _, _ in per_rollout.values() if g == "ga") == 5
    # every step of a rollout carries its rollout's reward and advantage
    assert len(rows) == (2 + 3 + 1 + 2 + 2) + (2 + 2) + (2 + 2)
    assert stats.excluded == {"cancelled": 1, "error": 1, "retried": 1, "surplus": 1}
    assert stats.rollouts == 10 and stats.groups == 4
    no_ids = [row for row in rows if row["rollout_id"] == "gb/a7/t0"]
    assert no_ids and all(r["response_token_ids"] is None and r["response_tokens"] for r in no_ids)


def test_inline_images_round_trip_to_the_stored_pngs(collected: Path, tmp_path: Path) -> None:
    export_steps(collected, tmp_path / "refs.jsonl")
    refs = _jsonl(tmp_path / "refs.jsonl")
    export_steps(collected, tmp_path / "inline.jsonl", inline_images=True)
    inline = _jsonl(tmp_path / "inline.jsonl")
    assert len(inline) == len(refs)
    seen = 0
    for ref_row, inline_row in zip(refs, inline, strict=True):
        ref_urls, inline_urls = _images(ref_row["messages"]), _images(inline_row["messages"])
        assert len(ref_urls) == len(inline_urls) > 0
        for ref, url in zip(ref_urls, inline_urls, strict=True):
            assert url.startswith("data:image/png;base64,")
            data = base64.b64decode(url.split(",", 1)[1])
            assert ref == "legato-image://" + hashlib.sha256(data).hexdigest()
            assert data == (collected / "images" / f"{ref.split('//', 1)[1]}.png").read_bytes()
            seen += 1
        # apart from the image URLs, the two exports are the same
        assert {k: v for k, v in ref_row.items() if k != "messages"} == {
            k: v for k, v in inline_row.items() if k != "messages"
        }
    assert seen > 0


# --- Parquet ----------------------------------------------------------------------------------------------


def test_parquet_schema_and_values_round_trip(mixed: Path, tmp_path: Path) -> None:
    stats = export_steps(mixed, tmp_path / "train.parquet")
    export_steps(mixed, tmp_path / "train.jsonl")
    assert stats.format == "parquet"
    schema = pq.read_schema(tmp_path / "train.parquet")
    assert schema.equals(parquet_schema(), check_metadata=True)
    assert schema.names == FIELDS
    assert schema.field("step_index").type == pa.int32() and not schema.field("step_index").nullable
    assert schema.field("response_token_ids").type == pa.list_(pa.int32())
    assert schema.field("prompt_token_ids").type == pa.list_(pa.int32())
    assert schema.field("response_logprobs").type == pa.list_(pa.float32())
    assert schema.field("messages").type == pa.string()
    assert schema.metadata[b"legato.schema"] == b"legato.export/v0"
    table = pq.read_table(tmp_path / "train.parquet")
    rows = table.to_pylist()
    expected = _jsonl(tmp_path / "train.jsonl")
    for row, want in zip(rows, expected, strict=True):
        row["messages"] = json.loads(row["messages"])
        if want["response_logprobs"] is not None:  # float32 in Parquet: the JSONL's numbers, rounded once
            want["response_logprobs"] = np.float32(want["response_logprobs"]).tolist()
    assert rows == expected
    assert any(r["response_token_ids"] is None for r in rows) and any(r["response_reasoning"] is None for r in rows)


def test_parquet_writes_bounded_row_groups(mixed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export_writers, "_BATCH_ROWS", 4)
    stats = export_steps(mixed, tmp_path / "train.parquet")
    meta = pq.ParquetFile(tmp_path / "train.parquet").metadata
    assert meta.num_rows == stats.rows == 18
    assert meta.num_row_groups == math.ceil(18 / 4)
    assert all(meta.row_group(i).num_rows <= 4 for i in range(meta.num_row_groups))


def test_hugging_face_datasets_reads_the_parquet_back(mixed: Path, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets", reason="Hugging Face datasets not installed (pip install datasets)")
    export_steps(mixed, tmp_path / "train.parquet", inline_images=True)
    dataset = datasets.Dataset.from_parquet(str(tmp_path / "train.parquet"), cache_dir=str(tmp_path / "hf"))
    features = dataset.features
    assert list(features) == FIELDS
    assert features["step_index"].dtype == "int32" and features["messages"].dtype == "string"
    assert features["reward"].dtype == "float64" and features["advantage"].dtype == "float64"
    assert dataset.to_list() == pq.read_table(tmp_path / "train.parquet").to_pylist()
    first = json.loads(dataset[0]["messages"])
    assert _images(first)[0].startswith("data:image/png;base64,")


def test_datasets_load_dataset_keeps_ids_logprobs_and_screenshots_exact(collected: Path, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets", reason="Hugging Face datasets not installed (pip install datasets)")
    from PIL import Image

    out = tmp_path / "train.parquet"
    export_steps(collected, out, image_column=True)
    schema = pq.read_schema(out)
    assert schema.names == [*FIELDS, "images"] and b"huggingface" in schema.metadata
    dataset = datasets.load_dataset("parquet", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    features = dataset.features
    assert list(features) == [*FIELDS, "images"]
    for name, dtype in (
        ("prompt_token_ids", "int32"),
        ("response_token_ids", "int32"),
        ("response_logprobs", "float32"),
    ):
        assert features[name].feature.dtype == dtype, name
    assert isinstance(features["images"].feature, datasets.Image)
    records = {r.rollout_id: r for r in read_records(collected) if r.status in ("ok", "truncated")}
    prompts = {rid: list(expand_prompt_ids(r.steps)) for rid, r in records.items()}
    assert len(dataset) == sum(r.n_steps for r in records.values()) > 0
    arrow = dataset.data.table.schema  # the columns as datasets holds them
    assert arrow.field("prompt_token_ids").type.value_type == pa.int32()
    assert arrow.field("response_logprobs").type.value_type == pa.float32()
    for row in dataset.remove_columns("images"):
        record = records[row["rollout_id"]]
        step = record.steps[row["step_index"]]
        assert row["status"] == record.status and row["finish_reason"] == step.response.finish_reason
        assert row["prompt_token_ids"] == prompts[record.rollout_id][step.index]  # id for id
        assert row["response_token_ids"] == list(step.response.token_ids or ())
        # vLLM's (and the reference server's) logprobs are float32 values: nothing is lost
        assert row["response_logprobs"] == list(step.response.logprobs or ())
    first = dataset[0]
    refs = _images(json.loads(first["messages"]))
    assert len(first["images"]) == len(refs) > 0
    for image, ref in zip(first["images"], refs, strict=True):
        assert isinstance(image, Image.Image)
        png = Image.open(collected / "images" / f"{ref.removeprefix('legato-image://')}.png")
        assert np.array_equal(np.asarray(image), np.asarray(png))


def test_image_column_is_parquet_only_and_needs_datasets(
    mixed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="Parquet column"):
        export_steps(mixed, tmp_path / "train.jsonl", image_column=True)
    monkeypatch.setitem(sys.modules, "datasets", None)  # an environment without Hugging Face datasets
    with pytest.raises(MissingDependencyError, match=r"legatolabs\[export\]"):
        export_steps(mixed, tmp_path / "train.parquet", image_column=True)
    assert not (tmp_path / "train.parquet").exists()


def test_a_token_id_beyond_int32_fails_the_export_by_name(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run, [Try("g", "ok", 1.0, steps=1)])
    lines = (run / "rollouts.jsonl").read_text().splitlines()
    data = json.loads(lines[0])
    data["steps"][0]["response"]["token_ids"][0] = 2**31
    (run / "rollouts.jsonl").write_text(json.dumps(data) + "\n")
    with pytest.raises(RecordError, match="token id 2147483648 does not fit int32"):
        export_steps(run, tmp_path / "train.parquet")


# --- streaming --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sized_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The same kind of rollout, 10 and 100 of them (1 step of 1500 tokens each: ~25 KB per row)."""
    root = tmp_path_factory.mktemp("sized")
    runs = {}
    for n in (10, 100):
        runs[n] = root / f"r{n}"
        write_run(runs[n], [Try(f"g{i // 4}", "ok", float(i % 2), steps=1) for i in range(n)], tokens=1500)
    return runs


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_export_memory_does_not_grow_with_rollouts(
    sized_runs: dict[int, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    monkeypatch.setattr(export_writers, "_BATCH_ROWS", 8)
    # imports, caches and the file names pathlib interns (a resize of the interned-strings table is
    # megabytes) outside the measurement
    for run in sized_runs.values():
        export_steps(run, tmp_path / f"warm{suffix}")
    peaks = {}
    for n, run in sized_runs.items():
        tracemalloc.start()
        try:
            stats = export_steps(run, tmp_path / f"out{n}{suffix}")
            peaks[n] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert stats.rows == n
    # holding every row would make the 100-rollout export ~10x the 10-rollout one
    assert peaks[100] < 1.5 * peaks[10], peaks


# --- bad input --------------------------------------------------------------------------------------------


def test_not_a_run_is_refused_clearly(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    for where, words in [
        (tmp_path / "empty", "not a legato run"),
        (tmp_path / "missing", "does not exist"),
        (tmp_path / "file.txt", "not a directory"),
    ]:
        with pytest.raises(RecordError, match=words):
            export_steps(where, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def test_run_still_being_written_is_refused(mixed: Path, tmp_path: Path) -> None:
    out = tmp_path / "train.jsonl"
    out.write_text("GOOD\n")
    with RolloutStore(mixed), pytest.raises(RunInProgressError, match="still being written"):
        export_steps(mixed, out)
    assert out.read_text() == "GOOD\n"
    export_steps(mixed, out)  # the writer is gone: fine now
    assert len(_jsonl(out)) == 18


def test_torn_last_line_is_left_out_with_a_warning(
    tmp_path: Path, mixed: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    write_run(run, [Try("ga", "ok", 1.0), Try("ga", "ok", 0.0)])
    torn = b'{"schema":"legato.rollout/v0","rollout_id":"ga/a9/t0","status":"ok","rew'
    with open(run / "rollouts.jsonl", "ab") as file:
        file.write(torn)
    with caplog.at_level(logging.WARNING):
        stats = export_steps(run, tmp_path / "train.jsonl")
    assert stats.torn_tail_bytes == len(torn) and stats.rollouts == 2
    assert "torn record" in caplog.text and "resume" in caplog.text
    assert {row["rollout_id"] for row in _jsonl(tmp_path / "train.jsonl")} == {"ga/a0/t0", "ga/a1/t0"}


@pytest.mark.parametrize("missing", ["message", "image"])
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_missing_file_fails_without_touching_the_previous_export(tmp_path: Path, missing: str, suffix: str) -> None:
    run = tmp_path / "run"
    records = write_run(run, [Try("ga", "ok", 1.0), Try("ga", "ok", 0.0, steps=3)])
    last = records[-1].steps[-1]
    if missing == "message":
        victim = run / "messages" / f"{last.request.messages[-1]}.json"
    else:
        body = load_request(run, last.request, inline_images=False)
        victim = run / "images" / f"{_images(body['messages'])[-1].split('//', 1)[1]}.png"
    victim.unlink()
    out = tmp_path / f"train{suffix}"
    out.write_bytes(b"GOOD")
    for inline in (False, True):
        with pytest.raises(RecordError) as info:
            export_steps(run, out, inline_images=inline)
        message = str(info.value)
        assert str(victim) in message and "missing" in message and records[-1].rollout_id in message
        assert out.read_bytes() == b"GOOD"
        assert _tmp_files(tmp_path) == []


def test_bad_format_and_out_paths(mixed: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\.csv"):
        export_steps(mixed, tmp_path / "train.csv")
    with pytest.raises(ConfigError, match="jsonl, parquet"):
        export_steps(mixed, tmp_path / "train.jsonl", format="arrow")
    with pytest.raises(ConfigError, match="file of the run itself"):
        export_steps(mixed, mixed / "rollouts.jsonl", format="jsonl")
    with pytest.raises(ConfigError, match="is a directory"):
        export_steps(mixed, tmp_path, format="jsonl")
    stats = export_steps(mixed, tmp_path / "deeper" / "train.data", format="parquet")
    assert pq.read_table(stats.path).num_rows == stats.rows


# --- the command ------------------------------------------------------------------------------------------


def test_cli_export_writes_the_file_and_prints_its_path(mixed: Path, tmp_path: Path) -> None:
    out = tmp_path / "train.parquet"
    result = _cli(str(mixed), "--out", str(out), "--inline-images")
    assert result.exit_code == 0, result.output
    assert str(out) in result.output and "18 steps" in result.output
    assert pq.read_table(out).num_rows == 18
    result = _cli(str(mixed), "--out", str(tmp_path / "t.bin"), "--format", "jsonl")
    assert result.exit_code == 0 and len(_jsonl(tmp_path / "t.bin")) == 18


def test_cli_image_column(collected: Path, tmp_path: Path) -> None:
    pytest.importorskip("datasets", reason="Hugging Face datasets not installed (pip install datasets)")
    out = tmp_path / "train.parquet"
    result = _cli(str(collected), "--out", str(out), "--image-column")
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.schema.names[-1] == "images"
    assert all(images and images[0]["bytes"].startswith(b"\x89PNG") for images in table.column("images").to_pylist())
    result = _cli(str(collected), "--out", str(tmp_path / "train.jsonl"), "--image-column")
    assert result.exit_code == 2 and "Parquet column" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("case", ["not-a-run", "in-progress", "bad-suffix"])
def test_cli_bad_input_exits_2_without_traceback(mixed: Path, tmp_path: Path, case: str) -> None:
    out = tmp_path / "train.jsonl"
    if case == "in-progress":
        with RolloutStore(mixed):
            result = _cli(str(mixed), "--out", str(out))
    elif case == "not-a-run":
        result = _cli(str(tmp_path), "--out", str(out))
    else:
        result = _cli(str(mixed), "--out", str(tmp_path / "train.txt"))
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)
    assert not out.exists()


def test_errors_are_legato_errors() -> None:
    assert issubclass(RunInProgressError, RecordError) and issubclass(RecordError, LegatoError)
