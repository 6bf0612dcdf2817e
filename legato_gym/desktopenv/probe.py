"""``check`` side of :func:`legato_gym.desktopenv.venv.check_venv`: runs in desktop-env's interpreter.

Imports desktop-env's controllers, docker provider, getters, metrics and ``DesktopEnv`` with the shim
installed, and prints one JSON line: what imported, what failed, which optional libraries are absent and
which metrics need them.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import sys
import traceback
from typing import Any

from legato_gym.desktopenv import shim

__all__ = ["main", "probe"]

MODULES = (
    "desktop_env.controllers.python",
    "desktop_env.controllers.setup",
    "desktop_env.providers.docker.provider",
    "desktop_env.providers.docker.manager",
    "desktop_env.evaluators.getters",
    "desktop_env.evaluators.metrics",
    "desktop_env.desktop_env",
)


def probe() -> dict[str, Any]:
    """What imports in this interpreter (see the module docstring)."""
    shim.install()
    imported: list[str] = []
    failed: dict[str, str] = {}
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed[name] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        else:
            imported.append(name)
    versions: dict[str, str] = {}
    for dist in ("desktop-env", "numpy", "gymnasium", "Pillow", "requests"):
        try:
            from importlib.metadata import version

            versions[dist] = version(dist)
        except Exception:
            versions[dist] = "absent"
    getters = metrics = 0
    unavailable: dict[str, list[str]] = {}
    if "desktop_env.evaluators.getters" in imported:
        module = sys.modules["desktop_env.evaluators.getters"]
        getters = sum(1 for n, f in vars(module).items() if n.startswith("get_") and inspect.isfunction(f))
    if "desktop_env.evaluators.metrics" in imported:
        module = sys.modules["desktop_env.evaluators.metrics"]
        for name, func in vars(module).items():
            if name.startswith("_") or not inspect.isfunction(func):
                continue
            metrics += 1
            missing = shim.uses_stub(func)
            if missing:
                unavailable[name] = missing
    return {
        "ok": not failed,
        "versions": versions,
        "imported": imported,
        "failed": failed,
        "getters": getters,
        "metrics": metrics,
        "stubbed": shim.stubbed(),
        "unavailable_metrics": dict(sorted(unavailable.items())),
    }


def main() -> int:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    report = probe()
    sys.stdout.write(json.dumps(report) + "\n")
    return 0
