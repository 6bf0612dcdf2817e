"""Encode and decode ``legato.rollout/v0`` records: their bytes (to compare two revisions) and their speed.

The records are made from a seed (every status, errors, prompt-id deltas, token ids, logprobs, records with
and without the optional fields), so two revisions encode the same records. Run::

    python benchmarks/record_codec.py --bytes /tmp/records-new.jsonl             # this checkout
    PYTHONPATH=/path/to/other/checkout python benchmarks/record_codec.py --bytes /tmp/records-old.jsonl
    cmp /tmp/records-old.jsonl /tmp/records-new.jsonl                               # identical bytes

    python benchmarks/record_codec.py --reencode RUN_DIR   # every line of RUN_DIR/rollouts.jsonl, decoded and
                                                           # encoded again, must give the same bytes

It prints one table: the median over ``--rounds`` of encoding (``RolloutRecord.to_json`` and the store's JSON
writer) and decoding (the JSON reader and ``RolloutRecord.from_json``) ``--records`` records.
"""

from __future__ import annotations

import argparse
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


def _timed(fn: Any, arg: Any, rounds: int) -> tuple[float, Any]:
    times = []
    result = None
    for _ in range(rounds):
        started = time.perf_counter()
        result = fn(arg)
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--tokens", type=int, default=40, help="token ids per step (response and prompt delta)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bytes", type=Path, help="write the encoded records to this file")
    parser.add_argument("--reencode", type=Path, help="check a run's records re-encode to their own bytes")
    args = parser.parse_args(argv)
    if args.reencode is not None:
        lines = (args.reencode / "rollouts.jsonl").read_bytes().splitlines(keepends=True)
        same = sum(_encode(_decode([line]))[0] == line for line in lines)
        print(f"{same} of {len(lines)} records of {args.reencode} re-encode to their own bytes")
        return 0 if same == len(lines) else 1
    records = make_records(args.records, tokens=args.tokens)
    encode_s, lines = _timed(_encode, records, args.rounds)
    decode_s, decoded = _timed(_decode, lines, args.rounds)
    assert _encode(decoded) == lines, "a record does not survive decoding and encoding"
    if args.bytes is not None:
        args.bytes.write_bytes(b"".join(lines))
    size = sum(map(len, lines))
    print(f"| {args.records} records ({size / 2**20:.1f} MiB) | encode ms | decode ms |")
    print("|---|---|---|")
    print(f"| median of {args.rounds} | {encode_s * 1000:.0f} | {decode_s * 1000:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
