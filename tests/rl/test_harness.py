"""The Qwen3-VL harness: prompt layout, reply parsing, coordinate mapping and the unparsable-reply rule."""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from PIL import Image

from legato_gym.actions import Click, Drag, Hotkey, MouseMove, Press, Scroll, TypeText, parse_action
from legato_gym.errors import ConfigError, StateError
from legato_rl.harness import (
    COMPUTER_USE_ACTIONS,
    BaseHarness,
    Conversation,
    Harness,
    ParsedReply,
    QwenHarness,
    Turn,
    smart_resize,
)
from legato_rl.images import PNG_DATA_URL

SCREEN = (1920, 1080)


def call(action: str, **arguments: Any) -> str:
    """A reply in the format the system prompt asks for."""
    body = json.dumps({"name": "computer_use", "arguments": {"action": action, **arguments}})
    return f"Action: do {action}.\n<tool_call>\n{body}\n</tool_call>"


def parse(reply: str, screen: tuple[int, int] = SCREEN) -> ParsedReply:
    return QwenHarness().parse_reply(reply, screen)


def one(reply: str, screen: tuple[int, int] = SCREEN) -> str:
    parsed = parse(reply, screen)
    assert parsed.error is None, parsed.error
    assert len(parsed.actions) == 1, parsed.actions
    return parsed.actions[0]


def screenshot(value: int, size: tuple[int, int] = (64, 36)) -> np.ndarray:
    width, height = size
    image = np.zeros((height, width, 3), np.uint8)
    image[:, :, 0] = value
    image[0, 0] = (value, 255 - value, 7)
    return image


def texts(message: dict[str, Any]) -> list[str]:
    return [part["text"] for part in message["content"] if part["type"] == "text"]


def images(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [
        part["image_url"]["url"]
        for message in messages
        for part in message["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    ]


def step_index(messages: Sequence[dict[str, Any]]) -> int:
    """How the reference server's scripted brain counts: assistant messages + ``Step i:`` lines."""
    assistants = sum(m["role"] == "assistant" for m in messages)
    lines = sum(len(re.findall(r"^Step \d+: ", t, re.M)) for m in messages if m["role"] == "user" for t in texts(m))
    return assistants + lines


# --- system prompt -------------------------------------------------------------------------------------------


def test_system_prompt_declares_the_computer_use_tool() -> None:
    prompt = QwenHarness().system_prompt
    tool = json.loads(prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0])
    assert tool["function"]["name"] == "computer_use"
    properties = tool["function"]["parameters"]["properties"]
    assert properties["action"]["enum"] == list(COMPUTER_USE_ACTIONS)
    assert set(properties) == {"action", "keys", "text", "coordinate", "pixels", "time", "status"}
    assert properties["status"]["enum"] == ["success", "failure"]
    assert "1000x1000" in tool["function"]["description"]
    assert "<tool_call>" in prompt and "Action:" in prompt


# --- prompt layout -------------------------------------------------------------------------------------------


def test_first_prompt_is_system_then_one_user_message_with_image_and_instruction() -> None:
    conversation = QwenHarness().start("Open the file 'a.txt'")
    messages = conversation.messages(screenshot(1))
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]
    assert [part["type"] for part in user["content"]] == ["image_url", "text"]
    (text,) = texts(user)
    assert "\nInstruction: Open the file 'a.txt'\n" in text
    assert text.endswith("Previous actions:\nNone")
    assert step_index(messages) == 0


def test_image_url_is_a_png_data_url_of_the_screenshot() -> None:
    shot = screenshot(9)
    url = QwenHarness().encode_image(shot)
    assert url.startswith(PNG_DATA_URL)
    decoded = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))))
    np.testing.assert_array_equal(decoded, shot)


def test_history_within_image_max_keeps_every_screenshot_and_reply() -> None:
    harness = QwenHarness(image_max=20)
    conversation = harness.start("task")
    replies = [call("left_click", coordinate=[i, i]) for i in range(4)]
    for i, reply in enumerate(replies):
        conversation.messages(screenshot(i))
        conversation.record_reply(reply)
    messages = conversation.messages(screenshot(4))
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 4 + ["user"]
    assert [m["content"][0]["text"] for m in messages if m["role"] == "assistant"] == replies
    assert images(messages) == [harness.encode_image(screenshot(i)) for i in range(5)]
    # the instruction rides on the first user message only
    assert [bool(texts(m)) for m in messages if m["role"] == "user"] == [True, False, False, False, False]
    assert step_index(messages) == 4


def test_prompt_only_grows_at_its_end_while_history_fits() -> None:
    conversation = QwenHarness(image_max=20).start("task")
    previous: list[dict[str, Any]] | None = None
    for i in range(6):
        messages = conversation.messages(screenshot(i))
        if previous is not None:
            assert messages[: len(previous)] == previous
        conversation.record_reply(call("wait"))
        previous = messages


def test_older_steps_become_action_lines_beyond_image_max() -> None:
    conversation = QwenHarness(image_max=3).start("task")
    for i in range(5):
        conversation.messages(screenshot(i))
        conversation.record_reply(f"Action: step number {i + 1}\n" + call("wait").split("\n", 1)[1])
    messages = conversation.messages(screenshot(5))
    assert len(images(messages)) == 3
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    (text,) = texts(messages[1])
    assert text.endswith("Previous actions:\nStep 1: step number 1\nStep 2: step number 2\nStep 3: step number 3")
    assert images(messages) == [QwenHarness().encode_image(screenshot(i)) for i in (3, 4, 5)]
    assert step_index(messages) == 5


def test_image_max_one_sends_only_the_current_screenshot() -> None:
    conversation = QwenHarness(image_max=1).start("task")
    for i in range(3):
        conversation.messages(screenshot(i))
        conversation.record_reply(call("wait"))
    messages = conversation.messages(screenshot(3))
    assert [m["role"] for m in messages] == ["system", "user"]
    assert len(images(messages)) == 1
    assert step_index(messages) == 3


def test_same_inputs_give_identical_messages() -> None:
    history = [Turn(image_url=PNG_DATA_URL + "AAAA", reply=call("wait"), description="do wait.")]
    a = QwenHarness().build_messages("x", PNG_DATA_URL + "BBBB", history)
    b = QwenHarness().build_messages("x", PNG_DATA_URL + "BBBB", history)
    assert json.dumps(a) == json.dumps(b)


@pytest.mark.parametrize("bad", [0, -1])
def test_image_max_below_one_is_refused(bad: int) -> None:
    with pytest.raises(ConfigError, match="image_max"):
        QwenHarness(image_max=bad)


# --- reply parsing -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "function"),
    [
        ("left_click", "click"),
        ("right_click", "rightClick"),
        ("middle_click", "middleClick"),
        ("double_click", "doubleClick"),
    ],
)
def test_clicks_map_to_pyautogui_with_scaled_coordinates(action: str, function: str) -> None:
    code = one(call(action, coordinate=[500, 250]))
    assert code == f"pyautogui.{function}({int(500 * 1920 / 999)}, {int(250 * 1080 / 999)})"
    (command,) = parse_action(code).commands
    assert isinstance(command, Click)
    assert (command.x, command.y) == (960, 270)


def test_coordinates_scale_to_the_screen_and_are_clamped() -> None:
    assert one(call("left_click", coordinate=[0, 0])) == "pyautogui.click(0, 0)"
    assert one(call("left_click", coordinate=[999, 999])) == "pyautogui.click(1919, 1079)"
    assert one(call("left_click", coordinate=[1000, -5])) == "pyautogui.click(1919, 0)"
    assert one(call("left_click", coordinate=[333, 666]), (1280, 720)) == (
        f"pyautogui.click({int(333 * 1280 / 999)}, {int(666 * 720 / 999)})"
    )


def test_click_without_coordinate_clicks_where_the_pointer_is() -> None:
    assert one(call("left_click")) == "pyautogui.click()"


def test_move_drag_and_scroll() -> None:
    move = one(call("mouse_move", coordinate=[999, 0]))
    assert parse_action(move).commands == (MouseMove(1919, 0),)
    drag = one(call("left_click_drag", coordinate=[0, 999]))
    assert drag == "pyautogui.dragTo(0, 1079, duration=0.5)"
    assert parse_action(drag).commands == (Drag(0, 1079),)
    assert parse_action(one(call("scroll", pixels=-5))).commands == (Scroll(-5),)
    assert parse_action(one(call("scroll", pixels=3, coordinate=[0, 999]))).commands == (Scroll(3, 0, 1079),)


def test_multi_line_typing_with_quotes_is_escaped_line_by_line() -> None:
    text = 'He said "it\'s fine"\nC:\\path\\n\t{x}\n\nlast'
    code = one(call("type", text=text))
    commands = parse_action(code).commands
    typed = "".join(c.text if isinstance(c, TypeText) else "\n" for c in commands)
    assert typed == text
    assert [c for c in commands if isinstance(c, Press)] == [Press(("enter",))] * 3
    assert code.count("pyautogui.press('enter')") == 3


def test_type_without_interval() -> None:
    code = QwenHarness(type_interval=0).parse_reply(call("type", text="a'b"), SCREEN).actions[0]
    assert code == 'pyautogui.typewrite("a\'b")'


def test_keys_map_to_press_or_hotkey_with_pyautogui_names() -> None:
    assert one(call("key", keys=["Return"])) == "pyautogui.press('enter')"
    assert one(call("key", keys=["ctrl", "shift", "T"])) == "pyautogui.hotkey('ctrl', 'shift', 'T')"
    assert parse_action(one(call("key", keys=["Control", "c"]))).commands == (Hotkey(("ctrl", "c")),)
    assert one(call("key", keys="ctrl+a")) == "pyautogui.hotkey('ctrl', 'a')"
    assert one(call("key", keys=["'"])) == 'pyautogui.press("\'")'


def test_wait_and_terminate_statuses() -> None:
    assert one(call("wait", time=2)) == "WAIT"
    assert one(call("terminate", status="success")) == "DONE"
    assert one(call("terminate", status="failure")) == "FAIL"
    assert one(call("terminate")) == "DONE"
    bad = parse(call("terminate", status="maybe"))
    assert bad.actions == () and bad.error is not None and "maybe" in bad.error


def test_action_line_is_the_description() -> None:
    parsed = parse("Action: Click the OK button.\n" + call("left_click", coordinate=[1, 1]).split("\n", 1)[1])
    assert parsed.description == "Click the OK button."


def test_missing_action_line_gets_a_generated_description() -> None:
    body = json.dumps({"name": "computer_use", "arguments": {"action": "wait"}})
    parsed = parse(f"<tool_call>\n{body}\n</tool_call>")
    assert parsed.actions == ("WAIT",)
    assert parsed.description == "Performing wait action"


def test_single_line_tool_call_and_bare_json_are_read() -> None:
    body = json.dumps({"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [0, 0]}})
    assert parse(f"Action: x\n<tool_call>{body}</tool_call>").actions == ("pyautogui.click(0, 0)",)
    assert parse(f"Action: x\n{body}").actions == ("pyautogui.click(0, 0)",)
    assert parse(f"Action: x\n<tool_call>\n{body}").actions == ("pyautogui.click(0, 0)",)  # unterminated


def test_several_calls_give_several_actions_and_stop_at_terminate() -> None:
    reply = "\n".join(
        [
            "Action: type and finish",
            call("type", text="hi").split("\n", 1)[1],
            call("key", keys=["enter"]).split("\n", 1)[1],
            call("terminate", status="success").split("\n", 1)[1],
            call("left_click", coordinate=[1, 1]).split("\n", 1)[1],
        ]
    )
    parsed = parse(reply)
    assert parsed.actions == ("pyautogui.typewrite('hi', interval=0.03)", "pyautogui.press('enter')", "DONE")
    assert parsed.error is None


def test_thinking_is_ignored() -> None:
    decoy = call("terminate", status="success").split("\n", 1)[1]
    reply = f"<think>I could {decoy} but no</think>\n" + call("left_click", coordinate=[0, 0])
    assert parse(reply).actions == ("pyautogui.click(0, 0)",)
    assert parse(f"I could {decoy}</think>\n" + call("wait")).actions == ("WAIT",)


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        ("I will click the button.", "no <tool_call>"),
        ("", "no <tool_call>"),
        ('<tool_call>\n{"name": "computer_use", "arguments": {"action": \n</tool_call>', "invalid JSON"),
        (call("triple_click", coordinate=[1, 1]), "unknown action 'triple_click'"),
        (call("mouse_move"), "needs the argument 'coordinate'"),
        (call("left_click", coordinate=[1]), "coordinate must be [x, y]"),
        (call("left_click", coordinate=["a", 1]), "must be a number"),
        (call("type", text=""), "non-empty string"),
        (call("key", keys=[]), "keys must be"),
        (call("scroll"), "needs the argument 'pixels'"),
        ('<tool_call>{"name": "browser", "arguments": {"action": "wait"}}</tool_call>', "unknown function"),
    ],
)
def test_unparsable_replies_give_no_action_and_say_why(reply: str, needle: str) -> None:
    parsed = parse(reply)
    assert parsed.actions == ()
    assert parsed.error is not None and needle in parsed.error


def test_partly_bad_reply_runs_the_good_calls_and_keeps_the_error() -> None:
    reply = call("wait") + "\n<tool_call>\nnot json\n</tool_call>"
    parsed = parse(reply)
    assert parsed.actions == ("WAIT",)
    assert parsed.error is not None and "tool call 2" in parsed.error


def test_every_generated_action_is_valid_for_the_action_parser() -> None:
    replies = [
        call("left_click", coordinate=[10, 20]),
        call("right_click"),
        call("double_click", coordinate=[999, 999]),
        call("middle_click", coordinate=[5, 5]),
        call("mouse_move", coordinate=[1, 2]),
        call("left_click_drag", coordinate=[3, 4], duration=1),
        call("type", text="x = 'a'\n\"b\"\\"),
        call("key", keys=["super"]),
        call("key", keys=["alt", "F4"]),
        call("key", keys=["Page_Down"]),
        call("scroll", pixels=-3.6, coordinate=[500, 500]),
        call("wait"),
        call("terminate", status="failure"),
    ]
    for reply in replies:
        for action in parse(reply).actions:
            parse_action(action)


# --- the conversation and the unparsable rule ---------------------------------------------------------------


def test_unparsable_reply_runs_wait_and_is_marked() -> None:
    conversation = QwenHarness().start("task")
    conversation.messages(screenshot(0))
    reply = conversation.record_reply("no idea")
    assert reply.actions == ("WAIT",)
    assert reply.unparsable and not reply.give_up
    assert reply.error is not None
    messages = conversation.messages(screenshot(1))
    assert messages[2] == {"role": "assistant", "content": [{"type": "text", "text": "no idea"}]}


def test_consecutive_unparsable_replies_give_up_and_a_good_reply_resets_the_count() -> None:
    conversation = QwenHarness().start("task", max_unparsable=3)
    outcomes = []
    for reply in ["junk", "junk", call("wait"), "junk", "junk", "junk"]:
        conversation.messages(screenshot(0))
        outcomes.append(conversation.record_reply(reply))
    assert [r.actions for r in outcomes] == [("WAIT",), ("WAIT",), ("WAIT",), ("WAIT",), ("WAIT",), ()]
    assert [r.unparsable for r in outcomes] == [True, True, False, True, True, True]
    assert [r.give_up for r in outcomes] == [False] * 5 + [True]
    assert conversation.consecutive_unparsable == 3


def test_never_give_up_when_disabled() -> None:
    conversation = Conversation(QwenHarness(), "task", max_unparsable=None)
    for _ in range(10):
        conversation.messages(screenshot(0))
        assert conversation.record_reply("junk").actions == ("WAIT",)


def test_max_unparsable_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_unparsable"):
        Conversation(QwenHarness(), "task", max_unparsable=0)


def test_calls_out_of_order_raise_state_error() -> None:
    conversation = QwenHarness().start("task")
    with pytest.raises(StateError, match="messages"):
        conversation.record_reply(call("wait"))
    conversation.messages(screenshot(0))
    with pytest.raises(StateError, match="record_reply"):
        conversation.messages(screenshot(1))


def test_screen_size_sets_the_pixel_space_of_actions() -> None:
    conversation = QwenHarness().start("task", screen_size=(3840, 2160))
    conversation.messages(screenshot(0, (64, 36)))
    assert conversation.record_reply(call("left_click", coordinate=[999, 999])).actions == (
        "pyautogui.click(3839, 2159)",
    )
    bare = QwenHarness().start("task")
    bare.messages(screenshot(0, (64, 36)))
    assert bare.record_reply(call("left_click", coordinate=[999, 999])).actions == ("pyautogui.click(63, 35)",)


def test_a_custom_harness_plugs_into_the_conversation() -> None:
    class Echo(BaseHarness):
        @property
        def name(self) -> str:
            return "echo"

        def encode_image(self, screenshot: np.ndarray) -> str:
            return f"img:{int(screenshot[0, 0, 0])}"

        def build_messages(self, instruction: str, image_url: str, history: Sequence[Turn]) -> list[dict[str, Any]]:
            return [{"role": "user", "content": f"{instruction} {image_url} {len(history)}"}]

        def parse_reply(self, content: str, screen_size: tuple[int, int]) -> ParsedReply:
            return ParsedReply(actions=(content,) if content in ("DONE", "WAIT") else ())

    harness = Echo()
    assert isinstance(harness, Harness)
    assert isinstance(QwenHarness(), Harness)
    conversation = harness.start("go")
    assert conversation.messages(screenshot(5)) == [{"role": "user", "content": "go img:5 0"}]
    assert conversation.record_reply("bad").actions == ("WAIT",)
    assert conversation.messages(screenshot(6), png=b"\x89PNG...") == [{"role": "user", "content": "go img:6 1"}]
    assert conversation.record_reply("DONE").actions == ("DONE",)  # png= given to a harness that takes none


# --- smart_resize -------------------------------------------------------------------------------------------


def test_smart_resize_matches_the_reference_sizes() -> None:
    assert smart_resize(1080, 1920) == (1088, 1920)
    assert smart_resize(1080, 1920, max_pixels=16 * 16 * 4 * 12800) == (1088, 1920)
    assert smart_resize(1080, 1920, factor=28) == (1092, 1932)
    assert smart_resize(1080, 1920, factor=28, max_pixels=1_003_520) == (728, 1316)


def test_smart_resize_keeps_area_within_bounds_and_sides_on_the_factor() -> None:
    for height, width in [(4000, 6000), (10, 20), (1, 100), (2160, 3840), (700, 1000)]:
        h, w = smart_resize(height, width, max_pixels=1_000_000)
        assert h % 32 == 0 and w % 32 == 0
        assert 4 * 32 * 32 <= h * w <= 1_000_000
        if min(height, width) >= 100:
            assert abs(w / h - width / height) / (width / height) < 0.1


def test_smart_resize_refuses_extreme_aspect_ratios() -> None:
    with pytest.raises(ConfigError, match="aspect ratio"):
        smart_resize(1, 300)


def test_resize_option_resizes_the_sent_image() -> None:
    url = QwenHarness(resize=True).encode_image(np.zeros((1080, 1920, 3), np.uint8))
    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert image.size == (1920, 1088)


def test_encode_image_refuses_non_rgb_arrays() -> None:
    with pytest.raises(ConfigError, match="uint8"):
        QwenHarness().encode_image(np.zeros((4, 4), np.uint8))


# --- pre-encoded screenshots (a vector env worker's PNG) ------------------------------------------------------


def test_a_given_png_is_sent_as_it_is() -> None:
    from legato_gym.png import encode_png

    shot = screenshot(3)
    png = encode_png(shot)
    conversation = QwenHarness().start("task")
    messages = conversation.messages(shot, png=png)
    assert images(messages) == [PNG_DATA_URL + base64.b64encode(png).decode("ascii")]
    conversation.record_reply(call("wait"))
    shot2, png2 = screenshot(4), encode_png(screenshot(4))
    messages = conversation.messages(shot2, png=png2)
    assert images(messages)[-1] == PNG_DATA_URL + base64.b64encode(png2).decode("ascii")
    assert images(messages)[0] == PNG_DATA_URL + base64.b64encode(png).decode("ascii")


def test_a_png_of_another_size_is_refused() -> None:
    from legato_gym.png import encode_png

    with pytest.raises(ConfigError, match="not a PNG of the screenshot's size 64x36"):
        QwenHarness().encode_image(screenshot(1), png=encode_png(screenshot(1, (32, 36))))
    with pytest.raises(ConfigError, match="not a PNG"):
        QwenHarness().encode_image(screenshot(1), png=b"GIF89a not a png at all")


def test_resizing_encodes_the_array_instead_of_the_given_png() -> None:
    from legato_gym.png import encode_png

    shot = np.zeros((1080, 1920, 3), np.uint8)
    harness = QwenHarness(resize=True)
    assert harness.encode_image(shot, png=encode_png(shot)) == harness.encode_image(shot)
    same_size = screenshot(2, (64, 64))  # already on the factor: nothing to resize, the PNG is used
    png = encode_png(same_size)
    assert harness.encode_image(same_size, png=png).endswith(base64.b64encode(png).decode("ascii"))


# --- hostile replies --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "inside",
    [
        "[" * 100_000 + "]" * 100_000,
        "{" * 100_000,
        '{"name": "computer_use", "arguments": ' + "[" * 50_000 + "]" * 50_000 + "}",
        '{"name": "computer_use", "arguments": "' + "[" * 50_000 + "]" * 50_000 + '"}',  # double-encoded
    ],
    ids=["brackets", "unclosed-objects", "deep-arguments", "deep-double-encoded-arguments"],
)
def test_a_tool_call_nested_100000_deep_is_an_unparsable_call(inside: str) -> None:
    reply = parse(f"Action: Click.\n<tool_call>\n{inside}\n</tool_call>")
    assert reply.actions == () and reply.error is not None and "nest" in reply.error
    assert len(reply.error) < 400  # the error quotes a clipped excerpt, not the reply
    conversation = QwenHarness().start("do it", SCREEN)
    conversation.messages(np.zeros((SCREEN[1], SCREEN[0], 3), dtype=np.uint8))
    recorded = conversation.record_reply(f"<tool_call>{inside}</tool_call>")
    assert recorded.actions == ("WAIT",) and recorded.unparsable  # the agent's failure: a WAIT step


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    assert parse(call("type", text="[" * 1000 + "{" * 1000)).actions[0].startswith("pyautogui.typewrite(")
    assert parse(call("wait", extra=json.loads("[" * 30 + "]" * 30))).actions == ("WAIT",)  # 32 levels in all
    assert "nests deeper than 32" in (parse(call("wait", extra=json.loads("[" * 31 + "]" * 31))).error or "")


def test_only_max_calls_calls_of_one_reply_are_read() -> None:
    many = "\n".join(f"<tool_call>{json.dumps({'name': 'computer_use', 'arguments': {'action': 'wait'}})}</tool_call>"
                     for _ in range(1000))  # fmt: skip
    reply = parse(many)
    assert reply.actions == ("WAIT",) * 16 and reply.error is not None and "1000 tool calls" in reply.error
    assert len(QwenHarness(max_calls=2).parse_reply(many, SCREEN).actions) == 2
    with pytest.raises(ConfigError, match="max_calls"):
        QwenHarness(max_calls=0)


_OLD_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


def _old_strip_thinking(text: str) -> str:
    text = _OLD_THINK_BLOCK.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return text


@pytest.mark.parametrize(
    "text",
    [
        "plain",
        "<think>a</think>b",
        "x<think>a</think>y<think>b</think>z",
        "<think>open only",
        "close only</think>after",
        "<think>a</think>b<think>unclosed",
        "<think><think>nested</think>tail</think>end",
        "</think><think>x</think>",
        "<think>" * 50 + "</think>" + "<think>" * 50,
    ],
)
def test_thinking_is_stripped_as_before_in_linear_time(text: str) -> None:
    from legato_rl.harness.qwen import _strip_thinking

    assert _strip_thinking(text) == _old_strip_thinking(text)
