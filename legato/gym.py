"""``legato.gym``: an alias of :mod:`legato_gym`."""

from legato_gym import *  # noqa: F403
from legato_gym import __all__ as __all__
