"""A record field is described once, on its dataclass: its JSON, the JSON Schema, the export's rows and the
Parquet schema all follow from it, and the docs name it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _run_kit import Try, collect_small_run, write_run

from legato_rl import export as export_package
from legato_rl.export import EXPORT_FIELDS, export_steps, parquet_schema
from legato_rl.export.rows import COLUMNS, DERIVED
from legato_rl.store import Column, RolloutRecord, read_record_dicts, read_records, record_columns
from legato_rl.store.fields import Slot, slots, written_keys
from legato_rl.store.json_schema import record_json_schema

ROOT = Path(__file__).resolve().parents[2]
_ARROW = {"string": "string", "bool": "bool", "int32": "int32", "float32": "float", "float64": "double"}


def _arrow_text(type_name: str) -> str:
    """A column type as pyarrow prints it (``list<int32>`` -> ``list<element: int32>``)."""
    if type_name.startswith("list<"):
        return f"list<element: {_arrow_text(type_name[5:-1])}>"
    return _ARROW[type_name]


def _objects(cls: type, value: Any, path: str) -> Iterator[tuple[type, Any, str]]:
    """``value`` (a record object) and every record object in it, with its class and its JSON path."""
    yield cls, value, path
    for slot in slots(cls):
        inner = getattr(value, slot.name)
        if slot.kind == "obj" and inner is not None:
            yield from _objects(slot.item, inner, f"{path}.{slot.key}")
        elif slot.kind == "objs":
            for item in inner:
                yield from _objects(slot.item, item, f"{path}.{slot.key}[]")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Records written one by one: completed ones, and one with an error."""
    out = tmp_path_factory.mktemp("fields") / "run"
    write_run(out, [Try("g0", "ok", 1.0), Try("g0", "truncated", 0.0), Try("g1", "error", None)])
    return out


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real collect's records: prompt ids, actions, policy versions."""
    return collect_small_run(tmp_path_factory.mktemp("fields") / "collected")


def test_every_field_has_its_key_in_the_json_and_the_schema_with_its_own_rules(run: Path, collected: Path) -> None:
    schema = record_json_schema()
    seen: set[type] = set()
    pairs = [pair for d in (run, collected) for pair in zip(read_record_dicts(d), read_records(d), strict=True)]
    for line, record in pairs:
        for cls, _, path in _objects(RolloutRecord, record, "record"):
            seen.add(cls)
            node: Any = line
            for part in path.split(".")[1:]:  # the JSON object at this path (the first item of a list)
                node = node[part.removesuffix("[]")]
                node = node[0] if part.endswith("[]") else node
            assert list(node) == written_keys(cls), path
            described = schema if cls is RolloutRecord else schema["$defs"][cls.__name__]
            assert list(described["properties"]) == written_keys(cls), cls.__name__
            for slot in slots(cls):
                prop = described["properties"][slot.key]
                required = slot.key in described["required"]
                assert required is not slot.info.optional, slot
                assert prop.get("minimum") == slot.info.minimum, slot
                if slot.info.choices is not None and slot.key != "status":  # status: the record's own rule
                    assert prop["enum"] == list(slot.info.choices), slot
                if slot.info.pattern is not None:
                    assert prop["items"]["pattern"] == f"^{slot.info.pattern.pattern}$", slot
    assert {cls.__name__ for cls in seen} == {"RolloutRecord", *schema["$defs"]}, "every record class was checked"


def test_every_export_column_is_in_the_rows_and_the_parquet_schema_with_its_fields_value(
    collected: Path, tmp_path: Path
) -> None:
    run = collected
    declared = {column.name: (column, level, path) for column, level, path in record_columns(RolloutRecord, "steps")}
    assert set(EXPORT_FIELDS) == set(declared) | set(DERIVED) and len(EXPORT_FIELDS) == len(COLUMNS)
    arrow = parquet_schema()
    for column in COLUMNS:
        field = arrow.field(column.name)
        assert field.nullable is column.nullable, column
        assert str(field.type) == ("string" if column.type == "json" else _arrow_text(column.type)), column
    export_steps(run, tmp_path / "train.parquet")
    rows = pq.read_table(tmp_path / "train.parquet").to_pylist()
    records = {record.rollout_id: record for record in read_records(run)}
    assert rows and all(list(row) == list(EXPORT_FIELDS) for row in rows)
    for row in rows:
        record = records[row["rollout_id"]]
        step = record.steps[row["step_index"]]
        for name, (_, level, path) in declared.items():
            value: Any = record if level == "record" else step
            for attribute in path:
                value = None if value is None else getattr(value, attribute)
            value = list(value) if isinstance(value, tuple) else value
            if name == "response_logprobs":  # float32 in Parquet
                assert value == pytest.approx(row[name]), name
            else:
                assert row[name] == value, name


# A field added to Response, in one place: its declaration. The subprocess runs a copy of legato_rl that has it.
_ADDED = (
    '    stop_token: str | None = field(default="<|im_end|>", '
    'metadata=info(optional=True, column=Column("response_stop_token", "string")))\n'
)
_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[2])
from pathlib import Path
import pyarrow.parquet as pq
from _run_kit import Try, collect_small_run, write_run
from legato_rl.export import EXPORT_FIELDS, export_steps, parquet_schema
from legato_rl.store import read_record_dicts, read_records
from legato_rl.store.json_schema import record_json_schema

run = Path(sys.argv[1]) / "run"
write_run(run, [Try("g0", "ok", 1.0)])
line = next(read_record_dicts(run))
export_steps(run, Path(sys.argv[1]) / "train.parquet")
export_steps(run, Path(sys.argv[1]) / "train.jsonl")
response = record_json_schema()["$defs"]["Response"]
arrow = parquet_schema().field("response_stop_token")
print(json.dumps({
    "json": line["steps"][0]["response"]["stop_token"],
    "read": next(read_records(run)).steps[0].response.stop_token,
    "schema": response["properties"]["stop_token"],
    "required": "stop_token" in response["required"],
    "column": EXPORT_FIELDS[-1],
    "arrow": [str(arrow.type), arrow.nullable],
    "parquet": pq.read_table(Path(sys.argv[1]) / "train.parquet").to_pylist()[0]["response_stop_token"],
    "jsonl": json.loads((Path(sys.argv[1]) / "train.jsonl").read_text().splitlines()[0])["response_stop_token"],
}))
"""


def test_a_field_added_in_one_place_is_in_the_json_the_schema_the_export_and_parquet(tmp_path: Path) -> None:
    copy = tmp_path / "code"
    shutil.copytree(ROOT / "legato_rl", copy / "legato_rl", ignore=shutil.ignore_patterns("__pycache__"))
    schema_py = copy / "legato_rl" / "store" / "schema.py"
    text = schema_py.read_text()
    anchor = "    finish_reason: str | None = field("
    assert text.count(anchor) == 1, "Response.finish_reason moved: update this test's anchor"
    start = text.index(anchor)
    end = text.index("\n", text.index(")))", start)) + 1  # the end of the finish_reason declaration
    schema_py.write_text(text[:end] + _ADDED + text[end:])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), str(ROOT)])}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path), str(Path(__file__).parent)],
        env=env,
        cwd=tmp_path,  # not the checkout: python -c puts the working directory first on sys.path
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen == {
        "json": "<|im_end|>",
        "read": "<|im_end|>",
        "schema": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "required": False,
        "column": "response_stop_token",
        "arrow": ["string", True],
        "parquet": "<|im_end|>",
        "jsonl": "<|im_end|>",
    }


def test_a_record_written_before_grader_was_recorded_validates(run: Path) -> None:
    import jsonschema

    record = next(read_record_dicts(run))
    del record["grader"]
    published = json.loads((ROOT / "docs" / "schema" / "legato.rollout-v0.json").read_text())
    assert list(jsonschema.Draft202012Validator(published).iter_errors(record)) == []
    assert RolloutRecord.from_json(record).grader is None


def _json_objects(cls: type, data: dict[str, Any]) -> Iterator[tuple[type, dict[str, Any]]]:
    """``data`` (a record object as JSON) and every record object's JSON in it, with its class."""
    yield cls, data
    for slot in slots(cls):
        inner = data.get(slot.key)
        if slot.kind == "obj" and isinstance(inner, dict):
            yield from _json_objects(slot.item, inner)
        elif slot.kind == "objs":
            for item in inner or ():
                yield from _json_objects(slot.item, item)


def test_a_key_added_later_to_any_record_object_is_read_past_and_validates(run: Path, collected: Path) -> None:
    """Within ``legato.rollout/v0`` records gain optional keys, nested objects too: today's reader reads them."""
    import jsonschema

    published = json.loads((ROOT / "docs" / "schema" / "legato.rollout-v0.json").read_text())
    validator = jsonschema.Draft202012Validator(published)
    touched: set[str] = set()
    for record in [*read_record_dicts(collected), *read_record_dicts(run)]:
        before = RolloutRecord.from_json(record)
        for cls, obj in list(_json_objects(RolloutRecord, record)):
            obj["added_in_a_later_release"] = {"nested": [1, 2]}
            touched.add(cls.__name__)
        assert list(validator.iter_errors(record)) == []
        assert RolloutRecord.from_json(record) == before
    # Every kind of object a record holds was given the key, not only the record's top level.
    assert touched >= {"RolloutRecord", "StepRecord", "PolicyStamp", "Timing", "ErrorInfo", "ModelStats", "Response"}


def _section(page: str, title: str) -> str:
    text = (ROOT / page).read_text()
    return text.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]


def _leaf_keys(cls: type = RolloutRecord) -> Iterator[tuple[type, Slot]]:
    for slot in slots(cls):
        yield cls, slot
        if slot.kind in ("obj", "objs"):
            yield from _leaf_keys(slot.item)


def test_the_docs_name_every_record_key_and_every_export_column() -> None:
    record_docs = _section("docs/concepts.md", "The record")
    spans = " ".join(re.findall(r"`([^`]+)`", record_docs))  # the code spans: `model.seconds`, `prompt_ids`, ...
    undocumented = sorted(
        f"{cls.__name__}.{slot.key}" for cls, slot in _leaf_keys() if not re.search(rf"\b{slot.key}\b", spans)
    )
    assert not undocumented, f"docs/concepts.md's record section does not name {undocumented}"
    export_docs = _section("docs/concepts.md", "The export")
    assert [name for name in EXPORT_FIELDS if f"`{name}`" not in export_docs] == []
    bullets = [line for line in (export_package.__doc__ or "").splitlines() if line.startswith("* ``")]
    listed = [name for line in bullets for name in line.split(":", 1)[0].split("``")[1::2]]
    assert listed == list(EXPORT_FIELDS), "legato_rl.export's docstring lists the columns in order"


def test_a_column_type_outside_the_parquet_types_is_refused() -> None:
    from legato_rl.export.writers import _arrow_field

    pa = pytest.importorskip("pyarrow")
    with pytest.raises(TypeError, match="'decimal'"):
        _arrow_field(pa, Column("x", "list<decimal>"))
