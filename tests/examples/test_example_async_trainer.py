"""examples/async_trainer.py runs: groups consumed while the desktops go on, versions loaded, staleness bounded."""

from __future__ import annotations

from pathlib import Path

import async_trainer

from legato_rl.store import read_follow_log, read_records


def test_async_trainer_trains_on_groups_within_the_staleness_bound(tmp_path: Path) -> None:
    result = async_trainer.main(
        ["--updates", "3", "--desktops", "2", "--group", "2", "--batch", "2", "--update-s", "0.3",
         "--max-staleness", "1", "--out", str(tmp_path / "run")]
    )  # fmt: skip
    updates, figures = result["updates"], result["summary"]["follow"]
    assert [u["version"] for u in updates] == ["step-1", "step-2", "step-3"]
    assert all(u["samples"] > 0 and all(s <= 1 for s in u["staleness"]) for u in updates)
    assert figures["versions"] == ["step-0", "step-1", "step-2", "step-3"] and figures["staleness"]["max"] <= 1
    # the version legato stamped on each call is the server's label, or the one before it when the call was
    # asked in the instant between the trainer relabelling the server and telling legato: never another
    number = {f"step-{i}": i for i in range(4)}
    steps = [step for record in read_records(tmp_path / "run") for step in record.steps]
    assert steps and all(step.model.policy_version in number for step in steps)
    assert all(
        number[step.model.weight_version] - number[step.model.policy_version] in (0, 1)  # type: ignore[index]
        for step in steps
    )
    # a group the trainer trained on after step-1 was loaded is never older than step-0
    handed = [line for line in read_follow_log(tmp_path / "run") if line["event"] == "group"]
    assert len(handed) >= 6 and all(line["staleness"] <= 1 for line in handed if line["outcome"] == "delivered")
