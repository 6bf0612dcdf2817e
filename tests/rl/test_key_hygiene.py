"""The API key never reaches output, a log record, an exception text or a repr, on any path."""

from __future__ import annotations

import json
import logging
import traceback
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from _policy_kit import png_data_url, run, user
from typer.testing import CliRunner

from legato_gym.errors import ConfigError
from legato_gym.transport.process import WorkerProcess
from legato_rl.cli.app import app
from legato_rl.errors import PolicyError, redact, secret_forms
from legato_rl.policy import ChatResult, Limits, PolicyClient, PolicyConfig
from legato_rl.testing import Faults, ReferencePolicyServer, ReplayBrain, Reply

KEY = "sk-legato-hygiene-7f3a9c2e51d04b8a"


class EchoingBrain:
    """A broken brain whose error text carries the key, as a proxy echoing headers would."""

    def respond(self, messages: Sequence[Mapping[str, Any]]) -> Reply:
        raise RuntimeError(f"cannot handle request with Authorization: Bearer {KEY}")


def texts_of(exc: BaseException) -> list[str]:
    return [str(exc), repr(exc), "".join(traceback.format_exception(exc)), json.dumps(vars(exc), default=str)]


async def client_paths(cfg: PolicyConfig) -> tuple[list[ChatResult], list[PolicyError]]:
    results: list[ChatResult] = []
    errors: list[PolicyError] = []
    async with PolicyClient(cfg) as client:
        for i in range(7):
            try:
                results.append(await client.chat([user(f"step {i}", png_data_url(32, 32))], rollout_id=f"r{i}"))
            except PolicyError as exc:
                errors.append(exc)
        try:
            await client.models()
        except PolicyError as exc:
            errors.append(exc)
        assert KEY not in repr(client)
    return results, errors


def test_key_never_leaks(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("LEGATO_POLICY_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    for name in ("legato_rl", "legato_rl.testing.server"):
        caplog.set_level(logging.DEBUG, logger=name)
    seen: list[str] = []
    errors: list[PolicyError] = []
    brain = ReplayBrain([Reply("Action: ok", "fine")], cycle=True)

    # every client path: success, each fault, exhausted retries, timeout, fallback, 401, 404, unreachable
    script = ["500", "429", "malformed", "drop", "hang", "500", "500", "500"]
    with ReferencePolicyServer(brain, api_key=KEY, faults=Faults(script=script)) as server:
        cfg = PolicyConfig(
            server.url, server.model, limits=Limits(retries=1, step_timeout=0.3, backoff=0.001, backoff_max=0.01)
        )
        assert KEY not in repr(cfg) and KEY not in str(cfg)
        results, errs = run(client_paths(cfg))
        errors += errs
        assert results and errs  # both kinds of path were taken
        assert all(r.authorized for r in server.requests)  # the key was sent, as a header
        for r in results:
            seen += [repr(r), json.dumps(r.request)]
        run(client_paths(PolicyConfig(server.url, "no/such-model", limits=Limits(retries=0))))
    with ReferencePolicyServer(brain, "openai", api_key=KEY) as server:
        results, errs = run(client_paths(PolicyConfig(server.url, server.model)))
        assert results[0].attempts == 3  # OpenAI names one refused extra field per 400: each is dropped alone
        seen += [repr(r) + json.dumps(r.request) for r in results]
    with ReferencePolicyServer(brain, api_key="another-key") as server:
        _, errs = run(client_paths(PolicyConfig(server.url, server.model, limits=Limits(retries=0))))
        assert errs and all(getattr(e, "status_code", None) == 401 for e in errs)
        errors += errs
    with ReferencePolicyServer(EchoingBrain(), api_key=KEY) as server:
        _, errs = run(client_paths(PolicyConfig(server.url, server.model, limits=Limits(retries=0))))
        assert errs and any("***" in str(e) for e in errs)  # the echoed key was redacted
        errors += errs
        dead_url = server.url
    _, errs = run(client_paths(PolicyConfig(dead_url, "m", limits=Limits(retries=1, backoff=0.001))))
    errors += errs

    # probe, table and JSON, on healthy, refusing, wrong-key and dead servers
    runner = CliRunner()
    with (
        ReferencePolicyServer(brain, api_key=KEY) as good,
        ReferencePolicyServer(brain, "openai", api_key=KEY) as openai,
        ReferencePolicyServer(brain, api_key="another-key") as wrong,
    ):
        for url in (good.url, openai.url, wrong.url, dead_url):
            for extra in ([], ["--json"]):
                result = runner.invoke(app, ["rl", "probe", "--policy-url", url, "--model", good.model, *extra])
                seen.append(result.output)
                if result.exception is not None and not isinstance(result.exception, SystemExit):
                    seen += texts_of(result.exception)

    for exc in errors:
        seen += texts_of(exc)
        cause = exc.__cause__
        if cause is not None:
            seen += [str(cause), repr(cause)]
    # the reference server stands for the remote server: its own log (which shows EchoingBrain's error) is not ours
    ours = [r for r in caplog.records if not r.name.startswith("legato_rl.testing")]
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    seen += [formatter.format(r) for r in ours]
    assert len(errors) >= 8 and ours
    assert any(r.name == "legato_rl.policy" for r in ours)
    leaks = [text for text in seen if KEY in text]
    assert not leaks, leaks[:1]


# --- the key's own shape ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        f"{KEY}\r\nX-Injected: yes",
        f"{KEY}\nHost: evil.test",
        f"{KEY}\rX: 1",
        f"sk-\r\n{KEY}",
        f"{KEY}\x1b[2J",
        f"{KEY}\u00e9",
    ],
)
def test_a_key_that_would_inject_headers_is_refused_before_any_request(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ReferencePolicyServer(ReplayBrain([Reply("Action: ok", "")], cycle=True)) as server:
        monkeypatch.setenv("LEGATO_POLICY_KEY", bad)
        with pytest.raises(ConfigError, match=r"\$LEGATO_POLICY_KEY holds") as from_env:
            PolicyClient(PolicyConfig(server.url, server.model))
        monkeypatch.delenv("LEGATO_POLICY_KEY")
        with pytest.raises(ConfigError, match=r"PolicyConfig\.api_key holds") as given:
            PolicyConfig(server.url, server.model, api_key=bad)
        for info in (from_env, given):
            assert KEY not in str(info.value) and "sk-" not in str(info.value)
        assert server.requests == []


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\n\n", "\r"])
def test_a_trailing_newline_is_stripped_from_the_key(ending: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with ReferencePolicyServer(ReplayBrain([Reply("Action: ok", "")], cycle=True), api_key=KEY) as server:
        monkeypatch.setenv("LEGATO_POLICY_KEY", KEY + ending)  # as `$(cat keyfile)` in a .env file leaves it
        assert PolicyConfig(server.url, server.model).resolved_api_key() == KEY
        result = run(one_chat(PolicyConfig(server.url, server.model)))
        assert result.content == "Action: ok"
        monkeypatch.delenv("LEGATO_POLICY_KEY")
        run(one_chat(PolicyConfig(server.url, server.model, api_key=KEY + ending)))
        assert [r.authorized for r in server.requests] == [True, True]


async def one_chat(cfg: PolicyConfig) -> ChatResult:
    async with PolicyClient(cfg) as client:
        return await client.chat([user("hello")], rollout_id="r0")


#: A key whose JSON-escaped, URL-encoded and repr forms all differ from the key itself.
ODD_KEY = 'sk-legato/odd"key+with=equals\\and-slash'


class EchoingEveryFormBrain:
    """A broken brain echoing the key in every spelling a server may use, the key straddling the 400-char cut."""

    def respond(self, messages: Sequence[Mapping[str, Any]]) -> Reply:
        forms = [
            ODD_KEY,
            json.dumps(ODD_KEY)[1:-1],
            json.dumps(ODD_KEY)[1:-1].replace("/", "\\/"),
            urllib.parse.quote(ODD_KEY, safe=""),
            urllib.parse.quote(ODD_KEY, safe="").lower(),
            urllib.parse.quote_plus(ODD_KEY),
            repr(ODD_KEY),
        ]
        raise RuntimeError("x" * 334 + " | ".join(forms))  # the body's first form starts at character 385


def test_redaction_covers_every_form_of_the_key() -> None:
    with ReferencePolicyServer(EchoingEveryFormBrain(), api_key=ODD_KEY) as server:
        cfg = PolicyConfig(server.url, server.model, api_key=ODD_KEY, limits=Limits(retries=0))
        with pytest.raises(PolicyError) as info:
            run(one_chat(cfg))
    text = "\n".join(texts_of(info.value))
    assert "***" in text
    fragments = {ODD_KEY[i : i + 12] for i in range(0, len(ODD_KEY) - 12)}  # no recognisable piece either
    for form in secret_forms(ODD_KEY):
        assert form not in text
    assert not [f for f in fragments if f in text]
    assert redact(f"a {urllib.parse.quote(ODD_KEY)} b", ODD_KEY) == "a *** b"


def test_desktop_workers_do_not_get_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEGATO_POLICY_KEY", KEY)
    worker = WorkerProcess(0, env={"LEGATO_POLICY_KEY": KEY, "LEGATO_TEST_MARK": "1"})
    try:
        environ = Path(f"/proc/{worker.pid}/environ").read_bytes().split(b"\0")
    finally:
        worker.kill()
    assert b"LEGATO_TEST_MARK=1" in environ  # read the right process
    assert not [v for v in environ if v.startswith(b"LEGATO_POLICY_KEY=") or KEY.encode() in v]


def test_workers_strip_the_variable_the_policy_client_reads() -> None:
    from legato_gym.transport import process
    from legato_rl.policy import KEY_ENV_VAR

    assert KEY_ENV_VAR in process._WORKER_SECRETS  # named twice, since legato_gym cannot import legato_rl
