"""The JSON Schema of a ``legato.rollout/v0`` record, for trainers that read ``rollouts.jsonl`` in any language.

pydantic derives the types from the record dataclasses (:mod:`legato_rl.store.schema`); the rest comes from
what each field says of itself (:class:`~legato_rl.store.fields.FieldInfo`) and from the codec that writes
the records, so that the schema describes the JSON on disk rather than the Python objects: each key as
written (``try`` for ``try_index``) and in the order written, every key required but the ones added since
the first ``legato.rollout/v0`` records (``optional``), ``minimum``, ``enum`` (``choices``) and ``pattern``,
descriptions from the classes' docstrings. The record's own rules are added here: the ``schema`` and
``n_steps`` keys, the status enum, and ``error`` present when the status is ``error`` or ``retried`` (and, of
kind ``agent``, allowed on ``ok`` and ``truncated``). The objects stay open (no ``additionalProperties:
false``): a ``legato.rollout/v0`` record may gain optional fields, and a validator built from an older copy
of the schema must still accept it.

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

from legato_rl.store import schema as _records
from legato_rl.store.fields import Slot, slots, written_keys
from legato_rl.store.schema import COMPLETED_STATUSES, FAILED_STATUSES, SCHEMA, STATUSES, RolloutRecord, Status

__all__ = ["DIALECT", "OPTIONAL_FIELDS", "record_json_schema", "render_record_json_schema"]

#: The JSON Schema dialect of the generated schema.
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _record_classes(cls: type = RolloutRecord) -> list[type]:
    """``cls`` and every record class nested in it, each once, outermost first."""
    found = [cls]
    for slot in slots(cls):
        if slot.kind in ("obj", "objs"):
            found += [nested for nested in _record_classes(slot.item) if nested not in found]
    return found


#: Keys a ``legato.rollout/v0`` record may lack (added since its first records), by object: the fields marked
#: ``optional`` (kept for code that read this table; the fields say it).
OPTIONAL_FIELDS: dict[str, frozenset[str]] = {
    cls.__name__: frozenset(slot.key for slot in slots(cls) if slot.info.optional)
    for cls in _record_classes()
    if any(slot.info.optional for slot in slots(cls))
}
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
        _to_disk(_record_class(name), obj)
    _describe_root(root)
    return {"$schema": DIALECT, **_ordered(root), "$defs": {name: _ordered(defs[name]) for name in sorted(defs)}}


def render_record_json_schema() -> str:
    """:func:`record_json_schema` as the text of ``docs/schema/legato.rollout-v0.json``."""
    return json.dumps(record_json_schema(), indent=2, ensure_ascii=False) + "\n"


def _record_class(name: str) -> type:
    """The record class pydantic named ``name`` (a class of :mod:`legato_rl.store.schema` or ``PromptIds``)."""
    cls = getattr(_records, name, None)
    if not isinstance(cls, type):
        raise TypeError(f"the record schema names {name!r}, which is not a record class of legato_rl.store.schema")
    return cls


def _to_disk(cls: type, obj: dict[str, Any]) -> None:
    """Make one object's schema describe its JSON: keys as written and in the order written, the required ones
    required, each documented, the fields' own checks, no defaults."""
    notes = _attribute_notes(obj.pop("description", ""))
    obj["description"] = notes.pop("", "")
    properties: dict[str, Any] = {}
    by_key: dict[str, Slot] = {}
    for slot in slots(cls):
        prop = obj["properties"][slot.name]
        prop.pop("title", None)
        prop.pop("default", None)  # every key is written; a dataclass default is not a default on disk
        note = notes.get(slot.name)
        if note is not None:
            prop["description"] = note.replace(f"; `{slot.key}` in JSON", "")
        if slot.info.minimum is not None:
            prop["minimum"] = slot.info.minimum
        if slot.info.choices is not None:
            prop["enum"] = list(slot.info.choices)
        if slot.info.pattern is not None:
            prop["items"] = {"type": "string", "pattern": f"^{slot.info.pattern.pattern}$"}
        properties[slot.key] = prop
        by_key[slot.key] = slot
    order = written_keys(cls)
    obj["properties"] = {key: properties[key] for key in order if key in properties}
    obj["required"] = [key for key in order if key in by_key and not by_key[key].info.optional]


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
    root["properties"] = {key: root["properties"][key] for key in written_keys(RolloutRecord)}
    optional = {slot.key for slot in slots(RolloutRecord) if slot.info.optional}
    root["required"] = [key for key in root["properties"] if key not in optional]
    root["description"] = f"One try of one attempt: a line of rollouts.jsonl ({SCHEMA})."
    root["if"] = {"properties": {"status": {"enum": failed}}, "required": ["status"]}
    root["then"] = {"properties": {"error": {"$ref": "#/$defs/ErrorInfo"}}}
    agent = {"allOf": [{"$ref": "#/$defs/ErrorInfo"}, {"properties": {"kind": {"const": "agent"}}}]}
    root["else"] = {
        "if": {"properties": {"status": {"enum": completed}}, "required": ["status"]},
        "then": {"properties": {"error": {"anyOf": [{"type": "null"}, agent]}}},
        "else": {"properties": {"error": {"type": "null"}}},
    }


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
