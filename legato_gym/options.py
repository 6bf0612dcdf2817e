"""Backend options, typed: one frozen dataclass per backend, read from a plain mapping in one way.

Each backend's options are a frozen dataclass deriving from :class:`BackendOptions`
(:class:`~legato_gym.backends.fake.FakeOptions`, :class:`~legato_gym.backends.local.LocalOptions`,
:class:`~legato_gym.backends.osworld.OSWorldOptions`), given as ``DesktopConfig.options`` (``None``: the
backend's defaults)::

    from legato_gym import DesktopConfig
    from legato_gym.backends.fake import FakeOptions, Faults

    config = DesktopConfig(options=FakeOptions(faults=Faults(crash=0.01)))

A plain mapping (a YAML or JSON config, ``gymnasium.make(..., config=...)``) is still accepted there; it is
read once into the backend's class where the backend is resolved (:meth:`legato_gym.backends.Backend.configure`,
or a desktop class built directly) by :meth:`BackendOptions.from_mapping`, which refuses an unknown key with
the closest known one. The class's field types drive the reading: a nested dataclass is read from a mapping
(or, when it defines ``from_scalar``, from a plain value), ``tuple`` and ``frozenset`` fields from lists,
numbers stay numbers. Ranges are each class's ``__post_init__`` checks (:func:`invalid`), so options built
in code are checked exactly as those read from a file are.

Options cross to worker processes as JSON with their kind (:func:`options_to_json`,
:func:`options_from_json`). This module imports nothing beyond the standard library and
:mod:`legato_gym.errors`: workers import it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import os
import types
import typing
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar, NoReturn, TypeVar, Union

from legato_gym.errors import ConfigError
from legato_gym.suggest import suggest

__all__ = ["BackendOptions", "invalid", "options_from_json", "options_to_json", "rename_field", "typed_options"]

T = TypeVar("T")
OptionsT = TypeVar("OptionsT", bound="BackendOptions")


class _FieldError(ConfigError):
    """A bad field value found by a ``__post_init__``; :func:`read_options` says where it was read from."""

    def __init__(self, owner: object, name: str, text: str) -> None:
        self.field = name
        self.detail = f"{name}={_show(getattr(owner, name, None))}: {text}"
        super().__init__(f"{type(owner).__name__}.{self.detail}")


def invalid(owner: object, name: str, text: str) -> NoReturn:
    """Refuse ``owner.name`` (from a ``__post_init__``) with ``text`` saying what it must be.

    The message names the field and its value: ``Faults.crash=2: must be a probability between 0 and 1``
    for options built in code, ``options.faults.crash=2: ...`` for options read from a mapping.
    """
    raise _FieldError(owner, name, text)


def seconds(owner: object, *names: str, positive: bool = False) -> None:
    """Check that each field in ``names`` is a finite number of seconds, ``>= 0`` (``> 0`` if ``positive``)."""
    for name in names:
        value = getattr(owner, name)
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and not math.isinf(value)
        if not ok or not (value > 0 if positive else value >= 0):
            invalid(owner, name, f"must be a finite number of seconds {'>' if positive else '>='} 0")


class BackendOptions:
    """Base of each backend's frozen options dataclass.

    Attributes:
        backend: the name of the backend whose options these are (for messages).
    """

    backend: ClassVar[str] = ""

    @classmethod
    def from_mapping(cls: type[OptionsT], options: Mapping[str, Any], where: str = "options") -> OptionsT:
        """Read the options from a plain mapping (a YAML or JSON config).

        Raises:
            ConfigError: an unknown key (with the closest known one) or a bad value; the message names the
                key path (``options.faults.crash``) and what it must be.
        """
        return read_options(cls, options, where)

    def to_json(self) -> dict[str, Any]:
        """The options as JSON values; :meth:`from_mapping` reads them back to equal options."""
        data = _to_json(self)
        assert isinstance(data, dict)
        return data


def read_options(cls: type[T], data: object, where: str) -> T:
    """A ``cls`` (a dataclass) read from the mapping ``data``; see the module docstring."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}={data!r:.80} must be an object such as {{{_example(cls)}}}")
    names = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    renamed: Mapping[str, str] = getattr(cls, "renamed_fields", {})
    if any(key in renamed for key in data):
        data = _renamed(data, renamed, where)
    for key in data:
        if key not in names:
            raise ConfigError(
                f"{where}: unknown key {key!r}{suggest(str(key), sorted(names))} (known: {', '.join(sorted(names))})"
            )
    hints = _hints(cls)
    values = {name: _read(data[name], hints[name], f"{where}.{name}") for name in data}
    return _build(cls, values, where)


def _renamed(data: Mapping[str, Any], renamed: Mapping[str, str], where: str) -> dict[str, Any]:
    """``data`` with old field names replaced by their new ones (one release), each with a DeprecationWarning."""
    out = dict(data)
    for old, new in renamed.items():
        if old in out:
            warnings.warn(f"{where}.{old} is now {where}.{new} (docs/api-changes.md)", DeprecationWarning, stacklevel=4)
            if new in out and out[new] != out[old]:
                raise ConfigError(f"{where}: give {new!r} once, not also as its old name {old!r}")
            out[new] = out.pop(old)
    return out


def rename_field(cls: type[T], old: str, new: str) -> type[T]:
    """Keep ``cls``'s field ``new`` also reachable by its old name ``old`` for one release.

    ``cls(old=...)`` and ``instance.old`` still work, each with a ``DeprecationWarning`` naming the new name.
    (Not an ``InitVar``: :func:`dataclasses.replace` would pass the old name back in.)
    """
    init = cls.__init__
    where = cls.__name__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if old in kwargs:
            value = kwargs.pop(old)
            warnings.warn(
                f"{where}({old}=...) is now {where}({new}=...) (docs/api-changes.md)", DeprecationWarning, stacklevel=2
            )
            if kwargs.get(new) is not None and kwargs[new] != value:
                raise ConfigError(f"{where}({old}={value!r}, {new}={kwargs[new]!r}): give {new} only")
            kwargs[new] = value
        init(self, *args, **kwargs)

    def read_old(self: Any) -> Any:
        warnings.warn(f"{where}.{old} is now {where}.{new} (docs/api-changes.md)", DeprecationWarning, stacklevel=2)
        return getattr(self, new)

    cls.__init__ = __init__  # type: ignore[method-assign]
    setattr(cls, old, property(read_old, doc=f"Deprecated: :attr:`{new}`, under its old name (one release)."))
    return cls


def typed_options(options: object, cls: type[OptionsT], backend: str) -> OptionsT:
    """``DesktopConfig.options`` as the ``cls`` of the backend ``backend``: ``None`` gives the defaults, a
    mapping is read by :meth:`BackendOptions.from_mapping`, a ``cls`` is itself.

    Raises:
        ConfigError: another backend's options (the message names both and the fix), or a bad mapping.
    """
    if options is None:
        return cls()
    if isinstance(options, cls):
        return options
    if isinstance(options, Mapping):
        return cls.from_mapping(options)
    return wrong_options(options, cls, backend)


def wrong_options(options: object, wanted: type[Any] | None, backend: str) -> NoReturn:
    """Refuse options that are not those of ``backend`` (whose class is ``wanted``; ``None``: it has none)."""
    kind = type(options)
    owner = getattr(kind, "backend", "")
    theirs = f" (the {owner!r} backend's options)" if owner else ""
    if wanted is None:
        takes, fix = "no typed options", "give a mapping of JSON values, or None"
    else:
        home = wanted.__module__.removesuffix(".options")  # the package that exports it
        takes = wanted.__name__
        fix = f"give {takes}(...) from {home}, a mapping of its fields, or None for its defaults"
    raise ConfigError(
        f"DesktopConfig.options is a {kind.__name__}{theirs}, but backend {backend!r} takes {takes}; {fix}"
    )


def options_to_json(options: object) -> dict[str, Any] | None:
    """``DesktopConfig.options`` as JSON for a worker process: typed options with their kind.

    Raises:
        ConfigError: a mapping holding values that are not JSON (str, numbers, bools, lists, dicts).
    """
    if options is None:
        return None
    if isinstance(options, BackendOptions):
        kind = f"{type(options).__module__}:{type(options).__qualname__}"
        return {"kind": kind, "fields": options.to_json()}
    if isinstance(options, Mapping):
        return {"kind": "mapping", "fields": dict(options)}
    raise ConfigError(
        f"DesktopConfig.options={options!r:.80} cannot be sent to a worker process: give the backend's options "
        "class (e.g. FakeOptions(...)), a mapping of JSON values, or None"
    )


def options_from_json(data: Mapping[str, Any] | None) -> Any:
    """The inverse of :func:`options_to_json`, in the worker: the same typed options, rebuilt."""
    if data is None:
        return None
    kind, fields = str(data["kind"]), data["fields"]
    if kind == "mapping":
        return dict(fields)
    module, _, name = kind.partition(":")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, BackendOptions)):
        raise ConfigError(f"options of kind {kind!r} are not a backend's options class (a BackendOptions)")
    return cls.from_mapping(fields)


# ---------------------------------------------------------------------------------------------- reading


def _build(cls: type[T], values: dict[str, Any], where: str) -> T:
    try:
        return cls(**values)
    except _FieldError as exc:
        raise ConfigError(f"{where}.{exc.detail}") from None


def _read(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked and converted to the type ``hint``; ``where`` names it in messages."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _read(value, rest[0], where)
        raise ConfigError(f"{where}: cannot read a field of type {hint}")  # no backend declares one
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}={value!r}: choose {' or '.join(map(repr, args))}")
        return value
    if origin in (tuple, frozenset):
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple, set, frozenset)):
            raise ConfigError(f"{where}={value!r:.80}: must be a list such as {['...']}")
        item = args[0] if args else Any
        items = [_read(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else frozenset(items)
    if origin in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}={value!r:.80}: must be an object (a mapping)")
        item = args[1] if len(args) == 2 else Any
        return {str(k): _read(v, item, f"{where}.{k}") for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        scalar = getattr(hint, "from_scalar", None)
        if not isinstance(value, Mapping) and callable(scalar):
            try:
                return scalar(value)
            except _FieldError as exc:
                raise ConfigError(f"{where}.{exc.detail}") from None
        return read_options(hint, value, where)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}={value!r:.80}: must be a number")
        return float(value)
    if hint is str and isinstance(value, os.PathLike):  # a folder given as a Path
        return os.fspath(value)
    if hint in (int, bool, str):
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            raise ConfigError(f"{where}={value!r:.80}: must be {'an' if hint is int else 'a'} {hint.__name__}")
        return value
    return value


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, frozenset):
        return sorted(_to_json(v) for v in value)
    if isinstance(value, (tuple, list)):
        return [_to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _to_json(v) for k, v in value.items()}
    return value


def _show(value: Any) -> str:
    if isinstance(value, frozenset):
        return repr(sorted(value))
    if isinstance(value, tuple):
        return repr(list(value))
    return repr(value)


def _example(cls: type[Any]) -> str:
    first = next((f for f in dataclasses.fields(cls) if f.init), None)
    return f"'{first.name}': ..." if first is not None else ""
