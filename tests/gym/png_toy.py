"""A desktop backend that hands over its own PNG with each observation, as an OSWorld-protocol backend does.

Loaded by the workers as ``png_toy:PngToyDesktop`` (this directory on ``PYTHONPATH``). Its PNG is encoded
with Pillow at level 9, so its bytes differ from what a worker would encode itself.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image
from vector_toy import ToyDesktop, default_tasks

from legato_gym.contract import Observation

__all__ = ["PngToyDesktop", "default_tasks", "own_png"]


def own_png(screenshot: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(screenshot).save(buffer, format="PNG", compress_level=9)
    return buffer.getvalue()


class PngToyDesktop(ToyDesktop):
    def observe(self) -> Observation:
        obs = super().observe()
        return Observation(obs.screenshot, obs.instruction, png=own_png(obs.screenshot))
