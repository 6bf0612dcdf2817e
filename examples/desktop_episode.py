"""One desktop episode through legato, as the token sequence a trainer trains on.

Shared by ``trl_rollout_func.py`` and ``verl_agent_loop.py`` (not a script of its own). An episode is
played exactly as ``legato rl collect`` plays it: a desktop of a legato vector env, the Qwen computer-use
harness, and the policy client asking an OpenAI-compatible server (vLLM, SGLang, or legato's reference
server) for each reply. What comes back is one multi-turn sequence built only from the SERVER's token ids::

    prompt_ids      = the first call's prompt_token_ids
    completion_ids  = reply 1 | env tokens | reply 2 | env tokens | ... | reply n
    completion_mask =    1    |     0      |    1    |     0      | ... |    1
    logprobs        = server  |    0.0     | server  |    0.0     | ... | server

The env tokens between two replies are the next call's ``prompt_token_ids`` minus everything already in
the sequence (the previous prompt and reply): the closing tokens of the reply, the new user turn and its
screenshot placeholders. This works because legato's harness only ever appends to the prompt while fewer
than ``image_max`` screenshots have been sent; an episode longer than that rewrites its prompt, and
:func:`play_episode` refuses it rather than splice re-tokenized text into the sequence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from legato_gym import ConfigError, DesktopError, Task
from legato_gym.vector import DesktopVectorEnv
from legato_rl.errors import PolicyResponseError
from legato_rl.harness import Harness
from legato_rl.policy import ChatResult, PolicyClient

__all__ = ["Trajectory", "agent_loop_fields", "episode_summary", "play_episode", "play_episodes"]


@dataclass
class Trajectory:
    """One graded episode as tokens.

    Attributes:
        task_id: the task played.
        prompt_ids: the first policy call's prompt, as the server tokenized it.
        completion_ids: every later token: the replies (mask 1) and the env turns between them (mask 0).
        completion_mask: 1 for a token the model sampled, 0 for an env token.
        logprobs: the server's logprob of each sampled token; 0.0 for env tokens.
        reward: the task's grade, in [0, 1].
        num_turns: policy calls made.
        screenshots: every screenshot sent to the policy, in order (for trainers that feed images).
        replies: the reply texts.
    """

    task_id: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    num_turns: int = 0
    screenshots: list[npt.NDArray[np.uint8]] = field(default_factory=list, repr=False)
    replies: list[str] = field(default_factory=list, repr=False)

    def add_reply(self, result: ChatResult) -> None:
        """Append one policy reply (prompt delta as env tokens, then the sampled tokens)."""
        if result.token_ids is None or result.prompt_token_ids is None:
            raise PolicyResponseError(
                f"{result.url}: the server returned no token ids; a trainer needs the server's own ids. Serve with "
                "vLLM >= 0.10.2 (return_token_ids) or SGLang",
                url=result.url,
            )
        if result.logprobs is None or len(result.logprobs) != len(result.token_ids):
            raise PolicyResponseError(
                f"{result.url}: expected one logprob per generated token ({len(result.token_ids)}), got "
                f"{None if result.logprobs is None else len(result.logprobs)}; do not run a reasoning parser "
                "with include_reasoning=false",
                url=result.url,
            )
        if not self.prompt_ids:
            self.prompt_ids = list(result.prompt_token_ids)
        else:
            so_far = self.prompt_ids + self.completion_ids
            new = result.prompt_token_ids
            if new[: len(so_far)] != so_far:
                raise ConfigError(
                    f"task {self.task_id!r}, turn {self.num_turns + 1}: the new prompt does not extend the previous "
                    "prompt and reply, so the episode is not one token sequence. Keep every screenshot in the "
                    "prompt (image_max > max_steps) and use a chat template that keeps earlier replies verbatim"
                )
            env_tokens = new[len(so_far) :]
            self.completion_ids += env_tokens
            self.completion_mask += [0] * len(env_tokens)
            self.logprobs += [0.0] * len(env_tokens)
        self.completion_ids += result.token_ids
        self.completion_mask += [1] * len(result.token_ids)
        self.logprobs += result.logprobs
        self.num_turns += 1
        self.replies.append(result.content)


async def play_episode(
    env: DesktopVectorEnv,
    env_id: int,
    client: PolicyClient,
    harness: Harness,
    task: Task,
    *,
    max_steps: int,
    rollout_id: str,
) -> Trajectory:
    """Play ``task`` on desktop ``env_id`` until the agent ends it or ``max_steps`` calls were made; grade it.

    Raises:
        DesktopError: the desktop failed (its worker is replaced; play the task again elsewhere).
        PolicyError: the policy call failed after the client's retries, or returned no token ids.
        ConfigError: the prompt was rewritten mid-episode (see the module docstring).
    """
    obs, _ = await env.areset(env_id, task)
    conversation = harness.start(task.instruction, env.config.screen)
    trajectory = Trajectory(task.task_id)
    try:
        for _ in range(max_steps):
            messages = await asyncio.to_thread(conversation.messages, obs["screenshot"])
            trajectory.screenshots.append(obs["screenshot"])
            result = await client.chat(messages, rollout_id=rollout_id)
            trajectory.add_reply(result)
            reply = conversation.record_reply(result.content)
            for action in reply.actions:
                obs, reward, terminated, truncated, _ = await env.astep(env_id, action)
                if terminated or truncated:
                    trajectory.reward = float(reward)
                    return trajectory
            if reply.give_up:
                break
        trajectory.reward, _ = await env.atruncate(env_id)  # step limit or give-up: grade as it stands
        return trajectory
    finally:
        client.forget(rollout_id)


async def play_episodes(
    env: DesktopVectorEnv,
    client: PolicyClient,
    harness: Harness,
    tasks: Sequence[Task],
    *,
    max_steps: int,
    env_retries: int = 1,
    tag: str = "episode",
) -> list[Trajectory]:
    """Play every task in ``tasks`` (repeats allowed) on the env's desktops, each desktop taking the next one.

    A desktop failure (never the agent's) plays the episode again, up to ``env_retries`` times; the vector
    env replaces the failed worker meanwhile. Returns the trajectories in the order of ``tasks``.
    """
    queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    for index in range(len(tasks)):
        queue.put_nowait((index, 0))
    results: dict[int, Trajectory] = {}

    async def desktop(env_id: int) -> None:
        while not queue.empty():
            index, tries = queue.get_nowait()
            try:
                results[index] = await play_episode(
                    env, env_id, client, harness, tasks[index], max_steps=max_steps, rollout_id=f"{tag}-{index}"
                )
            except DesktopError:
                if tries >= env_retries:
                    raise
                queue.put_nowait((index, tries + 1))

    await asyncio.gather(*(desktop(i) for i in range(min(env.num_envs, len(tasks)))))
    return [results[i] for i in range(len(tasks))]


def episode_summary(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """Mean reward, turns and token counts, for logging."""
    n = max(1, len(trajectories))
    return {
        "episodes": len(trajectories),
        "reward_mean": sum(t.reward for t in trajectories) / n,
        "turns_mean": sum(t.num_turns for t in trajectories) / n,
        "model_tokens": sum(sum(t.completion_mask) for t in trajectories),
        "env_tokens": sum(len(t.completion_mask) - sum(t.completion_mask) for t in trajectories),
    }


def agent_loop_fields(trajectory: Trajectory, response_length: int | None = None) -> dict[str, Any]:
    """The fields of verl's ``AgentLoopOutput`` for one episode (verl 0.9.1), cut to ``response_length``.

    ``response_ids`` holds the replies and the env tokens between them, ``response_mask`` is 1 on the
    replies' tokens only, ``response_logprobs`` are the server's (verl's ``rollout_log_probs``), and
    ``multi_modal_data["images"]`` holds every screenshot the policy saw, as PIL images, in prompt order:
    verl runs its processor over them to rebuild the pixel inputs for the training forward pass.
    """
    from PIL import Image

    cut = len(trajectory.completion_ids) if response_length is None else response_length
    return {
        "prompt_ids": list(trajectory.prompt_ids),
        "response_ids": trajectory.completion_ids[:cut],
        "response_mask": trajectory.completion_mask[:cut],
        "response_logprobs": trajectory.logprobs[:cut],
        "multi_modal_data": {"images": [Image.fromarray(s) for s in trajectory.screenshots]},
        "reward_score": trajectory.reward,
        "num_turns": 2 * trajectory.num_turns,  # verl counts user and assistant turns
    }
