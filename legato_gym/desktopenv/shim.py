"""Let desktop-env's evaluators import where a heavy optional library is left out.

desktop-env imports every library any metric might need at module load (``metrics/docs.py`` imports
easyocr, hence torch; ``metrics/vlc.py`` imports librosa; ...). legato's desktop-env environment leaves the
heaviest out (:data:`legato_gym.desktopenv.venv.LEFT_OUT`), so :func:`install` puts a finder at the
*end* of ``sys.meta_path``: a module that no real finder can import, and whose top-level name is in
:data:`OPTIONAL`, becomes a stub. Importing it (and ``from it import name``) succeeds; *using* anything
from it raises :class:`~legato_gym.errors.MissingDependencyError` naming the package and how to install it.
So ``desktop_env.evaluators.metrics`` imports, and only a task whose metric needs the missing library fails,
at evaluation, with a clear message.

Runs inside desktop-env's interpreter; standard library only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any, NoReturn

from legato_gym.errors import MissingDependencyError

__all__ = ["OPTIONAL", "MissingAttribute", "StubModule", "install", "stubbed", "uses_stub"]

#: Top-level modules that may be stubbed, with the PyPI package that provides each.
OPTIONAL: dict[str, str] = {
    "easyocr": "easyocr",
    "torch": "torch",
    "torchvision": "torchvision",
    "transformers": "transformers",
    "librosa": "librosa",
    "acoustid": "pyacoustid",
    "cv2": "opencv-python-headless",
    "skimage": "scikit-image",
    "scipy": "scipy",
    "imagehash": "ImageHash",
    "fastdtw": "fastdtw",
    "borb": "borb",
    "fitz": "pymupdf",
    "pdfplumber": "pdfplumber",
    "formulas": "formulas",
    "playwright": "playwright",
    "pydrive": "pydrive",
    "pygame": "pygame",
    "pynput": "pynput",
    "pyautogui": "pyautogui",
    "mutagen": "mutagen",
    "odf": "odfpy",
    "PyPDF2": "PyPDF2",
    "pypdf": "pypdf",
    "docx": "python-docx",
    "pptx": "python-pptx",
    "tldextract": "tldextract",
    "docker": "docker",
    "filelock": "filelock",
    "psutil": "psutil",
    "gymnasium": "gymnasium~=0.28.1",
}


def _raise(name: str) -> NoReturn:
    top = name.split(".")[0]
    package = OPTIONAL.get(top, top)
    raise MissingDependencyError(
        f"{name} needs the Python package {package!r}, which legato's desktop-env environment does not install "
        f"(it is heavy and only a few OSWorld metrics use it); install it into that environment with "
        f"`{sys.executable} -m pip install {package!r}` and run the task again"
    )


class MissingAttribute:
    """What a stub module hands out: anything but using it (call, subclass, iterate, compare) raises."""

    def __init__(self, name: str) -> None:
        self._legato_missing = name

    def __getattr__(self, attr: str) -> MissingAttribute:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return MissingAttribute(f"{self._legato_missing}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        _raise(self._legato_missing)

    def __mro_entries__(self, bases: tuple[Any, ...]) -> NoReturn:
        _raise(self._legato_missing)

    def __iter__(self) -> NoReturn:
        _raise(self._legato_missing)

    def __getitem__(self, key: Any) -> NoReturn:
        _raise(self._legato_missing)

    def __repr__(self) -> str:
        return f"<missing {self._legato_missing}>"


class StubModule(types.ModuleType):
    """A module that is not installed: attribute access gives :class:`MissingAttribute` placeholders."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return MissingAttribute(f"{self.__name__}.{attr}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self.stubbed: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top = fullname.split(".")[0]
        if top not in OPTIONAL:
            return None
        if fullname != top and top not in self.stubbed:
            return None  # a real package with a missing submodule: let the ImportError stand
        self.stubbed.add(top)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


_FINDER = _StubFinder()


def install() -> None:
    """Append the stub finder to ``sys.meta_path`` (idempotent). Real modules always win over stubs."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)


def stubbed() -> list[str]:
    """Top-level modules stubbed so far in this process."""
    return sorted(_FINDER.stubbed)


def uses_stub(func: Any) -> list[str]:
    """The stubbed modules a function's code refers to through its module's globals (empty: none)."""
    code = getattr(func, "__code__", None)
    module = sys.modules.get(getattr(func, "__module__", "") or "")
    if code is None or module is None:
        return []
    names: set[str] = set(code.co_names)
    for const in code.co_consts:  # nested functions and comprehensions
        if isinstance(const, types.CodeType):
            names.update(const.co_names)
    found = set()
    for name in names:
        value = module.__dict__.get(name)
        if isinstance(value, StubModule):
            found.add(value.__name__.split(".")[0])
        elif isinstance(value, MissingAttribute):
            found.add(value._legato_missing.split(".")[0])
    return sorted(found)
