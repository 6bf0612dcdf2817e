"""verl: Parquet in the layout verl's ``RLHFDataset`` reads (verl 0.9.1), from legato tasks or exports.

    # one row per task, for verl_agent_loop.py to play online
    python examples/verl_dataset.py tasks --backend fake --out data/desktop.parquet
    # one row per step of `legato rl export` output (RUN is the collect run: its images/ are read)
    legato rl export runs/step-41 --out runs/step-41/train.parquet
    python examples/verl_dataset.py export runs/step-41/train.parquet --run runs/step-41 --out data/steps.parquet

Columns (``RLHFDataset``'s defaults: ``prompt_key=prompt``, ``image_key=images``):

* ``prompt``: the chat messages, each content a string; every screenshot is an ``<image>`` placeholder
  that verl fills, in order, from ``images``;
* ``images``: ``[{"bytes": <png>}]``, one per ``<image>``;
* ``data_source``, ``ability``, ``reward_model`` (``{"style": "rule", "ground_truth": task_id}``);
* ``agent_name``: ``legato_desktop``, the agent loop ``verl_agent_loop.py`` registers;
* ``extra_info``: ``index`` and ``task_id``, plus ``task`` (the task's JSON, for the agent loop) for task
  rows, or the exported step for export rows (``rollout_id``, ``group_id``, ``step_index``,
  ``response_text``, ``response_token_ids``, ``response_logprobs``, ``reward``, ``advantage``,
  ``policy_version``), for offline use (SFT on successful steps, or reward and advantage analysis).
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from legato_gym import ConfigError, DesktopConfig, Task, load_tasks, resolve_backend
from legato_rl.store import IMAGE_SCHEME

__all__ = ["AGENT_NAME", "export_rows", "task_rows", "to_verl_messages", "write_parquet"]

#: The agent loop verl_agent_loop.py registers.
AGENT_NAME = "legato_desktop"
_DATA_URL = "data:image/png;base64,"


def task_rows(tasks: Sequence[Task], *, data_source: str = "legato") -> list[dict[str, Any]]:
    """One row per task: the instruction as the prompt, the task itself in ``extra_info.task``."""
    return [
        {
            "data_source": data_source,
            "prompt": [{"role": "user", "content": task.instruction}],
            "images": [],
            "ability": "computer-use",
            "reward_model": {"style": "rule", "ground_truth": task.task_id},
            "agent_name": AGENT_NAME,
            "extra_info": {"index": index, "task_id": task.task_id, "task": json.dumps(task.to_json())},
        }
        for index, task in enumerate(tasks)
    ]


def to_verl_messages(
    messages: Sequence[Mapping[str, Any]], run: Path | None
) -> tuple[list[dict[str, str]], list[bytes]]:
    """OpenAI chat messages as verl wants them: string contents with ``<image>`` placeholders, and the PNGs.

    Raises:
        ConfigError: an image reference whose PNG is not in ``RUN/images/`` (or no ``run`` was given).
    """
    out: list[dict[str, str]] = []
    images: list[bytes] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": str(message["role"]), "content": content})
            continue
        text = []
        for part in content or []:
            if part.get("type") == "text":
                text.append(str(part.get("text", "")))
            elif part.get("type") == "image_url":
                url = part["image_url"]["url"] if isinstance(part["image_url"], Mapping) else part["image_url"]
                images.append(_png(str(url), run))
                text.append("<image>")
        out.append({"role": str(message["role"]), "content": "".join(text)})
    return out, images


def _png(url: str, run: Path | None) -> bytes:
    if url.startswith(_DATA_URL):
        return base64.b64decode(url[len(_DATA_URL) :])
    if url.startswith(IMAGE_SCHEME):
        if run is None:
            raise ConfigError(f"{url[:40]}...: pass --run RUN (the collect run whose images/ holds the PNGs)")
        path = run / "images" / f"{url[len(IMAGE_SCHEME) :]}.png"
        if not path.is_file():
            raise ConfigError(f"{path} is missing; is {run} the run this export came from?")
        return path.read_bytes()
    raise ConfigError(f"image {url[:40]!r} is neither a PNG data URL nor a {IMAGE_SCHEME} reference")


def export_rows(export: Path, run: Path | None, *, data_source: str = "legato") -> Iterable[dict[str, Any]]:
    """One row per exported step of a ``legato rl export`` Parquet or JSONL file."""
    if export.suffix == ".parquet":
        steps: Iterable[Mapping[str, Any]] = pq.read_table(export).to_pylist()
    else:
        steps = (json.loads(line) for line in export.read_text().splitlines() if line.strip())
    for index, step in enumerate(steps):
        messages = step["messages"]
        if isinstance(messages, str):  # Parquet keeps messages as JSON text
            messages = json.loads(messages)
        prompt, images = to_verl_messages(messages, run)
        yield {
            "data_source": data_source,
            "prompt": prompt,
            "images": [{"bytes": png} for png in images],
            "ability": "computer-use",
            "reward_model": {"style": "rule", "ground_truth": step["task_id"]},
            "agent_name": AGENT_NAME,
            "extra_info": {
                "index": index,
                **{key: step.get(key) for key in _STEP_KEYS},
            },
        }


_STEP_KEYS = (
    "task_id", "rollout_id", "group_id", "step_index", "response_text", "response_token_ids", "response_logprobs",
    "reward", "advantage", "policy_version",
)  # fmt: skip


def write_parquet(rows: Iterable[dict[str, Any]], out: Path) -> int:
    """Write ``rows`` as one Parquet file; returns the row count."""
    table = pa.Table.from_pylist(list(rows))
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    return int(table.num_rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    tasks = sub.add_parser("tasks", help="one row per task (for verl_agent_loop.py)")
    tasks.add_argument("--backend", default="fake")
    tasks.add_argument("--tasks", type=Path, help="a tasks file; default: the backend's own suite")
    tasks.add_argument("--out", type=Path, required=True)
    export = sub.add_parser("export", help="one row per step of `legato rl export` output")
    export.add_argument("export", type=Path)
    export.add_argument("--run", type=Path, help="the collect run directory (for legato-image:// references)")
    export.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "tasks":
        config = DesktopConfig()
        chosen = load_tasks(args.tasks, osworld_path=config.osworld_path) if args.tasks else None
        rows = task_rows(chosen if chosen is not None else resolve_backend(args.backend).default_tasks(config))
    else:
        rows = list(export_rows(args.export, args.run))
    count = write_parquet(rows, args.out)
    print(f"{count} rows -> {args.out}")
    return count


if __name__ == "__main__":
    main()
