"""The policy client: asks an OpenAI-compatible server (vLLM, SGLang, OpenAI) for the next reply.

One :class:`PolicyClient` serves every desktop of a run. Its :class:`PolicyConfig` names the endpoint and
holds two values of their own, as httpx's client takes ``Timeout`` and ``Limits``: :class:`Sampling`
(temperature, top_p, max_tokens, extra request fields) and :class:`Limits` (caps, deadlines, retries). The
client keeps one pool of keep-alive connections, caps the model calls in flight across all callers
(``Limits.max_inflight``), bounds each HTTP attempt by ``Limits.step_timeout`` and retries timeouts,
connection errors, 5xx and 429 with bounded exponential backoff and jitter (never other 4xx). Every call
asks for what a trainer needs (``logprobs``, and vLLM's ``return_token_ids`` and
``return_weight_versions``) and reads what the server actually returned::

    import asyncio
    from legato_rl.policy import Limits, PolicyClient, PolicyConfig, Sampling

    async def main() -> None:
        config = PolicyConfig(
            "http://127.0.0.1:8000/v1",
            "Qwen/Qwen3-VL-8B-Instruct",
            sampling=Sampling(temperature=1.0, max_tokens=1024),
            limits=Limits(max_inflight=16, step_timeout=60.0),
        )
        async with PolicyClient(config) as client:
            result = await client.chat([{"role": "user", "content": "hi"}], rollout_id="r0")
            print(result.content, result.token_ids, result.logprobs)

    asyncio.run(main())

Token ids: vLLM >= 0.10.2 returns ``choices[i].token_ids`` and a top-level ``prompt_token_ids``; SGLang
returns ``choices[i].response_token_ids`` and ``choices[i].prompt_token_ids``; older vLLM ignores the request
field. A server that refuses an extra field with HTTP 400 naming it (OpenAI does) is asked again at once
without that field, and the client remembers that for the replica: the extras are dropped one at a time, so a
server that refuses only ``return_weight_versions`` still returns token ids (logprobs are always requested).

Weight version: SGLang reports ``metadata.weight_version``; vLLM >= 0.33 answers ``return_weight_versions``
with ``choices[i].weight_versions`` spans. :attr:`ChatResult.weight_version` holds the label, ``None``
from servers that report none.

Replicas: ``PolicyConfig.url`` may name several servers of one model. A rollout's calls stick to one
replica (its prefix cache is reused), a new rollout goes to the replica with the fewest calls in flight,
and a replica that fails is avoided for ``Limits.replica_cooldown`` seconds, then tried again; the first answer
clears it.

The API key comes from ``api_key=`` or ``$LEGATO_POLICY_KEY`` and is sent only as
``Authorization: Bearer <key>``; it never appears in a repr, a log line, an error or a :class:`ChatResult`
(in any spelling a server may echo it in: see :func:`legato_rl.errors.secret_forms`). A trailing newline is
stripped; a key with a CR, LF or other control character inside, or a non-ASCII one, is refused with
:class:`~legato_gym.errors.ConfigError` when the config or client is built, before any request. A policy URL
with a ``user:password@`` or a ``?query`` is refused the same way (legato never sends them, and they would
be copied into every error message). Desktop workers are started without ``$LEGATO_POLICY_KEY``.

TLS: certificates are verified against ``PolicyConfig.ca_bundle`` when given, else ``$SSL_CERT_FILE`` /
``$SSL_CERT_DIR`` when set, else certifi's bundle (or the system's).

Hostile replies (docs/reliability.md, "Hostile replies"): a reply costs at most ``Limits.max_reply_bytes`` of body
(default 8 MiB; a larger one is dropped unread as soon as its ``Content-Length`` or its bytes pass the bound)
and at most :data:`MAX_REPLY_DEPTH` levels of JSON nesting (deeper is refused by the parser, never recursed
into). A reply that is larger or deeper, or whose JSON holds a lone surrogate (``"\\ud800"``: text that is
not Unicode and that no record could store), raises :class:`PolicyResponseError` at once, not retried: the
scheduler records that attempt as ``error`` kind ``policy`` and the batch goes on.

The package, one concern a module (every name below is importable from ``legato_rl.policy``)::

    config.py    PolicyConfig (the endpoint), Sampling, Limits and their checks, KEY_ENV_VAR, ssl_context
    reply.py     the reply contract: ChatResult, parse_chat_completion, read_reply_json, MAX_REPLY_DEPTH
    client.py    PolicyClient: the connection pool, the limits, deadlines, errors, the vLLM extras
    retry.py     backoff_delay, retry_policy_call: bounded exponential backoff with jitter
    replicas.py  Replicas: sticky per rollout, least loaded for new rollouts, failing replicas cooled down

The errors are :mod:`legato_rl.errors`' ``PolicyError`` tree; every module logs to ``legato_rl.policy``.
"""

from legato_rl.policy.client import VLLM_EXTRAS, ClientState, PolicyClient
from legato_rl.policy.config import KEY_ENV_VAR, MAX_REPLY_BYTES, Limits, PolicyConfig, Sampling, ssl_context
from legato_rl.policy.reply import MAX_REPLY_DEPTH, ChatResult, parse_chat_completion, read_reply_json
from legato_rl.policy.retry import backoff_delay, retry_policy_call

__all__ = [
    "KEY_ENV_VAR",
    "MAX_REPLY_BYTES",
    "MAX_REPLY_DEPTH",
    "VLLM_EXTRAS",
    "ChatResult",
    "ClientState",
    "Limits",
    "PolicyClient",
    "PolicyConfig",
    "Sampling",
    "backoff_delay",
    "parse_chat_completion",
    "read_reply_json",
    "retry_policy_call",
    "ssl_context",
]
