"""Shared fixtures: where the real OSWorld task data lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def find_osworld() -> Path | None:
    """``$LEGATO_OSWORLD``, else ``../shared/osworld`` beside the project; ``None`` when neither has tasks."""
    candidates = [os.environ.get("LEGATO_OSWORLD"), str(ROOT.parent / "shared" / "osworld")]
    for value in candidates:
        if value and (Path(value) / "evaluation_examples" / "examples").is_dir():
            return Path(value)
    return None


@pytest.fixture(scope="session")
def osworld_path() -> Path:
    """The OSWorld checkout holding ``evaluation_examples/``; skips the test when there is none."""
    path = find_osworld()
    if path is None:
        pytest.skip(
            "OSWorld task data not found: set LEGATO_OSWORLD to a checkout holding evaluation_examples/ "
            "(CI uses ../shared/osworld beside the project)"
        )
    return path
