"""Getters and metrics that OSWorld's task data names but desktop-env 1.0.2, the newest on PyPI, does not have.

OSWorld's task files moved on after its last PyPI release: a few tasks name a getter or a metric that only
OSWorld's repository has. desktop-env resolves a task's metric by name in ``desktop_env.evaluators.metrics``
and a result spec ``{"type": X}`` as ``get_X`` in ``desktop_env.evaluators.getters`` (``DesktopEnv.
_set_task_info``), so :func:`install` adds the ones here to those modules, each only where desktop-env has
none of that name (a desktop-env that has it keeps its own). Each follows the definition in OSWorld's
repository: same inputs, same rule, same answer.

Runs inside desktop-env's interpreter; the getter imports Playwright (one of desktop-env's requirements)
when it runs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from legato_gym.errors import MissingDependencyError

__all__ = [
    "GETTERS",
    "METRICS",
    "appearance_mode",
    "check_play_and_exit",
    "get_chrome_appearance_mode_ui",
    "install",
    "preferences_mode",
]

logger = logging.getLogger(__name__)


def check_play_and_exit(actual_config_path: str | None, rule: Mapping[str, Any]) -> float:
    """Whether VLC's ``vlcrc`` has ``play-and-exit`` (quit at the end of the playlist) as the rule expects.

    ``rule["expected_play_and_exit"]`` is compared as text (``0`` and ``"0"`` alike). The last line that
    names ``play-and-exit=`` gives the value, commented or not: VLC writes an option at its default as a
    comment (``#play-and-exit=0``). With no such line the value is ``0``, VLC's default. A missing or
    unreadable file scores 0.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix="vlcrc", delete=False) as f:
        ...     _ = f.write("[core]\\n#play-and-exit=0\\nplay-and-exit=1\\n")
        >>> check_play_and_exit(f.name, {"expected_play_and_exit": 1})
        1.0
        >>> check_play_and_exit(f.name, {"expected_play_and_exit": 0})
        0.0
    """
    if not actual_config_path:
        return 0.0
    expected = str(rule["expected_play_and_exit"])
    try:
        with open(actual_config_path, "rb") as file:
            text = file.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        logger.error("VLC's configuration file could not be read: %s", exc)
        return 0.0
    value = "0"
    for line in text.split("\n"):
        if "play-and-exit=" in line:
            value = line.split("=")[-1].strip()
    return 1.0 if value == expected else 0.0


# ----------------------------------------------------------------------------- chrome_appearance_mode_ui

#: Chrome's settings page for its theme and mode, which the getter opens in a new tab (and leaves open).
SETTINGS_APPEARANCE = "chrome://settings/appearance"
#: The prefs the getter reads from the settings page: Chrome's mode (0 device, 1 light, 2 dark), before and
#: after Chrome renamed it, and the Linux theme (0 classic, 1 GTK, 2 Qt), which OSWorld reads as 0 light, 1 dark.
APPEARANCE_PREFS = ("browser.theme.color_scheme", "browser.theme.color_scheme2", "extensions.theme.system_theme")
#: How long the settings page may take to load, and then to show Chrome's prefs and mode.
NAVIGATION_TIMEOUT_S = 30.0
READY_TIMEOUT_S = 10.0
#: How long the Preferences fallback waits for Chrome to write a light mode to its file.
PREFERENCES_TIMEOUT_S = 5.0

# The settings page's facts, read where OSWorld reads them: the prefs the page's `settings-ui` holds, and the
# text of every selected or checked element in the document and all its shadow trees.
_FACTS_JS = """
(paths) => {
  const prefs = {};
  const ui = document.querySelector('settings-ui');
  for (const path of paths) {
    let node = ui ? ui.prefs : undefined;
    for (const key of path.split('.')) node = node && typeof node === 'object' ? node[key] : undefined;
    if (node && typeof node === 'object' && Object.prototype.hasOwnProperty.call(node, 'value')) {
      prefs[path] = node.value;
    }
  }
  const texts = [];
  const visit = (root) => {
    for (const el of root.querySelectorAll('[selected],[checked],[aria-checked="true"],option:checked')) {
      const text = (el.innerText || el.textContent || '').trim();
      if (text) texts.push(text);
    }
    for (const el of root.querySelectorAll('*')) if (el.shadowRoot) visit(el.shadowRoot);
  };
  visit(document);
  return {prefs, texts};
}
"""

# Ready: the page holds Chrome's prefs, and its Mode dropdown has been given Chrome's mode. Until Chrome
# answers, the dropdown shows its first option, Light, with no option selected: read then, the page says light.
_READY_JS = """
() => {
  const ui = document.querySelector('settings-ui');
  if (!ui || !ui.prefs) return false;
  const find = (root) => {
    const page = root.querySelector('settings-appearance-page');
    if (page) return page;
    for (const el of root.querySelectorAll('*')) {
      const found = el.shadowRoot ? find(el.shadowRoot) : null;
      if (found) return found;
    }
    return null;
  };
  const page = find(document);
  const select = page && page.shadowRoot ? page.shadowRoot.querySelector('#colorSchemeModeSelect') : null;
  if (!page || !select) return false;
  return page.selectedColorSchemeMode_ !== undefined
    || Array.from(select.options).some((option) => option.hasAttribute('selected'));
}
"""


def _js_text(value: Any) -> str | None:
    """``String(value).toLowerCase()`` as JavaScript writes a number, string or boolean; else ``None``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    if isinstance(value, str):
        return value.lower()
    return None


def _scheme_mode(value: Any) -> str | None:
    """A ``color_scheme`` value as a mode: ``1``/``"light"`` light, ``2``/``"dark"`` dark, ``0``/``"system"``/
    ``"default"``/``"device"`` system (case-insensitive; booleans are none of them)."""
    text = _js_text(value)
    if text in ("1", "light"):
        return "light"
    if text in ("2", "dark"):
        return "dark"
    if text in ("0", "system", "default", "device"):
        return "system"
    return None


def _system_theme_mode(value: Any) -> str | None:
    """``extensions.theme.system_theme`` as OSWorld reads it: ``0``/``"0"``/``false`` light, ``1``/``"1"``/``true``
    dark (exact values, as JavaScript's ``===``)."""
    if isinstance(value, bool):
        return "dark" if value else "light"
    if isinstance(value, int | float) and value in (0, 1):
        return "dark" if value == 1 else "light"
    if value in ("0", "1"):
        return "dark" if value == "1" else "light"
    return None


def _text_mode(text: str) -> str | None:
    """A selected or checked element's text as a mode: it says light, else dark, else device/system/default."""
    lowered = text.lower()
    if "light" in lowered:
        return "light"
    if "dark" in lowered:
        return "dark"
    if any(word in lowered for word in ("device", "system", "default")):
        return "system"
    return None


def appearance_mode(prefs: Mapping[str, Any], texts: Iterable[str]) -> str | None:
    """Chrome's mode as OSWorld's getter reads it off the settings page, or ``None`` if the page says nothing.

    Every source votes: each of :data:`APPEARANCE_PREFS` the page holds, then each selected or checked
    element's text. Any vote for light wins, then any for dark, then any for system.

    Example:
        >>> appearance_mode({"extensions.theme.system_theme": 1}, ["Dark", "100%"])
        'dark'
        >>> appearance_mode({"extensions.theme.system_theme": 1}, ["Light"])
        'light'
        >>> appearance_mode({"extensions.theme.system_theme": 1}, ["Device"])  # the GTK theme outvotes it
        'dark'
    """
    votes: list[str | None] = []
    for path, value in prefs.items():
        if path == "extensions.theme.system_theme":
            votes.append(_system_theme_mode(value))
        elif path in APPEARANCE_PREFS:
            votes.append(_scheme_mode(value))
    votes += [_text_mode(text) for text in texts]
    return next((mode for mode in ("light", "dark", "system") if mode in votes), None)


def _file_scheme_mode(value: Any) -> str | None:
    """A ``color_scheme`` value in the ``Preferences`` file as a mode: a number ``0``/``1``/``2`` (truncated)
    system/light/dark, or the text ``system``/``default``/``0``, ``light``/``1``, ``dark``/``2``."""
    if isinstance(value, str):
        text = value.strip().lower()
        return next((mode for mode, words in _FILE_WORDS.items() if text in words), None)
    if isinstance(value, int | float):
        return {0: "system", 1: "light", 2: "dark"}.get(int(value))
    return None


_FILE_WORDS = {"system": ("system", "default", "0"), "light": ("light", "1"), "dark": ("dark", "2")}


def preferences_mode(preferences: Mapping[str, Any]) -> str:
    """Chrome's mode from its ``Preferences`` file, as OSWorld's ``get_chrome_color_scheme`` reads it.

    ``browser.theme.color_scheme2`` (else ``color_scheme``) gives the mode; ``extensions.theme.system_theme``
    of ``0`` (the classic theme) reads as light whatever the mode; anything else is ``"system"``.

    Example:
        >>> preferences_mode({"browser": {"theme": {"color_scheme": 1, "color_scheme2": 2}}})
        'dark'
        >>> preferences_mode({"browser": {"theme": {"color_scheme2": 2}}, "extensions": {"theme": {"system_theme": 0}}})
        'light'
    """
    theme = _branch(preferences, "browser", "theme")
    mode = _file_scheme_mode(theme.get("color_scheme2", theme.get("color_scheme")))
    if _branch(preferences, "extensions", "theme").get("system_theme") in (0, "0", False):
        return "light"
    return mode or "system"


def _branch(tree: Mapping[str, Any], *keys: str) -> Mapping[str, Any]:
    """``tree[k1][k2]...``, or ``{}`` where a level is missing or not a mapping."""
    for key in keys:
        value = tree.get(key)
        tree = value if isinstance(value, Mapping) else {}
    return tree


def _playwright() -> Any:
    """``playwright.sync_api``, or a clear error outside desktop-env's interpreter."""
    try:
        import playwright.sync_api as api  # type: ignore[import-not-found]
    except ImportError as exc:
        raise MissingDependencyError(
            "the getter chrome_appearance_mode_ui needs Playwright, one of desktop-env's requirements: run it in "
            "desktop-env's interpreter (`legato osworld setup`)"
        ) from exc
    return api


def _settings_page_mode(url: str) -> str | None:
    """The mode Chrome's settings page shows, read through DevTools at ``url``; ``None`` if it says nothing.

    Opens :data:`SETTINGS_APPEARANCE` in a new tab of Chrome's first context and leaves it open, as OSWorld's
    getter does (the task's next getter, the active tab's URL, then reads that tab).

    Raises:
        playwright's ``Error``: DevTools did not answer, or the page did not load.
    """
    api = _playwright()
    with api.sync_playwright() as playwright:
        browser = playwright.chromium.connect_over_cdp(url)
        page = browser.contexts[0].new_page()
        page.goto(SETTINGS_APPEARANCE, wait_until="domcontentloaded", timeout=NAVIGATION_TIMEOUT_S * 1000)
        try:
            page.wait_for_function(_READY_JS, timeout=READY_TIMEOUT_S * 1000, polling=100)
        except api.TimeoutError:  # a Chrome whose page has no such dropdown: read what it shows by now
            logger.info("Chrome's settings page showed no mode within %g s; reading it as it is", READY_TIMEOUT_S)
        facts = page.evaluate(_FACTS_JS, list(APPEARANCE_PREFS))
        browser.close()  # a browser reached over DevTools is only disconnected from: the tab stays
    return appearance_mode(facts.get("prefs") or {}, facts.get("texts") or [])


def _preferences_file_mode(env: Any) -> str:
    """The mode in Chrome's ``Preferences`` file (its Default profile), given time to write a light one.

    Chrome writes the file a moment after a change, so it is read again until it says light or
    :data:`PREFERENCES_TIMEOUT_S` has passed; then its last mode counts (``"system"`` if never readable).
    """
    command = "import os; print(os.path.join(os.getenv('HOME'), '.config/google-chrome/Default/Preferences'))"
    answer = env.controller.execute_python_command(command)
    path = str((answer or {}).get("output") or "").strip()
    if not path:
        logger.error("Chrome's Preferences file could not be located: %r", answer)
        return "system"
    deadline = time.monotonic() + PREFERENCES_TIMEOUT_S
    mode = "system"
    while True:
        content = env.controller.get_file(path)
        if content:
            try:
                mode = preferences_mode(json.loads(content))
            except ValueError as exc:
                logger.info("Chrome's Preferences could not be parsed (%s); reading it again", exc)
        if mode == "light" or time.monotonic() >= deadline:
            return mode
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def get_chrome_appearance_mode_ui(env: Any, config: Mapping[str, Any]) -> str:
    """Chrome's mode (``"light"``, ``"dark"`` or ``"system"``) as its settings page shows it.

    OSWorld's ``get_chrome_appearance_mode_ui``: opens ``chrome://settings/appearance`` in a new tab through
    Chrome's DevTools (``env.vm_ip:env.chromium_port``), and reads the mode off the page with
    :func:`appearance_mode` once the page shows Chrome's prefs and mode (OSWorld waits a fixed 2.5 s, which
    a slow desktop can outlast). The tab stays open, and active. If DevTools does not answer, the page fails,
    or it says nothing, the mode comes from Chrome's ``Preferences`` file instead (:func:`preferences_mode`).

    Raises:
        MissingDependencyError: Playwright is not installed (outside desktop-env's interpreter).
    """
    api = _playwright()
    try:
        mode = _settings_page_mode(f"http://{env.vm_ip}:{env.chromium_port}")
    except (api.Error, OSError, IndexError) as exc:
        logger.info("Chrome's settings page could not be read (%s); reading its Preferences", exc)
        mode = None
    return mode if mode is not None else _preferences_file_mode(env)


#: The metrics and getters :func:`install` adds, by the name desktop-env looks them up by.
METRICS: dict[str, Callable[..., float]] = {"check_play_and_exit": check_play_and_exit}
GETTERS: dict[str, Callable[[Any, Mapping[str, Any]], Any]] = {
    "get_chrome_appearance_mode_ui": get_chrome_appearance_mode_ui
}


def install(metrics: Any, getters: Any) -> list[str]:
    """Add :data:`METRICS` to desktop-env's ``metrics`` module and :data:`GETTERS` to its ``getters`` module
    where they lack them; the names added."""
    added = []
    for module, functions in ((metrics, METRICS), (getters, GETTERS)):
        for name, func in functions.items():
            if not hasattr(module, name):
                setattr(module, name, func)
                added.append(name)
    return added
