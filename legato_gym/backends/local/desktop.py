"""``LocalDesktop``: a real, sandboxed X desktop on this host, driven through OSWorld's protocol.

The desktop's processes and their lifecycle are in :mod:`.lifecycle`, its ready signals in :mod:`.waits`,
and who sets a task up and grades it (legato's grader or desktop-env's) in :mod:`.graders`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from legato_gym.backends.local.client import DesktopClient
from legato_gym.backends.local.coverage import Capabilities, Verdict
from legato_gym.backends.local.coverage import check_tasks as _check_tasks
from legato_gym.backends.local.display import Display
from legato_gym.backends.local.graders import file_cache, grade_locally, make_grader
from legato_gym.backends.local.lifecycle import DesktopProcesses
from legato_gym.backends.local.limits import BoundHits
from legato_gym.backends.local.options import LocalOptions, resolve_grader
from legato_gym.backends.local.prestart import Desk, Prepared, opens_office_first, task_key
from legato_gym.backends.local.waits import IDLE_TICKS, ReadySignals, fixed_wait
from legato_gym.config import DesktopConfig
from legato_gym.contract import SPECIAL_ACTIONS, ActResult, Observation, Task, Waited
from legato_gym.episode import UNKNOWN, Unknown
from legato_gym.errors import AgentFault, DeadlineExceeded, DesktopCrashed, DesktopError, ReplyTooLarge, StateError
from legato_gym.options import typed_options

__all__ = ["LocalDesktop"]

logger = logging.getLogger(__name__)

#: OSWorld's ``PythonController`` prefix for ``pyautogui`` actions (``python -c`` inside the desktop), with the
#: fix OSWorld's ``DesktopEnv.step`` makes to every action (``_fix_pyautogui_less_than_bug``): on an X keymap
#: with the 105th key, pyautogui types "<" as ">" (shift and the key whose first level is "<"). The fix here
#: is in pyautogui's own table, "<" is shift and the comma key, so press, typewrite and hotkey all get it.
ACTION_PREFIX = (
    "import pyautogui; import time; pyautogui.FAILSAFE = False; "
    "_x11 = getattr(pyautogui, '_pyautogui_x11', None); "
    "_x11 is None or _x11.keyboardMapping.update({{'<': _x11.keyboardMapping[',']}}); {command}"
)


#: How long a desktop failure waits for the sandbox to exit, to tell whether its server ended from inside: the
#: sandbox's init exits within milliseconds of the server (the kernel ends its pid namespace).
_SERVER_EXIT_S = 2.0


class LocalDesktop:
    """A real desktop on this host: Xvfb + openbox, apps and an OSWorld-protocol server in a bwrap sandbox.

    ``reset`` kills every process of the previous episode (the sandbox's pid namespace), checks that none
    survived and that their windows are gone (else restarts the whole desktop), starts a fresh sandbox whose
    ``/home/user`` is a new tmpfs filled from the home baseline captured at first boot, and runs the task's
    setup. ``config.fast_reset=False`` restarts the whole desktop (X server included) on every reset.

    Example::

        from legato_gym import DesktopConfig
        from legato_gym.backends.local import LocalDesktop, default_tasks

        config = DesktopConfig(screen=(1280, 720))
        with LocalDesktop(config) as desktop:
            task = default_tasks(config)[0]
            desktop.reset(task)
            desktop.wait_after_reset()
            desktop.act("pyautogui.typewrite('echo Hello, legato! > ~/hello.txt\\\\n')")

    Args:
        config: screen size, ready signals / fixed waits, fast reset, deadlines, and ``options``
            (a :class:`LocalOptions`, its mapping, or ``None``).
        seed: unused (a real desktop has no randomness to seed); accepted for the backend signature.
    """

    def __init__(self, config: DesktopConfig | None = None, *, seed: int | None = None) -> None:
        self.config = config or DesktopConfig()
        self.options = typed_options(self.config.options, LocalOptions, "local")
        #: The grader that grades this desktop's tasks: ``"osworld"`` (desktop-env's) or ``"local"``.
        self.grader = resolve_grader(self.options.grader)
        if self.options.grader == "auto" and self.grader == "local":
            logger.info(
                "grading with the built-in grader: desktop-env does not import in this interpreter (run the "
                "desktops in desktop-env's, from `legato osworld setup`, to grade with OSWorld's own)"
            )
        self._processes = DesktopProcesses(self.config, self.options)
        self.state_dir: Path = self._processes.state_dir
        self._waits = ReadySignals(self._processes, self.options)
        self._grading = make_grader(self.grader, self._processes, self.config.screen, self.options)
        self._processes.setup_ahead = self._setup_ahead
        self.files = self._grading.files
        self._task: Task | None = None
        self._next_hint: Task | Unknown | None = UNKNOWN  # from expect_next(), for the coming reset's episode
        self._hint: Task | Unknown | None = UNKNOWN  # the current episode's
        self._expected_windows = 0
        self._expected_titles: list[str] = []
        self._actions: list[str] = []
        self._last_input = 0.0  # monotonic time the last action or setup step ended
        self._episode_hits = BoundHits()  # the cgroup's bound counters when the agent's phase began
        self._hits_seen = BoundHits()  # ... and when act() last looked
        self._episode_overflows = 0
        self._closed = False
        self._capabilities: Capabilities | None = None
        #: How the last reset went: ``"fast"``, ``"ahead"`` (switched to the desktop started ahead,
        #: ``LocalOptions.prestart``), ``"prepared"`` (switched to the desktop started ahead with the task
        #: already set up on it), ``"restart"`` (asked for) or ``"fallback"`` (survivors, X server state that
        #: could not be put back, or a desktop started ahead that failed).
        self.last_reset_kind = ""
        try:
            self._processes.boot(time.monotonic() + self.config.timeouts.reset)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ lifecycle helpers
    def __enter__(self) -> LocalDesktop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def screen_size(self) -> tuple[int, int]:
        """``(width, height)`` of the screen."""
        return self.config.screen

    @property
    def display(self) -> Display:
        """The X server (raises :class:`~legato_gym.errors.StateError` once closed)."""
        return self._processes.display

    @property
    def client(self) -> DesktopClient:
        """The client of the in-desktop server (raises :class:`~legato_gym.errors.StateError` once closed)."""
        return self._processes.client

    @property
    def pids(self) -> list[int]:
        """Host pids of this desktop's top processes (X server, window manager, sandbox init)."""
        return self._processes.pids

    def tcp_endpoint(self) -> tuple[str, int]:
        """``(host, port)`` of a loopback TCP forwarder to the in-desktop server (started on first use).

        The port outlives fast resets and restarts; it is what OSWorld's controllers, which speak HTTP over
        TCP, connect to (see :mod:`.forward`).
        """
        if self._closed:
            raise StateError("tcp_endpoint() called after close(); create a new LocalDesktop")
        return self._processes.endpoint("server")

    def devtools_endpoint(self) -> tuple[str, int]:
        """``(host, port)`` of a loopback TCP forwarder to Chrome's DevTools port inside the desktop.

        OSWorld's tasks start Chrome with ``--remote-debugging-port=1337`` and ``socat`` from 9222 to it,
        as on the VM; this port reaches the sandbox's 9222 (through :mod:`.relay`), and is what
        desktop-env's Chrome getters get as ``chromium_port``. It outlives fast resets and restarts.
        """
        if self._closed:
            raise StateError("devtools_endpoint() called after close(); create a new LocalDesktop")
        return self._processes.endpoint("devtools")

    def vlc_endpoint(self) -> tuple[str, int]:
        """``(host, port)`` of a loopback TCP forwarder to VLC's HTTP interface inside the desktop.

        The baseline ``vlcrc`` turns the interface on, on port 8080 with the password ``password``, as on
        OSWorld's VM (:mod:`.apps`); this port reaches it (through :mod:`.relay`), and is what desktop-env's
        ``vlc_playing_info`` getter gets as ``vlc_port``. It outlives fast resets and restarts.
        """
        if self._closed:
            raise StateError("vlc_endpoint() called after close(); create a new LocalDesktop")
        return self._processes.endpoint("vlc")

    def close(self) -> None:
        """Kill the sandbox (its whole pid namespace), the window manager and the X server. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._processes.close()

    # ------------------------------------------------------------------ the contract
    @classmethod
    def check_tasks(
        cls, tasks: Sequence[Task], config: DesktopConfig | None = None, *, python: str | None = None
    ) -> list[Verdict]:
        """Refuse, at load time and all at once, the tasks this machine's local desktop cannot run faithfully.

        Checks every task's apps, setup steps, getters, metrics, services and live-web or Google needs
        against this host and the grader the desktops will use (:mod:`.coverage`) without booting a desktop.
        ``DesktopEnv``, the vector env and ``legato rl collect`` call it on the tasks they are given.

        Args:
            tasks: the tasks.
            config: the desktops' config (its ``options`` pick the grader and the file cache).
            python: the interpreter the desktops will run in (a vector env's workers); default: this one.

        Raises:
            UnsupportedTaskError: one line per refused task, with the reason.
        """
        options = typed_options((config or DesktopConfig()).options, LocalOptions, "local")
        grader = resolve_grader(options.grader, python)
        return _check_tasks(tasks, Capabilities.detect(grader=grader, cache=file_cache(options)))

    def check_task(self, task: Task) -> None:
        """Raise :class:`~legato_gym.errors.UnsupportedTaskError` if this desktop cannot run or grade ``task``.

        The same check as :meth:`check_tasks` (with this desktop's grader), for a task given at reset.
        """
        if self._capabilities is None:
            self._capabilities = Capabilities.detect(grader=self.grader, cache=self.files)
        _check_tasks([task], self._capabilities)
        self._grading.check(task)

    def expect_next(self, task: Task | None) -> None:
        """The task of the reset after the coming one, as far as the caller knows (``None``: not known).

        With ``LocalOptions.prestart``, the desktop started ahead during the coming episode is set up for
        ``task`` (a reset of it is then only the switch), or left bare for ``None``. Without a word, the
        desktop guesses from the runs of tasks it was given (:class:`.prestart.SetupGuess`).
        """
        self._next_hint = task

    def reset(self, task: Task) -> str:
        """Kill the last episode's apps, restore the home baseline, then run the task's setup.

        Returns:
            ``fast`` (in place), ``ahead`` (switched to the desktop started ahead), ``prepared`` (to one set up
            ahead for this task), ``restart`` or ``fallback`` (the whole desktop restarted).
        """
        if self._closed:
            raise StateError("reset() called after close(); create a new LocalDesktop")
        self._hint, self._next_hint = self._next_hint, UNKNOWN
        self.check_task(task)
        deadline = time.monotonic() + self.config.timeouts.reset
        self._task, self._actions, self._expected_windows, self._expected_titles = None, [], 0, []
        try:
            office = opens_office_first(list(task.config.get("config") or []))
            self.last_reset_kind = self._processes.reset(deadline, office=office, task=task)
            prepared = self._processes.prepared
            if prepared is not None:  # the setup ran on this desk while the last episode went on
                self._grading.adopt(task)
                windows, titles = prepared.windows, list(prepared.titles)
            else:
                settle = self._waits.settle_windows if self.config.ready_signal else None
                windows, titles = self._grading.setup(task, deadline, settle)
        except DesktopError:
            raise
        except (OSError, ValueError) as exc:
            raise DesktopCrashed(f"reset for task {task.task_id} failed: {exc}") from exc
        self._expected_windows, self._expected_titles = windows, titles
        self._task = task
        self._episode_hits = self._hits_seen = self._processes.bound_hits()  # the agent's phase starts here
        self._episode_overflows = self._processes.overflows()
        return self.last_reset_kind

    def wait_after_reset(self) -> Waited:
        """Ready signal: the setup's windows mapped and the screen settled (else OSWorld's scaled sleep)."""
        self._require_task("wait_after_reset")
        if not self.config.ready_signal:
            waited = fixed_wait(30 * self.config.fixed_wait)
            self._start_next()
            return waited
        start = time.monotonic()
        deadline = start + self.config.timeouts.ready
        ready = self._waits.settle_windows(self._expected_windows, deadline, self._expected_titles)
        self._last_input = time.monotonic()
        self._start_next()
        return Waited(seconds=time.monotonic() - start, ready=ready)

    def observe(self) -> Observation:
        """The screen (read from the X server's framebuffer, which the host sizes) and the instruction."""
        task = self._require_task("observe")
        with self._agent_phase(self._episode_hits):
            return Observation(screenshot=self.display.screenshot(), instruction=task.instruction)

    def act(self, action: str) -> ActResult:
        """Run one ``pyautogui`` action inside the sandbox (a fresh process), then wait for the screen.

        Raises:
            AgentFault: the action destroyed or exhausted the desktop (:meth:`_agent_phase`), including a
                bound hit during an action the desktop survived.
        """
        self._require_task("act")
        self._start_next()  # if wait_after_reset() was not called
        self._actions.append(action)
        self._grading.record(action)
        with self._agent_phase(self._episode_hits):
            result = self._act(action)
        # a bound hit since the last look (during this action, or by what an earlier one left running), even if
        # the desktop survived it: the agent exhausted its desktop
        now = self._processes.bound_hits()
        hits, self._hits_seen = now.since(self._hits_seen), now
        if hits:
            cause = hits[0].partition(":")[0]
            raise AgentFault(cause, f"the agent's actions hit the desktop's bounds ({'; '.join(hits)}), the last: "
                             f"{action[-200:]!r}")  # fmt: skip
        return result

    @contextlib.contextmanager
    def _agent_phase(self, since: BoundHits) -> Iterator[None]:
        """Turn a desktop failure in the agent's phase into :class:`AgentFault` when the evidence says the
        agent caused it (docs/reliability.md, "A desktop the agent destroys"), else let it through:

        * an answer over its cap (:class:`ReplyTooLarge`), or a forwarded one cut at its cap;
        * the desktop's cgroup hit its process or memory bound since ``since`` (the episode's start);
        * the server ended from inside the sandbox (only processes of its uid, the agent's, can end it).
        """
        try:
            yield
        except Exception as exc:
            # a forwarded answer cut at its cap fails desktop-env's getter in its own way: the cut is the cause
            self._check_overflows(exc)
            if not isinstance(exc, DesktopError) or not self._actions:  # before the agent acted: not its doing
                raise
            fault = self._fault(exc, since)
            if fault is not None:
                raise fault from exc
            raise
        self._check_overflows(None)

    def _check_overflows(self, exc: Exception | None) -> None:
        """Raise if a loopback forwarder cut an answer at its cap since the last look (:class:`.UnixForwarder`)."""
        overflows = self._processes.overflows()
        if overflows <= self._episode_overflows:
            return
        self._episode_overflows = overflows
        message = "a forwarded answer of the desktop passed its cap and was cut"
        if not self._actions:
            raise ReplyTooLarge(message) from exc
        raise AgentFault("reply_too_large", message) from exc

    def _fault(self, exc: DesktopError, since: BoundHits) -> AgentFault | None:
        if isinstance(exc, ReplyTooLarge):
            return AgentFault("reply_too_large", str(exc))
        if hits := self._processes.bound_hits().since(since):
            return AgentFault(hits[0].partition(":")[0], f"{exc} (the desktop's cgroup: {'; '.join(hits)})")
        if isinstance(exc, DesktopCrashed):
            ended = self._processes.server_ended(_SERVER_EXIT_S)
            if ended is not None:
                return AgentFault("server_killed", f"{exc} ({ended}, from inside the sandbox)")
        return None

    def _act(self, action: str) -> ActResult:
        start = time.monotonic()
        still: dict[str, Any] = {}
        if action not in SPECIAL_ACTIONS:
            prefix = ACTION_PREFIX
            if self.options.pyautogui_pause is not None:
                set_pause = f"pyautogui.PAUSE = {float(self.options.pyautogui_pause)!r}; "
                prefix = prefix.replace("{command}", set_pause + "{command}")
            command = prefix.format(command=action)
            result = self._run_action(command)
            if result.get("status") != "success":
                raise DesktopCrashed(f"the desktop could not run the action: {result.get('message')}")
            if result.get("returncode"):
                logger.info("action exited with %s: %s", result.get("returncode"), (result.get("error") or "")[-300:])
            still = result.get("still") or {}
        act_s = time.monotonic() - start
        self._last_input = time.monotonic()
        if not self.config.ready_signal:
            pause = self.config.fixed_wait * (2 if action == "WAIT" else 1)
            return ActResult(act_s=act_s, wait_s=fixed_wait(pause).seconds)
        if action in ("DONE", "FAIL"):
            return ActResult(act_s=act_s)
        if still.get("how") == "damage":  # the server waited, in the same call: its time is the wait's
            waited = float(still.get("seconds") or 0.0)
            return ActResult(act_s=max(0.0, act_s - waited), ready_s=waited)
        settle_start = time.monotonic()  # the server cannot watch the screen: compare frames here
        self._waits.wait_quiet(self._waits.busy_deadline(settle_start + self.config.timeouts.ready))
        return ActResult(act_s=act_s, ready_s=time.monotonic() - settle_start)

    def _start_next(self) -> None:
        assert self._task is not None
        self._processes.start_next(self._task, self._hint)

    def _setup_ahead(self, desk: Desk, task: Task, deadline: float) -> Prepared:
        """Run ``task``'s setup on a desk started ahead, then its ready signal (run by the prestart thread)."""
        signals = ReadySignals(desk, self.options)
        settle = signals.settle_windows if self.config.ready_signal else None
        windows, titles = self._grading.setup_ahead(task, desk, deadline, settle)
        if settle is not None:  # what wait_after_reset() waits for: done here, so the reset's wait is short
            settle(windows, deadline, titles)
        return Prepared(task_key(task), windows, tuple(titles))

    def _run_action(self, command: str) -> dict[str, Any]:
        timeout = self.config.timeouts.act
        if self.options.action_runner == "exec":
            return self.client.execute(["python", "-c", command], timeout=timeout)
        # the server kills the action at `timeout`; the margin lets its answer arrive
        body: dict[str, Any] = {"code": command, "timeout": timeout, "sync_input": self.options.sync_input}
        ready = 0.0
        if self.config.ready_signal and self.options.screen_watch == "damage":  # the wait after it (:meth:`_act`)
            ready = min(self.config.timeouts.ready, self.options.busy_s)
            body["still"] = {
                "quiet": max(self.options.settle_s, 0.1),
                "timeout": ready,
                "poll": self.options.poll_s,
                "allowance": IDLE_TICKS,
            }
        response = self.client.post_json("/legato/action", body, timeout=timeout + ready + 15)
        result = response.json()
        if not isinstance(result, dict):
            return {"status": "error", "message": repr(result)}
        if result.get("timed_out"):
            raise DeadlineExceeded(
                f"the action ran longer than timeouts.act={timeout:g} s and was killed with the processes it "
                f"started; raise DesktopConfig.timeouts.act if actions need longer: {command[-200:]!r}"
            )
        return result

    def wait_before_eval(self) -> Waited:
        """Run the task's post-config, then wait until the screen settles (or OSWorld's scaled sleep)."""
        task = self._require_task("wait_before_eval")
        with self._agent_phase(self._episode_hits):
            return self._wait_before_eval(task)

    def _wait_before_eval(self, task: Task) -> Waited:
        start = time.monotonic()
        deadline = start + self.config.timeouts.ready
        postconfig = list(task.evaluator.get("postconfig") or [])
        settle = self._waits.settle_windows if self.config.ready_signal else None
        self._grading.postconfig(task, postconfig, deadline, settle, self._expected_windows)
        if postconfig:
            self._last_input = time.monotonic()
        if not self.config.ready_signal:
            fixed_wait(10 * self.config.fixed_wait)
            return Waited(seconds=time.monotonic() - start, ready=False)
        ready = self._waits.wait_settled(deadline)
        ready = self._waits.wait_write_back(task, deadline, self._last_input) and ready
        return Waited(seconds=time.monotonic() - start, ready=ready)

    def evaluate(self) -> float:
        """Grade the task with OSWorld's getter and metric semantics (see :mod:`.evaluators`)."""
        task = self._require_task("evaluate")
        with self._agent_phase(self._episode_hits):
            return self._grading.evaluate(task, self._actions)

    def grade_locally(self) -> float:
        """Grade the desktop as it is now with the built-in grader (:mod:`.evaluators`), whatever ``grader`` is.

        For comparing the two graders on one end state (``benchmarks/parity.py``): call it after
        :meth:`evaluate`, which has run the task's post-config.

        Raises:
            UnsupportedTaskError: the built-in grader lacks one of the task's getters or metrics.
        """
        task = self._require_task("grade_locally")
        return grade_locally(task, self.client, self.state_dir, self._actions, self.files)

    def _require_task(self, call: str) -> Task:
        if self._closed:
            raise StateError(f"{call}() called after close(); create a new LocalDesktop")
        if self._task is None:
            raise StateError(f"{call}() called before reset(task); call reset(task) first")
        return self._task
