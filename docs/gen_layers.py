"""Draw legato_gym's import layers, as checked and as they are, into docs/concepts.md.

The layers are those of the ``gym-layers`` contract in pyproject.toml (``lint-imports`` checks them); beside
each layer this draws which lower layers its modules really import, read from the code by grimp (the graph
import-linter builds). tests/rl/test_package_map.py checks that the page shows what this script draws.

Usage:
    python docs/gen_layers.py          # rewrite the block in docs/concepts.md
    python docs/gen_layers.py --check  # exit 1 when the block differs
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "concepts.md"
BEGIN = "<!-- layers: drawn by docs/gen_layers.py from pyproject.toml and the code; do not edit -->"
END = "<!-- /layers -->"


def _contract(contract_id: str) -> dict[str, object]:
    try:
        import tomllib
    except ImportError:  # Python 3.10: import-linter brings tomli
        import tomli as tomllib  # type: ignore[no-redef]

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["id"] == contract_id:
            return dict(contract)
    raise SystemExit(f"pyproject.toml has no import-linter contract {contract_id!r}")


def draw() -> str:
    """The block: each layer of legato_gym, top to bottom, and the lower layers it imports."""
    sys.path.insert(0, str(ROOT))  # this checkout's packages, not an installed copy
    import grimp

    graph = grimp.build_graph("legato_gym")
    (container,) = _contract("gym-layers")["containers"]  # type: ignore[misc]
    layers = [[name.strip() for name in layer.split("|")] for layer in _contract("gym-layers")["layers"]]  # type: ignore[union-attr]
    layer_of = {name: i for i, layer in enumerate(layers) for name in layer}

    def imports(name: str) -> set[str]:
        package = f"{container}.{name}"
        modules = {package} | (graph.find_descendants(package) if package in graph.modules else set())
        found: set[str] = set()
        for module in modules:
            for target in graph.find_modules_directly_imported_by(module):
                parts = target.split(".")
                if parts[0] == container and len(parts) > 1 and parts[1] in layer_of and parts[1] != name:
                    found.add(parts[1])
        return found

    width = max(len(" | ".join(layer)) for layer in layers) + 2
    lines = ["legato_gym, top to bottom; each layer imports only layers below it (a | b: siblings, independent)", ""]
    for i, layer in enumerate(layers):
        used = set().union(*(imports(name) for name in layer))
        below = [name for lower in layers[i + 1 :] for name in lower if name in used]
        lines.append(f"  {' | '.join(layer):<{width}}-> {' '.join(below) if below else '(nothing of legato_gym)'}")
    return "\n".join(lines)


def render(page: str) -> str:
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n```\n{draw()}\n```\n{END}{tail}"


def main() -> int:
    page = PAGE.read_text()
    drawn = render(page)
    if "--check" in sys.argv[1:]:
        if drawn != page:
            print("docs/concepts.md's layers differ from the code: run python docs/gen_layers.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(drawn)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
