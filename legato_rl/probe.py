"""Check that a policy server returns what training needs, and say how to fix it if not (``legato rl probe``).

:func:`run_probe` runs one list of checks per replica: reachable, model served, a chat completion with an
image, logprobs (one per token), token ids (aligned with the logprobs), cached-token reporting (the same
long prompt twice), the reasoning field, latency. Every failed check names the server flag that fixes it.
A ``fail`` is a check that training depends on (unreachable, model not served, no chat, no logprobs);
missing token ids or cache reporting are ``warn`` (legato falls back). The command that prints the table
and sets the exit status is :mod:`legato_rl.cli.probe`.

Example::

    import asyncio
    from legato_rl.probe import run_probe

    checks = asyncio.run(run_probe(["http://127.0.0.1:8000/v1"], "Qwen/Qwen3-VL-8B-Instruct"))
    usable = not any(c.status == "fail" for c in checks)
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from legato_gym.png import encode_png
from legato_rl.errors import PolicyError, PolicyHTTPError, redact
from legato_rl.images import PngDataURL
from legato_rl.policy import KEY_ENV_VAR, ChatResult, Limits, PolicyClient, PolicyConfig, Sampling

__all__ = ["PROBE_TIMEOUT", "STATUSES", "Check", "run_probe"]

#: Default seconds allowed per probe request (``run_probe(timeout=...)``, ``legato rl probe --timeout``).
PROBE_TIMEOUT = 30.0

#: Statuses: ``ok``; ``warn`` (legato works around it; the fix is advised); ``fail`` (training cannot use
#: this server: exit 1); ``info``; ``skip`` (not run because an earlier check failed).
STATUSES = ("ok", "warn", "fail", "info", "skip")

FIX_KEY = f"set ${KEY_ENV_VAR} to the key the server was started with (vLLM --api-key)"
FIX_REACH = "start the server, and give its OpenAI-compatible base URL ending in /v1 (e.g. http://host:8000/v1)"
FIX_LOGPROBS = (
    "the server must honour logprobs=true: vLLM: do not run a reasoning parser with include_reasoning=false, "
    "keep --max-logprobs >= 0, and use --logprobs-mode processed_logprobs"
)
FIX_TOKEN_IDS = (
    "upgrade to vLLM >= 0.10.2 (return_token_ids) or SGLang >= 0.5.23; until then legato keeps the logprobs "
    "and the trainer must re-tokenize response_text"
)
FIX_CACHE_REPORT = "start vLLM with --enable-prompt-tokens-details (SGLang: --enable-cache-report)"
FIX_PREFIX_CACHE = (
    "turn prefix caching on: vLLM: drop --no-enable-prefix-caching (and keep --enable-prompt-tokens-details); "
    "SGLang: drop --disable-radix-cache"
)
FIX_REASONING = "for a thinking model start the server with --reasoning-parser <name> (e.g. qwen3)"
NOTE_PROCESSED = "vLLM: --logprobs-mode processed_logprobs makes them match the sampling temperature/top-p"


@dataclass(frozen=True)
class Check:
    """One probe check.

    Attributes:
        name: what was checked.
        status: ``ok``, ``warn``, ``fail``, ``info`` or ``skip``.
        detail: what was seen.
        fix: the server flag or action that fixes it (for ``warn``/``fail``/``info``).
        replica: the server URL the check ran against.
    """

    name: str
    status: str
    detail: str
    fix: str | None = None
    replica: str | None = None


def _probe_png(width: int = 64, height: int = 48) -> PngDataURL:
    """A small real PNG (a gradient) as a data URL."""
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack((x * 4 % 256, y * 5 % 256, np.full_like(x, 128)), axis=-1).astype(np.uint8)
    return PngDataURL(encode_png(pixels))


def _image_messages() -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": _probe_png()}},
                {"type": "text", "text": "Instruction: describe this screenshot in one short sentence."},
            ],
        }
    ]


def _long_messages() -> list[dict[str, Any]]:
    nonce = random.Random().getrandbits(64)  # a fresh prefix: the first call cannot be a cache hit
    words = " ".join(f"word{i % 97}" for i in range(1200))
    text = f"legato cache probe {nonce:x}. {words}\nInstruction: reply with one short sentence."
    return [{"role": "user", "content": text}]


async def _probe_replica(url: str, model: str, timeout: float, key: str | None) -> list[Check]:
    checks: list[Check] = []

    def add(name: str, status: str, detail: str, fix: str | None = None) -> None:
        checks.append(Check(name, status, redact(detail, key), fix, url))

    def skip(*names: str) -> list[Check]:
        for name in names:
            add(name, "skip", "not run: an earlier check failed")
        return checks

    later = ("model served", "chat with an image", "logprobs", "token ids", "cached tokens", "reasoning", "latency")
    config = PolicyConfig(
        url, model, api_key=key, sampling=Sampling(max_tokens=128), limits=Limits(step_timeout=timeout, retries=0)
    )
    async with PolicyClient(config) as client:
        try:
            served = await client.models(url)
        except PolicyHTTPError as exc:
            fix = FIX_KEY if exc.status_code in (401, 403) else FIX_REACH
            add("reachable", "fail", str(exc), fix)
            return skip(*later)
        except PolicyError as exc:
            add("reachable", "fail", str(exc), FIX_REACH)
            return skip(*later)
        add("reachable", "ok", f"GET {url}/models answered")
        if model not in served:
            add(
                "model served",
                "fail",
                f"{model!r} is not served; the server has {served}",
                f"pass --model {served[0]!r}" if served else "start the server with this model (vllm serve MODEL)",
            )
            return skip(*later[1:])
        add("model served", "ok", model)

        seconds: list[float] = []
        try:
            result = await client.chat(_image_messages(), rollout_id="legato-probe")
        except PolicyError as exc:
            add(
                "chat with an image",
                "fail",
                str(exc),
                "serve a vision-language model; vLLM: allow images with --limit-mm-per-prompt '{\"image\": 5}'",
            )
            return skip(*later[2:])
        seconds.append(result.seconds)
        add(
            "chat with an image",
            "ok",
            f"{result.prompt_tokens} prompt tokens, {result.completion_tokens} completion tokens, "
            f"finish_reason={result.finish_reason}",
        )
        _logprob_checks(result, "return_token_ids" in client.refused_extras(url), add)

        cache_results: list[ChatResult] = []
        try:
            messages = _long_messages()
            for _ in range(2):
                cache_results.append(await client.chat(messages, rollout_id="legato-probe-cache"))
                seconds.append(cache_results[-1].seconds)
        except PolicyError as exc:
            add("cached tokens", "warn", f"the long-prompt calls failed: {exc}", FIX_CACHE_REPORT)
        else:
            second = cache_results[1]
            if second.cached_tokens is None:
                add(
                    "cached tokens",
                    "warn",
                    "usage.prompt_tokens_details.cached_tokens is not reported",
                    FIX_CACHE_REPORT,
                )
            elif second.cached_tokens > 0:
                add(
                    "cached tokens",
                    "ok",
                    f"the same prompt twice: {second.cached_tokens} of {second.prompt_tokens} prompt tokens cached",
                )
            else:
                add(
                    "cached tokens",
                    "warn",
                    "reported, but 0 tokens cached when the same prompt came twice",
                    FIX_PREFIX_CACHE,
                )

        everything = [result, *cache_results]
        if any(r.reasoning for r in everything):
            add("reasoning", "ok", "the reasoning field is returned (message.reasoning / reasoning_content)")
        elif any("<think>" in r.content for r in everything):
            add("reasoning", "warn", "reasoning comes inside the content (<think>...</think>)", FIX_REASONING)
        else:
            add("reasoning", "info", "no reasoning returned (fine for a non-thinking model)", FIX_REASONING)

        ms = sorted(s * 1000 for s in seconds)
        add("latency", "ok", f"{len(ms)} calls: median {statistics.median(ms):.0f} ms, max {ms[-1]:.0f} ms")
    return checks


def _logprob_checks(result: ChatResult, refused: bool, add: Any) -> None:
    lp = result.logprobs
    if not lp:
        add("logprobs", "fail", "no logprobs in the answer (choices[0].logprobs.content)", FIX_LOGPROBS)
    elif result.completion_tokens is not None and len(lp) != result.completion_tokens:
        add(
            "logprobs",
            "warn",
            f"{len(lp)} logprobs for {result.completion_tokens} completion tokens (not one per token)",
            FIX_LOGPROBS,
        )
    else:
        add("logprobs", "ok", f"{len(lp)} logprobs, one per token. {NOTE_PROCESSED}")

    ids = result.token_ids
    if refused:
        add(
            "token ids", "warn", "the server refused return_token_ids (HTTP 400); asked again without it", FIX_TOKEN_IDS
        )
    elif ids is None:
        add("token ids", "warn", "return_token_ids was sent but no token ids came back", FIX_TOKEN_IDS)
    elif lp is not None and len(ids) != len(lp):
        add("token ids", "warn", f"{len(ids)} token ids but {len(lp)} logprobs: not aligned", FIX_TOKEN_IDS)
    else:
        prompt = "with" if result.prompt_token_ids else "without"
        add("token ids", "ok", f"{len(ids)} token ids aligned with the logprobs, {prompt} prompt_token_ids")


async def run_probe(
    urls: Sequence[str], model: str, *, timeout: float = PROBE_TIMEOUT, api_key: str | None = None
) -> list[Check]:
    """Run every check against every replica; ``api_key`` defaults to ``$LEGATO_POLICY_KEY``.

    Returns:
        The checks, replica by replica, in table order.
    """
    key = api_key or PolicyConfig(urls[0], model).resolved_api_key()
    results = await asyncio.gather(*(_probe_replica(u.rstrip("/"), model, timeout, key) for u in urls))
    return [check for checks in results for check in checks]
