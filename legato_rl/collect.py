"""The rollout scheduler behind ``legato rl collect``.

One asyncio task per desktop pulls attempts from the :class:`~legato_rl.groups.GroupBook` and plays them:
reset the desktop to the task, then alternate a policy call (bounded by ``policy.limits.max_inflight``
across all desktops) and the reply's actions until the episode ends, then record the attempt. Every phase
has a deadline: desktop phases are bounded by the vector env (a hung worker is killed and replaced), model
calls by ``policy.limits`` (``step_timeout`` × ``retries``), and the whole attempt by ``rollout_timeout``.

Each setting has one owner, with its default: the policy's sampling and limits are
:class:`~legato_rl.policy.PolicyConfig`'s (``sampling=Sampling(...)``, ``limits=Limits(...)``), how desktops
wait and reset is :class:`~legato_gym.DesktopConfig`'s, and the batch's own knobs are
:class:`CollectOptions`' (which :func:`collect`'s keyword arguments default to).

Failures stay with the attempt they hit:

* a desktop failure (worker death, setup failure, hang) records the try as ``retried`` and queues the
  attempt again, up to ``env_retries`` times, then ``error`` (kind ``env``);
* a policy failure (after the client's own retries) is ``error`` (kind ``policy``);
* a desktop the agent's own actions destroyed or exhausted (:class:`~legato_gym.errors.AgentFault`:
  docs/reliability.md says on what evidence) is the agent's failure: the attempt ends ``ok`` with reward 0
  and an ``error`` of kind ``agent`` naming the cause, and is never retried;
* neither is ever recorded as the agent's failure, and neither stops the batch: only a policy server that
  cannot be used at all does (:mod:`legato_rl.health`). It is checked before the first attempt; during the
  batch, attempts that failed because the server was unavailable wait for its next answer before they are
  recorded ``error``. If the breaker trips instead, they are recorded ``retried`` (kind ``policy``), the
  attempts still running are dropped unrecorded, and :class:`~legato_rl.errors.PolicyUnavailable` is
  raised: running the same batch again re-runs all of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from asyncio import FIRST_COMPLETED
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from legato_gym import Backend, ConfigError, DesktopConfig, DesktopError, LegatoError, Task, resolve_backend
from legato_gym.backends import Finished
from legato_gym.tasks import load_tasks
from legato_gym.vector import DesktopVectorEnv, RayPlacement, make_vector_env
from legato_rl.collect_options import CollectOptions
from legato_rl.errors import PolicyError, PolicyUnavailable
from legato_rl.groups import Attempt, GroupBook, Status
from legato_rl.harness import Harness, QwenHarness
from legato_rl.health import Breaker, check_policy, unavailable_kind
from legato_rl.policy import ChatResult, Limits, PolicyClient, PolicyConfig
from legato_rl.progress import Progress
from legato_rl.rollout import InlineWhileCheap, Try, TryStep, play
from legato_rl.store import (
    COMPLETED_STATUSES,
    BackgroundWriter,
    ErrorInfo,
    PolicyStamp,
    PromptContext,
    RolloutRecord,
    RolloutStore,
    RunManifest,
    StepRecord,
    Timing,
    open_run,
    prompt_ids_of,
    read_progress,
    task_digests,
    tasks_sha256,
)
from legato_rl.summary import Summary, summarize_run, write_summary

__all__ = ["CollectOptions", "Collector", "Progress", "collect", "grader_of"]

log = logging.getLogger(__name__)


def grader_of(backend: Backend, config: DesktopConfig) -> str:
    """The grader that scores a backend's attempts: what the run's manifest and its graded records name.

    The backend's unit says (:meth:`~legato_gym.backends.Backend.grader_name`): ``osworld`` is desktop-env's
    getters and metrics (the osworld backend's, and the local backend's with ``grader="osworld"``, or
    ``"auto"`` where desktop-env's interpreter runs the desktops); ``local`` is the local backend's built-in
    grader; ``fake`` the fake suite's; a backend of your own grades with its own ``evaluate``, named by the
    backend's name.
    """
    return backend.grader_name(backend.configure(config))


@dataclass
class _Playing:
    """One try of one attempt in flight on a desktop: the :class:`~legato_rl.rollout.Try` that
    :func:`~legato_rl.rollout.play` fills in, and its step records."""

    attempt: Attempt
    desktop: int
    policy: PolicyStamp
    #: the task this desktop will likely play next (its desktop may set it up meanwhile)
    next_task: Task | None = None
    #: the grader that scores it (:func:`grader_of`), named by a graded record
    grader: str | None = None
    episode: Try = field(init=False)
    steps: list[StepRecord] = field(default_factory=list)
    #: a continuous run's try is past its reset and its hold: its policy calls have begun (legato_rl.follow)
    calling: bool = False

    def __post_init__(self) -> None:
        self.episode = Try(self.attempt.task, self.attempt.rollout_id, self.desktop)

    def record(self, status: Status, error: ErrorInfo | None = None) -> RolloutRecord:
        ended = time.time()
        episode = self.episode
        task = self.attempt.task
        graded = status in COMPLETED_STATUSES or status is Status.SURPLUS
        return RolloutRecord(
            rollout_id=self.attempt.rollout_id,
            task_id=task.task_id,
            domain=task.domain,
            group_id=self.attempt.group_id,
            attempt=self.attempt.index,
            policy=self.policy,
            status=status.value,
            try_index=self.attempt.try_index,
            desktop=self.desktop,
            reward=episode.reward if graded else None,
            grader=self.grader if graded and episode.reward is not None else None,
            error=error,
            timing=episode.timing(ended),
            reset_kind=episode.reset_kind,
            steps=tuple(self.steps),
            started_at=episode.started_at,
            ended_at=ended,
        )


class Collector:
    """Plays every attempt of a batch on a pool of desktops. :func:`collect` is the usual way in.

    Args:
        tasks: one GRPO group per task.
        policy: the policy server, its sampling and its limits.
        out: the run directory (``legato.rollout/v0``); an existing run with the same arguments resumes.
        options: the batch's knobs.
        desktop: how to build desktops (settings finished by :meth:`Backend.finish
            <legato_gym.backends.Backend.finish>` are carried as they are).
        harness: the prompt format; OSWorld's Qwen3-VL computer-use format by default.
        ray: place the desktops on this Ray cluster (an address or a ``RayPlacement``); ``None``: this host.
        backend: the resolved backend (default: ``resolve_backend(options.backend)``).
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        policy: PolicyConfig,
        out: str | Path,
        options: CollectOptions,
        desktop: DesktopConfig | Finished,
        harness: Harness | None = None,
        ray: RayPlacement | str | None = None,
        progress: Progress | None = None,
        backend: Backend | None = None,
    ) -> None:
        if not tasks:
            raise ConfigError("no tasks to collect: give a tasks file with at least one entry")
        self.tasks = list(tasks)
        self.policy_config = policy
        self.out = Path(out)
        self.options = options
        self.ray = ray
        self.backend = backend or resolve_backend(options.backend)  # resolved once, passed to the vector env
        #: the desktops' settings, finished once (by collect(), or here) and handed to the vector env as they are
        self.finished = self.backend.finish(desktop)
        self.desktop_config = self.finished.config
        self.harness: Harness = harness or QwenHarness(image_max=options.image_max)
        self.grader = self.backend.grader_name(self.desktop_config)
        self.book = GroupBook(self.tasks, group=options.group, oversample=options.oversample)
        self.progress = progress if progress is not None else Progress()
        self.progress.groups, self.progress.desktops = len(self.book.groups), options.desktops
        self._wake: asyncio.Event | None = None
        self._idle: set[int] = set()  # desktops waiting for work
        # The attempt each desktop is playing (its group id and task): a group that closes cancels the others.
        self._running: dict[int, tuple[_Playing, asyncio.Task[None]]] = {}
        self._build_prompt = InlineWhileCheap("building a prompt")  # on the loop while that is cheap
        self._store: BackgroundWriter | None = None
        # Attempts that failed because the server was unavailable, recorded once it answers again (error) or
        # the breaker trips (retried); see the module docstring.
        self._unanswered: list[tuple[float, _Playing, ErrorInfo]] = []  # (when it failed, ...)
        self._breaker = Breaker(threshold=max(8, 2 * options.desktops))
        self._stopped: PolicyUnavailable | None = None
        self._health: asyncio.Task[None] | None = None
        # The policy versions loaded, in order, with the time.monotonic() each was loaded at: a step records the
        # version that was loaded when its call was asked (a batch has one; a continuous run loads more).
        self._loaded: list[tuple[float, str | None]] = [(float("-inf"), policy.version)]

    def load_version(self, version: str) -> None:
        """The policy server has loaded ``version``: calls asked from now on carry it, and so do new records."""
        self.policy_config = replace(self.policy_config, version=version)
        self._loaded.append((time.monotonic(), version))

    def version_at(self, asked: float) -> str | None:
        """The version that was loaded at ``asked`` (``time.monotonic()``)."""
        return next(version for at, version in reversed(self._loaded) if at <= asked)

    def manifest(self) -> RunManifest:
        """The arguments that define this batch (checked on resume)."""
        settings = self.backend.run_settings
        return RunManifest(
            tasks_sha256=tasks_sha256(self.tasks),
            n_tasks=len(self.tasks),
            tasks=task_digests(self.tasks),
            group=self.options.group,
            oversample=self.options.oversample,
            policy_model=self.policy_config.model,
            policy_version=self.policy_config.version,
            max_steps=self.options.max_steps,
            rollout_timeout=self.options.rollout_timeout,
            backend=self.options.backend,
            grader=self.grader,
            harness=self.harness.name,
            image_max=self.options.image_max,
            screen=self.desktop_config.screen,
            temperature=self.policy_config.sampling.temperature,
            top_p=self.policy_config.sampling.top_p,
            max_tokens=self.policy_config.sampling.max_tokens,
            extra_body=dict(self.policy_config.sampling.extra_body),
            desktop=None if settings is None else dict(settings(self.desktop_config)),
        )

    async def run(self) -> Summary:
        """Collect the batch; returns its summary (also written to ``OUT/summary.json``).

        Raises:
            PolicyUnavailable: the policy server cannot be used (before the first attempt, or it went away);
                what was collected is kept, and running the same batch again finishes it.
        """
        async with PolicyClient(self.policy_config) as client:
            await check_policy(client, self.policy_config)  # before anything is written
            resumed = open_run(self.out, self.manifest())
            self._wake = asyncio.Event()
            with RolloutStore(self.out) as store:
                self._store = BackgroundWriter(store)
                try:
                    if resumed:
                        self._restore()
                    for attempt in self.book.close_remaining():
                        self._write(self._skipped(attempt))
                    self.progress.groups_closed = sum(g.closed for g in self.book.groups.values())
                    self.progress.attempts = sum(g.n_attempts for g in self.book.groups.values())
                    if not self.book.all_ended:
                        await self._run_desktops(client)
                    self._record_unanswered()
                finally:
                    if self._health is not None:
                        self._health.cancel()
                    await self._store.aclose()
        summary = summarize_run(self.out, nodes=self.progress.nodes)
        write_summary(self.out, summary)
        if self._stopped is not None:
            raise self._stopped
        return summary

    def _restore(self) -> None:
        done = read_progress(self.out)
        self.book.restore(done.ended, done.tries)
        self.progress.status_counts.update(done.status_counts)
        log.info("resuming %s: %d attempts already ended", self.out, len(done.ended))

    async def _run_desktops(self, client: PolicyClient) -> None:
        opts = self.options
        env = make_vector_env(
            opts.desktops,
            ray=self.ray,
            backend=self.backend,
            config=self.finished,
            # collect counts policy calls itself; the env's own step limit only guards runaway replies
            max_steps=opts.max_steps * 16,
            tasks=self.tasks,
            seed=opts.seed,
            # workers PNG-encode screenshots (the driver's CPU is the scarce one), and the driver takes views of
            # their shared buffers: a screenshot is only read before the desktop's next step
            png=True,
            copy=False,
            # a PNG that came alone from a Ray host is decoded only if the harness reads the pixels
            pixels="lazy",
        )
        try:
            await asyncio.gather(*(self._desktop_loop(env, client, i) for i in range(opts.desktops)))
        finally:
            self.progress.nodes = env.nodes
            env.close()  # a desktop still finishing a cancelled attempt's action is shut down mid-action

    async def _desktop_loop(self, env: DesktopVectorEnv, client: PolicyClient, env_id: int) -> None:
        """Play attempts on one desktop until the batch has none left.

        Each attempt runs as its own task, which a closing group cancels wherever it is: in a policy call
        (the request is dropped) or a desktop call (the desktop finishes that action before its next
        attempt, without holding the batch). Cancellation costs nothing per step.
        """
        assert self._wake is not None
        while self._stopped is None:
            if not env.available(env_id):  # its host was lost and none has room: no work until one does
                await self._until_available(env, env_id)
                if self.book.all_ended:
                    self._wake.set()
                    return
                continue
            attempt = self.book.next_attempt(env_id, free=self._idle)
            if attempt is None:
                if self.book.all_ended:
                    self._wake.set()
                    return
                if self._unanswered and not self._running and not self.book.pending:  # all that is left: the
                    self._record_unanswered()  # server did not come back before the batch's end: errors
                    continue
                # others may still queue a retry (or leave one for this desktop); wait until something changes
                self._wake.clear()
                self._idle.add(env_id)
                try:
                    await self._wake.wait()
                finally:
                    self._idle.discard(env_id)
                continue
            stamp = PolicyStamp(self.policy_config.model, self.policy_config.version)  # stamped at dispatch
            playing = _Playing(attempt, env_id, stamp, self.book.likely_next(attempt), self.grader)
            task = asyncio.ensure_future(self._run_attempt(env, client, playing))
            self._running[env_id] = (playing, task)
            self.progress.busy += 1
            try:
                await asyncio.wait((task,))  # unlike `await task`, a cancelled attempt does not raise here
            except asyncio.CancelledError:  # the batch itself is being cancelled
                task.cancel()
                raise
            finally:
                del self._running[env_id]
                self.progress.busy -= 1
            cancelled = task.cancelled()  # by its closing group (_end recorded it) or by _stop (unrecorded)
            if self._stopped is not None:  # the batch stops: an attempt cut short is re-run on resume
                return
            if self.book.pending or self.book.all_ended:  # a retry was queued, or the batch is done: idle
                self._wake.set()  # desktops look again (nothing else can give them work)
            if not cancelled:
                task.result()  # a bug in the scheduler stops the batch rather than vanish
                continue
            # the desktop finishes the call it was in before its next attempt; if the batch ends first, the
            # desktop is shut down mid-call (env.close) rather than hold collect() until its action ends
            idle = env.idle(env_id)
            while not idle.done() and not self.book.all_ended:
                self._wake.clear()
                woken = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait((idle, woken), return_when=FIRST_COMPLETED)
                woken.cancel()
            if not idle.done():
                idle.cancel()

    async def _until_available(self, env: DesktopVectorEnv, env_id: int) -> None:
        """Wait until desktop ``env_id`` can run again, the batch has ended, or it stops."""
        assert self._wake is not None
        ready = env.wait_available(env_id)
        while not ready.done() and not self.book.all_ended and self._stopped is None:
            self._wake.clear()
            woken = asyncio.ensure_future(self._wake.wait())
            await asyncio.wait((ready, woken), return_when=FIRST_COMPLETED)
            woken.cancel()
        if not ready.done():
            ready.cancel()

    async def _run_attempt(self, env: DesktopVectorEnv, client: PolicyClient, playing: _Playing) -> None:
        attempt, env_id = playing.attempt, playing.desktop
        try:
            status = await self._play_try(env, client, playing)
        except DesktopError as exc:
            log.warning("%s: desktop %d failed: %s", attempt.rollout_id, env_id, exc)
            error = ErrorInfo.from_exception("env", exc)
            if self._env_tries(attempt) < self.options.env_retries:
                self._write(playing.record(Status.RETRIED, error))
                if self.book.requeue(attempt, failed_on=env_id) is None:  # its group closed meanwhile
                    self._end(playing, Status.SKIPPED)
                return
            self._end(playing, Status.ERROR, error)
            return
        except PolicyError as exc:
            log.warning("%s: policy call failed: %s", attempt.rollout_id, exc)
            error = ErrorInfo.from_exception("policy", exc)
            kind = unavailable_kind(exc)
            if kind is None:  # one reply's problem, not the server's
                self._end(playing, Status.ERROR, error)
            else:
                self._policy_unavailable(playing, error, kind, client)
            return
        except LegatoError as exc:  # e.g. a task this backend cannot run: the desktop side, not the agent
            log.warning("%s: %s", attempt.rollout_id, exc)
            self._end(playing, Status.ERROR, ErrorInfo.from_exception("env", exc))
            return
        fault = playing.episode.agent_fault
        if fault is not None and status in COMPLETED_STATUSES:  # the agent destroyed its desktop: its failure
            log.warning("%s: the agent's actions destroyed desktop %d: %s", attempt.rollout_id, env_id, fault)
            self._end(playing, status, ErrorInfo("agent", "AgentFault", str(fault.get("message", ""))))
            return
        self._end(playing, status)

    def _env_tries(self, attempt: Attempt) -> int:
        """The tries of ``attempt`` before this one that a desktop failure ended (what ``env_retries`` bounds)."""
        return attempt.try_index

    async def _play_try(self, env: DesktopVectorEnv, client: PolicyClient, playing: _Playing) -> Status:
        """Play one try on one desktop (:func:`legato_rl.rollout.play`) and return its status.

        Desktop failures raise DesktopError; ``play`` keeps the steps and timings up to the failure.
        """
        attempt = playing.attempt
        context: PromptContext | None = None  # the previous step's prompt and response token ids
        version = self.policy_config.version  # the version loaded when the latest call was asked

        def cancelled() -> bool:
            return self.book.is_closed(attempt.group_id)

        def on_reply(result: ChatResult, asked: float) -> None:
            nonlocal version
            version = self.version_at(asked)
            if self._unanswered or self._breaker.count:
                self._policy_answered(asked)
            self.progress.model_latency_s.append(result.seconds)

        async def on_step(step: TryStep) -> None:
            nonlocal context
            assert self._store is not None
            await self._store.wait_backlog()
            request = self._store.put_request(step.result.request)
            prompt_ids, context = prompt_ids_of(step.result, context)
            playing.steps.append(
                StepRecord.from_chat(
                    step.result, index=step.index, request=request, actions=step.actions,
                    description=step.reply.description or None, parse_error=step.reply.error,
                    started_at=step.started_at, prompt_ids=prompt_ids, policy_version=version,
                )
            )  # fmt: skip

        episode = await play(
            env, playing.desktop, attempt.task, client, self.harness, rollout_id=attempt.rollout_id,
            max_steps=self.options.max_steps, rollout_timeout=self.options.rollout_timeout,
            screen=self.desktop_config.screen, episode=playing.episode, cancelled=cancelled, on_reply=on_reply,
            on_step=on_step, build_prompt=self._build_prompt, next_task=playing.next_task,
            hold=self._hold_of(playing),
        )  # fmt: skip
        assert episode.status is not None
        return episode.status

    def _hold_of(self, playing: _Playing) -> Callable[[], Awaitable[float]] | None:
        """What the try awaits between its reset and its first policy call: a batch's tries go straight on (a
        continuous run holds a desktop reset ahead there until its group's turn: :mod:`legato_rl.follow`)."""
        return None

    # -- a policy server that is unavailable -----------------------------------------------------------
    def _policy_unavailable(self, playing: _Playing, error: ErrorInfo, kind: str, client: PolicyClient) -> None:
        self._unanswered.append((time.monotonic(), playing, error))
        if self._breaker.failed(kind):
            self._stop(
                PolicyUnavailable(
                    f"{self._breaker.count} policy calls in a row failed ({kind}) with no answer in between; the "
                    f"last: {error.message}"
                )
            )
        elif self._health is None or self._health.done():  # is the server there at all? (one check at a time)
            self._health = asyncio.ensure_future(self._check_health(client))

    async def _check_health(self, client: PolicyClient) -> None:
        try:
            await check_policy(client, self.policy_config)
        except PolicyUnavailable as exc:
            self._stop(exc)

    def _policy_answered(self, asked: float) -> None:
        """A call asked at ``asked`` was answered: the server was up after every failure before that."""
        if self._unanswered and self._unanswered[-1][0] > asked:  # an answer that was on its way before
            self._record_unanswered(before=asked)  # the latest failures says nothing about them
            return
        self._breaker.answered()
        self._record_unanswered()

    def _record_unanswered(self, before: float | None = None) -> None:
        """Record the attempts that failed while the server was unavailable (those that failed ``before``, by
        default all): ``retried`` when the batch stops (resume re-runs them), else ``error``."""
        unanswered = [u for u in self._unanswered if before is None or u[0] < before]
        self._unanswered = [u for u in self._unanswered if before is not None and u[0] >= before]
        for _, playing, error in unanswered:
            if self._stopped is not None:
                self._write(playing.record(Status.RETRIED, error))
            else:
                self._end(playing, Status.ERROR, error)

    def _stop(self, error: PolicyUnavailable) -> None:
        """Stop the batch: no attempt starts, running ones are cancelled unrecorded (resume re-runs them)."""
        if self._stopped is not None:
            return
        self._stopped = PolicyUnavailable(
            f"{error} — the batch stopped; what was collected is kept in {self.out}. Fix the server or the "
            "arguments and run the same command again: the attempts it cut short run again."
        )
        log.error("%s", self._stopped)
        for _, task in self._running.values():
            task.cancel()
        assert self._wake is not None
        self._wake.set()

    # -- records -------------------------------------------------------------------------------------
    def _end(self, playing: _Playing, status: Status, error: ErrorInfo | None = None) -> None:
        gid = playing.attempt.group_id
        was_closed = self.book.is_closed(gid)
        final, dropped = self.book.finish(playing.attempt, status)
        self._write(playing.record(final, error))
        for attempt in dropped:
            self._write(self._skipped(attempt))
        if not was_closed and self.book.is_closed(gid):
            self.progress.groups_closed += 1
            # Cancel the group's other attempts wherever they are, and record them now, right behind the record
            # that closed the group: a resume then never takes an attempt that was running for one not started.
            # A task that cancel() reaches records nothing itself; one already done recorded its own end.
            me = asyncio.current_task()
            for other, task in list(self._running.values()):
                if other.attempt.group_id == gid and task is not me and task.cancel():
                    self._end(other, Status.CANCELLED)
        if self.book.groups[gid].finished:
            self._group_finished(gid)

    def _group_finished(self, group_id: str) -> None:
        """Every attempt of the group has its final record (queued for the store). A batch does nothing more; a
        continuous run hands the group to its trainer (:mod:`legato_rl.follow`)."""

    def _skipped(self, attempt: Attempt) -> RolloutRecord:
        stamp = PolicyStamp(self.policy_config.model, self.policy_config.version)
        playing = _Playing(attempt, -1, stamp)
        record = playing.record(Status.SKIPPED)
        return replace(record, desktop=None, timing=Timing())

    def _write(self, record: RolloutRecord) -> None:
        assert self._store is not None
        self._store.append(record)
        self.progress.status_counts[record.status] += 1


def collect(
    tasks: Sequence[Task | Mapping[str, Any]] | str | Path,
    policy: PolicyConfig,
    *,
    out: str | Path,
    desktops: int = CollectOptions.desktops,
    group: int = CollectOptions.group,
    oversample: float = CollectOptions.oversample,
    max_inflight: int | None = None,
    step_timeout: float | None = None,
    retries: int | None = None,
    max_steps: int = CollectOptions.max_steps,
    rollout_timeout: float | None = CollectOptions.rollout_timeout,
    env_retries: int = CollectOptions.env_retries,
    image_max: int = CollectOptions.image_max,
    desktop: DesktopConfig | Finished | None = None,
    backend: str | Backend = CollectOptions.backend,
    harness: Harness | None = None,
    seed: int = CollectOptions.seed,
    ray: RayPlacement | str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Collect one batch of graded rollouts and return its summary (the contents of ``OUT/summary.json``).

    Args:
        tasks: the tasks (one GRPO group each): the path of a tasks file, or a list of what a tasks file
            holds (``{"task_id", "domain"}`` and ``{"task_id", "config"}`` dicts) and :class:`Task` values.
        policy: the policy server, its sampling and its limits (``limits=Limits(max_inflight=...,
            step_timeout=..., retries=...)``).
        out: the run directory. Running again with the same arguments resumes an interrupted run.
        desktops: desktops run at once.
        group: completed attempts per task (one GRPO group).
        oversample: extra attempts per group as a fraction of ``group``; stragglers are cancelled.
        max_inflight: cap on concurrent model requests across all desktops (``--max-inflight``); sets
            ``policy.limits.max_inflight``.
        step_timeout: seconds per model call (``--step-timeout``); sets ``policy.limits.step_timeout``.
        retries: retries of a failed model call (``--retries``); sets ``policy.limits.retries``. Each of
            these three may be given here or in ``policy.limits``; given here and set in ``policy.limits``
            to another value than ``Limits``' default, it is a :class:`~legato_gym.ConfigError` naming both.
        max_steps: policy calls per attempt; the attempt is graded when it reaches them.
        rollout_timeout: wall-clock cap per attempt; graded and marked ``truncated`` when it hits.
        env_retries: times an attempt is queued again after a desktop failure.
        image_max: screenshots kept in the prompt.
        desktop: how to build desktops: screen size, waiting (``ready_signal``, ``fixed_wait``), resets
            (``fast_reset``), OSWorld checkout, interpreter, ... (default ``DesktopConfig()``).
        backend: ``osworld``, ``local``, ``fake``, ``package.module:Class``, or a resolved ``Backend``.
        harness: the prompt format (OSWorld's Qwen3-VL computer-use format by default).
        seed: seeds the desktops.
        ray: run the desktops on a Ray cluster: its address (``"auto"``, ``"HEAD:6379"``) or a ``RayPlacement``.
        progress: a :class:`Progress` that the run keeps up to date, for a display in another thread.

    Example:
        >>> from legato.rl import DesktopConfig, PolicyConfig, collect  # doctest: +SKIP
        >>> policy = PolicyConfig("http://localhost:8000/v1", "Qwen/Qwen3-VL-8B-Instruct")  # doctest: +SKIP
        >>> collect("tasks.json", policy, out="runs/step-1", backend="fake", max_inflight=8, step_timeout=120.0,
        ...         desktop=DesktopConfig(ready_signal=False, fixed_wait=2.0))  # doctest: +SKIP
    """
    resolved = resolve_backend(backend)  # an unknown or unbuilt backend fails here, before anything is written
    finished = resolved.finish(desktop)  # once: typed options, the workers' interpreter
    task_list = load_tasks(tasks, osworld_path=finished.config.osworld_path)
    finished = resolved.finish(finished, task_list)  # the tasks checked once, all at once
    policy = _with_limits(policy, max_inflight=max_inflight, step_timeout=step_timeout, retries=retries)
    options = CollectOptions(
        desktops=desktops,
        group=group,
        oversample=oversample,
        max_steps=max_steps,
        rollout_timeout=rollout_timeout,
        env_retries=env_retries,
        image_max=image_max,
        backend=resolved.name,
        seed=seed,
    )
    collector = Collector(
        task_list, policy, out, options, finished, harness, ray=ray, progress=progress, backend=resolved
    )
    return asyncio.run(collector.run()).to_json()


def _with_limits(policy: PolicyConfig, **given: Any) -> PolicyConfig:
    """``policy`` with the limits :func:`collect` was given as keywords (``None``: not given) in its ``limits``.

    Raises:
        ConfigError: a limit given both ways with different values; the message names both.
    """
    limits = policy.limits
    changes: dict[str, Any] = {}
    for name, value in given.items():
        if value is None:
            continue
        own = getattr(limits, name)
        if own != value and own != Limits.__dataclass_fields__[name].default:
            raise ConfigError(
                f"collect({name}={value!r}) and PolicyConfig(limits=Limits({name}={own!r})) disagree; give "
                f"{name} once, as collect()'s keyword or in the policy's limits"
            )
        changes[name] = value
    return replace(policy, limits=replace(limits, **changes)) if changes else policy
