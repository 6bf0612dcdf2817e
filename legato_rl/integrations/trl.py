"""TRL 1.16: legato desktops as ``GRPOTrainer``'s ``environment_factory``, and the ``rollout_func`` helpers.

Two ways to train on legato desktops with TRL's ``GRPOTrainer`` (``docs/trainers.md`` says which to pick):

* ``environment_factory=DesktopEnvironments(tasks, ...)``: TRL generates with the model it trains (or its
  vLLM), and the model drives a desktop through tool calls. Every tool runs one computer-use action on a
  legato desktop (in the vector env's worker process, never in the trainer's) and returns the new
  screenshot as an image block, which TRL merges into the training forward pass (``pixel_values``).
  The reward is legato's grade of the desktop (``get_reward``).
* ``rollout_func=LegatoRollout(tasks, ...)`` (``examples/trl_rollout_func.py``): legato plays whole
  episodes (:func:`legato_rl.integrations.sequence.play_sequences`, legato's own attempt loop and harness)
  against an OpenAI-compatible server and hands TRL the server's token ids, masks and logprobs. TRL 1.16
  restores only the dataset's images on this path, so the screenshots do not reach the training forward
  pass.

The two paths live in their own modules, re-exported here (import from here):
:mod:`legato_rl.integrations.trl_environment` (the factory, its tools, and how TRL 1.16 calls them),
:mod:`legato_rl.integrations.trl_rollout` (the rollout, its reward function, the trainer's vLLM server) and
:mod:`legato_rl.integrations.trl_tasks` (how a dataset row or a prompt names its task, for both).

Example::

    from trl import GRPOConfig, GRPOTrainer
    from legato_gym import resolve_backend
    from legato_rl.integrations.trl import DesktopEnvironments, task_dataset

    tasks = resolve_backend("fake").default_tasks(None)
    environments = DesktopEnvironments(tasks, backend="fake", desktops=8, max_steps=15)
    trainer = GRPOTrainer(
        model="Qwen/Qwen3-VL-2B-Instruct",
        args=GRPOConfig(per_device_train_batch_size=8, num_generations=4, max_completion_length=8192),
        train_dataset=task_dataset(tasks, prompt=""),
        environment_factory=environments,
    )
    trainer.train()
    environments.close()
"""

from __future__ import annotations

from legato_rl.integrations.trl_environment import GRID, DesktopEnvironments, DesktopTools, EpisodeLog
from legato_rl.integrations.trl_rollout import LegatoRollout, env_reward, policy_from_trainer
from legato_rl.integrations.trl_tasks import TaskIndex, task_dataset

__all__ = [
    "GRID",
    "DesktopEnvironments",
    "DesktopTools",
    "EpisodeLog",
    "LegatoRollout",
    "TaskIndex",
    "env_reward",
    "policy_from_trainer",
    "task_dataset",
]
