"""Whether the policy server can be used: the check before a batch, and the breaker that stops one.

A batch against a dead URL, a URL without ``/v1`` or a model name the server does not serve would fail
every attempt the same way. :func:`check_policy` asks each replica for ``GET /models`` before the first
attempt and refuses to start, naming the URL and the fix. During the batch a :class:`Breaker` counts calls
that failed the same *unavailable* way in a row (no connection, no answer in time, an HTTP error status)
with no answer in between; past its threshold, or when the server fails :func:`check_policy` again, the
batch stops (:class:`~legato_rl.errors.PolicyUnavailable`) and can be resumed once the server is back. A
reply that arrived but could not be used (malformed, hostile) says nothing about the server and never counts.
"""

from __future__ import annotations

import logging

from legato_gym.suggest import suggest
from legato_rl.errors import PolicyError, PolicyHTTPError, PolicyTimeout, PolicyUnavailable, PolicyUnreachable
from legato_rl.policy import KEY_ENV_VAR, PolicyClient, PolicyConfig

__all__ = ["Breaker", "check_policy", "unavailable_kind"]

log = logging.getLogger(__name__)

FIX_URL = "give the server's OpenAI-compatible base URL, ending in /v1 (e.g. --policy-url http://host:8000/v1)"
FIX_START = "start the server (or check the host and port), then run the same command again"


def unavailable_kind(exc: BaseException) -> str | None:
    """How a failed call says the server is unavailable (``"PolicyUnreachable"``, ``"HTTP 503"``, ...), or
    ``None`` when it is a problem of one reply rather than of the server."""
    if isinstance(exc, PolicyHTTPError):
        return f"HTTP {exc.status_code}"
    if isinstance(exc, (PolicyUnreachable, PolicyTimeout)):
        return type(exc).__name__
    return None


async def check_policy(client: PolicyClient, config: PolicyConfig) -> None:
    """Check that at least one replica serves ``config.model``; log a warning for each one that does not.

    Raises:
        PolicyUnavailable: no replica can be used; the message names each URL, what it answered, and the fix.
    """
    problems: list[str] = []
    for url in config.urls:
        problem = await _check_replica(client, url, config.model)
        if problem is not None:
            problems.append(problem)
    if len(problems) == len(config.urls):
        raise PolicyUnavailable("the policy server cannot be used: " + "; ".join(problems))
    for problem in problems:
        log.warning("a replica cannot be used now (calls go to the others): %s", problem)


async def _check_replica(client: PolicyClient, url: str, model: str) -> str | None:
    try:
        served = await client.models(url)
    except PolicyHTTPError as exc:
        if exc.status_code == 404:
            return f"{url}/models answered HTTP 404: {FIX_URL}"
        if exc.status_code in (401, 403):
            return f"{url} refused the key (HTTP {exc.status_code}): set ${KEY_ENV_VAR} to the server's key"
        return f"{url}/models answered HTTP {exc.status_code}: {FIX_START}"
    except PolicyError as exc:
        return f"{url} did not answer ({exc}): {FIX_START}"
    if model not in served:
        shown = ", ".join(repr(m) for m in served[:8]) or "none"
        return (
            f"{url} does not serve model {model!r} (it serves {shown}){suggest(model, served)}: give --model "
            "the server's served model name (vLLM --served-model-name)"
        )
    return None


class Breaker:
    """Calls that failed the same unavailable way in a row, across all desktops.

    Args:
        threshold: failures in a row (with no answer in between) that stop the batch.
    """

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.kind: str | None = None
        self.count = 0

    def failed(self, kind: str) -> bool:
        """Count a call that failed as ``kind``; ``True`` once ``threshold`` failed that way in a row."""
        self.count = self.count + 1 if kind == self.kind else 1
        self.kind = kind
        return self.count >= self.threshold

    def answered(self) -> None:
        """A call was answered: the server is up."""
        self.kind, self.count = None, 0
