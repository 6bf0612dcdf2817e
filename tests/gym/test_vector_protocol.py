"""The worker protocol: frames, config transport, shared screenshot buffers, the worker's imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from legato_gym.config import DesktopConfig, Timeouts
from legato_gym.errors import ConfigError
from legato_gym.transport import process
from legato_gym.transport.protocol import (
    HEADER,
    FrameReader,
    ProtocolError,
    config_from_json,
    config_to_json,
    encode_frame,
)
from legato_gym.transport.screens import ScreenBuffer


def test_frames_decode_whatever_the_chunking() -> None:
    blob = bytes(range(256)) * 40
    stream = b"".join(
        bytes(part)
        for message, payload in [({"kind": "hello", "n": 1}, b""), ({"kind": "response", "id": 7}, blob)]
        for part in encode_frame(message, payload)
    )
    for size in (1, 7, 1000, len(stream)):
        reader = FrameReader()
        for start in range(0, len(stream), size):
            reader.feed(stream[start : start + size])
        assert [m for m, _ in reader.frames] == [{"kind": "hello", "n": 1}, {"kind": "response", "id": 7}]
        assert reader.frames[0][1] is None and bytes(reader.frames[1][1] or b"") == blob


def test_blob_can_be_received_in_place() -> None:
    reader = FrameReader()
    head, payload = encode_frame({"id": 1}, b"abcdef")
    reader.feed(bytes(head))
    target = reader.blob_target()
    assert target is not None and len(target) == 6
    target[:6] = bytes(payload)
    reader.advance_blob(6)
    assert reader.frames == [({"id": 1}, bytearray(b"abcdef"))]


def test_corrupt_frames_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError, match="not JSON"):
        FrameReader().feed(HEADER.pack(3, 0) + b"{x}")
    with pytest.raises(ProtocolError, match="corrupt"):
        FrameReader().feed(HEADER.pack(1 << 30, 0))


def test_config_crosses_as_json() -> None:
    config = DesktopConfig(
        screen=(800, 600), timeouts=Timeouts(act=3.0), osworld_path=Path("/tmp/osw"), options={"latency": {"act": 0.1}}
    )
    data = json.loads(json.dumps(config_to_json(config)))
    assert config_from_json(data) == config
    with pytest.raises(ConfigError, match="JSON values"):
        config_to_json(DesktopConfig(options={"bad": object()}))


def test_screen_buffer_is_shared_through_its_descriptor() -> None:
    image = np.arange(12 * 10 * 3, dtype=np.uint8).reshape(12, 10, 3)
    owner = ScreenBuffer(image.nbytes)
    assert owner.fd is not None
    other = ScreenBuffer(image.nbytes, fd=__import__("os").dup(owner.fd))
    assert other.write(image)
    assert np.array_equal(owner.array(image.shape), image)
    assert not other.write(np.zeros((13, 10, 3), np.uint8))  # too big: not written
    other.close()
    owner.close()


def test_worker_imports_only_stdlib_numpy_and_its_backend() -> None:
    prelude = process._BOOTSTRAP.split("from legato_gym.vector.worker")[0]
    code = prelude + (
        "import legato_gym.vector.worker, legato_gym.episode, legato_gym.backends.fake; "
        "print([m for m in ('gymnasium', 'pydantic', 'httpx', 'legato_rl') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
