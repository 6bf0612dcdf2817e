"""A small HTTP/1.1 client for policy calls: pooled keep-alive connections, whole bodies, nothing more.

A policy call is the largest part of legato's own CPU per step, and a general-purpose client spends most
of its time on what a JSON POST to a model server never needs (cookie jars, redirects, URL objects,
tracing hooks, per-request proxy lookups). This one writes each request with one call and reads the
answer with ``bytes.find``: about half the CPU of aiohttp per call, a fifth of httpx's.

What it does: ``http://`` and ``https://`` (certificates verified), bodies framed by ``Content-Length``,
``chunked`` or the end of the connection, interim ``1xx`` answers skipped, a connection kept for the next
call unless either side says ``close``, one silent retry when a reused connection turns out to have been
closed by the server before it answered, and proxies from ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY``
(``http://`` proxies: absolute-form requests, ``CONNECT`` tunnels for ``https://`` targets). What it does
not: redirects, cookies, compression, HTTP/2. Failures raise :class:`HTTPError`; an answer that does not
arrive within the deadline raises :class:`HTTPTimeout`.

Bounds: an answer's head is at most :data:`MAX_HEAD` bytes and its body at most the pool's ``max_body``
(:class:`HTTPBodyTooLarge` as soon as the ``Content-Length`` or the bytes received pass it, whatever the
framing). Requests are checked before anything is written: a header name must be an HTTP token, and no
header value, method or request target may hold a CR, an LF or another control character
(:class:`InvalidRequest`), so no value can inject a header or a second request.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import ssl
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "Answer",
    "HTTPBodyTooLarge",
    "HTTPError",
    "HTTPPool",
    "HTTPTimeout",
    "InvalidRequest",
    "check_header",
    "env_proxy",
]

#: Largest response head accepted (status line and headers).
MAX_HEAD = 64 * 1024
#: Longest chunk-size line (with extensions) of a chunked answer.
MAX_CHUNK_LINE = 1024
_BAD_VALUE = re.compile("[\x00-\x08\x0a-\x1f\x7f\u0100-\U0010ffff]")  # a tab is allowed in a value
_BAD_TARGET = re.compile("[\x00-\x20\x7f-\U0010ffff]")
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_INTERIM = range(100, 200)
_HEX_DIGITS = b"0123456789abcdefABCDEF"


class HTTPError(Exception):
    """The connection failed or the server's answer is not HTTP/1.1 that this client reads."""


class HTTPTimeout(HTTPError, TimeoutError):
    """No complete answer before the deadline."""


class HTTPBodyTooLarge(HTTPError):
    """The answer's body is larger than the pool's ``max_body``; the connection is dropped unread."""


class InvalidRequest(HTTPError, ValueError):
    """A request this client refuses to write: a header or request line that would break HTTP framing.

    Nothing is sent. The message names the header, never its value (it may be a secret).
    """


def check_header(name: str, value: str) -> None:
    """Refuse a header that cannot be written as one line of HTTP/1.1.

    Raises:
        InvalidRequest: ``name`` is not an HTTP token, or ``value`` holds a CR, LF, NUL or another control
            character (a tab is allowed), or a character outside Latin-1.
    """
    if not name or not set(name) <= _TOKEN_CHARS:
        raise InvalidRequest(f"header name {name[:40]!r} is not an HTTP token (letters, digits, -_. and the like)")
    bad = _BAD_VALUE.search(value)
    if bad is not None:
        char = bad.group()
        what = "a CR or LF" if char in "\r\n" else f"the character U+{ord(char):04X}"
        raise InvalidRequest(
            f"the value of header {name!r} holds {what} at character {bad.start()}; a header value must be one line "
            "of printable text (refused before sending, so it cannot inject headers)"
        )


def _check_line(what: str, text: str) -> None:
    bad = _BAD_TARGET.search(text)
    if bad is not None:
        raise InvalidRequest(
            f"the request {what} holds U+{ord(bad.group()):04X} at character {bad.start()}; percent-encode it "
            "(refused before sending: it would break the request line)"
        )


@dataclass(frozen=True)
class Answer:
    """An HTTP answer, read whole. ``headers`` has lower-case names (the last of repeated ones)."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class _Target(NamedTuple):
    """Where one URL's requests go: the connection's origin and the request line's target."""

    key: tuple[str, str, int]  # (scheme, host, port) of the server, through the proxy if any
    host: str
    port: int
    tls: bool
    authority: str  # the Host header
    path: str  # the request target: origin-form, or absolute-form through an http proxy
    proxy: tuple[str, int] | None
    proxy_auth: str | None  # a Proxy-Authorization header value


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP(S)_PROXY``), unless ``NO_PROXY`` covers its host."""
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def _target(url: str, proxy: str | None) -> _Target:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HTTPError(f"{url!r} is not an http:// or https:// URL")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    default_port = parts.port is None or parts.port == (443 if tls else 80)
    host_text = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    authority = host_text if default_port else f"{host_text}:{port}"
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    if proxy is None:
        return _Target((parts.scheme, parts.hostname, port), parts.hostname, port, tls, authority, path, None, None)
    pparts = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
    if pparts.scheme != "http" or not pparts.hostname:
        raise HTTPError(f"proxy {proxy!r} for {url}: only http:// proxies are supported; set NO_PROXY to skip it")
    auth = None
    if pparts.username is not None:
        user = urllib.parse.unquote(pparts.username)
        password = urllib.parse.unquote(pparts.password or "")
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    via = (pparts.hostname, pparts.port or 80)
    if not tls:  # a plain request to the proxy, naming the whole URL
        absolute = f"http://{authority}{path}"
        return _Target(("http", *via), parts.hostname, port, False, authority, absolute, via, auth)
    return _Target((parts.scheme, parts.hostname, port), parts.hostname, port, True, authority, path, via, auth)


class _Reader:
    """Incremental reader of one HTTP/1.1 answer (the head, then the body however it is framed)."""

    def __init__(self, *, head_only: bool = False, max_body: int | None = None) -> None:
        self.head_only = head_only  # a CONNECT answer: no body follows the head
        self.max_body = max_body
        self._received_body = 0  # chunked: the sum of the chunk sizes so far
        self.buffer = bytearray()
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.body: bytes | None = None  # set when the answer is complete
        self._length: int | None = None  # Content-Length, when the body is framed by it
        self._chunked = False
        self._chunks: list[bytes] = []
        self._until_close = False
        self._in_head = True

    def feed(self, data: bytes) -> None:
        self.buffer += data
        self._advance()

    def eof(self) -> None:
        """The server closed the connection: completes a body read until the close, else the answer is cut."""
        if self._until_close and not self._in_head:
            self._bound(len(self.buffer))
            self.body = bytes(self.buffer)
            self.buffer.clear()
            return
        raise HTTPError("the server closed the connection before its answer was complete")

    def _advance(self) -> None:
        while self.body is None:
            if self._in_head:
                if not self._read_head():
                    return
            elif self._chunked:
                if not self._read_chunk():
                    return
            elif self._length is not None:
                if len(self.buffer) < self._length:
                    return
                self.body = bytes(self.buffer[: self._length])
                del self.buffer[: self._length]
            else:  # read until the server closes
                self._bound(len(self.buffer))
                return

    def _bound(self, size: int) -> None:
        if self.max_body is not None and size > self.max_body:
            raise HTTPBodyTooLarge(
                f"the answer's body is larger than {self.max_body} bytes (at least {size}); it was not read"
            )

    def _read_head(self) -> bool:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                raise HTTPError(f"the answer's head is longer than {MAX_HEAD} bytes")
            return False
        lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        del self.buffer[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not (code.isdigit() and code.isascii()) or rest[3:4] not in ("", " "):
            raise HTTPError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
        status = int(code)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise HTTPError(f"malformed header line in the answer: {line[:80]!r}")
            headers[name.lower()] = value.strip()
        if status in _INTERIM:  # 100 Continue and the like: the real answer follows
            return True
        self.status, self.headers, self._in_head = status, headers, False
        connection = headers.get("connection", "").lower()
        self.keep_alive = version == "HTTP/1.1" and "close" not in connection
        if self.head_only or status in (204, 304):
            self.body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked = True
        elif "content-length" in headers:
            length = headers["content-length"]
            if not (length.isdigit() and length.isascii()):
                raise HTTPError(f"bad Content-Length {length!r}")
            self._length = int(length)
            self._bound(self._length)
        else:
            self._until_close, self.keep_alive = True, False
        return True

    def _read_chunk(self) -> bool:
        line_end = self.buffer.find(b"\r\n", 0, MAX_CHUNK_LINE + 2)
        if line_end < 0:
            if len(self.buffer) > MAX_CHUNK_LINE:
                raise HTTPError(f"a chunk-size line of the chunked answer is longer than {MAX_CHUNK_LINE} bytes")
            return False
        size_text = bytes(self.buffer[:line_end]).split(b";", 1)[0].strip()
        if not size_text or size_text.translate(None, _HEX_DIGITS):  # int() alone takes "-2", "+5", "0x5", "1_0"
            raise HTTPError(f"bad chunk size {size_text[:20]!r} in a chunked answer")
        size = int(size_text, 16)
        if size == 0:  # the last chunk, then optional trailer lines and an empty line
            rest = line_end + 2
            if self.buffer[rest : rest + 2] == b"\r\n":
                end = rest + 2
            else:
                trailers = self.buffer.find(b"\r\n\r\n", rest)
                if trailers < 0:
                    if len(self.buffer) > MAX_HEAD:
                        raise HTTPError(f"the trailers of the chunked answer are longer than {MAX_HEAD} bytes")
                    return False
                end = trailers + 4
            del self.buffer[:end]
            self.body = b"".join(self._chunks)
            self._chunks.clear()
            return True
        self._bound(self._received_body + size)
        start = line_end + 2
        if len(self.buffer) < start + size + 2:
            return False
        if self.buffer[start + size : start + size + 2] != b"\r\n":
            raise HTTPError("a chunk of the chunked answer does not end with CRLF")
        self._received_body += size
        self._chunks.append(bytes(self.buffer[start : start + size]))
        del self.buffer[: start + size + 2]
        return True


class _Connection(asyncio.Protocol):
    """One keep-alive connection; carries one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.reader: _Reader | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.received = False  # bytes of the current answer arrived

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        if reader is None:  # nothing asked: a server speaking out of turn
            self.close()
            return
        self.received = True
        try:
            reader.feed(data)
        except HTTPError as exc:
            self._finish(exc)
            return
        if reader.body is not None:
            self._finish(None)

    def eof_received(self) -> bool | None:
        self._lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._lost(exc)

    # -- use
    async def exchange(
        self, data: bytes | list[bytes], *, head_only: bool = False, max_body: int | None = None
    ) -> _Reader:
        """Write a request and wait for its whole answer."""
        assert self.transport is not None
        self.reader = _Reader(head_only=head_only, max_body=max_body)
        self.received = False
        self.waiter = self.loop.create_future()
        if isinstance(data, list):
            self.transport.writelines(data)
        else:
            self.transport.write(data)
        try:
            await self.waiter
        finally:
            self.waiter = None
        reader = self.reader
        self.reader = None
        return reader

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def fail(self, exc: BaseException) -> None:
        """End the request in flight with ``exc`` (a deadline) and drop the connection."""
        self._finish(exc)
        self.close()

    def _lost(self, exc: Exception | None) -> None:
        reader = self.reader
        if reader is None or self.waiter is None or self.waiter.done():
            self.closed = True
            return
        try:
            reader.eof()
        except HTTPError as error:
            detail = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
            self._finish(HTTPError(f"{error}{detail}"))
            return
        self._finish(None)

    def _finish(self, exc: BaseException | None) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if exc is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(exc)


class HTTPPool:
    """Keep-alive connections to any number of servers, shared by every caller on one event loop.

    Args:
        headers: sent with every request (e.g. ``Authorization``).
        ssl_context: builds the TLS context the first time an ``https://`` server is called.
        proxy_for: the proxy URL for a request URL, or ``None`` (default: the environment's, see
            :func:`env_proxy`); asked once per distinct URL.
        max_idle: idle connections kept per server.
        max_body: largest answer body read, in bytes (``None``: no bound); a larger one raises
            :class:`HTTPBodyTooLarge` and its connection is dropped.

    Raises:
        InvalidRequest: a header in ``headers`` cannot be written as one HTTP line (see :func:`check_header`).
    """

    def __init__(
        self,
        headers: Mapping[str, str] | None = None,
        *,
        ssl_context: Callable[[], ssl.SSLContext] = ssl.create_default_context,
        proxy_for: Callable[[str], str | None] = env_proxy,
        max_idle: int = 1024,
        max_body: int | None = None,
    ) -> None:
        for name, value in (headers or {}).items():
            check_header(name, value)
        self._headers = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._max_body = max_body
        self._make_ssl = ssl_context
        self._ssl: ssl.SSLContext | None = None
        self._proxy_for = proxy_for
        self._max_idle = max_idle
        self._targets: dict[str, _Target] = {}
        self._idle: defaultdict[tuple[str, str, int], list[_Connection]] = defaultdict(list)
        self._busy: set[_Connection] = set()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the kept connections belong to

    async def request(
        self,
        method: str,
        url: str,
        body: bytes | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float,
    ) -> Answer:
        """Send one request and return the whole answer (any status).

        Raises:
            HTTPTimeout: no complete answer within ``timeout`` seconds (connecting included).
            HTTPBodyTooLarge: the answer's body is larger than ``max_body``.
            InvalidRequest: the method, the URL's target or a header cannot be written as HTTP (nothing sent).
            HTTPError: the connection failed or the answer is not HTTP/1.1.
        """
        if self._closed:
            raise HTTPError("the connection pool is closed")
        target = self._targets.get(url)
        if target is None:
            new = _target(url, self._proxy_for(url))
            _check_line("target", new.path)
            _check_line("host", new.authority)  # it is in the Host header and a CONNECT line too
            target = self._targets[url] = new
        if not method or not set(method) <= _TOKEN_CHARS:
            raise InvalidRequest(f"request method {method[:20]!r} is not an HTTP token")
        for name, value in (headers or {}).items():
            check_header(name, value)
        head = f"{method} {target.path} HTTP/1.1\r\nHost: {target.authority}\r\n{self._headers}"
        if target.proxy_auth is not None and not target.tls:
            head += f"Proxy-Authorization: {target.proxy_auth}\r\n"
        if headers:
            head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        if body is not None:
            head += f"Content-Length: {len(body)}\r\n"
        start = (head + "\r\n").encode("latin-1")
        data: bytes | list[bytes] = [start, body] if body else start
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # called from another event loop (a new asyncio.run): kept connections
            self._drop_idle()  # belong to the old one and cannot be used here
            self._loop = loop
        deadline = loop.time() + timeout
        for attempt in range(2):
            conn = self._idle_connection(target) if attempt == 0 else None  # the retry: on a new connection
            fresh = conn is None
            if conn is None:
                conn = await self._connect(target, loop, deadline)
                if self._closed:  # close() came while connecting
                    conn.close()
                    raise HTTPError("the connection pool was closed during the request")
            self._busy.add(conn)
            timer = loop.call_later(max(0.0, deadline - loop.time()), conn.fail, _timeout(url, timeout))
            try:
                reader = await conn.exchange(data, max_body=self._max_body)
            except HTTPTimeout:
                raise
            except HTTPError:
                conn.close()
                if self._closed:  # close() ended it: no retry on a connection the closed pool would open
                    raise HTTPError("the connection pool was closed during the request") from None
                if fresh or conn.received:  # a new connection failing, or an answer cut halfway: report it
                    raise
                continue  # a kept connection the server had closed meanwhile: once more on a new one
            except BaseException:  # cancelled mid-request: the connection's state is unknown
                conn.close()
                raise
            finally:
                timer.cancel()
                self._busy.discard(conn)
            if reader.keep_alive and not conn.closed and not reader.buffer and not self._closed:
                idle = self._idle[target.key]
                if len(idle) < self._max_idle:
                    idle.append(conn)
                else:
                    conn.close()
            else:
                conn.close()
            assert reader.body is not None
            return Answer(reader.status, reader.headers, reader.body)
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        """Close every connection. Idempotent."""
        self._closed = True
        self._drop_idle()
        for conn in list(self._busy):
            conn.close()

    def _drop_idle(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                with contextlib.suppress(RuntimeError):  # a transport of a loop already closed
                    conn.close()
        self._idle.clear()

    def _idle_connection(self, target: _Target) -> _Connection | None:
        idle = self._idle.get(target.key)
        while idle:
            conn = idle.pop()
            transport = conn.transport
            if not conn.closed and transport is not None and not transport.is_closing():
                return conn
        return None

    async def _connect(self, target: _Target, loop: asyncio.AbstractEventLoop, deadline: float) -> _Connection:
        host, port = target.proxy if target.proxy is not None else (target.host, target.port)
        try:
            return await asyncio.wait_for(self._open(target, loop), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            raise HTTPTimeout(f"connecting to {host}:{port} took too long") from None
        except (OSError, ssl.SSLError) as exc:
            raise HTTPError(f"cannot connect to {host}:{port} ({type(exc).__name__}: {exc})") from exc

    async def _open(self, target: _Target, loop: asyncio.AbstractEventLoop) -> _Connection:
        host, port = target.proxy if target.proxy is not None else (target.host, target.port)
        tls = self._context() if target.tls else None
        direct_tls = tls if target.proxy is None else None
        _, conn = await loop.create_connection(
            lambda: _Connection(loop),
            host,
            port,
            ssl=direct_tls,
            server_hostname=target.host if direct_tls is not None else None,
        )
        if target.proxy is not None and tls is not None:
            try:
                await self._tunnel(conn, target, tls, loop)
            except BaseException:
                conn.close()
                raise
        return conn

    async def _tunnel(
        self, conn: _Connection, target: _Target, tls: ssl.SSLContext, loop: asyncio.AbstractEventLoop
    ) -> None:
        """Open a CONNECT tunnel through the proxy, then TLS to the server inside it."""
        where = f"{target.host}:{target.port}"
        head = f"CONNECT {where} HTTP/1.1\r\nHost: {where}\r\n"
        if target.proxy_auth is not None:
            head += f"Proxy-Authorization: {target.proxy_auth}\r\n"
        reader = await conn.exchange((head + "\r\n").encode("latin-1"), head_only=True)
        if reader.status != 200:
            conn.close()
            raise HTTPError(f"the proxy refused to tunnel to {where} (HTTP {reader.status})")
        assert conn.transport is not None
        transport = await loop.start_tls(conn.transport, conn, tls, server_hostname=target.host)
        if transport is None:  # pragma: no cover - start_tls returns None only when the loop is closing
            raise HTTPError(f"TLS through the proxy to {where} failed")
        conn.transport = transport  # type: ignore[assignment]

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = self._make_ssl()
        return self._ssl


def _timeout(url: str, seconds: float) -> HTTPTimeout:
    return HTTPTimeout(f"{url}: no complete answer within {seconds:g}s")
