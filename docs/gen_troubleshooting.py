"""Render docs/troubleshooting.md: every error message legato raises, grouped by exception type.

    python docs/gen_troubleshooting.py

Reads the ``raise SomeError(...)`` statements of the packages (``{...}`` marks a value filled in at run
time) and puts each under its exception type, with what the type means and the usual fix.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "troubleshooting.md"
PACKAGES = ("legato", "legato_gym", "legato_rl")

#: What each exception type means and what usually fixes it, in the order of the page.
MEANING: dict[str, str] = {
    "ConfigError": "Bad input: an argument, option, task or file that cannot work. The message names the "
    "value and the fix; nothing was started. Also a `ValueError`.",
    "TaskFileError": "A tasks file or task config that cannot be read. Check the file's JSON and its "
    "`task_id` / `domain` / `config` keys (docs/concepts.md).",
    "UnknownTaskError": "A task id or domain that does not exist; the message suggests the nearest ids.",
    "UnsupportedTaskError": "A task whose setup or evaluator this backend cannot run. Use a backend that "
    "supports it (osworld runs every OSWorld task), or drop the task.",
    "BackendUnavailableError": "A backend that is not built here or whose extra is missing. Install the "
    "extra the message names (`pip install 'legatolabs[local]'`, ...).",
    "MissingDependencyError": "An optional dependency is missing; install the extra the message names.",
    "ActionError": "An action string outside the action space (pyautogui code, `WAIT`, `DONE`, `FAIL`). It "
    "was parsed and refused, never run.",
    "StateError": "A call in the wrong lifecycle state (a step before reset, a closed env or client). The "
    "message says which call was expected.",
    "ConformanceError": "A backend breaks the desktop contract; `legato_gym.check_desktop` lists every failure "
    "(docs/backends.md).",
    "AgentFault": "The agent's own actions destroyed or exhausted its desktop (a fork bomb or a memory hog at "
    "the desktop's bounds, its server killed from inside, an answer over its cap). Not an error of legato: "
    "the episode ends as the agent's failure, graded 0, with `info['agent_fault']`; `legato rl collect` "
    "records the try `ok` with an error of kind `agent` and never retries it (docs/reliability.md).",
    "DesktopError": "The desktop itself failed (infrastructure, never the agent). `legato rl collect` records "
    "the try as `retried` and runs the attempt again on another desktop (`--env-retries`).",
    "SetupError": "The task's setup failed inside the desktop (a download, a file, an app that did not "
    "start). Run the task alone on one desktop to see the setup step that failed.",
    "DesktopCrashed": "The desktop or its worker process died. The worker is replaced; if every try crashes, "
    "check the backend's logs (VM memory, Docker, KVM).",
    "ReplyTooLarge": "A desktop answered more bytes than the host reads (`legato_gym.bounds.ReadCaps`: 16 MiB "
    "an answer, 256 MiB a file for grading, 32 MiB a screenshot); the host stopped at the cap. After the agent "
    "acted it is the agent's failure (`AgentFault`); before, a desktop failure (docs/backends.md).",
    "DeadlineExceeded": "A phase overran its deadline (a hang). Raise the matching `Timeouts` field if the "
    "desktop is only slow.",
    "PolicyError": "A call to the policy server failed.",
    "PolicyTimeout": "No complete answer within `--step-timeout` (after `--retries`). Raise the timeout, or "
    "lower `--max-inflight` if the server is overloaded.",
    "PolicyUnreachable": "No connection to the server: check that it is up and that the URL ends with /v1.",
    "PolicyHTTPError": "The server answered with an HTTP error. 401/403: set `$LEGATO_POLICY_KEY`; 404: the "
    "model name or the /v1 base URL is wrong (`legato rl probe` lists the served models); 429: lower "
    "`--max-inflight`; 5xx: the server failed.",
    "PolicyResponseError": "The answer is not an OpenAI chat completion (wrong URL, a proxy's error page).",
    "PolicyUnavailable": "The policy server cannot be used at all, so `legato rl collect` stopped the batch "
    "(exit 2): before the first attempt when no replica serves the model at the URL, or mid-batch when calls "
    "kept failing the same way. Fix what the message names and run the same command again: the attempts "
    "the outage cut short run again (docs/reliability.md).",
    "RunInProgressError": "The run is still being written: a `legato rl collect` holds its writer lock. Wait "
    "for it to finish, or stop it, before exporting or resuming.",
    "ProtocolError": "Internal to the vector env: a malformed frame between the parent and a desktop worker. "
    "It never reaches you as such: the parent turns it into `DesktopCrashed` and replaces the worker.",
    "RecordError": "A run directory that cannot be read or resumed as `legato.rollout/v0` (a damaged file, "
    "or resuming with arguments that change the batch). Use a new `--out` or the original arguments.",
    "StorageError": "A file of a run, an export or a profile cannot be written: the disk is full, the folder "
    "is read-only, or a part of `--out` is a file. The message names the path, the cause (`[ENOSPC]`, "
    "`[EROFS]`, ...) and the fix; the command exits 2 with that one line. Nothing half-written is kept: a "
    "record cut short is taken back, and an export leaves no temporary file. Free some space or fix the "
    "folder, then run the same command again: a collect resumes where it stopped.",
}


def _message(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "{…}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _message(node.left), _message(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def collect() -> dict[str, list[tuple[str, str]]]:
    """``{exception name: [(message, module path), ...]}`` from every ``raise Name(message, ...)``."""
    found: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                    continue
                func = node.exc.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if name not in MEANING:
                    continue
                args = node.exc.args
                text = _message(args[1] if name == "AgentFault" and len(args) > 1 else args[0])  # (cause, message)
                if text:
                    found[name].append((" ".join(text.split()), str(path.relative_to(ROOT))))
    return found


def render() -> str:
    found = collect()
    lines = [
        "# Troubleshooting",
        "",
        "Every error legato raises is a `legato_gym.LegatoError`; the tree is drawn in `legato_gym/errors.py` "
        "and `legato_rl/errors.py`. Below, each type with what it means and the usual fix, then every message "
        "of that type as the code writes it (`{…}` is a value filled in at run time: the offending value, a "
        "path, a URL). Generated by `python docs/gen_troubleshooting.py` from the source.",
        "",
        "Two failures are not errors: a desktop failure during `legato rl collect` becomes a `retried` record "
        "and the attempt runs again, and a policy failure becomes an `error` record (kind `policy`); neither "
        "stops the batch (only a policy server that cannot be used at all does: `PolicyUnavailable`). "
        "Read them with `legato rl profile RUN` or in `rollouts.jsonl` (`error.type`, "
        "`error.message`).",
        "",
    ]
    for name, meaning in MEANING.items():
        messages = sorted(set(found.get(name, [])))
        lines += [f"## {name}", "", meaning, ""]
        if not messages:
            lines += ["Its messages are built at run time (from the server's answer, or by a subclass).", ""]
            continue
        lines += [f"- `{text.replace('`', chr(39))}` ({where})" for text, where in messages]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    PAGE.write_text(render())
    print(f"wrote {PAGE}")
