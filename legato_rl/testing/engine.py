"""The reference server's simulated engine: its compute time (:class:`Latency`) and its prefix cache.

:class:`PrefixCache` is vLLM's automatic prefix caching over the toy tokenizer's tokens, so the
``cached_tokens`` a :class:`~legato_rl.testing.server.ReferencePolicyServer` reports are the ones a real
server would: the longest cached block-aligned prefix, at most ``prompt_tokens - 1``.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Latency", "PrefixCache"]


@dataclass(frozen=True)
class Latency:
    """The server's simulated compute time per chat request.

    ``fixed + per_prompt_token * uncached_prompt_tokens + per_token * completion_tokens + jitter * U(0, 1)``
    seconds, with ``U`` drawn from a generator seeded by ``seed``.
    """

    fixed: float = 0.0
    per_prompt_token: float = 0.0
    per_token: float = 0.0
    jitter: float = 0.0
    seed: int = 0

    def delay(self, uncached_prompt_tokens: int, completion_tokens: int, draw: float) -> float:
        """Seconds for one request, given a uniform ``draw`` in ``[0, 1)``."""
        return (
            self.fixed
            + self.per_prompt_token * uncached_prompt_tokens
            + self.per_token * completion_tokens
            + self.jitter * draw
        )


class PrefixCache:
    """vLLM-style automatic prefix caching over token keys: an LRU of full blocks keyed by chained hashes.

    Args:
        block_size: tokens per block (vLLM: 16).
        capacity: blocks kept (the least recently used are evicted).
        min_tokens: prompts shorter than this report no cache hit (OpenAI caches from 1024 tokens).
    """

    def __init__(self, block_size: int = 16, capacity: int = 8192, min_tokens: int = 0) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self.min_tokens = min_tokens
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def _hashes(self, keys: Sequence[object]) -> list[bytes]:
        out: list[bytes] = []
        parent = b""
        size = self.block_size
        for start in range(0, len(keys) - size + 1, size):
            block = repr(tuple(keys[start : start + size])).encode()
            parent = hashlib.blake2b(parent + block, digest_size=16).digest()
            out.append(parent)
        return out

    def lookup(self, keys: Sequence[object]) -> int:
        """Tokens of the longest cached block-aligned prefix of ``keys`` (at most ``len(keys) - 1``)."""
        if len(keys) < self.min_tokens:
            return 0
        hits = 0
        limit = (len(keys) - 1) // self.block_size
        with self._lock:
            for digest in self._hashes(keys)[:limit]:
                if digest not in self._blocks:
                    break
                self._blocks.move_to_end(digest)
                hits += 1
        return hits * self.block_size

    def insert(self, keys: Sequence[object]) -> None:
        """Cache every full block of ``keys``."""
        with self._lock:
            for digest in self._hashes(keys):
                self._blocks[digest] = None
                self._blocks.move_to_end(digest)
            while len(self._blocks) > self.capacity:
                self._blocks.popitem(last=False)

    def clear(self) -> None:
        """Drop every block (vLLM ``/reset_prefix_cache``)."""
        with self._lock:
            self._blocks.clear()
