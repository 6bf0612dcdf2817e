"""Read tasks files into :class:`~legato_gym.contract.Task` values.

A tasks file is JSON in one of these shapes:

* a list of entries, each one of

  - ``{"task_id": "<uuid>", "domain": "os"}``: an OSWorld task, read from
    ``<osworld>/evaluation_examples/examples/<domain>/<task_id>.json``;
  - ``{"task_id": "my-task", "config": {...}}``: an inline OSWorld task config (``instruction``,
    ``config`` setup steps, ``evaluator``); an optional ``"domain"`` labels it;
  - a bare OSWorld task config (an object with ``"id"`` and ``"instruction"``);

* OSWorld's own split files (``test_all.json``, ``test_small.json``, ...): an object mapping each domain to a
  list of task ids;
* a single OSWorld task config.

Example::

    from legato_gym.tasks import load_tasks
    tasks = load_tasks("tasks.json", osworld_path="~/osworld")
    tasks = load_tasks([{"task_id": "fake-1", "config": {"instruction": "Say hi", "evaluator": {...}}}])
"""

from __future__ import annotations

import glob
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from legato_gym.config import OSWORLD_ENV_VAR, default_osworld_path
from legato_gym.contract import TASK_ID_RULE, Task, task_id_problem
from legato_gym.errors import TaskFileError, UnknownTaskError
from legato_gym.suggest import suggest

__all__ = ["check_task_id", "examples_dir", "load_osworld_task", "load_tasks", "suggest", "task_from_config"]

_EXAMPLES = Path("evaluation_examples") / "examples"
#: How messages name tasks given as parsed JSON (a list in Python) rather than a file.
_PARSED = "tasks"


def check_task_id(task_id: object, where: str, *, what: str = "task_id") -> str:
    """Refuse a task id (or a domain: ``what="domain"``) that is not one safe file name.

    Backends build paths from task ids (a per-task cache folder that is deleted and re-made at each reset),
    and OSWorld tasks are read from ``<domain>/<task_id>.json``: an id such as ``/home/me`` or ``../x``
    must never reach a path. The rule is :func:`legato_gym.contract.task_id_problem`.

    Returns:
        The id, unchanged.

    Raises:
        TaskFileError: naming the entry, the id and the rule it breaks.
    """
    problem = task_id_problem(task_id)
    if problem is not None:
        raise TaskFileError(
            f"{where}: {what} {task_id!r} is refused: {problem}. A {what} must be {TASK_ID_RULE}; rename it"
        )
    return task_id  # type: ignore[return-value]  # a str: task_id_problem said so


def examples_dir(osworld_path: str | Path | None = None) -> Path:
    """``<osworld>/evaluation_examples/examples`` for an OSWorld checkout (default: ``$LEGATO_OSWORLD``).

    Raises:
        TaskFileError: no checkout was given, or it has no ``evaluation_examples/examples`` directory.
    """
    root = Path(osworld_path).expanduser() if osworld_path is not None else default_osworld_path()
    if root is None:
        raise TaskFileError(
            'tasks given as {"task_id", "domain"} need an OSWorld checkout: pass osworld_path= (CLI: --osworld) '
            f"or set ${OSWORLD_ENV_VAR} to the directory that holds evaluation_examples/"
        )
    examples = root / _EXAMPLES
    if not examples.is_dir():
        raise TaskFileError(
            f"OSWorld checkout {str(root)!r} has no {_EXAMPLES}/ directory; point osworld_path (--osworld, "
            f"${OSWORLD_ENV_VAR}) at the directory that holds evaluation_examples/"
        )
    return examples


def task_from_config(
    config: Mapping[str, Any],
    *,
    task_id: str | None = None,
    domain: str | None = None,
    source: Path | None = None,
    where: str = "task config",
    field_prefix: str = "",
) -> Task:
    """Check an OSWorld task config and wrap it as a :class:`Task`.

    Args:
        config: the OSWorld task config (``id``, ``instruction``, ``config``, ``evaluator``, ...).
        task_id: the task id; defaults to ``config["id"]``. When both are given they must agree.
        domain: the OSWorld domain, if known.
        source: the file the config came from.
        where: how error messages name the config (e.g. ``"tasks.json: entry 3"``).
        field_prefix: how error messages prefix field names (``"config."`` for an entry's inline config).

    Raises:
        TaskFileError: a required field is missing or has the wrong type; the message names the field.
    """
    if not isinstance(config, Mapping):
        raise TaskFileError(f"{where}: the task config must be a JSON object, not {type(config).__name__}")
    config_id = config.get("id")
    if config_id is not None and not isinstance(config_id, str):
        raise TaskFileError(f'{where}: field "{field_prefix}id" must be a string, not {config_id!r}')
    if task_id is not None and config_id is not None and task_id != config_id:
        raise TaskFileError(
            f'{where}: "task_id" {task_id!r} differs from "{field_prefix}id" {config_id!r}; make them equal or '
            'drop "id" from the config'
        )
    tid = task_id if task_id is not None else config_id
    if not tid:
        raise TaskFileError(f'{where}: the task has no id; add "task_id" to the entry (or "id" to the config)')
    check_task_id(tid, where)
    instruction = config.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFileError(
            f'{where} (task {tid!r}): field "{field_prefix}instruction" is missing or empty; '
            'add "instruction": "<what to do>"'
        )
    setup = config.get("config", [])
    if not isinstance(setup, list) or not all(isinstance(step, Mapping) and "type" in step for step in setup):
        raise TaskFileError(
            f'{where} (task {tid!r}): field "{field_prefix}config" must be a list of setup steps '
            '{"type": ..., "parameters": {...}} (use [] for none)'
        )
    evaluator = config.get("evaluator")
    if not isinstance(evaluator, Mapping) or "func" not in evaluator:
        raise TaskFileError(
            f'{where} (task {tid!r}): field "{field_prefix}evaluator" is missing or has no "func"; add an OSWorld '
            'evaluator, e.g. "evaluator": {"func": "infeasible"}'
        )
    data = dict(config)
    data.setdefault("id", tid)
    return Task(task_id=tid, instruction=instruction, config=data, domain=domain, source=source)


def load_osworld_task(domain: str, task_id: str, *, osworld_path: str | Path | None = None, where: str = "") -> Task:
    """Read ``<osworld>/evaluation_examples/examples/<domain>/<task_id>.json``.

    Raises:
        UnknownTaskError: the domain or the task id does not exist (the message suggests the closest one).
        TaskFileError: no OSWorld checkout, or the file is not a valid task config.
    """
    prefix = f"{where}: " if where else ""
    check_task_id(domain, where or "OSWorld task", what="domain")
    check_task_id(task_id, where or "OSWorld task")
    examples = examples_dir(osworld_path)
    domain_dir = examples / domain
    if not domain_dir.is_dir():
        domains = sorted(p.name for p in examples.iterdir() if p.is_dir())
        raise UnknownTaskError(
            f"{prefix}unknown domain {domain!r}{suggest(domain, domains)} (domains: {', '.join(domains)})"
        )
    path = domain_dir / f"{task_id}.json"
    if not path.is_file():
        elsewhere = sorted(p.parent.name for p in examples.glob(f"*/{glob.escape(task_id)}.json"))
        if elsewhere:
            hint = f'; it is in domain {elsewhere[0]!r}, so set "domain": {elsewhere[0]!r}'
        else:
            hint = suggest(task_id, sorted(p.stem for p in domain_dir.glob("*.json")))
        raise UnknownTaskError(f"{prefix}unknown task id {task_id!r} in domain {domain!r}{hint}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaskFileError(f"{prefix}cannot read OSWorld task {str(path)!r}: {exc}") from exc
    return task_from_config(config, task_id=task_id, domain=domain, source=path, where=where or str(path))


def _entry_task(entry: Any, index: int, name: str, osworld_path: str | Path | None) -> Task:
    where = f"{name}: entry {index}"
    if isinstance(entry, Task):  # a list built in Python may hold tasks already read
        return entry
    if not isinstance(entry, Mapping):
        raise TaskFileError(
            f'{where}: expected an object {{"task_id", "domain"}} or {{"task_id", "config"}}'
            f"{' (or a Task)' if name == _PARSED else ''}, not {entry!r:.80}"
        )
    task_id = entry.get("task_id")
    if task_id is None and "id" in entry and "instruction" in entry:
        domain = entry.get("domain") if isinstance(entry.get("domain"), str) else None
        return task_from_config(entry, domain=domain, where=where)
    if not isinstance(task_id, str) or not task_id:
        raise TaskFileError(f'{where}: field "task_id" is missing or not a string; add "task_id": "<id>"')
    check_task_id(task_id, where)
    domain = entry.get("domain")
    if domain is not None and not isinstance(domain, str):
        raise TaskFileError(f'{where}: field "domain" must be a string such as "os", not {domain!r}')
    unknown = sorted(set(entry) - {"task_id", "domain", "config"})
    if unknown:
        raise TaskFileError(
            f"{where}: unknown field {unknown[0]!r}{suggest(unknown[0], ['task_id', 'domain', 'config'])}; "
            'an entry has "task_id" plus "domain" or "config"'
        )
    if "config" in entry:
        config = entry["config"]
        if not isinstance(config, Mapping):
            raise TaskFileError(f'{where}: field "config" must be an OSWorld task config object, not {config!r:.80}')
        return task_from_config(config, task_id=task_id, domain=domain, where=where, field_prefix="config.")
    if domain is None:
        raise TaskFileError(
            f'{where} (task {task_id!r}): give "domain" (an OSWorld task) or "config" (an inline task config)'
        )
    return load_osworld_task(domain, task_id, osworld_path=osworld_path, where=where)


def load_tasks(
    source: str | Path | Sequence[Any] | Mapping[str, Any], *, osworld_path: str | Path | None = None
) -> list[Task]:
    """Read a tasks file (or its parsed JSON) into tasks, in file order.

    Args:
        source: path of a JSON tasks file, or the parsed JSON itself (see the module docstring for shapes);
            a list may also hold :class:`Task` values, kept as they are.
        osworld_path: OSWorld checkout for ``{"task_id", "domain"}`` entries and split files
            (default ``$LEGATO_OSWORLD``).

    Returns:
        The tasks. Task ids are unique.

    Raises:
        TaskFileError: unreadable file or a malformed entry; the message names the entry index and field.
        UnknownTaskError: an unknown domain or task id, with the closest match.
    """
    name = _PARSED
    data: Any = source
    base_source: Path | None = None
    if isinstance(source, (str, Path)):
        path = Path(source).expanduser()
        name = str(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise TaskFileError(f"tasks file {name!r} does not exist; check the path") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise TaskFileError(f"cannot read tasks file {name!r}: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise TaskFileError(
                f"tasks file {name!r} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from exc
        base_source = path

    tasks: list[Task]
    if isinstance(data, Mapping) and "instruction" in data:
        tasks = [task_from_config(data, source=base_source, where=name)]
    elif isinstance(data, Mapping):
        tasks = []
        for domain, ids in data.items():
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise TaskFileError(
                    f"{name}: domain {domain!r} must map to a list of task ids (an OSWorld split file such as "
                    'test_small.json), or give a list of {"task_id", "domain"} entries'
                )
            for task_id in ids:
                tasks.append(load_osworld_task(domain, task_id, osworld_path=osworld_path, where=f"{name}: {domain}"))
    elif isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        tasks = [_entry_task(entry, i, name, osworld_path) for i, entry in enumerate(data)]
    else:
        raise TaskFileError(
            f'{name}: expected a JSON list of {{"task_id", "domain"}} / {{"task_id", "config"}} entries or an '
            f"OSWorld split file (domain -> ids), not {type(data).__name__}"
        )

    seen: dict[str, int] = {}
    for index, task in enumerate(tasks):
        if task.task_id in seen:
            raise TaskFileError(
                f"{name}: entry {index} repeats task_id {task.task_id!r} of entry {seen[task.task_id]}; list each "
                "task once (repeated attempts are set with --group)"
            )
        seen[task.task_id] = index
    return tasks
