"""AT-SPI on local desktops: the accessibility bus in each sandbox, ``/accessibility`` and ``/terminal`` as
OSWorld's server answers them, and tasks graded from the tree by desktop-env.

The tree's format is checked against a stand-in for pyatspi's objects (no desktop); the rest runs real
mousepad, LibreOffice, Chromium and gnome-terminal in the sandbox. The graded tasks live in
atspi_scenarios.py and run in desktop-env's interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from osworld_kit import ROOT, desktop_env_python, needs_local_tools

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, apps, sandbox
from legato_gym.backends.local.coverage import Capabilities
from legato_gym.desktop_server import atspi

SCREEN = (1280, 720)
ST = "{https://accessibility.ubuntu.example.org/ns/state}"
ATTR = "{https://accessibility.ubuntu.example.org/ns/attributes}"
CP = "{https://accessibility.ubuntu.example.org/ns/component}"
ACT = "{https://accessibility.ubuntu.example.org/ns/action}"
VAL = "{https://accessibility.ubuntu.example.org/ns/value}"

needs_atspi = pytest.mark.skipif(
    not sandbox.atspi_readable(), reason="needs AT-SPI (apt: at-spi2-core python3-pyatspi gir1.2-atspi-2.0)"
)
OSWORLD = Path(os.environ.get("LEGATO_OSWORLD") or ROOT.parent / "shared" / "osworld")
IMPRESS_TASK = OSWORLD / "evaluation_examples/examples/libreoffice_impress/ef9d12bd-bcee-4ba0-a40e-918400f43ddf.json"
needs_office = pytest.mark.skipif(shutil.which("soffice") is None, reason="needs LibreOffice (apt: libreoffice)")
needs_chromium = pytest.mark.skipif(apps.chromium_binary() is None, reason="needs Chromium (apt: chromium)")


# ------------------------------------------------------------------------ the tree's format (no desktop)


class FakeState:
    def __init__(self, states: list[str]) -> None:
        self.states = states

    def get_states(self) -> list[str]:
        return self.states

    def contains(self, state: str) -> bool:
        return state in self.states


class FakeNode:
    """What the tree walk reads of one pyatspi ``Accessible`` (interfaces given as keyword arguments)."""

    def __init__(self, role: str, name: str = "", *children: FakeNode | None, **interfaces: Any) -> None:
        self.role, self.name, self.children = role, name, list(children)
        self.states: list[str] = interfaces.pop("states", [])
        self.attributes: dict[str, str] = interfaces.pop("attributes", {})
        self.interfaces = interfaces

    @property
    def childCount(self) -> int:
        return len(self.children)

    def getChildAtIndex(self, i: int) -> FakeNode | None:
        return self.children[i]

    def getRoleName(self) -> str:
        return self.role

    def getState(self) -> FakeState:
        return FakeState(self.states)

    def get_attributes(self) -> dict[str, str]:
        return self.attributes

    def _query(self, name: str) -> Any:
        if name not in self.interfaces:
            raise NotImplementedError(name)
        return self.interfaces[name]

    def queryComponent(self) -> Any:
        return self._query("component")

    def queryText(self) -> Any:
        return self._query("text")

    def queryImage(self) -> Any:
        return self._query("image")

    def querySelection(self) -> Any:
        return self._query("selection")

    def queryValue(self) -> Any:
        return self._query("value")

    def queryAction(self) -> Any:
        return self._query("action")

    def queryTable(self) -> Any:
        return self._query("table")


class FakeText:
    def __init__(self, text: str) -> None:
        self.text, self.characterCount = text, len(text)

    def getText(self, start: int, end: int) -> str:
        return self.text[start:end]


class FakeExtents:
    def getExtents(self, kind: int) -> tuple[int, int, int, int]:
        return (10, 20, 300, 40)


class FakeAction:
    nActions = 1

    def getName(self, i: int) -> str:
        return "click"

    def getDescription(self, i: int) -> str:
        return "Clicks the button"

    def getKeyBinding(self, i: int) -> str:
        return "<Alt>o"


class FakeValue:
    currentValue, minimumValue, maximumValue, minimumIncrement = 3.0, 0.0, 10.0, 1.0


def fake_pyatspi(*apps_: FakeNode) -> Any:
    desktop = FakeNode("desktop frame", "main", *apps_)
    names = ("STATE_ACTIVE", "STATE_FOCUSED", "STATE_SHOWING", "STATE_VISIBLE", "STATE_MULTI_LINE")
    return type(
        "FakePyatspi",
        (),
        {
            "Registry": type("Registry", (), {"getDesktop": staticmethod(lambda i: desktop)}),
            "StateType": type("StateType", (), {"_enum_lookup": {name: name for name in names}}),
            "XY_SCREEN": 0,
            "STATE_SHOWING": "STATE_SHOWING",
        },
    )


def test_the_tree_has_osworlds_elements_attributes_and_namespaces() -> None:
    shown = ["STATE_SHOWING", "STATE_VISIBLE"]
    button = FakeNode(
        "push button", "Open", states=["STATE_FOCUSED", *shown], attributes={"toolkit": "gtk", "bad name": "x"},
        component=FakeExtents(), action=FakeAction(), image=object(),
    )  # fmt: skip
    text = FakeNode("text", "", text=FakeText("a < b & \ufffcc\x01"), states=["STATE_MULTI_LINE"])
    slider = FakeNode("slider", "Volume", value=FakeValue(), selection=object())
    frame = FakeNode("frame", "Editor", None, button, text, slider, states=["STATE_ACTIVE"])
    pyatspi = fake_pyatspi(FakeNode("application", "mousepad", frame), FakeNode("application", "Chromium"))
    xml = atspi.atspi_tree(pyatspi)
    assert xml.startswith('<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state"')
    root = ET.fromstring(xml)
    assert root.tag == "desktop-frame"
    assert [(a.tag, a.get("name")) for a in root] == [("application", "mousepad"), ("application", "Google Chrome")]
    got_frame = root[0][0]
    assert got_frame.get(f"{ST}active") == "true"
    assert [child.tag for child in got_frame] == ["push-button", "text", "slider"]  # the gone child left out
    got_button = got_frame[0]
    assert list(got_button.attrib) == [
        "name", f"{ST}focused", f"{ST}showing", f"{ST}visible", f"{ATTR}toolkit", f"{CP}screencoord", f"{CP}size",
        "image", f"{ACT}click_desc", f"{ACT}click_kb",
    ]  # fmt: skip
    assert (got_button.get(f"{CP}screencoord"), got_button.get(f"{CP}size")) == ("(10, 20)", "(300, 40)")
    assert got_button.get(f"{ACT}click_kb") == "<Alt>o"
    assert got_frame[1].get(f"{ST}multi_line") == "true"
    assert got_frame[1].text == "a < b & c"  # OSWorld drops U+FFFC; XML cannot hold U+0001
    assert f"{CP}size" not in got_frame[1].attrib  # not showing: no extents
    assert got_frame[2].get("selection") == "true"
    assert [got_frame[2].get(f"{VAL}{k}") for k in ("value", "min", "max", "step")] == ["3.0", "0.0", "10.0", "1.0"]


def test_a_calc_sheet_gives_only_the_cells_on_screen() -> None:
    columns, shown = 8, {(2, 1), (2, 2), (3, 1), (3, 2)}  # rows 2-3, columns B-C are on screen
    cells = [
        FakeNode("table cell", f"{'ABCDEFGH'[c]}{r + 1}", states=["STATE_SHOWING"] if (r, c) in shown else [])
        for r in range(6)
        for c in range(columns)
    ]
    table = FakeNode("table", "Sheet1", *cells, table=type("T", (), {"nColumns": columns})())
    app = FakeNode("application", "soffice", FakeNode("document spreadsheet", "", table))
    root = ET.fromstring(atspi.atspi_tree(fake_pyatspi(app)))
    assert [cell.get("name") for cell in root.iter("table-cell")] == ["B3", "C3", "B4", "C4"]


def test_terminal_is_the_focused_terminal_of_the_active_window_only() -> None:
    def terminal_app(window_states: list[str], text: str) -> FakeNode:
        term = FakeNode("terminal", "Terminal", text=FakeText(text + "\n\n"), states=["STATE_FOCUSED"])
        return FakeNode(
            "application", "gnome-terminal-server", FakeNode("frame", "user@desk", term, states=window_states)
        )

    assert atspi.atspi_terminal(fake_pyatspi(terminal_app(["STATE_ACTIVE"], "$ ls\nfile"))) == "$ ls\nfile"
    assert atspi.atspi_terminal(fake_pyatspi(terminal_app([], "$ ls"))) is None  # the window is not active
    both = fake_pyatspi(terminal_app(["STATE_ACTIVE"], "a"), terminal_app(["STATE_ACTIVE"], "b"))
    assert atspi.atspi_terminal(both) is None  # OSWorld's xpath must match exactly one


def test_coverage_reports_at_spi_only_where_the_desktop_runs_it() -> None:
    assert "at-spi" not in Capabilities.detect(which=lambda name: None).services  # no session bus to run it on
    if not sandbox.atspi_readable():
        pytest.skip("needs AT-SPI (apt: at-spi2-core python3-pyatspi gir1.2-atspi-2.0)")
    assert "at-spi" in Capabilities.detect().services
    assert "at-spi" in Capabilities.detect(grader="osworld").services


# ------------------------------------------------------------------------------------ real desktops


@pytest.fixture(scope="module")
def desktop() -> Iterator[LocalDesktop]:
    needs_local_tools()
    with LocalDesktop(DesktopConfig(screen=SCREEN)) as d:
        yield d


def _task(*commands: list[str]) -> Task:
    steps = [{"type": "launch", "parameters": {"command": command}} for command in commands]
    return Task("legato-atspi-probe", "Do nothing.", {"config": steps, "evaluator": {"func": "infeasible"}})


def _tree_until(desktop: LocalDesktop, found: Callable[[ET.Element], bool], timeout: float = 90) -> ET.Element:
    """The desktop's accessibility tree, read again until ``found`` holds for it (apps publish as they load)."""
    deadline = time.monotonic() + timeout
    while True:
        reply = desktop.client.request("GET", "/accessibility", timeout=180)
        assert reply.status_code == 200, reply.text
        root = ET.fromstring(reply.json()["AT"])
        if found(root) or time.monotonic() > deadline:
            return root
        time.sleep(0.2)


def _texts(root: ET.Element, tag: str) -> list[str]:
    return [node.text or "" for node in root.iter(tag)]


def _type_when_focused(desktop: LocalDesktop, tag: str, text: str) -> None:
    """Type ``text`` once the tree shows a focused ``tag`` (the app takes keys once its text has the focus)."""

    def focused(root: ET.Element) -> bool:
        return any(node.get(f"{ST}focused") == "true" for node in root.iter(tag))

    assert focused(_tree_until(desktop, focused)), f"no {tag} has the keyboard focus"
    desktop.act(f"pyautogui.typewrite({text!r})")


@pytest.mark.desktop
@needs_atspi
def test_text_typed_into_the_editor_is_in_the_tree_after_fast_resets(desktop: LocalDesktop) -> None:
    for word in ("first", "second"):  # the second desktop is a fast reset: a new bus, the X server kept
        desktop.reset(_task(["mousepad"]))
        assert desktop.wait_after_reset().ready
        _type_when_focused(desktop, "text", f"typed {word} words")
        root = _tree_until(desktop, lambda r: f"typed {word} words" in _texts(r, "text"))  # noqa: B023
        assert root.tag == "desktop-frame"
        assert [app.get("name") for app in root] == ["mousepad"]
        assert f"typed {word} words" in _texts(root, "text"), ET.tostring(root, encoding="unicode")[:3000]


@pytest.mark.desktop
@needs_atspi
@needs_office
def test_libreoffice_writes_its_widgets_and_document_into_the_tree_each_time(desktop: LocalDesktop) -> None:
    desktop.reset(_task(["libreoffice", "--writer"]))
    assert desktop.wait_after_reset().ready
    _type_when_focused(desktop, "paragraph", "Quarterly report")

    def typed(root: ET.Element) -> bool:
        return any("Quarterly report" in text for text in _texts(root, "paragraph"))

    for _ in range(2):  # reading every menu's actions once made LibreOffice block on a full stderr pipe
        root = _tree_until(desktop, typed)
        assert typed(root), ET.tostring(root, encoding="unicode")[:3000]
        writer = next(app for app in root if app.get("name") == "soffice")
        toggles = {node.get("name") for node in writer.iter("toggle-button")}
        assert {"Bold", "Italic"} <= toggles, sorted(b or "" for b in toggles)


@pytest.mark.desktop
@needs_atspi
@needs_chromium
def test_chromium_shows_its_address_bar_and_page_in_the_tree_as_google_chrome(desktop: LocalDesktop) -> None:
    page = "data:text/html,<title>Probe</title><h1>Hello from the page</h1>"
    desktop.reset(_task(["google-chrome", page]))
    assert desktop.wait_after_reset().ready

    def loaded(root: ET.Element) -> bool:
        return any(node.get("name") == "Hello from the page" for node in root.iter("heading"))

    root = _tree_until(desktop, loaded)
    assert loaded(root), ET.tostring(root, encoding="unicode")[:3000]
    (chrome,) = [app for app in root if app.get("name") == "Google Chrome"]
    bars = [node for node in chrome.iter("entry") if node.get("name") == "Address and search bar"]
    assert bars and (bars[0].text or "").startswith("data:text/html")


@pytest.mark.desktop
def test_an_app_that_floods_its_stderr_keeps_running(desktop: LocalDesktop) -> None:
    flood = "head -c 1000000 /dev/zero | tr '\\0' x >&2; touch ~/flooded; exec sleep 600"
    desktop.reset(_task(["sh", "-c", flood]))
    done = desktop.client.execute(
        "for i in $(seq 600); do [ -e ~/flooded ] && exit 0; sleep 0.1; done; exit 1", shell=True, timeout=120
    )
    assert done["returncode"] == 0, "the launched app blocked writing to its stderr"


@pytest.mark.desktop
@needs_atspi
def test_terminal_answers_a_typed_commands_output_from_gnome_terminal(desktop: LocalDesktop) -> None:
    if shutil.which("gnome-terminal") is None:
        pytest.skip("needs gnome-terminal (apt: gnome-terminal); /terminal reads only gnome-terminal, as OSWorld's")
    desktop.reset(_task(["gnome-terminal"]))
    assert desktop.wait_after_reset().ready
    desktop.act("pyautogui.typewrite('echo legato-$((6*7))\\n')")
    deadline = time.monotonic() + 60
    while True:
        reply = desktop.client.request("GET", "/terminal", timeout=180).json()
        output = reply.get("output") or ""
        if "\nlegato-42" in output or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert reply["status"] == "success"
    assert "echo legato-$((6*7))\nlegato-42\n" in output, reply
    assert output == output.rstrip()  # as OSWorld's: right-stripped


@pytest.mark.desktop
@pytest.mark.osworld_venv
@needs_atspi
def test_tasks_graded_from_the_tree_score_one_for_the_right_solution_and_zero_for_the_wrong(tmp_path: Path) -> None:
    needs_local_tools()
    python = desktop_env_python()
    tasks = ["editor"] + ["chrome"] * (apps.chromium_binary() is not None)
    args: dict[str, Any] = {"cache": str(tmp_path / "d"), "files": str(tmp_path / "f"), "tasks": tasks}
    if IMPRESS_TASK.is_file() and shutil.which("soffice") is not None:  # OSWorld's own, download-free
        tasks.append("impress")
        args["impress"] = str(IMPRESS_TASK)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONNOUSERSITE="1")
    proc = subprocess.run(
        [python, str(Path(__file__).with_name("atspi_scenarios.py")), json.dumps(args)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, f"the AT-SPI scenarios failed:\n{proc.stderr[-4000:]}"
    result = json.loads(lines[-1])
    assert set(result) == set(tasks)
    for name, runs in result.items():
        assert (runs["right"]["score"], runs["wrong"]["score"]) == (1.0, 0.0), (name, runs)
        assert runs["right"]["ready"] and runs["wrong"]["ready"], (name, runs)
