"""One desktop episode as the multi-turn token sequence a trainer trains on, built from the server's ids.

An episode is played by :func:`legato_rl.rollout.play`, exactly as ``legato rl collect`` plays it; each
reply is appended to a :class:`Trajectory`::

    prompt_ids      = the first call's prompt_token_ids
    completion_ids  = reply 1 | env tokens | reply 2 | env tokens | ... | reply n
    completion_mask =    1    |     0      |    1    |     0      | ... |    1
    logprobs        = server  |    0.0     | server  |    0.0     | ... | server

The env tokens between two replies are the next call's ``prompt_token_ids`` minus everything already in
the sequence (the previous prompt and reply): the closing tokens of the reply, the new user turn and its
screenshot placeholders. This works because legato's harness only ever appends to the prompt while fewer
than ``image_max`` screenshots have been sent; an episode longer than that rewrites its prompt, and
:meth:`Trajectory.add_reply` refuses it rather than splice re-tokenized text into the sequence.

A *turn* is the env tokens before a reply and the reply (turn 1: the reply alone, its user turn is the
prompt). Turn ``i`` brings screenshot ``i`` (turn 1's is in the prompt), so :meth:`Trajectory.cut` keeps
tokens and screenshots aligned by dropping whole trailing turns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from legato_gym import ConfigError, DesktopError, Task
from legato_gym.vector import DesktopVectorEnv
from legato_rl.errors import PolicyResponseError
from legato_rl.harness import Harness
from legato_rl.policy import ChatResult
from legato_rl.rollout import InlineWhileCheap, Policy, Try, TryStep, play

__all__ = ["Trajectory", "episode_summary", "play_sequence", "play_sequences"]

log = logging.getLogger(__name__)


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
        num_turns: policy calls (replies) in the sequence.
        turn_ends: ``len(completion_ids)`` after each reply: where each turn ends.
        weight_versions: the weight version the server reported for each reply (``None``: not reported).
        status: how the episode ended (``ok``, ``truncated``: see :mod:`legato_rl.rollout`).
        truncated: whole trailing turns were dropped by :meth:`cut` (the episode itself went on).
        screenshots: the screenshot of each turn, in order (for trainers that feed images).
        replies: the reply texts.
    """

    task_id: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    num_turns: int = 0
    turn_ends: list[int] = field(default_factory=list)
    weight_versions: list[str | None] = field(default_factory=list)
    status: str = "ok"
    truncated: bool = False
    screenshots: list[npt.NDArray[np.uint8]] = field(default_factory=list, repr=False)
    replies: list[str] = field(default_factory=list, repr=False)

    def add_reply(self, result: ChatResult, screenshot: npt.NDArray[np.uint8] | None = None) -> None:
        """Append one policy reply: the prompt's new tokens as env tokens, then the sampled tokens.

        Args:
            result: the reply.
            screenshot: the screenshot the prompt showed (kept in :attr:`screenshots`).

        Raises:
            PolicyResponseError: the server returned no token ids, or not one logprob per token.
            ConfigError: the new prompt does not extend the sequence so far (see the module docstring).
        """
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
        if not self.num_turns:
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
        self.turn_ends.append(len(self.completion_ids))
        self.weight_versions.append(result.weight_version)
        self.replies.append(result.content)
        if screenshot is not None:
            self.screenshots.append(screenshot)

    def cut(self, max_tokens: int) -> Trajectory:
        """This trajectory with at most ``max_tokens`` completion tokens, never cut inside a turn.

        Whole trailing turns are dropped, each with its screenshot, so the image placeholders in the tokens
        and :attr:`screenshots` stay one to one; the result is marked :attr:`truncated`. Only when the first
        reply alone is longer than ``max_tokens`` is that reply cut (a reply holds no image, so the prompt's
        screenshot still matches). The reward stays the episode's grade.

        Raises:
            ConfigError: ``max_tokens`` is below 1.
        """
        if max_tokens < 1:
            raise ConfigError(f"max_tokens={max_tokens!r}: a response budget must be at least 1 token")
        if len(self.completion_ids) <= max_tokens:
            return self
        kept = sum(1 for end in self.turn_ends if end <= max_tokens)
        end = self.turn_ends[kept - 1] if kept else max_tokens
        turns = max(kept, 1)
        return replace(
            self,
            completion_ids=self.completion_ids[:end],
            completion_mask=self.completion_mask[:end],
            logprobs=self.logprobs[:end],
            num_turns=turns,
            turn_ends=[*self.turn_ends[:kept]] if kept else [end],
            weight_versions=self.weight_versions[:turns],
            truncated=True,
            screenshots=self.screenshots[:turns],
            replies=self.replies[:turns],
        )


async def play_sequence(
    env: DesktopVectorEnv,
    env_id: int,
    policy: Policy,
    harness: Harness,
    task: Task,
    *,
    max_steps: int,
    rollout_id: str,
    max_tokens: int | None = None,
    rollout_timeout: float | None = None,
    build_prompt: InlineWhileCheap | None = None,
) -> Trajectory:
    """Play ``task`` on desktop ``env_id`` with :func:`legato_rl.rollout.play` and return it as tokens.

    Args:
        env: the desktops (keep the default ``copy=True``: the trajectory keeps every screenshot).
        env_id: the desktop to play on.
        policy: the policy (an HTTP :class:`~legato_rl.policy.PolicyClient`, or a trainer's adapter).
        harness: the prompt format; keep its ``image_max`` above ``max_steps``.
        task: the task.
        max_steps: policy calls at most.
        rollout_id: the attempt's id.
        max_tokens: stop playing (and grade, status ``truncated``) once the completion holds this many tokens:
            a trainer's response budget, so no step is played that :meth:`Trajectory.cut` would drop.
        rollout_timeout: wall-clock seconds for the episode.
        build_prompt: shared between episodes (see :class:`~legato_rl.rollout.InlineWhileCheap`).

    Raises:
        DesktopError: the desktop failed (its worker is replaced; play the task again elsewhere).
        PolicyError: the policy call failed after its retries, or returned no token ids.
        ConfigError: the prompt was rewritten mid-episode (see the module docstring).
    """
    trajectory = Trajectory(task.task_id)

    async def on_step(step: TryStep) -> None:
        trajectory.add_reply(step.result, step.screenshot)

    def exhausted() -> bool:
        return max_tokens is not None and len(trajectory.completion_ids) >= max_tokens

    episode: Try = await play(
        env, env_id, task, policy, harness, rollout_id=rollout_id, max_steps=max_steps,
        rollout_timeout=rollout_timeout, on_step=on_step, exhausted=exhausted, build_prompt=build_prompt,
    )  # fmt: skip
    trajectory.reward = 0.0 if episode.reward is None else episode.reward
    trajectory.status = "ok" if episode.status is None else episode.status.value
    return trajectory


async def play_sequences(
    env: DesktopVectorEnv,
    policy: Policy,
    harness: Harness,
    tasks: Sequence[Task],
    *,
    max_steps: int,
    env_retries: int = 1,
    tag: str = "episode",
    max_tokens: int | None = None,
) -> list[Trajectory]:
    """Play every task in ``tasks`` (repeats allowed) on the env's desktops, each desktop taking the next one.

    A desktop failure (never the agent's) plays the episode again, up to ``env_retries`` times; the vector
    env replaces the failed worker meanwhile. Returns the trajectories in the order of ``tasks``.

    Raises:
        DesktopError: an episode's desktop failed more than ``env_retries`` times.
        PolicyError, ConfigError: as :func:`play_sequence`.
    """
    queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    for index in range(len(tasks)):
        queue.put_nowait((index, 0))
    results: dict[int, Trajectory] = {}
    build_prompt = InlineWhileCheap("building a prompt")

    async def desktop(env_id: int) -> None:
        while not queue.empty():
            index, tries = queue.get_nowait()
            try:
                results[index] = await play_sequence(
                    env, env_id, policy, harness, tasks[index], max_steps=max_steps,
                    rollout_id=f"{tag}-{index}", max_tokens=max_tokens, build_prompt=build_prompt,
                )  # fmt: skip
            except DesktopError as exc:
                if tries >= env_retries:
                    raise
                log.warning("%s-%d: desktop %d failed (%s); playing it again", tag, index, env_id, exc)
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
