"""TRL: GRPO on desktop episodes that legato plays, through TRL 1.16's ``rollout_func``.

    # On a CPU, no download: a tiny random model and legato's reference policy server on loopback
    python examples/trl_rollout_func.py --model tiny --policy-url embedded --steps 3

    # With TRL's vLLM server (weights synced by TRL before every rollout; run the server as TRL's docs say)
    python examples/trl_rollout_func.py --model Qwen/Qwen2.5-VL-3B-Instruct --vllm-url http://127.0.0.1:8000

Each GRPO completion is one whole episode on a legato desktop (see ``desktop_episode.py``): the first
prompt as the server tokenized it, then every reply and the env turns between them, with ``env_mask``
marking the env tokens so that only the model's own tokens are trained, and the server's logprobs for
TRL's importance-sampling correction. The reward is the desktop's grade, passed to the reward function
as the extra column ``env_reward``.

TRL calls ``rollout_func(prompts, trainer)`` with the prompts of its batch, each repeated
``num_generations`` times in a row (the docstring says "no duplication", the 1.16 code passes the
RepeatSampler's rows), and wants one completion per prompt. TRL hands over the prompts only, so the
dataset's prompt is the task's instruction and the rollout finds the task by it.

Limit of TRL 1.16: on the ``rollout_func`` path, screenshots reach the policy server but not TRL's own
training forward pass (only dataset images do). A VLM is then trained on image placeholder tokens
without their pixels. For image-conditioned training use verl (``verl_agent_loop.py``) or TRL's
``environment_factory`` with tools that return images.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from desktop_episode import Trajectory, episode_summary, play_episodes

from legato_gym import ConfigError, DesktopConfig, Task, get_backend
from legato_gym.vector import DesktopVectorEnv
from legato_rl.harness import Harness, QwenHarness
from legato_rl.policy import PolicyClient, PolicyConfig

__all__ = ["LegatoRollout", "env_reward", "policy_from_trainer", "task_dataset"]


class LegatoRollout:
    """A ``rollout_func`` for TRL's GRPOTrainer: one legato desktop episode per prompt.

    Args:
        tasks: the tasks the dataset's prompts name (by instruction).
        policy: the policy server; ``None`` asks the trainer's vLLM server (``use_vllm=True``, server mode).
        backend: the desktop backend (``fake``, ``local``, ``osworld``).
        desktops: desktops played at once (worker processes, kept up between calls).
        max_steps: policy calls per episode.
        desktop: how to build the desktops.
        harness: the prompt format (OSWorld's Qwen3-VL computer-use format by default). Keep ``image_max``
            above ``max_steps`` so an episode stays one token sequence.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        policy: PolicyConfig | None = None,
        *,
        backend: str = "fake",
        desktops: int = 4,
        max_steps: int = 15,
        desktop: DesktopConfig | None = None,
        harness: Harness | None = None,
    ) -> None:
        self.by_instruction: dict[str, Task] = {}
        for task in tasks:
            if task.instruction in self.by_instruction:
                raise ConfigError(
                    f"tasks {self.by_instruction[task.instruction].task_id!r} and {task.task_id!r} "
                    "share an instruction; the rollout finds tasks by instruction"
                )
            self.by_instruction[task.instruction] = task
        self.policy = policy
        self.max_steps = max_steps
        self.harness = harness or QwenHarness(image_max=max_steps + 1)
        self.env = DesktopVectorEnv(desktops, backend, desktop, max_steps=max_steps, tasks=list(tasks))
        self.calls = 0
        self.last: list[Trajectory] = []

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        tasks = [self._task(prompt) for prompt in prompts]
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
            return await play_episodes(
                self.env, client, self.harness, tasks, max_steps=self.max_steps, tag=f"trl{self.calls}"
            )

    def _task(self, prompt: Any) -> Task:
        text = _last_user_text(prompt)
        task = self.by_instruction.get(text.strip())
        if task is None:
            raise ConfigError(
                f"no task has the instruction {text[:80]!r}; make each prompt a task's instruction (see task_dataset)"
            )
        return task

    def close(self) -> None:
        """Stop the desktops. Idempotent."""
        self.env.close()


def _last_user_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    for message in reversed(list(prompt)):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return "".join(part.get("text", "") for part in content if part.get("type") == "text")
    raise ConfigError(f"prompt {str(prompt)[:80]!r} has no user message")


def env_reward(completions: list[Any], env_reward: list[float], **kwargs: Any) -> list[float | None]:
    """The reward function: the desktop's grade of each episode (from the rollout's ``env_reward`` key)."""
    return [float(r) for r in env_reward]


def task_dataset(tasks: Sequence[Task], repeat: int = 1) -> Any:
    """A ``datasets.Dataset`` with one conversational prompt (the task's instruction) per task."""
    from datasets import Dataset

    rows = [{"prompt": [{"role": "user", "content": t.instruction}], "task_id": t.task_id} for t in tasks]
    return Dataset.from_list(rows * repeat)


def policy_from_trainer(trainer: Any) -> PolicyConfig:
    """The OpenAI-compatible URL and model of the trainer's vLLM server (``use_vllm=True``, server mode)."""
    args = trainer.args
    if not getattr(args, "use_vllm", False) or getattr(args, "vllm_mode", "") != "server":
        raise ConfigError("give LegatoRollout a PolicyConfig, or train with use_vllm=True, vllm_mode='server'")
    base = args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"
    client = trainer.vllm_generation.vllm_client
    return PolicyConfig(
        f"{base.rstrip('/')}/v1",
        client.model,
        version=f"step-{trainer.state.global_step}",
        temperature=float(args.temperature),
        top_p=float(args.top_p),
    )


def build_trainer(
    model: str,
    rollout: LegatoRollout,
    tasks: Sequence[Task],
    *,
    output_dir: str,
    steps: int,
    num_generations: int = 2,
    vllm_url: str | None = None,
    learning_rate: float = 1e-5,
    **config: Any,
) -> Any:
    """A GRPOTrainer whose completions come from ``rollout``; ``config`` overrides GRPOConfig fields."""
    import torch
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    on_cpu = not torch.cuda.is_available()
    config.setdefault("use_cpu", on_cpu)
    config.setdefault("bf16", not on_cpu)
    args = GRPOConfig(
        output_dir=output_dir,
        max_steps=steps,
        num_generations=num_generations,
        per_device_train_batch_size=num_generations,
        learning_rate=learning_rate,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_vllm=vllm_url is not None,
        vllm_mode="server",
        vllm_server_base_url=vllm_url,
        **config,
    )
    return GRPOTrainer(
        model=model, reward_funcs=env_reward, args=args, train_dataset=task_dataset(tasks), rollout_func=rollout
    )


@contextlib.contextmanager
def _policy(url: str | None, model: str | None) -> Iterator[PolicyConfig | None]:
    if url != "embedded":
        yield None if url is None else PolicyConfig(url, model or "default")
        return
    from legato_rl.testing import ReferencePolicyServer

    with ReferencePolicyServer() as server:
        yield PolicyConfig(server.url, server.model)


def main(argv: Sequence[str] | None = None) -> Mapping[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a model path or hub id; 'tiny' builds a tiny random one")
    parser.add_argument("--policy-url", help="an OpenAI-compatible server (…/v1), or 'embedded'")
    parser.add_argument("--policy-model", help="the served model name at --policy-url")
    parser.add_argument("--vllm-url", help="TRL's vLLM server (http://host:port); weights are synced to it")
    parser.add_argument("--backend", default="fake")
    parser.add_argument("--desktops", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=8, help="policy calls per episode")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps")
    parser.add_argument("--num-generations", type=int, default=2)
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args(argv)
    if (args.policy_url is None) == (args.vllm_url is None):
        parser.error("give exactly one of --policy-url and --vllm-url")

    desktop = DesktopConfig(screen=(640, 480))
    tasks = get_backend(args.backend)[1](desktop)
    with contextlib.ExitStack() as stack:
        output_dir = args.output_dir or stack.enter_context(tempfile.TemporaryDirectory())
        model = args.model
        if model == "tiny":
            from tiny_qwen import build_tiny_qwen

            model = str(build_tiny_qwen(stack.enter_context(tempfile.TemporaryDirectory())))
        policy = stack.enter_context(_policy(args.policy_url, args.policy_model))
        rollout = LegatoRollout(
            tasks, policy, backend=args.backend, desktops=args.desktops, max_steps=args.max_steps, desktop=desktop
        )
        stack.callback(rollout.close)
        trainer = build_trainer(
            model, rollout, tasks, output_dir=output_dir, steps=args.steps,
            num_generations=args.num_generations, vllm_url=args.vllm_url,
        )  # fmt: skip
        trainer.train()
        summary = {"optimizer_steps": trainer.state.global_step, **episode_summary(rollout.last)}
        print(summary)
        return summary


if __name__ == "__main__":
    main()
