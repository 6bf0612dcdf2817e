"""The JSONL and Parquet writers of an export, and the Parquet schema (made from the columns' types)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from legato_gym.errors import ConfigError, MissingDependencyError
from legato_rl.export.rows import COLUMNS, EXPORT_FIELDS, IMAGES_FIELD
from legato_rl.store import Column

__all__ = [
    "DATASETS_EXTRA",
    "EXPORT_SCHEMA",
    "FORMATS",
    "JsonlRows",
    "ParquetRows",
    "export_format",
    "parquet_schema",
]

#: Written in the Parquet file's metadata (key ``legato.schema``).
EXPORT_SCHEMA = "legato.export/v0"
#: The output formats and the file suffixes that select them.
FORMATS: Mapping[str, tuple[str, ...]] = {"jsonl": (".jsonl",), "parquet": (".parquet", ".pq")}
#: The extra that installs Hugging Face ``datasets`` (for ``image_column``).
DATASETS_EXTRA = "export"


# A Parquet row group is written when it holds this many rows, or this many characters of messages
# (inline screenshots make a row megabytes large), whichever comes first.
_BATCH_ROWS = 512
_BATCH_CHARS = 64 * 2**20


def parquet_schema(*, image_column: bool = False) -> Any:
    """The ``pyarrow.Schema`` of a Parquet export (see :mod:`legato_rl.export`).

    Args:
        image_column: add the ``images`` column and the ``huggingface`` metadata that makes it a
            ``datasets`` ``List(Image())`` (needs Hugging Face ``datasets``).

    Raises:
        MissingDependencyError: ``image_column`` and ``datasets`` is not installed.
    """
    pa = _pyarrow()
    fields = [_arrow_field(pa, column) for column in COLUMNS]
    metadata = {"legato.schema": EXPORT_SCHEMA}
    if image_column:
        image = pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())])
        fields.append(pa.field(IMAGES_FIELD, _list_of(pa, image)))
        metadata["huggingface"] = _hf_metadata(pa.schema(fields))
    return pa.schema(fields, metadata=metadata)


def _hf_metadata(schema: Any) -> str:
    """The ``huggingface`` schema metadata ``datasets`` reads its features from (``images``: ``List(Image())``)."""
    datasets = _datasets()
    features = datasets.Features.from_arrow_schema(schema.remove(schema.get_field_index(IMAGES_FIELD)))
    features[IMAGES_FIELD] = datasets.List(datasets.Image()) if hasattr(datasets, "List") else [datasets.Image()]
    return json.dumps({"info": {"features": features.to_dict()}})


def _arrow_field(pa: Any, column: Column) -> Any:
    """The Parquet field of a column: its type (:attr:`~legato_rl.store.Column.type`) and nullability."""
    if column.type == "json":
        return pa.field(column.name, pa.string(), nullable=column.nullable, metadata={"encoding": "json"})
    return pa.field(column.name, _arrow_type(pa, column.type, column.name), nullable=column.nullable)


_SCALARS = {"string": "string", "bool": "bool_", "int32": "int32", "float32": "float32", "float64": "float64"}


def _arrow_type(pa: Any, name: str, column: str) -> Any:
    if name.startswith("list<") and name.endswith(">"):
        return _list_of(pa, _arrow_type(pa, name[len("list<") : -1], column))
    if name not in _SCALARS:
        raise TypeError(f"export column {column!r} has type {name!r}, not one of {', '.join(_SCALARS)} or list<...>")
    return getattr(pa, _SCALARS[name])()


def _list_of(pa: Any, item: Any) -> Any:
    # Parquet names a list's items "element": name them so here too, so the schema reads back unchanged.
    return pa.list_(pa.field("element", item))


class JsonlRows:
    """Rows as JSON lines, written as they come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def open(self, tmp: Path) -> None:
        """Start writing to ``tmp`` (the temporary file of :func:`~legato_rl.export.files.atomic_output`)."""
        self._file = open(tmp, "w", encoding="utf-8", newline="\n")  # noqa: SIM115  (closed in close())

    def write(self, row: dict[str, Any]) -> None:
        """Write one row (a dict of :data:`~legato_rl.export.rows.EXPORT_FIELDS`) as one line."""
        assert self._file is not None
        self._file.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
        self._file.write("\n")

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None


class ParquetRows:
    """Rows as Parquet, written in row groups of at most ``_BATCH_ROWS`` rows or ``_BATCH_CHARS`` characters."""

    def __init__(self, path: Path, *, image_column: bool = False) -> None:
        self.path = path
        self._pa = _pyarrow()
        self._schema = parquet_schema(image_column=image_column)
        self._names = (*EXPORT_FIELDS, IMAGES_FIELD) if image_column else EXPORT_FIELDS
        self._json = frozenset(column.name for column in COLUMNS if column.type == "json")
        self._writer: Any = None
        self._columns: dict[str, list[Any]] = {name: [] for name in self._names}
        self._rows = 0
        self._chars = 0

    def open(self, tmp: Path) -> None:
        """Start writing to ``tmp`` (the temporary file of :func:`~legato_rl.export.files.atomic_output`)."""
        import pyarrow.parquet as pq

        self._writer = pq.ParquetWriter(str(tmp), self._schema, compression="zstd")

    def write(self, row: dict[str, Any]) -> None:
        """Add one row; a full row group is written out."""
        chars = 0
        for name in self._names:
            value = row[name]
            if name in self._json:
                value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
                chars += len(value)
            self._columns[name].append(value)
        self._rows += 1
        self._chars += chars + sum(len(image["bytes"]) for image in row.get(IMAGES_FIELD) or ())
        if self._rows >= _BATCH_ROWS or self._chars >= _BATCH_CHARS:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        table = self._pa.Table.from_pydict(self._columns, schema=self._schema)
        self._writer.write_table(table)
        self._columns = {name: [] for name in self._names}
        self._rows = self._chars = 0

    def close(self) -> None:
        """Write the last row group and close the file (idempotent)."""
        if self._writer is None:
            return
        try:
            self._flush()
        finally:
            self._writer.close()
            self._writer = None


def export_format(path: Path, format: str | None) -> str:
    """The format to write: ``format`` if given, else the one ``path``'s suffix names (:data:`FORMATS`).

    Raises:
        ConfigError: ``format`` is not a known format, or it is ``None`` and the suffix names none.
    """
    if format is not None:
        fmt = format.lower()
        if fmt not in FORMATS:
            raise ConfigError(f"export format {format!r} is not one of {', '.join(FORMATS)}")
        return fmt
    suffix = path.suffix.lower()
    for fmt, suffixes in FORMATS.items():
        if suffix in suffixes:
            return fmt
    raise ConfigError(
        f"cannot tell the export format of {path} from its suffix {suffix or '(none)'!r}; name the file "
        "*.jsonl or *.parquet, or give --format jsonl|parquet"
    )


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as exc:  # pragma: no cover  (a core dependency; only a broken install lacks it)
        raise MissingDependencyError(
            "Parquet export needs pyarrow: pip install 'pyarrow>=14' (a dependency of legatolabs), "
            "or export JSONL (--out FILE.jsonl)"
        ) from exc
    return pyarrow


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError(
            f"the images column (--image-column) is written as a Hugging Face datasets Image list: pip install "
            f"'legatolabs[{DATASETS_EXTRA}]' (or 'datasets>=2.18'), or export without it"
        ) from exc
    return datasets
