"""Shared helpers of the export and profile tests: runs built record by record, and a small real collect."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from legato_gym import DesktopConfig, Timeouts
from legato_gym.backends.fake import default_tasks
from legato_rl.collect import collect
from legato_rl.images import PNG_DATA_URL
from legato_rl.policy import PolicyConfig
from legato_rl.store import (
    ActionRecord,
    ErrorInfo,
    ModelStats,
    PolicyStamp,
    Response,
    RolloutRecord,
    RolloutStore,
    RunManifest,
    StepRecord,
    Timing,
    open_run,
)
from legato_rl.testing import ReferencePolicyServer, ScriptedSolver

SCREEN = (320, 240)


def png_url(shade: int, size: tuple[int, int] = (16, 12)) -> str:
    """A real one-colour PNG as a plain-string data URL (a distinct image per shade).

    A plain ``str``, as a body read from JSON holds, so that the store decodes it (the harnesses send a
    :class:`~legato_rl.images.PngDataURL`, whose bytes it takes as they are).
    """
    buffer = io.BytesIO()
    Image.new("RGB", size, (shade % 256, (shade * 7) % 256, 90)).save(buffer, format="PNG")
    return PNG_DATA_URL + base64.b64encode(buffer.getvalue()).decode("ascii")


@dataclass(frozen=True)
class Try:
    """One record to write: its group, status, reward, and where it ran.

    ``error`` is the record's error (default: a desktop crash for ``error`` and ``retried``); a policy error
    ends the try with a failed call of ``failed_call_s`` seconds instead of grading.
    """

    group: str
    status: str
    reward: float | None
    desktop: int | None = 0
    steps: int = 2
    token_ids: bool = True
    error: ErrorInfo | None = None
    failed_call_s: float = 0.0
    reset_kind: str | None = None


def write_run(
    run: Path,
    tries: Sequence[Try],
    *,
    version: str | None = "v3",
    group: int = 2,
    t0: float = 1_800_000_000.0,
    tokens: int = 3,
) -> list[RolloutRecord]:
    """A run written record by record with :class:`RolloutStore`: a growing prompt with one screenshot per step.

    Try ``i`` starts at ``t0 + 20 * i``: reset 1 s, then a step every 3.75 s (model 2 s, act 0.5 s, wait 1 s
    (ready 0.25 + fixed 0.75), obs 0.25 s), eval 0.5 s, and 0.5 s of scheduler time: ``2 + 3.75 * steps`` s.
    Each response has ``tokens`` token ids and logprobs.
    """
    open_run(
        run,
        RunManifest(
            tasks_sha256="0" * 64,
            n_tasks=len({t.group for t in tries}),
            group=group,
            oversample=0.0,
            policy_model="m",
            policy_version=version,
            max_steps=5,
            backend="fake",
        ),
    )
    records = []
    with RolloutStore(run) as store:
        for i, spec in enumerate(tries):
            start = t0 + 20.0 * i
            messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent."}]
            steps = []
            for k in range(spec.steps):
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": png_url(i * 10 + k)}},
                            {"type": "text", "text": f"Instruction: do {spec.group}. Step {k}"},
                        ],
                    }
                )
                body = {"model": "m", "messages": list(messages), "temperature": 1.0, "logprobs": True}
                ref = store.put_request(body)
                content = f"Action: step {k} of {i}"
                steps.append(
                    StepRecord(
                        index=k,
                        request=ref,
                        response=Response(
                            content=content,
                            reasoning=None if k % 2 else f"thinking {k}",
                            token_ids=tuple(i * 1000 + k * 100 + j for j in range(tokens)) if spec.token_ids else None,
                            logprobs=tuple(-0.25 * ((j + k) % 7) for j in range(tokens)),
                            tokens=None if spec.token_ids else tuple(f"t{j}" for j in range(tokens)),
                            finish_reason="stop",
                        ),
                        model=ModelStats(seconds=2.0, prompt_tokens=100, completion_tokens=tokens, cached_tokens=50),
                        actions=(
                            ActionRecord("pyautogui.click(1, 2)", act_s=0.5, wait_s=0.75, ready_s=0.25, obs_s=0.25),
                        ),
                        started_at=start + 1.0 + 3.75 * k,
                    )
                )
                messages.append({"role": "assistant", "content": content})
            n = spec.steps
            error = spec.error
            if error is None and spec.status in ("error", "retried"):
                error = ErrorInfo("env", "DesktopCrashed", "gone")
            policy_failed = error is not None and error.kind == "policy"
            eval_s = 0.0 if policy_failed else 0.5
            total = 2.0 + 3.75 * n + (spec.failed_call_s - 1.0 if policy_failed else 0.0)  # no eval, no slack
            record = RolloutRecord(
                rollout_id=f"{spec.group}/a{i}/t0",
                task_id=f"task-{spec.group}",
                domain="fake",
                group_id=spec.group,
                attempt=i,
                policy=PolicyStamp("m", version),
                status=spec.status,
                reward=spec.reward,
                error=error,
                desktop=spec.desktop,
                reset_kind=spec.reset_kind,
                timing=Timing(
                    reset_s=0.75,
                    wait_after_reset_s=0.25,
                    model_s=2.0 * n,
                    act_s=0.5 * n,
                    wait_s=1.0 * n,
                    obs_s=0.25 * n,
                    eval_s=eval_s,
                    total_s=total,
                ),
                steps=tuple(steps),
                started_at=start,
                ended_at=start + total,
            )
            store.append(record)
            records.append(record)
    return records


def collect_small_run(out: Path, *, version: str = "step-7") -> Path:
    """A real batch: 3 fake tasks x (2 + 1 oversampled) attempts on 2 desktops, scripted reference policy."""
    config = DesktopConfig(screen=SCREEN, timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10))
    with ReferencePolicyServer(brain=ScriptedSolver()) as server:
        collect(
            default_tasks(config)[:3],
            PolicyConfig(server.url, server.model, version=version),
            out=out,
            desktops=2,
            group=2,
            oversample=0.5,
            max_steps=6,
            backend="fake",
            desktop=config,
        )
    return out
