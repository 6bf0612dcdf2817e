"""The parity table: the built-in grader's reward against desktop-env's, for the same end state.

Run: ``python benchmarks/parity.py [--write] [--only KEY ...]``. Runs every task that has a scripted solution
(the app tasks of ``tests/gym/app_scenarios.py``, the local suite and its OSWorld ``os`` tasks, and the
real download-free OSWorld tasks of :mod:`legato_gym.backends.local.solutions`) on a local desktop, the
right solution then the wrong one; after each, desktop-env's evaluator grades the end state
(``LocalDesktop.evaluate`` with ``grader="osworld"``) and then the built-in grader grades the same state
(``LocalDesktop.grade_locally``), or says why it cannot. Prints the table as markdown; ``--write`` stores
the results in ``docs/parity.json`` and the table in ``docs/backends.md``, which
``tests/gym/test_parity_table.py`` keeps in step with the scripted tasks.

Needs desktop-env's interpreter (``legato osworld setup``): started elsewhere, it runs itself there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "tests" / "gym"
PARITY_JSON = ROOT / "docs" / "parity.json"
BACKENDS_MD = ROOT / "docs" / "backends.md"
START, END = "<!-- parity:start -->", "<!-- parity:end -->"
SCREEN = (1280, 720)

#: One scripted task: its key, the task (OSWorld config), and its right and wrong actions.
Scenario = tuple[str, dict[str, Any], list[str], list[str]]


def osworld_path() -> Path:
    from legato_gym.config import OSWORLD_ENV_VAR

    return Path(os.environ.get(OSWORLD_ENV_VAR) or ROOT.parent / "shared" / "osworld")


def _app_scenarios() -> Any:
    sys.path.insert(0, str(SCENARIOS))
    import app_scenarios

    return app_scenarios


def scenario_keys() -> list[str]:
    """The key of every task with a scripted solution, in table order (no desktop, no desktop-env needed)."""
    from legato_gym import DesktopConfig
    from legato_gym.backends.local import default_tasks
    from legato_gym.backends.local.solutions import OSWORLD_SOLUTIONS

    data = osworld_path() if (osworld_path() / "evaluation_examples").is_dir() else None
    keys = [f"app:{name}" for name in _app_scenarios().TASKS]
    keys += [f"suite:{task.task_id}" for task in default_tasks(DesktopConfig(osworld_path=data))]
    keys += [f"osworld:{task_id}" for task_id in OSWORLD_SOLUTIONS if data is not None]
    return list(dict.fromkeys(keys))


def scenarios(files: Any, keys: set[str] | None) -> Iterator[Scenario]:
    """The scripted tasks (``keys``: only those), their files put in the file cache ``files``."""
    from legato_gym import DesktopConfig
    from legato_gym.backends.local import default_tasks, solution
    from legato_gym.backends.local.solutions import osworld_solution

    wanted: Callable[[str], bool] = lambda key: keys is None or key in keys  # noqa: E731
    data = osworld_path()
    for name, make in _app_scenarios().TASKS.items():
        if wanted(f"app:{name}"):
            config, right, wrong = make(files)
            yield f"app:{name}", config, list(right), list(wrong)
    for task in default_tasks(DesktopConfig(osworld_path=data)):
        if wanted(f"suite:{task.task_id}"):
            config = dict(task.config, id=task.task_id, instruction=task.instruction)
            right = solution(task.task_id, SCREEN, correct=True)
            yield f"suite:{task.task_id}", config, right, solution(task.task_id, SCREEN, correct=False)
    for key in scenario_keys():
        if key.startswith("osworld:") and wanted(key):
            task_id = key.split(":", 1)[1]
            path = next((data / "evaluation_examples" / "examples").glob(f"*/{task_id}.json"))
            config = json.loads(path.read_text())
            right, wrong = osworld_solution(task_id), osworld_solution(task_id, correct=False)
            yield key, config, right, wrong


def _run(desktop: Any, task: Any, actions: list[str]) -> dict[str, Any]:
    from legato_gym.errors import UnsupportedTaskError

    desktop.reset(task)
    desktop.wait_after_reset()
    for action in actions:
        desktop.act(action)
    desktop.wait_before_eval()
    row: dict[str, Any] = {"osworld": float(desktop.evaluate()), "local": None, "note": ""}
    try:
        row["local"] = float(desktop.grade_locally())
    except UnsupportedTaskError as exc:
        row["note"] = str(exc).split(": ", 1)[-1].split(" (it has", 1)[0]
    return row


def measure(keys: set[str] | None, session: str = "lookalike") -> list[dict[str, Any]]:
    """Run the scripted tasks, right and wrong, and grade each end state with both graders."""
    from legato_gym import DesktopConfig, Task, Timeouts
    from legato_gym.backends.local import LocalDesktop, LocalOptions
    from legato_gym.backends.local.file_cache import FileCache
    from legato_gym.errors import LegatoError

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="legato-parity-") as tmp:
        files = FileCache(Path(tmp) / "files")
        config = DesktopConfig(
            screen=SCREEN,
            worker_python=sys.executable,
            timeouts=Timeouts(reset=180, ready=60),
            options=LocalOptions(
                grader="osworld",
                download_cache=str(Path(tmp) / "downloads"),
                file_cache=str(files.root),
                session=session,
            ),
        )
        with LocalDesktop(config) as desktop:
            for key, task_config, right, wrong in scenarios(files, keys):
                task = Task(str(task_config["id"]), str(task_config["instruction"]), task_config)
                apps = ", ".join(str(a) for a in task_config.get("related_apps") or []) or "-"
                for run, actions in (("right", right), ("wrong", wrong)):
                    row: dict[str, Any] = {"key": key, "task_id": task.task_id, "apps": apps, "run": run}
                    try:
                        row.update(_run(desktop, task, actions))
                    except (LegatoError, OSError, ValueError) as exc:  # a broken run is a row, not the end
                        row.update({"osworld": None, "local": None, "note": f"{type(exc).__name__}: {exc}"[:200]})
                    rows.append(row)
                    sys.stderr.write(f"{key} {run}: {row['osworld']} / {row['local']} {row['note']}\n")
    return rows


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def render(data: dict[str, Any]) -> str:
    """The markdown table of ``docs/parity.json``'s content."""
    lines = [
        f"Generated by `python benchmarks/parity.py --write` ({data['generated']}, desktop-env "
        f"{data['desktop_env']}); `tests/gym/test_parity_table.py` checks it covers every scripted task.",
        "",
        "| task | apps | solution | desktop-env | built-in | same | why not graded by the built-in grader |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in data["rows"]:
        same = (
            ""
            if row["local"] is None or row["osworld"] is None
            else ("yes" if row["local"] == row["osworld"] else "**no**")
        )
        note = str(row["note"]).replace("|", "\\|")
        lines.append(
            f"| `{row['key']}` | {row['apps']} | {row['run']} | {_score(row['osworld'])} | {_score(row['local'])} "
            f"| {same} | {note} |"
        )
    return "\n".join(lines) + "\n"


def write(data: dict[str, Any]) -> None:
    PARITY_JSON.write_text(json.dumps(data, indent=1) + "\n")
    page = BACKENDS_MD.read_text()
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    BACKENDS_MD.write_text(f"{head}{START}\n{render(data)}{END}{tail}")


def _in_desktop_env() -> None:
    """Run this script again in desktop-env's interpreter when this one is not it."""
    import importlib.util

    if importlib.util.find_spec("desktop_env") is not None:
        return
    from legato_gym.desktopenv.venv import recorded_python

    python = recorded_python()
    if python is None:
        raise SystemExit("desktop-env's interpreter is not set up: run `legato osworld setup` first")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONNOUSERSITE="1")
    os.execve(python, [python, __file__, *sys.argv[1:]], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store docs/parity.json and the table in backends.md")
    parser.add_argument("--only", nargs="+", metavar="KEY", help="only these tasks (keys as in the table)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON, not markdown")
    parser.add_argument(
        "--session",
        choices=("openbox", "gnome", "lookalike"),
        default="lookalike",
        help="the desktop's session (default: the local backend's default, the VM's top bar and dock)",
    )
    args = parser.parse_args()
    _in_desktop_env()
    import desktop_env

    from legato_gym.desktopenv.venv import DESKTOP_ENV_VERSION

    rows = measure(set(args.only) if args.only else None, args.session)
    version = getattr(desktop_env, "__version__", DESKTOP_ENV_VERSION)
    data = {"generated": time.strftime("%Y-%m-%d", time.gmtime()), "desktop_env": version, "rows": rows}
    if args.write:
        if args.only:
            raise SystemExit("--write stores the whole table: run it without --only")
        write(data)
    sys.stdout.write(json.dumps(data) + "\n" if args.json else render(data))


if __name__ == "__main__":
    main()
