"""Every byte the host reads from a desktop is bounded (legato_gym.bounds.ReadCaps), measured by what an impostor
server on the desktop's socket managed to send, not by time; and a desktop the agent destroys ends its episode
as the agent's failure (AgentFault: terminated, reward 0, the cause in info).

The impostor is a real HTTP peer on a real unix socket (or TCP on loopback), sending from one small buffer: the
host's memory can only hold what it read, and the impostor counts what the kernel accepted from it.
"""

from __future__ import annotations

import pickle
import socket
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from legato_gym import AgentFault, DesktopConfig, ReplyTooLarge
from legato_gym.backends.fake import FakeDesktop, default_tasks
from legato_gym.backends.local.client import DesktopClient
from legato_gym.backends.local.forward import UnixForwarder
from legato_gym.bounds import ReadCaps
from legato_gym.contract import ActResult
from legato_gym.episode import Episode
from legato_gym.png import check_screenshot

_MIB = 1 << 20
#: Small caps, so that a body many times the cap stays cheap to send.
CAPS = ReadCaps(answer_bytes=256 * 1024, file_bytes=2 * _MIB, screenshot_bytes=64 * 1024)
#: What the kernel may hold between the two ends of a socket, and the host's read chunk: the slack over a cap.
SLACK = 8 * _MIB


@dataclass
class Impostor:
    """An HTTP peer that answers every request with ``size`` bytes.

    ``declared`` is the Content-Length it sends (default ``size``; ``-1``: none, the body ends with the
    connection, as an HTTP/1.0-style answer does)."""

    path: Path
    size: int
    declared: int | None = None
    status: int = 200
    sent: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    def serve(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(1)
        threading.Thread(target=self._run, args=(listener,), daemon=True).start()

    def _run(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        listener.close()
        chunk = b"x" * (256 * 1024)
        try:
            with conn:
                conn.recv(65536)
                length = self.size if self.declared is None else self.declared
                header = f"Content-Length: {length}" if length >= 0 else "Connection: close"
                conn.sendall(f"HTTP/1.1 {self.status} OK\r\n{header}\r\n\r\n".encode())
                while self.sent < self.size:
                    part = chunk[: min(len(chunk), self.size - self.sent)]
                    conn.sendall(part)
                    self.sent += len(part)
        except OSError:
            pass  # the host hung up: what it never read is never sent
        finally:
            self.done.set()


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "server.sock"


@pytest.mark.parametrize("declared", [None, -1], ids=["with-length", "until-close"])
def test_an_answer_over_its_cap_ends_the_read_at_the_cap(sock: Path, declared: int | None) -> None:
    impostor = Impostor(sock, size=256 * _MIB, declared=declared)
    impostor.serve()
    client = DesktopClient(sock, timeout=60, caps=CAPS)
    with pytest.raises(ReplyTooLarge, match="cap of 262144 bytes"):  # announced, or counted as it came
        client.execute(["true"])
    client.close()
    assert impostor.done.wait(30)
    assert impostor.sent < CAPS.answer_bytes + SLACK, "the host read on past the cap"


def test_an_answer_that_announces_more_than_the_cap_is_not_read_at_all(sock: Path) -> None:
    impostor = Impostor(sock, size=256 * _MIB, declared=2 << 30)
    impostor.serve()
    client = DesktopClient(sock, timeout=60, caps=CAPS)
    with pytest.raises(ReplyTooLarge, match="announced 2147483648 bytes"):
        client.request("GET", "/platform")
    client.close()
    assert impostor.done.wait(30)
    assert impostor.sent < SLACK


def test_a_file_for_grading_streams_to_disk_up_to_its_cap(sock: Path, tmp_path: Path) -> None:
    body = 3 * CAPS.answer_bytes  # over the in-memory cap, under the file cap: streamed to disk whole
    impostor = Impostor(sock, size=body)
    impostor.serve()
    client = DesktopClient(sock, timeout=60, caps=CAPS)
    target = tmp_path / "cache" / "got.bin"
    assert client.fetch_file("/home/user/out.bin", target)
    assert target.stat().st_size == body and target.read_bytes() == b"x" * body
    client.close()


def test_a_file_over_its_cap_is_cut_and_leaves_nothing(tmp_path: Path) -> None:
    sock = tmp_path / "big.sock"
    impostor = Impostor(sock, size=256 * _MIB, declared=-1)  # no length to refuse it by: the bytes count
    impostor.serve()
    client = DesktopClient(sock, timeout=60, caps=CAPS)
    target = tmp_path / "cache" / "got.bin"
    with pytest.raises(ReplyTooLarge, match="the file passed the cap"):
        client.fetch_file("/home/user/out.bin", target)
    client.close()
    assert impostor.done.wait(30)
    assert impostor.sent < CAPS.file_bytes + SLACK
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_a_missing_file_is_none_and_its_answer_is_capped(sock: Path, tmp_path: Path) -> None:
    impostor = Impostor(sock, size=64 * _MIB, status=404)
    impostor.serve()
    client = DesktopClient(sock, timeout=60, caps=CAPS)
    with pytest.raises(ReplyTooLarge):  # even a 404's body is read against the answer cap
        client.fetch_file("/nope", tmp_path / "x")
    client.close()


def test_the_loopback_forwarder_cuts_an_answer_at_its_limit(tmp_path: Path) -> None:
    sock = tmp_path / "fwd.sock"
    impostor = Impostor(sock, size=256 * _MIB)
    impostor.serve()
    forwarder = UnixForwarder(sock, limit=CAPS.file_bytes)
    received = 0
    try:
        with socket.create_connection((forwarder.host, forwarder.port), timeout=30) as conn:
            conn.sendall(b"GET /file HTTP/1.1\r\nHost: x\r\n\r\n")
            while data := conn.recv(1 << 16):
                received += len(data)
        assert impostor.done.wait(30)
    finally:
        forwarder.close()
    assert received <= CAPS.file_bytes + 4096  # the headers and up to the limit, never the rest
    assert impostor.sent < CAPS.file_bytes + SLACK
    assert forwarder.overflows == 1


def _png(width: int, height: int, pixels: bytes = b"") -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(pixels)) + chunk(b"IEND", b"")


def test_a_screenshot_is_capped_by_bytes_and_by_the_screen_before_it_is_decoded() -> None:
    small = _png(4, 2, b"\0" + b"\0" * 12 + b"\0" + b"\0" * 12)
    assert check_screenshot(small, (640, 480), CAPS) == small
    with pytest.raises(ReplyTooLarge, match="larger than the screen"):  # a few bytes that claim 60000x60000
        check_screenshot(_png(60000, 60000), (640, 480), CAPS)
    with pytest.raises(ReplyTooLarge, match="over the cap"):
        check_screenshot(small + b"\0" * CAPS.screenshot_bytes, (640, 480), CAPS)


def test_caps_are_checked() -> None:
    with pytest.raises(ValueError, match="answer_bytes"):
        ReadCaps(answer_bytes=10)


# ------------------------------------------------------------------------------------- the agent's failure


class _Destroyed(FakeDesktop):
    """A fake desktop that reports what the local desktop reports when the agent destroyed it: in ``act`` of
    ``"BOMB"``, and in grading once :attr:`grading_fault` is set."""

    grading_fault = False

    def act(self, action: str) -> ActResult:
        if action == "BOMB":
            raise AgentFault("pids", "the action hit the desktop's bounds (pids: 3 forks refused)")
        return super().act(action)

    def evaluate(self) -> float:
        if self.grading_fault:
            raise AgentFault("reply_too_large", "a file for grading passed its cap")
        return super().evaluate()


def test_an_agent_fault_ends_the_episode_graded_zero_with_its_cause() -> None:
    desktop = _Destroyed(DesktopConfig(screen=(320, 240)))
    task = default_tasks(desktop.config)[0]
    episode = Episode(desktop, max_steps=5)
    episode.reset(task)
    obs, reward, terminated, truncated, info = episode.step("BOMB")
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["agent_fault"]["cause"] == "pids" and "forks refused" in info["agent_fault"]["message"]
    assert obs.screenshot.shape == (240, 320, 3) and episode.done
    episode.reset(task)  # the next episode starts as usual
    desktop.grading_fault = True
    assert episode.truncate() == 0.0
    assert episode.last_info["agent_fault"]["cause"] == "reply_too_large" and episode.done


def test_an_agent_fault_survives_pickling() -> None:
    fault = pickle.loads(pickle.dumps(AgentFault("server_killed", "the server ended with status 137")))
    assert fault.cause == "server_killed" and str(fault) == "server_killed: the server ended with status 137"
