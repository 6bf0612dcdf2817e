"""TRL: GRPO on desktop episodes that legato plays, through TRL 1.16's ``rollout_func``.

    # On a CPU, no download: a tiny random model and legato's reference policy server on loopback
    python examples/trl_rollout_func.py --model tiny --policy-url embedded --steps 3

    # With TRL's vLLM server (weights synced by TRL before every rollout; run the server as TRL's docs say)
    python examples/trl_rollout_func.py --model Qwen/Qwen2.5-VL-3B-Instruct --vllm-url http://127.0.0.1:8000

Each GRPO completion is one whole episode on a legato desktop (``legato_rl.integrations.trl.LegatoRollout``,
on legato's attempt loop ``legato_rl.rollout`` and ``legato_rl.integrations.sequence``): the first
prompt as the server tokenized it, then every reply and the env turns between them, with ``env_mask``
marking the env tokens so that only the model's own tokens are trained, and the server's logprobs for
TRL's importance-sampling correction. The reward is the desktop's grade, passed to the reward function
as the extra column ``env_reward``.

TRL calls ``rollout_func(prompts, trainer)`` with the prompts of its batch, each repeated
``num_generations`` times in a row (the docstring says "no duplication", the 1.16 code passes the
RepeatSampler's rows), and wants one completion per prompt. TRL hands over the prompts only, so the
dataset's prompt is the task's instruction and the rollout finds the task by it.

The policy must be a server: TRL's vLLM server (``--vllm-url``, TRL syncs the weights into it before each
rollout) or any OpenAI-compatible one (``--policy-url``: off-policy unless you update its weights). A
colocated vLLM (``vllm_mode="colocate"``) lives in the trainer's process, has no URL, and is refused.

Limit of TRL 1.16: on the ``rollout_func`` path, screenshots reach the policy server but not TRL's own
training forward pass (only dataset images do). A VLM is then trained on image placeholder tokens
without their pixels. For image-conditioned training use ``trl_environment.py`` (TRL's
``environment_factory``, the screenshots in the batch) or verl (``verl_agent_loop.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from legato_gym import DesktopConfig, Task, resolve_backend
from legato_rl.integrations.sequence import episode_summary
from legato_rl.integrations.trl import LegatoRollout, env_reward, policy_from_trainer, task_dataset
from legato_rl.policy import PolicyConfig

__all__ = ["LegatoRollout", "build_trainer", "env_reward", "main", "policy_from_trainer", "task_dataset"]


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
    tasks = resolve_backend(args.backend).default_tasks(desktop)
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
