"""``legato rl probe``: check that a policy server returns what training needs, and how to fix it if not.

::

    export LEGATO_POLICY_KEY=...     # if the server has a key; never a command-line option
    legato rl probe --policy-url http://host:8000/v1 --model Qwen/Qwen3-VL-8B-Instruct [--json]

One table of checks per replica (the checks are :mod:`legato_rl.probe`'s). Exit 1 when a check that
training depends on fails (unreachable, model not served, no chat, no logprobs); missing token ids or cache
reporting are warnings (legato falls back), exit 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from legato_gym.errors import LegatoError
from legato_rl.cli._errors import fail
from legato_rl.cli._logging import configure_logging
from legato_rl.probe import PROBE_TIMEOUT, Check, run_probe

__all__ = ["app", "probe_command"]

app = typer.Typer()


_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "info": "cyan", "skip": "dim"}


def _table(checks: Sequence[Check], model: str) -> Table:
    several = len({c.replica for c in checks}) > 1
    table = Table(title=f"legato rl probe: {model}", show_lines=False)
    if several:
        table.add_column("replica")
    for column in ("check", "status", "detail", "fix"):
        table.add_column(column, overflow="fold")
    for c in checks:
        # server text and fixes are shown as written: "[...]" in them is not markup
        fix = escape(c.fix or "") if c.status != "ok" else ""
        row = [escape(c.name), f"[{_STYLE[c.status]}]{c.status}[/]", escape(c.detail), fix]
        table.add_row(*([escape(c.replica or "")] if several else []), *row)
    return table


@app.command("probe")
def probe_command(
    policy_url: Annotated[
        list[str], typer.Option("--policy-url", help="The server's /v1 base URL; repeat for replicas.")
    ],
    model: Annotated[str, typer.Option("--model", help="The served model name.")],
    json_output: Annotated[bool, typer.Option("--json", help="Print the checks as JSON, for scripts.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds allowed per request.", min=0.1)] = PROBE_TIMEOUT,
) -> None:
    """Check a policy server: logprobs, token ids, cached-token reporting. The key comes from $LEGATO_POLICY_KEY."""
    configure_logging(logging.ERROR)  # the table reports what the client would log
    try:
        checks = asyncio.run(run_probe(policy_url, model, timeout=timeout))
    except (LegatoError, OSError) as exc:  # e.g. a URL that is not http(s): one line, no traceback
        fail(Console(stderr=True), exc)
    failed = [c for c in checks if c.status == "fail"]
    code = 1 if failed else 0
    if json_output:
        payload = {
            "model": model,
            "urls": list(policy_url),
            "ok": not failed,
            "exit_code": code,
            "checks": [asdict(c) for c in checks],
        }
        typer.echo(json.dumps(payload, indent=2))
    else:
        console = Console()
        console.print(_table(checks, model))
        warned = sum(c.status == "warn" for c in checks)
        if failed:
            console.print(f"[bold red]{len(failed)} check(s) failed: training cannot use this server as it is.[/]")
        elif warned:
            console.print(f"[yellow]Usable for training; {warned} warning(s): see the fixes above.[/]")
        else:
            console.print("[green]Ready for training.[/]")
    raise typer.Exit(code)
