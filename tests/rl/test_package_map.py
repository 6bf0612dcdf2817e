"""docs/concepts.md's map of the packages matches the files."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _map_entries() -> tuple[set[Path], set[Path]]:
    """The files and the folders the map names, as paths from the project root."""
    text = (ROOT / "docs" / "concepts.md").read_text()
    block = text.split("## The packages", 1)[1].split("```", 2)[1]
    files: set[Path] = set()
    folders: set[Path] = set()
    stack: list[tuple[int, Path]] = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        names = line.strip().split("  ")[0].split()  # the names, then two spaces and what they are
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else Path()
        for name in re.findall(r"[\w.]+/|[\w.]+\.py", " ".join(names)):
            if name.endswith("/"):
                folder = parent / name.rstrip("/")
                folders.add(folder)
                stack.append((indent, folder))
            else:
                files.add(parent / name)
    return files, folders


def test_every_file_named_exists_where_the_map_shows_it() -> None:
    files, folders = _map_entries()
    assert files and folders
    missing = sorted(str(p) for p in files | folders if not (ROOT / p).exists())
    assert not missing, f"docs/concepts.md names files that do not exist: {missing}"


def test_every_package_is_on_the_map() -> None:
    _, folders = _map_entries()
    packages = {
        path.parent.relative_to(ROOT)
        for top in ("legato_gym", "legato_rl")
        for path in (ROOT / top).rglob("__init__.py")
    }
    assert not sorted(map(str, packages - folders)), "packages missing from docs/concepts.md's map"


def test_the_layers_drawn_are_those_checked_and_those_the_code_has() -> None:
    """docs/concepts.md's layer block is what docs/gen_layers.py draws from pyproject.toml and the imports."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "gen_layers.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
