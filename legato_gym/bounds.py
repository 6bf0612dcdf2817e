"""The caps on every byte the host reads from a desktop, in one place (:class:`ReadCaps`).

A desktop's server runs where the agent runs: whatever it answers may be the agent's (a file it wrote that a
grader reads, a command's output it made huge, or a server it took over). The host therefore reads each
answer against a cap, streaming, and stops at the cap without holding the rest:

* an answer held in memory (JSON, text: ``/execute`` output, the accessibility tree, a command's result)
  at most :attr:`ReadCaps.answer_bytes`;
* a file fetched for grading or a baseline, streamed to disk, at most :attr:`ReadCaps.file_bytes`;
* a screenshot at most :attr:`ReadCaps.screenshot_bytes` of PNG, and no larger than the desktop's screen
  (its header's dimensions are checked before it is decoded).

Past a cap the read raises :class:`~legato_gym.errors.ReplyTooLarge`; a desktop turns it into the agent's
failure (:class:`~legato_gym.errors.AgentFault`) when it happens after the agent acted. The caps and what
happens past them are documented in docs/reliability.md and docs/backends.md.

Standard library only: desktop workers may run under another interpreter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO, ClassVar

from legato_gym.errors import ConfigError, ReplyTooLarge

__all__ = ["ReadCaps", "read_capped", "write_capped"]

_MIB = 1 << 20


@dataclass(frozen=True)
class ReadCaps:
    """How many bytes the host reads from a desktop, per answer.

    Attributes:
        answer_bytes: an answer held in memory (JSON or text; 16 MiB: an accessibility tree of a busy
            Chrome is a few MiB, a command's output for grading far less).
        file_bytes: a file fetched for grading (or a home baseline), streamed to disk (256 MiB).
        screenshot_bytes: a PNG screenshot's bytes (32 MiB; a 1920x1080 screen is 0.1-3 MiB of PNG). Its
            dimensions are capped by the desktop's screen size, from ``DesktopConfig.screen``.
    """

    answer_bytes: int = 16 * _MIB
    file_bytes: int = 256 * _MIB
    screenshot_bytes: int = 32 * _MIB

    DEFAULT: ClassVar[ReadCaps]

    def __post_init__(self) -> None:
        for name in ("answer_bytes", "file_bytes", "screenshot_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 4096:
                raise ConfigError(f"ReadCaps.{name}={value!r} must be an int of at least 4096 bytes")


ReadCaps.DEFAULT = ReadCaps()


def _check_declared(declared: str | None, cap: int, what: str) -> None:
    if declared is not None and declared.strip().isdigit() and int(declared) > cap:
        raise ReplyTooLarge(f"{what}: the desktop announced {int(declared)} bytes, over the cap of {cap} bytes")


def read_capped(chunks: Iterable[bytes], cap: int, what: str, declared: str | None = None) -> bytes:
    """The bytes of ``chunks`` (a streamed answer's body) if they add up to at most ``cap``.

    Args:
        chunks: the body, as it arrives.
        cap: the most bytes held.
        what: the answer, for the message (``"POST /execute"``).
        declared: its ``Content-Length``, if any: over the cap, nothing is read.

    Raises:
        ReplyTooLarge: the body (or its declared length) is over ``cap``; at most ``cap`` plus one chunk was read.
    """
    _check_declared(declared, cap, what)
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > cap:
            raise ReplyTooLarge(f"{what}: the desktop's answer passed the cap of {cap} bytes; the rest was not read")
        parts.append(chunk)
    return b"".join(parts)


def write_capped(chunks: Iterable[bytes], out: BinaryIO, cap: int, what: str, declared: str | None = None) -> int:
    """Write ``chunks`` to ``out`` as they arrive; the number of bytes written (at most ``cap``).

    Raises:
        ReplyTooLarge: the body (or its declared length) is over ``cap``; ``out`` then holds a partial copy
            that the caller removes.
    """
    _check_declared(declared, cap, what)
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > cap:
            raise ReplyTooLarge(f"{what}: the file passed the cap of {cap} bytes; the rest was not read")
        out.write(chunk)
    return size
