"""GIMP and VLC on local desktops: set up as OSWorld's VM has them, ready when loaded, graded by desktop-env.

The per-app knowledge (the apps package), the port relay and the coverage check run without a desktop; the rest runs
real GIMP and VLC in the sandbox. The task suite with scripted right and wrong solutions is in
app_scenarios.py (``gimp``, ``vlc``), run in desktop-env's interpreter, which grades it.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import socket
import socketserver
import threading
import time
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from osworld_kit import desktop_env_python, needs_local_tools, run_scenarios

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, apps, relay
from legato_gym.backends.local.coverage import Capabilities, assess
from legato_gym.backends.local.forward import UnixForwarder
from legato_gym.backends.local.sandbox.lookalike import layout as panel_layout
from legato_gym.desktop_server.image import png_from_rows

SCREEN = (1280, 720)
VLC = "VLC_VERBOSE=-1 vlc --no-audio --no-video-title-show"  # as OSWorld's vlc tasks launch it

needs_gimp = pytest.mark.skipif(shutil.which("gimp") is None, reason="needs GIMP (apt: gimp)")
needs_totem = pytest.mark.skipif(
    not (shutil.which("totem") and Path("/usr/libexec/tracker-miner-fs-3").exists()),
    reason="needs GNOME Videos and Tracker's file indexer (apt: totem tracker-miner-fs)",
)
needs_vlc = pytest.mark.skipif(not apps.vlc_http_installed(), reason="needs VLC with its Lua HTTP interface (apt: vlc)")


# ------------------------------------------------------------------------------------ per-app knowledge


def test_ready_titles_wait_for_gimps_image_and_vlcs_window() -> None:
    assert apps.ready_title(["gimp", "/home/user/Desktop/berry.png"]) == "[berry]"
    assert apps.ready_title(["gimp", "/home/user/Desktop/white_background.xcf"]) == "[white_background]"
    assert apps.ready_title(["gimp"]) == "GNU Image Manipulation Program"  # not the splash, "GIMP Startup"
    assert apps.ready_title(["gimp", "/home/user/Desktop/yicun.raw"]) is None  # asks for the raw layout first
    assert apps.ready_title(VLC) == "VLC media player"
    assert apps.ready_title(f"{VLC} --start-time=15 '/home/user/Desktop/Gen 2.mp4'") == "VLC media player"
    steps = [
        {"type": "open", "parameters": {"path": "/home/user/Desktop/photo.jpeg"}},
        {"type": "open", "parameters": {"path": "/home/user/video.mp4"}},
        {"type": "open", "parameters": {"path": "/home/user/Desktop/report.xlsx"}},
    ]
    assert apps.ready_titles(steps) == ["[photo]", "VLC media player", "report.xlsx"]


def test_baseline_vlcrc_turns_the_http_interface_on_and_first_run_questions_off() -> None:
    text = apps.baseline_files()[".config/vlc/vlcrc"].decode()
    sections: dict[str, dict[str, str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("["):
            current = line.strip("[]")
        elif "=" in line:
            key, value = line.split("=", 1)
            sections.setdefault(current, {})[key] = value
    assert sections["core"]["extraintf"] == "http"
    assert sections["lua"]["http-password"] == "password"  # what desktop-env's vlc_playing_info sends
    assert sections["qt"]["qt-privacy-ask"] == "0"
    assert sections["core"]["aout"] == "adummy"  # no sound device here: no "Errors" window on playing
    # none of the settings OSWorld's vlc_config metrics read is set: they start at VLC's defaults
    for key in ("qt-bgcone", "qt-max-volume", "qt-minimal-view", "one-instance-when-started-from-file"):
        assert key not in text


def test_gimps_layout_is_its_default_single_window_maximized(tmp_path: Path) -> None:
    system = tmp_path / "sessionrc"
    system.write_text('(session-info "toplevel"\n    (aux-info\n        (maximized "no"))\n(single-window-mode yes)\n')
    layout = apps.media_files(system)[".config/GIMP/2.10/sessionrc"].decode()
    assert '(maximized "yes")' in layout and '(maximized "no")' not in layout
    assert "(single-window-mode yes)" in layout
    assert ".config/GIMP/2.10/sessionrc" not in apps.media_files(tmp_path / "absent")


def test_images_open_in_gimp_and_media_in_vlc() -> None:
    mime = apps.baseline_files()[".config/mimeapps.list"].decode().splitlines()
    for line in ("image/x-xcf=gimp.desktop", "image/png=gimp.desktop", "image/jpeg=gimp.desktop"):
        assert line in mime
    for line in ("video/mp4=vlc.desktop", "video/x-matroska=vlc.desktop", "audio/mpeg=vlc.desktop"):
        assert line in mime
    assert "audio/x-wav=vlc.desktop" in mime


def test_gimp_profile_key_names_the_gimp_install(tmp_path: Path) -> None:
    assert apps.gimp_profile_key(which=lambda name: None) is None
    one, two = tmp_path / "gimp-a", tmp_path / "gimp-b"
    one.write_text("a")
    two.write_text("bb")
    key = apps.gimp_profile_key(which=lambda name: str(one))
    assert key == apps.gimp_profile_key(which=lambda name: str(one))
    assert key != apps.gimp_profile_key(which=lambda name: str(two))


def test_coverage_reports_vlcs_http_interface_only_with_vlc() -> None:
    task = {
        "id": "vlc-playing",
        "related_apps": ["vlc"],
        "config": [{"type": "launch", "parameters": {"command": VLC, "shell": True}}],
        "evaluator": {"func": "is_vlc_playing", "result": {"type": "vlc_playing_info", "dest": "status.xml"},
                      "expected": {"type": "rule", "rules": {"type": "file_name", "file_name": "a.mp4"}}},
    }  # fmt: skip
    without = Capabilities.detect(grader="osworld", which=lambda name: None)
    assert "vlc-http" not in without.services
    assert any("vlc-http" in reason for reason in assess(task, without).reasons)
    if not apps.vlc_http_installed():
        pytest.skip("needs VLC with its Lua HTTP interface (apt: vlc)")
    found = Capabilities.detect(grader="osworld", which=lambda name: shutil.which(name))
    assert "vlc-http" in found.services
    assert not any("vlc-http" in reason for reason in assess(task, found).reasons)


# ------------------------------------------------------------------------------------ the port relay


class _Named(socketserver.BaseRequestHandler):
    """Answers every connection with its server's name and what it was sent."""

    server: _NamedServer

    def handle(self) -> None:
        data = self.request.recv(64)
        self.request.sendall(self.server.name + b":" + data)


class _NamedServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    name: bytes


def _serve(name: bytes) -> _NamedServer:
    server = _NamedServer(("127.0.0.1", 0), _Named)
    server.name = name
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def _ask(port: int, message: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(message)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(64):
            answer += chunk
        return answer


def test_the_relay_takes_each_connection_to_the_port_it_names_and_no_other(tmp_path: Path) -> None:
    devtools, vlc, hidden = _serve(b"devtools"), _serve(b"vlc"), _serve(b"hidden")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "relay.sock"))
    listener.listen(8)
    ports = [devtools.server_address[1], vlc.server_address[1]]

    def run() -> None:
        with contextlib.suppress(OSError):  # the listener closed: the test is over
            relay.relay(listener, ports)

    threading.Thread(target=run, daemon=True).start()
    forwarders = [
        UnixForwarder(tmp_path / "relay.sock", preamble=relay.preamble(port))
        for port in (*ports, hidden.server_address[1])
    ]
    try:
        assert _ask(forwarders[0].port, b"GET /json") == b"devtools:GET /json"
        assert _ask(forwarders[1].port, b"GET /requests/status.xml") == b"vlc:GET /requests/status.xml"
        assert _ask(forwarders[2].port, b"GET /") == b""  # a port the relay was not started with: closed
    finally:
        for forwarder in forwarders:
            forwarder.close()
        listener.close()
        for server in (devtools, vlc, hidden):
            server.shutdown()
            server.server_close()


def test_the_relay_closes_a_connection_whose_first_line_is_no_port() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"GET / HTTP/1.1\r\n")
        assert relay.read_port(right, [8080]) is None
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"8080\nGET /")
        assert relay.read_port(right, [8080]) == 8080
        assert right.recv(16) == b"GET /"  # the connection's own bytes are left for the app


# ------------------------------------------------------------------------------------ real desktops


def _png(width: int = 320, height: int = 200) -> bytes:
    """A PNG (legato's stdlib writer, unfiltered rows): a red left half and a blue right half."""
    row = b"\x00" + (b"\xc8\x1e\x1e" * (width // 2)) + (b"\x1e\x1e\xc8" * (width - width // 2))
    return png_from_rows(width, height, row * height, level=6)


def _wav(seconds: int = 120) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(1)
        sound.setframerate(8000)
        sound.writeframes(bytes(int(128 + 90 * math.sin(i * 0.35)) for i in range(8000)) * seconds)
    return out.getvalue()


@pytest.fixture(scope="module")
def desktop() -> Iterator[LocalDesktop]:
    needs_local_tools()
    # GIMP maps its window after seconds on a busy host: the ready signal may wait for it that long
    with LocalDesktop(DesktopConfig(screen=SCREEN, options={"window_timeout": 90})) as d:
        yield d


def _task(steps: list[dict[str, Any]]) -> Task:
    return Task("legato-media-probe", "Do nothing.", {"config": steps, "evaluator": {"func": "infeasible"}})


def _upload(tmp_path: Path, name: str, data: bytes) -> dict[str, Any]:
    (tmp_path / name).write_bytes(data)
    files = [{"local_path": str(tmp_path / name), "path": f"/home/user/Desktop/{name}"}]
    return {"type": "upload_file", "parameters": {"files": files}}


def _until(check: Callable[[], Any], seconds: float = 60) -> Any:
    """``check()``'s first truthy result, polled until the deadline (then the last result)."""
    deadline = time.monotonic() + seconds
    while not (result := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return result


def _status(desktop: LocalDesktop, auth: tuple[str, str] | None = ("", apps.VLC_HTTP_PASSWORD)) -> Any:
    host, port = desktop.vlc_endpoint()
    try:
        return httpx.get(f"http://{host}:{port}/requests/status.xml", auth=auth, timeout=5)
    except httpx.HTTPError:
        return None


@pytest.mark.desktop
@needs_vlc
def test_vlcs_http_interface_answers_outside_the_sandbox_with_the_vms_password(desktop: LocalDesktop) -> None:
    desktop.reset(_task([{"type": "launch", "parameters": {"command": VLC, "shell": True}}]))
    assert desktop.wait_after_reset().ready
    assert [w.title for w in desktop.display.windows()] == ["VLC media player"]  # no privacy question
    response = _until(lambda: _status(desktop))  # the interface may start listening after the window maps
    assert response is not None and response.status_code == 200, response
    assert "<state>stopped</state>" in response.text
    unauthorised = _status(desktop, auth=None)
    assert unauthorised is not None and unauthorised.status_code == 401


@pytest.mark.desktop
@needs_totem
def test_gnome_videos_browses_through_tracker_and_shows_no_error_dialog(desktop: LocalDesktop) -> None:
    """On the VM Tracker's file indexer runs and GNOME Videos opens on its (empty) library; without the indexer it
    shows a modal "Browse Error" dialog, a second window of its class with no title."""
    desktop.reset(_task([{"type": "launch", "parameters": {"command": ["totem"]}}]))
    assert desktop.wait_after_reset().ready
    assert _until(lambda: [w.title for w in desktop.display.windows()] == ["Videos"])
    indexer = "pgrep -f ^/usr/libexec/tracker-miner-fs-3"
    # control: Videos' query started the indexer (D-Bus activation, inside the sandbox)
    assert _until(lambda: desktop.client.execute(indexer, shell=True)["returncode"] == 0, 30)
    assert desktop.display.wait_settled(time.monotonic() + 30, 1.0, 0.05)  # the answer drawn, or a dialog shown
    assert [(w.title, w.wm_class) for w in desktop.display.windows()] == [("Videos", "totem.Totem")]


@pytest.mark.desktop
@needs_vlc
def test_a_sound_file_opens_in_vlc_and_plays_without_a_sound_device(desktop: LocalDesktop, tmp_path: Path) -> None:
    # `open` goes by MIME type (xdg-open), and this VLC has sound on: it must play, not hang or complain
    steps = [
        _upload(tmp_path, "tone.wav", _wav()),
        {"type": "open", "parameters": {"path": "/home/user/Desktop/tone.wav"}},
    ]
    desktop.reset(_task(steps))
    assert desktop.wait_after_reset().ready
    assert [w.title for w in desktop.display.windows()] == ["tone.wav - VLC media player"]  # no "Errors" window

    def playing() -> str:
        response = _status(desktop)
        return response.text if response is not None and "<state>playing</state>" in response.text else ""

    status = _until(playing)
    assert "tone.wav" in status, _status(desktop)


@pytest.mark.desktop
@needs_gimp
def test_an_image_opens_in_gimp_maximized_and_ready_once_drawn(desktop: LocalDesktop, tmp_path: Path) -> None:
    steps = [
        _upload(tmp_path, "berry.png", _png()),
        {"type": "open", "parameters": {"path": "/home/user/Desktop/berry.png"}},
    ]
    desktop.reset(_task(steps))
    assert desktop.wait_after_reset().ready
    windows = desktop.display.windows()
    assert len(windows) == 1 and windows[0].title.startswith("[berry] (imported)"), windows  # not the splash
    out = desktop.client.execute(["wmctrl", "-lG"])["output"].split(None, 7)
    left, top, width, height = map(int, out[2:6])
    assert width == panel_layout(SCREEN).work_area[2] and height > SCREEN[1] * 0.9  # maximized, single-window
    assert desktop.display.painted(left, top, width, height)
    profile = desktop.client.execute("ls ~/.config/GIMP/2.10/pluginrc ~/.config/GIMP/2.10/sessionrc", shell=True)
    assert profile["returncode"] == 0, profile  # GIMP's first start done once, in the baseline


@pytest.mark.desktop
@needs_gimp
def test_fast_reset_puts_gimps_profile_back(desktop: LocalDesktop) -> None:
    desktop.reset(_task([{"type": "launch", "parameters": {"command": ["gimp"]}}]))
    assert desktop.wait_after_reset().ready
    assert [w.title for w in desktop.display.windows()] == ["GNU Image Manipulation Program"]
    spoil = "printf '(theme \"Light\")\\n' > ~/.config/GIMP/2.10/gimprc && rm ~/.config/GIMP/2.10/sessionrc"
    assert desktop.client.execute(spoil, shell=True)["returncode"] == 0
    desktop.reset(_task([]))
    assert desktop.last_reset_kind in ("fast", "ahead")  # in place, or a desktop started ahead
    assert desktop.client.execute("ls ~/.config/GIMP/2.10/gimprc", shell=True)["returncode"] != 0
    layout = desktop.client.file("/home/user/.config/GIMP/2.10/sessionrc")
    assert layout is not None and b'(maximized "yes")' in layout


# ------------------------------------------------------------------------------------ graded by desktop-env


def _scenario(python: str, args: dict[str, Any], timeout: float = 900) -> Any:
    return run_scenarios(python, "app_scenarios.py", json.dumps(args), timeout=timeout)


@pytest.mark.desktop
@pytest.mark.osworld_venv
@needs_gimp
@needs_vlc
@pytest.mark.timeout(900)  # the scenario's own bound: eight GIMP and VLC episodes, minutes on a loaded 2-core machine
def test_gimp_and_vlc_tasks_score_one_for_the_right_solution_and_zero_for_the_wrong(tmp_path: Path) -> None:
    needs_local_tools()
    python = desktop_env_python()
    # an image exported after a menu command (vm_file), GIMP's and VLC's settings files (gimp_config_file,
    # vlc_config), and what VLC plays, asked over its HTTP interface from outside the sandbox (vlc_playing_info)
    names = ["gimp", "gimp_config", "vlc", "vlc_config"]
    args = {"cache": str(tmp_path / "d"), "files": str(tmp_path / "f"), "apps": names, "window_timeout": 90}
    result = _scenario(python, args)
    assert set(result) == set(names)
    for app, runs in result.items():
        assert (runs["right"]["score"], runs["wrong"]["score"]) == (1.0, 0.0), (app, runs)
        assert runs["right"]["ready"] and runs["wrong"]["ready"], (app, runs)
    assert result["vlc"]["right"]["titles"] == ["VLC media player"]
    assert result["gimp"]["right"]["titles"][0].startswith("[berry] (imported)")
    assert result["gimp_config"]["right"]["titles"] == ["GNU Image Manipulation Program"]
    assert result["gimp"]["right"]["saved"] == [320, 200]  # the export the post-config made
