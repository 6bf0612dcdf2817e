"""``legato.rl``: the public face of :mod:`legato_rl` (``from legato.rl import collect, PolicyConfig``).

``legato.rl.policy`` is :mod:`legato_rl.policy`, and ``legato.rl.OSWorldDesktop`` the reference backend
(imported when first asked for).
"""

from typing import Any

import legato_rl
from legato_rl import *  # noqa: F403
from legato_rl import __all__ as __all__


def __getattr__(name: str) -> Any:
    return getattr(legato_rl, name)  # legato_rl's lazy names (OSWorldDesktop), or its AttributeError
