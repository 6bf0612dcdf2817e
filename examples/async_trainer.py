"""An asynchronous trainer on legato's continuous collection: the desktops never wait for the update.

    python examples/async_trainer.py --updates 4 --desktops 4 --group 4 --batch 2 --update-s 2

The trainer takes GRPO groups as they complete (``legato_rl.follow.follow``, the blocking form: the collector
runs in a background thread while this thread "trains"), builds a batch from ``--batch`` groups (per-step
samples with their group advantage and the behaviour policy's per-token logprobs, which an importance-sampling
correction divides by), runs a stand-in update of ``--update-s`` seconds, then loads the new version: it labels
the weights on the policy server (SGLang's ``POST /update_weight_version``, which legato's reference server
answers) and tells legato (``run.set_version``), and goes on. The policy server here is legato's reference
server on loopback, whose scripted brain solves the fake tasks; point ``--policy-url`` at yours.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from legato_gym import DesktopConfig
from legato_gym.backends.fake import default_tasks
from legato_rl.follow import CompletedGroup, follow
from legato_rl.policy import PolicyConfig
from legato_rl.testing import ReferencePolicyServer


@dataclass
class Sample:
    """One policy step to train on: its response tokens, the behaviour logprobs, its advantage, its version."""

    token_ids: tuple[int, ...]
    behaviour_logprobs: tuple[float, ...]
    advantage: float
    version: str | None


def samples_of(group: CompletedGroup) -> list[Sample]:
    """The training samples of one group: one per step of each completed attempt."""
    advantages = group.advantages()
    return [
        Sample(step.response.token_ids or (), step.response.logprobs or (), advantages[record.rollout_id],
               step.model.policy_version)
        for record in group.completed
        for step in record.steps
    ]  # fmt: skip


def load_version(base_url: str, version: str) -> None:
    """Label the weights just loaded on the server (SGLang's endpoint; vLLM users relabel their own way)."""
    root = base_url.removesuffix("/v1")
    httpx.post(f"{root}/update_weight_version", json={"new_version": version}, timeout=10).raise_for_status()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--desktops", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2, help="groups per update")
    parser.add_argument("--update-s", type=float, default=2.0, help="seconds the stand-in update takes")
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="the run directory (default: a temporary one)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="legato-async-")) / "run"
    config = DesktopConfig(screen=(640, 480), options={"latency": {"act": 0.05, "reset": 0.1}})
    updates: list[dict[str, Any]] = []
    with ReferencePolicyServer(weight_version="step-0") as server:
        policy = PolicyConfig(server.url, server.model, version="step-0")
        with follow(
            default_tasks(config), policy, out=out, desktops=args.desktops, group=args.group, backend="fake",
            desktop=config, max_ready=args.batch, max_staleness=args.max_staleness, order="draw",
        ) as run:  # fmt: skip
            batch: list[CompletedGroup] = []
            for group in run:
                batch.append(group)
                if len(batch) < args.batch:
                    continue
                samples = [sample for g in batch for sample in samples_of(g)]
                time.sleep(args.update_s)  # the stand-in update: the desktops go on meanwhile
                version = f"step-{len(updates) + 1}"
                load_version(server.url, version)
                run.set_version(version)
                updates.append(
                    {"version": version, "groups": [g.group_id for g in batch], "samples": len(samples),
                     "staleness": [g.staleness for g in batch]}
                )  # fmt: skip
                print(f"{version}: {len(samples)} samples from {len(batch)} groups, staleness "
                      f"{[g.staleness for g in batch]}")  # fmt: skip
                batch = []
                if len(updates) == args.updates:
                    break
            summary = run.stop()
    figures = summary["follow"]
    print(f"{out}: versions {figures['versions']}, staleness {figures['staleness']}, "
          f"utilisation {figures['utilisation']}")  # fmt: skip
    return {"out": out, "updates": updates, "summary": summary}


if __name__ == "__main__":
    main()
