"""Prompt token ids: recorded compactly per step, rebuilt exactly by the reader and the export (issue 17, item 5)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from legato_gym import DesktopConfig, Timeouts
from legato_gym.backends.fake import default_tasks
from legato_rl.collect import collect
from legato_rl.errors import PolicyResponseError
from legato_rl.export import export_steps
from legato_rl.policy import ChatResult, PolicyConfig
from legato_rl.store import (
    ModelStats,
    PolicyStamp,
    PromptIds,
    RecordError,
    RequestRef,
    Response,
    RolloutRecord,
    StepRecord,
    expand_prompt_ids,
    prompt_ids_of,
    read_records,
)
from legato_rl.testing import ReferencePolicyServer, ScriptedSolver

SCREEN = (320, 240)
CONFIG = DesktopConfig(screen=SCREEN, timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10))


def _collect(out: Path, server: ReferencePolicyServer, *, image_max: int = 20, tasks: int = 2) -> Path:
    collect(
        default_tasks(CONFIG)[:tasks],
        PolicyConfig(server.url, server.model, version="step-3"),
        out=out,
        desktops=2,
        group=1,
        max_steps=6,
        image_max=image_max,
        backend="fake",
        desktop=CONFIG,
    )
    return out


def _sent_prompt_ids(server: ReferencePolicyServer) -> dict[str, list[int]]:
    """What the server answered as prompt_token_ids, by the JSON text of the messages it was sent.

    The reference server's ids are its tokenizer's ids of the request's messages (``_completion``), a pure
    function of the request: the same call here gives the same list it put in its answer.
    """
    sent: dict[str, list[int]] = {}
    for request in server.requests:
        if request.path.endswith("/chat/completions") and request.status == 200:
            body = request.body
            sent[json.dumps(body["messages"])] = server.tokenizer.prompt(body["messages"], body.get("tools")).ids
    return sent


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("behaviour", ["vllm", "sglang"])
def test_exported_prompt_ids_equal_what_the_server_sent(tmp_path: Path, behaviour: str) -> None:
    with ReferencePolicyServer(brain=ScriptedSolver(), behaviour=behaviour) as server:
        run = _collect(tmp_path / "run", server)
        sent = _sent_prompt_ids(server)
    export_steps(run, tmp_path / "train.jsonl", inline_images=True)  # messages exactly as sent
    rows = _jsonl(tmp_path / "train.jsonl")
    assert len(rows) > 2 and any(row["step_index"] >= 2 for row in rows)
    for row in rows:
        want = sent[json.dumps(row["messages"])]
        assert row["prompt_token_ids"] == want  # id for id
        assert row["prompt_continues"] is (row["step_index"] > 0)
    # stored compactly: a later step keeps only the turn it added to the previous prompt and response
    for record in read_records(run):
        whole = list(expand_prompt_ids(record.steps))
        for step, prompt in zip(record.steps, whole, strict=True):
            assert step.prompt_ids is not None and prompt is not None
            if step.index:
                previous, answered = whole[step.index - 1], record.steps[step.index - 1].response.token_ids
                assert previous is not None and answered is not None
                assert step.prompt_ids.start == len(previous) + len(answered)
                assert 0 < len(step.prompt_ids.ids) < len(prompt) // 2
            else:
                assert step.prompt_ids.start == 0 and list(step.prompt_ids.ids) == prompt


def test_parquet_prompt_ids_equal_what_the_server_sent(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    with ReferencePolicyServer(brain=ScriptedSolver()) as server:
        run = _collect(tmp_path / "run", server, tasks=1)
        sent = _sent_prompt_ids(server)
    export_steps(run, tmp_path / "train.parquet", inline_images=True)
    rows = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert rows
    for row in rows:
        assert row["prompt_token_ids"] == sent[json.dumps(json.loads(row["messages"]))]


def test_a_rewritten_prompt_is_stored_after_the_shared_prefix(tmp_path: Path) -> None:
    # one screenshot kept: each step drops the previous screenshot, so no prompt continues the one before
    with ReferencePolicyServer(brain=ScriptedSolver()) as server:
        run = _collect(tmp_path / "run", server, image_max=1)
        sent = _sent_prompt_ids(server)
    export_steps(run, tmp_path / "train.jsonl", inline_images=True)
    rows = _jsonl(tmp_path / "train.jsonl")
    later = [row for row in rows if row["step_index"] > 0]
    assert later and all(row["prompt_continues"] is False for row in later)
    for row in rows:
        assert row["prompt_token_ids"] == sent[json.dumps(row["messages"])]
    steps = [step for record in read_records(run) for step in record.steps if step.index > 0]
    assert all(step.prompt_ids is not None and step.prompt_ids.start > 0 for step in steps)  # the system prompt


def test_no_prompt_ids_from_a_server_without_them(tmp_path: Path) -> None:
    with ReferencePolicyServer(brain=ScriptedSolver(), behaviour="vllm-0.10.1") as server:
        run = _collect(tmp_path / "run", server, tasks=1)
    steps = [step for record in read_records(run) for step in record.steps]
    assert steps and all(step.prompt_ids is None for step in steps)
    export_steps(run, tmp_path / "train.jsonl")
    assert all(
        r["prompt_token_ids"] is None and r["prompt_continues"] is None for r in _jsonl(tmp_path / "train.jsonl")
    )


# --- the delta itself ------------------------------------------------------------------------------------


def test_encode_and_decode_every_case() -> None:
    context = [1, 2, 3, 4, 5]
    cases = [
        ([1, 2, 3, 4, 5, 6, 7], context, PromptIds(prefix=True, start=5, ids=(6, 7))),
        ([1, 2, 3, 4, 5], context, PromptIds(prefix=True, start=5, ids=())),
        ([1, 2, 9, 4, 5, 6], context, PromptIds(prefix=False, start=2, ids=(9, 4, 5, 6))),
        ([1, 2, 3], context, PromptIds(prefix=False, start=3, ids=())),  # shorter: a prefix of the context
        ([7, 8], context, PromptIds(prefix=False, start=0, ids=(7, 8))),
        ([7, 8], None, PromptIds(prefix=False, start=0, ids=(7, 8))),
        ((1, 2, 3, 4, 5, 6), tuple(context), PromptIds(prefix=True, start=5, ids=(6,))),  # any sequences
    ]
    for prompt, ctx, want in cases:
        got = PromptIds.encode(prompt, ctx)
        assert got == want, (prompt, ctx)
        assert got.decode(ctx) == list(prompt)
        assert PromptIds.from_json(json.loads(json.dumps(got.to_json()))) == got


def test_decode_refuses_a_delta_that_does_not_fit() -> None:
    with pytest.raises(RecordError, match="starts at 5"):
        PromptIds(prefix=True, start=5, ids=(1,)).decode([1, 2, 3], "rollout r step 1")
    with pytest.raises(RecordError, match="starts at 2"):
        PromptIds(prefix=True, start=2, ids=(1,)).decode([1, 2, 3])  # a continuation covers all the context
    with pytest.raises(RecordError, match="starts at 1"):
        PromptIds(prefix=False, start=1, ids=(1,)).decode(None)
    for bad in ({"prefix": 1, "start": 0, "ids": []}, {"prefix": True, "start": -1, "ids": []},
                {"prefix": True, "start": 0, "ids": [1.5]}, {"prefix": True, "start": 0}):  # fmt: skip
        with pytest.raises(RecordError, match="prompt_ids"):
            PromptIds.from_json(bad)


def _step(index: int, prompt_ids: PromptIds | None, token_ids: tuple[int, ...] | None) -> StepRecord:
    return StepRecord(
        index=index,
        request=RequestRef(model="m", messages=()),
        response=Response(content="x", token_ids=token_ids),
        model=ModelStats(seconds=0.1),
        prompt_ids=prompt_ids,
    )


def test_expand_follows_the_steps_and_restarts_after_a_gap() -> None:
    steps = [
        _step(0, PromptIds(False, 0, (1, 2)), (3,)),
        _step(1, PromptIds(True, 3, (4,)), None),  # no response ids: the next prompt cannot be a delta
        _step(2, PromptIds(False, 0, (1, 2, 3, 4, 5)), (6,)),
        _step(3, None, (7,)),
        _step(4, PromptIds(False, 0, (9,)), (8,)),
    ]
    assert list(expand_prompt_ids(steps)) == [[1, 2], [1, 2, 3, 4], [1, 2, 3, 4, 5], None, [9]]
    broken = [steps[0], _step(1, PromptIds(True, 2, (4,)), None)]
    with pytest.raises(RecordError, match="step 1: prompt_ids starts at 2"):
        list(expand_prompt_ids(broken))


def test_a_record_written_before_prompt_ids_still_reads() -> None:
    step = _step(0, None, (1,))
    data = RolloutRecord(
        rollout_id="g/0/0", task_id="t", domain=None, group_id="g", attempt=0, policy=PolicyStamp("m", "v"),
        status="ok", reward=1.0, steps=(step,),
    ).to_json()  # fmt: skip
    old = data["steps"][0]
    del old["prompt_ids"]
    del old["model"]["weight_version"]
    back = RolloutRecord.from_json(data)
    assert back.steps[0].prompt_ids is None and back.steps[0].model.weight_version is None


def _chat(prompt_json: bytes | list[int], token_ids: list[int] | None) -> ChatResult:
    return ChatResult(
        content="x", reasoning=None, token_ids=token_ids, _prompt_ids=prompt_json, logprobs=None, tokens=None,
        finish_reason="stop", prompt_tokens=None, completion_tokens=None, cached_tokens=None, seconds=0.0,
        attempts=1, request={},
    )  # fmt: skip


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_the_byte_level_continuation_matches_the_parsed_delta(separators: tuple[str, str]) -> None:
    rng = random.Random(7)
    unparsed = 0
    for _ in range(300):
        conversation: list[int] = []
        context = None
        previous: list[int] | None = None
        for _turn in range(4):
            prompt = list(conversation)
            if rng.random() < 0.3 and prompt:  # a rewrite: one id changed, or the prompt cut short
                at = rng.randrange(len(prompt))
                prompt = prompt[:at] if rng.random() < 0.5 else [*prompt[:at], prompt[at] + 1, *prompt[at + 1 :]]
            elif rng.random() < 0.2 and prompt:  # the last id grows a digit: "[1,2" still starts "[1,29"
                prompt = [*prompt[:-1], prompt[-1] * 10 + 9]
            prompt += [rng.randrange(0, 200) for _ in range(rng.randrange(0, 5))]
            response = [rng.randrange(0, 200) for _ in range(rng.randrange(0, 3))]
            raw = json.dumps(prompt, separators=separators).encode()
            result = _chat(raw, response)
            record, context = prompt_ids_of(result, context)
            assert record == PromptIds.encode(prompt, previous), (prompt, previous)
            unparsed += "prompt_token_ids" not in result.__dict__  # found from the bytes alone
            assert record is not None and record.decode(previous) == prompt
            previous = [*prompt, *response]
            conversation = previous
    assert unparsed > 300  # the byte-level path was taken (and agreed with the parsed delta every time)


def test_a_malformed_later_prompt_still_fails_its_step() -> None:
    _, context = prompt_ids_of(_chat(b"[1,2,3]", [4]), None)
    with pytest.raises(PolicyResponseError, match="not a JSON list"):
        prompt_ids_of(_chat(b"[1,2,3,4,,5]", [6]), context)
    record, nxt = prompt_ids_of(_chat([1, 2, 3, 4, 5], [6]), context)  # ids given as a list: the parsed path
    assert record == PromptIds(prefix=True, start=4, ids=(5,)) and nxt is not None and nxt.ids() == [1, 2, 3, 4, 5, 6]
    assert prompt_ids_of(_chat(b"[1,2,3,4,5,6,7]", None), nxt) == (PromptIds(True, 6, (7,)), None)


def test_the_shared_prefix_is_the_longest_one() -> None:
    rng = random.Random(3)
    for _ in range(500):
        context = [rng.randrange(3) for _ in range(rng.randrange(1, 40))]
        prompt = [rng.randrange(3) for _ in range(rng.randrange(0, 40))]
        shared = 0
        while shared < min(len(prompt), len(context)) and prompt[shared] == context[shared]:
            shared += 1
        got = PromptIds.encode(prompt, context)
        assert got.start == shared and got.prefix is (shared == len(context)) and got.decode(context) == prompt
    huge = 2**70  # not a token id, but an integer: kept, never overflowed
    assert PromptIds.encode([1, huge, 3], [1, huge, 4]) == PromptIds(prefix=False, start=2, ids=(3,))
