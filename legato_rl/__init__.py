"""legato_rl: graded desktop rollouts for computer-use RL.

Collects attempts per task on legato_gym desktops, asks an OpenAI-compatible policy server what to do, and
writes trajectories (token ids, logprobs, rewards, group advantages, policy version) in
``legato.rollout/v0``.
"""

from typing import TYPE_CHECKING, Any

from legato_gym import DesktopConfig
from legato_rl.collect import collect
from legato_rl.export import export_steps
from legato_rl.policy import ChatResult, Limits, PolicyClient, PolicyConfig, Sampling
from legato_rl.store import load_request

if TYPE_CHECKING:
    from legato_gym.backends.osworld import OSWorldDesktop as OSWorldDesktop

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


def __getattr__(name: str) -> Any:
    """``OSWorldDesktop``, the reference backend (docs/backends.md), imported when first asked for: importing
    the osworld backend costs about half again the rest of ``legato.rl``, and most users never name its class
    (so it is not in ``__all__``, which a star import would read at once)."""
    if name == "OSWorldDesktop":
        from legato_gym.backends.osworld import OSWorldDesktop

        return OSWorldDesktop
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
