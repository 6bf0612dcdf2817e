"""legato_rl.integrations: one episode as one token sequence, and verl's fields cut only between turns."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image

from legato_gym import ConfigError, DesktopConfig, resolve_backend
from legato_gym.vector import DesktopVectorEnv
from legato_rl.harness import QwenHarness
from legato_rl.integrations.sequence import Trajectory, episode_summary, play_sequences
from legato_rl.integrations.verl import AGENT_LOOP_FIELDS, agent_loop_fields, extra_fields, task_of_row
from legato_rl.policy import PolicyClient, PolicyConfig
from legato_rl.testing import ReferencePolicyServer
from legato_rl.testing.tokenizer import VISION_START, ToyTokenizer

DESKTOP = DesktopConfig(screen=(320, 240))
TASKS = resolve_backend("fake").default_tasks(DESKTOP)


@pytest.fixture(scope="module")
def server() -> Iterator[ReferencePolicyServer]:
    with ReferencePolicyServer() as running:
        yield running


@pytest.fixture(scope="module")
def trajectories(server: ReferencePolicyServer) -> list[Trajectory]:
    async def go() -> list[Trajectory]:
        async with PolicyClient(PolicyConfig(server.url, server.model)) as client:
            return await play_sequences(env, client, QwenHarness(image_max=9), TASKS[:3], max_steps=8)

    with DesktopVectorEnv(2, "fake", DESKTOP, max_steps=8) as env:
        return asyncio.run(go())


def _images_in(ids: list[int]) -> int:
    return ids.count(VISION_START)


def test_the_sequence_is_the_servers_ids(server: ReferencePolicyServer, trajectories: list[Trajectory]) -> None:
    toy = ToyTokenizer()
    chats = [r for r in server.requests if r.path.endswith("/chat/completions")]
    prompts = [toy.prompt(r.body["messages"]).ids for r in chats]
    for t in trajectories:
        assert t.reward == 1.0 and t.status == "ok" and t.num_turns >= 2
        assert t.prompt_ids in prompts
        assert len(t.completion_ids) == len(t.completion_mask) == len(t.logprobs) == t.turn_ends[-1]
        assert len(t.screenshots) == len(t.replies) == len(t.weight_versions) == t.num_turns
        assert _images_in(t.prompt_ids + t.completion_ids) == t.num_turns
        for end in t.turn_ends:  # every turn ends with a sampled token, and the next starts with env tokens
            assert t.completion_mask[end - 1] == 1
            assert end == len(t.completion_mask) or t.completion_mask[end] == 0
    assert episode_summary(trajectories)["reward_mean"] == 1.0


def test_cut_drops_whole_trailing_turns_with_their_screenshots(trajectories: list[Trajectory]) -> None:
    t = max(trajectories, key=lambda x: x.num_turns)
    assert t.num_turns >= 3
    budget = t.turn_ends[1] + (t.turn_ends[2] - t.turn_ends[1]) // 2  # in the middle of turn 3
    cut = t.cut(budget)
    assert cut.truncated and cut.num_turns == 2 and len(cut.completion_ids) == t.turn_ends[1] <= budget
    assert len(cut.screenshots) == 2 and cut.screenshots[1] is t.screenshots[1]
    assert _images_in(cut.prompt_ids + cut.completion_ids) == len(cut.screenshots)
    assert cut.completion_mask[-1] == 1 and cut.reward == t.reward
    assert t.cut(len(t.completion_ids)) is t and not t.truncated


def test_a_first_reply_longer_than_the_budget_is_cut_and_keeps_the_prompts_image(
    trajectories: list[Trajectory],
) -> None:
    t = trajectories[0]
    cut = t.cut(3)
    assert cut.truncated and cut.completion_ids == t.completion_ids[:3] and set(cut.completion_mask) == {1}
    assert len(cut.screenshots) == 1 == _images_in(cut.prompt_ids + cut.completion_ids)
    with pytest.raises(ConfigError, match="at least 1"):
        t.cut(0)


def test_verl_fields_keep_images_and_placeholders_one_to_one(trajectories: list[Trajectory]) -> None:
    t = max(trajectories, key=lambda x: x.num_turns)
    for budget in (t.turn_ends[0], t.turn_ends[1] + 1, t.turn_ends[-1] - 1, 4096):
        fields = agent_loop_fields(t, response_length=budget)
        assert set(fields) == set(AGENT_LOOP_FIELDS)
        n = len(fields["response_ids"])
        assert n <= budget and n == len(fields["response_mask"]) == len(fields["response_logprobs"])
        images = fields["multi_modal_data"]["images"]
        assert all(isinstance(i, Image.Image) for i in images)
        assert len(images) == _images_in(fields["prompt_ids"] + fields["response_ids"])
        assert fields["num_turns"] == 2 * len(images)
        extra = extra_fields(t, budget)
        assert extra["truncated"] == (budget < len(t.completion_ids))
        assert extra["turns_dropped"] == t.num_turns - len(images)


def test_a_first_prompt_longer_than_the_prompt_length_is_refused(trajectories: list[Trajectory]) -> None:
    t = trajectories[0]
    assert agent_loop_fields(t, prompt_length=len(t.prompt_ids))["prompt_ids"] == t.prompt_ids
    with pytest.raises(ConfigError, match="prompt_length"):
        agent_loop_fields(t, prompt_length=len(t.prompt_ids) - 1)


def test_a_trainers_token_budget_stops_the_episode(server: ReferencePolicyServer) -> None:
    async def go() -> list[Trajectory]:
        async with PolicyClient(PolicyConfig(server.url, server.model)) as client:
            return await play_sequences(env, client, QwenHarness(image_max=9), TASKS[:1], max_steps=8, max_tokens=1)

    with DesktopVectorEnv(1, "fake", DESKTOP, max_steps=8) as env:
        (t,) = asyncio.run(go())
    assert t.num_turns == 1 and t.status == "truncated"


def test_task_of_row_reads_the_task_or_its_id() -> None:
    row: dict[str, Any] = {"extra_info": {"task_id": TASKS[1].task_id}}
    assert task_of_row(row, TASKS) == TASKS[1]
    assert task_of_row({"extra_info": {"task": TASKS[2].to_json()}}, []).task_id == TASKS[2].task_id
    with pytest.raises(ConfigError, match=r"verl_dataset\.py"):
        task_of_row({"extra_info": {"task_id": "nope"}}, TASKS)
