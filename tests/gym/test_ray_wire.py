"""What a Ray host agent sends per step, and the Ray env without Ray installed (no cluster needed)."""

from __future__ import annotations

import io
import sys
from typing import Any

import numpy as np
import pytest
from PIL import Image

from legato_gym.backends.fake import FakeDesktop, default_tasks
from legato_gym.config import DesktopConfig
from legato_gym.errors import ConfigError, MissingDependencyError
from legato_gym.png import encode_png
from legato_gym.vector.ray_env import RayPlacement, _unwire, import_ray
from legato_gym.vector.ray_host import HostAgent, decode_screen, encode_screen

CONFIG = DesktopConfig(screen=(320, 240))


def _screen() -> np.ndarray:
    desktop = FakeDesktop(CONFIG, seed=0)
    desktop.reset(default_tasks(CONFIG)[0])
    return np.ascontiguousarray(desktop.observe().screenshot)


@pytest.mark.parametrize("codec", ["zlib", "png", "raw"])
def test_codecs_round_trip(codec: Any) -> None:
    image = _screen()
    encoded = encode_screen(image.reshape(-1).data, image.shape, codec)
    decoded = decode_screen(encoded, image.shape, codec)
    assert np.array_equal(np.frombuffer(decoded, np.uint8).reshape(image.shape), image)
    if codec != "raw":
        assert len(encoded) < image.nbytes // 10  # a desktop screen compresses well


def test_foreign_png_is_decoded_too() -> None:
    # a backend's own PNG (Pillow's adaptive filters), not legato's Up-filter encoding
    image = np.random.default_rng(0).integers(0, 255, (24, 40, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(image).save(out, format="PNG", optimize=True)
    decoded = decode_screen(out.getvalue(), image.shape, "png")
    assert np.array_equal(np.frombuffer(decoded, np.uint8).reshape(image.shape), image)
    with pytest.raises(ValueError, match="expected shape"):
        decode_screen(out.getvalue(), (10, 10, 3), "png")


def _agent(codec: Any) -> HostAgent:
    return HostAgent("inproc", codec, 0, None, {}, 1)


def _reply(image: np.ndarray, png: bytes | None) -> tuple[dict[str, Any], bytes]:
    obs: dict[str, Any] = {"instruction": "x", "shape": list(image.shape), "where": "blob"}
    blob = image.tobytes()
    if png is not None:
        obs["png"] = len(png)
        blob += png
    return {"kind": "response", "id": 3, "ok": True, "result": {"obs": obs, "reward": 0.0}}, blob


@pytest.mark.parametrize(("codec", "with_png"), [("auto", True), ("auto", False), ("zlib", True), ("raw", False)])
def test_agent_sends_only_the_new_screenshot_and_the_driver_restores_the_worker_blob(
    codec: str, with_png: bool
) -> None:
    image = _screen()
    png = encode_png(image) if with_png else None
    message, blob = _reply(image, png)
    sent, payload = _agent(codec)._encode(message, None, blob)
    obs = sent["result"]["obs"]
    if codec == "auto" and with_png:
        assert obs["wire"] == "png-tail" and payload == png  # one PNG stands for the pixels and the PNG
    elif codec == "raw":
        assert len(payload) == image.nbytes
    else:
        assert obs["wire"] == "zlib" and len(payload) < image.nbytes // 10
    restored = _unwire(dict(obs), payload)
    assert bytes(restored) == blob  # exactly what a local worker would have framed


def test_placement_values_are_checked() -> None:
    assert RayPlacement.coerce("auto") == RayPlacement(address="auto")
    assert RayPlacement().for_backend("osworld") == (4.0, 4 * 1024**3, {"legato_kvm": 1.0, "legato_docker": 1.0})
    assert RayPlacement(cpus=0.5, resources={"gpu_host": 1}).for_backend("local") == (0.5, 1024**3, {"gpu_host": 1})
    for bad in ({"group": 0}, {"codec": "jpeg"}, {"hosting": "thread"}, {"cpus": -1}, {"resources": {"x": -1}}):
        with pytest.raises(ConfigError):
            RayPlacement(**bad)
    with pytest.raises(ConfigError, match="cluster address"):
        RayPlacement.coerce("")


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependencyError, match=r"legatolabs\[ray\]"):
        import_ray()
    from legato_gym.vector import make_vector_env

    with pytest.raises(MissingDependencyError, match=r"legatolabs\[ray\]"):
        make_vector_env(2, backend="fake", ray="auto")
