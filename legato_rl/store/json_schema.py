"""The JSON Schema of a ``legato.rollout/v0`` record, for trainers that read ``rollouts.jsonl`` in any language.

pydantic derives it from the record dataclasses (:mod:`legato_rl.store.schema`); this module then makes it
describe the JSON the writer puts on disk rather than the Python objects: the ``schema`` and ``n_steps``
keys, ``try`` for ``try_index``, ``status`` and ``error.kind`` as enums, ``error`` present when the status is
``error`` or ``retried`` (and, of kind ``agent``, allowed on ``ok`` and ``truncated``), message hashes as
sha256 hex, and every key required but the ones added since the first ``legato.rollout/v0`` records
(:data:`OPTIONAL_FIELDS`). The objects stay open (no ``additionalProperties: false``): a ``legato.rollout/v0``
record may gain optional fields, and a validator built from an older copy of the schema must still accept it.

The schema is published as ``docs/schema/legato.rollout-v0.json`` (``python docs/gen_schema.py`` rewrites it)
and printed by ``legato rl schema``. pydantic is imported only when the schema is built.

Example::

    import json, jsonschema
    from legato_rl.store.json_schema import record_json_schema

    validator = jsonschema.Draft202012Validator(record_json_schema())
    for line in open("run/rollouts.jsonl"):
        validator.validate(json.loads(line))
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

from legato_rl.store.schema import (
    COMPLETED_STATUSES,
    ERROR_KINDS,
    FAILED_STATUSES,
    SCHEMA,
    SHA256_HEX,
    STATUSES,
    ModelStats,
    PolicyStamp,
    RequestRef,
    Response,
    RolloutRecord,
    Status,
    StepRecord,
)

__all__ = ["DIALECT", "OPTIONAL_FIELDS", "record_json_schema", "render_record_json_schema"]

#: The JSON Schema dialect of the generated schema.
DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: Keys a ``legato.rollout/v0`` record may lack (added since its first records), by object.
OPTIONAL_FIELDS: dict[str, frozenset[str]] = {
    "RolloutRecord": frozenset({"grader"}),
    "StepRecord": frozenset({"prompt_ids"}),
    "ModelStats": frozenset({"weight_version", "policy_version"}),
}
#: Dataclass fields written under another key.
_RENAMED = {"RolloutRecord": {"try_index": "try"}}
#: Integers the writer never writes negative.
_COUNTS = {"RolloutRecord": ("attempt", "try"), "StepRecord": ("index",), "PromptIds": ("start",)}
_KEY_ORDER = ("title", "description", "type", "properties", "required", "if", "then", "else")
_ROOT = "RolloutRecord"
_ROLE = re.compile(r":[a-z]+:`~?(?:[\w.]+\.)?([\w]+(?:\(\))?)`")


def record_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) that every line of ``rollouts.jsonl`` validates against.

    Returns:
        The schema as a JSON object: the record at the top, its nested objects under ``$defs``.
    """
    import pydantic

    generated = pydantic.TypeAdapter(RolloutRecord).json_schema()
    defs: dict[str, dict[str, Any]] = generated.pop("$defs")
    root = generated
    for name, obj in [(_ROOT, root), *defs.items()]:
        _to_disk(name, obj)
    _describe_root(root)
    defs["ErrorInfo"]["properties"]["kind"]["enum"] = list(ERROR_KINDS)
    messages = defs["RequestRef"]["properties"]["messages"]
    messages["items"] = {"type": "string", "pattern": f"^{SHA256_HEX.pattern}$"}
    for name, order in _written_order().items():
        obj = root if name == _ROOT else defs[name]
        obj["properties"] = {key: obj["properties"][key] for key in order if key in obj["properties"]}
        obj["required"] = [key for key in order if key in obj["required"]]
    return {"$schema": DIALECT, **_ordered(root), "$defs": {name: _ordered(defs[name]) for name in sorted(defs)}}


def render_record_json_schema() -> str:
    """:func:`record_json_schema` as the text of ``docs/schema/legato.rollout-v0.json``."""
    return json.dumps(record_json_schema(), indent=2, ensure_ascii=False) + "\n"


def _to_disk(name: str, obj: dict[str, Any]) -> None:
    """Make one object's schema describe its JSON: keys as written, all required, documented, no defaults."""
    notes = _attribute_notes(obj.pop("description", ""))
    obj["description"] = notes.pop("", "")
    renamed = _RENAMED.get(name, {})
    properties: dict[str, Any] = {}
    for field_name, prop in obj["properties"].items():
        key = renamed.get(field_name, field_name)
        prop.pop("title", None)
        prop.pop("default", None)  # every key is written; a dataclass default is not a default on disk
        note = notes.get(field_name)
        if note is not None:
            prop["description"] = note.replace(f"; `{key}` in JSON", "")
        if key in _COUNTS.get(name, ()):
            prop["minimum"] = 0
        properties[key] = prop
    obj["properties"] = properties
    optional = OPTIONAL_FIELDS.get(name, frozenset())
    obj["required"] = [key for key in properties if key not in optional]


def _describe_root(root: dict[str, Any]) -> None:
    """The record's own keys: ``schema`` and ``n_steps``, the status enum and the rule tying ``error`` to it."""
    properties = root["properties"]
    failed = [status for status in STATUSES if status in FAILED_STATUSES]
    completed = [status for status in STATUSES if status in COMPLETED_STATUSES]
    properties["status"] = {
        "enum": list(STATUSES),
        "description": f"What became of the try: {' and '.join(completed)} are graded and count towards their "
        f"group; {' and '.join(failed)} carry an error; {Status.RETRIED} is followed by another try of the attempt; "
        f"a graded try whose desktop the agent's actions destroyed has reward 0 and an error of kind agent.",
    }
    head = {"schema": {"const": SCHEMA, "description": "The record schema's name and version."}}
    root["properties"] = {**head, **properties}
    root["properties"]["n_steps"] = {"type": "integer", "minimum": 0, "description": "Policy calls made: len(steps)."}
    root["required"] = list(root["properties"])
    root["description"] = f"One try of one attempt: a line of rollouts.jsonl ({SCHEMA})."
    root["if"] = {"properties": {"status": {"enum": failed}}, "required": ["status"]}
    root["then"] = {"properties": {"error": {"$ref": "#/$defs/ErrorInfo"}}}
    agent = {"allOf": [{"$ref": "#/$defs/ErrorInfo"}, {"properties": {"kind": {"const": "agent"}}}]}
    root["else"] = {
        "if": {"properties": {"status": {"enum": completed}}, "required": ["status"]},
        "then": {"properties": {"error": {"anyOf": [{"type": "null"}, agent]}}},
        "else": {"properties": {"error": {"type": "null"}}},
    }


def _written_order() -> dict[str, list[str]]:
    """The key order of a record and of a step as the writer writes them (the other objects keep field order)."""
    step = StepRecord(index=0, request=RequestRef(None, ()), response=Response(""), model=ModelStats(0.0))
    record = RolloutRecord("", "", None, "", 0, PolicyStamp("", None), "ok", steps=(step,)).to_json()
    return {_ROOT: list(record), "StepRecord": list(record["steps"][0])}


def _ordered(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with its keys in reading order: what it is, its properties, then the rules."""
    first = [key for key in _KEY_ORDER if key in obj]
    return {key: obj[key] for key in [*first, *(key for key in obj if key not in _KEY_ORDER)]}


def _attribute_notes(docstring: str) -> dict[str, str]:
    """A Google-style docstring as ``{"": summary, attribute: note, ...}``, its reST markup made plain."""
    summary: list[str] = []
    notes: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in inspect.cleandoc(docstring).splitlines():
        if line.strip() == "Attributes:":
            current = []
            continue
        if current is None:
            summary.append(line)
            continue
        entry = re.match(r" {4}(\w+): (.*)", line)
        if entry:
            current = notes[entry.group(1)] = [entry.group(2)]
        elif line.startswith(" " * 8):
            current.append(line.strip())
    result = {key: _plain(" ".join(words)) for key, words in notes.items()}
    paragraphs = "\n".join(summary).strip().split("\n\n")
    result[""] = _plain("\n\n".join(" ".join(p.split()) for p in paragraphs))
    return result


def _plain(text: str) -> str:
    """reST roles and literals as Markdown code (``x`` and :class:`~a.B` become `x` and `B`), ``None`` as null."""
    return _ROLE.sub(r"`\1`", text).replace("``", "`").replace("`None`", "`null`")
