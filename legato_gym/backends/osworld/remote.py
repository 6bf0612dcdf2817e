"""An OSWorld desktop driven from an interpreter where desktop-env cannot be imported (legato's own).

:class:`RemoteDesktop` starts one desktop worker (:mod:`legato_gym.vector.worker`) under desktop-env's
interpreter (``DesktopConfig.worker_python``, else the one ``legato osworld setup`` recorded) and calls the
desktop's JSON-friendly ``remote_*`` methods over the worker protocol. It is what
``gymnasium.make("legato/OSWorld-v0")`` runs on; the vector env starts its workers in desktop-env's
interpreter directly and does not need it.
"""

from __future__ import annotations

import base64
import select
import time
from dataclasses import replace
from typing import Any

from legato_gym import errors
from legato_gym.config import DesktopConfig
from legato_gym.contract import ActResult, Observation, Task, Waited
from legato_gym.errors import DeadlineExceeded, DesktopCrashed, DesktopError, LegatoError, MissingDependencyError
from legato_gym.png import check_screenshot, decode_png
from legato_gym.transport.process import WorkerProcess
from legato_gym.transport.protocol import PROTOCOL_VERSION, config_to_json

__all__ = ["RemoteDesktop", "resolve_python"]


def resolve_python(config: DesktopConfig) -> str:
    """desktop-env's interpreter for ``config``: ``config.worker_python``, else the recorded one.

    Raises:
        MissingDependencyError: neither is set; the message says to run ``legato osworld setup``.
    """
    from legato_gym.desktopenv.venv import default_venv, recorded_python

    python = config.worker_python or recorded_python()
    if python is None:
        raise MissingDependencyError(
            f"the osworld backend runs in desktop-env's own interpreter, and none is set up at {default_venv()}: "
            "run `legato osworld setup` (or set DesktopConfig.worker_python to an interpreter with desktop-env)"
        )
    return python


class RemoteDesktop:
    """The osworld desktop in a worker process under desktop-env's interpreter."""

    def __init__(self, config: DesktopConfig, *, seed: int | None = None) -> None:
        self.config = replace(config, worker_python=resolve_python(config))
        self.last_reset_kind = ""
        self._id = 0
        self._proc = WorkerProcess(0, python=self.config.worker_python)
        self._closed = False
        try:
            hello = self._receive(time.monotonic() + 120.0)
            if hello.get("kind") != "hello" or hello.get("protocol") != PROTOCOL_VERSION:
                raise DesktopCrashed(f"desktop-env's interpreter answered {hello!r}; reinstall legato there")
            args = {
                "backend": "osworld",
                "config": config_to_json(self.config),
                "seed": seed,
                "env_id": 0,
                "max_steps": 1 << 30,
                "screenshots": "blob",
                "shm_fd": None,
                "shm_size": 0,
            }
            self._request("init", args, self.config.timeouts.reset)
        except BaseException:
            self._proc.kill()
            self._closed = True
            raise

    def _receive(self, deadline: float) -> dict[str, Any]:
        proc = self._proc
        while not proc.frames.frames:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded("the osworld desktop worker did not answer before the deadline")
            ready, _, _ = select.select([proc.sock.fileno(), proc.stderr_fd], [], [], remaining)
            if proc.stderr_fd in ready:
                proc.read_stderr()
            if proc.sock.fileno() in ready and not proc.read():
                proc.kill()
                raise DesktopCrashed(f"the osworld desktop worker died: {proc.stderr_text()[-2000:]}")
        message, _ = proc.frames.frames.pop(0)
        return message

    def _request(self, op: str, args: dict[str, Any], timeout: float) -> Any:
        self._id += 1
        deadline = time.monotonic() + timeout
        self._proc.send({"kind": "request", "id": self._id, "op": op, "args": args}, deadline)
        reply = self._receive(deadline)
        if not reply.get("ok"):
            error = reply.get("error") or {}
            name, message = str(error.get("type", "Exception")), str(error.get("message", ""))
            cls = getattr(errors, name, None)
            if cls is errors.AgentFault:
                cause, _, text = message.partition(": ")
                raise errors.AgentFault(cause, text)
            if isinstance(cls, type) and issubclass(cls, DesktopError):
                raise cls(message, remote_traceback=error.get("traceback"))
            if isinstance(cls, type) and issubclass(cls, LegatoError):
                raise cls(message)
            raise DesktopError(f"{name}: {message}", remote_traceback=error.get("traceback"))
        return (reply.get("result") or {}).get("value")

    def _call(self, name: str, *args: Any, timeout: float) -> Any:
        return self._request("call", {"name": name, "args": list(args), "kwargs": {}}, timeout)

    def reset(self, task: Task) -> str:
        self.last_reset_kind = str(self._call("remote_reset", task.to_json(), timeout=self.config.timeouts.reset + 30))
        return self.last_reset_kind

    def wait_after_reset(self) -> Waited:
        seconds, ready = self._call("remote_wait_after_reset", timeout=self.config.timeouts.ready + 60)
        return Waited(seconds=float(seconds), ready=bool(ready))

    def observe_png(self) -> tuple[bytes, str]:
        png, instruction = self._call("remote_observe", timeout=120.0)
        return check_screenshot(base64.b64decode(png), self.config.screen), str(instruction)

    def observe(self) -> Observation:
        png, instruction = self.observe_png()
        return Observation(screenshot=decode_png(png), instruction=instruction, png=png)

    def act(self, action: str) -> ActResult:
        act_s, ready_s, wait_s = self._call("remote_act", action, timeout=self.config.timeouts.longest_step)
        return ActResult(act_s=float(act_s), ready_s=float(ready_s), wait_s=float(wait_s))

    def wait_before_eval(self) -> Waited:
        seconds, ready = self._call("remote_wait_before_eval", timeout=self.config.timeouts.ready * 2 + 60)
        return Waited(seconds=float(seconds), ready=bool(ready))

    def evaluate(self) -> float:
        return float(self._call("evaluate", timeout=self.config.timeouts.evaluate))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._id += 1
            self._proc.send({"kind": "request", "id": self._id, "op": "close", "args": {}}, time.monotonic() + 10)
            self._receive(time.monotonic() + 60)
        except (LegatoError, OSError, TimeoutError):
            pass
        finally:
            self._proc.wait_exit(10)
