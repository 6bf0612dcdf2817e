"""One attempt at a task on one desktop: the loop that ``legato rl collect`` and every trainer route share.

:func:`play` resets a desktop of a :class:`~legato_gym.vector.DesktopVectorEnv` to a task, then alternates a
policy call and the reply's actions until the agent ends the episode, the step limit is reached, the
harness gives up on unparsable replies, or the rollout's deadline passes, and grades the desktop::

    import asyncio
    from legato_gym import DesktopConfig, resolve_backend
    from legato_gym.vector import DesktopVectorEnv
    from legato_rl.harness import QwenHarness
    from legato_rl.policy import PolicyClient, PolicyConfig
    from legato_rl.rollout import play

    async def main() -> None:
        tasks = resolve_backend("fake").default_tasks(DesktopConfig())
        with DesktopVectorEnv(1, "fake", png=True) as env:
            async with PolicyClient(PolicyConfig("http://127.0.0.1:8000/v1", "my-model")) as client:
                episode = await play(env, 0, tasks[0], client, QwenHarness(), rollout_id="r0", max_steps=15)
        print(episode.status, episode.reward, episode.seconds)

    asyncio.run(main())

What the caller does with each step is its own business, through two hooks: ``on_reply`` right after each
policy answer (``collect`` feeds its circuit breaker and progress display), and ``on_step`` once a step's
actions have run (``collect`` writes a :class:`~legato_rl.store.StepRecord`; the trainer integrations append
the reply to a token sequence, :mod:`legato_rl.integrations.sequence`).

The policy is anything with :class:`Policy`'s two methods: legato's HTTP :class:`~legato_rl.policy.PolicyClient`,
or an adapter onto a trainer's own generation path (:class:`legato_rl.integrations.verl.ServerManagerPolicy`
generates through verl's server manager, so the replies come from the weights verl just synced).

Statuses (:class:`~legato_rl.groups.Status`): ``ok`` when the agent ended it, the step limit was reached,
the harness gave up (graded where the agent stopped) or the agent's own actions destroyed the desktop
(graded 0, :attr:`Try.agent_fault` says how); ``truncated`` when ``rollout_timeout`` ran out or
``exhausted`` said so (graded as it stands); ``cancelled`` when ``cancelled`` said so (not graded). A
desktop failure raises :class:`~legato_gym.errors.DesktopError` and a policy failure
:class:`~legato_rl.errors.PolicyError`; the :class:`Try` passed in keeps what happened until then.
"""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from legato_gym import Task
from legato_gym.episode import UNKNOWN, Unknown
from legato_gym.vector import DesktopVectorEnv
from legato_rl.errors import PolicyError
from legato_rl.groups import Status
from legato_rl.harness import Harness, ParsedReply
from legato_rl.policy import ChatResult
from legato_rl.store import ActionRecord, Timing

__all__ = ["InlineWhileCheap", "Policy", "Try", "TryStep", "play"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
Screenshot = npt.NDArray[np.uint8]


@runtime_checkable
class Policy(Protocol):
    """What the attempt loop asks for replies: :class:`~legato_rl.policy.PolicyClient` is one.

    A policy must return a :class:`~legato_rl.policy.ChatResult` whose ``seconds`` is the call's wall
    time, and raise :class:`~legato_rl.errors.PolicyError` (never a bare exception) when it fails.
    """

    async def chat(self, messages: Sequence[Mapping[str, Any]], *, rollout_id: str) -> ChatResult:
        """The next reply to ``messages`` (OpenAI chat messages, images as data URLs)."""
        ...

    def forget(self, rollout_id: str) -> None:
        """The rollout has ended: drop whatever was kept for it (a replica pin, a token sequence)."""
        ...


@dataclass(frozen=True)
class TryStep:
    """One step as :func:`play` hands it to ``on_step``.

    Attributes:
        index: the step's index in the attempt (0-based).
        started_at: wall-clock time the step started (``time.time()``).
        result: the policy's reply.
        reply: what the harness read from it.
        actions: the actions run, with their timings; empty when the attempt was cancelled meanwhile.
        screenshot: the screenshot the prompt showed. With ``DesktopVectorEnv(copy=False)`` it is a view of
            the worker's buffer that the step's own actions have already overwritten: keep the env's default
            ``copy=True`` (or use ``png``) when the hook needs the pixels.
        png: the same screenshot PNG-encoded by the worker (``DesktopVectorEnv(png=True)``), else ``None``.
        ended: the episode ended in this step (terminated or truncated by the env).
    """

    index: int
    started_at: float
    result: ChatResult
    reply: ParsedReply
    actions: tuple[ActionRecord, ...]
    screenshot: Screenshot = field(repr=False)
    png: bytes | None = field(default=None, repr=False)
    ended: bool = False


@dataclass
class Try:
    """One try of one attempt, filled in as :func:`play` plays it (a failure part-way keeps what happened until
    then). Not :class:`legato_gym.Episode`, which drives a desktop: this is what the scheduler keeps of a try.

    Attributes:
        task: the task played.
        rollout_id: the attempt's id (the policy's calls of one attempt share it).
        env_id: the desktop it was played on.
        started_at: wall-clock time it started.
        seconds: seconds spent per phase (the keys of :attr:`legato_rl.store.Timing.PHASES`).
        steps: policy calls made.
        reward: the grade; ``None`` until graded (never graded when cancelled).
        status: how it ended; ``None`` while it runs or when it raised.
        agent_fault: ``{"cause", "message"}`` when the agent's own actions destroyed or exhausted the desktop
            (:class:`~legato_gym.errors.AgentFault`): the episode then ended there, graded 0.
        reset_kind: how the desktop was reset for it (its reset's ``info["reset_kind"]``), ``None`` until then
            or when the backend does not say.
        held_s: seconds its desktop, reset, held it before the first policy call (``play``'s ``hold``).
    """

    task: Task
    rollout_id: str
    env_id: int
    started_at: float = field(default_factory=time.time)
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(Timing.PHASES, 0.0))
    steps: int = 0
    reward: float | None = None
    status: Status | None = None
    agent_fault: dict[str, str] | None = None
    reset_kind: str | None = None
    held_s: float = 0.0

    def add_timings(self, timings: Mapping[str, float]) -> None:
        """Add a desktop call's ``info["timings"]`` (ready-signal waits count as ``wait_s``)."""
        seconds = self.seconds
        for name, value in timings.items():
            key = "wait_s" if name == "ready_s" else name
            if key in seconds:
                seconds[key] += value

    def timing(self, ended: float | None = None) -> Timing:
        """The seconds per phase as a :class:`~legato_rl.store.Timing`, ``total_s`` up to ``ended`` (now)."""
        total = (time.time() if ended is None else ended) - self.started_at
        return Timing(**self.seconds, total_s=total, held_s=self.held_s)


class InlineWhileCheap:
    """Run a function on the event loop while it stays cheap, in a thread once it does not.

    Building a prompt from a PNG the worker made takes well under a millisecond, less than handing it to a
    thread and back, which also contends for the GIL with the loop. When the calls' moving average of CPU
    time exceeds ``budget`` seconds (a harness that resizes every image), every later call runs in a
    thread. One slow call (a garbage collection) does not move it; a call as slow as five budgets does.
    Share one between attempts so that what it learnt carries over.
    """

    def __init__(self, what: str, budget: float = 0.005) -> None:
        self.what, self.budget, self.inline = what, budget, True
        self._average = 0.0

    async def __call__(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        if not self.inline:
            return await asyncio.to_thread(fn, *args, **kwargs)
        started = time.thread_time()  # CPU, not wall time: a busy machine's preemption is not the call's cost
        result = fn(*args, **kwargs)
        took = time.thread_time() - started
        self._average += 0.2 * (took - self._average)
        if self._average > self.budget:
            self.inline = False
            log.info("%s takes %.1f ms; it runs in a thread from now on", self.what, 1000 * took)
        return result


async def play(
    env: DesktopVectorEnv,
    env_id: int,
    task: Task,
    policy: Policy,
    harness: Harness,
    *,
    rollout_id: str,
    max_steps: int,
    rollout_timeout: float | None = None,
    screen: tuple[int, int] | None = None,
    episode: Try | None = None,
    cancelled: Callable[[], bool] | None = None,
    exhausted: Callable[[], bool] | None = None,
    on_reply: Callable[[ChatResult, float], None] | None = None,
    on_step: Callable[[TryStep], Awaitable[None]] | None = None,
    build_prompt: InlineWhileCheap | None = None,
    next_task: Task | Unknown | None = UNKNOWN,
    hold: Callable[[], Awaitable[float]] | None = None,
) -> Try:
    """Play ``task`` on desktop ``env_id`` once and grade it (see the module docstring).

    Args:
        env: the desktops.
        env_id: the desktop to play on.
        task: the task.
        policy: asked for each reply (:class:`Policy`).
        harness: the prompt format and reply parser.
        rollout_id: the attempt's id, passed to every policy call.
        max_steps: policy calls at most; the desktop is graded when they are used up.
        rollout_timeout: wall-clock seconds for the whole attempt; past them it is graded ``truncated``.
        screen: ``(width, height)`` the actions address; default ``env.config.screen``.
        episode: filled in as the attempt is played (a new one by default); a caller that needs what
            happened before a failure passes its own.
        cancelled: asked before each step and before the actions of a reply; ``True`` ends the attempt
            ``cancelled`` without grading (``collect``: the attempt's group has closed).
        exhausted: asked after each step; ``True`` grades the desktop now and ends ``truncated`` (a trainer's
            token budget is used up).
        on_reply: called with each policy answer and the ``time.monotonic()`` at which it was asked.
        on_step: awaited with each :class:`TryStep` once its actions ran; what it raises ends the attempt.
        build_prompt: runs the harness on a worker-encoded PNG (on the loop while that is cheap); default: a
            new :class:`InlineWhileCheap`. Without a PNG the harness always runs in a thread.
        next_task: the task this desktop will likely play next (``None``: not known), handed to the
            desktop with the reset (:meth:`~legato_gym.vector.DesktopVectorEnv.areset`); not given: no word.
        hold: awaited once the desktop is reset, before the first policy call: the attempt waits there for its
            turn (a continuous run resets desktops ahead of their groups' turn) and returns the seconds it held
            the desktop, the try's ``held_s``; ``rollout_timeout`` counts from its end.

    Returns:
        The episode, with its ``status`` and ``reward``.

    Raises:
        DesktopError: the desktop failed in any phase (the vector env replaces its worker).
        PolicyError: a policy call failed (after the policy's own retries).
    """
    ep = episode if episode is not None else Try(task, rollout_id, env_id)
    is_cancelled = cancelled or _never
    run_harness = build_prompt or InlineWhileCheap("building a prompt")
    size = screen or env.config.screen
    try:
        ep.status = await _play(
            env, env_id, task, policy, harness, ep, rollout_id, max_steps, rollout_timeout, size,
            is_cancelled, exhausted, on_reply, on_step, run_harness, next_task, hold,
        )  # fmt: skip
    finally:
        policy.forget(rollout_id)
    return ep


def _never() -> bool:
    return False


async def _play(
    env: DesktopVectorEnv,
    env_id: int,
    task: Task,
    policy: Policy,
    harness: Harness,
    ep: Try,
    rollout_id: str,
    max_steps: int,
    rollout_timeout: float | None,
    screen: tuple[int, int],
    cancelled: Callable[[], bool],
    exhausted: Callable[[], bool] | None,
    on_reply: Callable[[ChatResult, float], None] | None,
    on_step: Callable[[TryStep], Awaitable[None]] | None,
    run_harness: InlineWhileCheap,
    next_task: Task | Unknown | None,
    hold: Callable[[], Awaitable[float]] | None,
) -> Status:
    obs, info = await env.areset(env_id, task, next_task=next_task)
    png: bytes | None = info.get("screenshot_png")
    ep.add_timings(info.get("timings", {}))
    kind = info.get("reset_kind")
    ep.reset_kind = kind if isinstance(kind, str) else None
    if hold is not None:
        ep.held_s = await hold()
    deadline = None if rollout_timeout is None else time.monotonic() + rollout_timeout
    conversation = harness.start(task.instruction, screen)
    for index in range(max_steps):
        if cancelled():
            return Status.CANCELLED
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return await _grade_now(env, ep, Status.TRUNCATED)
        step_started = time.time()
        screenshot = obs["screenshot"]
        shown_png = png
        if png is None:  # the driver encodes the screenshot itself: never on the loop
            messages = await asyncio.to_thread(conversation.messages, screenshot)
        else:
            messages = await run_harness(conversation.messages, screenshot, png=png)
        asked = time.monotonic()
        try:
            result = await asyncio.wait_for(policy.chat(messages, rollout_id=rollout_id), remaining)
        except PolicyError:  # PolicyTimeout is a TimeoutError too, but it is the server's failure
            raise
        except TimeoutError:  # only the rollout's own deadline truncates
            return await _grade_now(env, ep, Status.TRUNCATED)
        if on_reply is not None:
            on_reply(result, asked)
        ep.seconds["model_s"] += result.seconds
        ep.steps += 1
        reply = conversation.record_reply(result.content)
        actions: list[ActionRecord] = []
        ended = False
        if not cancelled():
            for action in reply.actions:
                obs, reward, terminated, truncated, info = await env.astep(env_id, action)
                png = info.get("screenshot_png")
                timings = info.get("timings", {})
                ep.add_timings(timings)
                actions.append(ActionRecord.from_timings(action, timings))
                if info.get("agent_fault"):
                    ep.agent_fault = dict(info["agent_fault"])
                if terminated or truncated:
                    ep.reward = float(reward)
                    ended = True
                    break
        if on_step is not None:
            await on_step(TryStep(index, step_started, result, reply, tuple(actions), screenshot, shown_png, ended))
        if ended:
            return Status.OK
        if reply.give_up:  # too many unparsable replies in a row: grade where the agent stopped
            return await _grade_now(env, ep, Status.OK)
        if exhausted is not None and exhausted():
            return await _grade_now(env, ep, Status.TRUNCATED)
    if cancelled():
        return Status.CANCELLED
    return await _grade_now(env, ep, Status.OK)  # the step limit


async def _grade_now(env: DesktopVectorEnv, ep: Try, status: Status) -> Status:
    reward, info = await env.atruncate(ep.env_id)
    ep.add_timings(info.get("timings", {}))
    if info.get("agent_fault"):
        ep.agent_fault = dict(info["agent_fault"])
    ep.reward = float(reward)
    return status


#: Old names of this module, kept for one release (docs/api-changes.md): old name -> (new name, value).
_RENAMED = {"Episode": ("Try", Try), "PlayedStep": ("TryStep", TryStep)}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        new, value = _RENAMED[name]
        warnings.warn(
            f"legato_rl.rollout.{name} is now legato_rl.rollout.{new} (docs/api-changes.md)",
            DeprecationWarning,
            stacklevel=2,
        )
        return value
    raise AttributeError(f"module 'legato_rl.rollout' has no attribute {name!r}")
