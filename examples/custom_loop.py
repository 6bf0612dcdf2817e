"""Your own loop: legato desktops through plain Gymnasium calls, with a policy you write.

    python examples/custom_loop.py --episodes 8 --desktops 4

Part 1 steps one desktop (``gymnasium.make``); part 2 runs several in worker processes
(``gymnasium.make_vec``) with EnvPool-style partial batches: ``send`` actions to some desktops, ``recv``
whichever finished first, and never wait for the slowest desktop. The policy here asks legato's
reference policy server (a real HTTP server on loopback whose scripted brain solves the fake tasks)
through legato's Qwen harness and policy client; swap in your own ``act``.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

import legato_gym  # registers the legato/ ids
from legato_gym.vector import DesktopVectorEnv
from legato_rl.harness import Conversation, QwenHarness
from legato_rl.policy import PolicyClient, PolicyConfig
from legato_rl.testing import ReferencePolicyServer

SCREEN = (640, 480)


class ServerPolicy:
    """A policy served over HTTP: screenshot in, pyautogui actions out (one conversation per desktop)."""

    def __init__(self, config: PolicyConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = PolicyClient(config)
        self.harness = QwenHarness()
        self.conversations: dict[int, Conversation] = {}

    def start(self, desktop: int, instruction: str) -> None:
        """A new episode on ``desktop``."""
        self.conversations[desktop] = self.harness.start(instruction, SCREEN)

    def act(self, desktop: int, screenshot: Any) -> list[str]:
        """The actions for this screenshot (empty: the agent gave up; grade the desktop as it is)."""
        conversation = self.conversations[desktop]
        messages = conversation.messages(screenshot)
        result = self.loop.run_until_complete(self.client.chat(messages, rollout_id=f"desktop-{desktop}"))
        return list(conversation.record_reply(result.content).actions)

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


def single_env(policy: ServerPolicy, episodes: int, max_steps: int) -> list[float]:
    """Part 1: ``gymnasium.make`` and the five-tuple ``step``."""
    env = gym.make("legato/FakeDesktop-v0", max_steps=max_steps, config=legato_gym.DesktopConfig(screen=SCREEN))
    rewards = []
    for episode in range(episodes):
        obs, info = env.reset(seed=episode)
        task_id = info["task_id"]
        policy.start(0, obs["instruction"])
        reward, done = 0.0, False
        while not done:
            actions = policy.act(0, obs["screenshot"]) or ["FAIL"]  # nothing left to try: end the episode
            for action in actions:
                obs, step_reward, terminated, truncated, info = env.step(action)
                reward, done = float(step_reward), terminated or truncated
                if done:
                    break
        print(f"single  {task_id:<24} reward {reward:.1f}")
        rewards.append(float(reward))
    env.close()
    return rewards


def vector_env(policy: ServerPolicy, episodes: int, desktops: int, max_steps: int) -> list[float]:
    """Part 2: ``gymnasium.make_vec`` with partial batches (``send`` / ``recv``)."""
    envs = gym.make_vec(
        "legato/FakeDesktop-v0", num_envs=desktops, max_episode_steps=max_steps,
        config=legato_gym.DesktopConfig(screen=SCREEN), seed=0,
    )  # fmt: skip
    assert isinstance(envs, DesktopVectorEnv)  # legato's ids make legato's vector env: send/recv and more
    rewards: list[float] = []
    pending: dict[int, deque[str]] = {}  # actions of the last reply not yet run, per desktop
    started = 0
    obs, info = envs.reset(seed=0)
    for env_id in range(desktops):
        policy.start(env_id, obs["instruction"][env_id])
        pending[env_id] = deque(policy.act(env_id, obs["screenshot"][env_id]) or ["FAIL"])
        started += 1
    envs.send([pending[i].popleft() for i in range(desktops)], env_ids=list(range(desktops)))
    resetting: set[int] = set()
    while len(rewards) < episodes:
        obs, reward, terminated, truncated, info = envs.recv(min_results=1)  # whichever desktops finished
        for row, env_id in enumerate(int(i) for i in info["env_id"]):
            if env_id in resetting:  # a reset came back: start the next episode there
                resetting.discard(env_id)
                policy.start(env_id, obs["instruction"][row])
            elif terminated[row] or truncated[row]:
                rewards.append(float(reward[row]))
                pending[env_id].clear()  # actions of that reply after the one that ended the episode
                print(f"vector  desktop {env_id}: reward {reward[row]:.1f}")
                if started < episodes:
                    started += 1
                    resetting.add(env_id)
                    envs.send_reset([env_id])
                continue
            if not pending[env_id]:
                pending[env_id] = deque(policy.act(env_id, obs["screenshot"][row]) or ["FAIL"])
            envs.send([pending[env_id].popleft()], env_ids=[env_id])
    envs.close()
    return rewards


def main(argv: Sequence[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--desktops", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=8)
    args = parser.parse_args(argv)
    with ReferencePolicyServer() as server:
        policy = ServerPolicy(PolicyConfig(server.url, server.model))
        try:
            results = {
                "single": single_env(policy, args.episodes, args.max_steps),
                "vector": vector_env(policy, args.episodes, args.desktops, args.max_steps),
            }
        finally:
            policy.close()
    for part, rewards in results.items():
        print(f"{part}: {len(rewards)} episodes, mean reward {sum(rewards) / len(rewards):.2f}")
    return results


if __name__ == "__main__":
    main()
