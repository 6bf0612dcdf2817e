"""examples/trl_rollout_func.py: the rollout hands TRL the server's ids, and GRPOTrainer trains on it (CPU).

The trainer test needs ``trl`` (and torch, transformers, datasets, tokenizers): ``pip install torch==2.13.0``
then ``pip install -e '.[examples]'``. The model is built here, offline: ``examples/tiny_qwen.py``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from legato_gym import DesktopConfig, resolve_backend
from legato_rl.policy import PolicyConfig
from legato_rl.testing import ReferencePolicyServer, Reply, ScriptedSolver, prompt_step_index, qwen_reply
from legato_rl.testing.tokenizer import IM_END, ToyTokenizer

DESKTOP = DesktopConfig(screen=(320, 240))  # small screenshots: 80 image tokens each
TASKS = resolve_backend("fake").default_tasks(DESKTOP)


class EveryOtherFails:
    """The scripted solver, except that every second episode gives up at its first step (reward 0)."""

    def __init__(self) -> None:
        self.solver = ScriptedSolver()
        self.episodes = itertools.count()
        self.lock = threading.Lock()

    def respond(self, messages: Sequence[Mapping[str, Any]]) -> Reply:
        if prompt_step_index(messages) == 0:
            with self.lock:
                fail = next(self.episodes) % 2 == 1
            if fail:
                return Reply(qwen_reply("Give up.", [{"action": "terminate", "status": "failure"}]))
        return self.solver.respond(messages)


@pytest.fixture
def server() -> Iterator[ReferencePolicyServer]:
    with ReferencePolicyServer(brain=EveryOtherFails()) as running:
        yield running


def _chats(server: ReferencePolicyServer) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if r.path.endswith("/chat/completions") and r.status == 200]


def test_rollout_returns_the_servers_token_ids_as_one_multi_turn_sequence(server: ReferencePolicyServer) -> None:
    from trl_rollout_func import LegatoRollout, env_reward

    task = next(t for t in TASKS if t.task_id == "fake-type-banana")  # several turns: click, type, enter, done
    rollout = LegatoRollout(TASKS, PolicyConfig(server.url, server.model), desktops=1, max_steps=8, desktop=DESKTOP)
    try:
        out = rollout([[{"role": "user", "content": task.instruction}]] * 2, trainer=None)
    finally:
        rollout.close()

    assert set(out) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward", "num_turns"}
    assert out["env_reward"] == [1.0, 0.0]  # desktop 0 plays the episodes in order: solved, then given up
    assert env_reward(completions=[], env_reward=out["env_reward"]) == [1.0, 0.0]
    assert out["num_turns"][0] >= 3 and out["num_turns"][1] == 1

    # Rebuild what the server tokenized and generated from the requests it received (its toy tokenizer is
    # deterministic): the first episode's calls are the first num_turns requests.
    toy = ToyTokenizer()
    calls = _chats(server)[: out["num_turns"][0]]
    replies = [[*toy.encode(rollout_reply), IM_END] for rollout_reply in _replies(calls, rollout.last[0].replies)]
    prompt, completion, mask, logprobs = (out[k][0] for k in ("prompt_ids", "completion_ids", "env_mask", "logprobs"))
    assert prompt == toy.prompt(calls[0]["messages"]).ids
    assert len(completion) == len(mask) == len(logprobs)
    model_tokens = [token for token, m in zip(completion, mask, strict=True) if m == 1]
    assert model_tokens == [token for reply in replies for token in reply]
    # prompt + completion is exactly the last call's prompt followed by its reply: no re-tokenized text
    assert prompt + completion == toy.prompt(calls[-1]["messages"]).ids + replies[-1]
    assert 0 < sum(mask) < len(mask)  # env turns (new screenshots) are in the sequence, masked out
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if m == 0)
    # the server's logprobs on reply tokens, not placeholders
    assert all(lp < 0.0 for lp, m in zip(logprobs, mask, strict=True) if m == 1)


def _replies(calls: list[dict[str, Any]], replies: list[str]) -> list[str]:
    # each later request carries the previous reply verbatim; the last reply is only in the rollout
    carried = [m["content"][0]["text"] for m in calls[-1]["messages"] if m["role"] == "assistant"]
    assert carried == replies[:-1]
    return replies


@pytest.mark.slow
def test_grpo_trainer_takes_optimizer_steps_on_legato_episodes(
    server: ReferencePolicyServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch", reason="needs torch: pip install torch==2.13.0, then pip install -e '.[examples]'")
    pytest.importorskip("trl", reason="needs TRL 1.16: pip install -e '.[examples]'")
    import torch
    from tiny_qwen import build_tiny_qwen
    from trl_rollout_func import LegatoRollout, build_trainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    model = build_tiny_qwen(tmp_path / "tiny-qwen")
    rollout = LegatoRollout(TASKS, PolicyConfig(server.url, server.model), desktops=2, max_steps=6, desktop=DESKTOP)
    try:
        trainer = build_trainer(
            str(model), rollout, TASKS, output_dir=str(tmp_path / "out"), steps=2, num_generations=2,
            learning_rate=1e-2, disable_tqdm=True,
        )  # fmt: skip
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        trainer.train()
    finally:
        rollout.close()

    assert trainer.state.global_step == 2
    assert rollout.calls == 2  # one rollout per optimizer step (one generation batch each)
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert len(logs) == 2
    # every group of two holds one solved and one abandoned episode, so GRPO has a signal to follow
    assert all(entry["reward_std"] > 0 for entry in logs)
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed, "no parameter moved: the rollout's completions produced no gradient"
