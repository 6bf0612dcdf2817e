"""examples/verl_agent_loop.py and verl_dataset.py against verl 0.9.1.

Checked against verl's own types (``AgentLoopOutput``, ``RLHFDataset``) when verl imports here; the
contract tests check the same outputs against verl's documented field set and run without verl.
verl 0.9.1 wants transformers < 5.11 and numpy >= 2, so it lives in its own environment: see
docs/trainers.md for the pip lines.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from legato_gym import DesktopConfig, get_backend
from legato_rl.policy import PolicyClient, PolicyConfig
from legato_rl.testing import ReferencePolicyServer
from legato_rl.testing.tokenizer import ToyTokenizer

DESKTOP = DesktopConfig(screen=(320, 240))
TASKS = get_backend("fake")[1](DESKTOP)
HAS_VERL = importlib.util.find_spec("verl") is not None
needs_verl = pytest.mark.skipif(
    not HAS_VERL, reason="verl is not installed (pip install verl==0.9.1 cachetools uvicorn fastapi, in its own venv)"
)

#: AgentLoopOutput's fields that a desktop episode fills (verl 0.9.1 agent_loop.py; apis.md §5.1).
AGENT_LOOP_FIELDS = {
    "prompt_ids", "response_ids", "response_mask", "response_logprobs", "multi_modal_data", "reward_score", "num_turns",
}  # fmt: skip
#: Columns RLHFDataset reads with its default keys, plus the agent loop selector.
DATASET_COLUMNS = {"data_source", "prompt", "images", "ability", "reward_model", "agent_name", "extra_info"}


@pytest.fixture
def server() -> Iterator[ReferencePolicyServer]:
    with ReferencePolicyServer() as running:
        yield running


def _first_prompts(server: ReferencePolicyServer) -> list[list[int]]:
    toy = ToyTokenizer()
    return [
        toy.prompt(r.body["messages"]).ids
        for r in server.requests
        if r.path.endswith("/chat/completions") and not any(m["role"] == "assistant" for m in r.body["messages"])
    ]


def test_agent_loop_fields_follow_verls_documented_contract(server: ReferencePolicyServer) -> None:
    from desktop_episode import agent_loop_fields, play_episodes
    from PIL import Image

    from legato_gym.vector import DesktopVectorEnv
    from legato_rl.harness import QwenHarness

    async def play() -> Any:
        async with PolicyClient(PolicyConfig(server.url, server.model)) as client:
            return await play_episodes(env, client, QwenHarness(image_max=9), TASKS[:2], max_steps=8)

    with DesktopVectorEnv(2, "fake", DESKTOP, max_steps=8) as env:
        trajectories = asyncio.run(play())
    for trajectory in trajectories:
        fields = agent_loop_fields(trajectory, response_length=4096)
        assert set(fields) == AGENT_LOOP_FIELDS
        n = len(fields["response_ids"])
        assert n == len(fields["response_mask"]) == len(fields["response_logprobs"])
        assert set(fields["response_mask"]) <= {0, 1} and fields["response_mask"][-1] == 1
        assert all(isinstance(t, int) for t in fields["prompt_ids"] + fields["response_ids"])
        assert fields["reward_score"] == 1.0
        images = fields["multi_modal_data"]["images"]
        assert len(images) == trajectory.num_turns and all(isinstance(i, Image.Image) for i in images)
        assert fields["num_turns"] == 2 * trajectory.num_turns
        assert fields["prompt_ids"] in _first_prompts(server)
        cut = agent_loop_fields(trajectory, response_length=5)
        assert len(cut["response_ids"]) == len(cut["response_mask"]) == len(cut["response_logprobs"]) == 5


@pytest.mark.slow
@needs_verl
def test_agent_loop_returns_verls_own_agent_loop_output(server: ReferencePolicyServer, tmp_path: Path) -> None:
    from omegaconf import OmegaConf
    from tiny_qwen import build_tiny_qwen
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl_agent_loop import LegatoDesktopAgentLoop
    from verl_dataset import task_rows

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_qwen(tmp_path / "tiny"))
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 4096}}})

    async def run() -> list[Any]:
        loop = LegatoDesktopAgentLoop(
            trainer_config=DictConfigWrap(config), server_manager=None, tokenizer=tokenizer, processor=None,
            dataset_cls=RLHFDataset, data_config=DictConfigWrap(OmegaConf.create({})),
            policy_url=server.url, policy_model=server.model, desktops=2, max_steps=8, screen=[320, 240],
        )  # fmt: skip
        rows = task_rows(TASKS[:3])
        return list(await asyncio.gather(*(loop.run({"temperature": 1.0}, **row) for row in rows)))

    outputs = asyncio.run(run())
    first_prompts = _first_prompts(server)
    for output in outputs:
        assert isinstance(output, AgentLoopOutput)
        assert output.prompt_ids in first_prompts
        assert output.reward_score == 1.0
        batch = output.as_dict()  # verl's own conversion to the DataProto tensors
        assert batch["responses"].shape == batch["response_mask"].shape == batch["rollout_log_probs"].shape
        assert batch["rm_scores"][-1].item() == 1.0 and batch["rm_scores"][:-1].abs().sum().item() == 0.0
        assert batch["response_mask"].sum().item() < batch["responses"].numel() or output.num_turns == 2


def _export(tmp_path: Path, server: ReferencePolicyServer) -> tuple[Path, Path]:
    from legato_rl.collect import collect
    from legato_rl.export import export_steps

    run = tmp_path / "run"
    collect(TASKS[:3], PolicyConfig(server.url, server.model), out=run, backend="fake", desktops=2, group=1,
            desktop=DESKTOP)  # fmt: skip
    export_steps(run, run / "train.parquet")
    return run, run / "train.parquet"


def test_dataset_rows_have_verls_layout(server: ReferencePolicyServer, tmp_path: Path) -> None:
    from verl_dataset import export_rows, task_rows, write_parquet

    run, export = _export(tmp_path, server)
    rows = list(export_rows(export, run))
    assert rows and all(set(row) == DATASET_COLUMNS for row in rows)
    for row in rows:
        placeholders = sum(m["content"].count("<image>") for m in row["prompt"])
        assert placeholders == len(row["images"]) >= 1
        assert all(row_image["bytes"].startswith(b"\x89PNG") for row_image in row["images"])
        assert all(isinstance(m["content"], str) for m in row["prompt"])
    tasks = task_rows(TASKS)
    assert all(set(row) == DATASET_COLUMNS and row["agent_name"] == "legato_desktop" for row in tasks)
    assert write_parquet(rows, tmp_path / "steps.parquet") == len(rows)


@pytest.mark.slow
@needs_verl
def test_verls_rlhf_dataset_reads_both_files(server: ReferencePolicyServer, tmp_path: Path) -> None:
    from omegaconf import OmegaConf
    from tiny_qwen import build_tiny_qwen
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl_dataset import export_rows, task_rows, write_parquet

    run, export = _export(tmp_path, server)
    write_parquet(export_rows(export, run), tmp_path / "steps.parquet")
    write_parquet(task_rows(TASKS), tmp_path / "tasks.parquet")
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_qwen(tmp_path / "tiny"))
    config = OmegaConf.create({"filter_overlong_prompts": False, "cache_dir": str(tmp_path / "cache")})

    tasks = RLHFDataset(str(tmp_path / "tasks.parquet"), tokenizer, config)
    assert len(tasks) == len(TASKS)
    assert tasks[0]["raw_prompt"] == [{"role": "user", "content": TASKS[0].instruction}]
    assert tasks[0]["agent_name"] == "legato_desktop"

    class Processor:  # RLHFDataset only checks that a processor is present before filling <image> slots
        pass

    steps = RLHFDataset(str(tmp_path / "steps.parquet"), tokenizer, config, processor=Processor())
    item = steps[0]
    kinds = [part["type"] for message in item["raw_prompt"] for part in message["content"]]
    assert kinds.count("image") >= 1 and "text" in kinds
