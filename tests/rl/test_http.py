"""legato_rl._http against real sockets on 127.0.0.1: framing, keep-alive, retries, deadlines, TLS and proxies.

The servers here are written with ``asyncio.start_server`` and answer with raw bytes, so each test controls the
framing exactly; the TLS certificate is made in the test, and the forward proxy is a few lines below.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from legato_gym.errors import ConfigError
from legato_rl import _http
from legato_rl._http import Answer, HTTPError, HTTPPool, HTTPTimeout, env_proxy
from legato_rl.errors import PolicyUnreachable
from legato_rl.policy import Limits, PolicyClient, PolicyConfig

T = TypeVar("T")

#: No test's coroutine may run longer than this (a hang fails the test instead of stalling the suite).
LIMIT = 10.0
#: The deadline given to requests that are expected to succeed or fail for another reason than time.
PATIENT = 5.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one test story on a fresh event loop, bounded by :data:`LIMIT`."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, LIMIT)

    return asyncio.run(bounded())


async def eventually(check: Callable[[], bool], within: float = 3.0) -> None:
    """Wait until ``check()`` holds (a server-side effect of what the client did)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not come true in time")
        await asyncio.sleep(0.005)


def direct(url: str) -> str | None:
    """``proxy_for`` that never uses a proxy (so the tests ignore the environment's proxy variables)."""
    return None


def answer(body: bytes = b"ok", *, status: str = "200 OK", headers: str = "") -> bytes:
    """A Content-Length framed answer; ``headers`` are extra header lines, each ending with CRLF."""
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- test servers -----------------------------------------------------------------------------------------


@dataclass
class Message:
    """A request (or answer) as a test server read it: first line, lower-cased headers, body, exact bytes."""

    line: str
    headers: dict[str, str]
    body: bytes
    raw: bytes


async def read_message(reader: asyncio.StreamReader) -> Message | None:
    """One message framed by Content-Length (or bodiless); ``None`` when the peer hung up first."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head[:-4].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return Message(lines[0], headers, body, head + body)


@dataclass
class Hit:
    """One request as an origin's responder sees it."""

    conn: int  # which accepted connection carried it (0, 1, ...)
    nth: int  # which request on that connection (0, 1, ...)
    request: Message
    writer: asyncio.StreamWriter


#: Writes the answer to a request (or not); returns False to have the server close the connection.
Responder = Callable[[Hit], Awaitable[bool]]


async def ok(hit: Hit) -> bool:
    """Answer every request with ``ok``."""
    hit.writer.write(answer())
    await hit.writer.drain()
    return True


async def echo(hit: Hit) -> bool:
    """Answer with the request's body."""
    hit.writer.write(answer(hit.request.body))
    await hit.writer.drain()
    return True


async def silent(hit: Hit) -> bool:
    """Never answer; keep the connection open until the client hangs up."""
    return True


def reply(data: bytes, *, keep: bool = True) -> Responder:
    """Answer every request with exactly ``data``; close the connection afterwards unless ``keep``."""

    async def respond(hit: Hit) -> bool:
        hit.writer.write(data)
        await hit.writer.drain()
        return keep

    return respond


def by_turn(*responders: Responder) -> Responder:
    """The n-th request on each connection goes to ``responders[n]`` (the last one serves the rest)."""

    async def respond(hit: Hit) -> bool:
        return await responders[min(hit.nth, len(responders) - 1)](hit)

    return respond


class Origin:
    """A raw HTTP/1.1 server: counts connections and hang-ups, records every request, answers via a responder."""

    def __init__(self, respond: Responder = ok, *, tls: ssl.SSLContext | None = None) -> None:
        self.respond = respond
        self.tls = tls
        self.port = 0
        self.connections = 0
        self.hung_up = 0  # connections the client closed (EOF or reset seen while waiting for a request)
        self.requests: list[Message] = []
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    def url(self, path: str = "/") -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{path}"

    async def __aenter__(self) -> Origin:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = self.connections
        self.connections += 1
        self._writers.append(writer)
        try:
            nth = 0
            while (request := await read_message(reader)) is not None:
                self.requests.append(request)
                if not await self.respond(Hit(conn, nth, request, writer)):
                    return
                nth += 1
            self.hung_up += 1
        finally:
            writer.close()


async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except ConnectionError:
        pass
    finally:
        sink.close()


class Proxy:
    """A forward proxy to one origin: absolute-form requests are relayed, ``CONNECT`` opens a byte tunnel.

    Whatever host a request names, it goes to ``127.0.0.1:origin_port`` (so tests may use names like
    ``policy.test`` and default ports). ``seen`` holds every request head the proxy read from the client.
    """

    def __init__(self, origin_port: int) -> None:
        self.origin_port = origin_port
        self.port = 0
        self.connections = 0
        self.seen: list[Message] = []
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    def url(self, userinfo: str = "user:pa%40ss@") -> str:
        return f"http://{userinfo}127.0.0.1:{self.port}"

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        try:
            while (request := await read_message(reader)) is not None:
                self.seen.append(request)
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.origin_port)
                self._writers.append(up_writer)
                if request.line.startswith("CONNECT "):
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
                    return
                method, target, version = request.line.split(" ")
                parts = urllib.parse.urlsplit(target)
                origin_form = parts.path + (f"?{parts.query}" if parts.query else "")
                head = request.raw[: len(request.raw) - len(request.body)].decode("latin-1").split("\r\n")
                kept = [h for h in head[1:] if not h.lower().startswith("proxy-authorization:")]
                up_writer.write("\r\n".join([f"{method} {origin_form} {version}", *kept]).encode() + request.body)
                relayed = await read_message(up_reader)
                up_writer.close()
                assert relayed is not None
                writer.write(relayed.raw)
                await writer.drain()
        finally:
            writer.close()


# --- TLS --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path

    def server(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context

    def client(self) -> ssl.SSLContext:
        """A verifying client context that trusts this (self-signed) certificate and nothing else."""
        return ssl.create_default_context(cafile=str(self.cert))


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A self-signed certificate for ``localhost``, ``policy.test`` and ``127.0.0.1``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "legato http test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName("policy.test"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return Certificate(folder / "cert.pem", folder / "key.pem")


# --- bodies -----------------------------------------------------------------------------------------------

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Kind: chunks\r\n\r\n"
    b"5;name=value;other\r\nhello\r\n"
    b"2 ; spaced-extension\r\n, \r\n"
    b"A\r\n0123456789\r\n"
    b"0;last\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n"
)
CHUNKED_BODY = b"hello, 0123456789"


def test_content_length_body_and_answer_fields() -> None:
    async def story() -> None:
        head = "X-Twice: first\r\nx-twice: second\r\nServer:   padded  \r\n"
        async with Origin(reply(answer(b"caf\xc3\xa9 \xff", status="201 Created", headers=head))) as origin:
            pool = HTTPPool(proxy_for=direct)
            got = await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()
        assert got.status == 201
        assert got.body == b"caf\xc3\xa9 \xff"
        assert got.text == "café \ufffd"
        assert got.headers["x-twice"] == "second"  # names lower-cased, the last of repeated ones
        assert got.headers["server"] == "padded"
        assert got.headers["content-length"] == "7"

    run(story())


def test_chunked_body_byte_by_byte_with_extensions_and_trailers(monkeypatch: pytest.MonkeyPatch) -> None:
    feeds: list[int] = []
    feed = _http._Reader.feed

    def counting(self: _http._Reader, data: bytes) -> None:
        feeds.append(len(data))
        feed(self, data)

    monkeypatch.setattr(_http._Reader, "feed", counting)

    async def trickle(hit: Hit) -> bool:
        for i in range(len(CHUNKED)):
            hit.writer.write(CHUNKED[i : i + 1])
            await hit.writer.drain()
            await asyncio.sleep(0)  # let the client read each byte on its own
        return True

    async def story() -> None:
        async with Origin(trickle) as origin:
            pool = HTTPPool(proxy_for=direct)
            first = await pool.request("GET", origin.url(), timeout=PATIENT)
            second = await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()
            assert origin.connections == 1  # the trailers were consumed exactly: the connection stayed usable
        for got in (first, second):
            assert (got.status, got.body, got.headers["x-kind"]) == (200, CHUNKED_BODY, "chunks")

    run(story())
    assert len(feeds) >= 40  # the two answers really came in tiny pieces (170 bytes each)


@pytest.mark.parametrize(
    ("data", "body"),
    [
        (answer(b"hello world"), b"hello world"),
        (answer(b""), b""),
        (CHUNKED, CHUNKED_BODY),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b""),
        (b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"after"), b"after"),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
    ],
    ids=["length", "empty", "chunked", "chunked-empty", "continue", "204"],
)
def test_reader_gives_the_same_answer_however_the_bytes_are_split(data: bytes, body: bytes) -> None:
    """The parser alone: every two-way split and a byte-at-a-time feed all read the same body."""
    feeds = [[data[:i], data[i:]] for i in range(len(data) + 1)]
    feeds.append([data[i : i + 1] for i in range(len(data))])
    for pieces in feeds:
        reader = _http._Reader()
        for piece in pieces:
            reader.feed(piece)
        assert reader.body == body, pieces
        assert not reader.buffer and reader.keep_alive


def test_body_read_until_the_server_closes() -> None:
    async def story() -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"
        async with Origin(reply(head + b"streamed " * 1000 + b"until close", keep=False)) as origin:
            pool = HTTPPool(proxy_for=direct)
            got = await pool.request("GET", origin.url(), timeout=PATIENT)
            again = await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()
            assert origin.connections == 2  # a body framed by the close leaves nothing to reuse
        assert got.body == b"streamed " * 1000 + b"until close"
        assert again.body == got.body

    run(story())


def test_interim_answers_are_skipped() -> None:
    async def interim_then_answer(hit: Hit) -> bool:
        hit.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await hit.writer.drain()
        await asyncio.sleep(0.01)
        hit.writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n")
        hit.writer.write(answer(b"final", status="200 OK", headers="X-Final: yes\r\n"))
        await hit.writer.drain()
        return True

    async def story() -> None:
        async with Origin(interim_then_answer) as origin:
            pool = HTTPPool(proxy_for=direct)
            got = await pool.request("POST", origin.url(), b"{}", timeout=PATIENT)
            again = await pool.request("POST", origin.url(), b"{}", timeout=PATIENT)
            await pool.close()
            assert origin.connections == 1
        assert (got.status, got.body, got.headers["x-final"]) == (200, b"final", "yes")
        assert "link" not in got.headers  # the interim answer's headers are not the answer's
        assert again.body == b"final"

    run(story())


@pytest.mark.parametrize("status", ["204 No Content", "304 Not Modified"])
def test_bodiless_statuses_do_not_wait_for_a_body(status: str) -> None:
    async def story() -> None:
        # a Content-Length on a 304 describes the resource, not a body that follows
        async with Origin(reply(f"HTTP/1.1 {status}\r\nContent-Length: 10\r\n\r\n".encode())) as origin:
            pool = HTTPPool(proxy_for=direct)
            got = await pool.request("GET", origin.url(), timeout=PATIENT)
            again = await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()
            assert origin.connections == 1
        assert (got.status, got.body) == (int(status[:3]), b"")
        assert again.status == got.status

    run(story())


def test_large_bodies_both_ways() -> None:
    async def story() -> None:
        payload = bytes(range(256)) * 4096  # 1 MiB
        async with Origin(echo) as origin:
            pool = HTTPPool(proxy_for=direct)
            got = await pool.request("POST", origin.url(), payload, timeout=PATIENT)
            await pool.close()
        assert got.body == payload

    run(story())


# --- requests on the wire ---------------------------------------------------------------------------------


def test_request_bytes_are_exact() -> None:
    async def story() -> None:
        async with Origin() as origin:
            port = origin.port
            pool = HTTPPool({"Authorization": "Bearer sk-test", "User-Agent": "legato-test"}, proxy_for=direct)
            body = b'{"model": "m"}'
            json_headers = {"Content-Type": "application/json"}
            url = origin.url("/v1/chat/completions?stream=false&n=2")
            await pool.request("POST", url, body, headers=json_headers, timeout=PATIENT)
            await pool.request("GET", origin.url("/v1/models"), timeout=PATIENT)
            await pool.request("POST", origin.url("/v1/empty"), b"", timeout=PATIENT)
            await pool.request("GET", f"http://127.0.0.1:{port}", timeout=PATIENT)
            await pool.close()
            raw = [r.raw for r in origin.requests]
        pool_headers = "Authorization: Bearer sk-test\r\nUser-Agent: legato-test\r\n"
        assert raw == [
            (
                f"POST /v1/chat/completions?stream=false&n=2 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{pool_headers}"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body,
            f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{pool_headers}\r\n".encode(),
            f"POST /v1/empty HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{pool_headers}Content-Length: 0\r\n\r\n".encode(),
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{pool_headers}\r\n".encode(),
        ]

    run(story())


def test_urls_that_are_not_http_are_refused() -> None:
    async def story() -> None:
        pool = HTTPPool(proxy_for=direct)
        for url in ("ftp://127.0.0.1/file", "http:///no-host", "127.0.0.1:8000/v1"):
            with pytest.raises(HTTPError, match="not an http"):
                await pool.request("GET", url, timeout=PATIENT)
        await pool.close()

    run(story())


@pytest.mark.parametrize(
    ("pool_headers", "request_headers", "match"),
    [
        ({"Authorization": "Bearer sk-1\r\nX-Injected: yes"}, {}, "'Authorization' holds a CR or LF at character 11"),
        ({"Authorization": "Bearer sk-1\nHost: evil.test"}, {}, "CR or LF"),
        ({"Authorization": "Bearer sk-1\r"}, {}, "CR or LF"),
        ({}, {"Content-Type": "application/json\r\n\r\nGET /admin HTTP/1.1"}, "'Content-Type' holds a CR or LF"),
        ({}, {"X-Nul": "a\x00b"}, "U\\+0000"),
        ({}, {"X-Wide": "caf\u20ac"}, "U\\+20AC"),
        ({}, {"Bad Name": "v"}, "not an HTTP token"),
        ({}, {"X-Split:\r\nX-Injected": "v"}, "not an HTTP token"),
    ],
)
def test_headers_that_would_inject_lines_are_refused_before_anything_is_sent(
    pool_headers: dict[str, str], request_headers: dict[str, str], match: str
) -> None:
    async def story() -> None:
        async with Origin() as origin:
            with pytest.raises(_http.InvalidRequest, match=match) as info:
                pool = HTTPPool(pool_headers, proxy_for=direct)
                await pool.request("POST", origin.url("/v1/x"), b"{}", headers=request_headers, timeout=PATIENT)
            assert "sk-1" not in str(info.value)  # the message names the header, never its value
            assert origin.connections == 0

    run(story())


def test_a_tab_in_a_header_value_is_allowed() -> None:
    async def story() -> None:
        async with Origin() as origin:
            pool = HTTPPool({"X-Tabbed": "a\tb"}, proxy_for=direct)
            await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()
            assert origin.requests[0].headers["x-tabbed"] == "a\tb"

    run(story())


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", "{origin}/v1/a b"),
        ("GET\r\nX: 1", "{origin}/"),
        ("GET", "{origin}/v1/caf\u00e9"),
        ("GET", "http://a b/v1"),
    ],
)
def test_request_lines_that_would_break_framing_are_refused(method: str, url: str) -> None:
    async def story() -> None:
        async with Origin() as origin:
            pool = HTTPPool(proxy_for=direct)
            with pytest.raises(_http.InvalidRequest):
                await pool.request(method, url.format(origin=origin.url("")), timeout=PATIENT)
            await pool.close()
            assert origin.connections == 0

    run(story())


# --- bounds -----------------------------------------------------------------------------------------------

BOUND = 1000


def _chunked(body: bytes, size: int = 100) -> bytes:
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)
    )
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"


@pytest.mark.parametrize(
    "data",
    [
        answer(b"x" * (BOUND + 1)),
        answer(b"x" * (BOUND + 1))[:80],  # the Content-Length alone is enough: refused before the body comes
        _chunked(b"x" * (BOUND + 1)),
        b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * (BOUND + 1),  # framed by the close
    ],
    ids=["content-length", "content-length-head-only", "chunked", "until-close"],
)
def test_a_body_larger_than_max_body_is_refused_and_its_connection_dropped(data: bytes) -> None:
    async def story() -> None:
        async with Origin(reply(data, keep=True)) as origin:
            pool = HTTPPool(proxy_for=direct, max_body=BOUND)
            with pytest.raises(_http.HTTPBodyTooLarge, match=f"larger than {BOUND} bytes"):
                await pool.request("GET", origin.url(), timeout=PATIENT)
            await eventually(lambda: origin.hung_up == 1 or origin.connections == 1)
            await pool.close()

    run(story())


@pytest.mark.parametrize(
    "data",
    [answer(b"x" * BOUND), _chunked(b"x" * BOUND), b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * BOUND],
    ids=["content-length", "chunked", "until-close"],
)
def test_a_body_of_exactly_max_body_is_read(data: bytes) -> None:
    async def story() -> None:
        async with Origin(reply(data, keep=False)) as origin:
            pool = HTTPPool(proxy_for=direct, max_body=BOUND)
            got = await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()
        assert got.body == b"x" * BOUND

    run(story())


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * (_http.MAX_CHUNK_LINE + 1),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + b"X-T: v\r\n" * 9000,
    ],
    ids=["chunk-size-line", "trailers"],
)
def test_endless_chunk_lines_and_trailers_are_refused(data: bytes) -> None:
    async def story() -> None:
        async with Origin(reply(data, keep=True)) as origin:
            pool = HTTPPool(proxy_for=direct)
            with pytest.raises(HTTPError, match="longer than"):
                await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()

    run(story())


# --- keep-alive -------------------------------------------------------------------------------------------


def test_sequential_requests_share_one_connection() -> None:
    async def story() -> None:
        async with Origin(echo) as origin:
            pool = HTTPPool(proxy_for=direct)
            bodies = [(await pool.request("POST", origin.url(), b"%d" % i, timeout=PATIENT)).body for i in range(3)]
            await pool.close()
            assert (origin.connections, len(origin.requests)) == (1, 3)
        assert bodies == [b"0", b"1", b"2"]

    run(story())


def test_concurrent_requests_open_connections_and_max_idle_caps_what_is_kept() -> None:
    async def story() -> None:
        async with Origin() as origin:
            pool = HTTPPool(proxy_for=direct, max_idle=2)

            async def batch() -> list[Answer]:
                return await asyncio.gather(*(pool.request("GET", origin.url(), timeout=PATIENT) for _ in range(5)))

            assert [a.body for a in await batch()] == [b"ok"] * 5
            assert origin.connections == 5
            await eventually(lambda: origin.hung_up == 3)  # only two were kept idle
            await batch()
            assert origin.connections == 5 + 3  # two reused, three new
            await pool.close()

    run(story())


def test_connection_close_from_the_server_is_honoured() -> None:
    async def story() -> None:
        # the server says close but leaves the socket open: the client must still not reuse it
        async with Origin(reply(answer(headers="Connection: close\r\n"))) as origin:
            pool = HTTPPool(proxy_for=direct)
            await pool.request("GET", origin.url(), timeout=PATIENT)
            await eventually(lambda: origin.hung_up == 1)  # and the client closed it
            await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()
            assert origin.connections == 2

    run(story())


def test_http_1_0_answers_are_not_kept() -> None:
    async def story() -> None:
        async with Origin(reply(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")) as origin:
            pool = HTTPPool(proxy_for=direct)
            assert (await pool.request("GET", origin.url(), timeout=PATIENT)).body == b"ok"
            await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()
            assert origin.connections == 2

    run(story())


def test_bytes_beyond_the_answer_spoil_the_connection() -> None:
    async def story() -> None:
        async with Origin(reply(answer() + b"HTTP/1.1 200 OK\r\n")) as origin:
            pool = HTTPPool(proxy_for=direct)
            assert (await pool.request("GET", origin.url(), timeout=PATIENT)).body == b"ok"
            assert (await pool.request("GET", origin.url(), timeout=PATIENT)).body == b"ok"
            await pool.close()
            assert origin.connections == 2

    run(story())


# --- stale connections and retries ------------------------------------------------------------------------


def test_idle_connection_closed_by_the_server_is_replaced() -> None:
    async def story() -> None:
        async with Origin(reply(answer(), keep=False)) as origin:  # closes after answering, no Connection: close
            pool = HTTPPool(proxy_for=direct)
            await pool.request("GET", origin.url(), timeout=PATIENT)
            assert (await pool.request("GET", origin.url(), timeout=PATIENT)).body == b"ok"
            await pool.close()
            assert origin.connections == 2

    run(story())


def test_reused_connection_closed_before_answering_is_retried_once_on_a_new_one() -> None:
    async def story() -> None:
        # the second request on a connection is read, then the server hangs up without a byte of answer
        async with Origin(by_turn(ok, reply(b"", keep=False))) as origin:
            pool = HTTPPool(proxy_for=direct)
            await pool.request("POST", origin.url(), b"1", timeout=PATIENT)
            got = await pool.request("POST", origin.url(), b"2", timeout=PATIENT)
            await pool.close()
            assert got.body == b"ok"
            assert origin.connections == 2
            assert [r.body for r in origin.requests] == [b"1", b"2", b"2"]  # sent again, whole

    run(story())


def test_retry_uses_a_new_connection_even_when_more_idle_ones_are_stale() -> None:
    async def story() -> None:
        async with Origin(by_turn(ok, reply(b"", keep=False))) as origin:
            pool = HTTPPool(proxy_for=direct)
            await asyncio.gather(*(pool.request("GET", origin.url(), timeout=PATIENT) for _ in range(2)))
            assert origin.connections == 2  # two idle connections, both of which will turn out stale
            got = await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()
            assert got.body == b"ok"
            assert origin.connections == 3
            assert len(origin.requests) == 4  # two first answers, one lost on a stale connection, the retry

    run(story())


def test_answer_cut_halfway_on_a_fresh_connection_fails() -> None:
    async def story() -> None:
        async with Origin(reply(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", keep=False)) as origin:
            pool = HTTPPool(proxy_for=direct)
            with pytest.raises(HTTPError, match="before its answer was complete") as info:
                await pool.request("GET", origin.url(), timeout=PATIENT)
            assert not isinstance(info.value, HTTPTimeout)
            await pool.close()
            assert (origin.connections, len(origin.requests)) == (1, 1)

    run(story())


@pytest.mark.parametrize(
    "cut",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        b"HTTP/1.1 200 OK\r\nContent-Le",
    ],
    ids=["length", "chunked", "head"],
)
def test_answer_cut_halfway_on_a_reused_connection_is_not_retried(cut: bytes) -> None:
    async def story() -> None:
        async with Origin(by_turn(ok, reply(cut, keep=False))) as origin:
            pool = HTTPPool(proxy_for=direct)
            await pool.request("POST", origin.url(), b"1", timeout=PATIENT)
            with pytest.raises(HTTPError, match="before its answer was complete"):
                await pool.request("POST", origin.url(), b"2", timeout=PATIENT)
            await pool.close()
            assert (origin.connections, len(origin.requests)) == (1, 2)

    run(story())


def test_refused_connection_fails_without_waiting_for_the_deadline() -> None:
    async def story() -> None:
        pool = HTTPPool(proxy_for=direct)
        with pytest.raises(HTTPError, match="cannot connect") as info:
            await pool.request("GET", f"http://127.0.0.1:{unused_port()}/v1", timeout=PATIENT)
        assert not isinstance(info.value, HTTPTimeout)
        await pool.close()

    run(story())


# --- deadlines and cancellation ---------------------------------------------------------------------------


def test_timeout_when_the_server_never_answers_drops_the_connection() -> None:
    async def story() -> None:
        async with Origin(silent) as origin:
            pool = HTTPPool(proxy_for=direct)
            started = time.monotonic()
            with pytest.raises(HTTPTimeout, match=r"no complete answer within 0\.3s") as info:
                await pool.request("GET", origin.url(), timeout=0.3)
            elapsed = time.monotonic() - started
            assert 0.25 <= elapsed < 3.0
            assert isinstance(info.value, TimeoutError) and isinstance(info.value, HTTPError)
            await eventually(lambda: origin.hung_up == 1)  # the pool dropped the connection
            origin.respond = ok
            assert (await pool.request("GET", origin.url(), timeout=PATIENT)).body == b"ok"
            await pool.close()
            assert origin.connections == 2  # the timed-out connection was not reused

    run(story())


def test_timeout_on_a_reused_connection_is_not_retried() -> None:
    async def story() -> None:
        async with Origin(by_turn(ok, silent)) as origin:
            pool = HTTPPool(proxy_for=direct)
            await pool.request("GET", origin.url(), timeout=PATIENT)
            with pytest.raises(HTTPTimeout):
                await pool.request("GET", origin.url(), timeout=0.3)
            await eventually(lambda: origin.hung_up == 1)
            await pool.close()
            assert (origin.connections, len(origin.requests)) == (1, 2)

    run(story())


def test_deadline_covers_connecting(certificate: Certificate) -> None:
    async def story() -> None:
        async with Origin(silent) as origin:  # accepts TCP but never speaks TLS: the handshake hangs
            pool = HTTPPool(ssl_context=certificate.client, proxy_for=direct)
            started = time.monotonic()
            with pytest.raises(HTTPTimeout, match=r"connecting to 127\.0\.0\.1"):
                await pool.request("GET", f"https://127.0.0.1:{origin.port}/", timeout=0.3)
            assert 0.25 <= time.monotonic() - started < 3.0
            await eventually(lambda: origin.hung_up == 1)
            await pool.close()

    run(story())


def test_cancelling_a_request_closes_its_connection() -> None:
    async def story() -> None:
        async with Origin(by_turn(ok, silent, ok)) as origin:
            pool = HTTPPool(proxy_for=direct)
            await pool.request("GET", origin.url(), timeout=PATIENT)
            task = asyncio.create_task(pool.request("GET", origin.url(), timeout=PATIENT))
            await eventually(lambda: len(origin.requests) == 2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await eventually(lambda: origin.hung_up == 1)  # the server saw the connection close
            assert (await pool.request("GET", origin.url(), timeout=PATIENT)).body == b"ok"
            await pool.close()
            assert origin.connections == 2  # the cancelled connection was not put back

    run(story())


# --- malformed answers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"garbage\r\n\r\n", "not an HTTP/1.x answer"),
        (b"HTTP/2 200 OK\r\n\r\n", "not an HTTP/1.x answer"),
        (b"HTTP/1.1 OK\r\nContent-Length: 0\r\n\r\n", "not an HTTP/1.x answer"),
        (b"HTTP/1.1 200 OK\r\nNoColonHere\r\nContent-Length: 0\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n folded: value\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 200 OK\r\nName : value\r\nContent-Length: 0\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 200 OK\r\n: value\r\nContent-Length: 0\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\nhelloworld", "bad Content-Length"),
        (b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", "not an HTTP/1.x answer"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n5\r\nhello\r\n0\r\n\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n", "does not end with CRLF"),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (_http.MAX_HEAD + 10), "head is longer"),
    ],
    ids=[
        "status-garbage",
        "status-http2",
        "status-no-code",
        "header-no-colon",
        "header-folded",
        "header-space-before-colon",
        "header-no-name",
        "length-not-a-number",
        "length-negative",
        "length-plus",
        "length-underscore",
        "status-four-digits",
        "chunk-size-not-hex",
        "chunk-size-empty",
        "chunk-size-negative",
        "chunk-size-plus",
        "chunk-size-0x",
        "chunk-no-crlf",
        "head-too-long",
    ],
)
def test_malformed_answers_fail_at_once(data: bytes, match: str) -> None:
    async def story() -> None:
        async with Origin(reply(data)) as origin:  # the server keeps the connection open: the parser must object
            pool = HTTPPool(proxy_for=direct)
            with pytest.raises(HTTPError, match=match) as info:
                await pool.request("GET", origin.url(), timeout=PATIENT)
            assert not isinstance(info.value, HTTPTimeout)
            await eventually(lambda: origin.hung_up == 1)  # the spoiled connection is dropped
            await pool.close()
            assert (origin.connections, len(origin.requests)) == (1, 1)

    run(story())


def test_server_speaking_out_of_turn_loses_its_connection() -> None:
    async def answer_then_babble(hit: Hit) -> bool:
        hit.writer.write(answer())
        await hit.writer.drain()
        await asyncio.sleep(0.05)  # the connection is idle in the pool by now
        hit.writer.write(b"HTTP/1.1 200 OK\r\n")
        await hit.writer.drain()
        return True

    async def story() -> None:
        async with Origin(answer_then_babble) as origin:
            pool = HTTPPool(proxy_for=direct)
            await pool.request("GET", origin.url(), timeout=PATIENT)
            await eventually(lambda: origin.hung_up == 1)
            assert (await pool.request("GET", origin.url(), timeout=PATIENT)).body == b"ok"
            await pool.close()
            assert origin.connections == 2

    run(story())


# --- TLS --------------------------------------------------------------------------------------------------


def test_https_round_trip_with_verification(certificate: Certificate) -> None:
    made: list[ssl.SSLContext] = []

    def context() -> ssl.SSLContext:
        made.append(certificate.client())
        return made[-1]

    async def story() -> None:
        async with Origin(echo, tls=certificate.server()) as origin:
            pool = HTTPPool({"Authorization": "Bearer k"}, ssl_context=context, proxy_for=direct)
            first = await pool.request("POST", origin.url("/v1/x?y=1"), b"secret", timeout=PATIENT)
            second = await pool.request("POST", origin.url("/v1/x?y=1"), b"again", timeout=PATIENT)
            await pool.close()
            assert origin.connections == 1  # keep-alive over TLS
            request = origin.requests[0]
        assert (first.body, second.body) == (b"secret", b"again")
        assert request.line == "POST /v1/x?y=1 HTTP/1.1"
        assert request.headers["host"] == f"127.0.0.1:{origin.port}"
        assert request.headers["authorization"] == "Bearer k"
        assert len(made) == 1  # the context is built once, on first use

    run(story())


def test_https_with_an_untrusted_certificate_fails(certificate: Certificate) -> None:
    async def story() -> None:
        async with Origin(tls=certificate.server()) as origin:
            pool = HTTPPool(ssl_context=lambda: ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), proxy_for=direct)
            with pytest.raises(HTTPError, match="CERTIFICATE_VERIFY_FAILED") as info:
                await pool.request("GET", origin.url(), timeout=PATIENT)
            assert not isinstance(info.value, HTTPTimeout)
            await pool.close()
            assert origin.requests == []

    run(story())


# --- proxies ----------------------------------------------------------------------------------------------

BASIC = "Basic " + base64.b64encode(b"user:pa@ss").decode()


def test_http_through_a_proxy_uses_absolute_form_and_proxy_authorization() -> None:
    async def story() -> None:
        async with Origin(echo) as origin, Proxy(origin.port) as proxy:
            pool = HTTPPool({"Authorization": "Bearer k"}, proxy_for=lambda url: proxy.url())
            got = await pool.request("POST", "http://policy.test/v1/chat?x=1", b"hi", timeout=PATIENT)
            await pool.request("GET", f"http://127.0.0.1:{origin.port}/v1/models", timeout=PATIENT)
            await pool.close()
            assert proxy.connections == 1  # keep-alive to the proxy, whatever the origin
            assert got.body == b"hi"
            first, second = proxy.seen
            assert first.line == "POST http://policy.test/v1/chat?x=1 HTTP/1.1"
            assert first.headers["host"] == "policy.test"  # default port: no port in the Host header
            assert first.headers["proxy-authorization"] == BASIC
            assert first.headers["authorization"] == "Bearer k"
            assert second.line == f"GET http://127.0.0.1:{origin.port}/v1/models HTTP/1.1"
            assert second.headers["host"] == f"127.0.0.1:{origin.port}"
            assert [r.line for r in origin.requests] == ["POST /v1/chat?x=1 HTTP/1.1", "GET /v1/models HTTP/1.1"]

    run(story())


def test_proxy_without_credentials_or_scheme() -> None:
    async def story() -> None:
        async with Origin() as origin, Proxy(origin.port) as proxy:
            pool = HTTPPool(proxy_for=lambda url: f"127.0.0.1:{proxy.port}")  # no scheme: http:// is meant
            await pool.request("GET", "http://policy.test/", timeout=PATIENT)
            await pool.close()
            assert [m.line for m in proxy.seen] == ["GET http://policy.test/ HTTP/1.1"]
            assert "proxy-authorization" not in proxy.seen[0].headers

    run(story())


def test_https_through_a_proxy_tunnel(certificate: Certificate) -> None:
    async def story() -> None:
        async with Origin(echo, tls=certificate.server()) as origin, Proxy(origin.port) as proxy:
            pool = HTTPPool(ssl_context=certificate.client, proxy_for=lambda url: proxy.url())
            first = await pool.request("POST", "https://policy.test/v1/chat", b"tunnelled", timeout=PATIENT)
            second = await pool.request("POST", "https://policy.test/v1/chat", b"reused", timeout=PATIENT)
            await pool.close()
            assert (first.body, second.body) == (b"tunnelled", b"reused")
            (connect,) = proxy.seen  # one tunnel, kept for the second request
            assert connect.line == "CONNECT policy.test:443 HTTP/1.1"
            assert connect.headers["host"] == "policy.test:443"
            assert connect.headers["proxy-authorization"] == BASIC
            assert (proxy.connections, origin.connections) == (1, 1)
            request = origin.requests[0]  # what went through the tunnel, encrypted
            assert request.line == "POST /v1/chat HTTP/1.1"
            assert request.headers["host"] == "policy.test"
            assert "proxy-authorization" not in request.headers  # the credentials stay with the proxy

    run(story())


def test_https_through_a_proxy_verifies_the_origin_name(certificate: Certificate) -> None:
    async def story() -> None:
        async with Origin(tls=certificate.server()) as origin, Proxy(origin.port) as proxy:
            pool = HTTPPool(ssl_context=certificate.client, proxy_for=lambda url: proxy.url())
            with pytest.raises(HTTPError, match="CERTIFICATE_VERIFY_FAILED"):
                await pool.request("GET", "https://other.test/", timeout=PATIENT)  # not a name in the certificate
            await pool.close()
            assert origin.requests == []

    run(story())


def test_proxy_refusing_the_tunnel() -> None:
    refusal = b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"

    async def story() -> None:
        async with Origin(reply(refusal)) as proxy:
            pool = HTTPPool(proxy_for=lambda url: f"http://127.0.0.1:{proxy.port}")
            with pytest.raises(HTTPError, match=r"refused to tunnel to policy.test:443 \(HTTP 407\)"):
                await pool.request("GET", "https://policy.test/", timeout=PATIENT)
            await eventually(lambda: proxy.hung_up == 1)
            await pool.close()

    run(story())


def test_proxy_that_never_answers_the_connect_times_out() -> None:
    async def story() -> None:
        async with Origin(silent) as proxy:
            pool = HTTPPool(proxy_for=lambda url: f"http://127.0.0.1:{proxy.port}")
            with pytest.raises(HTTPTimeout):
                await pool.request("GET", "https://policy.test/", timeout=0.3)
            await eventually(lambda: proxy.hung_up == 1)
            await pool.close()
            assert proxy.requests[0].line == "CONNECT policy.test:443 HTTP/1.1"

    run(story())


@pytest.mark.parametrize("proxy", ["https://127.0.0.1:3128", "socks5://127.0.0.1:1080"])
@pytest.mark.parametrize("url", ["http://policy.test/v1", "https://policy.test/v1"])
def test_proxies_other_than_http_are_refused(proxy: str, url: str) -> None:
    async def story() -> None:
        pool = HTTPPool(proxy_for=lambda _: proxy)
        with pytest.raises(HTTPError, match=r"only http:// proxies are supported"):
            await pool.request("GET", url, timeout=PATIENT)
        await pool.close()

    run(story())


# --- proxies from the environment -------------------------------------------------------------------------


@pytest.fixture
def proxy_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No proxy variables in either case (urllib reads both); set what a test needs on the returned patch."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "request_method"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    yield monkeypatch


def test_env_proxy_reads_the_scheme_variable(proxy_env: pytest.MonkeyPatch) -> None:
    assert env_proxy("http://policy.test/v1") is None
    proxy_env.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert env_proxy("http://policy.test/v1") == "http://proxy.example:3128"
    assert env_proxy("https://policy.test/v1") is None
    proxy_env.setenv("HTTPS_PROXY", "http://secure.example:3129")
    assert env_proxy("https://policy.test/v1") == "http://secure.example:3129"


def test_env_proxy_reads_lower_case_variables(proxy_env: pytest.MonkeyPatch) -> None:
    proxy_env.setenv("http_proxy", "http://lower.example:3128")
    assert env_proxy("http://policy.test/v1") == "http://lower.example:3128"


def test_env_proxy_honours_no_proxy(proxy_env: pytest.MonkeyPatch) -> None:
    proxy_env.setenv("HTTP_PROXY", "http://proxy.example:3128")
    proxy_env.setenv("NO_PROXY", "policy.test, .internal,127.0.0.1")
    assert env_proxy("http://policy.test/v1") is None
    assert env_proxy("http://gpu-3.internal:8000/v1") is None
    assert env_proxy("http://127.0.0.1:8000/v1") is None
    assert env_proxy("http://elsewhere.test/v1") == "http://proxy.example:3128"
    proxy_env.setenv("NO_PROXY", "*")
    assert env_proxy("http://elsewhere.test/v1") is None


def test_pool_takes_its_proxy_from_the_environment_by_default(proxy_env: pytest.MonkeyPatch) -> None:
    async def story() -> None:
        async with Origin() as origin, Proxy(origin.port) as proxy:
            proxy_env.setenv("HTTP_PROXY", proxy.url())
            pool = HTTPPool()
            await pool.request("GET", origin.url("/via"), timeout=PATIENT)
            proxy_env.setenv("NO_PROXY", "127.0.0.1")
            bypassing = HTTPPool()
            await bypassing.request("GET", origin.url("/direct"), timeout=PATIENT)
            await pool.close()
            await bypassing.close()
            assert [m.line for m in proxy.seen] == [f"GET {origin.url('/via')} HTTP/1.1"]
            assert proxy.seen[0].headers["proxy-authorization"] == BASIC
            assert [r.line for r in origin.requests] == ["GET /via HTTP/1.1", "GET /direct HTTP/1.1"]

    run(story())


# --- closing ----------------------------------------------------------------------------------------------


def test_close_drops_idle_connections_and_refuses_later_requests() -> None:
    async def story() -> None:
        async with Origin() as origin:
            pool = HTTPPool(proxy_for=direct)
            await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()
            await eventually(lambda: origin.hung_up == 1)
            with pytest.raises(HTTPError, match="closed"):
                await pool.request("GET", origin.url(), timeout=PATIENT)
            await pool.close()  # idempotent
            assert origin.connections == 1

    run(story())


def test_close_fails_a_request_in_flight_without_reconnecting() -> None:
    async def story() -> None:
        async with Origin(by_turn(ok, silent)) as origin:
            pool = HTTPPool(proxy_for=direct)
            await pool.request("GET", origin.url(), timeout=PATIENT)
            task = asyncio.create_task(pool.request("GET", origin.url(), timeout=PATIENT))
            await eventually(lambda: len(origin.requests) == 2)
            await pool.close()
            with pytest.raises(HTTPError) as info:
                await task
            assert not isinstance(info.value, HTTPTimeout)
            await eventually(lambda: origin.hung_up == 1)
            assert origin.connections == 1  # a closed pool opens nothing, not even for its silent retry

    run(story())


# --- the policy client's trust store ----------------------------------------------------------------------

COMPLETION = json.dumps({"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]})


def _chat_over_tls(config: PolicyConfig) -> str:
    async def story() -> str:
        async with PolicyClient(config) as client:
            result = await client.chat([{"role": "user", "content": "hello"}], rollout_id="r0")
        return result.content

    return run(story())


@pytest.fixture
def no_tls_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "*")
    return monkeypatch


class TLSOrigin:
    """A TLS chat server on a thread of its own (the policy client runs its own event loop)."""

    def __init__(self, certificate: Certificate) -> None:
        self.certificate = certificate
        self.url = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with Origin(reply(answer(COMPLETION.encode())), tls=self.certificate.server()) as origin:
            self.url = origin.url("/v1")
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> TLSOrigin:
        self._thread.start()
        assert self._ready.wait(LIMIT)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(LIMIT)


def test_policy_config_ca_bundle_is_trusted(certificate: Certificate, no_tls_env: pytest.MonkeyPatch) -> None:
    with TLSOrigin(certificate) as origin:
        assert _chat_over_tls(PolicyConfig(origin.url, "m", ca_bundle=certificate.cert)) == "hi"
        with pytest.raises(PolicyUnreachable, match="CERTIFICATE_VERIFY_FAILED"):  # certifi's bundle: not trusted
            _chat_over_tls(PolicyConfig(origin.url, "m", limits=Limits(retries=0)))
    with pytest.raises(ConfigError, match="ca_bundle"):
        PolicyConfig("https://a/v1", "m", ca_bundle=certificate.cert.parent / "missing.pem")


def test_ssl_cert_file_and_dir_are_honoured(
    certificate: Certificate, no_tls_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with TLSOrigin(certificate) as origin:
        no_tls_env.setenv("SSL_CERT_FILE", str(certificate.cert))
        assert _chat_over_tls(PolicyConfig(origin.url, "m")) == "hi"
        no_tls_env.delenv("SSL_CERT_FILE")
        hashed = subprocess.run(
            ["openssl", "x509", "-hash", "-noout", "-in", str(certificate.cert)], capture_output=True, text=True
        )
        if hashed.returncode == 0:  # a c_rehash-style directory: <subject hash>.0
            (tmp_path / f"{hashed.stdout.strip()}.0").write_bytes(certificate.cert.read_bytes())
            no_tls_env.setenv("SSL_CERT_DIR", str(tmp_path))
            assert _chat_over_tls(PolicyConfig(origin.url, "m")) == "hi"
            assert _chat_over_tls(PolicyConfig(origin.url, "m", ca_bundle=tmp_path)) == "hi"
    no_tls_env.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError, match=r"\$SSL_CERT_FILE"):
        PolicyClient(PolicyConfig("https://a/v1", "m"))
