"""Retrying a policy call: bounded exponential backoff with jitter, only for retryable failures."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from legato_rl.errors import PolicyError, PolicyHTTPError

__all__ = ["backoff_delay", "retry_policy_call"]

logger = logging.getLogger("legato_rl.policy")  # one logger for the policy client, whichever module logs

T = TypeVar("T")


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random, retry_after: float | None = None) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): exponential, capped, jittered.

    The delay is ``min(cap, base * 2**(attempt-1))`` scaled by a random factor in ``[0.5, 1]``; a server's
    ``Retry-After`` raises it, but never above ``cap``.
    """
    delay: float = min(cap, base * 2 ** (attempt - 1)) * rng.uniform(0.5, 1.0)
    if retry_after is not None:
        delay = max(delay, min(cap, retry_after))
    return delay


async def retry_policy_call(
    attempt: Callable[[], Awaitable[T]],
    *,
    retries: int,
    backoff: float,
    backoff_max: float,
    rng: random.Random,
    what: str = "policy call",
) -> T:
    """Run ``attempt`` until it succeeds, retrying only retryable :class:`PolicyError` s.

    The one retry helper of the policy client. Retryable: :class:`PolicyTimeout`,
    :class:`PolicyUnreachable`, :class:`PolicyHTTPError` with 5xx or 429, and a body that is not JSON.
    Anything else, and the last failure once ``retries`` are spent, propagates.
    """
    failures = 0
    while True:
        try:
            return await attempt()
        except PolicyError as exc:
            if not exc.retryable or failures >= retries:
                raise
            failures += 1
            retry_after = exc.retry_after if isinstance(exc, PolicyHTTPError) else None
            delay = backoff_delay(failures, backoff, backoff_max, rng, retry_after)
            logger.warning("%s failed (%s); retry %d/%d in %.2fs", what, exc, failures, retries, delay)
            await asyncio.sleep(delay)
