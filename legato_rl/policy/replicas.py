"""Routing calls to replicas of one model: sticky per rollout, least loaded for new ones, failing ones avoided.

A replica that fails is avoided for ``Limits.replica_cooldown`` seconds, then tried again; its first
answer clears it.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["Replicas"]

logger = logging.getLogger("legato_rl.policy")  # one logger for the policy client, whichever module logs


class Replicas:
    """Which replica serves which rollout: sticky per rollout, least in flight for new ones, failures avoided."""

    def __init__(self, urls: Sequence[str], cooldown: float, max_sticky: int = 65536) -> None:
        self.urls = tuple(urls)
        self.cooldown = cooldown
        self.inflight = dict.fromkeys(self.urls, 0)
        self.assigned = dict.fromkeys(self.urls, 0)
        self.down_until: dict[str, float] = {}
        self._sticky: OrderedDict[str, str] = OrderedDict()
        self._max_sticky = max_sticky

    def healthy(self, url: str, now: float) -> bool:
        return self.down_until.get(url, 0.0) <= now

    def acquire(self, rollout_id: str) -> str:
        """Pick the replica for one request of ``rollout_id`` and count it in flight."""
        now = time.monotonic()
        url = self._sticky.get(rollout_id)
        if url is None or not self.healthy(url, now):
            candidates = [u for u in self.urls if self.healthy(u, now)]
            if candidates:
                new = min(candidates, key=lambda u: (self.inflight[u], self.assigned[u], self.urls.index(u)))
            else:  # every replica is failing: try the one whose cooldown ends first
                new = min(self.urls, key=lambda u: self.down_until.get(u, 0.0))
            if url is not None:
                self.assigned[url] -= 1
                if new != url:
                    logger.info("rollout %s moves from failing replica %s to %s", rollout_id, url, new)
            self._sticky[rollout_id] = new
            self.assigned[new] += 1
            url = new
            while len(self._sticky) > self._max_sticky:
                _, old = self._sticky.popitem(last=False)
                self.assigned[old] -= 1
        self._sticky.move_to_end(rollout_id)
        self.inflight[url] += 1
        return url

    def release(self, url: str) -> None:
        self.inflight[url] -= 1

    def forget(self, rollout_id: str) -> None:
        url = self._sticky.pop(rollout_id, None)
        if url is not None:
            self.assigned[url] -= 1

    def failed(self, url: str) -> None:
        if len(self.urls) > 1 and self.healthy(url, time.monotonic()):
            logger.warning("policy replica %s is failing; avoiding it for %.0fs", url, self.cooldown)
        self.down_until[url] = time.monotonic() + self.cooldown

    def answered(self, url: str) -> None:
        if self.down_until.pop(url, None) is not None and len(self.urls) > 1:
            logger.info("policy replica %s answers again", url)
