"""The URL-keyed file cache: its layout, atomic fills, resumed downloads, and its use by setup and grading.

Every file is made by the test and served from a loopback HTTP server or a file:// URL.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from legato_gym.backends.local import evaluators
from legato_gym.backends.local.file_cache import FILE_CACHE_ENV_VAR, FileCache, default_file_cache_dir, url_key
from legato_gym.backends.local.task_setup import SetupRunner
from legato_gym.errors import SetupError

PAYLOAD = b"the gold file\n" * 1000


class Server:
    """A loopback HTTP server of in-memory files that honours Range requests and logs each request."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.requests: list[tuple[str, str | None]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append((self.path, self.headers.get("Range")))
                body = outer.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                status, start = 200, 0
                if rng := self.headers.get("Range"):
                    start = int(rng.removeprefix("bytes=").rstrip("-"))
                    status = 206
                self.send_response(status)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                self.wfile.write(body[start:])

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server({"/task/gold.txt": PAYLOAD, "/task/input.bin": bytes(range(256)) * 64})
    yield srv
    srv.close()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/nothing-listens-here.txt"


def test_put_keys_by_url_sha256_and_indexes_size_and_content_hash(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache")
    url = "https://example.org/a b.docx"
    entry = cache.put(url, b"hello")
    key = hashlib.sha256(url.encode()).hexdigest()
    assert url_key(url) == key
    assert entry.path == tmp_path / "cache" / "files" / key
    assert entry.path.read_bytes() == b"hello"
    meta = json.loads((tmp_path / "cache" / "index" / f"{key}.json").read_text())
    assert meta == {"url": url, "size": 5, "sha256": hashlib.sha256(b"hello").hexdigest()}
    assert url in cache and "https://example.org/other" not in cache
    assert [e.url for e in FileCache(tmp_path / "cache").entries()] == [url]  # persistent: a new handle sees it


def test_corrupt_content_does_not_count(tmp_path: Path) -> None:
    url = "https://example.org/f.txt"
    FileCache(tmp_path).put(url, b"right bytes")
    (tmp_path / "files" / url_key(url)).write_bytes(b"wrong bytes")
    assert FileCache(tmp_path).path(url) is None


def test_fetch_downloads_once_from_loopback(tmp_path: Path, server: Server) -> None:
    cache = FileCache(tmp_path)
    url = server.url("/task/gold.txt")
    entry = cache.fetch(url, timeout=30)
    assert entry.path.read_bytes() == PAYLOAD
    again = FileCache(tmp_path).fetch(url, timeout=30)
    assert again.path == entry.path
    assert [path for path, _ in server.requests] == ["/task/gold.txt"]  # the second fetch was served from disk


def test_fetch_resumes_a_partial_download_with_range(tmp_path: Path, server: Server) -> None:
    url = server.url("/task/input.bin")
    partial = tmp_path / "partial" / url_key(url)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(server.files["/task/input.bin"][:1000])
    entry = FileCache(tmp_path).fetch(url, timeout=30)
    assert server.requests == [("/task/input.bin", "bytes=1000-")]
    assert entry.path.read_bytes() == server.files["/task/input.bin"]
    assert not partial.exists()


def test_fetch_file_url(tmp_path: Path) -> None:
    source = tmp_path / "made here.txt"
    source.write_bytes(b"local bytes")
    url = source.as_uri()
    assert FileCache(tmp_path / "cache").fetch(url).path.read_bytes() == b"local bytes"
    with pytest.raises(SetupError, match="no such file"):
        FileCache(tmp_path / "cache").fetch((tmp_path / "absent.txt").as_uri())


def test_unreachable_and_404_name_the_url(tmp_path: Path, server: Server) -> None:
    cache = FileCache(tmp_path)
    dead = closed_port_url()
    with pytest.raises(SetupError, match="unreachable") as info:
        cache.fetch(dead, timeout=30, connect_timeout=5)
    assert dead in str(info.value) and "legato osworld cache" in str(info.value)
    with pytest.raises(SetupError, match="HTTP 404"):
        cache.fetch(server.url("/task/missing.txt"), timeout=30)
    assert dead not in cache


def test_default_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FILE_CACHE_ENV_VAR, str(tmp_path / "c"))
    assert default_file_cache_dir() == tmp_path / "c"
    assert FileCache.default().root == tmp_path / "c"


class Uploads:
    """Stands in for the desktop's server: records ``/setup/upload`` calls (path -> bytes)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def upload(self, path: str, data: bytes) -> None:
        self.files[path] = data


def test_setup_download_reads_the_cache_first(tmp_path: Path) -> None:
    url = closed_port_url()  # nothing answers: only the cache can give the bytes
    cache = FileCache(tmp_path / "files")
    cache.put(url, b"cached input")
    client = Uploads()
    runner = SetupRunner(client, tmp_path / "task", (1280, 720), deadline=float("inf"), settle=None, files=cache)  # type: ignore[arg-type]
    runner.run([{"type": "download", "parameters": {"files": [{"url": url, "path": "/home/user/in.txt"}]}}])
    assert client.files == {"/home/user/in.txt": b"cached input"}


def test_setup_download_fills_the_cache(tmp_path: Path, server: Server) -> None:
    cache = FileCache(tmp_path / "files")
    url = server.url("/task/input.bin")
    runner = SetupRunner(Uploads(), tmp_path / "task", (1280, 720), deadline=float("inf"), settle=None, files=cache)  # type: ignore[arg-type]
    runner.run([{"type": "download", "parameters": {"files": [{"url": url, "path": "/tmp/x"}]}}])
    assert cache.path(url) is not None  # a later reset (any desktop) reads it from the cache


def test_cloud_file_gold_is_read_from_the_cache(tmp_path: Path, server: Server) -> None:
    cache = FileCache(tmp_path / "files")
    gold = server.url("/task/gold.txt")
    cache.fetch(gold, timeout=30)
    server.files.clear()  # the server forgets it: only the cache has it now
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    spec = {"type": "cloud_file", "path": gold, "dest": "gold.txt"}
    path = evaluators.get_cloud_file(None, task_dir, spec, cache)  # type: ignore[arg-type]
    assert Path(path).read_bytes() == PAYLOAD
    multi = {"type": "cloud_file", "multi": True, "path": [gold, gold], "dest": ["a.txt", "b.txt"], "gives": [0, 1]}
    assert evaluators.get_cloud_file(None, task_dir, multi, cache) == [str(task_dir / "a.txt"), str(task_dir / "b.txt")]  # type: ignore[arg-type]
    with pytest.raises(SetupError, match="unreachable"):
        evaluators.get_cloud_file(None, task_dir, {"type": "cloud_file", "path": closed_port_url(), "dest": "c"}, cache)  # type: ignore[arg-type]


def test_osworld_grader_finds_cached_files_where_desktop_env_looks(tmp_path: Path) -> None:
    """desktop-env skips a download whose ``<uuid5(url)>_<basename(path)>`` exists, and a cloud_file at ``dest``."""
    from legato_gym.backends.local.graders import prefill_osworld

    cache = FileCache(tmp_path / "files")
    setup_url, gold_url, absent = "https://h.example/in.docx", "https://h.example/gold.docx", "https://h.example/no"
    cache.put(setup_url, b"input")
    cache.put(gold_url, b"gold")
    config = {
        "id": "t1",
        "config": [
            {"type": "download", "parameters": {"files": [{"url": setup_url, "path": "/home/user/Desktop/in.docx"}]}},
            {"type": "download", "parameters": {"files": [{"url": absent, "path": "/home/user/no.txt"}]}},
        ],
        "evaluator": {
            "func": ["compare_docx_files", "compare_docx_files"],
            "expected": [
                {"type": "cloud_file", "path": gold_url, "dest": "gold.docx"},
                {"type": "cloud_file", "multi": True, "path": [gold_url], "dest": ["g2.docx"]},
            ],
        },
    }
    prefill_osworld(cache, config, tmp_path / "downloads", tmp_path / "work")
    name = f"{uuid.uuid5(uuid.NAMESPACE_URL, setup_url)}_in.docx"
    assert (tmp_path / "downloads" / "t1" / name).read_bytes() == b"input"
    assert (tmp_path / "work" / "t1" / "gold.docx").read_bytes() == b"gold"
    assert (tmp_path / "work" / "t1" / "g2.docx").read_bytes() == b"gold"
    # what the cache lacks is left to desktop-env's own download
    assert [p.name for p in (tmp_path / "downloads" / "t1").iterdir()] == [name]


def test_concurrent_fetches_of_one_url_give_one_whole_file(tmp_path: Path, server: Server) -> None:
    url = server.url("/task/input.bin")
    results: list[bytes] = []
    errors: list[BaseException] = []

    def fetch() -> None:
        try:
            results.append(FileCache(tmp_path).fetch(url, timeout=30).path.read_bytes())
        except BaseException as exc:  # surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and results == [server.files["/task/input.bin"]] * 4


@pytest.mark.desktop
@pytest.mark.skipif(
    not all(shutil.which(t) for t in ("Xvfb", "openbox", "bwrap", "wmctrl", "xdotool")),
    reason="needs the local backend's Debian packages (xvfb openbox bubblewrap wmctrl xdotool)",
)
def test_real_desktop_runs_a_task_from_the_cache_after_the_server_is_gone(tmp_path: Path, server: Server) -> None:
    """Setup download and cloud_file gold come from the cache on every later reset, with no server at all."""
    from legato_gym import DesktopConfig, Task
    from legato_gym.backends.local import LocalDesktop

    server.files["/t/in.txt"] = b"copy me\n"
    input_url, gold_url = server.url("/t/in.txt"), server.url("/t/in.txt?gold")
    server.files["/t/in.txt?gold"] = b"copy me\n"
    config = {
        "id": "cache-e2e",
        "instruction": "Copy in.txt to out.txt on the Desktop.",
        "config": [{"type": "download", "parameters": {"files": [{"url": input_url, "path": "~/Desktop/in.txt"}]}}],
        "evaluator": {
            "func": "compare_text_file",
            "result": {"type": "vm_file", "path": "~/Desktop/out.txt", "dest": "out.txt"},
            "expected": {"type": "cloud_file", "path": gold_url, "dest": "gold.txt"},
        },
    }
    task = Task("cache-e2e", config["instruction"], config)  # type: ignore[arg-type]
    copy = "import os, shutil; d = os.path.expanduser('~/Desktop/'); shutil.copy(d + 'in.txt', d + 'out.txt')"
    desktop_config = DesktopConfig(screen=(640, 480), options={"file_cache": str(tmp_path / "files")})

    def run(desktop: LocalDesktop, actions: list[str]) -> float:
        desktop.reset(task)
        desktop.wait_after_reset()
        for action in actions:
            desktop.act(action)
        desktop.wait_before_eval()
        return desktop.evaluate()

    with LocalDesktop(desktop_config) as desktop:
        assert run(desktop, [copy, "DONE"]) == 1.0
        server.close()
        server.files.clear()
        assert run(desktop, ["DONE"]) == 0.0  # reset kept the cache; no out.txt this time
        assert run(desktop, [copy, "DONE"]) == 1.0
    assert input_url in FileCache(tmp_path / "files") and gold_url in FileCache(tmp_path / "files")
