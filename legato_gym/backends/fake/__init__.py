"""The fake backend: deterministic desktops that render real pixels, with no VM.

A fake desktop shows one application window (a title bar, a text field, labelled buttons and a status line)
on a plain desktop, and a mouse pointer. It accepts the same actions as a real desktop (OSWorld's pyautogui
action space, parsed by :mod:`legato_gym.actions` and never executed) and changes state as a real window
would: a click on the field focuses it, typing goes into the focused field, ``press('enter')`` submits it, a
click on a button presses it. Fake tasks are OSWorld-format task configs whose evaluator reads that state
(result ``{"type": "fake_state", "key": ...}``, expected ``{"type": "rule", "rules": ...}``), so a correct
policy scores 1 and a random one almost always 0.

Inline OSWorld task configs run too when the fake can honour their evaluator: ``infeasible`` (1 only when the
last action is ``FAIL``), and ``exact_match`` / ``check_include_exclude`` over ``fake_state`` results. Their
setup steps are accepted as no-ops. Any other evaluator raises
:class:`~legato_gym.errors.UnsupportedTaskError` naming it, from :func:`check_task` and :meth:`FakeDesktop.reset`.

Options (``DesktopConfig.options``: a :class:`FakeOptions`, or ``None`` for zero latency and no faults)::

    from legato_gym.backends.fake import FakeOptions, Faults, Latency

    FakeOptions(
        latency={                        # seconds per phase: Latency(median, sigma, max), lognormal when sigma > 0
            "reset": Latency(0.5),       #   desktop.reset (task setup)
            "act": Latency(0.2, sigma=0.5, max=5.0),   # running one action
            "settle": Latency(0.1),      #   each ready-signal wait (after reset, after an action, before grading)
            "evaluate": Latency(0.3),    #   grading
        },
        faults=Faults(                   # seeded by the desktop's seed: the same seed gives the same faults
            crash=0.01,                  #   probability per call (in "phases") of DesktopCrashed
            crash_mode="raise",          #   "raise", "exit": os._exit(70) so the worker process dies, or
                                         #   "agent": AgentFault, the agent destroyed its desktop
            hang=0.01,                   #   probability per call of blocking for hang_seconds
            hang_seconds=3600.0,         #   then DeadlineExceeded (close() from another thread ends it early)
            setup=0.05,                  #   probability per reset of SetupError
            phases=frozenset({"reset", "act", "evaluate"}),   # calls where crash and hang may strike
        ),
    )

The same as a mapping (a YAML or JSON config; a plain number is a fixed latency), read once into
:class:`FakeOptions`: ``{"latency": {"act": {"median": 0.2, "sigma": 0.5}, "reset": 0.5}, "faults": {"crash":
0.01, "phases": ["act"]}}``.

A latency longer than the phase's deadline (``DesktopConfig.timeouts``) raises
:class:`~legato_gym.errors.DeadlineExceeded` after the deadline (for ``settle``: the wait ends with
``ready=False``). With ``ready_signal=False`` the waits are OSWorld's fixed sleeps: ``fixed_wait`` after each
action (twice for ``WAIT``), ``30 * fixed_wait`` after reset and ``10 * fixed_wait`` before grading.

Example::

    from legato_gym import DesktopConfig, Episode
    from legato_gym.backends.fake import FakeDesktop, default_tasks, fake_solution

    config = DesktopConfig(screen=(640, 480))
    desktop = FakeDesktop(config, seed=0)
    task = default_tasks(config)[0]
    episode = Episode(desktop)
    episode.reset(task)
    for step in fake_solution(task, desktop.screen_size):
        obs, reward, terminated, truncated, info = episode.step(step.action)
    assert reward == 1.0

The package, one concern a module: :mod:`~legato_gym.backends.fake.options` (the options above),
:mod:`~legato_gym.backends.fake.faults` (injecting them), :mod:`~legato_gym.backends.fake.layout` (where the
widgets are), :mod:`~legato_gym.backends.fake.widgets` (how they answer actions),
:mod:`~legato_gym.backends.fake.render` and :mod:`~legato_gym.backends.fake.font` (pixels),
:mod:`~legato_gym.backends.fake.grading` (evaluators), :mod:`~legato_gym.backends.fake.tasks` (the suite and
its solutions) and :mod:`~legato_gym.backends.fake.desktop` (:class:`FakeDesktop`, the contract).
"""

from legato_gym.backends import Backend, RayNeeds
from legato_gym.backends.fake.desktop import FakeDesktop
from legato_gym.backends.fake.grading import STATE_KEYS, SUPPORTED_FUNCS, check_task
from legato_gym.backends.fake.layout import FAKE_WINDOW, Layout, Rect, WindowSpec, layout_for, window_spec
from legato_gym.backends.fake.options import (
    CRASH_EXIT_CODE,
    FAULT_PHASES,
    LATENCY_PHASES,
    FakeOptions,
    Faults,
    Latency,
)
from legato_gym.backends.fake.tasks import FakeStep, default_tasks, fake_solution, fake_task

#: The fake backend, declared once (:class:`~legato_gym.backends.Backend`): what legato knows of it.
BACKEND = Backend(
    name="fake",
    desktop_class=FakeDesktop,
    options_class=FakeOptions,
    default_tasks=default_tasks,
    check_task=FakeDesktop.check_task,
    ray_needs=RayNeeds(cpus=0.0, memory=0),
    solution=fake_solution,
)

__all__ = [
    "BACKEND",
    "CRASH_EXIT_CODE",
    "FAKE_WINDOW",
    "FAULT_PHASES",
    "LATENCY_PHASES",
    "STATE_KEYS",
    "SUPPORTED_FUNCS",
    "FakeDesktop",
    "FakeOptions",
    "FakeStep",
    "Faults",
    "Latency",
    "Layout",
    "Rect",
    "WindowSpec",
    "check_task",
    "default_tasks",
    "fake_solution",
    "fake_task",
    "layout_for",
    "window_spec",
]
