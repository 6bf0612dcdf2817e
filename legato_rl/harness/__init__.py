"""Harnesses: a model's prompt format and reply parser.

:class:`Harness` is the interface (implement it to plug in another model's format); :class:`QwenHarness`
is OSWorld's Qwen3-VL computer-use format; :class:`Conversation` drives any harness through one attempt
and applies the rule for unparsable replies.
"""

from legato_rl.harness.base import DEFAULT_MAX_UNPARSABLE, BaseHarness, Conversation, Harness, ParsedReply, Turn
from legato_rl.harness.qwen import COMPUTER_USE_ACTIONS, QWEN3_FACTOR, QwenHarness, build_system_prompt, smart_resize

__all__ = [
    "COMPUTER_USE_ACTIONS",
    "DEFAULT_MAX_UNPARSABLE",
    "QWEN3_FACTOR",
    "BaseHarness",
    "Conversation",
    "Harness",
    "ParsedReply",
    "QwenHarness",
    "Turn",
    "build_system_prompt",
    "smart_resize",
]
