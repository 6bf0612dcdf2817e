"""The in-desktop server's folder on its own (as the sandbox runs it), and its PNG writer and framebuffer reader.

The server runs inside the sandbox from a read-only copy of ``legato_gym/desktop_server`` with no
``legato_gym`` around it; these tests run it so, from a copy outside the project, under the system's
isolated interpreter where it has one (the AT-SPI helper's), with a framebuffer file written here.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

import legato_gym.png
from legato_gym.backends.local import sandbox
from legato_gym.backends.local.limits import Limits
from legato_gym.backends.local.sandbox import bwrap
from legato_gym.backends.local.sandbox.spec import SandboxLayout, SandboxSpec
from legato_gym.desktop_server import image
from legato_gym.desktop_server.actions import ACTION_OUTPUT_LIMIT
from legato_gym.png import encode_png

SYSTEM_PYTHON = "/usr/bin/python3"


def write_xwd(path: Path, pixels: np.ndarray, *, pad: int = 8, colors: int = 3) -> None:
    """An XWD file as Xvfb's ``-fbdir`` writes it: header, window name, colour map, BGRX rows of ``pad``
    spare bytes each."""
    height, width, _ = pixels.shape
    name = b"legato\0\0"
    stride = 4 * width + pad
    words = [0] * 25
    words[0], words[1], words[2], words[3] = 100 + len(name), 7, 2, 24
    words[4], words[5], words[11], words[12], words[19] = width, height, 32, stride, colors
    rows = np.zeros((height, stride), np.uint8)
    rows[:, : 4 * width : 4] = pixels[:, :, 2]
    rows[:, 1 : 4 * width : 4] = pixels[:, :, 1]
    rows[:, 2 : 4 * width : 4] = pixels[:, :, 0]
    path.write_bytes(struct.pack(">25I", *words) + name + bytes(12 * colors) + rows.tobytes())


def decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.fixture
def screen() -> np.ndarray:
    pixels = np.random.default_rng(7).integers(0, 256, (24, 37, 3), dtype=np.uint8)
    pixels[12:] = pixels[11]  # repeated rows, as screens have
    return pixels


def test_the_framebuffer_reader_skips_the_colour_map_and_row_padding(tmp_path: Path, screen: np.ndarray) -> None:
    write_xwd(tmp_path / "fb", screen)
    header = image.read_xwd_header(tmp_path / "fb")
    assert (header.width, header.height, header.bits_per_pixel) == (37, 24, 32)
    assert (header.bytes_per_line, header.offset) == (4 * 37 + 8, 108 + 12 * 3)
    png = image.Framebuffer(str(tmp_path / "fb")).png()
    assert image.png_size(png) == (37, 24)
    np.testing.assert_array_equal(decode(png), screen)
    assert decode(encode_png(screen)).tobytes() == decode(png).tobytes()  # both writers: the same pixels


def test_a_framebuffer_not_32_bits_a_pixel_is_refused_with_the_fix(tmp_path: Path, screen: np.ndarray) -> None:
    write_xwd(tmp_path / "fb", screen)
    data = bytearray((tmp_path / "fb").read_bytes())
    data[44:48] = struct.pack(">I", 16)  # bits_per_pixel
    (tmp_path / "fb").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="16 bits per pixel; start Xvfb with depth 24"):
        image.Framebuffer(str(tmp_path / "fb"))


def test_legato_png_is_the_server_writer_with_a_numpy_filter() -> None:
    assert legato_gym.png.png_from_rows is image.png_from_rows
    assert legato_gym.png.png_size is image.png_size and legato_gym.png.PNG_SIGNATURE is image.PNG_SIGNATURE
    rows = np.zeros((2, 1 + 3 * 3), np.uint8)
    rows[:, 0] = 2  # the Up filter encode_png gives every row; zeros: black, then the same again
    assert encode_png(np.zeros((2, 3, 3), np.uint8)) == image.png_from_rows(3, 2, rows.tobytes())


def test_the_sandbox_binds_the_server_folder_and_runs_it(tmp_path: Path) -> None:
    spec = SandboxSpec(python=sys.executable, host_uid=None, limits=Limits(256 << 20, 64, 1 << 20))
    layout = SandboxLayout(tmp_path, 7, tmp_path / "X7", tmp_path / "fb")
    argv = bwrap.mounts(spec, layout)
    binds = {argv[i + 2]: argv[i + 1] for i, arg in enumerate(argv) if arg == "--ro-bind"}
    assert binds["/run/legato-server"] == str(Path(image.__file__).parent) == str(sandbox.SERVER_DIR)
    entry = bwrap.bwrap_argv(spec, layout, 10, 11)[-1]
    assert "exec python /run/legato-server --listen fd:3 --fb /run/legato-fb " in entry


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of the server's modules outside the project: no legato_gym to import them from."""
    copy = tmp_path / "srv"
    copy.mkdir()
    for module in sandbox.SERVER_DIR.glob("*.py"):
        shutil.copy(module, copy / module.name)
    return copy


def _python() -> list[str]:
    return [SYSTEM_PYTHON, "-I"] if os.path.exists(SYSTEM_PYTHON) else [sys.executable, "-I"]


def test_the_folder_runs_as_a_script_under_isolated_python(folder: Path) -> None:
    proc = subprocess.run([*_python(), str(folder), "--atspi", "nonsense"], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "--atspi 'nonsense': give tree or terminal" in proc.stderr


@pytest.fixture
def served(folder: Path, tmp_path: Path, screen: np.ndarray) -> Iterator[httpx.Client]:
    write_xwd(tmp_path / "fb", screen)
    sock = tmp_path / "server.sock"
    proc = subprocess.Popen(
        [*_python(), str(folder), "--listen", f"unix:{sock}", "--fb", str(tmp_path / "fb")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},  # no DISPLAY: pyautogui cannot be imported
    )
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the server did not listen within 60 s"
            time.sleep(0.01)
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://desktop", timeout=60) as c:
            yield c
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()


def test_the_folder_serves_the_framebuffer_as_png(served: httpx.Client, screen: np.ndarray) -> None:
    response = served.get("/screenshot")
    assert response.status_code == 200 and response.headers["content-type"] == "image/png"
    np.testing.assert_array_equal(decode(response.content), screen)
    assert served.post("/screen_size", json={}).json() == {"width": 37, "height": 24}


def test_actions_cannot_import_the_servers_modules_as_their_own(served: httpx.Client, folder: Path) -> None:
    code = (
        "import importlib.util, sys\n"
        "mods = ('handlers', 'image', 'actions', 'cli', 'httpd', 'damage')\n"
        "print([m for m in mods if importlib.util.find_spec(m)])\n"
        f"print(any(p.rstrip('/') == {str(folder)!r} for p in sys.path), 'legato_gym' in sys.modules)\n"
    )
    reply = served.post("/legato/action", json={"code": code, "timeout": 30}).json()
    assert reply["status"] == "success" and reply["returncode"] == 0, reply
    assert reply["output"].splitlines() == ["[]", "False False"]


def test_without_x_the_server_says_it_cannot_watch_the_screen(served: httpx.Client) -> None:
    still = {"quiet": 0.1, "timeout": 1, "poll": 0.02}
    reply = served.post("/legato/action", json={"code": "pass", "timeout": 30, "still": still}).json()
    assert reply["status"] == "success" and reply["still"]["how"] == "none", reply  # the host compares frames
    assert reply["still"]["why"]
    bad = served.post("/legato/action", json={"code": "pass", "timeout": 30, "still": {**still, "allowance": -1}})
    assert bad.status_code == 400 and "allowance >= 0" in bad.json()["message"]


def test_a_commands_output_is_kept_up_to_its_limit(served: httpx.Client) -> None:
    # 64 MiB on stdout and 9 MiB on stderr: the server keeps 4 MiB of each, and answers
    script = "head -c 67108864 /dev/zero | tr '\\0' x; head -c 9437184 /dev/zero | tr '\\0' y >&2; echo done >&2"
    reply = served.post("/execute", json={"command": script, "shell": True}, timeout=120).json()
    assert reply["status"] == "success" and reply["returncode"] == 0
    assert reply["output"] == "x" * ACTION_OUTPUT_LIMIT and reply["error"] == "y" * ACTION_OUTPUT_LIMIT
    merged = served.post("/run_bash_script", json={"script": "seq 3; head -c 9437184 /dev/zero >&2"}).json()
    assert merged["output"].startswith("1\n2\n3\n") and len(merged["output"]) == ACTION_OUTPUT_LIMIT
    invalid = served.post("/execute", json={"command": ["printf", "a\\377b"]}).json()  # a byte that is not UTF-8
    assert invalid["output"] == "a\ufffdb"
