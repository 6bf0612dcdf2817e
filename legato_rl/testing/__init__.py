"""Testing aids shipped with legato: a reference policy server faithful to vLLM's OpenAI-compatible API.

::

    from legato_rl.testing import ReferencePolicyServer, ScriptedSolver

    with ReferencePolicyServer(brain=ScriptedSolver(), behaviour="vllm") as server:
        print(server.url)  # http://127.0.0.1:<port>/v1, model server.model

From a shell: ``python -m legato_rl.testing.server --port 0 --brain scripted`` prints the URL and serves
until interrupted.
"""

from legato_rl.testing.brains import (
    Brain,
    RandomBrain,
    ReplayBrain,
    Reply,
    ScriptedSolver,
    prompt_instruction,
    prompt_step_index,
    qwen_reply,
    to_qwen_actions,
)
from legato_rl.testing.faults import FaultTally, HitTasks, KillDesktopOnCalls, documented_outcome, tally
from legato_rl.testing.server import (
    BEHAVIOURS,
    FAULTS,
    HOSTILE_REPLIES,
    FaultPlan,
    Faults,
    Latency,
    PrefixCache,
    RecordedRequest,
    ReferencePolicyServer,
    ServerStats,
)
from legato_rl.testing.tokenizer import ToyTokenizer

__all__ = [
    "BEHAVIOURS",
    "FAULTS",
    "HOSTILE_REPLIES",
    "Brain",
    "FaultPlan",
    "FaultTally",
    "Faults",
    "HitTasks",
    "KillDesktopOnCalls",
    "Latency",
    "PrefixCache",
    "RandomBrain",
    "RecordedRequest",
    "ReferencePolicyServer",
    "ReplayBrain",
    "Reply",
    "ScriptedSolver",
    "ServerStats",
    "ToyTokenizer",
    "documented_outcome",
    "prompt_instruction",
    "prompt_step_index",
    "qwen_reply",
    "tally",
    "to_qwen_actions",
]
