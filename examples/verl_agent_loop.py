"""verl: one legato desktop episode per dataset row, as a verl 0.9.1 agent loop.

    # 1. the dataset (one row per task; verl_dataset.py also converts `legato rl export` output)
    python examples/verl_dataset.py tasks --backend fake --out data/desktop.parquet
    # 2. agent_loop.yaml names this loop and where the policy is served:
    #    - name: legato_desktop
    #      _target_: verl_agent_loop.LegatoDesktopAgentLoop
    #      policy_url: http://127.0.0.1:8000/v1          # an OpenAI-compatible server of the policy
    #      policy_model: Qwen/Qwen2.5-VL-3B-Instruct
    #      backend: fake                                 # or osworld, local
    #      desktops: 8
    # 3. train (examples/ on PYTHONPATH so hydra finds the class)
    PYTHONPATH=examples python -m verl.trainer.main_ppo data.train_files=data/desktop.parquet \
        actor_rollout_ref.rollout.agent.agent_loop_config_path=agent_loop.yaml \
        actor_rollout_ref.rollout.agent.default_agent_loop=legato_desktop algorithm.adv_estimator=grpo ...

The loop plays the row's task on a legato desktop (a vector env shared by every loop of the worker
process) with legato's Qwen harness, and asks the policy through legato's client over the
OpenAI-compatible chat API, so the token ids and logprobs it returns are the server's (see
``desktop_episode.py`` for how one multi-turn sequence is built from them). Point ``policy_url`` at the
rollout servers whose weights verl updates (verl's vLLM replicas serve vLLM's OpenAI app; their
addresses are printed as ``LLMServerManager: [...]``), or at any server you load the new weights on.
It does not go through ``server_manager.generate`` (verl's token-in/token-out path): legato's harness
speaks chat messages, and the server's own prompt token ids keep the trajectory exact.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from desktop_episode import agent_loop_fields, play_episode
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from legato_gym import DesktopConfig, Task
from legato_gym.vector import DesktopVectorEnv
from legato_rl.harness import QwenHarness
from legato_rl.policy import PolicyClient, PolicyConfig

__all__ = ["LegatoDesktopAgentLoop", "task_of_row"]


@dataclass
class _Pool:
    env: DesktopVectorEnv
    free: asyncio.Queue[int]


_POOLS: dict[tuple[str, int, tuple[int, int], int], _Pool] = {}


def _pool(backend: str, desktops: int, screen: tuple[int, int], max_steps: int) -> _Pool:
    """The worker process's desktops: built on first use and shared by every loop (verl builds one per row)."""
    key = (backend, desktops, screen, max_steps)
    if key not in _POOLS:
        env = DesktopVectorEnv(desktops, backend, DesktopConfig(screen=screen), max_steps=max_steps)
        free: asyncio.Queue[int] = asyncio.Queue()
        for env_id in range(desktops):
            free.put_nowait(env_id)
        _POOLS[key] = _Pool(env, free)
    return _POOLS[key]


def task_of_row(row: Mapping[str, Any], env: DesktopVectorEnv) -> Task:
    """The task a dataset row names: ``extra_info.task`` (``Task.to_json()``, or it as JSON text) or ``.task_id``."""
    extra = row.get("extra_info") or {}
    task = extra.get("task")
    if isinstance(task, str):  # verl_dataset.py stores it as JSON text (task configs differ in shape)
        task = json.loads(task)
    if isinstance(task, Mapping):
        return Task.from_json(task)
    task_id = extra.get("task_id")
    for task in env.tasks:
        if task.task_id == task_id:
            return task
    raise KeyError(f"row has no extra_info.task and its extra_info.task_id {task_id!r} is not a task of the env")


@register("legato_desktop")
class LegatoDesktopAgentLoop(AgentLoopBase):  # type: ignore[misc]
    """An agent loop that plays one desktop task per row and returns the episode as one sequence.

    Args:
        policy_url: the policy's OpenAI-compatible base URL (``…/v1``); several replicas may be listed.
        policy_model: the served model name.
        backend: the desktop backend (``fake``, ``local``, ``osworld``).
        desktops: desktops per verl agent-loop worker process.
        max_steps: policy calls per episode.
        screen: ``(width, height)`` of the desktops.
        *args, **kwargs: what verl passes to every agent loop (config, server manager, tokenizer, ...).
    """

    def __init__(
        self,
        *args: Any,
        policy_url: str | list[str],
        policy_model: str,
        backend: str = "fake",
        desktops: int = 4,
        max_steps: int = 15,
        screen: tuple[int, int] | list[int] = (1920, 1080),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.policy_url = policy_url if isinstance(policy_url, str) else tuple(policy_url)
        self.policy_model = policy_model
        self.max_steps = max_steps
        self.pool = _pool(backend, desktops, (int(screen[0]), int(screen[1])), max_steps)
        self.harness = QwenHarness(image_max=max_steps + 1)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        task = task_of_row(kwargs, self.pool.env)
        policy = PolicyConfig(
            self.policy_url,
            self.policy_model,
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_p=float(sampling_params.get("top_p", 1.0)),
            max_tokens=int(sampling_params.get("max_tokens") or self.rollout_config.response_length),
        )
        env_id = await self.pool.free.get()
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with PolicyClient(policy) as client:
                trajectory = await play_episode(
                    self.pool.env, env_id, client, self.harness, task,
                    max_steps=self.max_steps, rollout_id=f"{task.task_id}-{kwargs.get('index', 0)}-{id(self)}",
                )  # fmt: skip
        finally:
            self.pool.free.put_nowait(env_id)
        fields = agent_loop_fields(trajectory, self.rollout_config.response_length)
        return AgentLoopOutput(
            **fields,
            metrics=AgentLoopMetrics(generate_sequences=loop.time() - started),
            extra_fields={"turn_scores": [], "tool_rewards": [], "task_id": task.task_id},
        )
