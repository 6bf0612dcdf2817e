"""OSWorld-format tasks per app, with files made here, and their scripted right and wrong solutions.

Run *inside desktop-env's interpreter* by tests/gym/test_local_apps.py (it has openpyxl, python-docx and
python-pptx to make the documents, and desktop-env to grade them):
``python app_scenarios.py '{"cache": DIR, "files": DIR, "apps": ["calc", ...]}'``; prints one JSON line.

Each task's files are put in a file cache under made-up URLs (the ``download`` setup step and the
``cloud_file`` gold files read that cache first, as for OSWorld's own task files), so the tasks look and
are set up like OSWorld's: download, open, act, post-config ``ctrl+s``, a desktop-env metric.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from legato_gym import DesktopConfig, Task, Timeouts
from legato_gym.backends.local import LocalDesktop
from legato_gym.backends.local.file_cache import FileCache

SCREEN = (1280, 720)
URL = "https://files.legato.invalid/apps/"


def _save_xlsx(rows: list[list[Any]]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    for row in rows:
        sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _save_docx(paragraphs: list[str]) -> bytes:
    import docx

    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _save_pptx(title: str) -> bytes:
    import pptx

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    slide.shapes.title.text = title
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _postconfig(window: str) -> list[dict[str, Any]]:
    """OSWorld's usual post-config for documents: focus the window, save with ctrl+s (nothing else)."""
    save = "import pyautogui; import time; pyautogui.hotkey('ctrl', 's'); time.sleep(0.5);"
    return [
        {"type": "activate_window", "parameters": {"window_name": window, "strict": True}},
        {"type": "sleep", "parameters": {"seconds": 0.5}},
        {"type": "execute", "parameters": {"command": ["python", "-c", save]}},
        {"type": "sleep", "parameters": {"seconds": 0.5}},
    ]


def _document_task(
    task_id: str, app: str, instruction: str, name: str, func: str, window: str, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    path = f"/home/user/Desktop/{name}"
    return {
        "id": task_id,
        "snapshot": app,
        "instruction": instruction,
        "source": "legato",
        "config": [
            {"type": "download", "parameters": {"files": [{"url": URL + name, "path": path}]}},
            {"type": "open", "parameters": {"path": path}},
        ],
        "trajectory": "trajectories/",
        "related_apps": [app],
        "evaluator": {
            "postconfig": _postconfig(window),
            "func": func,
            "result": {"type": "vm_file", "path": path, "dest": name},
            "expected": {"type": "cloud_file", "path": URL + "gold-" + name, "dest": "gold-" + name},
            "options": options or {},
        },
        "proxy": False,
    }


def calc(cache: FileCache) -> tuple[dict[str, Any], list[str], list[str]]:
    """Calc: a SUM under a column of an .xlsx, saved in place (compare_table)."""
    rows: list[list[Any]] = [["n"], [1], [2]]
    cache.put(URL + "numbers.xlsx", _save_xlsx(rows))
    cache.put(URL + "gold-numbers.xlsx", _save_xlsx([*rows, [3]]))
    config = _document_task(
        "legato-apps-calc-sum",
        "libreoffice_calc",
        "In numbers.xlsx, put the sum of A2 and A3 into A4.",
        "numbers.xlsx",
        "compare_table",
        "numbers.xlsx - LibreOffice Calc",
        {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]},
    )
    # cursor keys in an action of their own: LibreOffice may handle typed text before queued cursor keys.
    # ctrl+end goes to A3, the last cell used; the typed Enter moves on to A4.
    right = ["pyautogui.hotkey('ctrl', 'end')", "pyautogui.typewrite('\\n=SUM(A2:A3)\\n')"]
    wrong = ["pyautogui.hotkey('ctrl', 'end')", "pyautogui.typewrite('\\n=SUM(A2:A3)+1\\n')"]
    return config, right, wrong


def writer(cache: FileCache) -> tuple[dict[str, Any], list[str], list[str]]:
    """Writer: a paragraph appended to a .docx, saved in place (compare_docx_files)."""
    cache.put(URL + "letter.docx", _save_docx(["Dear team,"]))
    cache.put(URL + "gold-letter.docx", _save_docx(["Dear team,", "Thanks for all"]))
    config = _document_task(
        "legato-apps-writer-append",
        "libreoffice_writer",
        "In letter.docx, add a second paragraph that says 'Thanks for all'.",
        "letter.docx",
        "compare_docx_files",
        "letter.docx - LibreOffice Writer",
    )
    right = ["pyautogui.hotkey('ctrl', 'end')", "pyautogui.typewrite('\\nThanks for all')"]
    wrong = ["pyautogui.hotkey('ctrl', 'end')", "pyautogui.typewrite('\\nThanks for nothing')"]
    return config, right, wrong


def _through_libreoffice(data: bytes, suffix: str) -> bytes:
    """``data`` as LibreOffice saves it (OSWorld's gold files were saved by LibreOffice on the VM)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "in", "gold" + suffix)
        source.parent.mkdir()
        source.write_bytes(data)
        profile = Path(tmp, "profile").as_uri()
        subprocess.run(
            ["soffice", f"-env:UserInstallation={profile}", "--headless", "--convert-to", suffix[1:], "--outdir",
             tmp, str(source)],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        return Path(tmp, "gold" + suffix).read_bytes()


def impress(cache: FileCache) -> tuple[dict[str, Any], list[str], list[str]]:
    """Impress: a slide's title replaced in a .pptx, saved in place (compare_pptx_files)."""
    cache.put(URL + "deck.pptx", _save_pptx("Draft title"))
    cache.put(URL + "gold-deck.pptx", _through_libreoffice(_save_pptx("Quarterly review"), ".pptx"))
    config = _document_task(
        "legato-apps-impress-title",
        "libreoffice_impress",
        "In deck.pptx, change the first slide's title to 'Quarterly review'.",
        "deck.pptx",
        "compare_pptx_files",
        "deck.pptx - LibreOffice Impress",
    )
    # Tab selects the slide's first object (the title), Enter edits its text, ctrl+a selects that text
    go = ["pyautogui.press('tab')", "pyautogui.press('enter')", "pyautogui.hotkey('ctrl', 'a')"]
    end = ["pyautogui.press('esc')", "pyautogui.press('esc')"]
    right = [*go, "pyautogui.typewrite('Quarterly review')", *end]
    wrong = [*go, "pyautogui.typewrite('Quarterly preview')", *end]
    return config, right, wrong


def chrome(cache: FileCache) -> tuple[dict[str, Any], list[str], list[str]]:
    """Chrome: a local page opened in the tab, checked over the DevTools port (open_tabs_info, is_expected_tabs)."""
    for name in ("hello", "other"):
        cache.put(f"{URL}{name}.html", f"<html><head><title>{name}</title></head><body>{name}</body></html>".encode())
    page = "file:///home/user/Desktop/hello.html"
    config = {
        "id": "legato-apps-chrome-open-page",
        "snapshot": "chrome",
        "instruction": f"Open {page} in Chrome's tab.",
        "source": "legato",
        "config": [  # as OSWorld's Chrome tasks start it: port 1337, socat from 9222
            {"type": "download", "parameters": {"files": [
                {"url": f"{URL}{name}.html", "path": f"/home/user/Desktop/{name}.html"} for name in ("hello", "other")
            ]}},
            {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
            {"type": "launch", "parameters": {"command": ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]}},
        ],
        "trajectory": "trajectories/",
        "related_apps": ["chrome"],
        "evaluator": {
            "func": "is_expected_tabs",
            "result": {"type": "open_tabs_info"},
            "expected": {"type": "rule", "rules": {"type": "url", "urls": [page]}},
        },
        "proxy": False,
    }  # fmt: skip
    go = "pyautogui.hotkey('ctrl', 'l')"
    right = [go, f"pyautogui.typewrite('{page}\\n')"]
    wrong = [go, "pyautogui.typewrite('file:///home/user/Desktop/other.html\\n')"]
    return config, right, wrong


TASKS: dict[str, Callable[[FileCache], tuple[dict[str, Any], list[str], list[str]]]] = {
    "calc": calc,
    "writer": writer,
    "impress": impress,
    "chrome": chrome,
}


def _run(desktop: LocalDesktop, task: Task, actions: list[str]) -> dict[str, Any]:
    desktop.reset(task)
    waited = desktop.wait_after_reset()
    titles = [w.title for w in desktop.display.windows()]
    for action in actions:
        desktop.act(action)
    desktop.wait_before_eval()
    score = float(desktop.evaluate())
    return {"score": score, "ready": waited.ready, "titles": titles, "saved": _saved(desktop, task)}


def _saved(desktop: LocalDesktop, task: Task) -> Any:
    """What the task's result document holds (its cells, paragraphs or slide texts), to tell why it scored."""
    result = task.evaluator.get("result") or {}
    if result.get("type") != "vm_file":
        return None
    data = desktop.client.file(str(result["path"]))
    if data is None:
        return None
    name = str(result["path"])
    if name.endswith(".xlsx"):
        import openpyxl

        return [list(row) for row in openpyxl.load_workbook(io.BytesIO(data)).active.values]
    if name.endswith(".docx"):
        import docx

        return [p.text for p in docx.Document(io.BytesIO(data)).paragraphs]
    import pptx

    deck = pptx.Presentation(io.BytesIO(data))
    return [[shape.text_frame.text for shape in slide.shapes if shape.has_text_frame] for slide in deck.slides]


def main(args: dict[str, Any]) -> dict[str, Any]:
    files = FileCache(args["files"])
    config = DesktopConfig(
        screen=SCREEN,
        python=sys.executable,
        timeouts=Timeouts(reset=120, ready=60),
        options={"grader": "osworld", "download_cache": args["cache"], "file_cache": args["files"]},
    )
    out: dict[str, Any] = {}
    with LocalDesktop(config) as desktop:
        for name in args["apps"]:
            task_config, right, wrong = TASKS[name](files)
            task = Task(task_config["id"], task_config["instruction"], task_config, domain=task_config["snapshot"])
            out[name] = {"right": _run(desktop, task, right), "wrong": _run(desktop, task, wrong)}
    return out


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    result = main(json.loads(sys.argv[1]))
    sys.stdout.write("\n" + json.dumps(result) + "\n")
