"""The reference policy server over real HTTP: vLLM's contract, behaviours, cache accounting, faults, brains."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from _policy_kit import LONG_TEXT, png_data_url, user

from legato_gym.contract import Task
from legato_gym.errors import ConfigError
from legato_rl.testing import (
    Faults,
    Latency,
    PrefixCache,
    RandomBrain,
    ReferencePolicyServer,
    ReplayBrain,
    Reply,
    ScriptedSolver,
    ToyTokenizer,
    prompt_instruction,
    prompt_step_index,
    to_qwen_actions,
)

MODEL = "legato/reference-policy"


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


def chat_body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages, **extra}


def post(http: httpx.Client, server: ReferencePolicyServer, body: dict[str, Any]) -> httpx.Response:
    return http.post(server.url + "/chat/completions", json=body)


def tool_calls(content: str) -> list[dict[str, Any]]:
    lines = content.splitlines()
    return [json.loads(lines[i + 1]) for i, line in enumerate(lines) if line == "<tool_call>"]


# --- the vLLM contract -----------------------------------------------------------------------------------


def test_models_and_health(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain(["x"]), model="m/1") as server:
        assert server.url.startswith("http://127.0.0.1:") and server.port > 0
        data = http.get(server.url + "/models").json()
        assert [m["id"] for m in data["data"]] == ["m/1"]
        assert http.get(f"http://127.0.0.1:{server.port}/health").status_code == 200
        assert http.get(server.url + "/nothing").status_code == 404


@pytest.mark.parametrize("behaviour", ["vllm", "sglang"])
def test_update_weight_version_relabels_the_replies(http: httpx.Client, behaviour: str) -> None:
    with ReferencePolicyServer(ReplayBrain(["x"], cycle=True), behaviour, api_key="k") as server:
        base, auth = f"http://127.0.0.1:{server.port}", {"Authorization": "Bearer k"}

        def served() -> str:
            body = chat_body([user("hi")], return_weight_versions=True)
            data = http.post(server.url + "/chat/completions", json=body, headers=auth).json()
            return str(
                data["choices"][0]["weight_versions"][0]["version"]
                if behaviour == "vllm"
                else data["metadata"]["weight_version"]
            )

        assert served() == "default"
        assert http.post(base + "/update_weight_version", json={"new_version": "step-2"}).status_code == 401
        answer = http.post(base + "/update_weight_version", json={"new_version": "step-2"}, headers=auth)
        assert answer.status_code == 200 and answer.json()["success"] is True
        assert served() == "step-2" and server.weight_version == "step-2"
        refused = http.post(base + "/update_weight_version", json={"version": "step-3"}, headers=auth)
        assert refused.status_code == 400 and "new_version" in refused.json()["error"]["message"]
        assert served() == "step-2"


def test_vllm_returns_token_ids_aligned_with_logprobs(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain([Reply("Action: go", "hmm")], cycle=True)) as server:
        body = post(http, server, chat_body([user("hello")], logprobs=True, top_logprobs=2, return_token_ids=True))
        data = body.json()
        choice = data["choices"][0]
        assert choice["message"]["content"] == "Action: go"
        assert choice["message"]["reasoning"] == "hmm"
        assert "reasoning_content" not in choice["message"]
        ids, entries = choice["token_ids"], choice["logprobs"]["content"]
        assert len(ids) == len(entries) == data["usage"]["completion_tokens"]
        assert all(e["logprob"] <= 0 and len(e["top_logprobs"]) == 2 for e in entries)
        assert len(data["prompt_token_ids"]) == data["usage"]["prompt_tokens"]
        assert ids[-1] == 2  # <|im_end|>

        plain = post(http, server, chat_body([user("hello")])).json()
        assert plain["choices"][0]["token_ids"] is None and plain["prompt_token_ids"] is None
        assert plain["choices"][0]["logprobs"] is None


def test_vllm_0_10_1_ignores_return_token_ids(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain([Reply("ok", "r")]), "vllm-0.10.1") as server:
        data = post(http, server, chat_body([user("hi")], logprobs=True, return_token_ids=True)).json()
        choice = data["choices"][0]
        assert "token_ids" not in choice and "prompt_token_ids" not in data
        assert choice["message"]["reasoning_content"] == "r" and "reasoning" not in choice["message"]
        assert len(choice["logprobs"]["content"]) == data["usage"]["completion_tokens"]


def test_openai_rejects_unknown_fields(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain(["ok"], cycle=True), "openai") as server:
        refused = post(http, server, chat_body([user("hi")], logprobs=True, return_token_ids=True))
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == "Unrecognized request argument supplied: return_token_ids"
        data = post(http, server, chat_body([user("hi")], logprobs=True)).json()
        assert data["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert "token_ids" not in data["choices"][0]


def test_sglang_field_names(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain([Reply("ok", "why")]), "sglang") as server:
        data = post(http, server, chat_body([user("hi")], logprobs=True, return_token_ids=True)).json()
        choice = data["choices"][0]
        assert len(choice["response_token_ids"]) == data["usage"]["completion_tokens"]
        assert len(choice["prompt_token_ids"]) == data["usage"]["prompt_tokens"]
        assert "token_ids" not in choice and "prompt_token_ids" not in data
        assert choice["message"]["reasoning_content"] == "why"
        assert data["metadata"]["weight_version"] == "default"


def test_validation_errors(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain(["ok"], cycle=True)) as server:
        missing = post(http, server, {"model": "other", "messages": [user("hi")]})
        assert missing.status_code == 404 and "other" in missing.json()["error"]["message"]
        assert post(http, server, chat_body([user("hi")], top_logprobs=3)).status_code == 400
        assert post(http, server, {"model": MODEL}).status_code == 400
    with pytest.raises(ConfigError, match="behaviour"):
        ReferencePolicyServer(behaviour="tgi")


def test_auth(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain(["ok"], cycle=True), api_key="k-1") as server:
        assert http.get(server.url + "/models").status_code == 401
        assert http.get(server.url + "/models", headers={"Authorization": "Bearer nope"}).status_code == 401
        ok = http.get(server.url + "/models", headers={"Authorization": "Bearer k-1"})
        assert ok.status_code == 200
        assert [r.authorized for r in server.requests] == [False, False, True]


def test_the_request_log_is_bounded(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain(["ok"], cycle=True), record_limit=2) as server:
        for text in ("a", "b", "c"):
            assert post(http, server, chat_body([user(text)])).status_code == 200
        assert [r.body["messages"][0]["content"][-1]["text"] for r in server.requests] == ["b", "c"]  # the most recent
        assert server.stats.chat_requests == 3
    with ReferencePolicyServer(ReplayBrain(["ok"], cycle=True), record_limit=0) as server:  # collect's embedded one
        assert post(http, server, chat_body([user("a")])).status_code == 200
        assert server.requests == [] and server.stats.chat_requests == 1
    with pytest.raises(ConfigError, match="record_limit"):
        ReferencePolicyServer(record_limit=-1)


def test_reasoning_without_parser_stays_in_content(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain([Reply("Action: x", "think")]), reasoning_parser=False) as server:
        message = post(http, server, chat_body([user("hi")])).json()["choices"][0]["message"]
        assert message["reasoning"] is None
        assert message["content"].startswith("<think>\nthink\n</think>") and message["content"].endswith("Action: x")


def test_max_tokens_truncates_with_length(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain(["one two three four five six"])) as server:
        data = post(http, server, chat_body([user("hi")], max_tokens=3, return_token_ids=True)).json()
        assert data["choices"][0]["finish_reason"] == "length"
        assert len(data["choices"][0]["token_ids"]) == 3
        assert data["choices"][0]["message"]["content"] == "one two three"


# --- tokens and the prefix cache ---------------------------------------------------------------------------


def test_toy_tokenizer_is_deterministic_and_lossless() -> None:
    text = "Click the 'OK' button, then type hello!\n"
    a, b = ToyTokenizer(), ToyTokenizer()
    assert a.encode(text) == b.encode(text)
    assert "".join(a.pieces(text)) == text
    assert a.encode("hello") != a.encode("world")


def test_images_count_tokens_by_size(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain(["ok"], cycle=True)) as server:
        text_only = post(http, server, chat_body([user("look")])).json()["usage"]["prompt_tokens"]
        small = post(http, server, chat_body([user("look", png_data_url(64, 64))])).json()["usage"]["prompt_tokens"]
        full = post(http, server, chat_body([user("look", png_data_url(1920, 1080))])).json()["usage"]["prompt_tokens"]
    assert small - text_only == 2 + 4  # vision start/end + 2x2 patches
    assert full - text_only == 2 + 2040  # as Qwen3-VL counts a 1080p screenshot


def test_prefix_cache_accounting(http: httpx.Client) -> None:
    reply = "Action: click\n<tool_call>\n{}\n</tool_call>"
    with ReferencePolicyServer(ReplayBrain([reply], cycle=True)) as server:
        first_messages = [user(LONG_TEXT)]
        first = post(http, server, chat_body(first_messages)).json()["usage"]
        again = post(http, server, chat_body(first_messages)).json()["usage"]
        n = first["prompt_tokens"]
        assert first["prompt_tokens_details"]["cached_tokens"] == 0
        assert again["prompt_tokens_details"]["cached_tokens"] == (n - 1) // 16 * 16

        # the next turn carries the previous reply: its whole previous prompt + reply is a cached prefix
        turn2 = [*first_messages, {"role": "assistant", "content": reply}, user("and now?")]
        second = post(http, server, chat_body(turn2)).json()["usage"]
        assert second["prompt_tokens_details"]["cached_tokens"] >= (n + first["completion_tokens"]) // 16 * 16 - 16
        assert second["prompt_tokens_details"]["cached_tokens"] % 16 == 0

        server.cache.clear()
        cold = post(http, server, chat_body(first_messages)).json()["usage"]
        assert cold["prompt_tokens_details"]["cached_tokens"] == 0


def test_different_images_of_one_size_do_not_share_cache(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain(["ok"], cycle=True)) as server:
        post(http, server, chat_body([user("look", png_data_url(320, 320, shade=1))]))
        other = post(http, server, chat_body([user("look", png_data_url(320, 320, shade=2))])).json()["usage"]
        same = post(http, server, chat_body([user("look", png_data_url(320, 320, shade=1))])).json()["usage"]
    assert other["prompt_tokens_details"]["cached_tokens"] < 16
    assert same["prompt_tokens_details"]["cached_tokens"] == (same["prompt_tokens"] - 1) // 16 * 16 > 0


def test_prompt_tokens_details_off_gives_null(http: httpx.Client) -> None:
    with ReferencePolicyServer(ReplayBrain(["ok"], cycle=True), prompt_tokens_details=False) as server:
        for _ in range(2):
            usage = post(http, server, chat_body([user(LONG_TEXT)])).json()["usage"]
        assert usage["prompt_tokens_details"] is None


def test_prefix_cache_lru_evicts() -> None:
    cache = PrefixCache(block_size=4, capacity=2)
    cache.insert(list(range(8)))
    assert cache.lookup([*range(8), 99]) == 8
    cache.insert(list(range(100, 108)))  # evicts the first two blocks
    assert cache.lookup([*range(8), 99]) == 0


def test_latency_model() -> None:
    latency = Latency(fixed=0.5, per_prompt_token=0.01, per_token=0.1, jitter=1.0)
    assert latency.delay(10, 3, 0.25) == pytest.approx(0.5 + 0.1 + 0.3 + 0.25)


# --- faults ---------------------------------------------------------------------------------------------------


def test_scripted_faults(http: httpx.Client) -> None:
    faults = Faults(script=["500", "429", "malformed", None, "drop", "hang"], hang_seconds=30, retry_after=2)
    with ReferencePolicyServer(ReplayBrain(["ok"], cycle=True), faults=faults) as server:
        body = chat_body([user("hi")])
        assert post(http, server, body).status_code == 500
        busy = post(http, server, body)
        assert busy.status_code == 429 and busy.headers["retry-after"] == "2"
        malformed = post(http, server, body)
        assert malformed.status_code == 200
        with pytest.raises(json.JSONDecodeError):
            json.loads(malformed.content)
        assert post(http, server, body).json()["choices"][0]["message"]["content"] == "ok"
        with pytest.raises(httpx.RemoteProtocolError):
            post(http, server, body)
        with pytest.raises(httpx.ReadTimeout):
            http.post(server.url + "/chat/completions", json=body, timeout=0.3)
        assert post(http, server, body).status_code == 200
        stats = server.stats
        assert stats.faults == {"500": 1, "429": 1, "malformed": 1, "drop": 1, "hang": 1}
        assert stats.chat_requests == 7


def test_fault_rates_are_seeded(http: httpx.Client) -> None:
    def sequence() -> list[str | None]:
        faults = Faults(rates={"500": 0.3, "429": 0.2}, seed=7)
        with ReferencePolicyServer(ReplayBrain(["ok"], cycle=True), faults=faults) as server:
            for _ in range(30):
                post(http, server, chat_body([user("hi")]))
            return [r.fault for r in server.requests]

    first = sequence()
    assert first == sequence()
    assert {"500", "429", None} <= set(first)
    with pytest.raises(ConfigError, match="unknown fault"):
        Faults(script=["boom"])


def _raw_post(server: ReferencePolicyServer, body: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    """POST over a bare socket; the answer's head and whatever body came before the server closed."""
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        received = b""
        while chunk := sock.recv(1 << 20):
            received += chunk
    head, _, rest = received.partition(b"\r\n\r\n")
    headers = dict(line.split(": ", 1) for line in head.decode("latin-1").split("\r\n")[1:])
    return {k.lower(): v for k, v in headers.items()}, rest


def test_hostile_reply_faults_on_the_wire() -> None:
    faults = Faults(script=["surrogate", "deep", "deep-tool-call", "huge", "half"], depth=5000, huge_bytes=3_000_000)
    with ReferencePolicyServer(ReplayBrain(["Action: ok"], cycle=True), faults=faults) as server:
        body = chat_body([user("hi")])
        _, surrogate = _raw_post(server, body)
        assert b'"Action: ok\\ud800"' in surrogate  # the JSON escape of a lone surrogate
        assert json.loads(surrogate)["choices"][0]["message"]["content"] == "Action: ok\ud800"
        _, deep = _raw_post(server, body)
        assert deep == b"[" * 5000 + b"]" * 5000
        _, tool_call = _raw_post(server, body)
        content = json.loads(tool_call)["choices"][0]["message"]["content"]
        assert content == "Action: Click.\n<tool_call>\n" + "[" * 5000 + "]" * 5000 + "\n</tool_call>"
        headers, huge = _raw_post(server, body)
        assert int(headers["content-length"]) == len(huge) >= 3_000_000
        assert json.loads(huge)["choices"][0]["message"]["content"].startswith("Action: ok")
        headers, half = _raw_post(server, body)
        assert len(half) == int(headers["content-length"]) // 2  # then the server closed the connection
        assert server.stats.faults == {"surrogate": 1, "deep": 1, "deep-tool-call": 1, "huge": 1, "half": 1}


def test_a_fault_plan_picks_faults_per_request(http: httpx.Client) -> None:
    seen: list[tuple[int, str | None]] = []

    def plan(number: int, body: Mapping[str, Any]) -> str | None:
        seen.append((number, prompt_instruction(body["messages"])))
        return {1: "500", 3: "429", 4: "ok", 5: "no-such-fault"}.get(number)

    faults = Faults(plan=plan, script=[None, None, "500", None, "500"])
    with ReferencePolicyServer(ReplayBrain(["ok"], cycle=True), faults=faults) as server:
        answers = [post(http, server, chat_body([user(f"Instruction: task {i}")])) for i in range(6)]
        post(http, server, {"model": MODEL})  # invalid: meets no fault, takes no number
        # 2: the plan leaves it to the script; 4: the plan's "ok" overrides the script's 500
        assert [a.status_code for a in answers] == [200, 500, 500, 429, 200, 500]
        assert "no-such-fault" in answers[5].json()["error"]["message"]
        assert seen == [(i, f"task {i}") for i in range(6)]
        assert [r.fault for r in server.requests[:6]] == [None, "500", "500", "429", None, "no-such-fault"]


# --- brains ---------------------------------------------------------------------------------------------------

TASKS = [
    Task("t-ok", "Click the OK button", {}),
    Task("t-type", "Type hello and press Enter", {}),
]
SOLUTIONS: dict[str, list[str]] = {
    "t-ok": ["pyautogui.click(960, 540)", "DONE"],
    "t-type": ["pyautogui.click(100, 200); pyautogui.typewrite('hello')", "pyautogui.press('enter')"],
}


def solve(task: Task, screen: tuple[int, int]) -> list[str]:
    assert screen == (1920, 1080)
    return SOLUTIONS[task.task_id]


def qwen_prompt(
    instruction: str, previous: list[str], step_lines: int = 0, screen: tuple[int, int] = (64, 36)
) -> list[dict[str, Any]]:
    steps = "\n".join(f"Step {i + 1}: Action: old" for i in range(step_lines)) or "None"
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a computer-use agent. # Tools ..."}]
    text = (
        "Please generate the next move according to the UI screenshot, instruction and previous actions.\n\n"
        f"Instruction: {instruction}\n\nPrevious actions:\n{steps}"
    )
    shot = png_data_url(*screen)
    messages.append(user(text, shot))
    for reply in previous:
        messages += [{"role": "assistant", "content": reply}, user("", shot)]
    return messages


def test_prompt_reading() -> None:
    messages = qwen_prompt("Click the OK button", ["a", "b"], step_lines=3)
    assert prompt_instruction(messages) == "Click the OK button"
    assert prompt_step_index(messages) == 5


def test_scripted_solver_walks_the_solution() -> None:
    brain = ScriptedSolver(TASKS, screen_size=(1920, 1080), solution=solve, reasoning=True)
    previous: list[str] = []
    calls = []
    for _ in range(4):
        reply = brain.respond(qwen_prompt("Type hello and press Enter", previous))
        assert reply.content.startswith("Action: ") and reply.reasoning
        calls.append([c["arguments"] for c in tool_calls(reply.content)])
        assert all(c["name"] == "computer_use" for c in tool_calls(reply.content))
        previous.append(reply.content)
    assert calls[0] == [{"action": "left_click", "coordinate": [52, 185]}, {"action": "type", "text": "hello"}]
    assert calls[1] == [{"action": "key", "keys": ["enter"]}]
    assert calls[2] == calls[3] == [{"action": "terminate", "status": "success"}]
    # the harness maps x*W/999 back to pixels: lands within 2 px of the target
    assert abs(int(52 * 1920 / 999) - 100) <= 2 and abs(int(185 * 1080 / 999) - 200) <= 2

    done = brain.respond(qwen_prompt("Click the OK button", ["x"]))
    assert [c["arguments"] for c in tool_calls(done.content)] == [{"action": "terminate", "status": "success"}]
    unknown = brain.respond(qwen_prompt("Launch the rockets", []))
    assert [c["arguments"] for c in tool_calls(unknown.content)] == [{"action": "terminate", "status": "failure"}]


def test_scripted_solver_counts_step_lines() -> None:
    brain = ScriptedSolver(TASKS, screen_size=(1920, 1080), solution=solve)
    reply = brain.respond(qwen_prompt("Type hello and press Enter", [], step_lines=1))
    assert [c["arguments"] for c in tool_calls(reply.content)] == [{"action": "key", "keys": ["enter"]}]


def test_to_qwen_actions_maps_pyautogui() -> None:
    screen = (1000, 1000)
    assert to_qwen_actions("pyautogui.doubleClick(x=500, y=250)", screen)[1] == [
        {"action": "double_click", "coordinate": [500, 250]}
    ]
    assert to_qwen_actions("pyautogui.hotkey('ctrl', 'a')", screen)[1] == [{"action": "key", "keys": ["ctrl", "a"]}]
    assert to_qwen_actions("pyautogui.scroll(-3)", screen)[1] == [{"action": "scroll", "pixels": -3}]
    # a list of keys is pressed one after the other, not together
    assert to_qwen_actions("pyautogui.press(['down', 'right'], interval=0.3)", screen)[1] == [
        {"action": "key", "keys": ["down"]},
        {"action": "key", "keys": ["right"]},
    ]
    assert to_qwen_actions("pyautogui.press('tab', presses=2)", screen)[1] == [{"action": "key", "keys": ["tab"]}] * 2
    assert to_qwen_actions("FAIL", screen)[1] == [{"action": "terminate", "status": "failure"}]
    assert to_qwen_actions("WAIT", screen)[1][0]["action"] == "wait"
    with pytest.raises(ValueError):
        to_qwen_actions("x = 1", screen)


def test_scripted_solver_with_the_fake_backend() -> None:
    fake = pytest.importorskip("legato_gym.backends.fake", reason="the fake backend is not built yet")
    from legato_gym.config import DesktopConfig

    screen = DesktopConfig().screen
    brain = ScriptedSolver()
    for task in fake.default_tasks(DesktopConfig()):
        plan = fake.fake_solution(task, screen)
        previous: list[str] = []
        for step in plan:
            reply = brain.respond(qwen_prompt(task.instruction, previous, screen=screen))
            args = [c["arguments"] for c in tool_calls(reply.content)]
            if step.kind == "click":  # the harness maps x*W/999 back to pixels: within 2 px of the target
                (x, y) = args[0]["coordinate"]
                assert abs(int(x * screen[0] / 999) - step.x) <= 2 and abs(int(y * screen[1] / 999) - step.y) <= 2
            elif step.kind in ("done", "fail"):
                status = "success" if step.kind == "done" else "failure"
                assert args == [{"action": "terminate", "status": status}]
            else:
                assert args[0]["action"] == {"type": "type", "key": "key"}[step.kind]
            previous.append(reply.content)
        last = brain.respond(qwen_prompt(task.instruction, previous, screen=screen))
        assert tool_calls(last.content)[-1]["arguments"]["action"] == "terminate"


def test_random_brain_is_seeded_and_valid() -> None:
    def replies(seed: int) -> list[str]:
        brain = RandomBrain(seed)
        return [brain.respond([]).content for _ in range(40)]

    first = replies(3)
    assert first == replies(3) and first != replies(4)
    valid = {"left_click", "double_click", "right_click", "mouse_move", "type", "key", "scroll", "terminate"}
    for content in first:
        calls = tool_calls(content)
        assert content.startswith("Action: ") and len(calls) == 1
        args = calls[0]["arguments"]
        assert args["action"] in valid
        if "coordinate" in args:
            assert all(0 <= v <= 999 for v in args["coordinate"])


def test_replay_brain(http: httpx.Client) -> None:
    brain = ReplayBrain(["first", Reply("second", "because")])
    with ReferencePolicyServer(brain) as server:
        got = [post(http, server, chat_body([user("hi")])).json()["choices"][0]["message"] for _ in range(3)]
    assert [m["content"] for m in got[:2]] == ["first", "second"] and got[1]["reasoning"] == "because"
    assert tool_calls(got[2]["content"])[0]["arguments"] == {"action": "terminate", "status": "failure"}
    assert brain.served == 3


def test_brain_failure_is_a_500(http: httpx.Client) -> None:
    class Broken:
        def respond(self, messages: Any) -> Reply:
            raise RuntimeError("no idea")

    with ReferencePolicyServer(Broken()) as server:
        response = post(http, server, chat_body([user("hi")]))
    assert response.status_code == 500 and "no idea" in response.json()["error"]["message"]


def test_cli_form_prints_its_url() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "legato_rl.testing.server", "--port", "0", "--brain", "random", "--model", "cli/m"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        models = httpx.get(url + "/models", timeout=10).json()
        assert models["data"][0]["id"] == "cli/m"
        reply = httpx.post(url + "/chat/completions", json={"model": "cli/m", "messages": [user("hi")]}, timeout=10)
        assert tool_calls(reply.json()["choices"][0]["message"]["content"])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_server_module_keeps_its_names_and_the_testing_modules_stay_under_600_lines() -> None:
    from legato_rl.testing import server

    public = {"BEHAVIOURS", "FAULTS", "HOSTILE_REPLIES", "FaultPlan", "Faults", "Latency", "PrefixCache", "main"}
    assert public | {"RecordedRequest", "ReferencePolicyServer", "ServerStats"} <= set(server.__all__)
    assert all(hasattr(server, name) for name in server.__all__)
    sizes = {f.name: len(f.read_text().splitlines()) for f in Path(server.__file__).parent.glob("*.py")}
    assert max(sizes.values()) <= 600, sizes
