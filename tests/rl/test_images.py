"""Images travel once: the worker's PNG bytes reach the store as bytes, never decoded from their data URL."""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import pickle
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from legato_gym import DesktopConfig, Timeouts
from legato_gym.backends.fake import default_tasks
from legato_gym.png import encode_png
from legato_rl import _json
from legato_rl.collect import collect
from legato_rl.harness import QwenHarness
from legato_rl.images import PNG_DATA_URL, PngDataURL
from legato_rl.policy import PolicyConfig
from legato_rl.store import RolloutStore, load_request, read_record_dicts
from legato_rl.testing import ReferencePolicyServer, ScriptedSolver

SCREEN = (320, 240)


def shot(i: int) -> np.ndarray:
    image = np.zeros((36, 64, 3), np.uint8)
    image[i % 36, :, 1] = 200
    image[0, 0, 0] = i
    return image


def body_for(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "m", "messages": messages, "temperature": 1.0, "max_tokens": 64}


def reply(i: int) -> str:
    return f'Action: step {i}\n<tool_call>\n{{"name": "computer_use", "arguments": {{"action": "wait"}}}}\n</tool_call>'


def decode_callers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Spy on ``base64.b64decode``: the list fills with the module name of each caller."""
    real = base64.b64decode
    callers: list[str] = []

    def spy(*args: Any, **kwargs: Any) -> bytes:
        callers.append(str(sys._getframe(1).f_globals.get("__name__", "")))
        return real(*args, **kwargs)

    monkeypatch.setattr(base64, "b64decode", spy)
    return callers


def legato_callers(callers: list[str]) -> list[str]:
    """The callers in legato's own driver code (the test policy server in legato_rl.testing aside)."""
    return [
        c for c in callers if c.split(".")[0] in ("legato_rl", "legato_gym") and not c.startswith("legato_rl.testing")
    ]


# --- PngDataURL ------------------------------------------------------------------------------------------------


def test_a_png_data_url_is_the_data_url_and_keeps_its_bytes() -> None:
    png = encode_png(shot(1))
    url = PngDataURL(png)
    plain = PNG_DATA_URL + base64.b64encode(png).decode("ascii")
    assert isinstance(url, str) and url == plain and hash(url) == hash(plain)
    assert url.png is png and url.sha256 == hashlib.sha256(png).hexdigest()
    assert _json.dumps({"url": url}) == _json.dumps({"url": plain})  # orjson, as the request goes out
    assert json.dumps({"url": url}) == json.dumps({"url": plain})
    assert type(url[:5]) is str  # string operations give plain strings, without the bytes
    copied = pickle.loads(pickle.dumps(url))
    assert type(copied) is PngDataURL and copied == url and copied.png == png
    assert repr(url) == f"PngDataURL(<{len(png)} bytes of PNG>)"


def test_a_png_data_url_copies_a_mutable_buffer() -> None:
    png = bytearray(encode_png(shot(2)))
    url = PngDataURL(png)  # type: ignore[arg-type]  # a caller that passes a bytearray all the same
    png[-1] ^= 0xFF
    assert type(url.png) is bytes and url == PNG_DATA_URL + base64.b64encode(url.png).decode("ascii")
    assert url.png != bytes(png)


def test_a_given_sha256_is_used_as_it_is() -> None:
    png = encode_png(shot(3))
    assert PngDataURL(png, sha256="ab" * 32).sha256 == "ab" * 32


def test_the_harness_sends_the_workers_png_as_it_is_and_its_own_encoding_otherwise() -> None:
    png = encode_png(shot(5))
    url = QwenHarness().encode_image(shot(5), png=png)
    assert type(url) is PngDataURL and url.png is png  # the worker's bytes, not a copy decoded back
    resized = QwenHarness(resize=True, max_pixels=32 * 32).encode_image(shot(5), png=png)
    assert type(resized) is PngDataURL and resized.png != png
    assert resized == PNG_DATA_URL + base64.b64encode(resized.png).decode("ascii")


# --- the store -------------------------------------------------------------------------------------------------


def test_the_store_files_a_harness_image_from_its_bytes_without_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's PNG (``png=``) is filed as it is: the store never decodes the data URL it is sent as."""
    pngs = [encode_png(shot(i)) for i in range(3)]
    conversation = QwenHarness().start("Do the thing")
    bodies = []
    callers = decode_callers(monkeypatch)
    with RolloutStore(tmp_path) as store:
        for i, png in enumerate(pngs):
            body = body_for(conversation.messages(shot(i), png=png))
            bodies.append((body, store.put_request(body)))
            conversation.record_reply(reply(i))
    assert callers == []
    monkeypatch.undo()
    stored = {p.name: p.read_bytes() for p in (tmp_path / "images").iterdir()}
    assert stored == {f"{hashlib.sha256(png).hexdigest()}.png": png for png in pngs}
    for body, ref in bodies:
        assert json.dumps(load_request(tmp_path, ref)) == json.dumps(body)


def test_an_image_url_as_plain_string_or_with_its_bytes_is_stored_alike(tmp_path: Path) -> None:
    """Whether the store takes the bytes along or decodes them, the files and references are the same."""
    urls = [PngDataURL(encode_png(shot(i))) for i in range(2)]

    def body(as_plain: Callable[[str], str]) -> dict[str, Any]:
        content = [{"type": "image_url", "image_url": {"url": as_plain(u)}} for u in urls]
        return body_for([{"role": "user", "content": [*content, {"type": "text", "text": "hi"}]}])

    refs = []
    for name, as_plain in (("bytes", lambda u: u), ("plain", str)):
        with RolloutStore(tmp_path / name) as store:
            refs.append(store.put_request(body(as_plain)))
    assert type(body(str)["messages"][0]["content"][0]["image_url"]["url"]) is str
    assert refs[0] == refs[1]
    for folder in ("messages", "images"):
        files = [{p.name: p.read_bytes() for p in (tmp_path / name / folder).iterdir()} for name in ("bytes", "plain")]
        assert files[0] == files[1] and files[0]


def test_load_request_gives_images_back_with_their_bytes(tmp_path: Path) -> None:
    png = encode_png(shot(4))
    sent = body_for([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PngDataURL(png)}}]}])
    with RolloutStore(tmp_path) as store:
        ref = store.put_request(sent)
    url = load_request(tmp_path, ref)["messages"][0]["content"][0]["image_url"]["url"]
    assert type(url) is PngDataURL and url.png == png and url.sha256 == hashlib.sha256(png).hexdigest()


# --- collect, end to end ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ReferencePolicyServer]:
    with ReferencePolicyServer(brain=ScriptedSolver()) as srv:
        yield srv


def test_collect_stores_the_workers_png_bytes_and_never_decodes_them(
    tmp_path: Path, server: ReferencePolicyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the worker's ``info["screenshot_png"]`` to ``images/<sha>.png``: no base64 decoding in the driver."""
    collect_module = importlib.import_module("legato_rl.collect")  # the package's `collect` is the function
    real_make = collect_module.make_vector_env
    seen: dict[str, bytes] = {}

    def recording(*args: Any, **kwargs: Any) -> Any:
        env = real_make(*args, **kwargs)
        areset, astep = env.areset, env.astep

        async def reset(*a: Any, **k: Any) -> Any:
            obs, info = await areset(*a, **k)
            seen[hashlib.sha256(info["screenshot_png"]).hexdigest()] = info["screenshot_png"]
            return obs, info

        async def step(*a: Any, **k: Any) -> Any:
            out = await astep(*a, **k)
            seen[hashlib.sha256(out[-1]["screenshot_png"]).hexdigest()] = out[-1]["screenshot_png"]
            return out

        env.areset, env.astep = reset, step
        return env

    monkeypatch.setattr(collect_module, "make_vector_env", recording)
    callers = decode_callers(monkeypatch)
    config = DesktopConfig(screen=SCREEN, timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10))
    out = tmp_path / "run"
    summary = collect(default_tasks(config)[:2], PolicyConfig(server.url, server.model, version="v"), out=out,
                      desktops=1, group=1, backend="fake", desktop=config)  # fmt: skip
    assert summary["status_counts"]["ok"] == 2
    assert any(c.startswith("legato_rl.testing") for c in callers)  # the spy is live: the test server decodes
    assert legato_callers(callers) == []
    stored = {p.stem: p.read_bytes() for p in (out / "images").iterdir()}
    steps = sum(r["n_steps"] for r in read_record_dicts(out))
    assert stored and steps >= 2 and set(stored) <= set(seen)
    assert all(stored[sha] == seen[sha] for sha in stored)
