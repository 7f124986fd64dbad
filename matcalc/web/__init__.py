"""``matcalc serve``: a page on this machine for typing an expression and reading its derivation.

Needs the ``web`` extra (Starlette and uvicorn); ``import matcalc`` and the other commands never
import it. :func:`matcalc.web.server.create_app` builds the app."""
from __future__ import annotations

import sys


def serve(args) -> int:
    """The ``serve`` subcommand: returns the exit status."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        print("matcalc: serve needs the web extra: pip install 'matcalc-diff[web]' "
              "(Starlette and uvicorn)", file=sys.stderr)
        return 2
    from .server import run_server

    return run_server(host=args.host, port=args.port, open_browser=args.open, workers=args.workers,
                      timeout=args.timeout)
