"""The texts of OSWorld's Qwen3-VL computer-use prompt (:mod:`legato_rl.harness.qwen` builds the messages).

The system message declares one ``computer_use`` function tool and the reply format; the first user message
of the prompt holds :data:`USER_TEXT` with the instruction and the actions older than the screenshots kept.
"""

from __future__ import annotations

import json

__all__ = ["COMPUTER_USE_ACTIONS", "USER_TEXT", "build_system_prompt"]

#: The ``action`` enum of the ``computer_use`` tool.
COMPUTER_USE_ACTIONS = (
    "key",
    "type",
    "mouse_move",
    "left_click",
    "left_click_drag",
    "right_click",
    "middle_click",
    "double_click",
    "scroll",
    "wait",
    "terminate",
)

#: The text of the prompt's first user message; ``previous`` lists the older steps' ``Action:`` lines.
USER_TEXT = (
    "Please generate the next move according to the UI screenshot, instruction and previous actions.\n"
    "\n"
    "Instruction: {instruction}\n"
    "\n"
    "Previous actions:\n"
    "{previous}"
)


def build_system_prompt() -> str:
    """The system prompt: the ``computer_use`` tool and the reply format."""
    screen = "\n".join(
        [
            "Control a desktop computer with the mouse and keyboard, and look at it through screenshots.",
            "* You see a graphical desktop only: there is no terminal or application menu unless one is on "
            "the screen. Start applications by clicking their icons.",
            "* Applications can be slow to open or to respond. If nothing seems to happen, wait and look at "
            "the next screenshot before trying again.",
            "* The screen's resolution is 1000x1000: coordinates are integers from 0 to 999 on both axes, "
            "(0, 0) being the top-left corner.",
            "* Before moving the mouse to an element, find the element's coordinates in the latest screenshot.",
            "* Aim at the centre of buttons, links, icons and fields, not at their edges. If a click had no "
            "effect, adjust the position so the cursor tip falls on the element.",
        ]
    )
    actions = "\n".join(
        [
            '* `key`: press the keys in `keys` down in order, then release them in reverse order (e.g. ["ctrl", "c"]).',
            "* `type`: type the string `text` on the keyboard.",
            "* `mouse_move`: move the cursor to `coordinate`.",
            "* `left_click`: left-click at `coordinate`.",
            "* `left_click_drag`: press the left button at the cursor's position and drag to `coordinate`.",
            "* `right_click`: right-click at `coordinate`.",
            "* `middle_click`: middle-click at `coordinate`.",
            "* `double_click`: double-click the left button at `coordinate`.",
            "* `scroll`: turn the mouse wheel by `pixels` (positive scrolls up, negative down), at "
            "`coordinate` if given.",
            "* `wait`: wait `time` seconds for something to finish.",
            "* `terminate`: end the task; `status` is `success` when it is done, `failure` when it cannot be done.",
        ]
    )
    tool = {
        "type": "function",
        "function": {
            "name": "computer_use",
            "description": screen,
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {"description": actions, "enum": list(COMPUTER_USE_ACTIONS), "type": "string"},
                    "keys": {"description": "The keys to press; only for `action=key`.", "type": "array"},
                    "text": {"description": "The text to type; only for `action=type`.", "type": "string"},
                    "coordinate": {
                        "description": "[x, y] on the 0..999 grid, for the mouse actions.",
                        "type": "array",
                    },
                    "pixels": {"description": "How far to scroll; only for `action=scroll`.", "type": "number"},
                    "time": {"description": "Seconds to wait; only for `action=wait`.", "type": "number"},
                    "status": {
                        "description": "Whether the task is done; only for `action=terminate`.",
                        "enum": ["success", "failure"],
                        "type": "string",
                    },
                },
                "required": ["action"],
            },
        },
    }
    return (
        "# Tools\n"
        "\n"
        "You may call one or more functions to assist with the user query.\n"
        "\n"
        "The function signatures are within <tools></tools> XML tags:\n"
        "<tools>\n" + json.dumps(tool) + "\n</tools>\n"
        "\n"
        "For each function call, return a JSON object with the function name and its arguments within "
        "<tool_call></tool_call> XML tags:\n"
        "<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call>\n"
        "\n"
        "# Response format\n"
        "\n"
        "Answer every step with, in this order:\n"
        "1) A line `Action: <one short imperative sentence saying what you do in the UI>`.\n"
        "2) One <tool_call>...</tool_call> block holding only the JSON call.\n"
        "\n"
        "Rules:\n"
        "- Write nothing else.\n"
        "- Keep the Action line to one sentence.\n"
        "- When the task is complete, call `terminate` with status `success`; when it cannot be completed, "
        "call `terminate` with status `failure`."
    )
