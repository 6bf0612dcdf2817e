"""Grading OSWorld-format tasks on a local desktop: OSWorld's getters and metrics, by name and semantics.

This is a small, dependency-free re-implementation of the part of ``desktop_env.evaluators`` that the
local task suite and the runnable OSWorld ``os`` tasks use; it follows ``DesktopEnv.evaluate`` exactly
(``infeasible``, a final ``FAIL``, lists of metrics with ``conj``, ``FileNotFoundError`` as 0). Scores from
desktop-env's own evaluators (in their own interpreter) are the ``osworld`` backend's job; a task naming a
getter or metric that is not here is refused at reset with :class:`UnsupportedTaskError`.
"""

from __future__ import annotations

import ast
import logging
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from legato_gym.backends.local.client import DesktopClient
from legato_gym.backends.local.file_cache import FileCache
from legato_gym.contract import Task
from legato_gym.errors import UnsupportedTaskError

__all__ = ["GETTERS", "METRICS", "check_evaluator", "evaluate"]

logger = logging.getLogger(__name__)

Getter = Callable[[DesktopClient, Path, Mapping[str, Any]], Any]


# ------------------------------------------------------------------------------------------- getters


def get_vm_command_line(client: DesktopClient, cache_dir: Path, config: Mapping[str, Any]) -> Any:
    """OSWorld ``vm_command_line``: the ``output`` of ``POST /execute`` (``None`` on an HTTP error)."""
    data = client.execute(config["command"], shell=bool(config.get("shell", False)), timeout=30.0)
    return data.get("output") if data.get("status") == "success" else None


def get_vm_command_error(client: DesktopClient, cache_dir: Path, config: Mapping[str, Any]) -> Any:
    """OSWorld ``vm_command_error``: the ``error`` (stderr) of ``POST /execute``."""
    data = client.execute(config["command"], shell=bool(config.get("shell", False)), timeout=30.0)
    return data.get("error") if data.get("status") == "success" else None


def get_vm_file(client: DesktopClient, cache_dir: Path, config: Mapping[str, Any]) -> Any:
    """OSWorld ``vm_file``: fetch file(s) with ``POST /file`` into the task's cache dir; local path(s).

    ``multi``/``gives`` as OSWorld: with ``multi``, ``path`` and ``dest`` are lists and ``gives`` the indices
    returned. A missing file gives ``None`` in its place.
    """
    if config.get("multi"):
        paths, dests = list(config["path"]), list(config["dest"])
        gives = list(config.get("gives", [0]))
    else:
        paths, dests, gives = [config["path"]], [config["dest"]], [0]
    results: list[str | None] = []
    for index, (path, dest) in enumerate(zip(paths, dests, strict=True)):
        target = cache_dir / dest
        if not client.fetch_file(path, target):  # streamed to disk, capped (ReadCaps.file_bytes)
            if index in gives:
                results.append(None)
            continue
        if index in gives:
            results.append(str(target))
    return results[0] if len(results) == 1 else results


def get_cache_file(client: DesktopClient, cache_dir: Path, config: Mapping[str, Any]) -> Any:
    """OSWorld ``cache_file``: a file already in the task's cache dir (gold files)."""
    path = cache_dir / config["path"]
    if not path.exists():
        raise FileNotFoundError(path)
    return str(path)


def get_cloud_file(
    client: DesktopClient, cache_dir: Path, config: Mapping[str, Any], files: FileCache | None = None
) -> Any:
    """OSWorld ``cloud_file``: gold file(s) by URL, into the task's cache dir as ``dest``; local path(s).

    Read from the persistent file cache first (``files``, default :meth:`FileCache.default`); a URL it lacks
    is downloaded into it. ``multi``/``gives`` as OSWorld. A file already at ``dest`` is kept, as OSWorld does.

    Raises:
        SetupError: a URL is neither cached nor reachable (the message names it).
    """
    files = files if files is not None else FileCache.default()
    if config.get("multi"):
        urls, dests = list(config["path"]), list(config["dest"])
        gives = set(config.get("gives", [0]))
    else:
        urls, dests, gives = [config["path"]], [config["dest"]], {0}
    results: list[str] = []
    for index, (url, dest) in enumerate(zip(urls, dests, strict=True)):
        target = cache_dir / dest
        if index in gives:
            results.append(str(target))
        if target.exists():
            continue
        entry = files.fetch(str(url))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(entry.path, target)
    return results[0] if len(results) == 1 else results


def get_rule(client: DesktopClient, cache_dir: Path, config: Mapping[str, Any]) -> Any:
    """OSWorld ``rule``: the config's ``rules``."""
    return config["rules"]


def get_vm_terminal_output(client: DesktopClient, cache_dir: Path, config: Mapping[str, Any]) -> Any:
    """OSWorld ``vm_terminal_output``: ``GET /terminal`` (``None`` here: no gnome-terminal)."""
    return client.terminal_output()


GETTERS: dict[str, Getter] = {
    "vm_command_line": get_vm_command_line,
    "vm_command_error": get_vm_command_error,
    "vm_file": get_vm_file,
    "cache_file": get_cache_file,
    "cloud_file": get_cloud_file,
    "rule": get_rule,
    "vm_terminal_output": get_vm_terminal_output,
}


# ------------------------------------------------------------------------------------------- metrics


def exact_match(result: Any, rules: Mapping[str, Any]) -> float:
    """OSWorld ``exact_match``: ``result == rules["expected"]``."""
    return float(result == rules["expected"])


def check_include_exclude(result: Any, rules: Mapping[str, Any]) -> float:
    """OSWorld ``check_include_exclude``: every ``include`` substring in ``result``, no ``exclude`` one."""
    if result is None:
        return 0.0
    include, exclude = rules.get("include", []), rules.get("exclude", [])
    return float(all(r in result for r in include) and all(r not in result for r in exclude))


def compare_text_file(actual: Any, expected: Any, **options: Any) -> float:
    """OSWorld ``compare_text_file``: two text files equal, optionally ignoring blanks and case."""
    if not actual:
        return 0.0
    actual_text = Path(actual).read_text()
    expected_text = Path(expected).read_text()
    if options.get("ignore_blanks", False):
        actual_text = re.sub(r"\s+", " ", re.sub(r"[\t\n]", " ", actual_text).strip())
        expected_text = re.sub(r"\s+", " ", re.sub(r"[\t\n]", " ", expected_text).strip())
    if options.get("ignore_case", False):
        actual_text, expected_text = actual_text.lower(), expected_text.lower()
    return float(actual_text == expected_text)


def check_gnome_favorite_apps(result: Any, rules: Mapping[str, Any]) -> float:
    """OSWorld ``check_gnome_favorite_apps``: ``gsettings get org.gnome.shell favorite-apps``' answer (a GVariant
    string array) holds the ``expected`` desktop ids, as many and the same ones, in any order."""
    text = str(result or "").strip()
    try:
        apps = ast.literal_eval(text.removeprefix("@as ").strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return 0.0
    expected = list(rules["expected"])
    return float(isinstance(apps, list) and len(apps) == len(expected) and set(apps) == set(expected))


METRICS: dict[str, Callable[..., float]] = {
    "exact_match": exact_match,
    "check_include_exclude": check_include_exclude,
    "compare_text_file": compare_text_file,
    "check_gnome_favorite_apps": check_gnome_favorite_apps,
}


# ------------------------------------------------------------------------------------------- evaluate


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def check_evaluator(task: Task) -> None:
    """Raise :class:`UnsupportedTaskError` when the task's evaluator names a getter or metric not here."""
    evaluator = task.evaluator
    funcs = _as_list(evaluator.get("func"))
    if funcs == ["infeasible"]:
        return
    for func in funcs:
        if func not in METRICS:
            raise UnsupportedTaskError(
                f"task {task.task_id}: metric {func!r} is not available in the local backend (it has "
                f"{', '.join(sorted(METRICS))}); run this task on the osworld backend"
            )
    for key in ("result", "expected"):
        for spec in _as_list(evaluator.get(key) or []):
            kind = (spec or {}).get("type")
            if kind is not None and kind not in GETTERS:
                raise UnsupportedTaskError(
                    f"task {task.task_id}: getter {kind!r} is not available in the local backend (it has "
                    f"{', '.join(sorted(GETTERS))}); run this task on the osworld backend"
                )


def evaluate(
    task: Task, client: DesktopClient, cache_dir: Path, actions: Sequence[str], *, files: FileCache | None = None
) -> float:
    """Grade ``task`` as OSWorld's ``DesktopEnv.evaluate`` does (post-config already run).

    ``files`` is the persistent file cache that ``cloud_file`` gold files are read from (default:
    :meth:`FileCache.default`).
    """

    def _get(client: DesktopClient, cache_dir: Path, spec: Mapping[str, Any] | None) -> Any:
        if not spec:
            return None
        if spec["type"] == "cloud_file":
            return get_cloud_file(client, cache_dir, spec, files)
        return GETTERS[spec["type"]](client, cache_dir, spec)

    evaluator = task.evaluator
    func = evaluator.get("func")
    last = actions[-1] if actions else None
    if func == "infeasible":
        return 1.0 if last == "FAIL" else 0.0
    if last == "FAIL":
        return 0.0
    if isinstance(func, list):
        conj = evaluator.get("conj", "and")
        results_cfg = _as_list(evaluator.get("result"))
        expected_cfg = _as_list(evaluator.get("expected") or [None] * len(func))
        options = evaluator.get("options")
        options_list = [o or {} for o in options] if isinstance(options, list) else [{}] * len(func)
        scores = []
        for name, result_spec, expected_spec, opts in zip(func, results_cfg, expected_cfg, options_list, strict=True):
            try:
                result = _get(client, cache_dir, result_spec)
            except FileNotFoundError:
                logger.info("task %s: result file not found", task.task_id)
                if conj == "and":
                    return 0.0
                continue
            if expected_spec:
                score = METRICS[name](result, _get(client, cache_dir, expected_spec), **opts)
            else:
                score = METRICS[name](result, **opts)
            if conj == "and" and float(score) == 0.0:
                return 0.0
            if conj == "or" and float(score) == 1.0:
                return 1.0
            scores.append(float(score))
        if not scores:
            return 0.0
        return sum(scores) / len(scores) if conj == "and" else max(scores)
    try:
        result = _get(client, cache_dir, evaluator.get("result"))
    except FileNotFoundError:
        logger.info("task %s: result file not found", task.task_id)
        return 0.0
    metric = METRICS[str(func)]
    opts = evaluator.get("options") or {}
    expected_spec = evaluator.get("expected")
    if expected_spec:
        return float(metric(result, _get(client, cache_dir, expected_spec), **opts))
    return float(metric(result, **opts))
