"""Run the in-desktop server from its folder: ``python FOLDER --listen ... --fb ...``.

Also ``python -m legato_gym.desktop_server ...`` on the host. Run as a folder (in the sandbox, under
``python -I`` too), there is no package around this file: it loads the folder as the package
:data:`STANDALONE_NAME` first, so the modules' relative imports work (see the package's docstring).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

#: The package's name when its folder runs as a script.
STANDALONE_NAME = "legato_desktop_server"


def _package() -> str:
    """The package's import name, loaded from this folder when it runs as a script."""
    if __package__:
        return __package__
    folder = os.path.dirname(os.path.abspath(__file__))
    if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == folder:
        del sys.path[0]  # the folder's modules belong to the package, not to every import of an action
    if STANDALONE_NAME not in sys.modules:
        init = os.path.join(folder, "__init__.py")
        spec = importlib.util.spec_from_file_location(STANDALONE_NAME, init, submodule_search_locations=[folder])
        if spec is None or spec.loader is None:
            raise SystemExit(f"cannot load the in-desktop server from {folder}")
        package = importlib.util.module_from_spec(spec)
        sys.modules[STANDALONE_NAME] = package
        spec.loader.exec_module(package)
    return STANDALONE_NAME


if __name__ == "__main__":
    importlib.import_module(_package() + ".cli").main()
