"""examples/verl_agent_loop.py and verl_dataset.py against verl 0.9.1's real types, with a Qwen-VL processor.

The agent loop runs with verl's own ``AgentLoopBase.__init__`` (so verl's own continuous-token builder), a
real ``Qwen2VLProcessor`` built offline (a byte-level tokenizer with Qwen's special tokens, Qwen2-VL's
image processor), and a stand-in for verl's server manager: ``generate(prompt_ids, image_data, ...)``
answers with verl's ``TokenOutput`` from a scripted solver and reports its ``global_steps``, which the test
moves as verl's weight sync would. verl 0.9.1 wants transformers < 5.11, so these tests run in
``.venv-verl`` (see the end of scripts/test); the checks that need no verl run everywhere.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from legato_gym import ConfigError, DesktopConfig, resolve_backend
from legato_rl.harness import QwenHarness
from legato_rl.policy import PolicyClient, PolicyConfig
from legato_rl.testing import ReferencePolicyServer, ScriptedSolver
from legato_rl.testing.tokenizer import ToyTokenizer

SCREEN = (320, 240)
DESKTOP = DesktopConfig(screen=SCREEN)
TASKS = resolve_backend("fake").default_tasks(DESKTOP)
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

_SPECIAL = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>"]
_IMAGE_PAD = "<|image_pad|>"
# ChatML as Qwen's templates render it; an image block is <|vision_start|><|image_pad|><|vision_end|>, which
# the processor expands to one pad per merged patch.
_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}{{ '\\n' }}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] in ('image', 'image_url') %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>{{ '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{% endif %}"
)


def tiny_qwen_vl(max_pixels: int = 112 * 112) -> tuple[Any, Any]:
    """A tokenizer and a real ``Qwen2VLProcessor`` built offline (no download).

    The tokenizer is byte-level BPE without merges (every text round-trips exactly) plus Qwen's special
    tokens; ``<|image_pad|>`` is an added token that decoding keeps, as verl expects of Qwen's. The image
    processor is Qwen2-VL's (14-pixel patches merged 2x2), with ``max_pixels`` small so prompts stay short.
    """
    import transformers
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2VLProcessor

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[t for t in _SPECIAL if t != "<|im_end|>"],
        chat_template=_TEMPLATE,
    )
    tokenizer.add_tokens([AddedToken(_IMAGE_PAD, special=False, normalized=False)])
    # without torchvision, transformers 5 has Qwen2-VL's image processor on PIL only
    image_processor_cls = getattr(transformers, "Qwen2VLImageProcessorPil", None) or transformers.Qwen2VLImageProcessor
    image_processor = image_processor_cls(min_pixels=56 * 56, max_pixels=max_pixels)

    class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):  # type: ignore[misc]
        """Qwen2VLProcessor without a video processor: transformers 5.10 wants one, and it needs torchvision."""

        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    processor = ImageOnlyQwen2VLProcessor(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=None, chat_template=_TEMPLATE
    )
    return tokenizer, processor


class StandInServerManager:
    """verl's server manager as an agent loop sees it: ``generate`` answers with verl's own ``TokenOutput``.

    The reply is a scripted solver's, read from the prompt the loop rendered (decoded from its ids), so the
    episode really solves the fake task. ``global_steps`` is the version of the weights it serves: the test
    moves it with :meth:`load_weights`, as verl's weight sync does, and every output reports it. Every call
    checks that the prompt's image placeholders are exactly those the processor makes for ``image_data``.
    """

    def __init__(self, tokenizer: Any, processor: Any) -> None:
        self.tokenizer, self.processor = tokenizer, processor
        self.brain = ScriptedSolver(TASKS, screen_size=SCREEN)
        self.global_steps = 0
        self.calls: list[dict[str, Any]] = []
        self._pending: tuple[int, int] | None = None
        self.pad_id = tokenizer.convert_tokens_to_ids(_IMAGE_PAD)
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def load_weights(self, global_steps: int, *, after_calls: int = 0) -> None:
        """Serve the weights of ``global_steps`` from now on (or once ``after_calls`` more calls were answered)."""
        if after_calls:
            self._pending = (len(self.calls) + after_calls, global_steps)
        else:
            self.global_steps = global_steps

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], image_data: Any = None
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        if self._pending is not None and len(self.calls) >= self._pending[0]:
            self.global_steps, self._pending = self._pending[1], None
        images = list(image_data or [])
        assert prompt_ids.count(self.pad_id) == sum(_pads(self.processor, image) for image in images)
        assert _runs(prompt_ids, self.pad_id) == len(images)
        self.calls.append({"prompt_ids": list(prompt_ids), "images": len(images), "global_steps": self.global_steps})
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        reply = self.brain.respond(_chatml_messages(text)).content
        ids = [*self.tokenizer.encode(reply, add_special_tokens=False), self.im_end]
        logprob = -1.0 / (2 + self.global_steps)  # the weights' own: it changes with them
        return TokenOutput(
            token_ids=ids, log_probs=[logprob] * len(ids), stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )  # fmt: skip


def _pads(processor: Any, image: Any) -> int:
    grid = processor.image_processor(images=[image], return_tensors="pt")["image_grid_thw"][0]
    return int(grid.prod()) // processor.image_processor.merge_size**2


def _runs(ids: Sequence[int], token: int) -> int:
    """How many separate runs of ``token`` the ids hold (one per image)."""
    return sum(1 for i, t in enumerate(ids) if t == token and (i == 0 or ids[i - 1] != token))


def _chatml_messages(text: str) -> list[dict[str, str]]:
    messages = []
    for block in text.split("<|im_start|>")[1:]:
        role, _, content = block.partition("\n")
        messages.append({"role": role, "content": content.split("<|im_end|>")[0]})
    return [m for m in messages if m["content"] or m["role"] != "assistant"]


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


def _verl_loop(tokenizer: Any, processor: Any, server_manager: Any, response_length: int, **kwargs: Any) -> Any:
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl_agent_loop import LegatoDesktopAgentLoop

    config = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 16384, "response_length": response_length}}}
    )
    return LegatoDesktopAgentLoop(
        trainer_config=DictConfigWrap(config), server_manager=server_manager, tokenizer=tokenizer,
        processor=processor, dataset_cls=RLHFDataset, data_config=DictConfigWrap(OmegaConf.create({})),
        hf_model_type=None if processor is None else "qwen2_vl", desktops=2, max_steps=8, screen=list(SCREEN),
        **kwargs,
    )  # fmt: skip


def _image_alignment_by_verl(tokenizer: Any, processor: Any, output: Any) -> Any:
    """verl's own post-processing of an output's images (AgentLoopWorker's), checked against its token ids.

    verl does not compare them itself: the pixel patches it would feed the model must be exactly those the
    output's image placeholders stand for (one placeholder per ``merge_size``² patches).
    """
    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    worker = SimpleNamespace(tokenizer=tokenizer, processor=processor, _get_mm_processor_kwargs=lambda audios=None: {})
    sequence = output.prompt_ids + output.response_ids
    inputs = AgentLoopWorker._compute_multi_modal_inputs(worker, output, torch.tensor([sequence]))
    pads = sequence.count(tokenizer.convert_tokens_to_ids(_IMAGE_PAD))
    assert inputs["pixel_values"].shape[0] == pads * processor.image_processor.merge_size**2
    return inputs


@pytest.mark.slow
@needs_verl
def test_the_agent_loop_generates_through_verls_server_manager_on_policy() -> None:
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    from verl_dataset import task_rows

    tokenizer, processor = tiny_qwen_vl()
    manager = StandInServerManager(tokenizer, processor)
    rows = task_rows(TASKS[:2])

    async def run() -> list[list[Any]]:
        loop = _verl_loop(tokenizer, processor, manager, response_length=8192)
        batches = []
        for step in (3, 4):  # verl syncs new weights into its replicas before each rollout batch
            manager.load_weights(step)
            batches.append(list(await asyncio.gather(*(loop.run({"temperature": 1.0}, **row) for row in rows))))
        return batches

    batches = asyncio.run(run())
    pad = tokenizer.convert_tokens_to_ids(_IMAGE_PAD)
    for step, outputs in zip((3, 4), batches, strict=True):
        for output in outputs:
            assert isinstance(output, AgentLoopOutput) and output.reward_score == 1.0
            turns = output.num_turns // 2
            assert output.extra_fields["weight_versions"] == [str(step)] * turns
            assert output.extra_fields["min_global_steps"] == output.extra_fields["max_global_steps"] == step
            assert not output.extra_fields["truncated"]
            assert set(output.response_logprobs[i] for i, m in enumerate(output.response_mask) if m) == {
                -1 / (2 + step)
            }
            sequence = output.prompt_ids + output.response_ids
            calls = [
                c
                for c in manager.calls
                if c["global_steps"] == step and sequence[: len(c["prompt_ids"])] == c["prompt_ids"]
            ]
            assert len(calls) == turns and calls[0]["prompt_ids"] == output.prompt_ids  # each prompt extends the last
            images = output.multi_modal_data["images"]
            assert len(images) == turns == _runs(sequence, pad)
            assert sequence.count(pad) == sum(_pads(processor, image) for image in images)
            inputs = _image_alignment_by_verl(tokenizer, processor, output)
            assert inputs["image_grid_thw"].shape[0] == len(images)
            batch = output.as_dict()  # verl's own conversion to the DataProto tensors
            assert batch["responses"].shape == batch["response_mask"].shape == batch["rollout_log_probs"].shape
            assert batch["rm_scores"][-1].item() == 1.0


@pytest.mark.slow
@needs_verl
def test_weights_synced_mid_episode_show_in_its_versions() -> None:
    from verl_dataset import task_rows

    tokenizer, processor = tiny_qwen_vl()
    manager = StandInServerManager(tokenizer, processor)
    manager.load_weights(7)
    manager.load_weights(8, after_calls=1)

    async def run() -> Any:
        loop = _verl_loop(tokenizer, processor, manager, response_length=8192)
        return await loop.run({"temperature": 1.0}, **task_rows(TASKS[:1])[0])

    output = asyncio.run(run())
    versions = output.extra_fields["weight_versions"]
    assert versions[0] == "7" and set(versions[1:]) == {"8"} and len(versions) == output.num_turns // 2 >= 2
    assert (output.extra_fields["min_global_steps"], output.extra_fields["max_global_steps"]) == (7, 8)


@pytest.mark.slow
@needs_verl
def test_response_length_drops_whole_turns_with_their_images() -> None:
    from verl_dataset import task_rows

    tokenizer, processor = tiny_qwen_vl()
    manager = StandInServerManager(tokenizer, processor)
    task = max(TASKS, key=lambda t: len(t.instruction))  # several steps to solve
    response_length = 400  # a couple of turns: replies are ~120 byte tokens, a user turn with its image ~50

    async def run() -> Any:
        loop = _verl_loop(tokenizer, processor, manager, response_length=response_length)
        return await loop.run({"temperature": 1.0}, **task_rows([task])[0])

    output = asyncio.run(run())
    pad = tokenizer.convert_tokens_to_ids(_IMAGE_PAD)
    sequence = output.prompt_ids + output.response_ids
    images = output.multi_modal_data["images"]
    played = len(manager.calls)
    assert output.extra_fields["truncated"] and output.extra_fields["turns_dropped"] == played - len(images) >= 1
    assert len(output.response_ids) <= response_length and output.response_mask[-1] == 1
    assert _runs(sequence, pad) == len(images) == output.num_turns // 2
    assert sequence.count(pad) == sum(_pads(processor, image) for image in images)
    assert _image_alignment_by_verl(tokenizer, processor, output)["image_grid_thw"].shape[0] == len(images)


@needs_verl
def test_a_text_only_processor_or_no_server_manager_is_refused() -> None:
    from transformers import AutoTokenizer

    tokenizer, processor = tiny_qwen_vl()
    with pytest.raises(ConfigError, match="policy_url"):
        _verl_loop(tokenizer, processor, None, response_length=512)
    loop = _verl_loop(tokenizer, None, StandInServerManager(tokenizer, processor), response_length=512)
    from verl_dataset import task_rows

    with pytest.raises(ConfigError, match="vision-language"):
        asyncio.run(loop.run({}, **task_rows(TASKS[:1])[0]))
    assert AutoTokenizer  # the text-only path is verl's own builder for a tokenizer without processor


@needs_verl
def test_a_failing_server_manager_is_the_policys_failure_and_frees_the_desktop() -> None:
    from verl_dataset import task_rows

    from legato_rl.errors import PolicyError, PolicyResponseError

    tokenizer, processor = tiny_qwen_vl()

    class Failing(StandInServerManager):
        async def generate(self, request_id: str, **kwargs: Any) -> Any:
            raise RuntimeError("replica 2 died")

    class NoLogprobs(StandInServerManager):
        async def generate(self, request_id: str, **kwargs: Any) -> Any:
            output = await super().generate(request_id, **kwargs)
            return output.model_copy(update={"log_probs": None})

    for manager, error, match in (
        (Failing(tokenizer, processor), PolicyError, "replica 2 died"),
        (NoLogprobs(tokenizer, processor), PolicyResponseError, "logprobs"),
    ):
        loop = _verl_loop(tokenizer, processor, manager, response_length=512)
        with pytest.raises(error, match=match):
            asyncio.run(loop.run({}, **task_rows(TASKS[:1])[0]))
        assert loop.pool.free.qsize() == 2  # the desktop went back to the pool


@pytest.mark.slow
@needs_verl
def test_a_fixed_policy_url_is_an_explicit_logged_choice(
    server: ReferencePolicyServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tiny_qwen import build_tiny_qwen
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    from verl_dataset import task_rows

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_qwen(tmp_path / "tiny"))

    async def run() -> list[Any]:
        loop = _verl_loop(tokenizer, None, None, response_length=4096, policy_url=server.url, policy_model=server.model)
        return list(await asyncio.gather(*(loop.run({"temperature": 1.0}, **row) for row in task_rows(TASKS[:3]))))

    with caplog.at_level(logging.WARNING, logger="verl_agent_loop"):
        outputs = asyncio.run(run())
    assert any("off-policy" in r.getMessage() and server.url in r.getMessage() for r in caplog.records)
    first_prompts = _first_prompts(server)
    for output in outputs:
        assert isinstance(output, AgentLoopOutput)
        assert output.prompt_ids in first_prompts and output.reward_score == 1.0
        batch = output.as_dict()
        assert batch["responses"].shape == batch["response_mask"].shape == batch["rollout_log_probs"].shape


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


def test_fields_follow_verls_documented_contract_without_verl(server: ReferencePolicyServer) -> None:
    from legato_gym.vector import DesktopVectorEnv
    from legato_rl.integrations.sequence import play_sequences
    from legato_rl.integrations.verl import agent_loop_fields

    async def play() -> Any:
        async with PolicyClient(PolicyConfig(server.url, server.model)) as client:
            return await play_sequences(env, client, QwenHarness(image_max=9), TASKS[:2], max_steps=8)

    with DesktopVectorEnv(2, "fake", DESKTOP, max_steps=8) as env:
        trajectories = asyncio.run(play())
    for trajectory in trajectories:
        fields = agent_loop_fields(trajectory, response_length=4096)
        assert set(fields) == AGENT_LOOP_FIELDS
        assert fields["prompt_ids"] in _first_prompts(server) and fields["reward_score"] == 1.0


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

    _, processor = tiny_qwen_vl()
    steps = RLHFDataset(str(tmp_path / "steps.parquet"), tokenizer, config, processor=processor)
    item = steps[0]
    kinds = [part["type"] for message in item["raw_prompt"] for part in message["content"]]
    assert kinds.count("image") >= 1 and "text" in kinds
