"""``profile_run``: read a run once, compute its profile, and write its pictures, report and ``profile.json``."""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from legato_rl.profile.figures import LATENCY_KINDS, ErrorTally, Profile, add_samples, desktop_usage, latency_stats
from legato_rl.profile.pictures import draw_latency, draw_timeline, matplotlib_figure, png
from legato_rl.profile.report import report_html
from legato_rl.profile.timeline import Timeline
from legato_rl.store import (
    RecordError,
    RolloutRecord,
    check_run_dir,
    is_being_written,
    read_manifest,
    read_records,
    storage_error,
    torn_tail_bytes,
    write_bytes_atomic,
    write_json_atomic,
)
from legato_rl.summary import read_nodes, summarize

__all__ = ["PROFILE_DIR", "profile_run"]

log = logging.getLogger(__name__)

#: Where the pictures go inside the run unless told otherwise.
PROFILE_DIR = "profile"


def profile_run(
    run_dir: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    plots: bool = True,
) -> Profile:
    """Profile a run: compute its figures, and draw its timeline, latency histograms and HTML report.

    A run that a collect is still writing is profiled as far as it got (``Profile.in_progress``).

    Args:
        run_dir: the run directory.
        out: where to write ``timeline.png``, ``latency.png``, ``report.html`` and ``profile.json``;
            ``RUN/profile/`` by default.
        plots: draw the pictures and the report (needs matplotlib); ``False`` computes the figures only
            and writes nothing.

    Raises:
        RecordError: ``run_dir`` is not a run, has no manifest, or a record is damaged.
        MissingDependencyError: ``plots`` and matplotlib is not installed (``pip install 'legatolabs[plots]'``).
        StorageError: the pictures cannot be written (a read-only run folder: give ``out``).

    Example:
        >>> from legato_rl.profile import profile_run
        >>> profile = profile_run("runs/step-41")            # doctest: +SKIP
        >>> profile.files["report"]                          # doctest: +SKIP
        PosixPath('runs/step-41/profile/report.html')
    """
    root = check_run_dir(run_dir, allow_in_progress=True)
    manifest = read_manifest(root)
    if manifest is None:
        raise RecordError(f"{root} has no run.json: it is not a legato rl collect run")
    if plots:
        matplotlib_figure()  # fail before reading a large run
    in_progress = is_being_written(root)
    torn = 0 if in_progress else torn_tail_bytes(root)
    timeline = Timeline()
    samples: dict[str, list[float]] = {kind: [] for kind in LATENCY_KINDS}
    tries: dict[int, int] = defaultdict(int)
    errors = ErrorTally()

    def tap(records: Iterator[RolloutRecord]) -> Iterator[RolloutRecord]:
        for record in records:
            timeline.add(record)
            errors.add(record)
            if record.desktop is not None and record.desktop >= 0:
                tries[int(record.desktop)] += 1
            add_samples(samples, record)
            yield record

    summary = summarize(tap(read_records(root)), group=manifest.group)
    summary = replace(summary, nodes=read_nodes(root))  # kept by collect in summary.json, not in the records
    timeline.finish()
    profile = Profile(
        run_dir=root,
        summary=summary,
        desktops=desktop_usage(timeline, tries),
        latency_s={kind: latency_stats(values) for kind, values in samples.items()},
        in_progress=in_progress,
        torn_tail_bytes=torn,
        timeline=timeline,
        errors=errors.result(),
    )
    if not plots:
        return profile
    target = Path(out) if out is not None else root / PROFILE_DIR
    again = "then run legato rl profile again (or give --out another folder)"
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(exc, target, then=again) from exc
    images = {
        "timeline": png(draw_timeline(timeline)),
        "latency": png(draw_latency(samples)),
    }
    files: dict[str, Path] = {}
    for name, data in images.items():
        files[name] = target / f"{name}.png"
        write_bytes_atomic(files[name], data, then=again)
    files["report"] = target / "report.html"
    files["json"] = target / "profile.json"
    profile = replace(profile, files=files)
    write_bytes_atomic(files["report"], report_html(profile, images).encode("utf-8"), then=again)
    write_json_atomic(files["json"], profile.to_json(), then=again)
    log.info("profile of %s written to %s", root, target)
    return profile
