"""``export_steps``: the two passes over a run that write its training samples (see :mod:`legato_rl.export`)."""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from legato_gym.errors import ConfigError
from legato_rl.advantages import group_advantages
from legato_rl.export.files import atomic_output
from legato_rl.export.rows import IMAGES_FIELD, image_list, outcomes, step_row
from legato_rl.export.writers import JsonlRows, ParquetRows, export_format
from legato_rl.store import (
    COMPLETED_STATUSES,
    IMAGES_DIR,
    MANIFEST_FILE,
    MESSAGES_DIR,
    ROLLOUTS_FILE,
    SUMMARY_FILE,
    RecordError,
    check_run_dir,
    delivered_groups,
    expand_prompt_ids,
    read_records,
    torn_tail_bytes,
)

__all__ = ["ExportStats", "export_steps"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportStats:
    """What :func:`export_steps` wrote.

    Attributes:
        path: the file written.
        format: ``jsonl`` or ``parquet``.
        rows: rows written (one per policy step).
        rollouts: completed (``ok`` / ``truncated``) records exported.
        groups: groups they belong to.
        excluded: records not exported, by status.
        bytes: size of the file written.
        torn_tail_bytes: bytes of a torn last record in ``rollouts.jsonl`` that were left out (a collect was
            killed mid-write; resuming it re-runs that attempt), 0 normally.
        seconds: wall time of the export.
    """

    path: Path
    format: str
    rows: int
    rollouts: int
    groups: int
    excluded: Mapping[str, int] = field(default_factory=dict)
    bytes: int = 0
    torn_tail_bytes: int = 0
    seconds: float = 0.0


def export_steps(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    inline_images: bool = False,
    format: str | None = None,
    image_column: bool = False,
) -> ExportStats:
    """Write one training sample per policy step of every ``ok`` or ``truncated`` rollout of a run.

    Args:
        run_dir: the run directory (``legato rl collect --out``).
        out: the file to write; replaced atomically when the export succeeds.
        inline_images: put each screenshot in ``messages`` as its ``data:image/png;base64`` URL instead of
            its ``legato-image://<sha>`` reference.
        format: ``jsonl`` or ``parquet``; ``None`` picks it from ``out``'s suffix (``.jsonl``, ``.parquet``).
        image_column: (Parquet only) add an ``images`` column holding each step's screenshots as a Hugging
            Face ``datasets`` ``List(Image())`` (see :mod:`legato_rl.export`).

    Returns:
        What was written.

    Raises:
        RecordError: ``run_dir`` is not a run, a record is damaged, or a message or image file is missing.
        RunInProgressError: a collect is still writing the run.
        ConfigError: ``format`` or ``out``'s suffix is not a known format, ``out`` is a directory or a
            file of the run itself, or ``image_column`` was asked for with JSONL.
        MissingDependencyError: Parquet was asked for and pyarrow is not installed, or ``image_column`` and
            Hugging Face ``datasets`` is not (``pip install 'legatolabs[export]'``).
        StorageError: ``out`` cannot be written (a full disk, a read-only folder, a file in its path); the
            file that was there is left as it was and no temporary file remains.

    Example:
        >>> from legato.rl import export_steps
        >>> stats = export_steps("runs/step-41", "runs/step-41/train.parquet")  # doctest: +SKIP
        >>> stats.rows                                                           # doctest: +SKIP
        412
    """
    started = time.monotonic()
    # A continuous run (legato_rl.follow) is exported while it runs: the groups it has handed over, whose records
    # are all durable; groups not handed over yet, re-run for staleness, or delivered marked stale are left out.
    handed_over = delivered_groups(run_dir) if Path(run_dir).is_dir() else None
    root = check_run_dir(run_dir, allow_in_progress=handed_over is not None)
    path = Path(out)
    fmt = export_format(path, format)
    if image_column and fmt != "parquet":
        raise ConfigError(
            f"the images column is a Parquet column (a datasets Image list); export to {path.with_suffix('.parquet')} "
            "or drop --image-column (JSONL rows reference the screenshots by legato-image://<sha>, or inline them "
            "with --inline-images)"
        )
    _check_out(root, path)
    torn = torn_tail_bytes(root)
    if torn:
        log.warning(
            "%s ends in a torn record (%d bytes): a collect was killed while writing it; it is left out of the "
            "export. Run the same collect again to resume and finish the run.",
            root / ROLLOUTS_FILE,
            torn,
        )
    advantages = group_advantages(o for o in outcomes(root) if handed_over is None or o["group_id"] in handed_over)
    writer = ParquetRows(path, image_column=image_column) if fmt == "parquet" else JsonlRows(path)
    rows = rollouts = 0
    groups: set[str] = set()
    excluded: Counter[str] = Counter()
    with atomic_output(path) as tmp:
        writer.open(tmp)
        try:
            for record in read_records(root):
                if handed_over is not None and record.group_id not in handed_over:
                    excluded["not handed over"] += 1
                    continue
                if record.status not in COMPLETED_STATUSES:
                    excluded[record.status] += 1
                    continue
                advantage = advantages.get(record.rollout_id)
                if advantage is None:
                    raise RecordError(
                        f"{root / ROLLOUTS_FILE} changed while it was exported (record {record.rollout_id} is new); "
                        "export again once nothing writes to the run"
                    )
                rollouts += 1
                groups.add(record.group_id)
                images_seen: set[str] = set()
                prompts = expand_prompt_ids(record.steps, f"rollout {record.rollout_id}")
                for step, prompt_ids in zip(record.steps, prompts, strict=True):
                    row = step_row(root, record, step, advantage, inline_images, images_seen, prompt_ids)
                    if image_column:
                        row[IMAGES_FIELD] = image_list(root, step, None if inline_images else row["messages"])
                    writer.write(row)
                    rows += 1
        finally:
            writer.close()
    stats = ExportStats(
        path=path,
        format=fmt,
        rows=rows,
        rollouts=rollouts,
        groups=len(groups),
        excluded=dict(sorted(excluded.items())),
        bytes=path.stat().st_size,
        torn_tail_bytes=torn,
        seconds=time.monotonic() - started,
    )
    log.info("exported %d steps of %d rollouts (%d groups) to %s", rows, rollouts, stats.groups, path)
    return stats


def _check_out(root: Path, path: Path) -> None:
    if path.is_dir():
        raise ConfigError(f"--out {path} is a directory; give a file name such as {path / 'train.jsonl'}")
    target = path.resolve()
    run = root.resolve()
    if target in {run / name for name in (ROLLOUTS_FILE, MANIFEST_FILE, SUMMARY_FILE)} or target.parent in {
        run / MESSAGES_DIR,
        run / IMAGES_DIR,
    }:
        raise ConfigError(f"--out {path} is a file of the run itself; give another name, e.g. {root / 'train.jsonl'}")
