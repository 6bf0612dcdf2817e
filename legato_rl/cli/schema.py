"""``legato rl schema``: the JSON Schema of a ``legato.rollout/v0`` record, for trainers in any language."""

from __future__ import annotations

import typer

__all__ = ["app", "schema_command"]

app = typer.Typer()


@app.command("schema")
def schema_command() -> None:
    """Print the JSON Schema (draft 2020-12) that every line of a run's rollouts.jsonl validates against.

    The same schema is published as docs/schema/legato.rollout-v0.json.
    """
    from legato_rl.store.json_schema import render_record_json_schema  # pydantic loads only for this command

    typer.echo(render_record_json_schema(), nl=False)
