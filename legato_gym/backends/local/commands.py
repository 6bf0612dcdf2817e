"""The words of a setup step's command, as OSWorld's tasks write it: a list of words, or one shell string."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

__all__ = ["command_words"]


def command_words(command: Any) -> list[str]:
    """``["libreoffice", "--calc"]`` for ``["libreoffice", "--calc"]`` and for ``"libreoffice --calc"``.

    A string that is not valid shell (an unclosed quote) is split on whitespace.
    """
    if isinstance(command, Sequence) and not isinstance(command, str):
        return [str(word) for word in command]
    try:
        return shlex.split(str(command))
    except ValueError:
        return str(command).split()
