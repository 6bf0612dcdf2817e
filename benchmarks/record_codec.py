"""Encode and decode ``legato.rollout/v0`` records: their bytes (to compare two revisions) and their speed.

The records are made from a seed (every status, errors, prompt-id deltas, token ids, logprobs, records with
and without the optional fields), so two revisions encode the same records. Run::

    python benchmarks/record_codec.py --bytes /tmp/records-new.jsonl             # this checkout
    PYTHONPATH=/path/to/other/checkout python benchmarks/record_codec.py --bytes /tmp/records-old.jsonl
    cmp /tmp/records-old.jsonl /tmp/records-new.jsonl                               # identical bytes

    python benchmarks/record_codec.py --reencode RUN_DIR   # every line of RUN_DIR/rollouts.jsonl, decoded and
                                                           # encoded again, must give the same bytes

    python benchmarks/record_codec.py --against /path/to/other/checkout --rounds 7

``--against`` times the other checkout's record classes and this one's in the same process, round by round
(a copy of its ``legato_rl`` imported as ``legato_rl_other``): on a shared machine the load then falls on
both alike, where two processes one after the other can differ by 2x.

It prints one table: the least and the median over ``--rounds`` (the garbage collector off while timing) of
encoding ``--records`` records (``RolloutRecord.to_json`` and the store's JSON writer) and decoding them
(the JSON reader and ``RolloutRecord.from_json``), and of ``to_json`` and ``from_json`` alone: the part a
change of the record classes can change.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from legato_rl import _json
from legato_rl.store import (
    STATUSES,
    ActionRecord,
    ErrorInfo,
    ModelStats,
    PolicyStamp,
    PromptIds,
    RequestRef,
    Response,
    RolloutRecord,
    StepRecord,
    Timing,
)

_HEX = "0123456789abcdef"


def _sha(rng: random.Random) -> str:
    return "".join(rng.choice(_HEX) for _ in range(64))


def _step(rng: random.Random, index: int, tokens: int) -> StepRecord:
    with_ids = rng.random() < 0.8
    token_ids = tuple(rng.randrange(150_000) for _ in range(tokens)) if with_ids else None
    return StepRecord(
        index=index,
        started_at=1_700_000_000 + rng.random() * 1000,
        request=RequestRef(
            model="qwen" if rng.random() < 0.9 else None,
            messages=tuple(_sha(rng) for _ in range(1 + index)),
            sampling={"temperature": 1.0, "max_tokens": 512},
            extras={"logprobs": True, "return_token_ids": True},
            order=("model", "messages", "temperature", "max_tokens", "logprobs", "return_token_ids")
            if rng.random() < 0.1
            else None,
        ),
        prompt_ids=PromptIds(
            prefix=index > 0, start=index * tokens, ids=tuple(rng.randrange(150_000) for _ in range(tokens))
        )
        if with_ids
        else None,
        response=Response(
            content=f"Action: click {rng.randrange(1920)} {rng.randrange(1080)} é ✓",
            reasoning="thinking..." if rng.random() < 0.5 else None,
            token_ids=token_ids,
            logprobs=tuple(-rng.random() for _ in range(tokens)) if rng.random() < 0.9 else None,
            tokens=None if with_ids else tuple("tok" for _ in range(tokens)),
            finish_reason=rng.choice(("stop", "length", None)),
        ),
        model=ModelStats(
            seconds=rng.random() * 3,
            attempts=rng.choice((1, 1, 2)),
            prompt_tokens=rng.randrange(10_000),
            completion_tokens=tokens,
            cached_tokens=rng.choice((None, rng.randrange(10_000))),
            weight_version=rng.choice((None, "step-7")),
            policy_version=rng.choice((None, "step-7")),
        ),
        description="click the button",
        parse_error=rng.choice((None, None, "no Action: line")),
        actions=tuple(
            ActionRecord(
                action="pyautogui.click(10, 20)", act_s=rng.random(), wait_s=0.5, ready_s=rng.random(), obs_s=0.1
            )
            for _ in range(rng.randrange(3))
        ),
    )


def make_records(n: int, seed: int = 0, tokens: int = 40) -> list[RolloutRecord]:
    """``n`` records made from ``seed``: every status, 0-4 steps of ``tokens`` token ids each."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        status = STATUSES[i % len(STATUSES)]
        error = None
        if status in ("error", "retried"):
            error = ErrorInfo(rng.choice(("policy", "env")), "DesktopCrashed", "the desktop went away: ✗")
        elif status == "ok" and rng.random() < 0.05:
            error = ErrorInfo("agent", "AgentFault", "closed its own desktop")
        graded = status in ("ok", "truncated", "surplus")
        steps = tuple(_step(rng, k, tokens) for k in range(rng.randrange(5) if status != "skipped" else 0))
        records.append(
            RolloutRecord(
                rollout_id=f"g{i // 6:04d}-t/a{i % 6}/t0",
                task_id=f"task-{i // 6}",
                domain=rng.choice((None, "chrome", "fake")),
                group_id=f"g{i // 6:04d}-t",
                attempt=i % 6,
                try_index=rng.randrange(3),
                desktop=None if status == "skipped" else rng.randrange(8),
                policy=PolicyStamp("qwen", rng.choice((None, "step-7"))),
                status=status,
                reward=float(rng.random() < 0.5) if graded else None,
                grader=rng.choice(("fake", None)) if graded else None,
                error=error,
                timing=Timing(*(rng.random() for _ in range(9))),
                steps=steps,
                started_at=1_700_000_000 + i,
                ended_at=1_700_000_100 + i,
            )
        )
    return records


def _encode(records: list[RolloutRecord]) -> list[bytes]:
    return [_json.dumps(record.to_json()) + b"\n" for record in records]


def _decode(lines: list[bytes]) -> list[RolloutRecord]:
    return [RolloutRecord.from_json(_json.loads(line)) for line in lines]


def _to_json(records: list[RolloutRecord]) -> list[dict[str, Any]]:
    return [record.to_json() for record in records]


def _from_json(objects: list[dict[str, Any]]) -> list[RolloutRecord]:
    return [RolloutRecord.from_json(data) for data in objects]


def _timed(fn: Any, arg: Any, rounds: int) -> tuple[float, float, Any]:
    """The least and the median seconds of ``rounds`` calls, the garbage collector off in each (its pauses,
    set off by the other side's garbage, are the largest noise), and the last result."""
    times = []
    result = None
    for _ in range(rounds):
        result = None
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            result = fn(arg)
            times.append(time.perf_counter() - started)
        finally:
            gc.enable()
    return min(times), statistics.median(times), result


def _other_store(checkout: Path, into: Path) -> Any:
    """``legato_rl.store`` of another checkout, copied into ``into`` as ``legato_rl_other.store``."""
    import importlib
    import re
    import shutil

    package = into / "legato_rl_other"
    shutil.copytree(checkout / "legato_rl", package, ignore=shutil.ignore_patterns("__pycache__"))
    for path in package.rglob("*.py"):
        path.write_text(re.sub(r"\blegato_rl\b", "legato_rl_other", path.read_text()))
    sys.path.insert(0, str(into))
    return importlib.import_module("legato_rl_other.store")


def _against(checkout: Path, records: list[RolloutRecord], rounds: int) -> None:
    import tempfile

    lines = _encode(records)
    objects = [_json.loads(line) for line in lines]
    with tempfile.TemporaryDirectory() as tmp:
        other = _other_store(checkout, Path(tmp))
        theirs = [other.RolloutRecord.from_json(data) for data in objects]
        assert [_json.dumps(r.to_json()) + b"\n" for r in theirs] == lines, "the two checkouts write other bytes"
        sides = {
            "to_json": (lambda: [r.to_json() for r in theirs], lambda: [r.to_json() for r in records]),
            "from_json": (
                lambda: [other.RolloutRecord.from_json(d) for d in objects],
                lambda: [RolloutRecord.from_json(d) for d in objects],
            ),
        }
        times: dict[tuple[str, int], list[float]] = {(name, side): [] for name in sides for side in (0, 1)}
        for _ in range(rounds):
            for name, pair in sides.items():
                for side, fn in enumerate(pair):
                    times[name, side].append(_timed(lambda call: call(), fn, 1)[0])
    print(f"| {len(records)} records, {rounds} rounds alternating, ms (least / median) | other | this | this / other |")
    print("|---|---|---|---|")
    for name in sides:
        theirs_s, ours_s = times[name, 0], times[name, 1]
        figures = [f"{min(t) * 1000:.0f} / {statistics.median(t) * 1000:.0f}" for t in (theirs_s, ours_s)]
        ratio = statistics.median(ours_s) / statistics.median(theirs_s)
        print(f"| {name} | {figures[0]} | {figures[1]} | {ratio:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--tokens", type=int, default=40, help="token ids per step (response and prompt delta)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bytes", type=Path, help="write the encoded records to this file")
    parser.add_argument("--reencode", type=Path, help="check a run's records re-encode to their own bytes")
    parser.add_argument("--against", type=Path, help="time another checkout's record classes beside these")
    args = parser.parse_args(argv)
    if args.reencode is not None:
        lines = (args.reencode / "rollouts.jsonl").read_bytes().splitlines(keepends=True)
        same = sum(_encode(_decode([line]))[0] == line for line in lines)
        print(f"{same} of {len(lines)} records of {args.reencode} re-encode to their own bytes")
        return 0 if same == len(lines) else 1
    records = make_records(args.records, tokens=args.tokens)
    if args.against is not None:
        _against(args.against, records, args.rounds)
        return 0
    encode = _timed(_encode, records, args.rounds)
    lines = encode[2]
    decode = _timed(_decode, lines, args.rounds)
    assert _encode(decode[2]) == lines, "a record does not survive decoding and encoding"
    to_json = _timed(_to_json, records, args.rounds)
    from_json = _timed(_from_json, [_json.loads(line) for line in lines], args.rounds)
    if args.bytes is not None:
        args.bytes.write_bytes(b"".join(lines))
    size = sum(map(len, lines))
    print(f"| {args.records} records ({size / 2**20:.1f} MiB), ms | encode | decode | to_json | from_json |")
    print("|---|---|---|---|---|")
    for name, at in (("least", 0), ("median", 1)):
        figures = " | ".join(f"{timed[at] * 1000:.0f}" for timed in (encode, decode, to_json, from_json))
        print(f"| {name} of {args.rounds} | {figures} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
