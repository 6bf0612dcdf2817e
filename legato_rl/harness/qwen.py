"""OSWorld's Qwen3-VL computer-use format (``mm_agents/qwen3vl_agent.py``), with its rough edges filed off.

The prompt: a system message declaring one ``computer_use`` function tool; then, for the last
``image_max - 1`` steps, a user message holding that step's screenshot followed by an assistant message
holding the model's raw reply; then a user message with the current screenshot. The first user message
also carries the text::

    Please generate the next move according to the UI screenshot, instruction and previous actions.

    Instruction: <instruction>

    Previous actions:
    Step 1: <Action line of step 1>
    ...

where ``Previous actions`` lists the steps older than the screenshots kept (``None`` when there are none).
Coordinates are on a 0..999 grid (the prompt states a 1000x1000 screen) and are mapped to pixels of the
screenshot as ``int(x * W / 999)``, as OSWorld does.

Differences from OSWorld's agent, each on purpose:

* ``image_max`` screenshots (default 20) instead of OSWorld's 5: with 15 steps the prompt then only ever
  grows at its end, which the server's prefix cache and the record store's deduplication both reward.
* ``terminate`` maps to ``DONE`` when its status is ``success`` and to ``FAIL`` when it is ``failure``.
  OSWorld maps both to ``DONE``, so an agent can never declare a task infeasible and the infeasible tasks
  (graded 1 only when the last action is ``FAIL``) are unscoreable. A missing status counts as success.
* Typed text is escaped (``repr``), one ``typewrite`` per line with ``press('enter')`` between lines; in
  one action string, so a multi-line text is one desktop step.
* A ``<tool_call>`` block written on a single line is read (OSWorld's line-based parser drops it);
  ``<think>`` blocks are ignored; coordinates are clamped to the screen; ``scroll`` at a coordinate
  scrolls there.
* Unknown actions or malformed arguments are errors recorded on the step instead of silent no-ops (see
  :mod:`legato_rl.harness.base` for what an unparsable reply does).
* A hostile reply costs at most its step: a tool call nested deeper than :data:`MAX_CALL_DEPTH` levels is
  an unparsable call (its error on the step, the attempt ``ok``) and is never handed to a recursive parser,
  and reading a reply takes time linear in its length (the policy client bounds that length).
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from legato_gym.errors import ConfigError
from legato_gym.png import png_size
from legato_rl.harness.base import BaseHarness, ParsedReply, Screenshot, Turn
from legato_rl.harness.qwen_prompt import COMPUTER_USE_ACTIONS, USER_TEXT, build_system_prompt
from legato_rl.images import PngDataURL

__all__ = [
    "COMPUTER_USE_ACTIONS",
    "MAX_CALL_DEPTH",
    "QWEN3_FACTOR",
    "QwenHarness",
    "build_system_prompt",
    "smart_resize",
]

#: Qwen3-VL's resize factor: patch size 16 times spatial merge 2.
QWEN3_FACTOR = 32

#: Deepest JSON nesting read in a tool call (a real one nests 3 levels: call, arguments, coordinate).
MAX_CALL_DEPTH = 32

_MAX_RATIO = 200
_GRID = 999

# Common spellings of key names that pyautogui knows under another name.
_KEY_ALIASES = {
    "return": "enter",
    "control": "ctrl",
    "control_l": "ctrl",
    "control_r": "ctrl",
    "escape": "esc",
    "del": "delete",
    "super": "win",
    "super_l": "win",
    "meta": "win",
    "cmd": "command",
    "page_up": "pageup",
    "page_down": "pagedown",
    "arrowup": "up",
    "arrowdown": "down",
    "arrowleft": "left",
    "arrowright": "right",
    "bksp": "backspace",
    "spacebar": "space",
    "alt_l": "alt",
    "alt_r": "alt",
    "shift_l": "shift",
    "shift_r": "shift",
}

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_CODE_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def smart_resize(
    height: int,
    width: int,
    *,
    factor: int = QWEN3_FACTOR,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
) -> tuple[int, int]:
    """The size Qwen-VL's image processor resizes an image to: ``(height, width)``.

    Each side is rounded to a multiple of ``factor``, then both are scaled together (keeping the aspect
    ratio) so that the area lies within ``[min_pixels, max_pixels]``. This is the rule of qwen-vl-utils'
    ``smart_resize``; ``factor`` is 32 for Qwen3-VL and 28 for Qwen2.5-VL.

    Args:
        height: the image's height in pixels.
        width: the image's width in pixels.
        factor: the multiple each side is rounded to.
        min_pixels: smallest area; defaults to ``4 * factor**2``.
        max_pixels: largest area; defaults to ``16384 * factor**2``.

    Returns:
        ``(height, width)``, both multiples of ``factor``.

    Raises:
        ConfigError: a side is not positive, or the aspect ratio exceeds 200.

    Example:
        >>> smart_resize(1080, 1920)
        (1088, 1920)
        >>> smart_resize(1080, 1920, factor=28, max_pixels=1_003_520)
        (728, 1316)
    """
    if height <= 0 or width <= 0:
        raise ConfigError(f"smart_resize: image size {width}x{height} must be positive")
    if max(height, width) / min(height, width) > _MAX_RATIO:
        raise ConfigError(f"smart_resize: aspect ratio of {width}x{height} exceeds {_MAX_RATIO}; crop the image first")
    min_pixels = 4 * factor * factor if min_pixels is None else min_pixels
    max_pixels = 16384 * factor * factor if max_pixels is None else max_pixels
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


class _BadCall(Exception):
    """A tool call that cannot be turned into an action (internal to parsing)."""


@dataclass(frozen=True)
class QwenHarness(BaseHarness):
    """OSWorld's Qwen3-VL computer-use format (see the module docstring).

    Args:
        image_max: screenshots kept in the prompt, the current one included (``--image-max``); older
            steps appear only as their ``Action:`` lines.
        resize: resize screenshots with :func:`smart_resize` before sending them, as OSWorld's agent does
            (1920x1080 becomes 1920x1088). Off by default: the server's processor applies the same rule.
        factor: :func:`smart_resize`'s factor (32 for Qwen3-VL, 28 for Qwen2.5-VL).
        min_pixels: :func:`smart_resize`'s smallest area (default ``4 * factor**2``).
        max_pixels: :func:`smart_resize`'s largest area (OSWorld's agent uses 13,107,200).
        png_compress_level: zlib level of the PNG encoding (0..9); 1 is fast and small enough for screens.
        type_interval: seconds between typed characters (``typewrite``'s ``interval``), as OSWorld's newer
            agent uses so that applications do not drop keys; 0 types at once.
        drag_duration: seconds of a ``left_click_drag`` when the call gives no ``duration``.
        max_calls: tool calls read from one reply; later ones are not run and the step records an error
            (a reply cannot make thousands of desktop steps).

    Example:
        >>> reply = QwenHarness().parse_reply(
        ...     'Action: Open the file.\\n<tool_call>\\n{"name": "computer_use", "arguments": '
        ...     '{"action": "double_click", "coordinate": [999, 0]}}\\n</tool_call>', (1920, 1080))
        >>> reply.actions, reply.description
        (('pyautogui.doubleClick(1919, 0)',), 'Open the file.')
    """

    image_max: int = 20
    resize: bool = False
    factor: int = QWEN3_FACTOR
    min_pixels: int | None = None
    max_pixels: int | None = 16 * 16 * 4 * 12800
    png_compress_level: int = 1
    type_interval: float = 0.03
    drag_duration: float = 0.5
    max_calls: int = 16

    def __post_init__(self) -> None:
        if self.image_max < 1:
            raise ConfigError(f"image_max={self.image_max!r} must be at least 1 (the current screenshot)")
        if not 0 <= self.png_compress_level <= 9:
            raise ConfigError(f"png_compress_level={self.png_compress_level!r} must be between 0 and 9")
        if self.type_interval < 0 or self.drag_duration < 0:
            raise ConfigError("type_interval and drag_duration must not be negative")
        if self.max_calls < 1:
            raise ConfigError(f"max_calls={self.max_calls!r} must be at least 1")

    @property
    def name(self) -> str:
        """``"qwen3vl"``."""
        return "qwen3vl"

    @property
    def system_prompt(self) -> str:
        """The system message's text."""
        return _SYSTEM_PROMPT

    # -- prompt ---------------------------------------------------------------------------------------

    def encode_image(self, screenshot: Screenshot, *, png: bytes | None = None) -> PngDataURL:
        """The screenshot as a ``data:image/png;base64,...`` URL (resized first when ``resize`` is set).

        The URL is a :class:`~legato_rl.images.PngDataURL`: it keeps the PNG bytes, which the record store
        files as they are.

        Args:
            screenshot: the screen, ``(H, W, 3)`` ``uint8``.
            png: the same screenshot PNG-encoded (a vector env worker's ``info["screenshot_png"]``). It is
                sent as it is, unless ``resize`` changes the image's size: then the array is resized and
                encoded here.

        Raises:
            ConfigError: the array is not ``(H, W, 3)`` ``uint8``, or ``png`` is not a PNG of its size.
        """
        # with png= and no resize the pixels are not read: a vector env's LazyScreenshot then stays undecoded
        lazy = png is not None and not self.resize and hasattr(screenshot, "shape") and hasattr(screenshot, "dtype")
        array = screenshot if lazy else np.asarray(screenshot)
        if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8:
            raise ConfigError(
                f"a screenshot must be an (H, W, 3) uint8 array, got shape {array.shape} dtype {array.dtype}"
            )
        size: tuple[int, int] | None = None
        if self.resize:
            size = smart_resize(
                array.shape[0],
                array.shape[1],
                factor=self.factor,
                min_pixels=self.min_pixels,
                max_pixels=self.max_pixels,
            )
            if size == array.shape[:2]:
                size = None
        if png is not None and size is None:
            if png_size(png) != (array.shape[1], array.shape[0]):
                raise ConfigError(
                    f"png= is not a PNG of the screenshot's size {array.shape[1]}x{array.shape[0]} (its header "
                    f"says {png_size(png)}); pass the screenshot's own PNG bytes, or png=None"
                )
            return PngDataURL(png)
        from PIL import Image

        image = Image.fromarray(array)
        if size is not None:
            image = image.resize((size[1], size[0]), Image.Resampling.BICUBIC)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", compress_level=self.png_compress_level)
        return PngDataURL(buffer.getvalue())

    def build_messages(self, instruction: str, image_url: str, history: Sequence[Turn]) -> list[dict[str, Any]]:
        """The messages for the next call (see the module docstring for the layout).

        Args:
            instruction: the task's instruction.
            image_url: the current screenshot, from :meth:`encode_image`.
            history: the attempt's earlier steps, oldest first.
        """
        kept = min(self.image_max - 1, len(history))
        older = history[: len(history) - kept]
        previous = "\n".join(f"Step {i}: {_step_line(turn)}" for i, turn in enumerate(older, start=1)) or "None"
        text = {"type": "text", "text": USER_TEXT.format(instruction=instruction, previous=previous)}
        messages: list[dict[str, Any]] = [{"role": "system", "content": [{"type": "text", "text": _SYSTEM_PROMPT}]}]
        for index, turn in enumerate(history[len(history) - kept :]):
            content: list[dict[str, Any]] = [_image_part(turn.image_url)]
            if index == 0:
                content.append(text)
            messages.append({"role": "user", "content": content})
            messages.append({"role": "assistant", "content": [{"type": "text", "text": turn.reply}]})
        current: list[dict[str, Any]] = [_image_part(image_url)]
        if kept == 0:
            current.append(text)
        messages.append({"role": "user", "content": current})
        return messages

    # -- reply ----------------------------------------------------------------------------------------

    def parse_reply(self, content: str, screen_size: tuple[int, int]) -> ParsedReply:
        """Read the ``Action:`` line and the ``computer_use`` calls of a reply.

        Args:
            content: the reply's text.
            screen_size: ``(width, height)`` of the screenshot the reply answered.

        Returns:
            The actions (empty when none could be read, with ``error`` saying why) and the description.
        """
        text = _strip_thinking(content or "")
        description = ""
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.lower().startswith("action:"):
                description = stripped[len("action:") :].strip()
                break
        blocks = [match.group(1) for match in _TOOL_CALL.finditer(text)]
        if not blocks:
            blocks = [
                line.strip()
                for line in text.splitlines()
                if line.strip().startswith("{") and line.strip().endswith("}") and '"arguments"' in line
            ]
        if not blocks:
            return ParsedReply(actions=(), description=description, error="no <tool_call> block in the reply")
        actions: list[str] = []
        errors: list[str] = []
        first_action_name = ""
        if len(blocks) > self.max_calls:
            errors.append(f"{len(blocks)} tool calls in one reply; only the first {self.max_calls} were read")
            blocks = blocks[: self.max_calls]
        for number, block in enumerate(blocks, start=1):
            try:
                name, action = self._call_to_action(block, screen_size)
            except _BadCall as exc:
                errors.append(f"tool call {number}: {exc}")
                continue
            first_action_name = first_action_name or name
            actions.append(action)
            if action in ("DONE", "FAIL"):
                break
        if not description and first_action_name:
            description = f"Performing {first_action_name} action"
        return ParsedReply(actions=tuple(actions), description=description, error="; ".join(errors) if errors else None)

    def _call_to_action(self, block: str, screen_size: tuple[int, int]) -> tuple[str, str]:
        body = _CODE_FENCE.sub("", block.strip())
        if _nests_deeper(body, MAX_CALL_DEPTH):
            raise _BadCall(f"the call nests deeper than {MAX_CALL_DEPTH} levels of JSON: {_clip(body)}")
        try:
            call = json.loads(body)
        except json.JSONDecodeError as exc:
            raise _BadCall(f"invalid JSON ({exc.msg} at character {exc.pos}): {_clip(body)}") from exc
        except RecursionError as exc:  # pragma: no cover - _nests_deeper keeps the parser shallow
            raise _BadCall(f"the call nests too deep to read: {_clip(body)}") from exc
        if not isinstance(call, dict):
            raise _BadCall(f"expected a JSON object, got {_clip(body)}")
        if call.get("name") != "computer_use":
            raise _BadCall(f"unknown function {call.get('name')!r}; the only function is 'computer_use'")
        args = call.get("arguments")
        if isinstance(args, str):  # some servers double-encode the arguments
            if _nests_deeper(args, MAX_CALL_DEPTH):
                raise _BadCall(f"the arguments nest deeper than {MAX_CALL_DEPTH} levels of JSON: {_clip(args)}")
            try:
                args = json.loads(args)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise _BadCall(f"arguments are not a JSON object: {_clip(args)}") from exc
        if not isinstance(args, dict):
            raise _BadCall(f"arguments must be a JSON object, got {args!r}")
        action = args.get("action")
        if action not in COMPUTER_USE_ACTIONS:
            raise _BadCall(f"unknown action {action!r}; expected one of {', '.join(COMPUTER_USE_ACTIONS)}")
        return str(action), self._action_code(str(action), args, screen_size)

    def _action_code(self, action: str, args: Mapping[str, Any], screen_size: tuple[int, int]) -> str:
        if action in _CLICKS:
            function = _CLICKS[action]
            if args.get("coordinate") is None:
                return f"pyautogui.{function}()"
            x, y = _point(args["coordinate"], screen_size)
            return f"pyautogui.{function}({x}, {y})"
        if action == "mouse_move":
            x, y = _point(_required(args, "coordinate", action), screen_size)
            return f"pyautogui.moveTo({x}, {y})"
        if action == "left_click_drag":
            x, y = _point(_required(args, "coordinate", action), screen_size)
            duration = _number(args.get("duration", self.drag_duration), "duration")
            return f"pyautogui.dragTo({x}, {y}, duration={duration!r})"
        if action == "type":
            return self._type_code(_required(args, "text", action))
        if action == "key":
            return _key_code(_required(args, "keys", action))
        if action == "scroll":
            pixels = _number(_required(args, "pixels", action), "pixels")
            clicks = round(pixels)
            if args.get("coordinate") is None:
                return f"pyautogui.scroll({clicks})"
            x, y = _point(args["coordinate"], screen_size)
            return f"pyautogui.scroll({clicks}, x={x}, y={y})"
        if action == "wait":
            return "WAIT"
        status = args.get("status", "success")
        if status == "success":
            return "DONE"
        if status == "failure":
            return "FAIL"
        raise _BadCall(f"terminate status {status!r} must be 'success' or 'failure'")

    def _type_code(self, text: Any) -> str:
        if not isinstance(text, str) or not text:
            raise _BadCall(f"type needs a non-empty string `text`, got {text!r}")
        interval = f", interval={self.type_interval!r}" if self.type_interval else ""
        statements: list[str] = []
        for index, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n")):
            if index:
                statements.append("pyautogui.press('enter')")
            if line:
                statements.append(f"pyautogui.typewrite({line!r}{interval})")
        return "\n".join(statements)


_SYSTEM_PROMPT = build_system_prompt()

_CLICKS = {
    "left_click": "click",
    "right_click": "rightClick",
    "middle_click": "middleClick",
    "double_click": "doubleClick",
}


def _image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _step_line(turn: Turn) -> str:
    return turn.description or "(no valid action)"


def _strip_thinking(text: str) -> str:
    # <think>...</think> blocks go (an unclosed <think> stays, as text); str.find keeps this linear in the
    # reply's length, where a lazy regex rescans the rest of the text for every unclosed <think>.
    kept: list[str] = []
    position = 0
    while (start := text.find("<think>", position)) >= 0:
        end = text.find("</think>", start + len("<think>"))
        if end < 0:
            break
        kept.append(text[position:start])
        position = end + len("</think>")
    kept.append(text[position:])
    text = "".join(kept)
    # Qwen3 chat templates open <think> in the prompt, so a reply may hold only the closing tag.
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return text


def _nests_deeper(text: str, limit: int) -> bool:
    """Whether the JSON text nests deeper than ``limit`` (brackets inside strings do not count)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for char in _JSON_STRING.sub("", text):
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _required(args: Mapping[str, Any], key: str, action: str) -> Any:
    if args.get(key) is None:
        raise _BadCall(f"action {action!r} needs the argument {key!r}")
    return args[key]


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _BadCall(f"{name} must be a number, got {value!r}")
    return float(value)


def _point(value: Any, screen_size: tuple[int, int]) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise _BadCall(f"coordinate must be [x, y], got {value!r}")
    width, height = screen_size
    x = _number(value[0], "coordinate x")
    y = _number(value[1], "coordinate y")
    # The 0..999 grid maps to the screenshot as OSWorld maps it; points off the grid are clamped.
    px = min(max(int(x * width / _GRID), 0), width - 1)
    py = min(max(int(y * height / _GRID), 0), height - 1)
    return px, py


def _key_code(keys: Any) -> str:
    if isinstance(keys, str):
        keys = keys.split("+") if "+" in keys.strip("+") else [keys]
    if not isinstance(keys, list) or not keys or not all(isinstance(key, str) and key.strip() for key in keys):
        raise _BadCall(f"keys must be a non-empty list of key names, got {keys!r}")
    names = [_key_name(key) for key in keys]
    joined = ", ".join(repr(name) for name in names)
    return f"pyautogui.hotkey({joined})" if len(names) > 1 else f"pyautogui.press({joined})"


def _key_name(key: str) -> str:
    key = key.strip()
    if len(key) == 1:
        return key
    lowered = key.lower()
    return _KEY_ALIASES.get(lowered, lowered)
