"""The policy-server probe against the reference server over real HTTP.

The checks, their statuses and fixes are :mod:`legato_rl.probe`'s (``run_probe``); `legato rl probe`
(:mod:`legato_rl.cli.probe`) turns them into a table or JSON and an exit status.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest
from _policy_kit import run
from typer.testing import CliRunner

from legato_gym.png import png_size
from legato_rl.cli.app import app
from legato_rl.probe import Check, run_probe
from legato_rl.testing import ReferencePolicyServer, ReplayBrain, Reply

REPLY = Reply("Action: Done.\n<tool_call>\n{}\n</tool_call>", "Nothing to do.")
MODEL = "legato/reference-policy"


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEGATO_POLICY_KEY", raising=False)


def checks(*urls: str, model: str = MODEL) -> list[Check]:
    return run(run_probe(list(urls), model, timeout=5))


def statuses(found: list[Check]) -> dict[str, str]:
    return {c.name: c.status for c in found}


def check(found: list[Check], name: str) -> Check:
    return next(c for c in found if c.name == name)


def probe_cli(*urls: str, model: str = MODEL) -> tuple[int, dict[str, Any]]:
    args = ["rl", "probe", "--model", model, "--json", "--timeout", "5"]
    for url in urls:
        args += ["--policy-url", url]
    result = CliRunner().invoke(app, args)
    return result.exit_code, json.loads(result.output)


def server(**kw: Any) -> ReferencePolicyServer:
    return ReferencePolicyServer(ReplayBrain([REPLY], cycle=True), **kw)


# ------------------------------------------------------------------------------------- the checks


def test_healthy_vllm_passes_everything() -> None:
    with server() as s:
        found = checks(s.url)
    assert set(statuses(found).values()) == {"ok"}
    assert list(statuses(found)) == [
        "reachable",
        "model served",
        "chat with an image",
        "logprobs",
        "token ids",
        "cached tokens",
        "reasoning",
        "latency",
    ]
    assert "processed_logprobs" in check(found, "logprobs").detail
    assert {c.replica for c in found} == {s.url}


def test_the_image_sent_is_a_real_png() -> None:
    from PIL import Image

    with server() as s:
        checks(s.url)
        bodies = [r.body for r in s.requests if r.path.endswith("/chat/completions")]
    parts = [p for b in bodies for m in b["messages"] if isinstance(m["content"], list) for p in m["content"]]
    urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert urls and all(u.startswith("data:image/png;base64,") for u in urls)
    data = base64.b64decode(urls[0].split(",", 1)[1])
    assert png_size(data) == (64, 48)
    with Image.open(io.BytesIO(data)) as image:
        assert image.convert("RGB").getpixel((10, 3)) == (40, 15, 128)  # the gradient, decoded


def test_missing_cache_reporting_is_a_warning_with_its_flag() -> None:
    with server(prompt_tokens_details=False) as s:
        cached = check(checks(s.url), "cached tokens")
    assert cached.status == "warn" and cached.fix is not None and "--enable-prompt-tokens-details" in cached.fix


def test_old_vllm_token_ids_warning() -> None:
    with server(behaviour="vllm-0.10.1") as s:
        found = checks(s.url)
    ids = check(found, "token ids")
    assert ids.status == "warn" and ids.fix is not None and "0.10.2" in ids.fix
    assert check(found, "logprobs").status == "ok"


def test_openai_refusal_is_reported() -> None:
    with server(behaviour="openai") as s:
        found = checks(s.url)
    assert "refused return_token_ids" in check(found, "token ids").detail
    assert check(found, "reasoning").status == "info"
    assert check(found, "cached tokens").status == "ok"  # the probe's long prompt passes OpenAI's 1024


def test_sglang_passes() -> None:
    with server(behaviour="sglang") as s:
        assert set(statuses(checks(s.url)).values()) == {"ok"}


def test_no_logprobs_fails() -> None:
    with server(return_logprobs=False) as s:
        logprobs = check(checks(s.url), "logprobs")
    assert logprobs.status == "fail" and logprobs.fix is not None
    assert "--logprobs-mode processed_logprobs" in logprobs.fix


def test_reasoning_in_content_names_the_parser_flag() -> None:
    with server(reasoning_parser=False) as s:
        reasoning = check(checks(s.url), "reasoning")
    assert reasoning.status == "warn" and reasoning.fix is not None and "--reasoning-parser" in reasoning.fix


def test_unreachable_fails_and_skips_the_rest() -> None:
    with server() as s:
        url = s.url
    found = checks(url)
    assert statuses(found)["reachable"] == "fail"
    assert {c.status for c in found[1:]} == {"skip"}


def test_model_not_served_fails() -> None:
    with server() as s:
        served = check(checks(s.url, model="Qwen/Nope"), "model served")
    assert served.status == "fail" and MODEL in served.detail and served.fix == f"pass --model {MODEL!r}"


def test_wrong_key_fails_with_the_env_var_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    with server(api_key="right") as s:
        monkeypatch.setenv("LEGATO_POLICY_KEY", "wrong")
        reachable = check(checks(s.url), "reachable")
        assert reachable.status == "fail" and reachable.fix is not None and "LEGATO_POLICY_KEY" in reachable.fix
        assert "wrong" not in reachable.detail
        monkeypatch.setenv("LEGATO_POLICY_KEY", "right")
        assert set(statuses(checks(s.url)).values()) == {"ok"}


def test_replicas_are_each_probed() -> None:
    with server() as good, server(behaviour="vllm-0.10.1") as old:
        found = checks(good.url, old.url)
    by_replica = {(c.replica, c.name): c.status for c in found}
    assert by_replica[(good.url, "token ids")] == "ok" and by_replica[(old.url, "token ids")] == "warn"


# ----------------------------------------------------------------------------------- the command


def test_json_report_and_exit_status() -> None:
    with server() as s, server(return_logprobs=False) as no_logprobs, server(behaviour="vllm-0.10.1") as old:
        healthy = probe_cli(s.url)
        failing = probe_cli(no_logprobs.url)
        warned = probe_cli(old.url)
    code, report = healthy
    assert code == 0 and report["ok"] is True and report["exit_code"] == 0
    assert report["model"] == MODEL and report["urls"] == [s.url]
    assert report["checks"][0] == {"name": "reachable", "status": "ok", "detail": f"GET {s.url}/models answered",
                                   "fix": None, "replica": s.url}  # fmt: skip
    code, report = failing
    assert code == 1 and report["ok"] is False and report["exit_code"] == 1
    code, report = warned
    assert code == 0 and report["ok"] is True  # a warning is usable for training


def test_unreachable_and_model_not_served_exit_1() -> None:
    with server() as s:
        url = s.url
        assert probe_cli(s.url, model="Qwen/Nope")[0] == 1
    assert probe_cli(url)[0] == 1


def test_one_failing_replica_fails_the_probe() -> None:
    with server() as good, server() as gone:
        gone_url = gone.url
        gone.stop()
        code, report = probe_cli(good.url, gone_url)
    assert code == 1 and report["urls"] == [good.url, gone_url]


def test_table_output_and_help() -> None:
    with server(prompt_tokens_details=False) as s:
        result = CliRunner().invoke(
            app, ["rl", "probe", "--policy-url", s.url, "--model", MODEL], env={"COLUMNS": "200"}
        )
    assert result.exit_code == 0
    assert "cached tokens" in result.output and "--enable-prompt-tokens-details" in result.output
    assert "warning" in result.output
    help_text = CliRunner().invoke(app, ["rl", "--help"]).output
    assert "probe" in help_text
    probe_help = CliRunner().invoke(app, ["rl", "probe", "--help"], env={"COLUMNS": "200"}).output
    assert "--policy-url" in probe_help and "--api-key" not in probe_help and "--key" not in probe_help
