"""verl 0.9.1: legato's attempt loop generating through verl's own server manager, and verl's output fields.

verl starts its vLLM/SGLang replicas on ports it picks at launch and syncs the actor's weights into them
before each rollout. An agent loop that asks a fixed URL would be trained off-policy; this module makes the
agent loop's policy verl's ``server_manager`` (``LLMServerClient.generate``: token ids in, token ids and
logprobs out), while legato keeps the desktops, the harness and the records:

* :class:`ServerManagerPolicy` is a :class:`legato_rl.rollout.Policy`. It renders each prompt with verl's
  own continuous-token builder (``AgentLoopBase.continuous_token_builder``, the path verl's own
  ``ToolAgentLoop`` takes, the processor expanding the screenshots' placeholders), appends a turn's new
  messages to the previous prompt and reply ids rather than re-tokenize them, and asks the server manager
  with every screenshot of the prompt. The reply text is the tokenizer's decoding of the sampled ids, and
  the weight version is the ``global_steps`` verl's server reports.
* :func:`agent_loop_fields` turns a :class:`~legato_rl.integrations.sequence.Trajectory` into the fields
  of verl's ``AgentLoopOutput``, cutting whole trailing turns (and their screenshots) to fit
  ``response_length``: images and image placeholders stay one to one, as verl requires.
* :class:`DesktopPool` and :func:`task_of_row` share one vector env between the agent loop objects of a
  worker process (verl builds one per row) and find a row's task.

The agent loop class itself subclasses verl's ``AgentLoopBase``, so it lives with verl installed:
``examples/verl_agent_loop.py``. This module imports nothing of verl: it is duck-typed on the server
manager and the builder, and tested against verl's real types in verl's own environment.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from legato_gym import ConfigError, DesktopConfig, Task
from legato_gym.vector import DesktopVectorEnv
from legato_rl.errors import PolicyError, PolicyResponseError
from legato_rl.integrations.sequence import Trajectory
from legato_rl.policy import ChatResult

__all__ = [
    "AGENT_LOOP_FIELDS",
    "ContinuousTokenBuilder",
    "DesktopPool",
    "ServerManager",
    "ServerManagerPolicy",
    "agent_loop_fields",
    "extra_fields",
    "task_of_row",
]

log = logging.getLogger(__name__)

#: The ``AgentLoopOutput`` fields :func:`agent_loop_fields` fills (verl 0.9.1).
AGENT_LOOP_FIELDS = (
    "prompt_ids", "response_ids", "response_mask", "response_logprobs", "multi_modal_data", "reward_score", "num_turns",
)  # fmt: skip
_DATA_URL = "data:image/"


class ServerManager(Protocol):
    """verl's ``LLMServerClient`` (``AgentLoopBase.server_manager``), as far as legato uses it."""

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
    ) -> Any:
        """A ``TokenOutput``: ``token_ids``, ``log_probs``, ``stop_reason``, ``extra_fields``."""
        ...


class ContinuousTokenBuilder(Protocol):
    """verl's continuous-token builder (``AgentLoopBase.continuous_token_builder``), as far as legato uses it."""

    def supports_multimodal(self) -> bool:
        """Whether it renders images (a VL builder with a processor)."""
        ...

    def build_initial_tokens(self, messages: list[dict[str, Any]], *, images: list[Any] | None = None) -> list[int]:
        """The prompt ids of ``messages`` with the generation prompt."""
        ...

    def merge_assistant_tokens(self, runtime_token_ids: list[int], assistant_token_ids: list[int]) -> Any:
        """A ``MergeResult`` whose ``token_ids`` are the prompt followed by the reply."""
        ...

    def merge_context_tokens(
        self,
        previous_messages: list[dict[str, Any]],
        updated_messages: list[dict[str, Any]],
        runtime_token_ids: list[int],
    ) -> Any:
        """A ``MergeResult`` whose ``token_ids`` append the messages added since ``previous_messages``."""
        ...


@dataclass
class _Sequence:
    """What one rollout's next prompt is built on."""

    messages: list[Mapping[str, Any]]  # the OpenAI messages of the previous prompt
    rendered: list[dict[str, Any]]  # the same, plus the reply, as the builder takes them
    token_ids: list[int]  # the previous prompt's ids and the reply's
    images: dict[str, Any]  # data URL -> PIL image, every screenshot sent so far


class ServerManagerPolicy:
    """A :class:`~legato_rl.rollout.Policy` that generates through verl's server manager (see the module docstring).

    Args:
        server_manager: ``AgentLoopBase.server_manager`` (verl's ``LLMServerClient``), or a stand-in with its
            ``generate``.
        builder: ``AgentLoopBase.continuous_token_builder``; a multimodal one (a VL model's processor) since
            every prompt holds screenshots.
        tokenizer: ``AgentLoopBase.tokenizer``, to decode the replies for the harness.
        sampling_params: the ``sampling_params`` verl passed to ``run`` (``logprobs`` is always asked for).
        model: a name for the records (the served model's).

    Raises:
        ConfigError: the builder cannot render images (``processor=None``, or a text-only model).
    """

    def __init__(
        self,
        server_manager: ServerManager,
        builder: ContinuousTokenBuilder,
        tokenizer: Any,
        *,
        sampling_params: Mapping[str, Any],
        model: str = "verl",
    ) -> None:
        if not builder.supports_multimodal():
            raise ConfigError(
                f"{type(builder).__name__} cannot render screenshots: verl built a text-only continuous-token "
                "builder (no processor). Train a vision-language model (e.g. Qwen2.5-VL, Qwen3-VL) so verl loads "
                "its processor"
            )
        self.server_manager = server_manager
        self.builder = builder
        self.tokenizer = tokenizer
        self.sampling_params = {**sampling_params, "logprobs": True}
        self.model = model
        self._sequences: dict[str, _Sequence] = {}

    def forget(self, rollout_id: str) -> None:
        """Drop the rollout's token sequence."""
        self._sequences.pop(rollout_id, None)

    async def chat(self, messages: Sequence[Mapping[str, Any]], *, rollout_id: str) -> ChatResult:
        """Render ``messages`` to token ids, generate through the server manager, and decode the reply.

        Raises:
            PolicyResponseError: the messages hold an image that is not a data URL, or the server manager
                returned no token ids or not one logprob per token.
            PolicyError: the server manager failed.
        """
        started = time.monotonic()
        previous = self._sequences.get(rollout_id)
        images = dict(previous.images) if previous is not None else {}
        loop = asyncio.get_running_loop()
        # decoding a new screenshot takes milliseconds: off the loop (earlier ones are kept, decoded once)
        rendered = await loop.run_in_executor(None, lambda: [_render(message, images) for message in messages])
        prompt_images = [images[url] for url in _image_urls(messages)]
        if previous is not None and _continues(previous.messages, messages):
            merged = await loop.run_in_executor(
                None, self.builder.merge_context_tokens, previous.rendered, rendered, previous.token_ids
            )
            prompt_ids = list(merged.token_ids)
        else:
            if previous is not None:
                log.warning(
                    "rollout %s: the prompt does not extend the previous one (image_max reached?); rendered whole",
                    rollout_id,
                )
            prompt_ids = list(
                await loop.run_in_executor(
                    None, lambda: self.builder.build_initial_tokens(rendered, images=prompt_images or None)
                )
            )
        try:
            output = await self.server_manager.generate(
                rollout_id, prompt_ids=prompt_ids, sampling_params=dict(self.sampling_params),
                image_data=prompt_images or None,
            )  # fmt: skip
        except (PolicyError, asyncio.CancelledError):
            raise
        except Exception as exc:  # Ray's and the engine's errors: the policy's side, not the desktop's
            raise PolicyError(f"verl's server manager failed for rollout {rollout_id}: {exc!r}") from exc
        token_ids = [int(t) for t in output.token_ids]
        logprobs = None if output.log_probs is None else [float(x) for x in output.log_probs]
        if not token_ids:
            raise PolicyResponseError(f"verl's server manager returned no token ids for rollout {rollout_id}")
        if logprobs is None or len(logprobs) != len(token_ids):
            raise PolicyResponseError(
                f"verl's server manager returned {None if logprobs is None else len(logprobs)} logprobs for "
                f"{len(token_ids)} tokens (rollout {rollout_id}); legato passes sampling_params logprobs=True: check "
                "the rollout server honours it"
            )
        content = str(self.tokenizer.decode(token_ids, skip_special_tokens=True))
        merged = self.builder.merge_assistant_tokens(prompt_ids, token_ids)
        reply = {"role": "assistant", "content": content}
        self._sequences[rollout_id] = _Sequence(list(messages), [*rendered, reply], list(merged.token_ids), images)
        extra = getattr(output, "extra_fields", None) or {}
        steps = extra.get("global_steps")
        return ChatResult(
            content=content,
            reasoning=None,
            token_ids=token_ids,
            _prompt_ids=prompt_ids,
            logprobs=logprobs,
            tokens=None,
            finish_reason=_finish_reason(output, token_ids, self.tokenizer),
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(token_ids),
            cached_tokens=None,
            seconds=time.monotonic() - started,
            attempts=1,
            request={"model": self.model, "messages": list(messages), **self.sampling_params},
            url=None,
            weight_version=None if steps is None else str(steps),
        )


def _continues(previous: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]]) -> bool:
    """``messages`` are the previous prompt, an assistant reply, then user turns only."""
    n = len(previous)
    return (
        len(messages) > n + 1
        and list(messages[:n]) == list(previous)
        and messages[n].get("role") == "assistant"
        and all(m.get("role") == "user" for m in messages[n + 1 :])
    )


def _image_urls(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    return [
        _url_of(part)
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


def _url_of(part: Mapping[str, Any]) -> str:
    image = part["image_url"]
    return str(image["url"] if isinstance(image, Mapping) else image)


def _render(message: Mapping[str, Any], images: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI message as verl's builders take it: text as a string, images as ``{"type": "image"}`` blocks."""
    content = message.get("content")
    if not isinstance(content, list):
        return {"role": message["role"], "content": content}
    if all(part.get("type") == "text" for part in content):
        return {"role": message["role"], "content": "".join(str(part.get("text", "")) for part in content)}
    blocks: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "image_url":
            url = _url_of(part)
            if url not in images:
                images[url] = _decode_image(url)
            blocks.append({"type": "image", "image": images[url]})
        else:
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
    return {"role": message["role"], "content": blocks}


def _decode_image(url: str) -> Any:
    from PIL import Image

    if not url.startswith(_DATA_URL) or ";base64," not in url:
        raise PolicyResponseError(
            f"image {url[:40]!r}...: verl's server manager needs the pixels; the harness must send images as "
            "base64 data URLs (legato's QwenHarness does)"
        )
    try:
        data = base64.b64decode(url.split(";base64,", 1)[1], validate=True)
        image = Image.open(io.BytesIO(data))
        image.load()
    except (binascii.Error, OSError, ValueError) as exc:
        raise PolicyResponseError(f"image {url[:40]!r}... is not a readable base64 image: {exc}") from exc
    return image.convert("RGB")


def _finish_reason(output: Any, token_ids: Sequence[int], tokenizer: Any) -> str | None:
    """``stop`` when the reply ends with the end-of-turn token, ``length`` when it does not, else verl's own."""
    stop = getattr(output, "stop_reason", None)
    if stop == "aborted":
        return "abort"
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is not None:
        return "stop" if token_ids[-1] == eos else "length"
    return None if stop is None else str(stop)


def agent_loop_fields(
    trajectory: Trajectory, response_length: int | None = None, *, prompt_length: int | None = None
) -> dict[str, Any]:
    """The fields of verl's ``AgentLoopOutput`` for one episode (verl 0.9.1), cut to ``response_length``.

    ``response_ids`` holds the replies and the env tokens between them, ``response_mask`` is 1 on the
    replies' tokens only, ``response_logprobs`` are the server's (verl's ``rollout_log_probs``), and
    ``multi_modal_data["images"]`` holds the screenshot of each kept turn, as PIL images, in prompt order:
    verl runs its processor over them to rebuild the pixel inputs for the training forward pass. A sequence
    longer than ``response_length`` loses whole trailing turns with their screenshots
    (:meth:`Trajectory.cut`), never part of a turn, so every image keeps its placeholder tokens.

    Raises:
        ConfigError: the first prompt is longer than ``prompt_length`` (``rollout.prompt_length``): it holds a
            screenshot, so it cannot be cut without breaking the image's placeholders.
    """
    from PIL import Image

    if prompt_length is not None and len(trajectory.prompt_ids) > prompt_length:
        raise ConfigError(
            f"task {trajectory.task_id!r}: the first prompt has {len(trajectory.prompt_ids)} tokens, more than "
            f"rollout.prompt_length={prompt_length}, and a prompt with a screenshot cannot be cut. Raise "
            "rollout.prompt_length, or make the screenshot cost fewer tokens (a smaller screen, or the processor's "
            "max_pixels in data.mm_processor_kwargs)"
        )
    cut = trajectory if response_length is None else trajectory.cut(response_length)
    return {
        "prompt_ids": list(cut.prompt_ids),
        "response_ids": list(cut.completion_ids),
        "response_mask": list(cut.completion_mask),
        "response_logprobs": list(cut.logprobs),
        "multi_modal_data": {"images": [Image.fromarray(s) for s in cut.screenshots]},
        "reward_score": cut.reward,
        "num_turns": 2 * cut.num_turns,  # verl counts user and assistant turns
    }


def extra_fields(trajectory: Trajectory, response_length: int | None = None) -> dict[str, Any]:
    """``AgentLoopOutput.extra_fields`` for one episode: truncation, weight versions, verl's step range.

    ``truncated`` and ``turns_dropped`` say whether :func:`agent_loop_fields` dropped trailing turns;
    ``weight_versions`` lists the version each kept reply was generated with, and ``min_global_steps`` /
    ``max_global_steps`` are their range when they are verl's ``global_steps`` (what verl's own loops set).
    """
    cut = trajectory if response_length is None else trajectory.cut(response_length)
    steps = [int(v) for v in cut.weight_versions if v is not None and v.lstrip("-").isdigit()]
    fields: dict[str, Any] = {
        "task_id": trajectory.task_id,
        "status": trajectory.status,
        "truncated": cut.truncated,
        "turns_dropped": trajectory.num_turns - cut.num_turns,
        "weight_versions": list(cut.weight_versions),
        "turn_scores": [],
        "tool_rewards": [],
    }
    if steps:
        fields["min_global_steps"], fields["max_global_steps"] = min(steps), max(steps)
    return fields


@dataclass
class DesktopPool:
    """A worker process's desktops, shared by every agent loop object in it (verl builds one per row)."""

    env: DesktopVectorEnv
    free: asyncio.Queue[int]

    @classmethod
    def get(cls, backend: str, desktops: int, screen: tuple[int, int], max_steps: int) -> DesktopPool:
        """The pool for these arguments, built on first use."""
        key = (backend, desktops, screen, max_steps)
        pools = _POOLS
        if key not in pools:
            # workers PNG-encode the screenshots the harness sends (the driver's CPU is the scarce one)
            env = DesktopVectorEnv(desktops, backend, DesktopConfig(screen=screen), max_steps=max_steps, png=True)
            free: asyncio.Queue[int] = asyncio.Queue()
            for env_id in range(desktops):
                free.put_nowait(env_id)
            pools[key] = cls(env, free)
        return pools[key]


_POOLS: dict[tuple[str, int, tuple[int, int], int], DesktopPool] = {}


def task_of_row(row: Mapping[str, Any], tasks: Sequence[Task]) -> Task:
    """The task a dataset row names: ``extra_info.task`` (``Task.to_json()``, or it as JSON text) or ``.task_id``.

    Raises:
        ConfigError: the row names no task, or a ``task_id`` that is not among ``tasks``.
    """
    extra = row.get("extra_info") or {}
    task = extra.get("task")
    if isinstance(task, str):  # verl_dataset.py stores it as JSON text (task configs differ in shape)
        task = json.loads(task)
    if isinstance(task, Mapping):
        return Task.from_json(task)
    task_id = extra.get("task_id")
    for candidate in tasks:
        if candidate.task_id == task_id:
            return candidate
    raise ConfigError(
        f"row has no extra_info.task and its extra_info.task_id {task_id!r} is not a task of the env; write the "
        "dataset with examples/verl_dataset.py"
    )
