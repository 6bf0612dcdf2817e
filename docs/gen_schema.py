"""Write the JSON Schema of a ``legato.rollout/v0`` record as docs/schema/legato.rollout-v0.json.

    python docs/gen_schema.py

The schema is built from the record classes (``legato_rl.store.json_schema``): the same text that
``legato rl schema`` prints. tests/rl/test_schema.py fails when the file is stale.
"""

from __future__ import annotations

from pathlib import Path

from legato_rl.store.json_schema import render_record_json_schema

PAGE = Path(__file__).resolve().parent / "schema" / "legato.rollout-v0.json"


def main() -> None:
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(render_record_json_schema())
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
