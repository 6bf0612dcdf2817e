"""The chat-completions contract as vLLM, SGLang and OpenAI answer it, for the reference policy server.

:func:`request_problem` refuses a request as the chosen behaviour's server would (status, message, error
type and parameter), :func:`token_logprobs` writes ``logprobs.content`` with float32 values as vLLM computes
them, and :func:`completion_body` lays a reply out in the behaviour's field names. The behaviours are those of
:data:`BEHAVIOURS`, described in :mod:`legato_rl.testing.server`.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
import uuid
from collections.abc import Sequence
from typing import Any

from legato_rl.testing.tokenizer import IM_END

__all__ = [
    "BEHAVIOURS",
    "completion_body",
    "new_weight_version",
    "request_problem",
    "token_logprobs",
    "weight_version_answer",
]

BEHAVIOURS = ("vllm", "vllm-0.10.1", "openai", "sglang")

_OPENAI_FIELDS = frozenset(
    {
        "model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "n", "stop", "stream",
        "stream_options", "logprobs", "top_logprobs", "seed", "tools", "tool_choice", "parallel_tool_calls",
        "response_format", "presence_penalty", "frequency_penalty", "logit_bias", "user", "metadata", "store",
        "reasoning_effort", "modalities", "audio", "prediction", "service_tier",
    }
)  # fmt: skip
_MAX_LOGPROBS = 20


def request_problem(body: Any, behaviour: str, model: str) -> tuple[int, str, str, str | None] | None:
    """Why a server of ``behaviour`` serving ``model`` refuses the chat request ``body``, or ``None``.

    Returns:
        ``(status, message, error type, parameter)`` of the error answer, or ``None`` for a valid request.
    """
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return 400, "messages: field required (a list)", "BadRequestError", "messages"
    if behaviour == "openai":
        unknown = sorted(set(body) - _OPENAI_FIELDS)
        if unknown:
            return 400, f"Unrecognized request argument supplied: {unknown[0]}", "invalid_request_error", None
    if body.get("model") != model:
        message = f"The model `{body.get('model')}` does not exist."
        return 404, message, "NotFoundError", "model"
    top = body.get("top_logprobs") or 0
    if top and not body.get("logprobs"):
        return 400, "when using `top_logprobs`, `logprobs` must be set to true.", "BadRequestError", None
    if top > _MAX_LOGPROBS:
        return 400, f"top_logprobs={top} exceeds --max-logprobs={_MAX_LOGPROBS}", "BadRequestError", None
    return None


def token_logprobs(
    pieces: Sequence[str], ids: Sequence[int], *, seed: int, digest: str, top: int
) -> list[dict[str, Any]]:
    """``logprobs.content``: one entry per generated token, its value fixed by ``seed``, the prompt and the token.

    Args:
        pieces: the generated token strings.
        ids: their token ids.
        seed: the server's seed.
        digest: a digest of the prompt's token ids.
        top: ``top_logprobs`` asked for (0: none).
    """
    out = []
    for i, (piece, token_id) in enumerate(zip(pieces, ids, strict=True)):
        h = hashlib.blake2b(f"{seed}:{digest}:{i}:{token_id}".encode(), digest_size=4).digest()
        logprob = _float32(-3.0 * (int.from_bytes(h, "big") / 2**32) ** 2)
        entry: dict[str, Any] = {"token": piece, "logprob": logprob, "bytes": list(piece.encode())}
        alternatives = [{"token": piece, "logprob": logprob, "bytes": list(piece.encode())}]
        for k in range(1, top):
            alt = f"token_id:{(token_id + k) % 151_643}"
            alternatives.append({"token": alt, "logprob": logprob - k, "bytes": list(alt.encode())})
        entry["top_logprobs"] = alternatives[:top] if top else []
        out.append(entry)
    return out


def completion_body(
    behaviour: str,
    *,
    model: str,
    content: str,
    reasoning: str | None,
    finish: str,
    logprobs: list[dict[str, Any]] | None,
    ids: list[int],
    prompt_ids: list[int],
    cached: int,
    return_token_ids: bool,
    return_weight_versions: bool,
    weight_version: str,
    prompt_tokens_details: bool,
) -> dict[str, Any]:
    """A non-streaming chat completion in the field names (and the field order) of ``behaviour``.

    Args:
        behaviour: one of :data:`BEHAVIOURS`.
        model: the served model name.
        content: the reply text.
        reasoning: the reasoning, in the behaviour's reasoning field (never for ``openai``).
        finish: ``stop`` or ``length``.
        logprobs: ``logprobs.content`` (:func:`token_logprobs`), or ``None`` when not returned.
        ids: the generated token ids.
        prompt_ids: the prompt's token ids.
        cached: prompt tokens served from the prefix cache.
        return_token_ids: the request's ``return_token_ids``.
        return_weight_versions: the request's ``return_weight_versions``.
        weight_version: the weight version label reported.
        prompt_tokens_details: report ``usage.prompt_tokens_details.cached_tokens`` (OpenAI always does).
    """
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None, "tool_calls": []}
    if behaviour == "vllm":
        message["reasoning"] = reasoning
    elif behaviour != "openai":
        message["reasoning_content"] = reasoning

    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    choice["logprobs"] = {"content": logprobs} if logprobs is not None else None
    usage: dict[str, Any] = {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(ids),
        "total_tokens": len(prompt_ids) + len(ids),
        "prompt_tokens_details": None,
    }
    payload: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage,
    }
    if behaviour == "vllm":
        choice["stop_reason"] = None
        choice["token_ids"] = ids if return_token_ids else None
        spans = [{"version": weight_version, "start": 0, "end": len(ids)}]
        choice["weight_versions"] = spans if return_weight_versions else None
        payload["prompt_logprobs"] = None
        payload["prompt_token_ids"] = prompt_ids if return_token_ids else None
        payload["kv_transfer_params"] = None
        if prompt_tokens_details:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
    elif behaviour == "vllm-0.10.1":
        choice["stop_reason"] = None
        payload["prompt_logprobs"] = None
        payload["kv_transfer_params"] = None
        if prompt_tokens_details:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
    elif behaviour == "sglang":
        choice["matched_stop"] = IM_END if finish == "stop" else None
        choice["prompt_token_ids"] = prompt_ids if return_token_ids else None
        choice["response_token_ids"] = ids if return_token_ids else None
        payload["metadata"] = {"weight_version": weight_version}
        if prompt_tokens_details:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
    else:  # openai
        payload["system_fingerprint"] = "fp_legato"
        usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
    return payload


def new_weight_version(raw: bytes) -> str | None:
    """The label of SGLang's ``POST /update_weight_version`` body ``{"new_version": "step-42"}``, or ``None``."""
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    label = body.get("new_version") if isinstance(body, dict) else None
    return label if isinstance(label, str) and label else None


def weight_version_answer(authorized: bool, label: str | None) -> tuple[int, dict[str, Any]]:
    """The status and body SGLang answers ``POST /update_weight_version`` with."""
    if not authorized:
        return 401, {"error": "Unauthorized"}
    if label is None:
        message = "new_version must be a non-empty string"
        return 400, {"error": {"message": message, "type": "BadRequestError", "param": "new_version", "code": 400}}
    return 200, {"success": True, "message": f"weight version updated to {label}"}


def _float32(value: float) -> float:
    """``value`` rounded to the nearest float32, as vLLM's logprobs are."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])
