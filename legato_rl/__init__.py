"""legato_rl: graded desktop rollouts for computer-use RL.

Collects attempts per task on legato_gym desktops, asks an OpenAI-compatible policy server what to do, and
writes trajectories (token ids, logprobs, rewards, group advantages, policy version) in
``legato.rollout/v0``.
"""

from legato_gym import DesktopConfig
from legato_rl.collect import collect
from legato_rl.export import export_steps
from legato_rl.policy import ChatResult, Limits, PolicyClient, PolicyConfig, Sampling
from legato_rl.store import load_request

__all__ = [
    "ChatResult",
    "DesktopConfig",
    "Limits",
    "PolicyClient",
    "PolicyConfig",
    "Sampling",
    "collect",
    "export_steps",
    "load_request",
]
