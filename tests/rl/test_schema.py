"""The published JSON Schema of ``legato.rollout/v0``: current, printed by ``legato rl schema``, true to the records
real runs write, and as strict as the record reader."""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _run_kit import Try, write_run
from typer.testing import CliRunner

from legato_gym import DesktopConfig, Timeouts
from legato_gym.backends.fake import default_tasks
from legato_rl.cli.app import app
from legato_rl.collect import collect
from legato_rl.policy import PolicyConfig
from legato_rl.store import STATUSES, ErrorInfo, RecordError, RolloutRecord, read_record_dicts
from legato_rl.store.json_schema import record_json_schema, render_record_json_schema
from legato_rl.testing import ReferencePolicyServer, ScriptedSolver

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "schema" / "legato.rollout-v0.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def embedded_run(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The records of ``legato rl collect --backend fake --policy-url embedded`` (oversampled: some not graded)."""
    out = tmp_path_factory.mktemp("schema") / "run"
    result = CliRunner().invoke(
        app,
        ["rl", "collect", "--backend", "fake", "--policy-url", "embedded", "--out", str(out), "--group", "2",
         "--oversample", "0.5", "--desktops", "2", "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return list(read_record_dicts(out))


def _errors(validator: jsonschema.Draft202012Validator, record: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(record)]


def test_the_published_schema_is_generated_from_the_current_records() -> None:
    assert SCHEMA_FILE.read_text() == render_record_json_schema(), "stale: run python docs/gen_schema.py"


def test_legato_rl_schema_prints_the_published_schema() -> None:
    result = CliRunner().invoke(app, ["rl", "schema"])
    assert result.exit_code == 0, result.output
    assert result.output == SCHEMA_FILE.read_text()


def test_every_record_of_a_fake_embedded_collect_validates(
    validator: jsonschema.Draft202012Validator, embedded_run: list[dict[str, Any]]
) -> None:
    assert "ok" in Counter(r["status"] for r in embedded_run)
    assert any(step["prompt_ids"] is not None for r in embedded_run for step in r["steps"]), "prompt_ids checked"
    for record in embedded_run:
        assert _errors(validator, record) == [], record["rollout_id"]


def _objects(schema: dict[str, Any], node: dict[str, Any], value: Any) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """Every object of ``value`` with the schema object that describes it (``$ref`` and nullable resolved)."""
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    options = [o for o in node.get("anyOf", [node]) if o.get("type") != "null"]
    (node,) = options
    if "$ref" in node:
        yield from _objects(schema, node, value)
    elif node.get("type") == "array" and value is not None:
        for item in value:
            yield from _objects(schema, node["items"], item)
    elif "properties" in node and value is not None:
        yield node.get("title", "?"), node, value
        for key, prop in node["properties"].items():
            yield from _objects(schema, prop, value[key])


def test_the_schema_names_exactly_the_keys_a_real_record_holds(
    tmp_path: Path, embedded_run: list[dict[str, Any]]
) -> None:
    # the objects are open (a v0 record may gain optional fields), so validation alone would not notice a key
    # the writer added or dropped without the schema following
    schema = record_json_schema()
    seen: set[str] = set()
    for record in [*embedded_run, *_every_status(tmp_path / "run")]:  # the second ones carry errors
        for name, node, value in _objects(schema, schema, record):
            assert set(value) == set(node["properties"]), (name, sorted(set(value) ^ set(node["properties"])))
            seen.add(name)
    assert seen == {"RolloutRecord", *schema["$defs"]}, "a real run holds every kind of object"


def test_the_failed_and_truncated_tries_of_a_real_collect_validate(
    tmp_path: Path, validator: jsonschema.Draft202012Validator
) -> None:
    config = DesktopConfig(
        screen=(320, 240),
        options={"latency": {"act": 0.1}, "faults": {"crash": 0.4, "phases": ["reset"]}},
        timeouts=Timeouts(reset=60, ready=10, act=10, evaluate=10),
    )
    with ReferencePolicyServer(brain=ScriptedSolver()) as server:
        collect(default_tasks(config)[:2], PolicyConfig(server.url, server.model), out=tmp_path / "run", desktops=2,
                group=2, oversample=0.5, env_retries=1, rollout_timeout=0.25, backend="fake", desktop=config,
                seed=0)  # fmt: skip
    records = list(read_record_dicts(tmp_path / "run"))
    assert {"truncated", "retried"} <= set(Counter(r["status"] for r in records)), Counter(r["status"] for r in records)
    for record in records:
        assert _errors(validator, record) == [], record["rollout_id"]


def _every_status(run: Path) -> list[dict[str, Any]]:
    policy_error = ErrorInfo("policy", "PolicyTimeout", "no reply in 60 s")
    tries = [
        Try("g0", "ok", 1.0),
        Try("g0", "truncated", 0.0),
        Try("g0", "cancelled", None, steps=1),
        Try("g0", "skipped", None, desktop=None, steps=0),
        Try("g1", "surplus", 1.0),
        Try("g1", "retried", None, token_ids=False),
        Try("g1", "error", None, error=policy_error, failed_call_s=2.0),
    ]
    write_run(run, tries)
    return list(read_record_dicts(run))


def test_a_record_of_every_status_validates(tmp_path: Path, validator: jsonschema.Draft202012Validator) -> None:
    records = _every_status(tmp_path / "run")
    assert sorted(r["status"] for r in records) == sorted(STATUSES)
    for record in records:
        assert _errors(validator, record) == [], record["rollout_id"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def damage(record: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = record
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value

    return damage


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda record: record.pop(key)


DAMAGE = {
    "unknown status": (0, _set("status", "done")),
    "another schema": (0, _set("schema", "legato.rollout/v1")),
    "no reward key": (0, _drop("reward")),
    "an ok try with an error": (0, _set("error", {"kind": "env", "type": "DesktopCrashed", "message": "gone"})),
    "an error without its error": (6, _set("error", None)),
    "an unknown error kind": (6, _set("error.kind", "disk")),
    "a message that is no hash": (0, _set("steps.0.request.messages", ["not-a-sha256"])),
    "a policy without its version": (0, lambda record: record["policy"].pop("version")),
    "a step without its response": (0, lambda record: record["steps"][0].pop("response")),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_the_schema_rejects_what_the_record_reader_rejects(
    tmp_path: Path, validator: jsonschema.Draft202012Validator, damage: str
) -> None:
    records = _every_status(tmp_path / "run")
    index, harm = DAMAGE[damage]
    record = copy.deepcopy(records[index])
    assert _errors(validator, record) == [] and RolloutRecord.from_json(record)
    harm(record)
    assert _errors(validator, record) != [], damage
    with pytest.raises(RecordError):
        RolloutRecord.from_json(record)


def test_records_written_before_the_optional_fields_still_validate(
    tmp_path: Path, validator: jsonschema.Draft202012Validator
) -> None:
    record = copy.deepcopy(_every_status(tmp_path / "run")[0])
    for step in record["steps"]:
        del step["prompt_ids"], step["model"]["weight_version"]
    assert _errors(validator, record) == []
    assert all(s.prompt_ids is None and s.model.weight_version is None for s in RolloutRecord.from_json(record).steps)
    del record["steps"][0]["model"]["seconds"]  # a field that was always written is required
    assert _errors(validator, record) != []
