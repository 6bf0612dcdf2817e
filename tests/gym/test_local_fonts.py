"""The lookalike session's fonts and GTK settings (:mod:`legato_gym.backends.local.sandbox.fonts`): the Ubuntu
font from npm where it is installed, Cantarell with a line saying how to get it where not, and xsettingsd's
configuration. The desktop itself is checked in test_local_lookalike.py."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pytest

from legato_gym.backends.local.sandbox import fonts, lookalike
from legato_gym.backends.local.sandbox.shell import session_environment

ROOT = Path(__file__).resolve().parents[2]


def test_scripts_test_installs_the_pinned_release() -> None:
    script = (ROOT / "scripts" / "test").read_text()
    assert re.search(rf"^UBUNTU_FONT_VERSION={re.escape(fonts.UBUNTU_FONT_VERSION)}$", script, re.M)
    assert re.search(r"^  xsettingsd\b", script, re.M)


def test_without_the_ubuntu_font_the_lookalike_draws_in_cantarell_and_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("LEGATO_FONTS", str(tmp_path))  # an empty npm prefix
    fonts.say_missing.cache_clear()
    with caplog.at_level(logging.INFO, logger=fonts.__name__):
        assert fonts.sandbox_paths("lookalike") == ()
    assert fonts.SETUP_HINT in caplog.text
    assert not fonts.installed() and fonts.fontconfig_conf() is None
    assert lookalike.title_font() == lookalike.FALLBACK_TITLE_FONT
    assert "FONTCONFIG_FILE" not in session_environment("lookalike")
    if Path("/usr/share/fonts/opentype/cantarell/Cantarell-Regular.otf").is_file():
        assert lookalike._font("regular", 15).getname() == ("Cantarell", "Regular")


@pytest.mark.skipif(not fonts.installed(), reason=f"the Ubuntu font is not installed: {fonts.SETUP_HINT}")
def test_with_the_ubuntu_font_the_lookalike_and_the_sandbox_use_it() -> None:
    assert lookalike._font("regular", 15).getname() == ("Ubuntu", "Regular")
    assert lookalike._font("bold", 15).getname() == ("Ubuntu", "Bold")
    assert lookalike.title_font() == ("Ubuntu", 11, "Bold")
    assert "<name>Ubuntu</name><size>11</size><weight>Bold</weight>" in lookalike.lookalike_theme()
    folders = fonts.sandbox_paths("lookalike")
    assert len(folders) == 2 and all(
        Path(folder, "ubuntu-latin-400-normal.woff").is_file()
        or Path(folder, "ubuntu-mono-latin-400-normal.woff").is_file()
        for folder in folders
    )
    assert fonts.sandbox_paths("openbox") == ()
    conf = fonts.fontconfig_conf() or ""
    assert all(f"<dir>{folder}</dir>" in conf for folder in folders) and "/etc/fonts/fonts.conf" in conf
    assert session_environment("lookalike")["FONTCONFIG_FILE"] == f"{lookalike.LOOKALIKE_DIR}/fonts.conf"


def test_xsettingsd_gets_the_vms_gtk_settings() -> None:
    conf = fonts.xsettings_conf().splitlines()
    assert 'Net/ThemeName "Yaru"' in conf and 'Gtk/FontName "Ubuntu 11"' in conf
    assert "Gtk/CursorThemeSize 24" in conf and 'Gtk/MonospaceFontName "Ubuntu Mono 13"' in conf
    assert len(conf) == len(fonts.XSETTINGS)


def test_a_glyph_is_copied_with_its_ink_right_of_its_advance() -> None:
    """Ubuntu's "f" reaches into the next cell: the strip's table copies it whole, its colour fringe too, a pixel
    past the font's box at most (the panel copies right to left, so that the next glyph's cell does not cut it)."""
    strip, table = lookalike._glyphs("regular", 15, (255, 255, 255), (0, 0, 0))
    font = lookalike._font("regular", 15)
    inked = np.nonzero(np.asarray(strip).max(axis=(0, 2)) > 0)[0]
    for char, (x, advance, ink) in table["chars"].items():
        assert advance <= ink <= max(advance, font.getbbox(char)[2] + 1), char
        cell = inked[(inked >= x) & (inked < x + max(advance, font.getbbox(char)[2] + 1))]
        assert len(cell) == 0 or cell.max() < x + ink, char  # nothing of it left out
    if fonts.installed():
        assert table["chars"]["f"][2] > table["chars"]["f"][1]
