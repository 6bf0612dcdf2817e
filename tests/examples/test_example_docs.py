"""The docs stay true: the CLI reference matches the typer app, and the backend how-to's code passes."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_cli_reference_is_generated_from_the_current_typer_app() -> None:
    sys.path.insert(0, str(DOCS))
    try:
        gen_cli = importlib.import_module("gen_cli")
    finally:
        sys.path.remove(str(DOCS))
    assert (DOCS / "cli.md").read_text() == gen_cli.render(), "docs/cli.md is stale: run python docs/gen_cli.py"


def test_the_backend_in_backends_md_passes_the_conformance_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gymnasium as gym

    import legato_gym  # noqa: F401  (registers the legato/ ids)

    module, check = re.findall(r"```python\n(.*?)```", (DOCS / "backends.md").read_text(), re.S)[:2]
    (tmp_path / "mydesk.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the vector env's workers import it too
    namespace: dict[str, object] = {}
    exec(check, namespace)  # runs check_desktop; raises ConformanceError listing any failure
    assert isinstance(namespace["passed"], list) and len(namespace["passed"]) > 10
    # the how-to's backend has the seven calls only: its screen size is its first observation's (issue 30)
    assert "screen_size" not in module
    assert "episode 1: observe() gives the screen's size (no screen_size)" in namespace["passed"]
    env = gym.make("legato/FakeDesktop-v0", backend="mydesk:BACKEND")
    env.reset(seed=0)
    assert env.step("DONE")[1:3] == (1.0, True)
    env.close()
    envs = gym.make_vec("legato/FakeDesktop-v0", num_envs=2, backend="mydesk:BACKEND")
    try:
        _, info = envs.reset(seed=0)
        assert list(info["task_id"]) == ["blank-done", "blank-done"]
    finally:
        envs.close()


def test_readme_links_every_doc_page() -> None:
    readme = (DOCS.parent / "README.md").read_text()
    for page in ("quickstart", "concepts", "backends", "trainers", "cli", "troubleshooting"):
        assert f"docs/{page}.md" in readme
        assert (DOCS / f"{page}.md").is_file()
