"""``legato rl collect``: collect one batch of graded rollouts."""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from legato_gym import Backend, ConfigError, DesktopConfig, LegatoError, Task, backend_names, resolve_backend
from legato_gym.backends.local import LocalOptions
from legato_gym.config import default_osworld_path
from legato_gym.tasks import load_tasks
from legato_rl.cli._errors import EXIT_NOTHING_COMPLETED, fail
from legato_rl.cli._follow import check_follow_options, run_follow
from legato_rl.cli._logging import configure_logging
from legato_rl.collect import CollectOptions, Progress, collect
from legato_rl.follow import Follower, FollowOptions
from legato_rl.groups import Status
from legato_rl.policy import Limits, PolicyConfig, Sampling
from legato_rl.store import COMPLETED_STATUSES, write_json_atomic

log = logging.getLogger(__name__)

#: The defaults of the flags that a backend's unit declares (``Backend.cli_options``): a backend that does not
#: declare one refuses any other value.
BACKEND_FLAG_DEFAULTS: dict[str, Any] = {
    "--grader": LocalOptions.grader,
    "--prestart": LocalOptions.prestart,
    "--pyautogui-pause": LocalOptions.pyautogui_pause,
    "--file-cache": None,
    "--session": LocalOptions.session,
    "--provider": None,
}

#: ``--policy-url embedded`` starts legato's reference policy server on loopback (scripted solver).
EMBEDDED = "embedded"
app = typer.Typer()


@app.command("collect")
def collect_command(
    out: Annotated[Path, typer.Option("--out", help="Run directory; run again with the same arguments to resume.")],
    policy_url: Annotated[
        list[str],
        typer.Option(
            "--policy-url",
            help="OpenAI-compatible base URL (…/v1); repeat for replicas. 'embedded' starts legato's "
            "reference policy server on loopback.",
        ),
    ],
    tasks: Annotated[
        Path | None,
        typer.Option(
            "--tasks",
            help="Tasks file: [{task_id, domain}] or [{task_id, config}]. Default: the backend's own task suite.",
        ),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="Served model name.")] = None,
    version: Annotated[str | None, typer.Option("--version", help="Policy version stamped on every record.")] = None,
    backend: Annotated[
        str, typer.Option("--backend", help="osworld, local, fake, or package.module:Class.")
    ] = CollectOptions.backend,
    osworld: Annotated[
        Path | None, typer.Option("--osworld", help="OSWorld checkout (holds evaluation_examples/).")
    ] = None,
    # Every default below is read from the value that owns the setting (CollectOptions, Limits, Sampling,
    # DesktopConfig): tests/rl/test_cli_defaults.py fails when one is written here instead.
    desktops: Annotated[int, typer.Option("--desktops", help="Desktops run at once.")] = CollectOptions.desktops,
    group: Annotated[int, typer.Option("--group", help="Attempts per task: one GRPO group.")] = CollectOptions.group,
    oversample: Annotated[
        float, typer.Option("--oversample", help="Extra attempts per group, as a fraction of --group.")
    ] = CollectOptions.oversample,
    max_steps: Annotated[int, typer.Option("--max-steps", help="Policy calls per attempt.")] = CollectOptions.max_steps,
    max_inflight: Annotated[
        int | None, typer.Option("--max-inflight", help="Cap on concurrent model requests across desktops.")
    ] = Limits.max_inflight,
    step_timeout: Annotated[
        float, typer.Option("--step-timeout", help="Seconds per model call.")
    ] = Limits.step_timeout,
    retries: Annotated[int, typer.Option("--retries", help="Retries of a failed model call.")] = Limits.retries,
    rollout_timeout: Annotated[
        float | None, typer.Option("--rollout-timeout", help="Wall-clock cap per attempt (graded, 'truncated').")
    ] = CollectOptions.rollout_timeout,
    env_retries: Annotated[
        int, typer.Option("--env-retries", help="Re-queues of an attempt after a desktop failure.")
    ] = CollectOptions.env_retries,
    ready_signal: Annotated[
        bool, typer.Option("--ready-signal/--no-ready-signal", help="Wait on ready signals, not fixed sleeps.")
    ] = DesktopConfig.ready_signal,
    fixed_wait: Annotated[
        float,
        typer.Option("--fixed-wait", help="With --no-ready-signal only: seconds slept after each action."),
    ] = DesktopConfig.fixed_wait,
    fast_reset: Annotated[
        bool, typer.Option("--fast-reset/--no-fast-reset", help="Reset in place; off: full revert every rollout.")
    ] = DesktopConfig.fast_reset,
    image_max: Annotated[
        int, typer.Option("--image-max", help="Screenshots kept in the prompt.")
    ] = CollectOptions.image_max,
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature.")] = Sampling.temperature,
    top_p: Annotated[float, typer.Option("--top-p", help="Nucleus sampling.")] = Sampling.top_p,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Generated tokens per call.")] = Sampling.max_tokens,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the desktops.")] = CollectOptions.seed,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Run the desktops on this Ray cluster ('auto', HEAD:6379 or ray://HEAD:10001); needs the ray extra.",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No live display; log lines only.")] = False,
    file_cache: Annotated[
        Path | None,
        typer.Option(
            "--file-cache",
            metavar="DIR",
            help="--backend local (and osworld's local stand-ins): the cache of OSWorld's task files by URL "
            "(LocalOptions.file_cache; fill it: legato osworld cache).",
        ),
    ] = None,
    grader: Annotated[
        str,
        typer.Option(
            "--grader",
            help="--backend local: osworld (desktop-env's getters and metrics, in its interpreter from "
            "`legato osworld setup`), local (built in), or auto: osworld when that interpreter exists.",
        ),
    ] = LocalOptions.grader,
    prestart: Annotated[
        bool,
        typer.Option(
            "--prestart/--no-prestart",
            help="--backend local: build each desktop's next episode in the background while the agent works "
            "(a second desktop's memory per desktop).",
        ),
    ] = LocalOptions.prestart,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Continuous collection for asynchronous RL: the tasks cycled (or drawn) without end, each group "
            "handed over in OUT/follow.jsonl as it completes, versions read from --control. See docs/async.md.",
        ),
    ] = False,
    control: Annotated[
        Path | None,
        typer.Option(
            "--control",
            metavar="FILE",
            help='--follow: the trainer\'s file, replaced atomically: {"version": "step-42", "taken": 17} (the '
            "version loaded; the groups consumed), or a line holding the version alone.",
        ),
    ] = None,
    order: Annotated[
        str, typer.Option("--order", help="--follow: cycle the tasks in order, or draw them (seeded by --seed).")
    ] = FollowOptions.order,
    max_ready: Annotated[
        int,
        typer.Option("--max-ready", help="--follow: completed groups that may wait for the trainer (backpressure)."),
    ] = FollowOptions.max_ready,
    max_staleness: Annotated[
        int | None,
        typer.Option("--max-staleness", help="--follow: versions a group's oldest step may lag when handed over."),
    ] = FollowOptions.max_staleness,
    stale: Annotated[
        str,
        typer.Option("--stale", help="--follow: a group past --max-staleness is re-run (rerun), or marked (deliver)."),
    ] = FollowOptions.stale,
    partial: Annotated[
        str,
        typer.Option(
            "--partial",
            help="--follow: an attempt in flight at a version change continues, or restarts from its reset.",
        ),
    ] = FollowOptions.partial,
    reset_ahead: Annotated[
        bool,
        typer.Option(
            "--reset-ahead/--no-reset-ahead",
            help="--follow: a desktop with nothing it may start (the trainer's queue full) resets an attempt ahead "
            "and holds it before its first policy call until its turn; --no-reset-ahead: it waits unreset.",
        ),
    ] = FollowOptions.reset_ahead,
    max_groups: Annotated[
        int | None, typer.Option("--max-groups", help="--follow: stop after handing over this many groups.")
    ] = None,
    pyautogui_pause: Annotated[
        float | None,
        typer.Option(
            "--pyautogui-pause",
            metavar="SECONDS",
            help="--backend local: pyautogui.PAUSE for actions (default: pyautogui's own 0.1 s after every "
            "call, as OSWorld runs them; 0 is faster but unlike OSWorld's VM).",
        ),
    ] = LocalOptions.pyautogui_pause,
    session: Annotated[
        str,
        typer.Option(
            "--session",
            help="--backend local: the desktops' session: lookalike (the default: openbox with a top bar and a dock "
            "drawn as on OSWorld's VM, maximized windows right of the dock), gnome (GNOME Shell itself with the Ubuntu "
            "dock; 2-3x the memory) or openbox (the lightest: a window manager alone on a black root, maximized "
            "windows fill the screen).",
        ),
    ] = LocalOptions.session,
    provider: Annotated[
        str | None,
        typer.Option(
            "--provider",
            help="--backend osworld: the VM provider: docker (default), aws, azure, gcp, vmware, virtualbox, aliyun, "
            "volcengine (desktop-env's own provider classes), local, or package.module:Class (desktop-env's "
            "Provider interface). Region, image and credentials come from the environment (docs/osworld.md).",
        ),
    ] = None,
) -> None:
    """Collect one batch: every task × (group + oversample) attempts, graded, in legato.rollout/v0.

    With --follow: collect without end for an asynchronous trainer (docs/async.md)."""
    console = Console(stderr=True)
    configure_logging(logging.INFO, console)
    try:
        check_follow_options(
            follow, **{"--control": control, "--max-groups": max_groups, "--max-staleness": max_staleness,
                       "--order": order != FollowOptions.order, "--max-ready": max_ready != FollowOptions.max_ready,
                       "--stale": stale != FollowOptions.stale, "--partial": partial != FollowOptions.partial,
                       "--no-reset-ahead": reset_ahead != FollowOptions.reset_ahead}
        )  # fmt: skip
        config = DesktopConfig(
            ready_signal=ready_signal,
            fixed_wait=fixed_wait,
            fast_reset=fast_reset,
            osworld_path=osworld.expanduser() if osworld is not None else default_osworld_path(),
        )
        resolved = resolve_backend(backend)  # once, here; collect() gets the resolved backend
        flags = {"--grader": grader, "--prestart": prestart, "--pyautogui-pause": pyautogui_pause,
                 "--file-cache": file_cache, "--session": session, "--provider": provider}  # fmt: skip
        try:  # the backend's own flags, as its unit declares them
            config = resolved.with_cli(config, flags, BACKEND_FLAG_DEFAULTS)
        except ConfigError as exc:
            raise typer.BadParameter(str(exc)) from exc
        finished = resolved.finish(config)  # once: typed options, the workers' interpreter
        task_list: list[Task]
        if tasks is not None:
            task_list = load_tasks(tasks, osworld_path=finished.config.osworld_path)
        else:
            task_list = list(resolved.default_tasks(finished.config))
            if not task_list:
                raise typer.BadParameter(f"backend {backend!r} has no task suite of its own; give --tasks FILE")
        # refuse what the backend cannot run now, all at once, not at a reset; collect() carries the verdicts
        finished = resolved.finish(finished, task_list)
        config = finished.config
        grader_name = resolved.grader_name(config) if resolved.grader is not None else None
        if grader_name:
            log.info("grading with the %s grader", grader_name)
        # checked before a policy server is started or reached: a bad flag is one line at once
        sampling = Sampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens)
        limits = Limits(max_inflight=max_inflight, step_timeout=step_timeout, retries=retries)
        progress = Progress()
        with (
            _policy_urls(policy_url, model, resolved, task_list) as (urls, served_model),
            _show(progress, console, live=sys.stderr.isatty() and not quiet),
        ):
            policy = PolicyConfig(urls, served_model, version=version, sampling=sampling, limits=limits)
            if follow:
                follower = Follower(
                    task_list, policy, out=out, desktops=desktops, group=group, oversample=oversample,
                    max_steps=max_steps, rollout_timeout=rollout_timeout, env_retries=env_retries,
                    image_max=image_max, desktop=finished, backend=resolved, seed=seed, ray=ray, progress=progress,
                    order=order, max_ready=max_ready, max_staleness=max_staleness, stale=stale,  # type: ignore[arg-type]
                    partial=partial, reset_ahead=reset_ahead,  # type: ignore[arg-type]
                )  # fmt: skip
                data = run_follow(follower, control=control, max_groups=max_groups)
                _say_followed(console, data, out)
                return
            data = collect(
                task_list, policy, out=out, desktops=desktops, group=group, oversample=oversample,
                max_steps=max_steps, rollout_timeout=rollout_timeout, env_retries=env_retries,
                image_max=image_max, desktop=finished, backend=resolved, seed=seed, ray=ray, progress=progress,
            )  # fmt: skip
    except (LegatoError, OSError) as exc:  # a full disk or a read-only --out: one line, no traceback
        fail(console, exc)
    except KeyboardInterrupt:
        console.print(
            f"[yellow]interrupted.[/yellow] Run the same command again to resume into {escape(str(out))}.",
            soft_wrap=True,
        )
        raise typer.Exit(130) from None
    if grader_name:
        _stamp_grader(out / "summary.json", grader_name)
    _fail_if_nothing_completed(console, data, out)
    counts = ", ".join(f"{k} {v}" for k, v in data["status_counts"].items() if v)
    graded = f", {grader_name} grader" if grader_name else ""
    console.print(
        f"[green]done[/green]: {escape(str(out))} — {counts}; success rate {_fmt(data['success_rate'])}, "
        f"{_fmt(data['rollouts_per_hour'], 0)} rollouts/h, groups short {data['groups_short']}{graded}"
    )
    typer.echo(str(out / "summary.json"))


def _say_followed(console: Console, data: dict[str, Any], out: Path) -> None:
    figures = data.get("follow") or {}
    staleness = figures.get("staleness") or {}
    console.print(
        f"[green]stopped[/green]: {escape(str(out))} — {figures.get('groups_delivered', 0)} groups handed over, "
        f"staleness mean {_fmt(staleness.get('mean'), 2)} max {staleness.get('max')}, versions "
        f"{', '.join(str(v) for v in figures.get('versions') or []) or '-'}, desktop utilisation "
        f"{_fmt(figures.get('utilisation'), 3)}; run the same command again to go on",
        soft_wrap=True,
    )
    keep_up = figures.get("desktops_to_keep_up")
    desktops = figures.get("desktops")
    if isinstance(keep_up, int) and isinstance(desktops, int) and keep_up < desktops:
        busy, full_s = figures.get("utilisation"), figures.get("queue_full_s") or 0.0
        held = f", and the --max-ready groups waited for the trainer for {full_s:.1f} s" if full_s >= 0.1 else ""
        console.print(
            f"on average {_fmt(None if busy is None else busy * desktops, 1)} of {desktops} desktops were busy{held}: "
            f"--desktops {keep_up} keeps up with this trainer",
            soft_wrap=True,
        )
    typer.echo(str(out / "summary.json"))


def _fail_if_nothing_completed(console: Console, data: dict[str, Any], out: Path) -> None:
    """Exit 1 with one line when every attempt of the batch ended in ``error``: nothing to train on."""
    counts = data["status_counts"]
    errors = counts.get(Status.ERROR.value, 0)
    if errors == 0 or any(counts.get(status.value, 0) for status in COMPLETED_STATUSES):
        return  # a batch with some errors, or none, is done
    kinds = ", ".join(f"{kind} {n}" for kind, n in data["errors"].items() if n)
    fail(
        console,
        f"no attempt completed: all {errors} ended in error ({kinds}); the errors are in {out / 'rollouts.jsonl'}, "
        f"summed up by: legato rl profile {out}",
        code=EXIT_NOTHING_COMPLETED,
    )


def _stamp_grader(path: Path, grader: str) -> None:
    """Record in the run's ``summary.json`` which grader graded its rollouts (``"grader"``)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if isinstance(data, dict):
        data["grader"] = grader
        write_json_atomic(path, data)


@contextlib.contextmanager
def _policy_urls(
    urls: list[str], model: str | None, backend: Backend, tasks: list[Task]
) -> Iterator[tuple[tuple[str, ...], str]]:
    if EMBEDDED not in urls:
        if model is None:
            raise typer.BadParameter("give the served model name with --model (vLLM --served-model-name)")
        yield tuple(urls), model
        return
    if len(urls) > 1:
        raise typer.BadParameter("--policy-url embedded cannot be combined with other --policy-url values")
    from legato_rl.testing import ReferencePolicyServer, ScriptedSolver

    brain = ScriptedSolver(tasks, solution=_scripted_solution(backend))
    # it keeps no request: a batch's bodies (screenshots) would grow the collect process without end
    with ReferencePolicyServer(brain=brain, model=model or "legato/reference-policy", record_limit=0) as server:
        log.info("embedded reference policy server at %s (model %s)", server.url, server.model)
        yield (server.url,), server.model


def _scripted_solution(backend: Backend) -> Callable[[Task, tuple[int, int]], Sequence[Any]]:
    """The backend's scripted solutions (its unit's ``solution``), which the embedded server's brain answers
    with: steps a model could answer, else ``DONE``, so every task ends in a graded record."""
    solve = backend.solution
    if solve is None:
        declared = [name for name in backend_names() if resolve_backend(name).solution is not None]
        raise typer.BadParameter(
            f"--policy-url embedded knows the scripted solutions of backends that declare them "
            f"({', '.join(declared)}), not of backend {backend.name!r}; point --policy-url at your model server"
        )

    def answer(task: Task, screen: tuple[int, int]) -> Sequence[Any]:
        steps = solve(task, screen)
        if steps is not None and not all(isinstance(step, str) for step in steps):
            return steps  # the backend's own step values (the fake backend's FakeStep), read by the brain
        return _answerable(steps, screen)

    return answer


def local_solution(task: Task, screen: tuple[int, int]) -> list[str]:
    """What ``--policy-url embedded`` answers on the local backend: a scripted solution, else ``DONE``.

    The local suite's solution, else a real OSWorld task's (the local backend's ``solution``), when every
    step is a call the prompt format can express (clicks, keys, typing); else ``DONE``, which grades the task
    as its setup left it, so every task of a tasks file ends in a graded record.
    """
    solve = resolve_backend("local").solution
    return _answerable(solve(task, screen) if solve is not None else None, screen)


def _answerable(steps: Sequence[Any] | None, screen: tuple[int, int]) -> list[str]:
    """``steps`` when each is an action a model can answer in the prompt format, else ``["DONE"]``."""
    from legato_rl.testing.brains import to_qwen_actions

    if steps is None or not all(isinstance(step, str) and _gui_step(step) for step in steps):
        return ["DONE"]
    try:
        for step in steps:
            to_qwen_actions(step, screen)
    except (ValueError, SyntaxError):
        return ["DONE"]
    return list(steps)


def _gui_step(step: str) -> bool:
    """``WAIT``/``DONE``/``FAIL``, or statements that are all ``pyautogui`` calls (what a model can answer)."""
    if step.strip() in ("WAIT", "DONE", "FAIL"):
        return True
    try:
        tree = ast.parse(step)
    except SyntaxError:
        return False
    return all(
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and isinstance(node.value.func.value, ast.Name)
        and node.value.func.value.id == "pyautogui"
        for node in tree.body
    )


@contextlib.contextmanager
def _show(progress: Progress, console: Console, *, live: bool) -> Iterator[None]:
    """Show ``progress`` while the block runs: a live table at a terminal, else a log line every 10 s."""
    if live:
        with Live(get_renderable=lambda: _table(progress), console=console, refresh_per_second=4):
            yield
        return
    done = threading.Event()

    def report() -> None:
        while not done.wait(10.0):
            log.info("progress: %s", _line(progress))

    thread = threading.Thread(target=report, name="legato-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _table(p: Progress) -> Table:
    table = Table(title="legato rl collect", show_header=False, box=None)
    table.add_row("groups closed", f"{p.groups_closed}/{p.groups}")
    held = f", {p.held} held reset ahead" if p.held else ""  # a continuous run's, before their turn
    table.add_row("desktops busy", f"{p.busy - p.held}/{p.desktops}{held}")
    table.add_row("statuses", ", ".join(f"{s.value} {p.status_counts[s.value]}" for s in Status) or "-")
    table.add_row("rollouts/hour", _fmt(p.rollouts_per_hour, 0))
    table.add_row("model call p50", f"{_fmt(p.latency_p50(), 2)} s")
    return table


def _line(p: Progress) -> str:
    counts = dict(p.status_counts)  # a copy: the collecting thread writes it
    statuses = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    return (
        f"groups {p.groups_closed}/{p.groups} busy {p.busy - p.held}/{p.desktops} held {p.held} {statuses} "
        f"rollouts/h {_fmt(p.rollouts_per_hour, 0)} model p50 {_fmt(p.latency_p50(), 2)}s"
    )


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
