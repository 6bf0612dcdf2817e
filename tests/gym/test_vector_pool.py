"""The vector env's parts: the episode state machine, and the worker pool on a launcher it is given."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from legato_gym.backends.fake import default_tasks
from legato_gym.config import DesktopConfig
from legato_gym.errors import DesktopCrashed, StateError
from legato_gym.transport.handles import Frame, WorkerHandle, WorkerLauncher
from legato_gym.transport.process import ProcessLauncher, WorkerProcess
from legato_gym.transport.protocol import PROTOCOL_VERSION
from legato_gym.vector import DesktopVectorEnv
from legato_gym.vector.ray_hosts import RayWorker
from legato_gym.vector.state import TRANSITIONS, EpisodeState, Event, Phase
from legato_gym.vector.worker import _error, _Worker

CONFIG = DesktopConfig(screen=(320, 240))

# ----------------------------------------------------------------------------- the episode state machine


def test_a_desktop_lost_between_calls_fails_its_next_step_once_with_that_error() -> None:
    state = EpisodeState(3)
    state.advance(Event.RESET_DONE)
    first, second = DesktopCrashed("worker 1 died"), DesktopCrashed("worker 2 died")
    state.advance(Event.LOST_IDLE, first)
    state.advance(Event.LOST_IDLE, second)  # its replacement died too: the episode still holds the first loss
    state.advance(Event.START_FAILED)
    assert state.phase is Phase.LOST and state.steppable
    assert state.advance(Event.LOSS_TAKEN) is first
    assert state.phase is Phase.NEW and state.advance(Event.LOSS_TAKEN) is None
    with pytest.raises(StateError, match=r"step: env 3 needs a reset because it was not reset"):
        state.require_steppable("step")


def test_a_reset_drops_a_held_loss_and_an_ended_episode_needs_a_reset() -> None:
    state = EpisodeState(0)
    state.advance(Event.RESET_DONE)
    state.advance(Event.LOST_IDLE, DesktopCrashed("gone"))
    state.advance(Event.RESET_SENT)
    assert state.phase is Phase.NEW and state.lost is None
    state.advance(Event.RESET_DONE)
    state.advance(Event.STEPPED)
    assert state.phase is Phase.RUNNING
    state.advance(Event.ENDED)
    with pytest.raises(StateError, match=r"atruncate: env 0 needs a reset because its episode ended"):
        state.require_steppable("atruncate")
    state.advance(Event.LOST_IDLE, DesktopCrashed("gone"))  # no episode running: nothing to hold
    assert state.phase is Phase.NEW and state.lost is None


def test_only_a_running_episode_can_be_lost_and_every_phase_can_be_reset() -> None:
    lost = {phase for phase in Phase if TRANSITIONS.get((phase, Event.LOST_IDLE), phase) is Phase.LOST}
    assert lost == {Phase.RUNNING, Phase.LOST}
    assert {TRANSITIONS[(phase, Event.RESET_DONE)] for phase in Phase} == {Phase.RUNNING}
    assert {TRANSITIONS[(phase, Event.REPLACED)] for phase in Phase} == {Phase.NEW}


# ----------------------------------------------------------------------------- the pool on a launcher


class InprocHandle:
    """A desktop run in this process behind the :class:`WorkerHandle` interface (no process, no Ray)."""

    def __init__(self, env_id: int, crash_on: str | None) -> None:
        self.env_id = env_id
        self.pid = -1
        self.alive = True
        self.shm_fd: int | None = None
        self.crash_on = crash_on
        self._desktop = _Worker()
        self._gone = False
        self._read, self._wake = socket.socketpair()
        self._read.setblocking(False)
        self._frames: list[Frame] = [({"kind": "hello", "protocol": PROTOCOL_VERSION}, None)]
        self._wake.send(b"\0")

    @property
    def name(self) -> str:
        return f"in-process desktop {self.env_id}"

    @property
    def exit_status(self) -> int | None:
        return None

    def fds(self) -> tuple[int, ...]:
        return (self._read.fileno(),) if self.alive else ()

    def receive(self, fd: int) -> tuple[list[Frame], bool]:
        while True:
            try:
                if not self._read.recv(4096):
                    break
            except BlockingIOError:
                break
        frames, self._frames = self._frames, []
        return frames, not self._gone

    def send(self, message: Mapping[str, Any], deadline: float) -> None:
        if self._gone:
            raise OSError(f"{self.name} is gone")
        op, reply = str(message["op"]), {"kind": "response", "id": message["id"]}
        blob: bytes | memoryview = b""
        try:
            if op == self.crash_on:
                raise DesktopCrashed(f"{op!r} took the desktop down")
            if op == "close":
                self._desktop.close()
                reply["ok"] = True
            else:
                result, blob = self._desktop.handle(op, message.get("args") or {})
                reply.update(ok=True, result=result)
        except Exception as exc:
            reply.update(ok=False, error=_error(exc))
        self._frames.append((reply, bytearray(blob) if blob else None))
        self._wake.send(b"\0")

    def die(self) -> None:
        """The desktop is gone, as a worker whose process exited."""
        self._gone = True
        self._wake.send(b"\0")

    def screen(self, shape: tuple[int, ...]) -> npt.NDArray[np.uint8]:
        raise ValueError("no shared buffer")

    def stderr_text(self) -> str:
        return ""

    def kill(self) -> None:
        if self.alive:
            self.alive = False
            self._read.close()
            self._wake.close()

    def wait_exit(self, timeout: float) -> bool:
        self.kill()
        return True


class InprocLauncher:
    def __init__(self, crash_on: str | None = None) -> None:
        self.crash_on = crash_on
        self.started: list[InprocHandle] = []
        self.closed = False

    def start(self, env_id: int) -> InprocHandle:
        handle = InprocHandle(env_id, self.crash_on)
        self.started.append(handle)
        return handle

    def close(self) -> None:
        self.closed = True


def inproc_env(launcher: InprocLauncher, num_envs: int = 2) -> DesktopVectorEnv:
    class InprocVectorEnv(DesktopVectorEnv):
        def _launcher(self) -> WorkerLauncher:
            return launcher

    return InprocVectorEnv(num_envs, "fake", CONFIG, seed=0, max_steps=3)


def test_the_pool_drives_and_replaces_desktops_through_the_launcher_it_is_given() -> None:
    launcher = InprocLauncher()
    env = inproc_env(launcher)
    task = default_tasks(CONFIG)[0]
    try:
        assert [h.env_id for h in launcher.started] == [0, 1]
        obs, info = env.reset(options={"task": task})
        assert obs["screenshot"].shape == (2, 240, 320, 3) and obs["screenshot"].any()
        assert list(info["task_id"]) == [task.task_id] * 2

        async def scenario() -> None:
            await env.areset(1, task)
            launcher.started[1].die()  # while its caller thinks about the next action
            end = asyncio.get_running_loop().time() + 30
            while len(launcher.started) < 3:  # the pool notices and starts a replacement at once
                assert asyncio.get_running_loop().time() < end, "the lost desktop was not replaced"
                await asyncio.sleep(0.01)
            with pytest.raises(DesktopCrashed, match="in-process desktop 1 died") as caught:
                await env.astep(1, "WAIT")
            assert caught.value.env_id == 1
            assert [h.env_id for h in launcher.started] == [0, 1, 1]  # replaced by the launcher it was given
            await env.areset(1, task)
            _, _, _, truncated, _ = await env.astep(1, "WAIT")
            assert not truncated

        asyncio.run(scenario())
    finally:
        env.close()
    assert launcher.closed and not any(h.alive for h in launcher.started)


def test_a_call_that_takes_the_desktop_down_fails_the_running_episode_not_a_fresh_desktop() -> None:
    launcher = InprocLauncher(crash_on="call")
    env = inproc_env(launcher, num_envs=1)
    try:
        env.reset(options={"task": default_tasks(CONFIG)[0]})
        with pytest.raises(DesktopCrashed, match="took the desktop down"):
            env.call("screen_size")
        assert len(launcher.started) == 2  # replaced
        # The episode was on the desktop that went down: its step fails as the infra failure it is (collect
        # retries it), rather than reaching the replacement, which was never reset.
        env.send(["WAIT"])
        _, _, _, truncated, info = env.recv()
        assert truncated[0] and isinstance(info["error"][0], DesktopCrashed)
        assert "took the desktop down" in str(info["error"][0])
    finally:
        env.close()


def test_local_and_ray_workers_are_handles_and_the_ray_one_fakes_no_process() -> None:
    worker = ProcessLauncher(python=None, env={}, screen_bytes=None).start(0)
    try:
        assert isinstance(worker, WorkerHandle) and worker.fds() == (worker.sock.fileno(), worker.stderr_fd)
    finally:
        worker.kill()
    assert worker.fds() == () and worker.exit_status is not None
    assert not issubclass(RayWorker, WorkerProcess) and not hasattr(RayWorker, "proc")
    assert all(hasattr(RayWorker, name) for name in ("fds", "receive", "send", "screen", "kill", "wait_exit"))
    assert isinstance(InprocLauncher(), WorkerLauncher) and isinstance(
        ProcessLauncher(python=None, env={}, screen_bytes=None), WorkerLauncher
    )
