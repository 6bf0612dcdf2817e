"""The API key never reaches output, a log record, an exception text or a repr, on any path."""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from _policy_kit import png_data_url, run, user
from typer.testing import CliRunner

from legato_rl.cli.app import _register_commands, app
from legato_rl.errors import PolicyError
from legato_rl.policy import ChatResult, PolicyClient, PolicyConfig
from legato_rl.testing import Faults, ReferencePolicyServer, ReplayBrain, Reply

KEY = "sk-legato-hygiene-7f3a9c2e51d04b8a"
_register_commands()


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
        cfg = PolicyConfig(server.url, server.model, retries=1, step_timeout=0.3, backoff=0.001, backoff_max=0.01)
        assert KEY not in repr(cfg) and KEY not in str(cfg)
        results, errs = run(client_paths(cfg))
        errors += errs
        assert results and errs  # both kinds of path were taken
        assert all(r.authorized for r in server.requests)  # the key was sent, as a header
        for r in results:
            seen += [repr(r), json.dumps(r.request)]
        run(client_paths(PolicyConfig(server.url, "no/such-model", retries=0)))
    with ReferencePolicyServer(brain, "openai", api_key=KEY) as server:
        results, errs = run(client_paths(PolicyConfig(server.url, server.model)))
        assert results[0].attempts == 2
        seen += [repr(r) + json.dumps(r.request) for r in results]
    with ReferencePolicyServer(brain, api_key="another-key") as server:
        _, errs = run(client_paths(PolicyConfig(server.url, server.model, retries=0)))
        assert errs and all(getattr(e, "status_code", None) == 401 for e in errs)
        errors += errs
    with ReferencePolicyServer(EchoingBrain(), api_key=KEY) as server:
        _, errs = run(client_paths(PolicyConfig(server.url, server.model, retries=0)))
        assert errs and any("***" in str(e) for e in errs)  # the echoed key was redacted
        errors += errs
        dead_url = server.url
    _, errs = run(client_paths(PolicyConfig(dead_url, "m", retries=1, backoff=0.001)))
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
