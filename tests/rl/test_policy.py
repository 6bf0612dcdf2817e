"""The policy client against the reference server over real HTTP: parsing, retries, fallback, replicas, caps."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from _policy_kit import LONG_TEXT, png_data_url, run, user

from legato_gym.errors import ConfigError, LegatoError, StateError
from legato_rl import ChatResult, Limits, PolicyClient, PolicyConfig, Sampling
from legato_rl.errors import PolicyError, PolicyHTTPError, PolicyResponseError, PolicyTimeout, PolicyUnreachable
from legato_rl.policy import parse_chat_completion, read_reply_json
from legato_rl.policy.reply import cut_prompt_ids
from legato_rl.testing import Faults, Latency, ReferencePolicyServer, ReplayBrain, Reply

REPLY = Reply("Action: Click OK.\n<tool_call>\n{}\n</tool_call>", "I should click OK.")


def brain() -> ReplayBrain:
    return ReplayBrain([REPLY], cycle=True)


def fast(**kw: Any) -> Limits:
    """Limits with a backoff short enough for tests."""
    return Limits(**{"backoff": 0.001, "backoff_max": 0.01, **kw})


def config(server: ReferencePolicyServer | list[ReferencePolicyServer], **kw: Any) -> PolicyConfig:
    servers = server if isinstance(server, list) else [server]
    kw.setdefault("limits", fast())
    urls: str | tuple[str, ...] = servers[0].url if len(servers) == 1 else tuple(s.url for s in servers)
    return PolicyConfig(urls, servers[0].model, **kw)


async def one_chat(cfg: PolicyConfig, messages: list[dict[str, Any]] | None = None, rollout: str = "r0") -> ChatResult:
    async with PolicyClient(cfg) as client:
        return await client.chat(messages or [user("hello", png_data_url(640, 480))], rollout_id=rollout)


# --- config -----------------------------------------------------------------------------------------------


def test_config_normalises_and_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = PolicyConfig(("http://a:1/v1/", "http://b:2/v1"), "m", api_key="secret-value")
    assert cfg.urls == ("http://a:1/v1", "http://b:2/v1")
    assert PolicyConfig("http://a/v1/", "m").url == "http://a/v1"
    assert "secret-value" not in repr(cfg) and "secret-value" not in str(cfg)
    monkeypatch.setenv("LEGATO_POLICY_KEY", "from-env")
    assert PolicyConfig("http://a/v1", "m").resolved_api_key() == "from-env"
    assert cfg.resolved_api_key() == "secret-value"
    for bad in (
        {"url": "a:1/v1"},
        {"url": ()},
        {"url": ("http://a/v1", "http://a/v1/")},
        {"model": ""},
        {"limits": {"retries": 1}},
        {"sampling": Limits()},
    ):
        kwargs: dict[str, Any] = {"url": "http://a/v1", "model": "m", **bad}
        with pytest.raises(ConfigError):
            PolicyConfig(**kwargs)


@pytest.mark.parametrize(
    ("cls", "field", "value"),
    [
        (Limits, "max_inflight", 0),
        (Limits, "step_timeout", 0),
        (Limits, "step_timeout", float("nan")),
        (Limits, "retries", -1),
        (Limits, "retries", 1.5),
        (Limits, "backoff", -0.1),
        (Limits, "backoff_max", -1),
        (Limits, "replica_cooldown", -1),
        (Limits, "max_reply_bytes", 0),
        (Sampling, "temperature", -0.5),
        (Sampling, "temperature", "hot"),
        (Sampling, "top_p", 0),
        (Sampling, "top_p", 1.5),
        (Sampling, "max_tokens", 0),
        (Sampling, "extra_body", [("a", 1)]),
    ],
)
def test_sampling_and_limits_refuse_a_bad_field_naming_it(cls: type, field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"^{cls.__name__}\.{field}=") as info:
        cls(**{field: value})
    assert repr(value) in str(info.value)


def test_the_settings_live_in_sampling_and_limits_only() -> None:
    cfg = PolicyConfig("http://a/v1", "m", sampling=Sampling(temperature=0.3), limits=Limits(step_timeout=5.0))
    assert (cfg.sampling.temperature, cfg.sampling.max_tokens) == (0.3, 2048)
    assert (cfg.limits.step_timeout, cfg.limits.retries, cfg.limits.max_inflight) == (5.0, 1, None)
    assert (
        PolicyConfig("http://a/v1", "m").limits == Limits() and PolicyConfig("http://a/v1", "m").sampling == Sampling()
    )
    for flat in ("temperature", "max_tokens", "step_timeout", "retries", "max_inflight", "backoff", "extra_body"):
        assert not hasattr(cfg, flat), f"PolicyConfig.{flat} is a second place for a setting"
        with pytest.raises(TypeError):
            PolicyConfig("http://a/v1", "m", **{flat: 1})
    with pytest.raises(TypeError):
        PolicyConfig("http://a/v1", "m", "v1")  # type: ignore[misc]  # everything after the model is keyword-only


def test_sampling_and_limits_are_exported_where_policy_config_is() -> None:
    import legato.rl
    import legato_rl
    import legato_rl.policy

    for module in (legato_rl.policy, legato_rl, legato.rl):
        assert module.Sampling is Sampling and module.Limits is Limits, module.__name__
        assert {"Sampling", "Limits", "PolicyConfig"} <= set(module.__all__), module.__name__


def test_errors_are_one_tree() -> None:
    for cls in (PolicyTimeout, PolicyUnreachable, PolicyHTTPError, PolicyResponseError):
        assert issubclass(cls, PolicyError) and issubclass(cls, LegatoError)
    assert issubclass(PolicyTimeout, TimeoutError)
    assert PolicyHTTPError("x", status_code=503).retryable and PolicyHTTPError("x", status_code=429).retryable
    assert not PolicyHTTPError("x", status_code=400).retryable


# --- what comes back, per server --------------------------------------------------------------------------


@pytest.mark.parametrize("behaviour", ["vllm", "vllm-0.10.1", "openai", "sglang"])
def test_chat_reads_every_server(behaviour: str) -> None:
    with ReferencePolicyServer(brain(), behaviour) as server:
        result = run(one_chat(config(server)))
        assert result.content == REPLY.content
        assert result.logprobs is not None and len(result.logprobs) == result.completion_tokens
        assert result.prompt_tokens and result.prompt_tokens > 300  # 20x15 patches of the image count
        assert result.finish_reason == "stop" and result.seconds > 0 and result.url == server.url
        if behaviour in ("vllm", "sglang"):
            assert result.token_ids is not None and len(result.token_ids) == len(result.logprobs)
            assert result.prompt_token_ids is not None and len(result.prompt_token_ids) == result.prompt_tokens
            assert result.tokens is None
            assert result.attempts == 1
        else:
            assert result.token_ids is None and result.prompt_token_ids is None
            assert result.tokens is not None and len(result.tokens) == len(result.logprobs)
        assert result.reasoning == (None if behaviour == "openai" else REPLY.reasoning)
        assert result.attempts == (3 if behaviour == "openai" else 1)  # one 400 per extra field, then the answer
        assert result.cached_tokens == 0
        assert server.requests[-1].body == result.request


def _completion(prompt_ids: Any, *, nested: bool = False, content: str = "ok", separators: Any = None) -> bytes:
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": content}, "token_ids": [7, 8]}
    body: dict[str, Any] = {"id": "x", "choices": [choice], "usage": {"prompt_tokens": 3}}
    (choice if nested else body)["prompt_token_ids"] = prompt_ids
    return json.dumps(body, separators=separators).encode()


def _read(raw: bytes) -> ChatResult:
    answer, ids = cut_prompt_ids(raw)
    fields = parse_chat_completion(json.loads(answer), url="u", prompt_ids_json=ids)
    return ChatResult(**fields, seconds=0.0, attempts=1, request={})


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("separators", [None, (",", ":")])
def test_prompt_ids_are_read_when_asked_and_exactly(nested: bool, separators: Any) -> None:
    ids = list(range(151_000, 151_000 + 5000))
    raw = _completion(ids, nested=nested, separators=separators, content='say "prompt_token_ids":[1] please')
    answer, cut = cut_prompt_ids(raw)
    assert cut is not None and len(answer) < len(raw) // 4  # the array was taken out unparsed
    result = _read(raw)
    assert result.prompt_token_ids == ids and result.token_ids == [7, 8]
    assert result.content == 'say "prompt_token_ids":[1] please'
    assert "151000" not in repr(result)


@pytest.mark.parametrize("value", [None, [], [1.5, 2], [-1, 2], [1, [2]], "12"])
def test_prompt_ids_other_values_go_through_the_parser(value: Any) -> None:
    raw = _completion(value)
    if value in ([1.5, 2], [1, [2]]):
        with pytest.raises(PolicyResponseError):
            _read(raw).prompt_token_ids  # noqa: B018
        return
    if value == [-1, 2]:  # a negative id is not what a tokenizer gives, but it is an integer list: kept
        assert cut_prompt_ids(raw)[1] is None and _read(raw).prompt_token_ids == [-1, 2]
        return
    assert _read(raw).prompt_token_ids == (value if isinstance(value, list) else None)


def test_request_body() -> None:
    with ReferencePolicyServer(brain()) as server:
        cfg = config(
            server,
            sampling=Sampling(temperature=0.7, top_p=0.9, max_tokens=64, extra_body={"chat_template_kwargs": {"a": 1}}),
        )
        result = run(one_chat(cfg, [user("hi")]))
        body = server.requests[-1].body
    assert body == result.request
    assert body["logprobs"] is True and body["top_logprobs"] == 0 and body["return_token_ids"] is True
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.7, 0.9, 64)
    assert body["chat_template_kwargs"] == {"a": 1} and body["model"] == server.model


def test_cached_tokens_across_turns() -> None:
    async def go(cfg: PolicyConfig) -> tuple[ChatResult, ChatResult]:
        async with PolicyClient(cfg) as client:
            messages = [user(LONG_TEXT)]
            first = await client.chat(messages, rollout_id="r")
            second = await client.chat(
                [*messages, {"role": "assistant", "content": first.content}, user("next")], rollout_id="r"
            )
            return first, second

    with ReferencePolicyServer(brain()) as server:
        first, second = run(go(config(server)))
    assert first.cached_tokens == 0
    assert second.cached_tokens is not None and second.cached_tokens >= first.prompt_tokens // 16 * 16 - 16 > 0


def test_no_cached_tokens_without_prompt_tokens_details() -> None:
    with ReferencePolicyServer(brain(), prompt_tokens_details=False) as server:
        assert run(one_chat(config(server))).cached_tokens is None


# --- the 400 fallback -------------------------------------------------------------------------------------


def test_openai_400_fallback_is_remembered() -> None:
    async def go(cfg: PolicyConfig) -> tuple[list[ChatResult], frozenset[str]]:
        async with PolicyClient(cfg) as client:
            results = [await client.chat([user("hi")], rollout_id=f"r{i}") for i in range(3)]
            return results, client.extras_refused

    with ReferencePolicyServer(brain(), "openai") as server:
        results, refused = run(go(config(server)))
        statuses = [r.status for r in server.requests]
        bodies = [r.body for r in server.requests]
    # OpenAI names the first unknown field: each extra is refused, and dropped, in its turn
    assert statuses == [400, 400, 200, 200, 200]
    assert "return_token_ids" in bodies[0] and all("return_token_ids" not in b for b in bodies[1:])
    assert "return_weight_versions" in bodies[1] and all("return_weight_versions" not in b for b in bodies[2:])
    assert all(b["logprobs"] is True for b in bodies)
    assert [r.attempts for r in results] == [3, 1, 1]
    assert "return_token_ids" not in results[0].request
    assert refused == {server.url}


def test_a_server_refusing_only_return_weight_versions_keeps_token_ids() -> None:
    # issue 30, item 8: the extras are dropped one at a time, so the refusal of one keeps the other
    async def go(cfg: PolicyConfig) -> tuple[list[ChatResult], frozenset[str]]:
        async with PolicyClient(cfg) as client:
            results = [await client.chat([user("hi")], rollout_id=f"r{i}") for i in range(2)]
            return results, client.refused_extras(cfg.urls[0])

    faults = Faults(refused_fields=("return_weight_versions",))
    with ReferencePolicyServer(brain(), faults=faults) as server:
        results, refused = run(go(config(server)))
        answers = [(r.status, r.body) for r in server.requests]
    assert [status for status, _ in answers] == [400, 200, 200]
    assert all(body["return_token_ids"] is True for _, body in answers)
    assert "return_weight_versions" in answers[0][1] and all("return_weight_versions" not in b for _, b in answers[1:])
    assert all(r.token_ids and r.prompt_token_ids for r in results)
    assert refused == {"return_weight_versions"}
    assert [r.attempts for r in results] == [2, 1]


def test_other_400_is_not_a_fallback() -> None:
    with ReferencePolicyServer(brain(), "openai") as server:
        with pytest.raises(PolicyHTTPError) as info:
            run(one_chat(config(server, vllm_extras=False, sampling=Sampling(extra_body={"unknown_field": 1}))))
        assert info.value.status_code == 400 and "unknown_field" in str(info.value)
        assert server.stats.chat_requests == 1


# --- retries ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["500", "429", "malformed", "drop", "hang"])
def test_retries_each_retryable_fault(fault: str) -> None:
    with ReferencePolicyServer(brain(), faults=Faults(script=[fault])) as server:
        result = run(one_chat(config(server, limits=fast(retries=1, step_timeout=0.5))))
        assert result.attempts == 2 and result.content == REPLY.content
        assert server.stats.chat_requests == 2
        assert server.stats.faults == {fault: 1}


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("500", PolicyHTTPError),
        ("429", PolicyHTTPError),
        ("malformed", PolicyResponseError),
        ("drop", PolicyUnreachable),
        ("hang", PolicyTimeout),
    ],
)
def test_retries_are_bounded(fault: str, error: type[PolicyError]) -> None:
    with ReferencePolicyServer(brain(), faults=Faults(script=[fault] * 5)) as server:
        with pytest.raises(error) as info:
            run(one_chat(config(server, limits=fast(retries=2, step_timeout=0.3))))
        assert info.value.attempts == 3 and info.value.url == server.url
        assert server.stats.chat_requests == 3


def test_no_retry_on_401_404_and_bad_request() -> None:
    with ReferencePolicyServer(brain(), api_key="right") as server:
        with pytest.raises(PolicyHTTPError) as unauthorized:
            run(one_chat(config(server, api_key="wrong", limits=fast(retries=3))))
        assert unauthorized.value.status_code == 401 and "LEGATO_POLICY_KEY" in str(unauthorized.value)
        assert server.stats.statuses == {401: 1}

        with pytest.raises(PolicyHTTPError) as not_found:
            run(one_chat(PolicyConfig(server.url, "no/such-model", api_key="right", limits=Limits(retries=3))))
        assert not_found.value.status_code == 404 and server.stats.statuses[404] == 1

        with pytest.raises(PolicyHTTPError) as bad:
            run(
                one_chat(
                    config(
                        server,
                        api_key="right",
                        limits=fast(retries=3),
                        sampling=Sampling(extra_body={"top_logprobs": 99}),
                    )
                )
            )
        assert bad.value.status_code == 400 and server.stats.statuses[400] == 1
        assert len(server.requests) == 3


def test_timeout_and_unreachable() -> None:
    with ReferencePolicyServer(brain(), faults=Faults(script=["hang"])) as server:
        with pytest.raises(PolicyTimeout, match=r"step_timeout=0\.2s") as info:
            run(one_chat(config(server, limits=fast(retries=0, step_timeout=0.2))))
        assert isinstance(info.value, TimeoutError) and info.value.attempts == 1
        url = server.url
    with pytest.raises(PolicyUnreachable, match="cannot reach"):
        run(one_chat(PolicyConfig(url, "m", limits=Limits(retries=1, backoff=0.001))))


def test_closed_client_raises_state_error() -> None:
    async def go(cfg: PolicyConfig) -> None:
        client = PolicyClient(cfg)
        await client.aclose()
        await client.aclose()
        await client.chat([user("hi")], rollout_id="r")

    with pytest.raises(StateError, match="closed"):
        run(go(PolicyConfig("http://127.0.0.1:9/v1", "m")))


# --- concurrency cap ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cap", [3, None])
def test_max_inflight_is_shared_by_all_callers(cap: int | None) -> None:
    async def go(cfg: PolicyConfig) -> list[ChatResult]:
        async with PolicyClient(cfg) as client:
            return await asyncio.gather(*(client.chat([user("hi")], rollout_id=f"r{i}") for i in range(10)))

    with ReferencePolicyServer(brain(), latency=Latency(fixed=0.1)) as server:
        results = run(go(config(server, limits=fast(max_inflight=cap))))
        peak = server.stats.max_inflight
    assert len(results) == 10
    if cap is None:
        assert peak > 3
    else:
        assert peak == cap
        assert max(r.queued_s for r in results) > 0


def test_cancelled_call_releases_its_slot() -> None:
    async def go(cfg: PolicyConfig, server: ReferencePolicyServer) -> dict[str, int]:
        async with PolicyClient(cfg) as client:
            task = asyncio.create_task(client.chat([user("hi")], rollout_id="slow"))
            while server.stats.inflight == 0:  # the server holds the hung request
                await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await client.chat([user("hi")], rollout_id="next")  # the one slot is free again
            return client.inflight

    with ReferencePolicyServer(brain(), faults=Faults(script=["hang"])) as server:
        assert run(go(config(server, limits=fast(max_inflight=1)), server)) == {server.url: 0}


# --- replicas -----------------------------------------------------------------------------------------------


def test_rollouts_stick_to_a_replica_and_spread() -> None:
    async def go(cfg: PolicyConfig) -> dict[str, list[str | None]]:
        async with PolicyClient(cfg) as client:
            seen: dict[str, list[str | None]] = {}
            for step in range(3):
                for rollout in ("a", "b", "c", "d"):
                    result = await client.chat([user(f"{rollout} step {step}")], rollout_id=rollout)
                    seen.setdefault(rollout, []).append(result.url)
            return seen

    with ReferencePolicyServer(brain()) as one, ReferencePolicyServer(brain()) as two:
        seen = run(go(config([one, two])))
        counts = (one.stats.chat_requests, two.stats.chat_requests)
    assert all(len(set(urls)) == 1 for urls in seen.values())
    assert sorted(urls[0] for urls in seen.values()) == sorted([one.url, one.url, two.url, two.url])
    assert counts == (6, 6)


def test_new_rollouts_go_to_the_least_busy_replica() -> None:
    async def go(cfg: PolicyConfig) -> tuple[str | None, str | None, str | None]:
        async with PolicyClient(cfg) as client:
            slow = asyncio.create_task(client.chat([user("long")], rollout_id="slow"))
            while not sum(client.inflight.values()):
                await asyncio.sleep(0.005)
            busy = client.replica_of("slow")
            other = await client.chat([user("quick")], rollout_id="new")
            await slow
            return busy, other.url, client.replica_of("new")

    with (
        ReferencePolicyServer(brain(), latency=Latency(fixed=0.3)) as one,
        ReferencePolicyServer(brain(), latency=Latency(fixed=0.3)) as two,
    ):
        busy, other, pinned = run(go(config([one, two])))
    assert busy in (one.url, two.url) and other != busy and pinned == other


def test_failing_replica_is_avoided_until_it_answers() -> None:
    async def go(cfg: PolicyConfig, bad: ReferencePolicyServer) -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with PolicyClient(cfg) as client:
            first = await client.chat([user("hi")], rollout_id="r1")  # goes to bad first, retried elsewhere
            out["first"] = (first.url, first.attempts)
            out["r1_pinned"] = client.replica_of("r1")
            out["r2"] = (await client.chat([user("hi")], rollout_id="r2")).url
            out["bad_requests_while_down"] = bad.stats.chat_requests
            bad.set_faults(Faults())  # it heals; after the cooldown it is tried again
            deadline = time.monotonic() + 0.25
            while time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            out["r3"] = (await client.chat([user("hi")], rollout_id="r3")).url
            out["r1_again"] = (await client.chat([user("more")], rollout_id="r1")).url
        return out

    with (
        ReferencePolicyServer(brain(), faults=Faults(rates={"500": 1.0})) as bad,
        ReferencePolicyServer(brain()) as good,
    ):
        out = run(go(config([bad, good], limits=fast(retries=1, replica_cooldown=0.2)), bad))
    assert out["first"] == (good.url, 2)
    assert out["r1_pinned"] == good.url
    assert out["r2"] == good.url and out["bad_requests_while_down"] == 1
    assert out["r3"] == bad.url  # probed again after the cooldown, and it answers
    assert out["r1_again"] == good.url  # r1 stays where its cache is


def test_all_replicas_down_still_tries() -> None:
    with (
        ReferencePolicyServer(brain(), faults=Faults(script=["500"])) as one,
        ReferencePolicyServer(brain(), faults=Faults(script=["500"])) as two,
    ):
        result = run(one_chat(config([one, two], limits=fast(retries=2))))
        assert result.attempts == 3
        assert one.stats.chat_requests + two.stats.chat_requests == 3


def test_one_client_serves_successive_event_loops() -> None:
    # e.g. a trainer calling asyncio.run() once per batch with the same client: kept connections of the
    # first loop cannot serve the second, and must not break it
    with ReferencePolicyServer(brain()) as server:
        client = PolicyClient(config(server))
        first = asyncio.run(client.chat([user("hello")], rollout_id="r0"))
        second = asyncio.run(client.chat([user("again")], rollout_id="r0"))
        asyncio.run(client.aclose())
    assert first.content == second.content == REPLY.content


# --- hostile replies --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "match"),
    [
        ("surrogate", "lone surrogate"),
        ("deep", "nests deeper than 1024 levels"),
        ("huge", "larger than max_reply_bytes=8388608"),
    ],
)
def test_a_hostile_reply_is_refused_at_once_and_not_asked_again(fault: str, match: str) -> None:
    with ReferencePolicyServer(brain(), faults=Faults(script=[fault])) as server:
        with pytest.raises(PolicyResponseError, match=match) as info:
            run(one_chat(config(server, limits=fast(retries=3))))
        assert not info.value.retryable and info.value.attempts == 1 and info.value.url == server.url
        assert server.stats.chat_requests == 1 and server.stats.faults == {fault: 1}
        assert run(one_chat(config(server))).content == REPLY.content  # the client is fine afterwards


def test_max_reply_bytes_is_the_bound() -> None:
    with ReferencePolicyServer(brain(), faults=Faults(script=["huge"], huge_bytes=300_000)) as server:
        with pytest.raises(PolicyResponseError, match="max_reply_bytes=200000"):
            run(one_chat(config(server, limits=fast(max_reply_bytes=200_000))))
        server.set_faults(Faults(script=["huge"], huge_bytes=300_000))
        assert len(run(one_chat(config(server, limits=fast(max_reply_bytes=400_000)))).content) > 200_000
    with pytest.raises(ConfigError, match=r"Limits\.max_reply_bytes=0"):
        Limits(max_reply_bytes=0)


@pytest.mark.parametrize(
    "body",
    [
        b'{"choices": [{"message": {"content": "a\\ud800"}}]}',
        b'{"choices": [{"message": {"content": "\\udc00 trailing low half"}}]}',
        b'{"x": NaN, "s": "\\ud800"}',  # a body orjson refuses for its NaN: the stdlib's result is checked too
        b'{"x\\ud800": 1, "n": NaN}',  # in a key
        b"[" * 100_000 + b"]" * 100_000,
        b'{"n": NaN, "deep": ' + b"[" * 1025 + b"]" * 1025 + b"}",
    ],
)
def test_read_reply_json_refuses_lone_surrogates_and_deep_nesting(body: bytes) -> None:
    with pytest.raises(PolicyResponseError) as info:
        read_reply_json(body, url="http://r/v1")
    assert not info.value.retryable


def test_read_reply_json_reads_what_is_sound() -> None:
    assert read_reply_json(b'{"s": "\\ud83d\\ude00"}') == {"s": "\U0001f600"}  # a surrogate pair is one character
    assert (
        read_reply_json(b'{"n": NaN, "big": 123456789012345678901234567890}')["big"] == 123456789012345678901234567890
    )
    nested = b"[" * 1024 + b"]" * 1024
    assert read_reply_json(nested) is not None  # the bound itself is read
    text = b'{"n": NaN, "s": "' + b"[" * 5000 + b'"}'  # brackets in a string are not nesting
    assert read_reply_json(text)["s"] == "[" * 5000
    with pytest.raises(PolicyResponseError, match="not JSON") as info:
        read_reply_json(b'{"cut": ')
    assert info.value.retryable  # cut in transit: worth asking again


# --- secrets in URLs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://user:sk-in-url@host:8000/v1", "user:password"),
        ("https://sk-in-url@host/v1", "user:password"),
        ("http://host/v1?api_key=sk-in-url", "query"),
        ("http://host/v1#sk-in-url", "query or fragment"),
        ("http://host/v1 sk-in-url", "U\\+0020"),
        ("http://host/v1\r\nX: sk-in-url", "U\\+000D"),
    ],
)
def test_urls_carrying_secrets_or_breaking_lines_are_refused(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        PolicyConfig(url, "m")
    assert "sk-in-url" not in str(info.value)
    with pytest.raises(ConfigError) as several:
        PolicyConfig(("http://ok/v1", url), "m")
    assert "sk-in-url" not in str(several.value)


# --- the server's weight version --------------------------------------------------------------------------


@pytest.mark.parametrize("behaviour", ["vllm", "sglang", "vllm-0.10.1", "openai"])
def test_weight_version_is_read_where_the_server_reports_it(behaviour: str) -> None:
    with ReferencePolicyServer(brain(), behaviour, weight_version="step-12") as server:
        result = run(one_chat(config(server)))
        if behaviour == "vllm":
            assert server.requests[-1].body["return_weight_versions"] is True
    assert result.weight_version == ("step-12" if behaviour in ("vllm", "sglang") else None)


def test_weight_version_spans_and_odd_values() -> None:
    def read(extra: dict[str, Any], choice_extra: dict[str, Any] | None = None) -> str | None:
        choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, **(choice_extra or {})}
        version: str | None = parse_chat_completion({"choices": [choice], **extra}, url="u")["weight_version"]
        return version

    spans = [{"version": "a", "start": 0, "end": 3}, {"version": "a", "start": 3, "end": 5}]
    assert read({}, {"weight_versions": spans}) == "a"
    spans.append({"version": "b", "start": 5, "end": 9})  # the weights changed during the generation
    assert read({}, {"weight_versions": spans}) == "a,b"
    assert read({"metadata": {"weight_version": 7}}) == "7"
    assert read({"metadata": {"weight_version": True}}) is None
    assert read({"metadata": None}, {"weight_versions": None}) is None
    assert read({}, {"weight_versions": [{"start": 0}, "x"]}) is None


def test_policy_package_keeps_its_names_in_modules_under_600_lines() -> None:
    import legato_rl.policy as policy

    names = {"KEY_ENV_VAR", "MAX_REPLY_BYTES", "MAX_REPLY_DEPTH", "VLLM_EXTRAS", "ChatResult", "PolicyClient"}
    names |= {"PolicyConfig", "backoff_delay", "parse_chat_completion", "read_reply_json", "retry_policy_call"}
    assert names | {"ssl_context"} <= set(policy.__all__) and all(hasattr(policy, name) for name in policy.__all__)
    lines = {f.name: len(f.read_text().splitlines()) for f in Path(policy.__file__).parent.glob("*.py")}
    assert max(lines.values()) <= 600, lines
