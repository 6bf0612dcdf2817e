"""The file manager (nautilus, GNOME Files 43 on GTK 4) and the PDF viewer's tasks on local desktops.

nautilus shows a listed folder from an idle callback of its main loop; with GTK 4's default GL renderer on the
software rasterizer of a desktop without a GPU, a frame outlasts the frame interval on a busy host, GTK's
redraws keep that callback from running, the "Loading…" spinner turns, the screen never settles and the
ready signal times out. The sandbox's session has GTK 4
draw with cairo (apps.environment()); the tests below open folders while the host's CPUs are all busy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from osworld_kit import needs_local_tools

from legato_gym import DesktopConfig, Task
from legato_gym.backends.local import LocalDesktop, apps
from legato_gym.backends.local.coverage import Capabilities, assess, task_needs

SCREEN = (1280, 720)
NAUTILUS_CLASS = "org.gnome.Nautilus.org.gnome.Nautilus"

needs_nautilus = pytest.mark.skipif(shutil.which("nautilus") is None, reason="needs nautilus (apt: nautilus)")


def test_gtk4_apps_draw_with_cairo_inside_the_desktop() -> None:
    assert apps.environment()["GSK_RENDERER"] == "cairo"


def test_tasks_related_to_pdf_need_the_pdf_viewer() -> None:
    # as OSWorld's multi_apps a82b78bb: the PDF is opened by an `open` step, which names no app
    config = {
        "id": "t",
        "related_apps": ["chrome", "pdf"],
        "config": [{"type": "open", "parameters": {"path": "/home/user/Desktop/paper.pdf"}}],
    }
    assert task_needs(config).apps == {"chrome", "pdf viewer"}
    only_chrome = Capabilities.detect(which=lambda name: "/usr/bin/chromium" if name == "chromium" else None)
    verdict = assess(config, only_chrome)
    assert verdict.status == "refused" and "app 'pdf viewer' is not installed" in verdict.reason


# ------------------------------------------------------------------------------------ real desktops


@pytest.fixture(scope="module")
def desktop() -> Iterator[LocalDesktop]:
    needs_local_tools()
    with LocalDesktop(DesktopConfig(screen=SCREEN)) as d:
        yield d


@pytest.fixture
def busy_host() -> Iterator[None]:
    """Every CPU of the host busy, as on a host running other desktops, until the test ends.

    Each busy process has a session of its own, as each desktop's sandbox has: the kernel shares the CPUs out
    per session (autogroups), so busy processes in the test's own session would leave the desktop its share.
    """
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL, start_new_session=True)
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def _task(steps: list[dict[str, Any]]) -> Task:
    return Task("legato-files-probe", "Do nothing.", {"config": steps, "evaluator": {"func": "infeasible"}})


@pytest.mark.desktop
@needs_nautilus
def test_the_sandbox_session_has_gtk4_draw_with_cairo(desktop: LocalDesktop) -> None:
    desktop.reset(_task([]))
    assert desktop.client.execute("echo $GSK_RENDERER", shell=True)["output"].strip() == "cairo"


@pytest.mark.desktop
@needs_nautilus
@pytest.mark.usefixtures("busy_host")
@pytest.mark.parametrize("attempt", range(3))
def test_a_folder_opened_right_after_a_reset_is_ready_on_a_busy_host(desktop: LocalDesktop, attempt: int) -> None:
    folder = ["Documents", "Desktop", "Downloads"][attempt]
    desktop.reset(_task([{"type": "open", "parameters": {"path": f"/home/user/{folder}"}}]))
    waited = desktop.wait_after_reset()
    shown = [(w.wm_class, w.title) for w in desktop.display.windows()]
    assert waited.ready, f"the ready signal did not hold for {folder} (windows: {shown})"
    assert shown == [(NAUTILUS_CLASS, folder)]
