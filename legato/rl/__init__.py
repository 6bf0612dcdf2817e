"""``legato.rl``: the public face of :mod:`legato_rl` (``from legato.rl import collect, PolicyConfig``)."""

from legato_rl import *  # noqa: F403
from legato_rl import __all__ as __all__
