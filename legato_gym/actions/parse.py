"""The action parser: walks an action's syntax tree against the whitelist, never running it."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import Any

from legato_gym.actions.commands import Command, ParsedAction
from legato_gym.actions.signatures import FUNCTIONS, SLEEP, Builder
from legato_gym.contract import SPECIAL_ACTIONS
from legato_gym.errors import ActionError

__all__ = ["MAX_ACTION_CHARS", "parse_action"]

#: Longest action source accepted, in characters.
MAX_ACTION_CHARS = 100_000

_ALLOWED_IMPORTS = frozenset({"pyautogui", "time"})


def _snippet(source: str, node: ast.AST) -> str:
    text = ast.get_source_segment(source, node) or ast.dump(node)
    return text if len(text) <= 80 else text[:77] + "..."


def _literal(source: str, node: ast.expr, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ActionError(
            f"{where}: argument {_snippet(source, node)!r} is not a literal; pass numbers and strings directly"
        ) from exc


def _parse_call(source: str, call: ast.Call, where: str) -> list[Command]:
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        raise ActionError(
            f"{where}: {_snippet(source, call)!r} is not allowed; call pyautogui.<function>(...) or time.sleep(...)"
        )
    module, name = func.value.id, func.attr
    signature: Callable[..., None]
    build: Builder
    if module == "time" and name == "sleep":
        signature, build = SLEEP
    elif module == "pyautogui" and name in FUNCTIONS:
        signature, build = FUNCTIONS[name]
    elif module == "pyautogui":
        raise ActionError(
            f"{where}: pyautogui.{name} is not in the action space; use one of {', '.join(sorted(FUNCTIONS))}"
        )
    else:
        raise ActionError(
            f"{where}: {module}.{name}(...) is not allowed; only pyautogui.<function>(...) and time.sleep(...)"
        )
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(kw.arg is None for kw in call.keywords):
        raise ActionError(f"{where}: *args and **kwargs are not allowed in {module}.{name}(...)")
    args = [_literal(source, arg, where) for arg in call.args]
    kwargs = {kw.arg: _literal(source, kw.value, where) for kw in call.keywords if kw.arg is not None}
    try:
        bound = inspect.signature(signature).bind(*args, **kwargs)
    except TypeError as exc:
        raise ActionError(f"{where}: bad arguments for {module}.{name}: {exc}") from exc
    bound.apply_defaults()
    values = dict(bound.arguments)
    if name == "hotkey" and module == "pyautogui" and not values.get("keys"):
        raise ActionError(f"{where}: pyautogui.hotkey() needs at least one key, e.g. hotkey('ctrl', 'c')")
    return build(values, where)


def _is_failsafe_assignment(node: ast.stmt) -> bool:
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return False
    target = node.targets[0]
    return (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "pyautogui"
        and target.attr == "FAILSAFE"
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, bool)
    )


def parse_action(action: str) -> ParsedAction:
    """Parse one action string.

    Args:
        action: ``WAIT``, ``DONE``, ``FAIL``, or pyautogui source (see the module docstring).

    Returns:
        The parsed action; ``commands`` lists what the code does, in order.

    Raises:
        ActionError: the action is not a string, is not valid Python, or uses anything outside the whitelist.
            The message names the statement (``line N``) and what is allowed instead.
    """
    if not isinstance(action, str):
        raise ActionError(f"an action must be a str (pyautogui code, WAIT, DONE or FAIL), not {type(action).__name__}")
    stripped = action.strip()
    if stripped in SPECIAL_ACTIONS:
        return ParsedAction(action, stripped, ())
    if not stripped:
        raise ActionError("empty action; send pyautogui code, or WAIT, DONE or FAIL")
    if len(action) > MAX_ACTION_CHARS:
        raise ActionError(f"action of {len(action)} characters is longer than the limit of {MAX_ACTION_CHARS}")
    try:
        tree = ast.parse(stripped, mode="exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        line = f"line {exc.lineno}: " if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise ActionError(
            f"{line}action is not valid Python ({detail}): {stripped[:80]!r}; send pyautogui code, or WAIT, DONE "
            "or FAIL"
        ) from exc
    commands: list[Command] = []
    for node in tree.body:
        where = f"line {node.lineno}"
        if isinstance(node, ast.Import):
            bad = [alias.name for alias in node.names if alias.name not in _ALLOWED_IMPORTS or alias.asname]
            if bad:
                raise ActionError(f"{where}: import of {', '.join(bad)} is not allowed; only 'import pyautogui, time'")
        elif _is_failsafe_assignment(node) or isinstance(node, ast.Pass):
            continue
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            commands.extend(_parse_call(stripped, node.value, where))
        else:
            raise ActionError(
                f"{where}: {_snippet(stripped, node)!r} is not allowed; an action is a sequence of "
                "pyautogui.<function>(...) and time.sleep(...) calls"
            )
    return ParsedAction(action, None, tuple(commands))
