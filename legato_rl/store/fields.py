"""Record fields described once: the metadata a record field carries, and the JSON codec made from it.

A record class (:mod:`legato_rl.store.schema`) is a frozen dataclass. What its fields mean on disk is said
on the fields themselves, in their ``dataclasses.field(metadata=info(...))`` (:class:`FieldInfo`), and on
the class in a ``JSON: ClassVar[Layout]`` when its written key order or its own keys differ from its
fields (:class:`Layout`). Everything else is derived from that and from the fields' types:

* the JSON a record is written as and read from (:func:`encode`, :func:`decode`): the key (``try`` for
  ``try_index``), the order, tuples as lists, nested records, which keys a record read back must hold
  (:attr:`FieldInfo.required`), the casts and checks made on reading;
* the published JSON Schema (:mod:`legato_rl.store.json_schema`): the keys, which are required
  (:attr:`FieldInfo.optional`), ``minimum``, ``enum`` and ``pattern``;
* the export's columns and their Parquet types (:mod:`legato_rl.export.rows`, :mod:`legato_rl.export.writers`):
  a field with a :attr:`FieldInfo.column` is a column of every exported step (:func:`record_columns`).

The encoder and decoder of each class are compiled once, on first use, into plain functions that read and
build each key in turn (as ``dataclasses`` does for ``__init__``): a record is encoded and decoded as fast as
by hand-written ``to_json``/``from_json``, and every class goes through the same code.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from legato_rl.store.errors import RecordError

__all__ = [
    "Column",
    "FieldInfo",
    "Layout",
    "Slot",
    "build",
    "clip",
    "decode",
    "encode",
    "info",
    "record_columns",
    "slots",
    "tuple_or_none",
    "written_keys",
]

_META = "legato"


@dataclass(frozen=True)
class Column:
    """An export column a record field fills: one value per exported step (:mod:`legato_rl.export`).

    Attributes:
        name: the column's name.
        type: its Parquet type: ``string``, ``bool``, ``int32``, ``float32``, ``float64`` or ``list<T>`` of one
            of them (``list<int32>`` values are checked to fit ``int32``).
        nullable: whether a value may be null.
    """

    name: str
    type: str
    nullable: bool = True


@dataclass(frozen=True)
class FieldInfo:
    """What a record field is on disk, beyond its name and type.

    Attributes:
        key: the JSON key, when it is not the field's name.
        optional: added since the first ``legato.rollout/v0`` records: a record may lack it (it reads as the
            field's default) and the JSON Schema does not require it.
        required: a record read back must hold the key (else it reads as the field's default, or ``None``);
            ``None``: required when the field has no default. Every key is always written either way, and
            the JSON Schema requires every key that is not ``optional``.
        read: the cast made on reading (``int``, ``float``; ``None`` stays ``None``).
        minimum: the least value of an integer (checked on reading, ``minimum`` in the JSON Schema).
        choices: the values a string may take (``enum`` in the JSON Schema; the class checks them itself).
        pattern: what each string of a list must match (checked on reading, ``pattern`` in the JSON Schema).
        column: the export column this field fills, or ``None``.
    """

    key: str | None = None
    optional: bool = False
    required: bool | None = None
    read: Callable[[Any], Any] | None = None
    minimum: int | None = None
    choices: tuple[str, ...] | None = None
    pattern: re.Pattern[str] | None = None
    column: Column | None = None


def info(
    *,
    key: str | None = None,
    optional: bool = False,
    required: bool | None = None,
    read: Callable[[Any], Any] | None = None,
    minimum: int | None = None,
    choices: tuple[str, ...] | None = None,
    pattern: re.Pattern[str] | None = None,
    column: Column | None = None,
) -> dict[str, FieldInfo]:
    """The ``metadata`` of a record field: ``field(default=None, metadata=info(optional=True))``."""
    return {_META: FieldInfo(key, optional, required, read, minimum, choices, pattern, column)}


@dataclass(frozen=True)
class Layout:
    """How a record class is written, where its fields alone do not say it (``JSON: ClassVar[Layout]``).

    Attributes:
        first: the keys written first, in this order; the other fields follow in field order.
        computed: keys written that are no field, each with how it is computed (ignored on reading).
        check: called with the JSON object (and its name) before it is read: the class's own checks.
    """

    first: tuple[str, ...] = ()
    computed: Mapping[str, Callable[[Any], Any]] = dataclasses.field(default_factory=dict)
    check: Callable[[Mapping[str, Any], str], None] | None = None


@dataclass(frozen=True)
class Slot:
    """One field of a record class as the codec sees it (its :class:`FieldInfo` and its type, resolved).

    Attributes:
        name: the field's name.
        key: its JSON key.
        kind: ``value`` (a number, string or ``None``), ``seq`` (a tuple, written as a list), ``map`` (a
            mapping), ``obj`` (a nested record) or ``objs`` (a tuple of nested records).
        nullable: ``None`` is a value.
        item: the nested record class (``obj``, ``objs``) or the items' type (``seq``); else ``None``.
        required: a record read back must hold the key.
        default: the value of a key a record lacks (a ``default_factory`` is called).
        info: the field's :class:`FieldInfo`.
    """

    name: str
    key: str
    kind: str
    nullable: bool
    item: Any
    required: bool
    default: Any
    info: FieldInfo


_SLOTS: dict[type, tuple[Slot, ...]] = {}
_ENCODERS: dict[type, Callable[[Any], dict[str, Any]]] = {}
_DECODERS: dict[type, Callable[[Any, str], Any]] = {}
_NO_LAYOUT = Layout()


def layout(cls: type) -> Layout:
    """The class's :class:`Layout` (its ``JSON`` class variable), or the default one."""
    found = getattr(cls, "JSON", None)
    return found if isinstance(found, Layout) else _NO_LAYOUT


def slots(cls: type) -> tuple[Slot, ...]:
    """The fields of a record class, in field order, as the codec reads and writes them."""
    found = _SLOTS.get(cls)
    if found is None:
        found = _SLOTS[cls] = tuple(_slot(cls, f, hint) for f, hint in _hinted_fields(cls))
    return found


def written_keys(cls: type) -> list[str]:
    """The keys of the class's JSON object, in the order they are written."""
    own = layout(cls)
    keys = [slot.key for slot in slots(cls)] + list(own.computed)
    unknown = [key for key in own.first if key not in keys]
    if unknown:
        raise TypeError(f"{cls.__name__}.JSON.first names {unknown}, which are neither fields nor computed keys")
    return [*own.first, *(key for key in keys if key not in own.first)]


def encode(value: Any) -> dict[str, Any]:
    """A record object as the JSON object written (every key present, in :func:`written_keys` order)."""
    return _encoder_of(type(value))(value)


def decode(cls: type, data: Any, what: str) -> Any:
    """The record object ``cls`` from its JSON object; ``what`` names it in errors (``steps[2].model``).

    Raises:
        RecordError: ``data`` is not an object, lacks a required key, or a value fails a check of its field.
            A key that is no field is ignored: records gain optional keys within ``legato.rollout/v0``, and a
            reader of today must read tomorrow's.
    """
    return _decoder_of(cls)(data, what)


def record_columns(root: type, rows: str) -> Iterator[tuple[Column, str, tuple[str, ...]]]:
    """The export columns the fields under ``root`` declare, in field order: ``(column, level, path)``.

    ``rows`` is the field of ``root`` whose items are the rows (``steps``); ``level`` is ``record`` for a
    column of ``root`` itself (the same value in each of its rows), ``row`` for one under an item; ``path``
    is the attribute names from there to the field.
    """

    def walk(cls: type, level: str, path: tuple[str, ...]) -> Iterator[tuple[Column, str, tuple[str, ...]]]:
        for slot in slots(cls):
            here = (*path, slot.name)
            if slot.info.column is not None:
                yield slot.info.column, level, here
            if slot.kind == "obj":
                yield from walk(slot.item, level, here)
            elif slot.kind == "objs" and cls is root and slot.name == rows:
                yield from walk(slot.item, "row", ())

    yield from walk(root, "record", ())


# --- the checks, with messages that name the field at fault --------------------------------------------------


def clip(value: Any, limit: int = 120) -> str:
    """``value`` for an error message, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def build(cls: Any, data: Any, what: str) -> Any:
    """The flat dataclass ``cls`` from a JSON object with its fields (``run.json``'s objects; records use
    :func:`decode`).

    Raises:
        RecordError: ``data`` is not an object, has unknown fields or lacks a required one.
    """
    if not isinstance(data, Mapping):
        raise RecordError(f"{what} must be a JSON object, got {clip(data)}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise RecordError(f"{what} has unknown field(s) {', '.join(sorted(unknown))}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise RecordError(f"{what}: {exc}") from exc


def tuple_or_none(value: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


def _at_least(value: Any, minimum: int, what: str) -> Any:
    if value < minimum:
        raise RecordError(f"{what} must be >= {minimum}, got {clip(value)}")
    return value


def _matching(value: Any, pattern: re.Pattern[str], what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and pattern.fullmatch(v) for v in value):
        raise RecordError(f"{what} must be a list of strings matching {pattern.pattern}, got {clip(value)}")
    return tuple(value)


# --- the fields, resolved ------------------------------------------------------------------------------------


def _hinted_fields(cls: type) -> Iterator[tuple[dataclasses.Field[Any], Any]]:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a record class (a dataclass)")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        yield f, hints[f.name]


def _slot(cls: type, f: dataclasses.Field[Any], hint: Any) -> Slot:
    meta = f.metadata.get(_META, FieldInfo())
    nullable = False
    if _is_union(hint):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(hint))
        hint = args[0] if len(args) == 1 else Any
    origin = typing.get_origin(hint)
    item: Any = None
    if origin is tuple:
        item = typing.get_args(hint)[0]
        kind = "objs" if dataclasses.is_dataclass(item) else "seq"
    elif origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        kind = "map"
    elif dataclasses.is_dataclass(hint):
        kind, item = "obj", hint
    else:
        kind = "value"
    has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    required = (not has_default) if meta.required is None else meta.required
    if meta.optional and required:
        raise TypeError(f"{cls.__name__}.{f.name} is optional, so a record read back may lack it: give it a default")
    default = f.default if f.default is not dataclasses.MISSING else None
    if f.default_factory is not dataclasses.MISSING:
        default = f.default_factory
    return Slot(f.name, meta.key or f.name, kind, nullable, item, required, default, meta)


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) is typing.Union or isinstance(hint, types.UnionType)


# --- the compiled codec --------------------------------------------------------------------------------------


def _encoder_of(cls: type) -> Callable[[Any], dict[str, Any]]:
    encoder = _ENCODERS.get(cls)
    if encoder is None:
        encoder = _ENCODERS[cls] = _compile_encoder(cls)
    return encoder


def _decoder_of(cls: type) -> Callable[[Any, str], Any]:
    decoder = _DECODERS.get(cls)
    if decoder is None:
        decoder = _DECODERS[cls] = _compile_decoder(cls)
    return decoder


def _compile_encoder(cls: type) -> Callable[[Any], dict[str, Any]]:
    """``encode_record(o)``: one dict display, a key per written key (the source is its ``__doc__``)."""
    env: dict[str, Any] = {}
    by_key = {slot.key: slot for slot in slots(cls)}
    parts = []
    for n, key in enumerate(written_keys(cls)):
        slot = by_key.get(key)
        if slot is None:
            env[f"computed_{n}"] = layout(cls).computed[key]
            parts.append(f"{key!r}: computed_{n}(o)")
            continue
        if slot.kind in ("obj", "objs"):
            env[f"encode_{n}"] = _encoder_of(slot.item)
        value = {
            "value": _V,
            "seq": f"list({_V})",
            "map": f"dict({_V})",
            "obj": f"encode_{n}({_V})",
            "objs": f"[encode_{n}(x) for x in {_V}]",
        }[slot.kind]
        parts.append(f"{key!r}: {_nullable(value, f'o.{slot.name}', slot.nullable)}")
    source = "def encode_record(o):\n    return {\n" + "".join(f"        {p},\n" for p in parts) + "    }\n"
    return _define(source, "encode_record", env, cls)


def _compile_decoder(cls: type) -> Callable[[Any, str], Any]:
    """``decode_record(d, what)``: the checks, then one constructor call (the source is its ``__doc__``)."""
    own = layout(cls)
    all_slots = slots(cls)
    env: dict[str, Any] = {
        "cls": cls,
        "Mapping": Mapping,
        "RecordError": RecordError,
        "clip": clip,
        "at_least": _at_least,
        "matching": _matching,
        "required": tuple(slot.key for slot in all_slots if slot.required),
        "check": own.check,
    }
    lines = [
        "def decode_record(d, what):",
        "    if not isinstance(d, Mapping):",
        "        raise RecordError(f'{what} must be a JSON object, got {clip(d)}')",
    ]
    if env["required"]:
        lines += [
            "    missing = [key for key in required if key not in d]",
            "    if missing:",
            "        raise RecordError(f'{what} misses the field(s) {\", \".join(missing)}')",
        ]
    if own.check is not None:
        lines.append("    check(d, what)")
    lines.append("    return cls(")
    lines += [f"        {slot.name}={_read(slot, n, env)}," for n, slot in enumerate(all_slots)]
    lines.append("    )")
    return _define("\n".join(lines) + "\n", "decode_record", env, cls)


def _read(slot: Slot, n: int, env: dict[str, Any]) -> str:
    """The expression that reads the slot's key of ``d`` (the object named ``what`` in errors)."""
    key = repr(slot.key)
    if slot.required:
        get = f"d[{key}]"
    elif callable(slot.default):
        env[f"default_{n}"] = slot.default
        get = f"(d[{key}] if {key} in d else default_{n}())"
    else:
        env[f"default_{n}"] = slot.default
        get = f"d.get({key}, default_{n})"
    where = f"f'{{what}}.{slot.key}'"
    meta = slot.info
    if slot.kind == "seq" and meta.pattern is not None:
        env[f"pattern_{n}"] = meta.pattern
        value = f"matching({_V}, pattern_{n}, {where})"
    elif slot.kind in ("obj", "objs"):
        env[f"decode_{n}"] = _decoder_of(slot.item)
        value = (
            f"decode_{n}({_V}, {where})"
            if slot.kind == "obj"
            else f"tuple(decode_{n}(x, f'{{what}}.{slot.key}[{{i}}]') for i, x in enumerate({_V}))"
        )
    elif meta.read is not None:
        env[f"read_{n}"] = meta.read
        value = f"read_{n}({_V})"
    else:
        value = {"seq": f"tuple({_V})", "map": f"dict({_V})", "value": _V}[slot.kind]
    if meta.minimum is not None:
        value = f"at_least({value}, {meta.minimum}, {where})"
    return _nullable(value, get, slot.nullable)


#: Where the value read stands in an expression template of :func:`_nullable`.
_V = "@V@"


def _nullable(template: str, get: str, nullable: bool) -> str:
    """``template`` applied to the value ``get`` evaluates to; ``None`` kept as is when ``nullable``."""
    if template == _V:
        return get
    if nullable:
        return f"(None if (v := {get}) is None else {template.replace(_V, 'v')})"
    return template.replace(_V, get)


def _define(source: str, name: str, env: dict[str, Any], cls: type) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<{name} of {cls.__qualname__}>", "exec"), env, namespace)
    function: Callable[..., Any] = namespace[name]
    function.__qualname__ = f"{cls.__qualname__}.{name}"
    function.__doc__ = source
    return function
