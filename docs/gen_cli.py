"""Render ``legato --help``, recursively, as docs/cli.md.

    python docs/gen_cli.py            # rewrite docs/cli.md
    python docs/gen_cli.py --check    # exit 1 when docs/cli.md is stale

Reads the typer app itself (its click commands, options, defaults and help), so the page is exactly what
the installed CLI accepts. tests/examples/test_example_docs.py fails when the page is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import typer.main

from legato_rl.cli.app import app

PAGE = Path(__file__).resolve().parent / "cli.md"
HEADER = (
    "# CLI reference\n\n"
    "Generated from the typer app by `python docs/gen_cli.py`; do not edit by hand "
    "(a test fails when this page is stale).\n"
)


def render() -> str:
    """The whole reference page."""
    root = typer.main.get_command(app)
    parts = [HEADER]
    _walk(root, ["legato"], root.context_class(root, info_name="legato"), parts)
    return "\n".join(parts).rstrip() + "\n"


# typer vendors its own click, so commands and parameters are read by their attributes, not their classes.
def _walk(command: Any, path: list[str], ctx: Any, parts: list[str]) -> None:
    level = "#" * min(len(path) + 1, 4)
    parts.append(f"{level} `{' '.join(path)}`\n")
    if command.help:
        parts.append(_clean(command.help) + "\n")
    pieces = " ".join(command.collect_usage_pieces(ctx))
    parts.append(f"```\n{' '.join(path)} {pieces}\n```\n")
    rows = [_param_row(p, ctx) for p in command.params if not getattr(p, "hidden", False)]
    rows = [r for r in rows if r]
    if rows:
        parts.append("| argument | default | help |\n|---|---|---|")
        parts.extend(rows)
        parts.append("")
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            _walk(sub, [*path, name], sub.context_class(sub, info_name=name, parent=ctx), parts)


def _param_row(param: Any, ctx: Any) -> str:
    if param.param_type_name == "option":
        names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        kind = "" if param.is_flag else f" `{_type_name(param, ctx)}`"
        if param.multiple:
            kind += " (repeatable)"
        if param.required:
            kind += " **required**"
        default = "" if param.default is None or param.required or callable(param.default) else f"`{param.default}`"
        help_text = _clean(param.help or "")
        return f"| {names}{kind} | {default} | {help_text} |"
    if param.param_type_name == "argument":
        name = str(param.metavar or param.name or "").upper()
        required = " **required**" if param.required else ""
        return f"| `{name}`{required} | | {_clean(getattr(param, 'help', '') or '')} |"
    return ""


def _type_name(param: Any, ctx: Any) -> str:
    if callable(getattr(param, "display_type", None)):
        return str(param.display_type(ctx)).strip("<>")
    return str(param.type.name)


def _clean(text: str) -> str:
    # help texts escape "[" from rich's markup as "\\[" (tests/rl/test_cli_help.py); the page shows "["
    return " ".join(text.replace("\\[", "[").split()).replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render docs/cli.md from the typer app.")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale instead of writing it")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != page:
            print(f"{PAGE} is stale: run python docs/gen_cli.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
