"""Screenshots as PNG from the workers (``png=True``), read-only views (``copy=False``), cheap batched spaces."""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from legato_gym.backends.fake import default_tasks
from legato_gym.config import DesktopConfig
from legato_gym.png import encode_png
from legato_gym.vector import DesktopVectorEnv

HERE = Path(__file__).resolve().parent
TOY_ENV = {"PYTHONPATH": str(HERE)}
SMALL = DesktopConfig(screen=(320, 240))

if str(HERE) not in sys.path:  # the parent imports the toy backends too (for their default tasks)
    sys.path.insert(0, str(HERE))

from png_toy import own_png  # noqa: E402


def decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("screenshots", ["shm", "blob"])
def test_awaitables_carry_the_png_the_worker_encoded(screenshots: str) -> None:
    task = default_tasks(SMALL)[0]

    async def play(env: DesktopVectorEnv) -> None:
        obs, info = await env.areset(0, task)
        png = info["screenshot_png"]
        assert isinstance(png, bytes)
        np.testing.assert_array_equal(decode(png), obs["screenshot"])
        assert png == encode_png(obs["screenshot"])  # the worker's encoder, nothing else
        for action in ("pyautogui.click(10, 10)", "pyautogui.typewrite('hi')"):
            obs, _, _, _, info = await env.astep(0, action)
            np.testing.assert_array_equal(decode(info["screenshot_png"]), obs["screenshot"])

    with DesktopVectorEnv(1, "fake", SMALL, seed=0, png=True, screenshots=screenshots) as env:  # type: ignore[arg-type]
        asyncio.run(play(env))


def test_batched_results_carry_pngs_as_an_info_array() -> None:
    with DesktopVectorEnv(2, "fake", SMALL, seed=0, png=True) as env:
        obs, info = env.reset()
        assert info["_screenshot_png"].tolist() == [True, True]
        for row in range(2):
            np.testing.assert_array_equal(decode(info["screenshot_png"][row]), obs["screenshot"][row])
        env.send(["WAIT"], [1])
        obs, _, _, _, info = env.recv()
        assert info["env_id"].tolist() == [1]
        np.testing.assert_array_equal(decode(info["screenshot_png"][0]), obs["screenshot"][0])


def test_without_png_there_is_no_png() -> None:
    with DesktopVectorEnv(1, "fake", SMALL, seed=0) as env:
        _, info = env.reset()
        assert "screenshot_png" not in info


def test_a_backends_own_png_is_passed_through_untouched() -> None:
    config = DesktopConfig(screen=(96, 64))

    async def play(env: DesktopVectorEnv) -> None:
        obs, info = await env.areset(0, "toy-0")
        assert info["screenshot_png"] == own_png(obs["screenshot"]) != encode_png(obs["screenshot"])
        obs, _, _, _, info = await env.astep(0, "WAIT")
        assert info["screenshot_png"] == own_png(obs["screenshot"])

    with DesktopVectorEnv(1, "png_toy:PngToyDesktop", config, worker_env=TOY_ENV, png=True) as env:
        asyncio.run(play(env))


def test_copy_false_hands_out_read_only_views_of_the_shared_buffer() -> None:
    task = default_tasks(SMALL)[0]

    async def play(env: DesktopVectorEnv) -> tuple[np.ndarray, np.ndarray]:
        obs, _ = await env.areset(0, task)
        first = obs["screenshot"]
        expected = first.copy()
        obs, *_ = await env.astep(0, "pyautogui.click(10, 10)")
        return expected, obs["screenshot"]

    with DesktopVectorEnv(1, "fake", SMALL, seed=0, copy=False) as env:
        expected, screen = asyncio.run(play(env))
        assert not screen.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            screen[0, 0, 0] = 1
        assert screen.shape == (240, 320, 3) and not np.array_equal(screen, expected)  # the cursor moved
    with DesktopVectorEnv(1, "fake", SMALL, seed=0) as env:
        _, screen = asyncio.run(play(env))
        assert screen.flags.writeable and screen.flags.owndata


def test_batched_spaces_are_built_on_demand_and_cost_no_memory() -> None:
    with DesktopVectorEnv(2, "fake", DesktopConfig(screen=(1920, 1080)), seed=0) as env:
        assert env._observation_space is None and env._action_space is None
        screens = env.observation_space["screenshot"]
        assert screens.shape == (2, 1080, 1920, 3) and screens.low.strides == (0, 0, 0, 0)
        assert len(env.action_space) == 2
        obs, _ = env.reset()
        assert env.observation_space.contains(obs)
        assert env.single_observation_space.contains({k: v[0] for k, v in obs.items()})
