"""Reading tasks files: every real OSWorld task loads; bad files get errors that name the entry and the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from legato_gym.config import OSWORLD_ENV_VAR
from legato_gym.errors import TaskFileError, UnknownTaskError
from legato_gym.tasks import load_tasks, task_from_config

ROOT = Path(__file__).resolve().parents[2]
OSWORLD = Path(os.environ.get(OSWORLD_ENV_VAR) or ROOT.parent / "shared" / "osworld")
needs_osworld = pytest.mark.skipif(
    not (OSWORLD / "evaluation_examples" / "examples").is_dir(),
    reason=f"no OSWorld task data at {OSWORLD}; set ${OSWORLD_ENV_VAR} to an OSWorld checkout",
)
OS_TASK = "28cc3b7e-b194-4bc9-8353-d04c0f4d56d2"
INLINE = {"instruction": "Give up.", "config": [], "evaluator": {"func": "infeasible"}}


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(data))
    return path


@needs_osworld
def test_all_369_real_tasks_load_from_the_split_file() -> None:
    tasks = load_tasks(OSWORLD / "evaluation_examples" / "test_all.json", osworld_path=OSWORLD)
    assert len(tasks) == 369
    assert len({t.task_id for t in tasks}) == 369
    on_disk = sorted((OSWORLD / "evaluation_examples" / "examples").glob("*/*.json"))
    assert sorted(str(t.source) for t in tasks) == sorted(str(p) for p in on_disk)
    for task in tasks:
        assert task.instruction and task.domain and task.evaluator.get("func")
        assert task.config["id"] == task.task_id
    assert sum(1 for t in tasks if t.evaluator["func"] == "infeasible") == 29


@needs_osworld
def test_entries_with_task_id_and_domain(tmp_path: Path) -> None:
    small = json.loads((OSWORLD / "evaluation_examples" / "test_small.json").read_text())
    entries = [{"task_id": tid, "domain": domain} for domain, ids in small.items() for tid in ids]
    tasks = load_tasks(write(tmp_path, entries), osworld_path=OSWORLD)
    assert [t.task_id for t in tasks] == [e["task_id"] for e in entries]
    assert [t.domain for t in tasks] == [e["domain"] for e in entries]
    assert len(tasks) == 39


@needs_osworld
def test_osworld_path_defaults_to_the_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OSWORLD_ENV_VAR, str(OSWORLD))
    (task,) = load_tasks([{"task_id": OS_TASK, "domain": "os"}])
    assert task.domain == "os"


def test_missing_osworld_checkout_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OSWORLD_ENV_VAR, raising=False)
    with pytest.raises(TaskFileError, match=OSWORLD_ENV_VAR):
        load_tasks([{"task_id": OS_TASK, "domain": "os"}])


def test_inline_configs_and_bare_configs() -> None:
    tasks = load_tasks(
        [
            {"task_id": "a", "config": INLINE},
            {"task_id": "b", "domain": "mine", "config": {**INLINE, "id": "b"}},
            {**INLINE, "id": "c"},
        ]
    )
    assert [t.task_id for t in tasks] == ["a", "b", "c"]
    assert tasks[1].domain == "mine"
    assert tasks[0].config["id"] == "a"
    assert tasks[0].evaluator == {"func": "infeasible"}
    assert tasks[0].source is None


def test_a_single_task_config_file(tmp_path: Path) -> None:
    (task,) = load_tasks(write(tmp_path, {**INLINE, "id": "solo"}))
    assert task.task_id == "solo"
    assert task.source == tmp_path / "tasks.json"


@needs_osworld
@pytest.mark.parametrize(
    ("entry", "error", "fragments"),
    [
        ({"task_id": OS_TASK, "domain": "oss"}, UnknownTaskError, ["entry 1", "domain 'oss'", "did you mean 'os'"]),
        (
            {"task_id": OS_TASK[:-1] + "3", "domain": "os"},
            UnknownTaskError,
            ["entry 1", "unknown task id", f"did you mean {OS_TASK!r}"],
        ),
        ({"task_id": OS_TASK, "domain": "chrome"}, UnknownTaskError, ["entry 1", "it is in domain 'os'"]),
    ],
)
def test_unknown_ids_and_domains_suggest_the_closest(
    tmp_path: Path, entry: dict[str, str], error: type[Exception], fragments: list[str]
) -> None:
    good = {"task_id": "ok", "config": INLINE}
    with pytest.raises(error) as info:
        load_tasks(write(tmp_path, [good, entry]), osworld_path=OSWORLD)
    for fragment in fragments:
        assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("data", "fragments"),
    [
        ([{"domain": "os"}], ["entry 0", '"task_id"']),
        ([{"task_id": "x"}], ["entry 0", '"domain"', '"config"']),
        ([{"task_id": "x", "domian": "os"}], ["entry 0", "'domian'", "did you mean 'domain'"]),
        ([{"task_id": "x", "domain": 3}], ["entry 0", '"domain"']),
        ([{"task_id": "x", "config": {"config": []}}], ["entry 0", '"config.instruction"']),
        ([{"task_id": "x", "config": {"instruction": "hi"}}], ["entry 0", '"config.evaluator"']),
        ([{"task_id": "x", "config": {**INLINE, "config": "nope"}}], ["entry 0", '"config.config"']),
        ([{"task_id": "x", "config": {**INLINE, "id": "y"}}], ["entry 0", "'x'", "'y'"]),
        ([{"task_id": "x", "config": "nope"}], ["entry 0", '"config"']),
        (["x"], ["entry 0", "expected an object"]),
        ([{"task_id": "x", "config": INLINE}, {"task_id": "x", "config": INLINE}], ["entry 1", "entry 0", "repeats"]),
        ({"os": "not-a-list"}, ["domain 'os'", "list of task ids"]),
        ("just a string", ["expected a JSON list"]),
    ],
)
def test_bad_entries_name_index_field_and_fix(tmp_path: Path, data: object, fragments: list[str]) -> None:
    with pytest.raises(TaskFileError) as info:
        load_tasks(write(tmp_path, data))
    for fragment in fragments:
        assert fragment in str(info.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError, match="does not exist"):
        load_tasks(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"task_id": "x",\n  oops}]')
    with pytest.raises(TaskFileError, match="line 2"):
        load_tasks(bad)


def test_task_round_trips_through_json() -> None:
    task = task_from_config({**INLINE, "id": "t"}, domain="d")
    from legato_gym.contract import Task

    assert Task.from_json(json.loads(json.dumps(task.to_json()))) == task


# --- task ids are never used as paths unchecked (issue 14, item 5) ----------------------------------------

UNSAFE_IDS = [
    pytest.param("/tmp/victim", 'contains "/"', id="absolute-path"),
    pytest.param("a/../../b", 'contains "/"', id="slash"),
    pytest.param("a\\b", 'contains "\\"', id="backslash"),
    pytest.param("..", 'is ".."', id="dotdot"),
    pytest.param(".", 'is "."', id="dot"),
    pytest.param("a\0b", "NUL", id="nul"),
    pytest.param("x" * 256, "255 bytes", id="too-long"),
]


def fake_checkout(tmp_path: Path) -> Path:
    """An OSWorld checkout with one os task, to reach the domain/id lookup without the real data."""
    domain = tmp_path / "osworld" / "evaluation_examples" / "examples" / "os"
    domain.mkdir(parents=True)
    (domain / "good.json").write_text(json.dumps({**INLINE, "id": "good"}))
    return tmp_path / "osworld"


@pytest.mark.parametrize(("task_id", "rule"), UNSAFE_IDS)
@pytest.mark.parametrize("shape", ["inline", "bare", "osworld-entry", "split-file"])
def test_unsafe_task_ids_are_refused_when_the_tasks_file_loads(
    tmp_path: Path, task_id: str, rule: str, shape: str
) -> None:
    good = {"task_id": "ok", "config": INLINE}
    entry: object = {
        "inline": {"task_id": task_id, "config": INLINE},
        "bare": {**INLINE, "id": task_id},
        "osworld-entry": {"task_id": task_id, "domain": "os"},
    }.get(shape)
    data: object = {"os": ["good", task_id]} if shape == "split-file" else [good, entry]
    with pytest.raises(TaskFileError) as info:
        load_tasks(write(tmp_path, data), osworld_path=fake_checkout(tmp_path))
    message = str(info.value)
    assert repr(task_id) in message and rule in message and "safe file name" in message
    assert ("entry 1" in message) if shape != "split-file" else ("os" in message)


@pytest.mark.parametrize("domain", ["../..", "/etc", ".."])
def test_unsafe_domains_are_refused_before_any_path_is_read(tmp_path: Path, domain: str) -> None:
    with pytest.raises(TaskFileError, match=r"domain .* is refused"):
        load_tasks([{"task_id": "good", "domain": domain}], osworld_path=fake_checkout(tmp_path))


@pytest.mark.parametrize(("task_id", "rule"), [*UNSAFE_IDS, pytest.param("", "empty", id="empty")])
def test_every_other_way_to_build_a_task_refuses_unsafe_ids(task_id: str, rule: str) -> None:
    from legato_gym.contract import Task, task_path
    from legato_gym.errors import ConfigError

    with pytest.raises(ConfigError, match="is refused") as info:
        Task(task_id, "do it", INLINE)
    assert rule in str(info.value)
    with pytest.raises(ConfigError):
        Task.from_json({"task_id": task_id, "instruction": "do it", "config": INLINE})
    with pytest.raises(TaskFileError, match="safe file name" if task_id else "has no id"):
        task_from_config(INLINE, task_id=task_id or None)
    with pytest.raises(ConfigError, match="cannot name a folder"):
        task_path(Path("/base"), task_id)


def test_safe_ids_still_load() -> None:
    ids = ["28cc3b7e-b194-4bc9-8353-d04c0f4d56d2", "a..b", ".hidden", "local terminal (1)", "ü" * 127]
    assert [t.task_id for t in load_tasks([{"task_id": i, "config": INLINE} for i in ids])] == ids


def test_the_local_cache_folder_is_never_built_from_an_unchecked_id(tmp_path: Path) -> None:
    """The local backend deletes and re-makes ``state_dir/cache/<task_id>`` at each reset: an id that is an
    absolute path once deleted a host folder. Even a Task forced past its own check cannot get there."""
    from legato_gym.backends.local.graders import cache_dir
    from legato_gym.contract import Task
    from legato_gym.errors import ConfigError

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    task = Task("ok", "do it", INLINE)
    object.__setattr__(task, "task_id", str(victim))  # what an unchecked construction path would give
    with pytest.raises(ConfigError, match="cannot name a folder"):
        cache_dir(tmp_path / "state", task)
    assert (victim / "precious.txt").read_text() == "keep me"
    made = cache_dir(tmp_path / "state", Task("fine", "do it", INLINE))
    assert made == tmp_path / "state" / "cache" / "fine" and made.is_dir()


def test_the_osworld_backend_index_never_builds_a_path_from_an_unsafe_id(tmp_path: Path) -> None:
    from legato_gym.backends.osworld import tasks_from_index

    checkout = fake_checkout(tmp_path)
    (checkout / "evaluation_examples" / "test_all.json").write_text(json.dumps({"os": ["good", "../../etc/x"]}))
    with pytest.raises(TaskFileError, match=r"test_all\.json: task_id '\.\./\.\./etc/x' is refused"):
        tasks_from_index(checkout)
    (checkout / "evaluation_examples" / "test_all.json").write_text(json.dumps({"os": ["good"]}))
    assert [t.task_id for t in tasks_from_index(checkout)] == ["good"]
