"""``legato osworld setup|check|cache|coverage``: desktop-env's interpreter, OSWorld's files, local coverage.

::

    legato osworld setup [--venv DIR] [--force] [--python PY] [--index-url URL]
    legato osworld check [--venv DIR] [--json]
    legato osworld cache [--tasks FILE] [--osworld DIR] [--dir DIR] [--timeout S] [--connect-timeout S]
    legato osworld coverage [--tasks FILE] [--osworld DIR] [--file-cache DIR] [--grader auto|osworld|local] [--list]

``cache`` downloads every file the tasks need (setup downloads, ``cloud_file`` gold files) into the
persistent file cache (default ``$LEGATO_FILE_CACHE`` or ``~/.cache/legato/files``) and lists each URL it
could not get, with the reason; exit 1 when any is missing. ``coverage`` prints, per domain, how many
tasks this machine's local desktop runs now, how many it runs once the file cache holds their files
(listing them), and why it refuses the rest. Both default to every task of the OSWorld checkout
(``--osworld`` or ``$LEGATO_OSWORLD``, its ``evaluation_examples/test_all.json``).

``setup`` builds a virtual environment (default ``~/.cache/legato/osworld-venv``, or ``$LEGATO_OSWORLD_VENV``)
with desktop-env 1.0.2 and what its setup controller, docker provider, getters and metrics import, but
not torch, transformers, easyocr or librosa; it records the interpreter, which the ``osworld`` backend
then uses as ``DesktopConfig.worker_python``. ``check`` imports desktop-env's controllers, getters and metrics
there and lists what is unavailable. Exit 1 when something that grading needs does not import.
"""

from __future__ import annotations

import json
import urllib.error
from collections import Counter, defaultdict
from pathlib import Path
from typing import Annotated
from urllib.parse import urlparse

import typer
from rich.console import Console
from rich.markup import escape

from legato_gym.backends.local.coverage import Capabilities, Verdict, assess, task_needs
from legato_gym.backends.local.file_cache import (
    FETCH_CONNECT_TIMEOUT,
    FETCH_TIMEOUT,
    FILE_CACHE_ENV_VAR,
    FileCache,
    default_file_cache_dir,
)
from legato_gym.backends.local.options import GRADERS, LocalOptions
from legato_gym.config import OSWORLD_ENV_VAR, default_osworld_path
from legato_gym.contract import Task
from legato_gym.desktopenv.venv import LEFT_OUT, check_venv, default_venv, recorded_python, setup_venv
from legato_gym.errors import LegatoError, SetupError, TaskFileError
from legato_gym.tasks import load_tasks
from legato_rl.cli._errors import fail

__all__ = ["app", "cache_command", "check_command", "coverage_command", "setup_command"]

app = typer.Typer(
    name="osworld",
    help="desktop-env's interpreter for the osworld backend; OSWorld's file cache and local coverage.",
    no_args_is_help=True,
)

_VENV_HELP = "The virtual environment (default: $LEGATO_OSWORLD_VENV or ~/.cache/legato/osworld-venv)."


@app.command("setup")
def setup_command(
    venv: Annotated[Path | None, typer.Option("--venv", help=_VENV_HELP)] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild from scratch.")] = False,
    python: Annotated[
        str | None, typer.Option("--python", help="Base interpreter to build it from (Python 3.10-3.12).")
    ] = None,
    index_url: Annotated[str | None, typer.Option("--index-url", help="pip --index-url for the installs.")] = None,
) -> None:
    """Create desktop-env's virtual environment (desktop-env 1.0.2 without torch) and record its python."""
    console = Console(stderr=True)
    pip_args = ["--index-url", index_url] if index_url else []
    try:
        result = setup_venv(
            venv, base_python=python, force=force, pip_args=pip_args, log=lambda line: console.print(escape(line))
        )
        report = check_venv(result.venv)
    except (LegatoError, OSError) as exc:
        fail(console, exc, code=1)
    how = "reused" if result.reused else f"built in {result.seconds:.0f} s"
    console.print(
        escape(f"desktop-env {report.versions.get('desktop-env')} environment {how}: {result.venv}"), soft_wrap=True
    )
    console.print(escape(f"left out: {', '.join(sorted(LEFT_OUT))}"))
    typer.echo(str(result.python))
    if not report.ok:
        for module, error in report.failed.items():
            console.print(f"[red]does not import:[/red] {escape(f'{module}: {error}')}")
        raise typer.Exit(1)


@app.command("check")
def check_command(
    venv: Annotated[Path | None, typer.Option("--venv", help=_VENV_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Import desktop-env's controllers, getters and metrics in its interpreter; list what is unavailable."""
    console = Console()
    try:
        report = check_venv(venv or default_venv())
    except (LegatoError, OSError) as exc:
        fail(Console(stderr=True), exc, code=1)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        console.print(escape(f"python: {report.python}"))
        console.print(escape("versions: " + ", ".join(f"{k} {v}" for k, v in report.versions.items())))
        for module in report.imported:
            console.print(f"[green]ok[/green]   {escape(module)}")
        for module, error in report.failed.items():
            console.print(f"[red]FAIL[/red] {escape(f'{module}: {error}')}")
        console.print(f"{report.getters} getters, {report.metrics} metrics")
        if report.stubbed:
            console.print(escape(f"absent optional libraries: {', '.join(report.stubbed)}"))
        for metric, missing in report.unavailable_metrics.items():
            needs = ", ".join(missing)
            console.print(f"[yellow]unavailable[/yellow] {escape(f'metric {metric}: needs {needs}')}")
    if not report.ok:
        raise typer.Exit(1)


_TASKS_HELP = "Tasks file (default: every task of the OSWorld checkout, evaluation_examples/test_all.json)."
_OSWORLD_HELP = f"OSWorld checkout holding evaluation_examples/ (default: ${OSWORLD_ENV_VAR})."
_CACHE_HELP = f"The file cache (default: ${FILE_CACHE_ENV_VAR} or ~/.cache/legato/files)."


def _load(tasks: Path | None, osworld: Path | None) -> list[Task]:
    root = osworld.expanduser() if osworld is not None else default_osworld_path()
    if tasks is None:
        if root is None:
            raise TaskFileError(f"give --tasks FILE, or an OSWorld checkout with --osworld DIR or ${OSWORLD_ENV_VAR}")
        tasks = root / "evaluation_examples" / "test_all.json"
    return load_tasks(tasks, osworld_path=root)


@app.command("cache")
def cache_command(
    tasks: Annotated[Path | None, typer.Option("--tasks", help=_TASKS_HELP)] = None,
    osworld: Annotated[Path | None, typer.Option("--osworld", help=_OSWORLD_HELP)] = None,
    cache_dir: Annotated[Path | None, typer.Option("--dir", help=_CACHE_HELP)] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds allowed per file.")] = FETCH_TIMEOUT,
    connect_timeout: Annotated[
        float, typer.Option("--connect-timeout", help="Seconds to connect (and per stalled read).")
    ] = FETCH_CONNECT_TIMEOUT,
) -> None:
    """Download every file the tasks need into the file cache; list what is missing (exit 1 if any)."""
    console = Console()
    try:
        task_list = _load(tasks, osworld)
    except (LegatoError, OSError) as exc:
        fail(Console(stderr=True), exc)
    cache = FileCache(cache_dir if cache_dir is not None else default_file_cache_dir())
    urls = list(dict.fromkeys(url for task in task_list for url in task_needs(task.config).urls))
    had = fetched = 0
    missing: list[tuple[str, str]] = []
    unreachable: dict[str, str] = {}  # host -> why: later URLs of a dead host are not tried again
    for url in urls:
        if url in cache:
            had += 1
            continue
        host = urlparse(url).netloc
        if host and host in unreachable:
            missing.append((url, unreachable[host]))
            continue
        try:
            cache.fetch(url, timeout=timeout, connect_timeout=connect_timeout)
        except SetupError as exc:
            if host and not isinstance(exc.__cause__, urllib.error.HTTPError) and exc.__cause__ is not None:
                unreachable[host] = f"host {host} unreachable ({getattr(exc.__cause__, 'reason', exc.__cause__)})"
                missing.append((url, unreachable[host]))
            else:
                missing.append((url, str(exc)))
            continue
        except OSError as exc:
            fail(Console(stderr=True), exc)
        fetched += 1
    for url, why in missing:
        console.print(f"[red]missing[/red] {escape(url)}: {escape(why)}", soft_wrap=True)
    console.print(
        escape(f"{len(urls)} files for {len(task_list)} tasks in {cache.root}: {had} already cached, "
               f"{fetched} downloaded, {len(missing)} missing"),
        soft_wrap=True,
    )  # fmt: skip
    if missing:
        console.print(
            "Fill the cache on a machine that reaches these hosts (`legato osworld cache --dir DIR`) and copy DIR "
            f"here (--file-cache DIR or ${FILE_CACHE_ENV_VAR}).",
            soft_wrap=True,
        )
        raise typer.Exit(1)


@app.command("coverage")
def coverage_command(
    tasks: Annotated[Path | None, typer.Option("--tasks", help=_TASKS_HELP)] = None,
    osworld: Annotated[Path | None, typer.Option("--osworld", help=_OSWORLD_HELP)] = None,
    file_cache: Annotated[Path | None, typer.Option("--file-cache", metavar="DIR", help=_CACHE_HELP)] = None,
    grader: Annotated[
        str,
        typer.Option(
            "--grader",
            help="The local backend's grader: osworld (desktop-env), local (built in), or auto: osworld where "
            "desktop-env's interpreter is set up (`legato osworld setup`), as `legato rl collect` grades.",
        ),
    ] = LocalOptions.grader,
    show_all: Annotated[bool, typer.Option("--list", help="Also list every refused task with its reasons.")] = False,
) -> None:
    """Per domain: how many tasks this machine's local desktop runs now, once files are cached, or refuses (why)."""
    console = Console()
    if grader not in GRADERS:
        fail(Console(stderr=True), f"--grader {grader!r}: choose one of {', '.join(GRADERS)}")
    if grader == "auto":
        grader = "osworld" if recorded_python() is not None else "local"
    try:
        task_list = _load(tasks, osworld)
    except (LegatoError, OSError) as exc:
        fail(Console(stderr=True), exc)
    cache = FileCache(file_cache if file_cache is not None else default_file_cache_dir())
    caps = Capabilities.detect(grader=grader, cache=cache)
    verdicts = [assess(task.config, caps, domain=task.domain) for task in task_list]
    _print_coverage(console, verdicts, caps, cache, show_all=show_all)


def _name(verdict: Verdict) -> str:
    return f"{verdict.domain}/{verdict.task_id}" if verdict.domain else verdict.task_id


def _print_coverage(
    console: Console, verdicts: list[Verdict], caps: Capabilities, cache: FileCache, *, show_all: bool
) -> None:
    by_domain: dict[str, Counter[str]] = defaultdict(Counter)
    for verdict in verdicts:
        by_domain[verdict.domain or "(none)"][verdict.status] += 1
    console.print(
        escape(f"local desktop coverage: {len(verdicts)} tasks, {caps.grader} grader, file cache {cache.root}"),
        soft_wrap=True,
    )
    console.print(f"{'domain':<22}{'tasks':>6}{'runnable':>10}{'needs files':>13}{'refused':>9}")
    total: Counter[str] = Counter()
    for domain in sorted(by_domain):
        counts = by_domain[domain]
        total.update(counts)
        console.print(
            escape(f"{domain:<22}{sum(counts.values()):>6}{counts['runnable']:>10}{counts['needs_files']:>13}"
                   f"{counts['refused']:>9}")
        )  # fmt: skip
    console.print(
        f"{'total':<22}{len(verdicts):>6}{total['runnable']:>10}{total['needs_files']:>13}{total['refused']:>9}"
    )
    needing = [v for v in verdicts if v.status == "needs_files"]
    if needing:
        console.print(
            escape("\nrunnable once the file cache holds these files (`legato osworld cache` fetches them):"),
            soft_wrap=True,
        )
        for verdict in needing:
            console.print(escape(f"  {_name(verdict)}: {', '.join(verdict.missing_urls)}"),
                          soft_wrap=True)  # fmt: skip
    reasons: Counter[str] = Counter(reason for v in verdicts for reason in v.reasons)
    if reasons:
        console.print("\nrefused, by reason (a task may have several):")
        for reason, count in reasons.most_common():
            console.print(escape(f"  {count:>4}  {reason}"), soft_wrap=True)
    if show_all:
        for verdict in verdicts:
            if verdict.status == "refused":
                console.print(escape(f"  refused {_name(verdict)}: {verdict.reason}"),
                              soft_wrap=True)  # fmt: skip
