"""The lookalike's pictures stored on disk (legato_gym.backends.local.sandbox.drawn): drawn once, read back the same,
drawn anew when what they are drawn from changed or the stored copy is broken."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from legato_gym.backends.local.sandbox import drawn, lookalike


class Counting:
    """A drawing function that counts its calls and draws something that depends on the screen."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, screen: tuple[int, int]) -> drawn.Drawn:
        self.calls += 1
        return ((("a.z", bytes(range(256)) * screen[0]), ("b.z", b"")), f'{{"width": {screen[0]}}}')


@pytest.fixture(autouse=True)
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEGATO_DRAWN_CACHE", str(tmp_path / "store"))
    return tmp_path / "store"


def test_pictures_are_drawn_once_and_read_back_the_same(tmp_path: Path) -> None:
    draw = Counting()
    first = drawn.stored((3, 2), draw)
    assert drawn.stored((3, 2), draw) == first == draw((3, 2))
    assert draw.calls == 2  # the stored call, and the one above
    assert drawn.stored((4, 2), draw)[1] == '{"width": 4}' and draw.calls == 3  # another screen, another copy


def test_a_changed_input_or_a_broken_copy_is_drawn_again(tmp_path: Path, store: Path) -> None:
    draw = Counting()
    source = tmp_path / "applications"
    source.mkdir()
    drawn.stored((3, 2), draw, [source])
    (source / "new.desktop").write_text("[Desktop Entry]\n")  # an install: the folder's time changes
    os.utime(source, ns=(1, 1))
    drawn.stored((3, 2), draw, [source])
    assert draw.calls == 2
    for copy in store.iterdir():
        copy.write_bytes(copy.read_bytes()[:-5])  # cut short
    assert drawn.stored((3, 2), draw, [source]) == draw((3, 2))
    assert draw.calls == 4


def test_only_the_newest_copies_are_kept(store: Path) -> None:
    draw = Counting()
    for width in range(1, drawn.KEEP + 3):
        drawn.stored((width, 1), draw)
        os.utime(next(p for p in store.iterdir() if p.stat().st_mtime_ns > 10**9), ns=(width, width))
    drawn.stored((100, 1), draw)  # the newest: the oldest three go
    assert len(list(store.iterdir())) == drawn.KEEP
    drawn.stored((drawn.KEEP + 2, 1), draw)
    assert draw.calls == drawn.KEEP + 3  # the newest of the older ones was kept


def test_an_unwritable_store_still_gives_the_pictures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("LEGATO_DRAWN_CACHE", str(tmp_path / "file" / "store"))  # under a file: no folder
    draw = Counting()
    assert drawn.stored((3, 2), draw) == draw((3, 2))


def test_the_lookalikes_stored_pictures_are_the_drawn_ones() -> None:
    lookalike._rendered.cache_clear()
    try:
        stored = lookalike._rendered((640, 480))
        lookalike._rendered.cache_clear()
        assert lookalike._rendered((640, 480)) == stored  # the first was drawn (an empty store), this one read
    finally:
        lookalike._rendered.cache_clear()
