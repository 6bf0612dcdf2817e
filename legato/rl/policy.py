"""``legato.rl.policy``: an alias of :mod:`legato_rl.policy`, the client every model call of the harness goes
through (``from legato.rl.policy import PolicyClient, PolicyConfig, Limits, Sampling``)."""

from legato_rl.policy import *  # noqa: F403
from legato_rl.policy import __all__ as __all__
