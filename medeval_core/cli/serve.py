"""``python -m medeval_core serve [STREAMLIT OPTIONS]``: the web app, always inside its navigation shell.

Streamlit decides once per process, when it builds its first ``PagesManager`` (on the first request, before
``app.py`` runs), whether a ``pages/`` folder beside the main script means its legacy multipage mode; in that mode
a cold deep link (``/runs`` as a server's first request) runs the page file alone, outside ``st.navigation``'s
shell. ``st.navigation`` turns the flag off only once it has run, too late for that first request. This command
sets the flag off and then starts Streamlit's own ``streamlit run`` in this process, so every Streamlit option
(``--server.port``, ``--server.address``, config files, ``STREAMLIT_*`` variables) keeps working.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from medeval_core.cli import CommandGroups

APP = Path(__file__).resolve().parent.parent.parent / "app.py"


def register(groups: CommandGroups) -> None:
    serve = groups.top.add_parser(
        "serve", help="start the web app (Streamlit); options it does not know go to `streamlit run`",
        description="Start the web app. Every option other than --app is passed to `streamlit run`, e.g. "
                    "--server.port 8501 --server.address 0.0.0.0.")
    serve.add_argument("--app", type=Path, default=APP, help="the app's main script (default: this checkout's app.py)")
    serve.set_defaults(handler=_serve, passes_unknown_options=True)


def _serve(args: argparse.Namespace) -> int:
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.web import cli as streamlit_cli

    from medeval_core.cli import CommandError

    if not args.app.is_file():
        raise CommandError(f"{args.app} does not exist; give the app's main script with --app.")
    PagesManager.uses_pages_directory = False
    streamlit_cli.main(args=["run", str(args.app), *args.unknown_options], prog_name="streamlit",
                       standalone_mode=False)
    return 0
