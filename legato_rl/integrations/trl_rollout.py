"""TRL 1.16's ``rollout_func``: whole legato episodes as the policy server's token ids.

:class:`LegatoRollout` is the ``rollout_func``, :func:`env_reward` its reward function and
:func:`policy_from_trainer` the trainer's vLLM server as a :class:`~legato_rl.policy.PolicyConfig`; the
overview of both TRL paths is in :mod:`legato_rl.integrations.trl` (import from there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from legato_gym import ConfigError, DesktopConfig, Task
from legato_rl.collect import CollectOptions
from legato_rl.harness import Harness, QwenHarness
from legato_rl.integrations.sequence import Trajectory, play_sequences
from legato_rl.integrations.trl_tasks import TaskIndex
from legato_rl.policy import PolicyClient, PolicyConfig, Sampling

__all__ = ["LegatoRollout", "env_reward", "policy_from_trainer"]


class LegatoRollout:
    """A ``rollout_func`` for TRL's GRPOTrainer: one legato desktop episode per prompt, as the server's tokens.

    TRL calls it with the prompts of one generation batch (TRL 1.16 passes each prompt ``num_generations``
    times in a row, although its docstring says "no duplication") and wants one completion per prompt it
    passed. Each prompt's last user message is a task's instruction
    (:func:`~legato_rl.integrations.trl_tasks.task_dataset`); the episode is played with legato's attempt
    loop and harness on a desktop of a vector env kept up between calls, and becomes the sequence of
    :mod:`legato_rl.integrations.sequence` (``env_mask`` 0 on env tokens).

    Args:
        tasks: the tasks the dataset's prompts name (by instruction).
        policy: the policy server; ``None`` asks the trainer's vLLM server (``use_vllm=True``, server mode).
        backend: the desktop backend (``fake``, ``local``, ``osworld``).
        desktops: desktops played at once (worker processes, kept up between calls).
        max_steps: policy calls per episode.
        desktop: how to build the desktops.
        harness: the prompt format (OSWorld's Qwen3-VL computer-use format by default). Keep ``image_max``
            above ``max_steps`` so an episode stays one token sequence.
        max_tokens: completion budget (TRL's ``max_completion_length``); longer episodes lose whole trailing
            turns (:meth:`~legato_rl.integrations.sequence.Trajectory.cut`).
        env_retries: plays of an episode again on another desktop after a desktop failure.

    Raises:
        ConfigError: two tasks share an instruction.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        policy: PolicyConfig | None = None,
        *,
        backend: str = "fake",
        desktops: int = CollectOptions.desktops,
        max_steps: int = CollectOptions.max_steps,
        desktop: DesktopConfig | None = None,
        harness: Harness | None = None,
        max_tokens: int | None = None,
        env_retries: int = CollectOptions.env_retries,
    ) -> None:
        from legato_gym.vector import DesktopVectorEnv

        self.tasks = TaskIndex(tasks)
        if self.tasks.shared:
            raise ConfigError(
                f"several tasks share the instruction {sorted(self.tasks.shared)[0][:80]!r}; the rollout finds "
                "tasks by instruction, so instructions must be unique"
            )
        self.policy = policy
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.env_retries = env_retries
        self.harness = harness or QwenHarness(image_max=max_steps + 1)
        self.env = DesktopVectorEnv(desktops, backend, desktop, max_steps=max_steps, tasks=list(tasks))
        self.calls = 0
        self.last: list[Trajectory] = []

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """Play one episode per prompt; returns TRL's ``rollout_func`` fields and ``env_reward``/``num_turns``."""
        tasks = [self.tasks.from_prompt(prompt) for prompt in prompts]
        policy = self.policy or policy_from_trainer(trainer)
        self.calls += 1
        trajectories = asyncio.run(self._play(tasks, policy))
        self.last = trajectories
        return {
            "prompt_ids": [t.prompt_ids for t in trajectories],
            "completion_ids": [t.completion_ids for t in trajectories],
            "logprobs": [t.logprobs for t in trajectories],
            "env_mask": [t.completion_mask for t in trajectories],
            # extra keys reach the reward functions as keyword arguments, one value per completion
            "env_reward": [t.reward for t in trajectories],
            "num_turns": [t.num_turns for t in trajectories],
        }

    async def _play(self, tasks: Sequence[Task], policy: PolicyConfig) -> list[Trajectory]:
        async with PolicyClient(policy) as client:
            return await play_sequences(
                self.env, client, self.harness, tasks, max_steps=self.max_steps, env_retries=self.env_retries,
                tag=f"trl{self.calls}", max_tokens=self.max_tokens,
            )  # fmt: skip

    def close(self) -> None:
        """Stop the desktops. Idempotent."""
        self.env.close()


def env_reward(completions: list[Any], env_reward: list[float], **kwargs: Any) -> list[float | None]:
    """The ``rollout_func`` path's reward function: the desktop's grade of each episode (``env_reward`` key)."""
    return [float(r) for r in env_reward]


def policy_from_trainer(trainer: Any) -> PolicyConfig:
    """The OpenAI-compatible URL and model of the trainer's vLLM server (``use_vllm=True``, server mode).

    Raises:
        ConfigError: the trainer does not run vLLM in server mode (colocated vLLM lives in the trainer's
            process and has no URL legato could call: give the rollout a ``PolicyConfig``, or use
            :class:`~legato_rl.integrations.trl_environment.DesktopEnvironments`, where TRL generates
            itself).
    """
    args = trainer.args
    if not getattr(args, "use_vllm", False) or getattr(args, "vllm_mode", "") != "server":
        mode = getattr(args, "vllm_mode", None) if getattr(args, "use_vllm", False) else "no vLLM"
        raise ConfigError(
            f"the trainer runs {mode!r}, which serves no URL for legato to call; give the rollout a PolicyConfig, "
            "train with use_vllm=True, vllm_mode='server', or use environment_factory=DesktopEnvironments(...)"
        )
    base = args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"
    client = trainer.vllm_generation.vllm_client
    return PolicyConfig(
        f"{base.rstrip('/')}/v1",
        client.model,
        version=f"step-{trainer.state.global_step}",
        sampling=Sampling(temperature=float(args.temperature), top_p=float(args.top_p)),
    )
