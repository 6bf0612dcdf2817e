"""Which OSWorld tasks this machine's local desktop can run and grade faithfully, and why not the rest.

Two pure steps, so that each can be tested on real task configs:

* :func:`task_needs` reads an OSWorld task config and lists what the local desktop would need: apps (from
  ``related_apps``, setup ``launch`` commands), setup step types, getters and metrics, the files it
  downloads (setup ``download`` URLs and ``cloud_file`` gold URLs), host files it uploads, and needs that
  no local desktop meets (live websites, a Google account, installs from the internet inside the desktop);
* :func:`assess` holds those needs against a :class:`Capabilities` (what this machine has: the apps found
  on ``PATH``, the grader's getters and metrics, the services, the file cache) and gives a
  :class:`Verdict`: ``runnable``, ``needs_files`` (runnable once the file cache holds the listed URLs) or
  ``refused`` (with every reason).

:func:`check_tasks` is the load-time refusal the local backend runs on a tasks file: all refused tasks at
once, one line each with the reason, before any desktop boots. ``legato osworld coverage`` prints the
same verdicts per domain.

Example::

    from legato_gym.backends.local.coverage import Capabilities, assess
    verdict = assess(task_config, Capabilities.detect())
    verdict.status, verdict.reasons, verdict.missing_urls
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from legato_gym.backends.local import vscode
from legato_gym.backends.local.apps import catalog
from legato_gym.backends.local.commands import command_words
from legato_gym.backends.local.file_cache import FileCache
from legato_gym.contract import Task
from legato_gym.errors import UnsupportedTaskError

__all__ = [
    "APPS",
    "GETTER_APPS",
    "GETTER_SOLVED_AT_START",
    "Capabilities",
    "TaskNeeds",
    "Verdict",
    "assess",
    "check_tasks",
    "needs_no_download",
    "task_needs",
]

#: Apps the local desktop can carry, each with the executables that provide it (first found wins): from each
#: app's record (:data:`legato_gym.backends.local.apps.catalog.APPS`).
APPS: dict[str, tuple[str, ...]] = {app.name: app.executables for app in catalog.APPS}

#: ``related_apps`` spellings in OSWorld's data, mapped to :data:`APPS` keys (:attr:`.catalog.App.related`).
#: Names no app claims (``os``, ``image``, ``picard``) are descriptive and need no app of their own.
_RELATED: dict[str, str] = {spelling: app.name for app in catalog.APPS for spelling in app.related}
_EXECUTABLE_APP = {exe: app for app, exes in APPS.items() for exe in exes}

#: Setup step types that need what no local desktop has.
_SETUP_LIVE_WEB = {
    "chrome_open_tabs": "opens live websites in Chrome",
    "update_browse_history": "downloads Chrome's empty history from Hugging Face inside desktop-env",
}
_SETUP_GOOGLE = {"googledrive": "uses Google Drive", "login": "logs in to a Google account"}
#: Getters that read the live web or a Google account.
_GETTER_LIVE_WEB = {"info_from_website", "pdf_from_url", "gotoRecreationPage_and_get_html_content", "page_info"}
_GETTER_GOOGLE = {"googledrive_file"}
#: Getters that answer "solved" on this desktop before the agent does anything (measured: their tasks scored 1
#: on ``DONE``), and why. Their tasks are refused, never silently scored. None today: ``data_delete_automacally``
#: was, until Chromium ran without the migration marker it wrote into the key that getter checks
#: (:data:`legato_gym.backends.local.apps.chrome.CHROMIUM_FLAGS`).
GETTER_SOLVED_AT_START: dict[str, str] = {}
#: Getters whose answer depends on an app being installed that the task does not name, by :data:`APPS` key.
#: ``default_video_player`` counts the app most video types open in: VLC until GNOME Videos is there.
GETTER_APPS: dict[str, str] = {"default_video_player": "video player"}
#: desktop-env's own setup step types (``SetupController._<type>_setup``) that it implements.
OSWORLD_SETUP_TYPES = frozenset(
    {
        "download",
        "upload_file",
        "launch",
        "open",
        "execute",
        "command",
        "execute_with_verification",
        "sleep",
        "activate_window",
        "close_window",
        "change_wallpaper",
        "chrome_open_tabs",
        "chrome_close_tabs",
        "googledrive",
        "login",
        "update_browse_history",
    }
)
#: Getters and metrics that OSWorld's 2026 task data names but desktop-env 1.0.2 does not have, and legato does
#: not add (:mod:`legato_gym.desktopenv.supplements` adds ``check_play_and_exit`` and
#: ``chrome_appearance_mode_ui``).
OSWORLD_MISSING = frozenset({"check_structure_sim_with_threshold"})
#: Getters that need a service inside the desktop, by service name.
GETTER_SERVICES: dict[str, str] = {
    "vlc_playing_info": "vlc-http",
    "accessibility_tree": "at-spi",
    "active_url_from_accessTree": "at-spi",
    **{
        name: "chrome-devtools"
        for name in (
            "open_tabs_info",
            "active_tab_info",
            "active_tab_html_parse",
            "active_tab_url_parse",
            "chrome_language",
            "chrome_appearance_mode_ui",
            "chrome_font_size",
            "shortcuts_on_desktop",
            "number_of_search_results",
        )
    },
}
#: Programs whose effect lasts only with a session service (``gsettings`` without dconf keeps nothing).
_SERVICE_PROGRAMS = {"gsettings": "dconf", "dconf": "dconf", "pactl": "pulseaudio", "timedatectl": "systemd"}
#: ``gsettings get|set|... SCHEMA[:PATH] KEY`` in a setup or grader command: the schema it needs.
_GSETTINGS = re.compile(r"\bgsettings\s+(?:--\S+\s+)*(?:get|set|reset|range|writable|list-keys|monitor)\s+([\w.-]+)")
#: A web address in a task's instruction: the agent is sent to the live web (the desktop has no network).
_WEB_URL = re.compile(r"https?://(?!localhost\b|127\.0\.0\.1\b)[^\s\"'<>)]+")
#: A web site the instruction has the agent install from, without a scheme ("install the theme from
#: gnome-look.org"), or an online store.
_WEB_SITE = re.compile(r"\binstall\b[^.]{0,80}?\bfrom\s+((?:[a-z0-9-]+\.)+(?:org|com|net|io|edu|gov))\b(?!@)", re.I)
_WEB_STORE = re.compile(r"\b(?:web|plug-?in|extension|app)\s+store\b", re.I)
#: A grader that asks whether a program is installed (``which spotify``): the agent must install it.
_PROBE = re.compile(r"\b(?:which|command\s+-v|type\s+-p)\s+([A-Za-z0-9_.+-]+)")
#: A grader that lists the installed Debian packages: the agent must install one, from the internet.
_APT_LIST = re.compile(r"\b(?:apt|apt-get)\s+list\b.*--installed|\bdpkg\s+(?:-l|--list|-s|--status)\b")
_INSTALL = re.compile(r"\b(apt|apt-get|pip3?|snap)\s+(-\S+\s+)*install\b")

Status = Literal["runnable", "needs_files", "refused"]


@dataclass(frozen=True)
class TaskNeeds:
    """What one OSWorld task needs from a desktop (see :func:`task_needs`)."""

    apps: frozenset[str] = frozenset()
    executables: frozenset[str] = frozenset()
    setup_types: frozenset[str] = frozenset()
    getters: frozenset[str] = frozenset()
    metrics: frozenset[str] = frozenset()
    urls: tuple[str, ...] = ()
    host_files: tuple[str, ...] = ()
    services: frozenset[str] = frozenset()
    offline_impossible: tuple[str, ...] = ()
    schemas: frozenset[str] = frozenset()
    probed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Verdict:
    """What this machine's local desktop can do with one task.

    Attributes:
        task_id: the task.
        domain: its OSWorld domain, if known.
        status: ``"runnable"``, ``"needs_files"`` (runnable once the file cache holds ``missing_urls``) or
            ``"refused"`` (see ``reasons``).
        reasons: why it is refused, one phrase each.
        missing_urls: the task's URLs that the file cache does not hold.
    """

    task_id: str
    domain: str | None
    status: Status
    reasons: tuple[str, ...] = ()
    missing_urls: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        """The reasons as one line."""
        return "; ".join(self.reasons)


@dataclass(frozen=True)
class Capabilities:
    """What this machine's local desktop offers.

    Attributes:
        grader: ``"local"`` (:mod:`.evaluators`) or ``"osworld"`` (desktop-env's own evaluators).
        setup_types: setup step types the grader's setup runner runs.
        getters: getter types it has (``None``: whatever desktop-env has, bar :data:`OSWORLD_MISSING`).
        metrics: metric names it has (``None``: as ``getters``).
        which: finds an executable (``shutil.which``).
        services: services the desktop runs (``chrome-devtools``, ``vlc-http``, ``at-spi``).
        cache: the file cache, or ``None`` (every URL then counts as missing).
        schemas: the GSettings schemas installed (``None``: not known, not checked). A task that reads or
            writes a setting of a schema this machine lacks cannot be graded faithfully: ``gsettings`` fails,
            prints nothing, and the getter's empty answer scores as the VM's never would.
    """

    grader: str = "local"
    setup_types: frozenset[str] = frozenset()
    getters: frozenset[str] | None = frozenset()
    metrics: frozenset[str] | None = frozenset()
    which: Callable[[str], str | None] = shutil.which
    services: frozenset[str] = frozenset()
    cache: FileCache | None = None
    schemas: frozenset[str] | None = None
    _found: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def detect(
        cls,
        *,
        grader: str = "local",
        cache: FileCache | None = None,
        which: Callable[[str], str | None] = shutil.which,
        services: Iterable[str] = (),
        schemas: Iterable[str] | None = None,
    ) -> Capabilities:
        """This machine's capabilities for a grader (its getters, metrics and setup types), apps on ``PATH``.

        Services found on the host are added to ``services``: ``dconf`` when dconf's service and the session
        bus the sandbox starts are installed; ``chrome-devtools`` when Chromium (``google-chrome`` inside)
        and ``socat`` (OSWorld's tasks forward the DevTools port with it) are, since the local desktop relays
        that port to the grader; ``vlc-http`` when VLC and its Lua HTTP interface are (the baseline ``vlcrc``
        turns it on and the desktop relays its port too); ``at-spi`` when AT-SPI and pyatspi are (the desktop
        runs the accessibility bus and its server reads the tree); ``pulseaudio`` when PulseAudio and
        ``pactl`` are (a null sink, started on demand with the baseline home's volume). ``schemas`` default:
        what ``gsettings list-schemas`` lists here (the desktop binds the host's ``/usr``), or ``None`` without
        a ``gsettings``.
        """
        from legato_gym.backends.local import apps, sandbox

        which = apps.sandbox_which(which)  # legato's own programs inside (`code`: code-server's window)
        found = set(services)
        if (which("dconf") or Path("/usr/libexec/dconf-service").exists()) and which("dbus-daemon"):
            found.add("dconf")
        if apps.chromium_binary(which) and which("socat"):
            found.add("chrome-devtools")
        if apps.vlc_http_installed(which):  # the baseline vlcrc turns it on; the desktop relays its port
            found.add("vlc-http")
        if sandbox.atspi_readable(which):  # the desktop runs AT-SPI's bus; its server reads the tree
            found.add("at-spi")
        if which("pulseaudio") and which("pactl"):  # started on demand, with the baseline's volume
            found.add("pulseaudio")
        services = found
        installed = frozenset(schemas) if schemas is not None else _host_schemas(which)
        if grader == "osworld":
            return cls(
                grader=grader, setup_types=OSWORLD_SETUP_TYPES, getters=None, metrics=None, which=which,
                services=frozenset(services), cache=cache, schemas=installed,
            )  # fmt: skip
        from legato_gym.backends.local import evaluators
        from legato_gym.backends.local.task_setup import SETUP_TYPES

        return cls(
            grader=grader, setup_types=SETUP_TYPES, getters=frozenset(evaluators.GETTERS),
            metrics=frozenset(evaluators.METRICS), which=which, services=frozenset(services),
            cache=cache, schemas=installed,
        )  # fmt: skip

    def find(self, executable: str) -> str | None:
        """Where ``executable`` is (memoised per capabilities value)."""
        if executable not in self._found:
            self._found[executable] = self.which(executable)
        return self._found[executable]


def _host_schemas(which: Callable[[str], str | None]) -> frozenset[str] | None:
    """The GSettings schemas ``gsettings`` lists on this host, or ``None`` when it cannot be asked."""
    program = which("gsettings")
    if program is None or not Path(program).is_file():
        return None
    names: set[str] = set()
    for listing in ("list-schemas", "list-relocatable-schemas"):
        try:
            proc = subprocess.run([program, listing], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode != 0:
            return None
        names.update(proc.stdout.split())
    return frozenset(names)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _program(command: Any) -> str | None:
    """The program a launch command runs (skipping ``VAR=value`` prefixes and ``env``)."""
    for word in command_words(command):
        if "=" in word and not word.startswith(("/", ".")):
            continue
        if word == "env":
            continue
        return Path(word).name
    return None


_SEGMENT = re.compile(r"\|\||&&|[|;\n]|\$\(|`")
_BUILTINS = frozenset(
    {"cd", "echo", "export", "test", "[", "[[", "if", "then", "else", "fi", "for", "do", "done", "while", "true",
     "false", "printf", "read", "set", "exit", "source", ".", "eval", "exec", "sudo", "env", "time", "python",
     "python3"}
)  # fmt: skip


def _shell_programs(command: Any) -> set[str]:
    """The programs a grader's shell command runs (first word of each pipeline segment; builtins skipped)."""
    if isinstance(command, list):
        program = _program(command)
        return {program} - _BUILTINS if program else set()
    programs = set()
    for segment in _SEGMENT.split(str(command)):
        words = [w for w in command_words(segment.strip().lstrip("({").strip()) if "=" not in w]
        program = words[0] if words else None
        if program and re.fullmatch(r"[A-Za-z0-9_.+-]+", program):
            programs.add(program)
    return programs - _BUILTINS


def task_needs(config: Mapping[str, Any]) -> TaskNeeds:
    """What the OSWorld task ``config`` needs from a desktop. Pure: reads nothing but the config."""
    apps: set[str] = set()
    executables: set[str] = set()
    for name in _as_list(config.get("related_apps")):
        app = _RELATED.get(str(name).strip().lower())
        if app is not None:
            apps.add(app)
    evaluator = config.get("evaluator") or {}
    all_steps = _as_list(config.get("config")) + _as_list(evaluator.get("postconfig"))
    steps = [step for step in all_steps if isinstance(step, Mapping)]
    setup_types = {str(step.get("type")) for step in steps}
    urls: list[str] = []
    host_files: list[str] = []
    impossible: list[str] = []
    if config.get("proxy"):
        impossible.append("needs the live web (OSWorld runs it behind a web proxy)")
    instruction = str(config.get("instruction", ""))
    site = _WEB_URL.search(instruction) or _WEB_SITE.search(instruction) or _WEB_STORE.search(instruction)
    if site:
        where = site.group(site.lastindex or 0).rstrip(".,;:")
        impossible.append(f"needs the live web (the instruction sends the agent to {where})")
    impossible += vscode.offline_reasons(config)  # VS Code extensions from the marketplace
    for step in steps:
        kind, params = str(step.get("type")), step.get("parameters") or {}
        if kind == "launch":
            command = params.get("command", "")
            if params.get("shell") and isinstance(command, str):  # a shell line: every program it runs
                launched = _shell_programs(command)
            else:
                launched = {program} if (program := _program(command)) else set()
            for program in launched:
                if program in _EXECUTABLE_APP:
                    apps.add(_EXECUTABLE_APP[program])
                else:
                    executables.add(program)
        elif kind == "download":
            urls += [str(f.get("url")) for f in _as_list(params.get("files")) if isinstance(f, Mapping)]
        elif kind == "upload_file":
            host_files += [str(f.get("local_path")) for f in _as_list(params.get("files")) if isinstance(f, Mapping)]
        elif kind in ("execute", "command"):
            text = " ".join(command_words(params.get("command", "")))
            if _INSTALL.search(text):
                impossible.append("installs software from the internet inside the desktop")
        if kind in _SETUP_LIVE_WEB:
            impossible.append(f"needs the live web (setup step {kind} {_SETUP_LIVE_WEB[kind]})")
        if kind in _SETUP_GOOGLE:
            impossible.append(f"needs a Google account (setup step {kind} {_SETUP_GOOGLE[kind]})")
    getters: set[str] = set()
    services: set[str] = set()
    schemas: set[str] = set()
    probed: set[str] = set()
    commands = [
        (step.get("parameters") or {}).get("command", "")
        for step in steps
        if step.get("type") in ("execute", "command")
    ]
    for command in commands:
        schemas.update(_gsettings_schemas(command))
    for key in ("result", "expected"):
        for spec in _as_list(evaluator.get(key)):
            if not isinstance(spec, Mapping) or spec.get("type") is None:
                continue
            kind = str(spec["type"])
            getters.add(kind)
            if kind in GETTER_APPS:
                apps.add(GETTER_APPS[kind])
            if kind == "cloud_file":
                urls += [str(u) for u in _as_list(spec.get("path"))]
            if kind in _GETTER_LIVE_WEB:
                impossible.append(f"needs the live web (getter {kind})")
            if kind in _GETTER_GOOGLE:
                impossible.append(f"needs a Google account (getter {kind})")
            if kind in GETTER_SERVICES:
                services.add(GETTER_SERVICES[kind])
            if kind in ("vm_command_line", "vm_command_error"):
                executables.update(_shell_programs(spec.get("command", "")))
                schemas.update(_gsettings_schemas(spec.get("command", "")))
                probed.update(_PROBE.findall(_command_text(spec.get("command", ""))))
                commands.append(spec.get("command", ""))
    if any(_APT_LIST.search(_command_text(command)) for command in commands):
        impossible.append("needs the live web (the grader lists the installed Debian packages: the agent installs one)")
    for step in steps:
        if step.get("type") in ("execute", "command"):
            programs = _shell_programs((step.get("parameters") or {}).get("command", ""))
            executables.update(programs & set(_SERVICE_PROGRAMS))
    services.update(_SERVICE_PROGRAMS[p] for p in executables if p in _SERVICE_PROGRAMS)
    metrics = {str(f) for f in _as_list(evaluator.get("func"))}
    return TaskNeeds(
        apps=frozenset(apps), executables=frozenset(executables), setup_types=frozenset(setup_types),
        getters=frozenset(getters), metrics=frozenset(metrics), urls=tuple(dict.fromkeys(urls)),
        host_files=tuple(host_files), services=frozenset(services), offline_impossible=tuple(dict.fromkeys(impossible)),
        schemas=frozenset(schemas), probed=frozenset(probed),
    )  # fmt: skip


def _command_text(command: Any) -> str:
    return " ".join(str(w) for w in command) if isinstance(command, list) else str(command)


def _gsettings_schemas(command: Any) -> set[str]:
    """The GSettings schemas a command reads or writes (``gsettings get org.gnome.x key``: ``org.gnome.x``)."""
    return {match.split(":", 1)[0] for match in _GSETTINGS.findall(_command_text(command))}


def needs_no_download(config: Mapping[str, Any]) -> bool:
    """The task downloads no file and needs neither the live web nor a Google account (nor a host file).

    OSWorld's "download-free" tasks: they run with the apps alone, on machines that reach no file host.
    """
    needs = task_needs(config)
    return not (needs.urls or needs.offline_impossible or needs.host_files)


def _missing_names(names: frozenset[str], have: frozenset[str] | None) -> list[str]:
    if have is None:
        return sorted(names & OSWORLD_MISSING)
    return sorted(names - have)


def assess(config: Mapping[str, Any], caps: Capabilities, *, domain: str | None = None) -> Verdict:
    """Hold one OSWorld task config against this machine's capabilities.

    Args:
        config: the OSWorld task config.
        caps: what this machine offers (:meth:`Capabilities.detect`).
        domain: the task's domain, for the verdict.

    Returns:
        ``refused`` with every reason when an app, setup type, getter, metric, service or host file is
        missing or the task needs the live web or a Google account; else ``needs_files`` when the file
        cache lacks some of the task's URLs; else ``runnable``.
    """
    needs = task_needs(config)
    task_id = str(config.get("id", "?"))
    reasons: list[str] = list(needs.offline_impossible)
    for app in sorted(needs.apps):
        if not any(caps.find(exe) for exe in APPS[app]):
            reasons.append(f"app {app!r} is not installed (none of {', '.join(APPS[app])} on PATH)")
    for exe in sorted(needs.executables):
        if not caps.find(exe):
            reasons.append(f"program {exe!r} (launched by the setup or run by the grader) is not installed")
    grader = f"the {caps.grader} grader"
    # needs that no local desktop meets are said once, above, not again as a missing step or getter
    setup_types = needs.setup_types - caps.setup_types - set(_SETUP_LIVE_WEB) - set(_SETUP_GOOGLE)
    reasons += [f"setup step {kind} is not run by {grader}" for kind in sorted(setup_types)]
    getters = needs.getters - _GETTER_LIVE_WEB - _GETTER_GOOGLE
    reasons += [
        f"getter {name} answers 'solved' on the untouched desktop: {GETTER_SOLVED_AT_START[name]}"
        for name in sorted(needs.getters & set(GETTER_SOLVED_AT_START))
    ]
    reasons += [f"getter {name} is not in {grader}" for name in _missing_names(getters, caps.getters)]
    metrics = needs.metrics - {"infeasible"}
    reasons += [f"metric {name} is not in {grader}" for name in _missing_names(metrics, caps.metrics)]
    reasons += [f"service {name} is not run by the local desktop" for name in sorted(needs.services - caps.services)]
    for program in sorted(needs.probed):
        if not caps.find(program):
            reasons.append(
                f"needs the live web (the grader looks for program {program!r}, which this machine lacks: the agent "
                "would install it from the internet)"
            )
    if caps.schemas is not None:
        reasons += [
            f"GSettings schema {name} is not installed (not in `gsettings list-schemas`; OSWorld's VM has it)"
            for name in sorted(needs.schemas - caps.schemas)
        ]
    for path in needs.host_files:
        if not Path(path).expanduser().is_file():
            reasons.append(f"host file {path} (upload_file) does not exist")
    if reasons:
        return Verdict(task_id, domain, "refused", reasons=tuple(reasons))
    missing_urls = tuple(u for u in needs.urls if caps.cache is None or u not in caps.cache)
    if missing_urls:
        return Verdict(task_id, domain, "needs_files", missing_urls=missing_urls)
    return Verdict(task_id, domain, "runnable")


def check_tasks(tasks: Sequence[Task], caps: Capabilities) -> list[Verdict]:
    """Refuse, all at once, the tasks this desktop cannot run or grade faithfully.

    Tasks that only lack cached files pass: their setup downloads them into the file cache at reset.

    Returns:
        The verdict of every task, in order.

    Raises:
        UnsupportedTaskError: one line per refused task, naming it and the reason.
    """
    verdicts = [assess(task.config, caps, domain=task.domain) for task in tasks]
    refused = [v for v in verdicts if v.status == "refused"]
    if refused:
        lines = "\n".join(f"  {v.task_id}: {v.reason}" for v in refused)
        raise UnsupportedTaskError(
            f"{len(refused)} of {len(tasks)} tasks cannot run on this machine's local desktop "
            f"({caps.grader} grader); drop them from the tasks file, install what they need, or run them on the "
            f"osworld backend (`legato osworld coverage --tasks FILE` shows the full report):\n{lines}"
        )
    return verdicts
