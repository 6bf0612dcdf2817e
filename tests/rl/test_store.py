"""The legato.rollout/v0 store: content addressing, exact request round trips, records, torn lines, manifest."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from legato_gym import Task
from legato_gym.errors import ConfigError, StateError
from legato_rl import load_request
from legato_rl.harness import QwenHarness
from legato_rl.store import (
    SCHEMA,
    ActionRecord,
    ErrorInfo,
    ModelStats,
    PolicyStamp,
    RecordError,
    RequestRef,
    Response,
    RolloutRecord,
    RolloutStore,
    RunManifest,
    StepRecord,
    Timing,
    check_manifest,
    is_being_written,
    open_run,
    read_manifest,
    read_record_dicts,
    read_records,
    task_digests,
    tasks_sha256,
)

SHA = "ab" * 32


def body_for(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A body in the shape legato's PolicyClient sends."""
    return {
        "model": "Qwen/Qwen3-VL-8B",
        "messages": messages,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_tokens": 2048,
        "logprobs": True,
        "top_logprobs": 0,
        "return_token_ids": True,
        **extra,
    }


def screen(i: int) -> np.ndarray:
    image = np.zeros((36, 64, 3), np.uint8)
    image[i % 36, :, 1] = 200
    image[0, 0, 0] = i
    return image


def reply(i: int) -> str:
    return f'Action: step {i}\n<tool_call>\n{{"name": "computer_use", "arguments": {{"action": "wait"}}}}\n</tool_call>'


def play(store: RolloutStore, steps: int, instruction: str = "Do the thing") -> list[tuple[dict[str, Any], RequestRef]]:
    """Build the growing prompts of one attempt through the harness and store each."""
    conversation = QwenHarness(image_max=20).start(instruction)
    sent = []
    for i in range(steps):
        body = body_for(conversation.messages(screen(i)))
        sent.append((body, store.put_request(body)))
        conversation.record_reply(reply(i))
    return sent


class FakeChat:
    """Duck-typed ChatResult."""

    def __init__(self, **overrides: Any) -> None:
        self.content = "Action: wait"
        self.reasoning: str | None = None
        self.token_ids: list[int] | None = [1, 2, 3]
        self.logprobs: list[float] | None = [-0.1, -0.2, -0.3]
        self.tokens: list[str] | None = None
        self.finish_reason: str | None = "stop"
        self.prompt_tokens: int | None = 1000
        self.completion_tokens: int | None = 3
        self.cached_tokens: int | None = 900
        self.seconds = 0.5
        self.attempts = 1
        self.weight_version: str | None = None
        self._prompt_ids: list[int] | None = None
        self.__dict__.update(overrides)


def record(rid: str = "g1/a0/t0", *, steps: tuple[StepRecord, ...] = (), **overrides: Any) -> RolloutRecord:
    fields: dict[str, Any] = {
        "rollout_id": rid,
        "task_id": "t1",
        "domain": "os",
        "group_id": "g1",
        "attempt": 0,
        "policy": PolicyStamp("m", "step-1"),
        "status": "ok",
        "reward": 1.0,
        "timing": Timing(reset_s=1.0, model_s=2.0, total_s=3.5),
        "steps": steps,
        "started_at": 100.0,
        "ended_at": 103.5,
        "desktop": 0,
    }
    fields.update(overrides)
    return RolloutRecord(**fields)


# --- requests ------------------------------------------------------------------------------------------------


def test_load_request_gives_back_the_body_byte_for_byte(tmp_path: Path) -> None:
    with RolloutStore(tmp_path) as store:
        sent = play(store, 3)
    for body, ref in sent:
        assert json.dumps(load_request(tmp_path, ref)) == json.dumps(body)
        # and from the record's JSON form, as read back from disk
        assert json.dumps(load_request(tmp_path, json.loads(json.dumps(ref.to_json())))) == json.dumps(body)


def test_body_in_another_key_order_round_trips(tmp_path: Path) -> None:
    message = {"content": "hi", "role": "user", "name": "x"}
    body = {"top_logprobs": 0, "messages": [message], "seed": 3, "model": "m", "temperature": 0.5}
    with RolloutStore(tmp_path) as store:
        ref = store.put_request(body)
    assert ref.order == ("top_logprobs", "messages", "seed", "model", "temperature")
    assert json.dumps(load_request(tmp_path, ref)) == json.dumps(body)


def test_request_splits_sampling_from_extras(tmp_path: Path) -> None:
    with RolloutStore(tmp_path) as store:
        plain = store.put_request(body_for([{"role": "user", "content": "hi"}]))
        late = store.put_request(body_for([{"role": "user", "content": "hi"}], top_k=20))  # a sampling key last
    assert plain.model == "Qwen/Qwen3-VL-8B"
    assert dict(plain.sampling) == {"temperature": 1.0, "top_p": 1.0, "max_tokens": 2048}
    assert dict(plain.extras) == {"logprobs": True, "top_logprobs": 0, "return_token_ids": True}
    assert plain.order is None  # the PolicyClient's order needs no recording
    assert dict(late.sampling) == {"temperature": 1.0, "top_p": 1.0, "max_tokens": 2048, "top_k": 20}
    assert late.order is not None and late.order[-1] == "top_k"


def test_a_15_step_rollout_stores_each_message_and_image_once(tmp_path: Path) -> None:
    with RolloutStore(tmp_path) as store:
        sent = play(store, 15)
    distinct = {json.dumps(m, sort_keys=True) for body, _ in sent for m in body["messages"]}
    files = list((tmp_path / "messages").glob("*.json"))
    # system + 15 screenshots + 14 replies
    assert len(distinct) == 30
    assert len(files) == 30
    assert len(list((tmp_path / "images").glob("*.png"))) == 15
    # the prompts sent add up to many more messages than were stored
    assert sum(len(body["messages"]) for body, _ in sent) == sum(2 + 2 * i for i in range(15))
    # no stored message holds image bytes
    assert all(b"base64" not in f.read_bytes() for f in files)


def test_identical_screens_across_attempts_share_files(tmp_path: Path) -> None:
    with RolloutStore(tmp_path) as store:
        play(store, 2)
        play(store, 2)
    # both attempts start from the same screen and prompt: nothing new on the second
    assert len(list((tmp_path / "messages").glob("*.json"))) == 4
    assert len(list((tmp_path / "images").glob("*.png"))) == 2


def test_message_files_are_named_by_their_hash(tmp_path: Path) -> None:
    import hashlib

    with RolloutStore(tmp_path) as store:
        play(store, 2)
    for path in (tmp_path / "messages").iterdir():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.stem
    for path in (tmp_path / "images").iterdir():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.stem
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_existing_files_are_not_rewritten(tmp_path: Path) -> None:
    with RolloutStore(tmp_path) as store:
        play(store, 2)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "messages").iterdir()}
    for path in stamps:
        os.utime(path, ns=(1, 1))
    with RolloutStore(tmp_path) as store:  # a fresh store (resume) knows nothing in memory
        play(store, 2)
    assert all(p.stat().st_mtime_ns == 1 for p in stamps)


def test_inline_images_false_keeps_references(tmp_path: Path) -> None:
    with RolloutStore(tmp_path) as store:
        (_, ref), *_ = play(store, 1)
    body = load_request(tmp_path, ref, inline_images=False)
    urls = [p["image_url"]["url"] for m in body["messages"] for p in m["content"] if p["type"] == "image_url"]
    assert len(urls) == 1 and urls[0].startswith("legato-image://")


def test_non_png_and_remote_images_stay_inline(tmp_path: Path) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/AA=="}},
                {"type": "image_url", "image_url": "https://example.com/a.png"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo\n"}},  # not canonical
                # decodable, but not as b64encode writes it: stray padding bits, an extra '='
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgr="}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=="}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K="}},
            ],
        }
    ]
    body = body_for(messages)
    with RolloutStore(tmp_path) as store:
        ref = store.put_request(body)
    assert json.dumps(load_request(tmp_path, ref)) == json.dumps(body)
    assert not list((tmp_path / "images").iterdir())


def _write_message(root: Path, message: dict[str, Any]) -> str:
    import hashlib

    data = json.dumps(message).encode()
    sha = hashlib.sha256(data).hexdigest()
    (root / "messages").mkdir(parents=True, exist_ok=True)
    (root / "messages" / f"{sha}.json").write_bytes(data)
    return sha


@pytest.mark.parametrize(
    "url",
    [
        "legato-image://../../etc/passwd",
        "legato-image:///etc/passwd",
        "legato-image://" + "AB" * 32,
        "legato-image://" + "ab" * 31,
        "legato-image://" + "ab" * 32 + "/../x",
        "legato-image://" + "ab" * 32 + "\n",
    ],
)
def test_image_references_that_are_not_plain_hashes_are_refused(tmp_path: Path, url: str) -> None:
    (tmp_path / "images").mkdir()
    sha = _write_message(tmp_path, {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]})
    request = {"model": "m", "messages": [sha], "sampling": {}, "extras": {}, "order": None}
    with pytest.raises(RecordError, match="refusing"):
        load_request(tmp_path, request)
    with pytest.raises(RecordError, match="refusing"):
        load_request(tmp_path, request, inline_images=False)


@pytest.mark.parametrize("ref", ["../run.json", "ab" * 32 + "/../x", "AB" * 32, ""])
def test_message_references_that_are_not_plain_hashes_are_refused(tmp_path: Path, ref: str) -> None:
    with pytest.raises(RecordError):
        load_request(tmp_path, {"model": "m", "messages": [ref], "sampling": {}, "extras": {}, "order": None})


def test_missing_or_altered_files_are_reported(tmp_path: Path) -> None:
    with RolloutStore(tmp_path) as store:
        (_, ref), *_ = play(store, 1)
    image = next((tmp_path / "images").iterdir())
    image.write_bytes(image.read_bytes() + b"x")
    with pytest.raises(RecordError, match="altered"):
        load_request(tmp_path, ref)
    image.unlink()
    with pytest.raises(RecordError, match="missing"):
        load_request(tmp_path, ref)
    assert load_request(tmp_path, ref, inline_images=False)["model"] == "Qwen/Qwen3-VL-8B"
    message = tmp_path / "messages" / f"{ref.messages[0]}.json"
    message.unlink()
    with pytest.raises(RecordError, match="missing"):
        load_request(tmp_path, ref)


def test_a_body_that_already_holds_references_is_refused(tmp_path: Path) -> None:
    bad = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "legato-image://" + SHA}}]}]
    with RolloutStore(tmp_path) as store, pytest.raises(RecordError, match="already holds"):
        store.put_request(body_for(bad))


# --- records -------------------------------------------------------------------------------------------------


def test_record_round_trip_has_every_field(tmp_path: Path) -> None:
    with RolloutStore(tmp_path) as store:
        (body, ref), *_ = play(store, 1)
        step = StepRecord(
            index=0,
            request=ref,
            response=Response.from_chat(FakeChat()),
            model=ModelStats.from_chat(FakeChat(attempts=2)),
            actions=(ActionRecord.from_timings("WAIT", {"act_s": 0.1, "ready_s": 0.2, "obs_s": 0.3, "eval_s": 9}),),
            description="step 0",
            started_at=100.5,
        )
        written = record(steps=(step,))
        store.append(written)
    (line,) = (tmp_path / "rollouts.jsonl").read_text().splitlines()
    data = json.loads(line)
    assert list(data) == [
        "schema", "rollout_id", "task_id", "domain", "group_id", "attempt", "try", "desktop", "policy", "status",
        "reward", "grader", "error", "n_steps", "reset_kind", "timing", "started_at", "ended_at", "steps",
    ]  # fmt: skip
    assert data["schema"] == SCHEMA
    assert data["n_steps"] == 1 and data["error"] is None and data["policy"] == {"model": "m", "version": "step-1"}
    assert set(data["timing"]) == {f"{p}_s" for p in ("reset", "wait_after_reset", "model", "act", "wait", "obs",
                                                          "wait_before_eval", "eval", "total", "held")}  # fmt: skip
    (s,) = data["steps"]
    assert set(s) == {
        "index", "started_at", "request", "prompt_ids", "response", "model", "description", "parse_error", "actions",
    }  # fmt: skip
    assert s["prompt_ids"] is None
    assert s["response"] == {
        "content": "Action: wait",
        "reasoning": None,
        "token_ids": [1, 2, 3],
        "logprobs": [-0.1, -0.2, -0.3],
        "tokens": None,
        "finish_reason": "stop",
    }
    assert s["model"] == {"seconds": 0.5, "attempts": 2, "prompt_tokens": 1000, "completion_tokens": 3,
                          "cached_tokens": 900, "weight_version": None, "policy_version": None}  # fmt: skip
    assert s["actions"] == [{"action": "WAIT", "act_s": 0.1, "wait_s": None, "ready_s": 0.2, "obs_s": 0.3}]
    assert set(s["request"]) == {"model", "messages", "sampling", "extras", "order"}
    (back,) = read_records(tmp_path)
    assert back == written
    assert json.dumps(load_request(tmp_path, back.steps[0].request)) == json.dumps(body)


def test_status_and_error_must_agree() -> None:
    with pytest.raises(ConfigError, match="no error"):
        record(status="error", reward=None)
    with pytest.raises(ConfigError, match="only error/retried"):
        record(error=ErrorInfo("env", "DesktopCrashed", "boom"))
    with pytest.raises(ConfigError, match="must be one of"):
        record(status="done")
    with pytest.raises(ConfigError, match="kind"):
        ErrorInfo("user", "X", "y")
    # the agent's own failure (it destroyed its desktop) rides on a graded try only
    agent = ErrorInfo("agent", "AgentFault", "pids: 3 forks refused at the process bound")
    assert record(reward=0.0, error=agent).to_json()["error"]["kind"] == "agent"
    with pytest.raises(ConfigError, match="only ok/truncated"):
        record(status="retried", reward=None, error=agent)
    failed = record(status="retried", reward=None, error=ErrorInfo.from_exception("env", RuntimeError("vm died")))
    assert failed.to_json()["error"] == {"kind": "env", "type": "RuntimeError", "message": "vm died"}


def test_records_are_durable_lines_and_appends_accumulate(tmp_path: Path) -> None:
    with RolloutStore(tmp_path) as store:
        store.append(record("a"))
        # visible to a reader before the store closes
        assert [r.rollout_id for r in read_records(tmp_path)] == ["a"]
    with RolloutStore(tmp_path) as store:
        store.append(record("b"))
    assert [r.rollout_id for r in read_records(tmp_path)] == ["a", "b"]
    assert [d["rollout_id"] for d in read_record_dicts(tmp_path)] == ["a", "b"]


def test_torn_last_line_is_skipped_by_readers_and_cut_by_the_next_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with RolloutStore(tmp_path) as store:
        store.append(record("a"))
        store.append(record("b"))
    path = tmp_path / "rollouts.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole + whole[: len(whole) // 3])  # a killed writer's half line
    assert [r.rollout_id for r in read_records(tmp_path)] == ["a", "b"]
    assert "torn" in caplog.text
    with RolloutStore(tmp_path) as store:
        store.append(record("c"))
    assert [r.rollout_id for r in read_records(tmp_path)] == ["a", "b", "c"]
    assert path.read_bytes().startswith(whole)


def test_a_torn_only_line_is_cut(tmp_path: Path) -> None:
    (tmp_path / "rollouts.jsonl").write_bytes(b'{"schema": "legato.rol')
    assert list(read_records(tmp_path)) == []
    with RolloutStore(tmp_path) as store:
        store.append(record("a"))
    assert [r.rollout_id for r in read_records(tmp_path)] == ["a"]


def test_a_damaged_complete_line_is_an_error_with_its_line_number(tmp_path: Path) -> None:
    with RolloutStore(tmp_path) as store:
        store.append(record("a"))
    with open(tmp_path / "rollouts.jsonl", "ab") as file:
        file.write(b"{not json\n")
    with pytest.raises(RecordError, match=r"rollouts.jsonl:2"):
        list(read_records(tmp_path))


def test_reading_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="not a legato run"):
        list(read_records(tmp_path))
    with pytest.raises(RecordError, match="not a directory"):
        list(read_records(tmp_path / "nope"))


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    store = RolloutStore(tmp_path)
    assert is_being_written(tmp_path)
    with pytest.raises(ConfigError, match="another process"):
        RolloutStore(tmp_path)
    store.close()
    store.close()  # idempotent
    assert not is_being_written(tmp_path)
    with pytest.raises(StateError, match="closed"):
        store.append(record())
    RolloutStore(tmp_path).close()


# --- the run manifest ----------------------------------------------------------------------------------------


def manifest(**overrides: Any) -> RunManifest:
    fields: dict[str, Any] = {
        "tasks_sha256": SHA,
        "n_tasks": 3,
        "group": 8,
        "oversample": 0.25,
        "policy_model": "Qwen/Qwen3-VL-8B",
        "policy_version": "step-41",
        "max_steps": 15,
        "backend": "fake",
    }
    fields.update(overrides)
    return RunManifest(**fields)


def test_open_run_creates_then_resumes(tmp_path: Path) -> None:
    assert open_run(tmp_path / "run", manifest()) is False
    stored = read_manifest(tmp_path / "run")
    assert stored is not None and stored.created_at is not None
    assert json.loads((tmp_path / "run" / "run.json").read_text())["schema"] == "legato.run/v0"
    assert open_run(tmp_path / "run", manifest()) is True


@pytest.mark.parametrize(
    ("field", "value", "option"),
    [
        ("group", 4, "--group"),
        ("policy_version", "step-42", "--version"),
        ("tasks_sha256", "cd" * 32, "--tasks"),
        ("oversample", 0.0, "--oversample"),
        ("max_steps", 30, "--max-steps"),
        ("backend", "osworld", "--backend"),
        ("policy_model", "other", "--model"),
    ],
)
def test_resume_with_other_arguments_is_refused_naming_them(
    tmp_path: Path, field: str, value: Any, option: str
) -> None:
    open_run(tmp_path, manifest())
    with pytest.raises(ConfigError, match=option) as info:
        open_run(tmp_path, manifest(**{field: value}))
    assert repr(value) in str(info.value)


SAMPLING = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 1024}


@pytest.mark.parametrize(
    ("field", "value", "option"),
    [("temperature", 1.0, "--temperature"), ("top_p", 0.9, "--top-p"), ("max_tokens", 2048, "--max-tokens")],
)
def test_resume_with_other_sampling_settings_is_refused(tmp_path: Path, field: str, value: Any, option: str) -> None:
    open_run(tmp_path, manifest(**SAMPLING))
    assert open_run(tmp_path, manifest(**SAMPLING)) is True
    with pytest.raises(ConfigError) as info:
        open_run(tmp_path, manifest(**{**SAMPLING, field: value}))
    message = str(info.value)
    assert f"{option}: the run has {SAMPLING[field]!r}, this command gives {value!r}" in message
    assert "another --out" in message


def test_manifests_without_sampling_settings_still_load_and_resume(tmp_path: Path) -> None:
    """A run made before the sampling settings were recorded has no such keys in run.json."""
    open_run(tmp_path, manifest())
    data = json.loads((tmp_path / "run.json").read_text())
    for key in SAMPLING:
        data.pop(key)
    (tmp_path / "run.json").write_text(json.dumps(data))
    old = read_manifest(tmp_path)
    assert old is not None and (old.temperature, old.top_p, old.max_tokens) == (None, None, None)
    assert open_run(tmp_path, manifest(**SAMPLING)) is True
    check_manifest(manifest(**SAMPLING), manifest())  # a caller that gives none is not compared either


def test_check_manifest_lists_every_difference() -> None:
    with pytest.raises(ConfigError) as info:
        check_manifest(manifest(), manifest(group=2, max_steps=3))
    assert "--group" in str(info.value) and "--max-steps" in str(info.value)
    check_manifest(manifest(created_at=1.0), manifest(created_at=2.0))  # creation time is not compared


def test_records_without_a_manifest_are_not_resumed(tmp_path: Path) -> None:
    (tmp_path / "rollouts.jsonl").write_text("")
    with pytest.raises(ConfigError, match=r"no run\.json"):
        open_run(tmp_path, manifest())


def test_tasks_digest_ignores_order_and_source_but_not_content() -> None:
    a = Task("a", "do a", {"config": []}, domain="os", source=Path("/x/a.json"))
    b = Task("b", "do b", {"config": []}, domain="os")
    assert tasks_sha256([a, b]) == tasks_sha256([b, Task("a", "do a", {"config": []}, domain="os")])
    assert tasks_sha256([a, b]) != tasks_sha256([a])
    assert tasks_sha256([a]) != tasks_sha256([Task("a", "do A", {"config": []}, domain="os")])


def _task(task_id: str, *, instruction: str = "do it", evaluator: str = "exact_match", domain: str = "os") -> Task:
    config = {"id": task_id, "instruction": instruction, "config": [], "evaluator": {"func": evaluator}}
    return Task(task_id, instruction, config, domain=domain)


TASKS = [_task("a"), _task("b"), _task("c")]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (TASKS[::-1], "--tasks: the same 3 tasks in another order (2 moved: task 0 was os/a, now os/c, task 2 was "
                      "os/c, now os/a); group ids hold each task's position"),
        ([TASKS[0], _task("b", evaluator="fuzzy_match"), TASKS[2]], "--tasks: task 1 (os/b): config.evaluator changed"),
        ([TASKS[0], _task("b", instruction="do it now"), TASKS[2]],
         "--tasks: task 1 (os/b): instruction, config.instruction changed"),
        ([TASKS[0], _task("b", domain="chrome"), TASKS[2]], "--tasks: task 1 (os/b): domain changed"),
        (TASKS[:2], "--tasks: task 2 (os/c) is missing"),
        ([*TASKS, _task("d")], "--tasks: task 3 (os/d) is not in the run"),
        ([TASKS[1], TASKS[0], _task("c", evaluator="x")], "task 2 (os/c): config.evaluator changed"),
    ],
)  # fmt: skip
def test_a_resume_names_each_task_that_differs_by_position_id_and_part(
    tmp_path: Path, given: list[Task], said: str
) -> None:
    """The tasks digest ignored order while group ids hold a task's position, and named no task."""
    open_run(tmp_path, manifest(tasks=task_digests(TASKS)))
    written = (tmp_path / "run.json").read_bytes()
    assert open_run(tmp_path, manifest(tasks=task_digests(TASKS))) is True
    with pytest.raises(ConfigError) as info:
        open_run(tmp_path, manifest(tasks=task_digests(given)))
    message = str(info.value)
    assert said in message, message
    assert "give the run's tasks as they were (the same tasks, in the same order); or give another --out" in message
    assert "the run has" not in message  # no digests: the task and its part say it
    assert (tmp_path / "run.json").read_bytes() == written  # a resume, refused or not, never rewrites it


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("grader", "local",
         "--grader: the run has 'osworld', this command gives 'local' (resume with --grader osworld)"),
        ("rollout_timeout", 60.0, "--rollout-timeout: the run has None, this command gives 60.0 (resume without "
                                  "--rollout-timeout)"),
        ("screen", (1280, 720), "the screen size (DesktopConfig.screen): the run has [1920, 1080], this command "
                                "gives [1280, 720]"),
        ("extra_body", {"chat_template_kwargs": {"enable_thinking": True}},
         "the extra request fields (Sampling.extra_body): the run has {}, this command gives"),
        ("desktop", {"session": "lookalike", "pyautogui_pause": 0.1},
         "the desktops' settings (--session, --pyautogui-pause, --provider): the run has {'session': 'openbox', "
         "'pyautogui_pause': 0.1}, this command gives {'session': 'lookalike', 'pyautogui_pause': 0.1}"),
    ],
)  # fmt: skip
def test_a_resume_with_another_grader_or_setting_that_changes_rewards_is_refused(
    tmp_path: Path, field: str, value: Any, said: str
) -> None:
    """A resume with another --grader was accepted: one batch held the rewards of two graders."""
    run = {"backend": "local", "grader": "osworld", "screen": (1920, 1080), "extra_body": {},
           "desktop": {"session": "openbox", "pyautogui_pause": 0.1}}  # fmt: skip
    open_run(tmp_path, manifest(**run))
    written = (tmp_path / "run.json").read_bytes()
    assert open_run(tmp_path, manifest(**run)) is True  # a tuple read back as a JSON list is the same screen
    with pytest.raises(ConfigError) as info:
        open_run(tmp_path, manifest(**{**run, field: value}))
    assert said in str(info.value), str(info.value)
    assert "give the run's own values above; or give another --out for a new batch" in str(info.value)
    assert (tmp_path / "run.json").read_bytes() == written


def test_the_backends_own_settings_that_change_an_attempt_are_the_runs() -> None:
    """--session and --pyautogui-pause were not recorded: a resume could mix two desktops' looks in one batch."""
    from legato_gym import DesktopConfig
    from legato_gym.backends import resolve_backend
    from legato_gym.backends.local import LocalOptions
    from legato_gym.backends.osworld import OSWorldOptions

    local = resolve_backend("local").run_settings
    assert local is not None
    assert local(DesktopConfig(options=LocalOptions(session="gnome", pyautogui_pause=0.0))) == {
        "session": "gnome",
        "pyautogui_pause": 0.0,
    }
    osworld = resolve_backend("osworld").run_settings
    assert osworld is not None and osworld(DesktopConfig(options=OSWorldOptions(provider="aws"))) == {"provider": "aws"}
    assert resolve_backend("fake").run_settings is None


def test_another_backend_is_named_once_not_as_a_grader_too() -> None:
    with pytest.raises(ConfigError) as info:
        check_manifest(manifest(backend="fake", grader="fake"), manifest(backend="local", grader="local"))
    assert "--backend: the run has 'fake', this command gives 'local' (resume with --backend fake)" in str(info.value)
    assert "--grader" not in str(info.value)
    with pytest.raises(ConfigError) as info:  # a backend of your own has no --grader to give
        check_manifest(manifest(backend="x:Desk", grader="x:Desk"), manifest(backend="x:Desk", grader="y"))
    assert "--grader: the run has 'x:Desk', this command gives 'y'). To resume" in str(info.value)


def test_a_run_made_before_a_setting_was_recorded_resumes_with_any_value_and_keeps_its_manifest(
    tmp_path: Path,
) -> None:
    """run.json files without tasks, grader, rollout_timeout, screen or extra_body: compared by what they hold."""
    open_run(tmp_path, manifest(tasks_sha256=tasks_sha256(TASKS)))
    data = json.loads((tmp_path / "run.json").read_text())
    for key in ("tasks", "grader", "rollout_timeout", "screen", "extra_body", "desktop"):
        del data[key]
    (tmp_path / "run.json").write_text(json.dumps(data))
    old = read_manifest(tmp_path)
    assert old is not None and old.tasks is None and old.absent >= {"grader", "rollout_timeout", "screen"}
    now = manifest(tasks_sha256=tasks_sha256(TASKS), tasks=task_digests(TASKS), grader="local", rollout_timeout=9.0)
    assert open_run(tmp_path, now) is True
    assert json.loads((tmp_path / "run.json").read_text()) == data  # not rewritten with the new fields
    with pytest.raises(ConfigError, match=r"--tasks \(the task list\): the run has"):  # only the digest to compare
        open_run(tmp_path, replace(now, tasks_sha256=tasks_sha256(TASKS[:2]), tasks=task_digests(TASKS[:2])))


@pytest.mark.parametrize("syncfs", [True, False])
def test_files_are_made_durable_before_the_record_that_needs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, syncfs: bool
) -> None:
    import legato_rl.store.files as store_files

    events: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(store_files, "_syncfs", lambda path: events.append("syncfs") or syncfs)

    def fsync(fd: int) -> None:
        events.append("fsync " + os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with RolloutStore(tmp_path) as store:
        play(store, 2)  # messages and images written, not yet synced
        assert events == []
        store.append(record())
        store.append(record("g1/a1/t0"))  # nothing new to sync: only the record
    files = [e for e in events if e.startswith("fsync") and not e.endswith("rollouts.jsonl")]
    records = [i for i, e in enumerate(events) if e.endswith("rollouts.jsonl")]
    assert len(records) == 2 and events[0] == "syncfs"
    if syncfs:
        assert files == []  # one syncfs covered every file and directory
    else:
        written = len(list((tmp_path / "messages").iterdir())) + len(list((tmp_path / "images").iterdir()))
        assert len(files) == written + 2  # each file, then the messages/ and images/ directories
        assert max(events.index(f) for f in files) < records[0]


def test_a_resumed_store_removes_the_temporary_files_a_killed_writer_left(tmp_path: Path) -> None:
    RolloutStore(tmp_path).close()
    stale = [tmp_path / "messages" / f".{'a' * 64}.json.123.tmp", tmp_path / "images" / f".{'b' * 64}.png.9.tmp",
             tmp_path / ".summary.json.x1y2.tmp", tmp_path / ".run.json.k3.tmp"]  # fmt: skip
    kept = [tmp_path / ".train.jsonl.q7.tmp", tmp_path / "messages" / f"{'c' * 64}.json"]  # an export's, a message
    for path in stale + kept:
        path.write_bytes(b"half")
    RolloutStore(tmp_path).close()
    assert [p.exists() for p in stale] == [False] * 4 and all(p.exists() for p in kept)


# --- one definition of the statuses, and the package's public names -----------------------------------------


def test_status_and_its_sets_are_defined_once_and_shared() -> None:
    import legato_rl.groups as groups
    import legato_rl.store as store
    import legato_rl.summary as summary
    from legato_rl.testing import faults

    assert groups.Status is store.Status
    assert groups.COMPLETED_STATUSES is store.COMPLETED_STATUSES is summary.COMPLETED
    assert groups.FINAL_STATUSES is store.FINAL_STATUSES is faults.FINAL_STATUSES
    assert tuple(s.value for s in store.Status) == store.STATUSES
    for status in store.STATUSES:  # the plain strings of a record read back are members of the same sets
        failed = status in store.FAILED_STATUSES
        rec = record(status=status, error=ErrorInfo("env", "X", "x") if failed else None)
        assert rec.completed is (status in store.COMPLETED_STATUSES) is (store.Status(status) in {"ok", "truncated"})
        assert (status in store.FINAL_STATUSES) is (status != "retried")
        assert failed is (status in ("error", "retried"))


def test_the_store_package_exports_every_name_the_single_module_had() -> None:
    import legato_rl.store as store

    old = {
        "ERROR_KINDS", "IMAGE_SCHEME", "MANIFEST_SCHEMA", "SAMPLING_KEYS", "SCHEMA", "STATUSES", "ActionRecord",
        "ErrorInfo", "ModelStats", "PolicyStamp", "PromptContext", "PromptIds", "RecordError", "RequestRef",
        "Response", "RolloutRecord", "RolloutStore", "RunInProgressError", "RunManifest", "StepRecord",
        "StorageError", "Timing", "check_manifest", "check_run_dir", "expand_prompt_ids", "is_being_written",
        "is_run_dir", "load_request", "open_run", "prompt_ids_of", "read_manifest", "read_record_dicts",
        "read_records", "storage_error", "tasks_sha256", "torn_tail_bytes", "write_bytes_atomic",
        "write_json_atomic", "write_manifest", "ROLLOUTS_FILE", "MANIFEST_FILE", "SUMMARY_FILE", "MESSAGES_DIR",
        "IMAGES_DIR",
    }  # fmt: skip
    assert old <= set(store.__all__)
    assert all(getattr(store, name).__module__.startswith("legato_rl.store.") for name in old if name[0].islower())


def test_a_step_from_a_chat_result_is_the_step_built_field_by_field() -> None:
    ref = RequestRef(model="m", messages=(SHA,))
    action = ActionRecord("WAIT", act_s=0.1)
    chat = FakeChat(attempts=2, weight_version="w3")
    built = StepRecord(
        index=2, request=ref, response=Response.from_chat(chat), model=ModelStats.from_chat(chat), actions=(action,),
        description="wait", parse_error="no action", started_at=5.0,
    )  # fmt: skip
    step = StepRecord.from_chat(
        chat, index=2, request=ref, actions=[action], description="wait", parse_error="no action", started_at=5.0
    )
    assert step == built and step.to_json() == built.to_json()


def test_read_progress_gives_the_ended_attempts_the_retried_tries_and_the_counts(tmp_path: Path) -> None:
    from legato_rl.store import Status, read_progress

    crash = ErrorInfo("env", "DesktopCrashed", "gone")
    with RolloutStore(tmp_path) as store:
        store.append(record("g1/a0/t0", status="retried", reward=None, error=crash))
        store.append(record("g1/a0/t1", status="ok"))
        store.append(record("g1/a1/t0", attempt=1, status="error", reward=None, error=crash))
        store.append(record("g2/a0/t0", group_id="g2", status="skipped", reward=None))
    done = read_progress(tmp_path)
    assert done.ended == (("g1", 0, Status.OK), ("g1", 1, Status.ERROR), ("g2", 0, Status.SKIPPED))
    assert done.tries == (("g1", 0),)
    assert dict(done.status_counts) == {"retried": 1, "ok": 1, "error": 1, "skipped": 1}
    assert all(type(status) is Status for _, _, status in done.ended)
