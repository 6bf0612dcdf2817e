"""desktop-env's own interpreter: build it, find it, check it.

desktop-env 1.0.2 pins gymnasium~=0.28, numpy<2, torch~=2.5, transformers~=4.35 and Pillow~=11, so it cannot
share legato's environment (``DESIGN.md``). :func:`setup_venv` builds a dedicated virtual environment with
``pip install --no-deps desktop-env==1.0.2`` plus :data:`REQUIREMENTS`: what its controllers, providers,
getters and metrics import, *without* torch, transformers, easyocr and librosa (gigabytes, for a handful of
OCR and audio metrics; :mod:`.shim` lets the evaluators import without them and names the package when a
metric needs one). The environment's python is recorded in ``legato-osworld.json`` inside it, and
:func:`recorded_python` is what ``DesktopConfig.worker_python`` defaults to for the ``osworld`` backend.

Standard library only: it runs in legato's interpreter and is imported in desktop-env's.

Example::

    from legato_gym.desktopenv.venv import setup_venv, check_venv
    result = setup_venv()                    # ~/.cache/legato/osworld-venv
    report = check_venv(result.venv)         # imports controllers, getters, metrics there
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legato_gym.errors import MissingDependencyError

__all__ = [
    "DESKTOP_ENV_VERSION",
    "LEFT_OUT",
    "MARKER",
    "REQUIREMENTS",
    "VENV_ENV_VAR",
    "CheckReport",
    "SetupResult",
    "check_venv",
    "default_venv",
    "recorded_python",
    "setup_venv",
    "venv_python",
]

logger = logging.getLogger(__name__)

DESKTOP_ENV_VERSION = "1.0.2"
#: ``$LEGATO_OSWORLD_VENV`` overrides the default location, ``~/.cache/legato/osworld-venv``.
VENV_ENV_VAR = "LEGATO_OSWORLD_VENV"
#: The file inside the venv that records what was installed and which python to use.
MARKER = "legato-osworld.json"

#: What desktop-env's controllers, docker provider, getters and metrics import (its own pins where it has
#: them), plus what the local stand-in desktop needs when it runs in this interpreter (httpx, pyautogui).
REQUIREMENTS: tuple[str, ...] = (
    "numpy>=1.26,<2",
    "Pillow~=11.0.0",
    "gymnasium~=0.28.1",
    "requests",
    "requests-toolbelt~=1.0.0",
    "pytz~=2024.1",
    "psutil~=5.9.6",
    "tqdm~=4.65.0",
    "pandas>=2.2,<2.3",
    "lxml",
    "cssselect",
    "xmltodict",
    "openpyxl",
    "python-docx",
    "python-pptx",
    "pypdf",
    "PyPDF2",
    "rapidfuzz",
    "ImageHash",
    "scikit-image",
    "pymupdf",
    "chardet",
    "playwright",
    "backoff",
    "formulas",
    "pydrive",
    "fastdtw",
    "odfpy",
    "func-timeout",
    "beautifulsoup4",
    "PyYAML",
    "mutagen",
    "borb",
    "pdfplumber",
    "wrapt_timeout_decorator",
    "python-dotenv",
    "tldextract",
    "docker",
    "filelock",
    "pyacoustid",
    "opencv-python-headless>=4.5,<5",
    "httpx>=0.27,<1",
    "pyautogui~=0.9.54",
    "python-xlib>=0.33",
)

#: desktop-env dependencies left out, and why. The evaluators import without them (:mod:`.shim`).
LEFT_OUT: dict[str, str] = {
    "torch": "gigabytes; only easyocr needs it",
    "transformers": "pulls torch; nothing in desktop_env imports it",
    "easyocr": "pulls torch; OCR in a few docs metrics (compare_docx_files with OCR, ...)",
    "librosa": "audio metrics of a few vlc tasks (compare_audios)",
    "agent and cloud clients": "ag2, openai, anthropic, dashscope, groq, google-generativeai, boto3, azure-*, "
    "alibabacloud-*, wandb, gdown, tiktoken: used by mm_agents and cloud providers, not by evaluation",
    "desktop tools": "pygame, pynput, PyGetWindow, matplotlib, fabric, loguru: not imported by setup or evaluation",
}


def default_venv() -> Path:
    """``$LEGATO_OSWORLD_VENV``, else ``~/.cache/legato/osworld-venv``."""
    value = os.environ.get(VENV_ENV_VAR)
    return Path(value).expanduser() if value else Path("~/.cache/legato/osworld-venv").expanduser()


def venv_python(venv: Path) -> Path:
    """The interpreter of a venv (``bin/python``)."""
    return venv / "bin" / "python"


def _requirements_hash() -> str:
    text = "\n".join([f"desktop-env=={DESKTOP_ENV_VERSION}", *REQUIREMENTS])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def recorded_python(venv: Path | None = None) -> str | None:
    """The python recorded by :func:`setup_venv` in ``venv`` (default :func:`default_venv`), or ``None``."""
    marker = (venv or default_venv()) / MARKER
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    python = data.get("python")
    return str(python) if python and Path(python).exists() else None


@dataclass(frozen=True)
class SetupResult:
    """What :func:`setup_venv` did.

    Attributes:
        venv: the environment's directory.
        python: its interpreter; give it as ``DesktopConfig.worker_python``.
        seconds: wall-clock time of the whole setup (0 when it was already up to date).
        reused: True when an up-to-date environment was found and nothing was installed.
    """

    venv: Path
    python: Path
    seconds: float
    reused: bool


def _run(argv: Sequence[str], log: Callable[[str], None], what: str) -> None:
    log(f"$ {' '.join(argv)}")
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr + proc.stdout).splitlines() if not line.startswith("WARNING: Location")]
        tail = "\n".join(lines[-25:])
        raise MissingDependencyError(
            f"{what} failed (exit {proc.returncode}):\n{tail}\n"
            "check that pip reaches a package index (pip config list; --index-url), then run "
            "`legato osworld setup` again"
        )


def setup_venv(
    venv: Path | None = None,
    *,
    base_python: str | None = None,
    force: bool = False,
    pip_args: Sequence[str] = (),
    log: Callable[[str], None] = logger.info,
) -> SetupResult:
    """Create (or refresh) desktop-env's virtual environment and record its python.

    Args:
        venv: where to put it (default :func:`default_venv`).
        base_python: the interpreter to build it from (default: this one's base interpreter, which
            must be Python 3.10–3.12: desktop-env's numpy<2 has no wheels for newer ones).
        force: rebuild from scratch even when an up-to-date one exists.
        pip_args: extra arguments for each ``pip install`` (e.g. ``--index-url``).
        log: where progress lines go.

    Raises:
        MissingDependencyError: pip failed (no index reachable, no wheel for this Python); the message
            carries pip's last lines.
    """
    venv = (venv or default_venv()).expanduser().resolve()
    python = venv_python(venv)
    marker = venv / MARKER
    start = time.monotonic()
    if not force and marker.exists():
        try:
            data = json.loads(marker.read_text())
        except ValueError:
            data = {}
        if data.get("requirements") == _requirements_hash() and python.exists():
            log(f"desktop-env environment at {venv} is up to date")
            return SetupResult(venv=venv, python=python, seconds=0.0, reused=True)
    if force and venv.exists():
        shutil.rmtree(venv)
    base = base_python or getattr(sys, "_base_executable", None) or sys.executable
    if not python.exists():
        _run([base, "-m", "venv", str(venv)], log, f"creating the virtual environment at {venv}")
    pip = [str(python), "-m", "pip", "install", "--quiet", *pip_args]
    _run([*pip, "--no-deps", f"desktop-env=={DESKTOP_ENV_VERSION}"], log, "installing desktop-env")
    requirements = venv / "legato-requirements.txt"
    requirements.write_text("\n".join(REQUIREMENTS) + "\n")
    _run([*pip, "-r", str(requirements)], log, "installing desktop-env's evaluator dependencies")
    seconds = time.monotonic() - start
    marker.write_text(
        json.dumps(
            {
                "desktop_env": DESKTOP_ENV_VERSION,
                "python": str(python),
                "requirements": _requirements_hash(),
                "setup_seconds": round(seconds, 1),
                "left_out": sorted(LEFT_OUT),
            },
            indent=2,
        )
        + "\n"
    )
    log(f"desktop-env environment ready at {venv} in {seconds:.0f} s; python: {python}")
    return SetupResult(venv=venv, python=python, seconds=seconds, reused=False)


@dataclass(frozen=True)
class CheckReport:
    """What :func:`check_venv` found in desktop-env's interpreter.

    Attributes:
        python: the interpreter checked.
        ok: True when the controllers, getters, metrics and DesktopEnv all imported.
        versions: versions of desktop-env, numpy, gymnasium, Pillow there.
        imported: modules that imported.
        failed: modules that did not, with the error.
        getters: number of getter functions (``get_*``).
        metrics: number of metric functions.
        stubbed: optional libraries absent there (imports succeed; use raises).
        unavailable_metrics: metric name → the absent libraries it uses.
    """

    python: str
    ok: bool
    versions: dict[str, str]
    imported: list[str]
    failed: dict[str, str]
    getters: int
    metrics: int
    stubbed: list[str]
    unavailable_metrics: dict[str, list[str]]

    def to_json(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "ok": self.ok,
            "versions": self.versions,
            "imported": self.imported,
            "failed": self.failed,
            "getters": self.getters,
            "metrics": self.metrics,
            "stubbed": self.stubbed,
            "unavailable_metrics": self.unavailable_metrics,
        }


_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
#: Import legato_gym with gymnasium hidden (its no-gymnasium path, as a worker does), then run the probe.
_PROBE = (
    "import sys; sys.modules['gymnasium'] = None; import legato_gym; del sys.modules['gymnasium']; "
    "from legato_gym.desktopenv.probe import main; sys.exit(main())"
)


def check_venv(venv: Path | None = None, *, python: str | None = None, timeout: float = 300.0) -> CheckReport:
    """Import desktop-env's controllers, providers, getters and metrics in its interpreter and report.

    Raises:
        MissingDependencyError: there is no such interpreter, or it could not run the probe at all.
    """
    interpreter = python or str(venv_python((venv or default_venv()).expanduser()))
    if not Path(interpreter).exists():
        raise MissingDependencyError(
            f"no desktop-env interpreter at {interpreter}; create it with `legato osworld setup`"
            + (f" --venv {venv}" if venv else "")
        )
    env = dict(os.environ, PYTHONPATH=_PACKAGE_ROOT, PYTHONNOUSERSITE="1")
    try:
        proc = subprocess.run(
            [interpreter, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MissingDependencyError(f"cannot run the desktop-env interpreter {interpreter}: {exc}") from exc
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise MissingDependencyError(
            f"the desktop-env interpreter {interpreter} could not run legato's probe (exit {proc.returncode}): "
            f"{proc.stderr.strip()[-1500:]}; rebuild it with `legato osworld setup --force`"
        ) from exc
    return CheckReport(python=interpreter, **data)
