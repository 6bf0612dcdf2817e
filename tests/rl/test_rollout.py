"""legato_rl.rollout.play: the one attempt loop behind collect and the trainer integrations."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from legato_gym import DesktopConfig, resolve_backend
from legato_gym.vector import DesktopVectorEnv
from legato_rl.groups import Status
from legato_rl.harness import QwenHarness
from legato_rl.integrations.sequence import play_sequence
from legato_rl.policy import PolicyClient, PolicyConfig
from legato_rl.rollout import Policy, Try, TryStep, play
from legato_rl.testing import ReferencePolicyServer

DESKTOP = DesktopConfig(screen=(320, 240))
TASKS = resolve_backend("fake").default_tasks(DESKTOP)


class PngSpyHarness(QwenHarness):
    """Qwen's harness, noting whether each prompt was built from the PNG the worker encoded."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.got_png: list[bool] = []

    def encode_image(self, screenshot: Any, *, png: bytes | None = None) -> str:
        self.got_png.append(png is not None)
        return super().encode_image(screenshot, png=png)


@pytest.fixture(scope="module")
def server() -> Iterator[ReferencePolicyServer]:
    with ReferencePolicyServer() as running:
        yield running


@pytest.fixture(scope="module")
def env() -> Iterator[DesktopVectorEnv]:
    with DesktopVectorEnv(1, "fake", DESKTOP, max_steps=64, png=True) as vector:
        yield vector


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _play(server: ReferencePolicyServer, env: DesktopVectorEnv, **kwargs: Any) -> tuple[Try, list[TryStep]]:
    steps: list[TryStep] = []

    async def on_step(step: TryStep) -> None:
        steps.append(step)

    harness = kwargs.pop("harness", None) or QwenHarness()
    async with PolicyClient(PolicyConfig(server.url, server.model)) as client:
        assert isinstance(client, Policy)
        task = kwargs.pop("task", TASKS[0])
        max_steps = kwargs.pop("max_steps", 8)
        episode = await play(
            env, 0, task, client, harness, rollout_id="r0", max_steps=max_steps, on_step=on_step, **kwargs
        )
    return episode, steps


def test_an_attempt_is_played_graded_and_timed(server: ReferencePolicyServer, env: DesktopVectorEnv) -> None:
    replies: list[float] = []
    episode, steps = _run(_play(server, env, on_reply=lambda result, asked: replies.append(asked)))
    assert episode.status is Status.OK and episode.reward == 1.0
    assert episode.steps == len(steps) == len(replies) >= 2
    assert [s.index for s in steps] == list(range(len(steps)))
    assert steps[-1].ended and not any(s.ended for s in steps[:-1])
    assert all(s.actions for s in steps) and all(s.result.token_ids for s in steps)
    assert episode.seconds["reset_s"] > 0 and episode.seconds["model_s"] > 0 and episode.seconds["act_s"] > 0
    assert episode.timing().total_s >= sum(episode.seconds.values()) * 0.5


def test_cancelled_ends_without_grading(server: ReferencePolicyServer, env: DesktopVectorEnv) -> None:
    calls = iter(range(100))
    episode, steps = _run(_play(server, env, cancelled=lambda: next(calls) >= 2))  # open for step 0 only
    assert episode.status is Status.CANCELLED and episode.reward is None
    assert len(steps) == 1 and steps[0].actions  # asked before the step and before its actions: 2 calls


def test_exhausted_grades_now_as_truncated(server: ReferencePolicyServer, env: DesktopVectorEnv) -> None:
    episode, steps = _run(_play(server, env, exhausted=lambda: True))
    assert episode.status is Status.TRUNCATED and len(steps) == 1
    assert episode.reward is not None and episode.seconds["eval_s"] > 0


def test_the_step_limit_grades_as_ok(server: ReferencePolicyServer, env: DesktopVectorEnv) -> None:
    episode, steps = _run(_play(server, env, max_steps=1))
    assert episode.status is Status.OK and len(steps) == 1 and not steps[0].ended
    assert episode.reward is not None


def test_the_worker_encoded_png_reaches_the_harness(server: ReferencePolicyServer, env: DesktopVectorEnv) -> None:
    harness = PngSpyHarness()
    _, steps = _run(_play(server, env, harness=harness))
    assert harness.got_png and all(harness.got_png)
    assert all(s.png is not None and s.png.startswith(b"\x89PNG") for s in steps)


def test_trainer_sequences_use_the_worker_png_too(server: ReferencePolicyServer, env: DesktopVectorEnv) -> None:
    """The trainer examples' own loop skipped the PNG path; the shared one does not."""
    harness = PngSpyHarness(image_max=9)

    async def go() -> Any:
        async with PolicyClient(PolicyConfig(server.url, server.model)) as client:
            return await play_sequence(env, 0, client, harness, TASKS[1], max_steps=8, rollout_id="s0")

    trajectory = _run(go())
    assert trajectory.reward == 1.0 and trajectory.num_turns == len(harness.got_png) and all(harness.got_png)
    assert len(trajectory.screenshots) == trajectory.num_turns
    assert all(isinstance(s, np.ndarray) and s.shape == (240, 320, 3) for s in trajectory.screenshots)


def test_the_old_names_of_a_try_warn_for_one_release() -> None:
    import legato_rl.rollout as rollout

    with pytest.warns(DeprecationWarning, match=r"legato_rl.rollout.Episode is now legato_rl.rollout.Try"):
        assert rollout.Episode is Try  # type: ignore[attr-defined]
    with pytest.warns(DeprecationWarning, match=r"legato_rl.rollout.PlayedStep is now legato_rl.rollout.TryStep"):
        assert rollout.PlayedStep is TryStep  # type: ignore[attr-defined]
