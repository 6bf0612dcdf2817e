"""``legato``: a thin alias over the import packages ``legato_gym`` (envs) and ``legato_rl`` (rollouts)."""

from legato_gym import __version__

__all__ = ["__version__"]
