"""`legato rl probe` against the reference server over real HTTP: checks, fixes, exit codes, JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from legato_rl.cli.app import _register_commands, app
from legato_rl.testing import ReferencePolicyServer, ReplayBrain, Reply

_register_commands()
REPLY = Reply("Action: Done.\n<tool_call>\n{}\n</tool_call>", "Nothing to do.")


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEGATO_POLICY_KEY", raising=False)


def probe(
    *urls: str, model: str = "legato/reference-policy", extra: tuple[str, ...] = ()
) -> tuple[int, dict[str, Any]]:
    args = ["rl", "probe", "--model", model, "--json", "--timeout", "5", *extra]
    for url in urls:
        args += ["--policy-url", url]
    result = CliRunner().invoke(app, args)
    return result.exit_code, json.loads(result.output)


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


def server(**kw: Any) -> ReferencePolicyServer:
    return ReferencePolicyServer(ReplayBrain([REPLY], cycle=True), **kw)


def test_healthy_vllm_passes_everything() -> None:
    with server() as s:
        code, report = probe(s.url)
    assert code == 0 and report["ok"] is True and report["exit_code"] == 0
    assert set(statuses(report).values()) == {"ok"}
    assert list(statuses(report)) == [
        "reachable",
        "model served",
        "chat with an image",
        "logprobs",
        "token ids",
        "cached tokens",
        "reasoning",
        "latency",
    ]
    assert "processed_logprobs" in check(report, "logprobs")["detail"]


def test_missing_cache_reporting_is_a_warning_with_its_flag() -> None:
    with server(prompt_tokens_details=False) as s:
        code, report = probe(s.url)
    assert code == 0
    cached = check(report, "cached tokens")
    assert cached["status"] == "warn" and "--enable-prompt-tokens-details" in cached["fix"]


def test_old_vllm_token_ids_warning() -> None:
    with server(behaviour="vllm-0.10.1") as s:
        code, report = probe(s.url)
    assert code == 0
    ids = check(report, "token ids")
    assert ids["status"] == "warn" and "0.10.2" in ids["fix"]
    assert check(report, "logprobs")["status"] == "ok"


def test_openai_refusal_is_reported() -> None:
    with server(behaviour="openai") as s:
        code, report = probe(s.url)
    assert code == 0
    assert "refused return_token_ids" in check(report, "token ids")["detail"]
    assert check(report, "reasoning")["status"] == "info"
    assert check(report, "cached tokens")["status"] == "ok"  # the probe's long prompt passes OpenAI's 1024


def test_sglang_passes() -> None:
    with server(behaviour="sglang") as s:
        code, report = probe(s.url)
    assert code == 0 and set(statuses(report).values()) == {"ok"}


def test_no_logprobs_fails() -> None:
    with server(return_logprobs=False) as s:
        code, report = probe(s.url)
    assert code == 1 and report["ok"] is False
    logprobs = check(report, "logprobs")
    assert logprobs["status"] == "fail" and "--logprobs-mode processed_logprobs" in logprobs["fix"]


def test_reasoning_in_content_names_the_parser_flag() -> None:
    with server(reasoning_parser=False) as s:
        code, report = probe(s.url)
    assert code == 0
    reasoning = check(report, "reasoning")
    assert reasoning["status"] == "warn" and "--reasoning-parser" in reasoning["fix"]


def test_unreachable_fails() -> None:
    with server() as s:
        url = s.url
    code, report = probe(url)
    assert code == 1
    assert statuses(report)["reachable"] == "fail"
    assert {c["status"] for c in report["checks"][1:]} == {"skip"}


def test_model_not_served_fails() -> None:
    with server() as s:
        code, report = probe(s.url, model="Qwen/Nope")
    assert code == 1
    served = check(report, "model served")
    assert served["status"] == "fail" and "legato/reference-policy" in served["detail"]


def test_wrong_key_fails_with_the_env_var_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    with server(api_key="right") as s:
        monkeypatch.setenv("LEGATO_POLICY_KEY", "wrong")
        code, report = probe(s.url)
        assert code == 1 and "LEGATO_POLICY_KEY" in check(report, "reachable")["fix"]
        monkeypatch.setenv("LEGATO_POLICY_KEY", "right")
        code, report = probe(s.url)
        assert code == 0


def test_replicas_are_each_probed() -> None:
    with server() as good, server(behaviour="vllm-0.10.1") as old:
        code, report = probe(good.url, old.url)
    assert code == 0 and report["urls"] == [good.url, old.url]
    by_replica = {(c["replica"], c["name"]): c["status"] for c in report["checks"]}
    assert by_replica[(good.url, "token ids")] == "ok" and by_replica[(old.url, "token ids")] == "warn"


def test_one_failing_replica_fails_the_probe() -> None:
    with server() as good, server() as gone:
        gone_url = gone.url
        gone.stop()
        code, _ = probe(good.url, gone_url)
    assert code == 1


def test_table_output_and_help() -> None:
    with server(prompt_tokens_details=False) as s:
        result = CliRunner().invoke(
            app, ["rl", "probe", "--policy-url", s.url, "--model", "legato/reference-policy"], env={"COLUMNS": "200"}
        )
    assert result.exit_code == 0
    assert "cached tokens" in result.output and "--enable-prompt-tokens-details" in result.output
    assert "warning" in result.output
    help_text = CliRunner().invoke(app, ["rl", "--help"]).output
    assert "probe" in help_text
    probe_help = CliRunner().invoke(app, ["rl", "probe", "--help"], env={"COLUMNS": "200"}).output
    assert "--policy-url" in probe_help and "--api-key" not in probe_help and "--key" not in probe_help
