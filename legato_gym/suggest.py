"""The "did you mean" suffix that error messages add when a name is misspelled.

A leaf module (the standard library only), so that every layer can name the closest known value without
importing the layer that owns the names: options, tasks, backends and the vector env all use it.

Example:
    >>> suggest("osworl", ["fake", "local", "osworld"])
    "; did you mean 'osworld'?"
    >>> suggest("x", ["fake"])
    ''
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

__all__ = ["suggest"]


def suggest(value: str, candidates: Sequence[str]) -> str:
    """A ``"; did you mean 'x'?"`` suffix naming the closest candidate, or ``""`` when none is close."""
    prefixed = [c for c in candidates if value and c.startswith(value)]
    if len(prefixed) == 1:
        return f"; did you mean {prefixed[0]!r}?"
    close = difflib.get_close_matches(value, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
