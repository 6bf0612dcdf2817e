"""The in-desktop server's ``--mode osworld``: what OSWorld's real server does that a client sees
(reference/osworld.md §3b), on a real Xvfb: the pointer pasted into screenshots, an X connection leaked per
screenshot and the death once X is full, Flask's HTML error pages, form-only routes, and the two routes
only the real server had (``/setup/change_wallpaper``, ``/setup/download_file``)."""

from __future__ import annotations

import http.server
import io
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from legato_gym.backends.local import sandbox
from legato_gym.desktop_server.pointer import paste_pointer, read_pointer

pytestmark = pytest.mark.desktop


@pytest.fixture(scope="module")
def xvfb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    if shutil.which("Xvfb") is None or shutil.which("xdotool") is None:
        pytest.skip("needs Xvfb and xdotool (apt: xvfb xdotool)")
    fbdir = tmp_path_factory.mktemp("fb")
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "320x200x24", "-nolisten", "tcp", "-noreset",
         "-fbdir", str(fbdir)],
        pass_fds=(write_fd,), stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        display = ":" + f.readline().strip()
    try:
        yield display, fbdir / "Xvfb_screen0"
    finally:
        proc.terminate()  # not SIGKILL: Xvfb removes its /tmp/.X11-unix socket, which python-xlib would take
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for leftover in (Path(f"/tmp/.X11-unix/X{display[1:]}"), Path(f"/tmp/.X{display[1:]}-lock")):
            leftover.unlink(missing_ok=True)


def _serve(folder: Path, display: str, fb: Path, mode: str) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    sock = folder.parent / f"{mode}.sock"
    proc = subprocess.Popen(
        [sys.executable, "-I", str(folder), "--listen", f"unix:{sock}", "--fb", str(fb), "--mode", mode],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DISPLAY": display, "HOME": str(folder.parent)},
    )
    deadline = time.monotonic() + 60
    while not sock.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the server did not listen"
        time.sleep(0.01)
    client = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://vm", timeout=60)
    return proc, client


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    copy = tmp_path / "srv"
    copy.mkdir()
    for module in sandbox.SERVER_DIR.glob("*.py"):
        shutil.copy(module, copy / module.name)
    return copy


def _open_sockets(pid: int) -> int:
    return sum(1 for fd in os.listdir(f"/proc/{pid}/fd") if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"))


def _decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def test_screenshots_have_the_pointer_pasted_where_osworld_pastes_it(folder: Path, xvfb: tuple[str, Path]) -> None:
    display, fb = xvfb
    subprocess.run(["xdotool", "mousemove", "50", "60"], env={**os.environ, "DISPLAY": display}, check=True)
    pointer = read_pointer(display)
    assert pointer is not None and (pointer.x, pointer.y) == (50, 60)
    for mode in ("legato", "osworld"):
        proc, client = _serve(folder, display, fb, mode)
        try:
            shot = _decode(client.get("/screenshot").content)
        finally:
            client.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        from legato_gym.desktop_server.image import Framebuffer

        plain = _decode(Framebuffer(str(fb)).png())
        expected = bytearray(plain.tobytes())
        paste_pointer(expected, 320, 200, pointer)
        want = np.frombuffer(bytes(expected), np.uint8).reshape(200, 320, 3)
        np.testing.assert_array_equal(shot, want)
        changed = np.argwhere((shot != plain).any(axis=2))
        assert len(changed) > 0, mode
        # the image's top-left corner at the pointer's position (OSWorld ignores the hotspot)
        assert changed[:, 0].min() >= 60 and changed[:, 1].min() >= 50, mode


def test_each_screenshot_leaks_an_x_connection_and_a_full_x_kills_the_server(
    folder: Path, xvfb: tuple[str, Path]
) -> None:
    display, fb = xvfb
    proc, client = _serve(folder, display, fb, "osworld")
    filler = None
    try:
        assert client.get("/screenshot").status_code == 200  # the HTTP connection is open from here on
        before = _open_sockets(proc.pid)
        for _ in range(5):
            assert client.get("/screenshot").status_code == 200
        assert _open_sockets(proc.pid) == before + 5  # the X connections stay open, as pyxcursor's do
        # another client takes every X slot left: the server's next screenshot cannot open one
        code = (
            "import sys, time; from legato_gym.desktop_server.pointer import read_pointer\n"
            f"while read_pointer({display!r}, leak=True) is not None: pass\n"
            "print('full', flush=True); time.sleep(600)\n"
        )
        filler = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )  # fmt: skip
        assert filler.stdout is not None and filler.stdout.readline().strip() == "full"
        refused = client.get("/screenshot")
        assert refused.status_code == 500 and refused.text.startswith("<!doctype html>")
        with pytest.raises(httpx.HTTPError):
            client.get("/screenshot")
        assert proc.wait(30) == -signal.SIGSEGV
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if filler is not None:
            filler.kill()
            filler.wait()


class _Files(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_flask_answers_form_only_routes_and_the_routes_only_osworld_had(
    folder: Path, xvfb: tuple[str, Path], tmp_path: Path
) -> None:
    display, fb = xvfb
    proc, client = _serve(folder, display, fb, "osworld")
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "a.bin").write_bytes(b"x" * 5000)
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: _Files(*a, directory=str(tmp_path / "www"))
    )  # fmt: skip
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        form = client.post("/execute", data={"command": "true"})
        assert form.status_code == 415 and "Unsupported Media Type" in form.text
        assert form.headers["content-type"].startswith("text/html")
        bad = client.post("/execute", content=b"{", headers={"Content-Type": "application/json"})
        assert bad.status_code == 400 and "<title>400 Bad Request</title>" in bad.text
        as_json = client.post("/file", json={"file_path": "/etc/hostname"})
        assert as_json.status_code == 400 and as_json.text.startswith("<!doctype html>")
        assert client.post("/file", data={"file_path": "/etc/hostname"}).status_code == 200
        assert client.post("/window_size", json={"app_class_name": "x"}).status_code == 400
        crash = client.post("/setup/activate_window", json={"window_name": 5})  # an unhandled TypeError
        assert crash.status_code == 500 and "<title>500 Internal Server Error</title>" in crash.text
        assert client.post("/execute", json={"command": ["true"]}).json()["returncode"] == 0

        assert client.post("/setup/change_wallpaper", json={}).status_code == 400
        assert client.post("/setup/change_wallpaper", json={"path": "/no/such.png"}).status_code == 404
        url = f"http://127.0.0.1:{httpd.server_address[1]}/a.bin"
        got = client.post("/setup/download_file", json={"url": url, "path": "~/d/a.bin"})
        assert got.status_code == 200 and got.text == "File downloaded successfully"
        assert (tmp_path / "d" / "a.bin").read_bytes() == b"x" * 5000
        missing = client.post("/setup/download_file", json={"url": url + ".none", "path": "~/d/b.bin"})
        assert missing.status_code == 500 and "No retries left" in missing.text
        assert client.post("/setup/download_file", json={"url": url}).status_code == 400
    finally:
        httpd.shutdown()
        client.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
