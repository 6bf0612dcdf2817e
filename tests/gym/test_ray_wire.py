"""What a Ray host agent sends per step, and the Ray env without Ray installed (no cluster needed)."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
from PIL import Image

from legato_gym.backends.fake import FakeDesktop, default_tasks
from legato_gym.config import DesktopConfig
from legato_gym.errors import ConfigError, DesktopCrashed, MissingDependencyError
from legato_gym.png import encode_png
from legato_gym.transport.handles import WorkerHandle, WorkerLauncher
from legato_gym.vector import DesktopVectorEnv
from legato_gym.vector.ray_env import RayDesktopVectorEnv, RayPlacement, desktops_per_node, import_ray
from legato_gym.vector.ray_host import HostAgent, LazyScreenshot, decode_screen, encode_screen
from legato_gym.vector.ray_hosts import Hosts, unwire

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
    arrived = dict(obs)
    restored = unwire(arrived, payload)
    if obs.get("wire") == "png-tail":  # the PNG alone: the driver decodes it only when the pixels are read
        assert arrived["where"] == "png" and bytes(restored) == png
        assert np.array_equal(np.asarray(LazyScreenshot(bytes(restored), image.shape)), image)
    else:
        assert bytes(restored) == blob  # exactly what a local worker would have framed


def test_lazy_screenshot_decodes_on_first_read_only() -> None:
    image = _screen()
    shot = LazyScreenshot(encode_png(image), image.shape)
    assert shot.shape == image.shape and shot.dtype == np.uint8 and shot.ndim == 3 and len(shot) == image.shape[0]
    assert not shot.decoded  # shape and dtype need no pixels
    assert int(shot[5, 7, 1]) == int(image[5, 7, 1]) and shot.decoded
    assert shot.array() is shot.array() and np.shares_memory(np.asarray(shot), shot.array())  # decoded once
    assert not np.asarray(shot).flags.writeable
    assert np.array_equal(np.asarray(Image.fromarray(shot)), image)  # Pillow reads it as an array too
    assert np.asarray(shot, dtype=np.float32).dtype == np.float32


def test_desktops_per_node_counts_the_scarcest_resource() -> None:
    node = {"CPU": 8.0, "memory": 6.0 * 1024**3, "legato_xvfb": 2.0}
    assert desktops_per_node(node, {"CPU": 1.0, "memory": 1024.0**3, "legato_xvfb": 1.0}) == 2
    assert desktops_per_node(node, {"CPU": 4.0, "memory": 4 * 1024.0**3}) == 1
    assert desktops_per_node(node, {"legato_kvm": 1.0}) == 0
    assert desktops_per_node(node, {}) is None  # fake desktops need nothing: no limit
    assert desktops_per_node({"CPU": 0.3 * 10}, {"CPU": 0.3}) == 10  # float sums are not floored one short


def _closed_port() -> int:
    with socket.socket() as sock:  # bound, never listening: a connect is refused at once
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.ray
@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", ["{}", "ray://{}", "auto"])
def test_unreachable_address_fails_at_once_naming_it(form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray", reason="needs ray: pip install 'legatolabs[ray]'")
    if ray.is_initialized():
        pytest.skip("a Ray instance already runs in this process")
    address = f"127.0.0.1:{_closed_port()}"
    if form == "auto":
        monkeypatch.setenv("RAY_ADDRESS", address)
    given = form.format(address)
    with pytest.raises(ConfigError, match="no Ray cluster answers") as caught:
        RayDesktopVectorEnv(2, "fake", CONFIG, placement=RayPlacement(address=given))
    assert address in str(caught.value) or given in str(caught.value)
    assert "ray start --head" in str(caught.value)
    assert not ray.is_initialized()


_SILENT_HEAD = """
import socket, sys, time
from legato_gym.errors import ConfigError
from legato_gym.vector.ray_env import RayDesktopVectorEnv, RayPlacement

server = socket.create_server(("127.0.0.1", 0))  # accepts connections and never answers: a wedged head
address = f"127.0.0.1:{server.getsockname()[1]}"
try:
    RayDesktopVectorEnv(1, "fake", placement=RayPlacement(address=address, connect_timeout=3))
except ConfigError as exc:
    print("ConfigError:", exc, flush=True)
    sys.stdout.flush()
    import os
    os._exit(0)  # ray.init is still trying in its thread: leave without waiting for it
print("connected?!", flush=True)
"""


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_a_head_that_never_answers_fails_within_the_connect_timeout() -> None:
    pytest.importorskip("ray", reason="needs ray: pip install 'legatolabs[ray]'")
    done = subprocess.run(
        [sys.executable, "-c", _SILENT_HEAD], capture_output=True, text=True, timeout=100, check=False
    )  # its own process: the abandoned ray.init must not share this one's Ray state
    assert "ConfigError:" in done.stdout, (done.stdout, done.stderr[-2000:])
    assert "did not accept this driver within 3 s" in done.stdout and "connect_timeout" in done.stdout


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


def test_collects_harness_sends_a_lazy_screenshots_png_without_decoding_it() -> None:
    from legato_rl.harness.qwen import QwenHarness

    image = _screen()
    png = encode_png(image)
    shot = LazyScreenshot(png, image.shape)
    url = QwenHarness().encode_image(shot, png=png)
    assert url.endswith(base64.b64encode(png).decode()) and not shot.decoded
    resized = QwenHarness(resize=True, max_pixels=160 * 120).encode_image(shot, png=png)
    assert shot.decoded and resized != url  # resizing reads the pixels: then they are decoded


class _FakeRay:
    """Just what :class:`Hosts` asks of Ray: the node table, actor creation and ``kill``."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.node_table = nodes
        self.created: list[dict[str, Any]] = []
        self.killed: list[object] = []

    def nodes(self) -> list[dict[str, Any]]:
        return self.node_table

    def remote(self, cls_or_arg: Any, *args: Any) -> Any:
        # ray.remote(HostAgent) gives the actor class; ActorClass.options(...).remote(*args) gives an actor
        return self if isinstance(cls_or_arg, type) else object()

    def options(self, **options: Any) -> _FakeRay:
        self.created.append(options)
        return self

    def kill(self, actor: object, no_restart: bool = True) -> None:
        self.killed.append(actor)


def _node(name: str, slots: int) -> dict[str, Any]:
    return {"NodeID": name * 28, "Alive": True, "Resources": {"legato_t": float(slots)}}


def test_a_lost_desktop_goes_where_there_is_room_or_is_refused_at_once() -> None:
    ray = _FakeRay([_node("a", 2), _node("b", 2)])
    hosts = Hosts(ray, RayPlacement(group=2, resources={"legato_t": 1}), "fake", (), 2)
    hosts.expected = 4
    placed = [hosts.place() for _ in range(4)]  # two agents of two, not yet placed by Ray: room for no more
    assert [options["resources"] for options in ray.created] == [{"legato_t": 2.0}] * 2
    with pytest.raises(DesktopCrashed, match="no live node of the Ray cluster has room"):
        hosts.place()
    for (host, _), name in zip(placed[::2], "ab", strict=True):
        host.started, host.node_id, host.where = True, name * 28, "vm (127.0.0.1)"
    doomed = placed[0][0]
    # its agent died; Ray still lists node a alive (it notices dead agents first): no desktop goes there
    hosts.lose(doomed, "ActorDiedError: the actor died", dead=True)
    with pytest.raises(DesktopCrashed, match=r"free room by node: node bbbbbbbbbbbb: 0; 0 starting") as caught:
        hosts.place()
    assert "ray start --address" in str(caught.value)
    assert len(ray.created) == 2  # no agent made that Ray could not place
    for _, key in placed[:2]:
        hosts.release(doomed, key)
    assert ray.killed == [doomed.actor]  # the lost agent is not left behind
    ray.node_table.append(_node("c", 2))  # a node joins: the lost desktops go there
    host, _ = hosts.place()
    assert host not in {h for h, _ in placed} and host.capacity == 2 and len(ray.created) == 3
    hosts.place()
    assert len(ray.created) == 3  # the second fits the same new agent


def test_an_autoscaling_cluster_gets_the_agents_it_cannot_place_yet() -> None:
    ray = _FakeRay([_node("a", 1)])
    hosts = Hosts(ray, RayPlacement(group=1, resources={"legato_t": 1}, require_fit=False), "fake", (), 1)
    for _ in range(3):  # demand beyond the nodes is what makes an autoscaler add hosts
        hosts.place()
    assert len(ray.created) == 3


def test_a_desktop_with_nowhere_to_run_is_unavailable_and_its_requests_fail_at_once() -> None:
    class Homeless(DesktopVectorEnv):
        """Desktop 1's worker cannot be placed while ``room`` is False (as a Ray desktop whose node was lost)."""

        room = True

        def _launcher(self) -> WorkerLauncher:
            local, env = super()._launcher(), self

            class Launcher:
                def start(self, env_id: int) -> WorkerHandle:
                    if env_id == 1 and not env.room:
                        raise DesktopCrashed("no live node of the Ray cluster has room for another 'fake' desktop")
                    return local.start(env_id)

                def close(self) -> None:
                    local.close()

            return Launcher()

    env = Homeless(2, "fake", CONFIG, seed=0)
    task = env.tasks[0]

    async def scenario() -> None:
        await env.areset(1, task)
        back = env.wait_available(1)
        assert back.done()  # available: done at once
        env.room = False
        os.kill(env.worker_pids[1], signal.SIGKILL)
        end = time.monotonic() + 30
        while env.available(1):  # the env notices the death; the replacement has nowhere to go
            assert time.monotonic() < end, "desktop 1 still counts as available"
            await asyncio.sleep(0.02)
        assert env.worker_pids[1] == -1 and env.available(0)
        back = env.wait_available(1)
        for _ in range(2):  # each request fails at once, with the desktop's id, and starts nothing
            with pytest.raises(DesktopCrashed, match="no live node") as caught:
                await env.areset(1, task)
            assert caught.value.env_id == 1 and env.worker_pids[1] == -1
        assert not back.done()
        await env.areset(0, task)  # the other desktop is untouched
        env.room = True
        env._workers.place_unavailable()  # what the Ray env runs after each poll of the nodes
        await asyncio.wait_for(back, 30)
        assert env.available(1)
        await env.areset(1, task)
        _, _, _, truncated, _ = await env.astep(1, "WAIT")
        assert not truncated

    try:
        asyncio.run(scenario())
    finally:
        env.close()
