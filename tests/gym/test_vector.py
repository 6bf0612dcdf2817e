"""The desktop vector env: gymnasium surface, EnvPool partial batches, asyncio awaitables, faults."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import legato_gym
from legato_gym.backends.fake import default_tasks, fake_solution
from legato_gym.config import DesktopConfig
from legato_gym.contract import Task
from legato_gym.env import DesktopEnv
from legato_gym.errors import DeadlineExceeded, DesktopCrashed, DesktopError, StateError
from legato_gym.vector import Deadlines, DesktopVectorEnv, make_vector_env

HERE = Path(__file__).resolve().parent
TOY = "vector_toy:ToyDesktop"
TOY_ENV = {"PYTHONPATH": str(HERE)}
SMALL = DesktopConfig(screen=(320, 240))
TOY_CONFIG = DesktopConfig(screen=(96, 64))

if str(HERE) not in sys.path:  # the parent imports the toy backend too (for its default tasks)
    sys.path.insert(0, str(HERE))


def gone(pid: int) -> bool:
    """The process does not exist any more (or is a zombie waiting for its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_for(condition: Callable[[], bool], what: str, limit: float = 20.0) -> None:
    end = time.monotonic() + limit
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def fake_env() -> Iterator[DesktopVectorEnv]:
    env = DesktopVectorEnv(3, "fake", SMALL, seed=0, max_steps=4)
    yield env
    env.close()


@pytest.fixture
def toy_env() -> Iterator[DesktopVectorEnv]:
    deadlines = Deadlines(start=30, reset=10, step=1.5, truncate=5, call=5, close=5)
    env = DesktopVectorEnv(3, TOY, TOY_CONFIG, seed=0, deadlines=deadlines, worker_env=TOY_ENV)
    yield env
    env.close()


# --- gymnasium surface -------------------------------------------------------------------------------------


def test_make_vec_returns_the_desktop_vector_env() -> None:
    envs = gymnasium.make_vec("legato/FakeDesktop-v0", num_envs=2, config=SMALL)
    try:
        env = envs.unwrapped
        assert isinstance(env, DesktopVectorEnv)
        assert envs.metadata["autoreset_mode"] is AutoresetMode.DISABLED
        assert envs.num_envs == 2 and len(set(env.worker_pids)) == 2
        obs, _ = envs.reset(seed=0)
        assert envs.observation_space.contains(obs)
    finally:
        envs.close()


def test_reset_and_step_return_batched_gymnasium_values(fake_env: DesktopVectorEnv) -> None:
    obs, info = fake_env.reset(seed=3)
    assert obs["screenshot"].shape == (3, 240, 320, 3) and obs["screenshot"].dtype == np.uint8
    assert fake_env.observation_space.contains(obs)
    assert info["_task_id"].all() and list(info["env_id"]) == [0, 1, 2]
    obs, rewards, terminated, truncated, info = fake_env.step(["WAIT", "FAIL", "WAIT"])
    assert rewards.dtype == np.float64 and rewards.shape == (3,)
    assert list(terminated) == [False, True, False] and not truncated.any()
    assert list(info["step"]) == [1, 1, 1] and list(info["action"]) == ["WAIT", "FAIL", "WAIT"]
    with pytest.raises(StateError, match="env 1 needs a reset"):
        fake_env.step(["WAIT", "WAIT", "WAIT"])


def test_reset_mask_resets_only_the_masked_desktops(fake_env: DesktopVectorEnv) -> None:
    tasks = default_tasks(SMALL)
    first, _ = fake_env.reset(options={"tasks": {i: tasks[i] for i in range(3)}})
    fake_env.step(["WAIT", "DONE", "WAIT"])
    mask = np.array([False, True, False])
    obs, info = fake_env.reset(options={"reset_mask": mask, "tasks": {1: tasks[4]}})
    assert list(info["_task_id"]) == [False, True, False] and info["task_id"][1] == tasks[4].task_id
    assert obs["instruction"][1] == tasks[4].instruction
    assert obs["instruction"][0] == first["instruction"][0]
    with pytest.raises(legato_gym.ConfigError, match="reset_mask"):
        fake_env.reset(options={"reset_mask": np.zeros(3, dtype=np.bool_)})


def test_reset_with_seed_picks_tasks_like_desktop_env(fake_env: DesktopVectorEnv) -> None:
    _, info = fake_env.reset(seed=11)
    singles = [DesktopEnv("fake", SMALL) for _ in range(3)]
    try:
        expected = [env.reset(seed=11 + i)[1]["task_id"] for i, env in enumerate(singles)]
    finally:
        for env in singles:
            env.close()
    assert list(info["task_id"]) == expected


def test_call_and_get_attr_cross_as_json(toy_env: DesktopVectorEnv) -> None:
    assert toy_env.call("ping", 1) == (1, 2, 3)  # seeds 0, 1, 2
    assert toy_env.get_attr("seed") == (0, 1, 2)
    with pytest.raises(DesktopError, match="AttributeError") as caught:
        toy_env.get_attr("no_such_attribute")
    assert caught.value.env_id == 0 and "no_such_attribute" in (caught.value.remote_traceback or "")


class _Plain(gymnasium.Env[int, int]):
    """A trivial env with a plain attribute and a method, for Gymnasium's own ``call`` semantics."""

    observation_space = gymnasium.spaces.Discrete(1)  # type: ignore[assignment]
    action_space = gymnasium.spaces.Discrete(1)  # type: ignore[assignment]

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def ping(self, value: int) -> int:
        return value + self.seed


def test_call_on_a_plain_attribute_returns_its_values_as_gymnasium_does(toy_env: DesktopVectorEnv) -> None:
    reference = gymnasium.vector.SyncVectorEnv([lambda i=i: _Plain(i) for i in range(3)])  # type: ignore[misc]
    try:
        assert reference.call("seed") == reference.get_attr("seed") == (0, 1, 2)
        assert reference.call("ping", 1) == (1, 2, 3)
    finally:
        reference.close()
    assert toy_env.call("seed") == toy_env.get_attr("seed") == (0, 1, 2)
    assert toy_env.call("screen_size") == ([96, 64],) * 3  # a property: its value (a JSON list)
    assert toy_env.call("ping", 1) == (1, 2, 3)


def test_reset_seed_list_seeds_like_gymnasiums_sync_vector_env(fake_env: DesktopVectorEnv) -> None:
    reference = gymnasium.make_vec("legato/FakeDesktop-v0", num_envs=3, vectorization_mode="sync", config=SMALL)
    try:
        assert isinstance(reference, gymnasium.vector.SyncVectorEnv)

        def both(seed: object, options: dict[str, object] | None = None) -> tuple[list[object], list[object]]:
            ours = fake_env.reset(seed=seed, options=None if options is None else dict(options))[1]  # type: ignore[arg-type]
            theirs = reference.reset(seed=seed, options=None if options is None else dict(options))[1]  # type: ignore[arg-type]
            return list(ours["task_id"][ours["_task_id"]]), list(theirs["task_id"][theirs["_task_id"]])

        # None (or a None entry) reseeds nothing: both go on from generators seeded alike before.
        for seed in (11, [5, None, 7], [None, None, None], (3, 1, 4), None, [None, 2, None]):
            ours, theirs = both(seed)
            assert ours == theirs and len(ours) == 3, seed
        mask = np.array([False, True, False])
        ours, theirs = both([100, 9, 100], {"reset_mask": mask})  # seeds outside the mask are ignored
        assert ours == theirs and len(ours) == 1
        ours, theirs = both(None)
        assert ours == theirs
        with pytest.raises(ValueError, match="length must match num_envs=3"):
            reference.reset(seed=[1, 2])
    finally:
        reference.close()
    with pytest.raises(legato_gym.ConfigError, match=r"got 2 seeds for 3 desktops.*num_envs=3"):
        fake_env.reset(seed=[1, 2])
    with pytest.raises(legato_gym.ConfigError, match=r"seed\[1\]='x'"):
        fake_env.reset(seed=[1, "x", 2])  # type: ignore[list-item]
    with pytest.raises(legato_gym.ConfigError, match="non-negative"):
        fake_env.reset(seed=-1)


def test_make_vec_spec_names_the_step_limit() -> None:
    envs = gymnasium.make_vec("legato/FakeDesktop-v0", num_envs=1, config=SMALL, max_episode_steps=3)
    try:
        assert envs.spec is not None and envs.spec.max_episode_steps == 3
        envs.reset(seed=0)
        assert [bool(envs.step(["WAIT"])[3][0]) for _ in range(3)] == [False, False, True]
    finally:
        envs.close()
    envs = gymnasium.make_vec("legato/FakeDesktop-v0", num_envs=1, config=SMALL)
    try:
        assert envs.spec is not None and envs.spec.max_episode_steps == legato_gym.env.DEFAULT_MAX_STEPS
    finally:
        envs.close()


def test_a_task_solved_on_the_last_allowed_step_scores_1_in_every_vectorization() -> None:
    task = next(t for t in default_tasks(SMALL) if t.task_id == "fake-click-save")
    click = fake_solution(task, SMALL.screen)[0].action
    for mode in ("vector_entry_point", "sync"):
        envs = gymnasium.make_vec(
            "legato/FakeDesktop-v0", num_envs=2, vectorization_mode=mode, config=SMALL, max_episode_steps=2
        )
        try:
            envs.reset(seed=0, options={"task": task.task_id})
            envs.step(["WAIT", "WAIT"])
            _, rewards, terminated, truncated, _ = envs.step([click, "WAIT"])
            assert list(rewards) == [1.0, 0.0], mode
            assert list(terminated) == [False, False] and list(truncated) == [True, True], mode
        finally:
            envs.close()


# --- EnvPool surface ---------------------------------------------------------------------------------------


def test_send_recv_returns_partial_batches_tagged_with_env_id(fake_env: DesktopVectorEnv) -> None:
    with pytest.raises(StateError, match="nothing is in flight"):
        fake_env.recv()
    fake_env.reset(seed=0)
    fake_env.send(["WAIT", "WAIT"], env_ids=[2, 0])
    with pytest.raises(StateError, match="in flight"):
        fake_env.send(["WAIT"], env_ids=[0])
    seen: list[int] = []
    while len(seen) < 2:
        obs, rewards, _, _, info = fake_env.recv(min_results=1)
        assert obs["screenshot"].shape[0] == len(info["env_id"]) == len(rewards)
        seen += [int(i) for i in info["env_id"]]
    assert sorted(seen) == [0, 2]
    fake_env.send(["DONE"], env_ids=[1])
    _, _, terminated, _, info = fake_env.recv(min_results=5)  # clamped to what is in flight
    assert list(info["env_id"]) == [1] and terminated.all()


def test_send_reset_results_come_back_through_recv(fake_env: DesktopVectorEnv) -> None:
    fake_env.send_reset([0, 1], tasks={0: default_tasks(SMALL)[2]})
    _, rewards, terminated, truncated, info = fake_env.recv(min_results=2)
    assert sorted(info["env_id"]) == [0, 1] and not terminated.any() and not truncated.any()
    assert not rewards.any()
    assert info["task_id"][list(info["env_id"]).index(0)] == default_tasks(SMALL)[2].task_id


def test_recv_timeout_returns_what_finished(toy_env: DesktopVectorEnv) -> None:
    toy_env.reset(seed=0)
    toy_env.send(["HANG", "WAIT"], env_ids=[0, 1])
    *_, info = toy_env.recv(timeout=0.5, min_results=2)
    assert list(info["env_id"]) == [1]
    *_, truncated, info = toy_env.recv()  # the hang overruns its deadline
    assert list(info["env_id"]) == [0] and truncated.all()
    assert isinstance(info["error"][0], DeadlineExceeded) and info["_error"].all()


# --- asyncio -----------------------------------------------------------------------------------------------


def test_per_desktop_awaitables_run_concurrently(fake_env: DesktopVectorEnv) -> None:
    tasks = default_tasks(SMALL)

    async def episode(env_id: int) -> float:
        task = tasks[env_id]
        obs, info = await fake_env.areset(env_id, task)
        assert info["task_id"] == task.task_id and obs["screenshot"].shape == (240, 320, 3)
        reward = 0.0
        for step in fake_solution(task, SMALL.screen):
            obs, reward, terminated, truncated, _ = await fake_env.astep(env_id, step.action)
            if terminated or truncated:
                break
        return reward

    async def main() -> list[float]:
        rewards = await asyncio.gather(episode(0), episode(1))
        await fake_env.areset(2, tasks[2])
        await fake_env.astep(2, "WAIT")
        reward, info = await fake_env.atruncate(2)
        assert info["truncated"] is True and reward == 0.0
        with pytest.raises(StateError, match="needs a reset"):
            await fake_env.astep(2, "WAIT")
        return list(rewards)

    assert asyncio.run(main()) == [1.0, 1.0]


def test_arecv_and_a_failing_desktop_in_asyncio(toy_env: DesktopVectorEnv) -> None:
    async def main() -> None:
        toy_env.reset(seed=0)
        toy_env.send(["WAIT", "WAIT", "WAIT"])
        *_, info = await toy_env.arecv(min_results=3)
        assert sorted(info["env_id"]) == [0, 1, 2]
        with pytest.raises(DeadlineExceeded) as caught:
            await toy_env.astep(1, "HANG")
        assert caught.value.env_id == 1
        obs, *_ = await toy_env.astep(0, "WAIT")  # the others carry on
        assert obs["instruction"].startswith("toy task")
        await toy_env.areset(1, "toy-0")  # waits for the replacement desktop
        await toy_env.astep(1, "WAIT")

    asyncio.run(main())


def test_a_reset_hands_the_next_task_to_the_desktop_when_told(toy_env: DesktopVectorEnv) -> None:
    async def main() -> None:
        nxt = Task("toy-1", "toy task 1", {})
        await toy_env.areset(0, "toy-0", next_task=nxt)
        await toy_env.areset(0, "toy-0", next_task=None)  # told: not known
        await toy_env.areset(0, "toy-0")  # no word: the desktop is not told anything
        await toy_env.areset(1, "toy-2", next_task=Task("toy-2", "toy task 2", {}))

    asyncio.run(main())
    assert toy_env.get_attr("hints")[:2] == (["toy-1", None], ["toy-2"])


def test_the_gymnasium_env_hands_the_next_task_to_the_desktop_when_told() -> None:
    env = DesktopEnv(TOY, TOY_CONFIG)
    env.reset(options={"task": "toy-0", "next_task": "toy-1"})
    env.reset(options={"task": "toy-0", "next_task": None})
    env.reset(options={"task": "toy-0"})
    assert env._desktop.hints == ["toy-1", None]  # type: ignore[attr-defined]
    env.close()


def test_a_cancelled_call_leaves_the_desktop_busy_until_idle(toy_env: DesktopVectorEnv) -> None:
    async def main() -> None:
        await toy_env.areset(0, "toy-0")
        assert toy_env.idle(0).done()  # nothing in flight
        call = asyncio.ensure_future(toy_env.astep(0, "SLOW"))
        await asyncio.sleep(0.2)
        call.cancel()  # the caller gives up; the desktop cannot take its action back
        idle = toy_env.idle(0)
        await asyncio.sleep(0)
        assert call.cancelled() and not idle.done()
        with pytest.raises(StateError, match="in flight"):
            await toy_env.areset(0, "toy-1")
        await asyncio.wait_for(idle, 5)  # done when the action has run
        obs, *_ = await toy_env.astep(0, "WAIT")
        assert obs["instruction"] == "toy task 0"

    asyncio.run(main())


# --- faults ------------------------------------------------------------------------------------------------


def test_killed_worker_is_replaced_and_only_its_desktop_fails(toy_env: DesktopVectorEnv) -> None:
    toy_env.reset(seed=0)
    before = toy_env.worker_pids
    os.kill(before[1], signal.SIGKILL)
    obs, rewards, terminated, truncated, info = toy_env.step(["WAIT", "WAIT", "WAIT"])
    assert list(info["_error"]) == [False, True, False] and not rewards.any() and not terminated.any()
    error = info["error"][1]
    assert isinstance(error, DesktopCrashed) and error.env_id == 1 and "died" in str(error)
    assert list(truncated) == [False, True, False] and not obs["screenshot"][1].any()
    wait_for(lambda: toy_env.worker_pids[1] not in (-1, before[1]), "a replacement worker")
    assert toy_env.worker_pids[0] == before[0] and toy_env.worker_pids[2] == before[2]
    assert gone(before[1])
    with pytest.raises(StateError, match="env 1 needs a reset"):
        toy_env.step(["WAIT", "WAIT", "WAIT"])
    toy_env.reset(options={"reset_mask": np.array([False, True, False])})
    toy_env.step(["WAIT", "WAIT", "WAIT"])


def test_worker_exit_and_raised_errors_carry_env_id_and_traceback(toy_env: DesktopVectorEnv) -> None:
    toy_env.reset(seed=0)
    pids = toy_env.worker_pids
    *_, info = toy_env.step(["EXIT", "CRASH", "BOOM"])
    exited, crashed, bug = info["error"]
    assert isinstance(exited, DesktopCrashed) and exited.env_id == 0 and "exit status 3" in str(exited)
    assert isinstance(crashed, DesktopCrashed) and crashed.env_id == 1
    assert "toy desktop crashed on purpose" in (crashed.remote_traceback or "")
    assert type(bug) is DesktopError and "ValueError: toy backend bug" in str(bug)
    assert "vector_toy.py" in (bug.remote_traceback or "")
    wait_for(lambda: -1 not in toy_env.worker_pids, "replacement workers")
    new = toy_env.worker_pids
    assert new[0] != pids[0] and new[1] != pids[1] and new[2] == pids[2]  # a backend bug keeps its worker


def test_close_leaves_no_worker_or_desktop_child(tmp_path: Path) -> None:
    env = DesktopVectorEnv(2, TOY, TOY_CONFIG, worker_env=TOY_ENV)
    tasks = {i: Task(f"child-{i}", "spawn", {"child_pid_file": str(tmp_path / f"{i}.pid")}) for i in range(2)}
    env.reset(options={"tasks": tasks})
    pids = env.worker_pids + [int((tmp_path / f"{i}.pid").read_text()) for i in range(2)]
    assert not any(gone(pid) for pid in pids)
    env.send(["HANG"], env_ids=[0])  # a busy worker is killed, not waited for
    env.close()
    env.close()  # idempotent
    wait_for(lambda: all(gone(pid) for pid in pids), "workers and their children to exit")
    with pytest.raises(StateError, match="closed"):
        env.step(["WAIT", "WAIT"])


def test_killing_a_worker_kills_its_process_group(tmp_path: Path) -> None:
    with DesktopVectorEnv(1, TOY, TOY_CONFIG, worker_env=TOY_ENV) as env:
        env.reset(options={"task": Task("child", "spawn", {"child_pid_file": str(tmp_path / "c.pid")})})
        child = int((tmp_path / "c.pid").read_text())
        *_, info = env.step(["EXIT"])
        assert isinstance(info["error"][0], DesktopCrashed)
        wait_for(lambda: gone(child), "the desktop's child to die with its worker")


PARENT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    sys.path.insert(0, {here!r})
    from legato_gym.config import DesktopConfig
    from legato_gym.contract import Task
    from legato_gym.vector import DesktopVectorEnv

    env = DesktopVectorEnv(2, "vector_toy:ToyDesktop", DesktopConfig(screen=(96, 64)),
                           worker_env={{"PYTHONPATH": {here!r}}})
    tmp = Path({tmp!r})
    tasks = {{i: Task(str(i), "x", {{"child_pid_file": str(tmp / f"{{i}}.pid")}}) for i in range(2)}}
    env.reset(options={{"tasks": tasks}})
    children = [int((tmp / f"{{i}}.pid").read_text()) for i in range(2)]
    print(json.dumps(env.worker_pids + children), flush=True)
    sys.stdin.read()
    """
)


def test_killed_parent_leaves_no_worker_behind(tmp_path: Path) -> None:
    script = PARENT.format(here=str(HERE), tmp=str(tmp_path))
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        pids = json.loads(parent.stdout.readline())
        assert len(pids) == 4 and not any(gone(pid) for pid in pids)
        parent.kill()
        parent.wait()
        wait_for(lambda: all(gone(pid) for pid in pids), "workers of a SIGKILLed parent to exit")
    finally:
        parent.kill()
        parent.wait()


def test_hung_worker_overruns_its_deadline_and_others_carry_on(toy_env: DesktopVectorEnv) -> None:
    toy_env.reset(seed=0)
    pid = toy_env.worker_pids[2]
    _, _, _, truncated, info = toy_env.step(["WAIT", "WAIT", "HANG"])
    assert list(info["_error"]) == [False, False, True] and list(truncated) == [False, False, True]
    assert isinstance(info["error"][2], DeadlineExceeded) and info["error"][2].env_id == 2
    assert gone(pid)
    assert list(info["step"][:2]) == [1, 1]


def test_startup_failure_is_a_clear_error() -> None:
    with pytest.raises(legato_gym.ConfigError, match=r"DesktopConfig\.worker_python"):
        DesktopVectorEnv(1, "fake", DesktopConfig(screen=(320, 240), worker_python="/nonexistent/python"))
    with pytest.raises(legato_gym.BackendUnavailableError, match="nosuch"):
        DesktopVectorEnv(1, "nosuch")


def test_blob_screenshots_match_shared_memory() -> None:
    tasks = {i: default_tasks(SMALL)[i] for i in range(2)}
    frames = []
    for mode in ("shm", "blob"):
        with DesktopVectorEnv(2, "fake", SMALL, seed=0, screenshots=mode) as env:  # type: ignore[arg-type]
            obs, _ = env.reset(options={"tasks": tasks})
            obs2, *_ = env.step(["pyautogui.click(10, 10)", "WAIT"])
            frames.append((obs["screenshot"].copy(), obs2["screenshot"].copy()))
    assert all(np.array_equal(a, b) for a, b in zip(frames[0], frames[1], strict=True))
    assert frames[0][0].any()


def test_make_vector_env_accepts_what_make_vec_passes() -> None:
    with make_vector_env(num_envs=1, backend="fake", config=SMALL, max_episode_steps=2) as env:
        env.reset(seed=0)
        env.step(["WAIT"])
        _, _, terminated, truncated, _ = env.step(["WAIT"])
        assert truncated.all() and not terminated.any()
    with pytest.raises(legato_gym.ConfigError, match="render_mode"):
        make_vector_env(num_envs=1, render_mode="human")


def test_make_vec_limits_meet_as_gymnasium_make_does() -> None:
    # gymnasium.make(id, max_steps=8, max_episode_steps=3) ends episodes on step 3; so does make_vec.
    with make_vector_env(num_envs=1, backend="fake", config=SMALL, max_steps=8, max_episode_steps=3) as env:
        assert env.max_steps == 3
    with pytest.raises(legato_gym.ConfigError, match=r"max_steps=3 .*max_episode_steps=5"):
        make_vector_env(num_envs=1, backend="fake", config=SMALL, max_steps=3, max_episode_steps=5)
    with make_vector_env(num_envs=1, backend="fake", config=SMALL, max_episode_steps=-1) as env:  # as make: none
        assert env.max_steps == legato_gym.env.DEFAULT_MAX_STEPS


# --- same results as stepping the envs one by one -------------------------------------------------------------


def test_vector_env_matches_desktop_envs_stepped_one_by_one() -> None:
    config = DesktopConfig(screen=(320, 240))
    tasks = default_tasks(config)
    num = 3
    rng = np.random.default_rng(7)

    def scripts(seed: int) -> list[list[str]]:
        """Per env: a correct solution, a random walk, and a give-up, by env index."""
        chosen = [tasks[(seed + i) % len(tasks)] for i in range(num)]
        out = [[s.action for s in fake_solution(chosen[0], config.screen)]]
        width, height = config.screen
        clicks = [f"pyautogui.click({rng.integers(width)}, {rng.integers(height)})" for _ in range(3)]
        out.append([*clicks, "pyautogui.typewrite('hello')", "pyautogui.press('enter')", "DONE"])
        out.append(["WAIT", "FAIL"])
        return out

    def run_vector(seed: int, plans: list[list[str]]) -> list[list[tuple[bytes, float, bool, bool]]]:
        traj: list[list[tuple[bytes, float, bool, bool]]] = [[] for _ in range(num)]
        with DesktopVectorEnv(num, "fake", config, max_steps=6, seed=seed) as env:
            chosen = {i: tasks[(seed + i) % len(tasks)] for i in range(num)}
            obs, _ = env.reset(seed=seed, options={"tasks": chosen})
            for i in range(num):
                traj[i].append((obs["screenshot"][i].tobytes(), 0.0, False, False))
            cursor = [0] * num
            live = set(range(num))
            while live:
                ids = sorted(live)
                env.send([plans[i][cursor[i]] for i in ids], env_ids=ids)
                obs, rewards, terminated, truncated, info = env.recv(min_results=len(ids))
                for row, env_id in enumerate(info["env_id"]):
                    traj[env_id].append(
                        (obs["screenshot"][row].tobytes(), rewards[row], terminated[row], truncated[row])
                    )
                    cursor[env_id] += 1
                    if terminated[row] or truncated[row] or cursor[env_id] == len(plans[env_id]):
                        live.discard(int(env_id))
        return traj

    def run_single(seed: int, plans: list[list[str]]) -> list[list[tuple[bytes, float, bool, bool]]]:
        traj: list[list[tuple[bytes, float, bool, bool]]] = []
        for i in range(num):
            env = DesktopEnv("fake", config, max_steps=6, seed=seed + i)
            try:
                obs, _ = env.reset(seed=seed + i, options={"task": tasks[(seed + i) % len(tasks)]})
                steps = [(obs["screenshot"].tobytes(), 0.0, False, False)]
                for action in plans[i]:
                    obs, reward, terminated, truncated, _ = env.step(action)
                    steps.append((obs["screenshot"].tobytes(), reward, terminated, truncated))
                    if terminated or truncated:
                        break
                traj.append(steps)
            finally:
                env.close()
        return traj

    for seed in (0, 5):
        plans = scripts(seed)
        vector, single = run_vector(seed, plans), run_single(seed, plans)
        assert [len(t) for t in vector] == [len(t) for t in single]
        assert vector == single
        assert vector[0][-1][1] == 1.0  # the solved task scored, so rewards are compared


@pytest.mark.slow
def test_many_fake_desktops_step_without_errors() -> None:
    with DesktopVectorEnv(32, "fake", DesktopConfig(screen=(320, 240)), seed=0) as env:
        _, info = env.reset(seed=0)
        assert "_error" not in info
        for _ in range(3):
            env.send(["WAIT"] * 32)
            seen = 0
            while seen < 32:
                *_, info = env.recv(min_results=8)
                assert "error" not in info
                seen += len(info["env_id"])
        assert len(set(env.worker_pids)) == 32
