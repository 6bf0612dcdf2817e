"""The server's command line, and the two helper processes the server starts with it.

``--listen ADDRESS --fb FILE``: serve (:func:`.httpd.serve`). ``--fork-server FD``: the action fork
server (:func:`.actions.fork_server`, started by :class:`.actions.ActionRunner`, never by hand).
``--atspi tree|terminal``: the AT-SPI helper (:func:`.atspi.atspi_main`, run by the route handlers under
the system's interpreter). Each mode imports only its own modules: the helpers start faster for it.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Serve, or run the helper mode that ``sys.argv`` names (``argv``: serve with these arguments)."""
    if argv is None and sys.argv[1:2] == ["--fork-server"]:
        from .actions import fork_server

        fork_server(int(sys.argv[2]))
        return
    if argv is None and sys.argv[1:2] == ["--atspi"] and len(sys.argv) == 3:
        from .atspi import atspi_main

        sys.exit(atspi_main(sys.argv[2]))
    from .atspi import ATSPI_PYTHON
    from .handlers import OPEN_FILE_TIMEOUT, SERVER_MODES
    from .httpd import serve

    parser = argparse.ArgumentParser(description="The in-desktop HTTP server: OSWorld's VM server protocol.")
    parser.add_argument("--listen", required=True, help="unix:PATH, fd:N (listening unix socket) or tcp:HOST:PORT")
    parser.add_argument("--fb", help="Xvfb -fbdir framebuffer file (XWD) of this display")
    parser.add_argument("--open-file-timeout", type=float, default=OPEN_FILE_TIMEOUT)
    parser.add_argument("--atspi-python", default=ATSPI_PYTHON, help="interpreter with pyatspi (AT-SPI reads)")
    parser.add_argument("--mode", choices=SERVER_MODES, default="legato", help="osworld: as OSWorld's real server")
    parser.add_argument("--no-pointer", action="store_true", help="no pointer pasted into /screenshot")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    socket.setdefaulttimeout(None)
    serve(args.listen, args.fb, args.open_file_timeout, args.atspi_python, args.mode, not args.no_pointer)
