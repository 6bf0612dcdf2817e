"""The reference policy server: a real HTTP server on loopback that follows vLLM's OpenAI-compatible contract.

It answers ``GET /v1/models``, ``GET /health``, SGLang's ``POST /update_weight_version`` (a trainer labels
new weights) and non-streaming ``POST /v1/chat/completions`` with what
a real server would return (ids, usage with ``prompt_tokens_details.cached_tokens``, ``logprobs.content``,
token ids, reasoning), in the field names of the chosen behaviour:

============== =====================================================================================
behaviour      what it mimics
============== =====================================================================================
``vllm``       vLLM 0.33: ``choices[i].token_ids`` and top-level ``prompt_token_ids`` when
               ``return_token_ids`` is set (``null`` otherwise); ``choices[i].weight_versions`` when
               ``return_weight_versions`` is set; ``message.reasoning``; unknown fields ignored.
``vllm-0.10.1`` vLLM before 0.10.2: ``return_token_ids`` ignored (no token-id fields at all);
               ``message.reasoning_content``.
``openai``     OpenAI: HTTP 400 ``Unrecognized request argument supplied: <field>`` for unknown fields;
               no token ids; ``prompt_tokens_details.cached_tokens`` always (0 below 1024 tokens,
               then in steps of 128).
``sglang``     SGLang 0.5.23: ``choices[i].prompt_token_ids`` and ``choices[i].response_token_ids``;
               ``message.reasoning_content``; unknown fields silently dropped; ``metadata.weight_version``.
============== =====================================================================================

Tokens come from :class:`~legato_rl.testing.tokenizer.ToyTokenizer` (deterministic; images cost one token
per 32x32 patch), and ``cached_tokens`` from a real prefix cache over those tokens: an LRU of 16-token
blocks keyed by chained hashes, as vLLM's, so ``cached_tokens`` is the longest cached block-aligned prefix
(at most ``prompt_tokens - 1``, as vLLM always computes the last prompt token).

Fault injection (:class:`Faults`) answers chosen chat requests badly instead: by a script for the first
requests, by a ``plan`` that picks per request (from its number and its body), or at random rates.

=================== ===================================================================================
fault               the answer
=================== ===================================================================================
``500``             HTTP 500 with vLLM's error body
``429``             HTTP 429 (``Retry-After`` when :attr:`Faults.retry_after` is set)
``hang``            nothing for :attr:`Faults.hang_seconds`, then the connection is closed unanswered
``malformed``       HTTP 200 whose body is the first 40 bytes of the completion's JSON
``drop``            the connection is closed without an answer
``half``            HTTP 200 with the full ``Content-Length``, half the body, then the connection closed
``surrogate``       a valid completion whose ``content`` ends with a lone surrogate (``"\\ud800"``)
``deep``            HTTP 200 whose body is :attr:`Faults.depth` nested JSON arrays (100,000 by default)
``deep-tool-call``  a valid completion whose ``content`` is an ``Action:`` line and a ``<tool_call>``
                    holding :attr:`Faults.depth` nested brackets
``huge``            a valid completion padded to :attr:`Faults.huge_bytes` bytes (24 MiB by default)
=================== ===================================================================================

The server is three modules besides this one: :mod:`legato_rl.testing.chat_api` (the requests refused and the
reply's fields, per behaviour), :mod:`legato_rl.testing.engine` (the prefix cache and the simulated compute time)
and ``_http_server.py`` (the HTTP/1.1 plumbing). Every name is importable from here and from
:mod:`legato_rl.testing`.

Use it in tests as a context manager::

    with ReferencePolicyServer(brain=ScriptedSolver(), behaviour="vllm") as server:
        config = PolicyConfig(server.url, server.model)

or from a shell: ``python -m legato_rl.testing.server --port 8000 --brain scripted``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from legato_gym.errors import ConfigError
from legato_rl.testing import chat_api
from legato_rl.testing._http_server import Handler, HTTPServer
from legato_rl.testing.brains import Brain, Reply, ScriptedSolver, brain_named
from legato_rl.testing.chat_api import BEHAVIOURS, completion_body, request_problem, token_logprobs
from legato_rl.testing.engine import Latency, PrefixCache
from legato_rl.testing.tokenizer import IM_END, SPECIAL_TOKENS, ToyTokenizer

__all__ = [
    "BEHAVIOURS",
    "FAULTS",
    "HOSTILE_REPLIES",
    "FaultPlan",
    "Faults",
    "Latency",
    "PrefixCache",
    "RecordedRequest",
    "ReferencePolicyServer",
    "ServerStats",
    "main",
]

logger = logging.getLogger(__name__)

#: Fault kinds (see the module docstring): the server failing (``500``, ``429``, ``hang``, ``drop``, ``half``,
#: ``malformed``) and hostile replies (``surrogate``, ``deep``, ``deep-tool-call``, ``huge``). ``None`` or
#: ``"ok"`` in a script or plan means "answer normally".
FAULTS = ("500", "429", "hang", "malformed", "drop", "half", "surrogate", "deep", "deep-tool-call", "huge")
#: The hostile replies among :data:`FAULTS`: a well-framed HTTP 200 whose content no client should trust.
HOSTILE_REPLIES = ("surrogate", "deep", "deep-tool-call", "huge")

#: A fault plan: given a chat request's number (0 for the first valid chat request) and its JSON body,
#: the fault to inject, or ``None`` to let the script and the rates decide.
FaultPlan = Callable[[int, Mapping[str, Any]], "str | None"]


@dataclass(frozen=True)
class Faults:
    """Fault injection on chat requests, seeded.

    Which fault a chat request meets: the ``plan``'s answer unless it is ``None`` (``"ok"`` from the plan
    answers normally); else the request's ``script`` entry while any are left; else a draw against the
    ``rates``. The script and the draws advance on every request, whatever the plan says. Only valid chat
    requests meet faults (and are numbered), so a script or plan stays in step with the client's calls.

    Attributes:
        script: faults for the first chat requests, in order (a kind of :data:`FAULTS`, or ``None``/``"ok"``
            for a normal answer); then the rates apply.
        rates: chance of each fault per request after the script, e.g. ``{"500": 0.1, "drop": 0.05}``.
        seed: seeds the draws.
        hang_seconds: how long a hang holds the request before closing the connection unanswered.
        retry_after: ``Retry-After`` header (seconds) sent with 429, if any.
        plan: picks the fault per request (see :data:`FaultPlan`), e.g. to hit chosen tasks or steps. It runs
            on the server's request threads, one request at a time. A kind it returns that is not in
            :data:`FAULTS` answers HTTP 500 naming the mistake.
        depth: nesting of the ``deep`` body and of the ``deep-tool-call`` brackets.
        huge_bytes: size of the ``huge`` answer's body.
        refused_fields: request fields the server refuses, as OpenAI refuses a field it does not know: a
            request carrying one is answered HTTP 400 ``Unrecognized request argument supplied: <field>``
            (the first in this order), before any other fault, and is not numbered. E.g.
            ``("return_weight_versions",)``: a server that returns token ids but refuses the weight versions.

    Example:
        >>> from legato_rl.testing.server import Faults
        >>> every_third = Faults(plan=lambda number, body: "surrogate" if number % 3 == 2 else None)
    """

    script: Sequence[str | None] = ()
    rates: Mapping[str, float] = field(default_factory=dict)
    seed: int = 0
    hang_seconds: float = 600.0
    retry_after: float | None = None
    plan: FaultPlan | None = None
    depth: int = 100_000
    huge_bytes: int = 24 * 1024 * 1024
    refused_fields: Sequence[str] = ()

    def __post_init__(self) -> None:
        for kind in list(self.script) + list(self.rates):
            if kind not in (None, "ok", *FAULTS):
                raise ConfigError(f"unknown fault {kind!r}; choose from {', '.join(FAULTS)} (or None / 'ok')")
        if sum(self.rates.values()) > 1:
            raise ConfigError(f"fault rates {dict(self.rates)!r} add up to more than 1")
        if self.depth < 1 or self.huge_bytes < 1:
            raise ConfigError(f"depth={self.depth!r} and huge_bytes={self.huge_bytes!r} must be >= 1")


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received (the key is never recorded, only whether it matched)."""

    method: str
    path: str
    body: Any
    status: int
    fault: str | None
    authorized: bool


@dataclass
class ServerStats:
    """Counters of a :class:`ReferencePolicyServer` (a snapshot; see :attr:`ReferencePolicyServer.stats`)."""

    requests: int = 0
    chat_requests: int = 0
    inflight: int = 0
    max_inflight: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)


class ReferencePolicyServer:
    """A vLLM-faithful OpenAI-compatible chat server on 127.0.0.1, served from a background thread.

    Args:
        brain: decides the replies (default :class:`ScriptedSolver`).
        behaviour: ``vllm``, ``vllm-0.10.1``, ``openai`` or ``sglang`` (see the module docstring).
        model: the served model name.
        port: TCP port; 0 picks a free one.
        api_key: when set, every ``/v1`` request must carry ``Authorization: Bearer <api_key>`` (else 401).
        prompt_tokens_details: report ``usage.prompt_tokens_details.cached_tokens`` (vLLM
            ``--enable-prompt-tokens-details``, SGLang ``--enable-cache-report``); OpenAI always reports it.
        reasoning_parser: return the brain's reasoning in the reasoning field (vLLM ``--reasoning-parser``);
            otherwise it stays in the content as ``<think>...</think>``.
        latency: simulated compute time.
        faults: fault injection.
        block_size: prefix-cache block size in tokens.
        cache_blocks: prefix-cache capacity in blocks.
        seed: seeds the logprob values.
        return_logprobs: answer ``logprobs=true`` (``False`` mimics a server that drops them, as vLLM does
            with a reasoning parser and ``include_reasoning=false``).
        weight_version: the weight version label reported (SGLang ``metadata.weight_version``, vLLM
            ``weight_versions``); ``"default"`` as both servers until told otherwise. An attribute; SGLang's
            ``POST /update_weight_version {"new_version": ...}`` switches it, as a trainer does after an update.
        record_limit: the requests kept for :attr:`requests`, the most recent (their bodies hold the
            screenshots: ~0.35 MB an attempt); 0 keeps none (``legato rl collect --policy-url embedded``).

    Logprobs are float32 values (as vLLM computes them), written as JSON floats.
    """

    def __init__(
        self,
        brain: Brain | None = None,
        behaviour: str = "vllm",
        *,
        model: str = "legato/reference-policy",
        port: int = 0,
        api_key: str | None = None,
        prompt_tokens_details: bool = True,
        reasoning_parser: bool = True,
        latency: Latency | None = None,
        faults: Faults | None = None,
        block_size: int = 16,
        cache_blocks: int = 8192,
        seed: int = 0,
        return_logprobs: bool = True,
        weight_version: str = "default",
        record_limit: int = 256,
    ) -> None:
        if behaviour not in BEHAVIOURS:
            raise ConfigError(f"unknown behaviour {behaviour!r}; choose one of {', '.join(BEHAVIOURS)}")
        self.brain: Brain = brain if brain is not None else ScriptedSolver()
        self.behaviour = behaviour
        self.model = model
        self.port = port
        self.prompt_tokens_details = prompt_tokens_details
        self.reasoning_parser = reasoning_parser
        self.latency = latency or Latency()
        self.seed = seed
        self.return_logprobs = return_logprobs
        self.weight_version = weight_version
        self.tokenizer = ToyTokenizer()
        if behaviour == "openai":
            self.cache = PrefixCache(block_size=128, capacity=cache_blocks, min_tokens=1024)
        else:
            self.cache = PrefixCache(block_size=block_size, capacity=cache_blocks)
        self._key = api_key
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._latency_rng = random.Random(self.latency.seed)
        self._stats = ServerStats()
        if isinstance(record_limit, bool) or not isinstance(record_limit, int) or record_limit < 0:
            raise ConfigError(f"record_limit={record_limit!r} must be an int >= 0 (0 keeps no request)")
        self._records: deque[RecordedRequest] = deque(maxlen=record_limit)
        self.set_faults(faults or Faults())
        self._httpd: HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"ReferencePolicyServer(behaviour={self.behaviour!r}, model={self.model!r}, port={self.port})"

    # lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> ReferencePolicyServer:
        """Bind and serve from a background thread. Returns ``self``."""
        if self._httpd is not None:
            return self
        self._stop.clear()
        httpd = HTTPServer(("127.0.0.1", self.port), Handler)
        httpd.handle = self._handle
        self._httpd = httpd
        self.port = int(httpd.server_address[1])
        self._thread = threading.Thread(
            target=httpd.serve_forever, args=(0.05,), name=f"policy-server-{self.port}", daemon=True
        )
        self._thread.start()
        logger.info("reference policy server (%s) at %s", self.behaviour, self.url)
        return self

    def stop(self) -> None:
        """Stop serving, release hung requests and close every open connection. Idempotent."""
        self._stop.set()
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections()  # kept-alive connections too: a stopped server answers nothing more
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ReferencePolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL, ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # controls ------------------------------------------------------------------------------------------
    def set_faults(self, faults: Faults) -> None:
        """Replace the fault injection (the script starts again from its first entry)."""
        with self._lock:
            self.faults = faults
            self._script = list(faults.script)
            self._fault_rng = random.Random(faults.seed)
            self._chat_number = 0

    @property
    def stats(self) -> ServerStats:
        """A snapshot of the counters."""
        with self._lock:
            s = self._stats
            return ServerStats(
                s.requests, s.chat_requests, s.inflight, s.max_inflight, Counter(s.faults), Counter(s.statuses)
            )

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received, oldest first: the last ``record_limit`` of them (bodies included)."""
        with self._lock:
            return list(self._records)

    def reset_stats(self) -> None:
        """Zero the counters and forget the recorded requests."""
        with self._lock:
            self._stats = ServerStats(inflight=self._stats.inflight)
            self._records.clear()

    # request handling ----------------------------------------------------------------------------------
    def _record(self, method: str, path: str, body: Any, status: int, fault: str | None, authorized: bool) -> None:
        with self._lock:
            self._stats.statuses[status] += 1
            if self._records.maxlen:
                self._records.append(RecordedRequest(method, path, body, status, fault, authorized))

    def _authorized(self, handler: Handler) -> bool:
        if self._key is None:
            return True
        return handler.headers.get("Authorization", "") == f"Bearer {self._key}"

    def _next_fault(self, body: Mapping[str, Any]) -> str | None:
        with self._lock:
            number = self._chat_number
            self._chat_number += 1
            plan = self.faults.plan
        planned = plan(number, body) if plan is not None else None  # outside the lock: the plan may be slow
        with self._lock:
            # the script and the draws advance on every request, so a plan never shifts them
            chosen: str | None = None
            if self._script:
                kind = self._script.pop(0)
                chosen = None if kind in (None, "ok") else kind
            else:
                draw = self._fault_rng.random()
                total = 0.0
                for kind, rate in self.faults.rates.items():
                    total += rate
                    if draw < total:
                        chosen = kind
                        break
            if planned is not None:
                chosen = None if planned == "ok" else planned
            if chosen is not None:
                self._stats.faults[chosen] += 1
            return chosen

    def _handle(self, handler: Handler, method: str) -> None:
        path = handler.path.split("?", 1)[0].rstrip("/")
        with self._lock:
            self._stats.requests += 1
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        authorized = self._authorized(handler)
        handler.before_send = lambda status: self._record(method, path, None, status, None, authorized)
        if path == "/health" and method == "GET":
            handler.send_raw(200, b"")
            return
        if path.startswith("/v1") and not authorized:
            handler.send_json(401, {"error": "Unauthorized"})
            return
        if path == "/v1/models" and method == "GET":
            created = int(time.time())
            handler.send_json(
                200,
                {
                    "object": "list",
                    "data": [{"id": self.model, "object": "model", "created": created, "owned_by": "legato"}],
                },
            )
            return
        if path == "/v1/chat/completions" and method == "POST":
            self._chat(handler, raw, authorized)
            return
        if path == "/update_weight_version" and method == "POST":  # SGLang's: a trainer labels new weights
            label = chat_api.new_weight_version(raw) if authorized else None
            self.weight_version = label or self.weight_version  # one assignment: a reply reads it once
            handler.send_json(*chat_api.weight_version_answer(authorized, label))
            return
        handler.send_json(404, {"detail": "Not Found"})

    def _error(self, handler: Handler, status: int, message: str, kind: str, param: str | None = None) -> None:
        handler.send_json(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})

    def _chat(self, handler: Handler, raw: bytes, authorized: bool) -> None:
        path = "/v1/chat/completions"
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(handler, 400, "Invalid JSON body", "BadRequestError")
            return
        with self._lock:
            self._stats.chat_requests += 1
            self._stats.inflight += 1
            self._stats.max_inflight = max(self._stats.max_inflight, self._stats.inflight)
        fault: str | None = None

        def done(status: int) -> None:
            with self._lock:
                self._stats.inflight -= 1
            self._record("POST", path, body, status, fault, authorized)

        handler.before_send = done
        try:
            problem = request_problem(body, self.behaviour, self.model)
            refused = [name for name in self.faults.refused_fields if isinstance(body, dict) and name in body]
            if problem is None and refused:
                problem = 400, f"Unrecognized request argument supplied: {refused[0]}", "invalid_request_error", None
            if problem is not None:
                status, message, kind, param = problem
                self._error(handler, status, message, kind, param)
                return
            fault = self._next_fault(body)  # only valid requests meet faults, so a script stays in step
            self._chat_answer(handler, body, fault)
        finally:
            handler.fire(0)  # no answer was sent (the handler failed): still count the request as done

    def _chat_answer(self, handler: Handler, body: Any, fault: str | None) -> None:
        """Answer one valid chat request (or drop it, or hang), as ``fault`` says."""
        if fault == "hang":
            self._stop.wait(self.faults.hang_seconds)
            handler.drop()
            return
        if fault == "drop":
            handler.drop()
            return
        if fault == "500":
            self._error(handler, 500, "EngineCore encountered an issue (injected fault)", "InternalServerError")
            return
        if fault == "429":
            headers = {} if self.faults.retry_after is None else {"Retry-After": f"{self.faults.retry_after:g}"}
            handler.send_json(429, {"error": {"message": "Too many requests (injected fault)", "code": 429}}, headers)
            return
        if fault == "deep":
            depth = self.faults.depth
            handler.send_raw(200, b"[" * depth + b"]" * depth, quiet=True)
            return
        if fault is not None and fault not in FAULTS:
            self._error(handler, 500, f"the fault plan returned {fault!r}, not one of {FAULTS}", "InternalServerError")
            return
        try:
            payload, delay = self._completion(body)
        except Exception as exc:  # a brain bug answers 500, as a crashed engine would
            logger.exception("reference server: the brain failed")
            self._error(handler, 500, f"brain failed: {type(exc).__name__}: {exc}", "InternalServerError")
            return
        if delay > 0:
            self._stop.wait(delay)
        if fault == "malformed":
            handler.send_raw(200, json.dumps(payload).encode()[:40])
            return
        if fault == "half":
            handler.send_half(200, json.dumps(payload).encode())
            return
        message = payload["choices"][0]["message"]
        if fault == "surrogate":
            message["content"] = f"{message['content']}\ud800"  # json.dumps writes it as the escape \ud800
        elif fault == "deep-tool-call":
            depth = self.faults.depth
            message["content"] = f"Action: Click.\n<tool_call>\n{'[' * depth}{']' * depth}\n</tool_call>"
        elif fault == "huge":
            size = len(json.dumps(payload).encode())
            message["content"] = f"{message['content']}{' ' * max(0, self.faults.huge_bytes - size)}"
        handler.send_raw(200, json.dumps(payload).encode(), quiet=fault == "huge")

    def _completion(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        messages = body["messages"]
        prompt = self.tokenizer.prompt(messages, body.get("tools"))
        reply: Reply = self.brain.respond(messages)
        text = reply.content
        if reply.reasoning:
            text = f"<think>\n{reply.reasoning}\n</think>\n\n{reply.content}"
        pieces = self.tokenizer.pieces(text)
        ids = [self.tokenizer.piece_id(p) for p in pieces] + [IM_END]
        pieces = [*pieces, SPECIAL_TOKENS[IM_END]]
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        finish = "stop"
        if isinstance(max_tokens, int) and 0 < max_tokens < len(ids):
            ids, pieces, finish = ids[:max_tokens], pieces[:max_tokens], "length"
            text = "".join(pieces)
        if finish == "stop":
            content, reasoning = reply.content, reply.reasoning
        else:
            content, reasoning = text, None
        if reasoning and not self.reasoning_parser:
            content, reasoning = text, None
        if self.behaviour == "openai":
            reasoning = None

        cached = self.cache.lookup(prompt.cache_keys)
        self.cache.insert(list(prompt.cache_keys) + list(ids))
        prompt_digest = hashlib.blake2b(repr(prompt.ids).encode(), digest_size=8).hexdigest()

        entries: list[dict[str, Any]] | None = None
        if body.get("logprobs") and self.return_logprobs:
            top = int(body.get("top_logprobs") or 0)
            entries = token_logprobs(pieces, ids, seed=self.seed, digest=prompt_digest, top=top)
        payload = completion_body(
            self.behaviour,
            model=self.model,
            content=content,
            reasoning=reasoning,
            finish=finish,
            logprobs=entries,
            ids=ids,
            prompt_ids=prompt.ids,
            cached=cached,
            return_token_ids=bool(body.get("return_token_ids")),
            return_weight_versions=bool(body.get("return_weight_versions")),
            weight_version=self.weight_version,
            prompt_tokens_details=self.prompt_tokens_details,
        )
        with self._lock:
            draw = self._latency_rng.random()
        return payload, self.latency.delay(len(prompt.ids) - cached, len(ids), draw)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m legato_rl.testing.server``: serve the reference policy until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m legato_rl.testing.server",
        description="A vLLM-faithful OpenAI-compatible policy server on 127.0.0.1, for trying legato without GPUs.",
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: pick a free one)")
    parser.add_argument("--brain", choices=["scripted", "random", "replay"], default="scripted")
    parser.add_argument("--replies", help="with --brain replay: a JSON file holding a list of reply texts")
    parser.add_argument("--behaviour", choices=BEHAVIOURS, default="vllm")
    parser.add_argument("--model", default="legato/reference-policy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--weight-version", default="default", help="the weight version label reported (SGLang, vLLM >= 0.33)"
    )
    parser.add_argument("--latency", type=float, default=0.0, help="fixed seconds per request")
    parser.add_argument("--per-token", type=float, default=0.0, help="seconds per generated token")
    parser.add_argument(
        "--require-key", action="store_true", help="require the key in $LEGATO_POLICY_KEY (401 otherwise)"
    )
    parser.add_argument(
        "--no-prompt-tokens-details", action="store_true", help="do not report cached tokens (vLLM's default)"
    )
    args = parser.parse_args(argv)
    key = os.environ.get("LEGATO_POLICY_KEY") if args.require_key else None
    if args.require_key and not key:
        print("--require-key: set LEGATO_POLICY_KEY first", file=sys.stderr)
        return 2
    server = ReferencePolicyServer(
        brain_named(args.brain, args.seed, args.replies),
        args.behaviour,
        model=args.model,
        port=args.port,
        api_key=key,
        prompt_tokens_details=not args.no_prompt_tokens_details,
        latency=Latency(fixed=args.latency, per_token=args.per_token, seed=args.seed),
        seed=args.seed,
        weight_version=args.weight_version,
    )
    server.start()
    print(server.url, flush=True)
    print(f"model: {server.model}  behaviour: {server.behaviour}  (Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
