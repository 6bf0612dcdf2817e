"""``legato rl collect --follow``: continuous collection from the command line (:mod:`legato_rl.follow`).

The trainer talks to the run through one small file, ``--control FILE``, which it replaces atomically (write
a temporary file, then rename it over ``FILE``) whenever something changes; the run reads it when its
modification time changes:

* a JSON object ``{"version": "step-42", "taken": 17}``, both keys optional: ``version`` is the policy version
  the server has loaded (calls asked from then on carry it); ``taken`` the number of groups the trainer has
  consumed since the run began, across resumes (then at most ``--max-ready`` groups handed over wait for it,
  and no new attempt calls the policy while they do: each desktop holds one reset ahead, ``--no-reset-ahead``
  none);
* or a plain line of text: the version alone.

Groups are handed over by appending them to ``OUT/follow.jsonl`` (``"event": "group"``, outcome ``delivered``
or ``stale``), once their records are in ``OUT/rollouts.jsonl``: the trainer tails either file. The run ends
after ``--max-groups`` groups handed over by this command, or on Ctrl-C / SIGTERM; the summary is written either
way, and the same command resumes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legato_gym import ConfigError
from legato_rl.follow import Follower, read_follow_log

log = logging.getLogger(__name__)

#: How often the control file is looked at (seconds).
CONTROL_POLL_S = 0.2


@dataclass
class ControlFile:
    """The trainer's ``--control`` file, read when it changes."""

    path: Path | None
    version: str | None = None
    taken: int | None = None
    _seen: tuple[int, int] | None = None

    def read(self) -> bool:
        """Read the file if it changed; ``True`` when it did."""
        if self.path is None:
            return False
        try:
            stat = self.path.stat()
            seen = (stat.st_mtime_ns, stat.st_size)
            if seen == self._seen:
                return False
            text = self.path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return False
        self._seen = seen
        if not text:
            return False
        try:
            data: Any = json.loads(text) if text.startswith("{") else {"version": text}
        except ValueError:
            log.warning("--control %s is not a JSON object (written in place, not renamed?): left as it was", self.path)
            self._seen = None
            return False
        version, taken = data.get("version"), data.get("taken")
        if version is not None:
            self.version = str(version)
        if isinstance(taken, int) and not isinstance(taken, bool):
            self.taken = taken
        return True


def run_follow(follower: Follower, *, control: Path | None, max_groups: int | None) -> dict[str, Any]:
    """Run ``follower`` until ``max_groups`` groups were handed over (``None``: until a signal); its summary."""
    return asyncio.run(_run(follower, ControlFile(control), max_groups))


async def _run(follower: Follower, control: ControlFile, max_groups: int | None) -> dict[str, Any]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # the groups handed over before (a resumed run): the trainer's "taken" counts them too
    before = sum(
        1 for line in read_follow_log(follower.out) if line.get("event") == "group" and line.get("outcome") != "rerun"
    )
    handed = 0
    await follower.start()
    next_group: asyncio.Task[Any] | None = None
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set() and (max_groups is None or handed < max_groups):
            if control.read() and control.version is not None and control.version != follower.version:
                log.info("version %s loaded (from %s)", control.version, control.path)
                follower.set_version(control.version)
            may_take = control.taken is None or before + handed - control.taken < follower.options.max_ready
            if next_group is None and may_take:
                next_group = asyncio.ensure_future(follower.next_group())
            waits = [stopping] + ([next_group] if next_group is not None else [])
            await asyncio.wait(waits, timeout=CONTROL_POLL_S, return_when=asyncio.FIRST_COMPLETED)
            if next_group is not None and next_group.done():
                try:
                    group = next_group.result()
                except StopAsyncIteration:
                    break
                finally:
                    next_group = None
                handed += 1
                log.info("group %s handed over (staleness %d)%s", group.group_id, group.staleness,
                         " marked stale" if group.stale else "")  # fmt: skip
    finally:
        stopping.cancel()
        if next_group is not None:
            next_group.cancel()
            with suppress(asyncio.CancelledError, StopAsyncIteration):
                await next_group
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return await follower.stop()


def check_follow_options(follow: bool, **given: Any) -> None:
    """Refuse the options of ``--follow`` given without it."""
    named = [name for name, value in given.items() if value]
    if named and not follow:
        raise ConfigError(f"{', '.join(named)} apply to continuous collection only: add --follow")
