"""The AT-SPI helper: the desktop's accessibility tree in OSWorld's XML, and gnome-terminal's text.

It runs as its own process under the system's interpreter (``python3 -I SERVER_FOLDER --atspi tree|terminal``,
:data:`ATSPI_PYTHON`: Debian's ``python3-pyatspi`` and ``gi`` are built for it, not for the desktop's
venv), so the server itself imports neither; it prints one JSON object (:func:`atspi_main`). The tree
has OSWorld's format (:func:`atspi_tree`); the differences are listed in the package's docstring.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "ATSPI_NS",
    "ATSPI_PYTHON",
    "ATSPI_TIMEOUT",
    "ATSPI_UNAVAILABLE",
    "XmlNode",
    "atspi_main",
    "atspi_terminal",
    "atspi_tree",
]

logger = logging.getLogger("legato.desktop_server")

#: The interpreter that reads AT-SPI: the one Debian's ``python3-pyatspi`` and ``python3-gi`` are built for.
ATSPI_PYTHON = "/usr/bin/python3"
ATSPI_TIMEOUT = 120.0
#: The helper's exit status when it cannot import pyatspi (the desktop has no AT-SPI to read).
ATSPI_UNAVAILABLE = 3
#: OSWorld's namespaces for the Ubuntu accessibility tree (``_accessibility_ns_map["ubuntu"]``).
ATSPI_NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}
#: OSWorld's bounds: children below this depth are not read, nor a node's children past this many.
ATSPI_MAX_DEPTH = 50
ATSPI_MAX_WIDTH = 1024
#: Calc's sheet: a table of every cell; only those on screen are read, looking this far for the first one.
_CALC_SEARCH = 500
_CALC_MAX_ROWS = 1_048_576
_CALC_COLUMNS = 16384  # LibreOffice 7.4 and later (1024 before)
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_XML_NAME = re.compile(r"[A-Za-z_][\w.\-]*\Z")
_TEXT_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"}
_ATTR_ESCAPES = {**_TEXT_ESCAPES, '"': "&quot;", "\n": "&#10;", "\t": "&#9;"}
#: Applications renamed in the tree to the VM's: Chromium stands in for Google Chrome.
_APP_NAMES = {"Chromium": "Google Chrome"}


def _xml_text(value: str, escapes: dict[str, str]) -> str:
    value = _NOT_XML.sub("", value)
    return "".join(escapes.get(ch, ch) for ch in value) if any(ch in escapes for ch in value) else value


class XmlNode:
    """One element of the accessibility tree: its tag (the role), attributes in order, text and children."""

    def __init__(self, tag: str, attributes: list[tuple[str, str]], text: str = "") -> None:
        self.tag = tag
        self.attributes = attributes
        self.text = text
        self.children: list[XmlNode] = []

    def get(self, name: str) -> str | None:
        """The value of attribute ``name`` (``prefix:local`` for a namespaced one)."""
        return next((value for key, value in self.attributes if key == name), None)

    def iter(self) -> Iterator[XmlNode]:
        """This node and every node below it, in document order."""
        yield self
        for child in self.children:
            yield from child.iter()

    def serialize(self, out: list[str], root: bool = False) -> None:
        """Append this element's XML to ``out`` (the root declares OSWorld's namespaces, as lxml's does)."""
        out.append("<" + self.tag)
        if root:
            out.extend(f' xmlns:{prefix}="{uri}"' for prefix, uri in ATSPI_NS.items())
        out.extend(f' {key}="{_xml_text(value, _ATTR_ESCAPES)}"' for key, value in self.attributes)
        if not self.text and not self.children:
            out.append("/>")
            return
        out.append(">" + _xml_text(self.text, _TEXT_ESCAPES))
        for child in self.children:
            child.serialize(out)
        out.append(f"</{self.tag}>")

    def tostring(self) -> str:
        out: list[str] = []
        self.serialize(out, root=True)
        return "".join(out)


def _optional(read: Callable[[], Any]) -> Any:
    """``read()``, or ``None`` when the node does not implement that AT-SPI interface."""
    try:
        return read()
    except NotImplementedError:
        return None


def _atspi_node(pyatspi: Any, node: Any, depth: int, flag: str | None) -> XmlNode:
    """One accessible object and what is below it, with OSWorld's names for its states and interfaces.

    Attributes, in OSWorld's order: ``name``; ``st:STATE="true"`` per state; ``attr:NAME`` per object
    attribute; ``cp:screencoord`` and ``cp:size`` when visible and showing; ``image`` and ``selection``
    (``"true"``) for those interfaces; ``val:value|min|max|step``; ``act:ACTION_desc`` and ``act:ACTION_kb``.
    The text (``\ufffc``/``\ufffd`` removed) is the element's text; the role, spaces as ``-``, its tag.
    """
    attributes: list[tuple[str, str]] = [("name", str(node.name or ""))]
    states = set()
    for state in node.getState().get_states():
        name = str(pyatspi.StateType._enum_lookup[state]).split("_", 1)[1].lower()
        if name:
            states.add(name)
            attributes.append((f"st:{name}", "true"))
    for key, value in (node.get_attributes() or {}).items():
        if key and _XML_NAME.match(key):
            attributes.append((f"attr:{key}", str(value)))
    if "visible" in states and "showing" in states:
        component = _optional(node.queryComponent)
        if component is not None:
            box = tuple(component.getExtents(pyatspi.XY_SCREEN))
            attributes += [("cp:screencoord", str(box[0:2])), ("cp:size", str(box[2:]))]
    text = ""
    reader = _optional(node.queryText)
    if reader is not None:
        text = str(reader.getText(0, reader.characterCount)).replace("\ufffc", "").replace("\ufffd", "")
    if _optional(node.queryImage) is not None:
        attributes.append(("image", "true"))
    if _optional(node.querySelection) is not None:
        attributes.append(("selection", "true"))
    value = _optional(node.queryValue)
    if value is not None:
        for key, field in (("value", "currentValue"), ("min", "minimumValue"), ("max", "maximumValue")):
            with contextlib.suppress(Exception):
                attributes.append((f"val:{key}", str(getattr(value, field))))
        with contextlib.suppress(Exception):
            attributes.append(("val:step", str(value.minimumIncrement)))
    action = _optional(node.queryAction)
    if action is not None:
        for i in range(action.nActions):
            name = str(action.getName(i)).replace(" ", "-")
            if _XML_NAME.match(name + "_kb"):
                attributes.append((f"act:{name}_desc", str(action.getDescription(i))))
                attributes.append((f"act:{name}_kb", str(action.getKeyBinding(i))))
    role = str(node.getRoleName()).strip()
    if not flag and role == "document spreadsheet":
        flag = "calc"
    elif not flag and role == "application" and node.name == "Thunderbird":
        flag = "thunderbird"
    tag = (role or "unknown").replace(" ", "-")
    element = XmlNode(tag if _XML_NAME.match(tag) else "unknown", attributes, text)
    if depth >= ATSPI_MAX_DEPTH:
        return element
    children = _calc_cells(pyatspi, node) if flag == "calc" and tag == "table" else _children(node)
    try:
        for child in children:
            with contextlib.suppress(Exception):  # a child gone or unreadable: leave it out
                element.children.append(_atspi_node(pyatspi, child, depth + 1, flag))
    except Exception:  # the node's children cannot be listed any further: keep those read
        logger.debug("stopped reading the children of a %s", tag, exc_info=True)
    return element


def _children(node: Any) -> Iterator[Any]:
    for i in range(min(int(node.childCount), ATSPI_MAX_WIDTH)):
        child = node.getChildAtIndex(i)
        if child is not None:
            yield child


def _calc_cells(pyatspi: Any, table: Any) -> Iterator[Any]:
    """The cells of a Calc sheet that are on screen, row by row, as OSWorld reads them.

    The sheet exposes every cell (a million rows), so the walk looks for the first showing cell within the
    first :data:`_CALC_SEARCH` rows and columns, then reads each row from that column until a cell is not
    showing, and stops at the first row whose first column is not showing.
    """
    columns = _optional(lambda: int(table.queryTable().nColumns)) or _CALC_COLUMNS
    first: int | None = None
    for row in range(_CALC_MAX_ROWS):
        found = False
        for column in range(first or 0, columns):
            cell = table.getChildAtIndex(row * columns + column)
            if cell is not None and cell.getState().contains(pyatspi.STATE_SHOWING):
                found = True
                first = column if first is None else first
                yield cell
            elif first is not None or column >= _CALC_SEARCH:
                break
        if (first is not None and not found) or (first is None and row >= _CALC_SEARCH):
            return


def _applications(pyatspi: Any) -> Iterator[Any]:
    desktop = pyatspi.Registry.getDesktop(0)
    for i in range(int(desktop.childCount)):
        app = desktop.getChildAtIndex(i)
        if app is not None:
            yield app


def _application_node(pyatspi: Any, app: Any) -> XmlNode | None:
    try:
        element = _atspi_node(pyatspi, app, 1, None)
    except Exception:  # the application quit while it was read
        logger.debug("skipped an application that could not be read", exc_info=True)
        return None
    if element.tag == "application" and element.get("name") in _APP_NAMES:
        element.attributes[0] = ("name", _APP_NAMES[str(element.get("name"))])
    return element


def atspi_tree(pyatspi: Any) -> str:
    """The desktop's accessibility tree as OSWorld's server gives it on Linux: a ``desktop-frame`` root with
    one element per application (see :func:`_atspi_node` for the elements)."""
    root = XmlNode("desktop-frame", [])
    for app in _applications(pyatspi):
        element = _application_node(pyatspi, app)
        if element is not None:
            root.children.append(element)
    return root.tostring()


def atspi_terminal(pyatspi: Any) -> str | None:
    """The text of gnome-terminal's focused terminal in its active window, right-stripped, as OSWorld's
    ``/terminal`` (``//application[@name="gnome-terminal-server"]/frame[@st:active="true"]
    //terminal[@st:focused="true"]``, exactly one); ``None`` when there is none, or more than one."""
    found: list[XmlNode] = []
    for app in _applications(pyatspi):
        if app.name != "gnome-terminal-server" or app.getRoleName() != "application":
            continue
        element = _application_node(pyatspi, app)
        for frame in element.children if element is not None else []:
            if frame.tag == "frame" and frame.get("st:active") == "true":
                found += [n for n in frame.iter() if n.tag == "terminal" and n.get("st:focused") == "true"]
    return found[0].text.rstrip() if len(found) == 1 else None


def atspi_main(what: str) -> int:
    """The AT-SPI helper (``--atspi tree|terminal``): prints its answer as one JSON object."""
    try:
        pyatspi = importlib.import_module("pyatspi")
    except Exception as exc:  # ImportError, or gi failing to load its typelibs
        sys.stderr.write(f"cannot import pyatspi under {sys.executable}: {exc} (apt-get install python3-pyatspi)\n")
        return ATSPI_UNAVAILABLE
    if what == "tree":
        answer: dict[str, Any] = {"AT": atspi_tree(pyatspi)}
    elif what == "terminal":
        answer = {"output": atspi_terminal(pyatspi)}
    else:
        sys.stderr.write(f"--atspi {what!r}: give tree or terminal\n")
        return 2
    sys.stdout.write(json.dumps(answer))
    return 0
