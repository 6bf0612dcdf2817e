"""legato_rl.integrations.trl_rollout and the public surface of legato_rl.integrations.trl (no trainer).

The rollout's episodes against a policy server, and GRPO training on them, are
tests/examples/test_example_trl.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from legato_gym import ConfigError, DesktopConfig, resolve_backend
from legato_rl.integrations import trl, trl_environment, trl_rollout, trl_tasks
from legato_rl.integrations.trl_rollout import policy_from_trainer
from legato_rl.integrations.trl_tasks import TaskIndex

TASKS = resolve_backend("fake").default_tasks(DesktopConfig(screen=(320, 240)))


def test_the_rollout_func_path_needs_a_served_policy() -> None:
    colocated = SimpleNamespace(args=SimpleNamespace(use_vllm=True, vllm_mode="colocate"))
    with pytest.raises(ConfigError, match=r"'colocate'.*environment_factory"):
        policy_from_trainer(colocated)
    with pytest.raises(ConfigError, match="'no vLLM'"):
        policy_from_trainer(SimpleNamespace(args=SimpleNamespace(use_vllm=False)))
    index = TaskIndex(TASKS)
    prompt = [{"role": "user", "content": [{"type": "text", "text": TASKS[3].instruction}]}]
    assert index.from_prompt(prompt) is TASKS[3]
    with pytest.raises(ConfigError, match="no task has the instruction"):
        index.from_prompt("Do something else.")


def test_both_paths_are_imported_from_legato_rl_integrations_trl() -> None:
    # examples and docs import from legato_rl.integrations.trl: each name is the object of its own module
    modules = (trl_environment, trl_rollout, trl_tasks)
    homes = {name: [m for m in modules if name in m.__all__] for name in trl.__all__}
    assert all(len(found) == 1 for found in homes.values()), homes
    assert all(getattr(trl, name) is getattr(found[0], name) for name, found in homes.items())
    assert sorted(trl.__all__) == sorted(name for m in modules for name in m.__all__)
