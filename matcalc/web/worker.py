"""One worker process of ``matcalc serve``: reads questions as JSON lines on stdin, writes one
JSON line ``[status, payload]`` per question on stdout. Run by :mod:`matcalc.web.pool` as
``python -m matcalc.web.worker [MEMORY_LIMIT_BYTES]``; no web framework here."""
from __future__ import annotations

import json
import os
import sys


def _limit_memory(limit: int):
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # not on this platform: the time limit still holds
        pass


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:  # Ctrl-C in the terminal reaches the whole process group: the server stops its workers
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ImportError, ValueError, OSError):
        pass
    # answers go to the original stdout; anything else printed goes to stderr
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    if argv and int(argv[0]) > 0:
        _limit_memory(int(argv[0]))
    from ..errors import MatcalcError
    from .protocol import LIMITS, answer, refusal

    answer("derive", {"expr": "x:x", "wrt": ["x"], "shapes": {}, "definitions": None, "syntax": None,
                      "check": False})  # warm up: the first derivation imports the rest
    answer("hessian", {"expr": "x:x", "wrt": ["x"], "shapes": {}, "definitions": None, "syntax": None,
                       "check": False})  # and the first Hessian the vec forms
    out.write('["ready", null]\n')
    out.flush()
    for line in sys.stdin:
        retire = False
        try:
            kind, params = json.loads(line)
            reply = ["ok", answer(kind, params)]
        except MemoryError:  # (matcalc's OutOfMemory too: over the worker's limit, a 422)
            reply, retire = ["memory", None], True
        except MatcalcError as e:
            reply = ["refused", refusal(e)]
        except RecursionError:
            reply = ["deep", None]
        except Exception as e:  # a bug in matcalc: report it, keep serving
            reply = ["internal", f"{type(e).__name__}: {e}"]
        try:
            text = json.dumps(reply, ensure_ascii=False)
        except MemoryError:
            text, retire = '["memory", null]', True
        except ValueError as e:
            text = json.dumps(["internal", f"unencodable answer ({e})"])
        if len(text) > LIMITS["answer_bytes"]:  # characters, at least as many bytes
            text = json.dumps(["large", len(text.encode("utf-8"))])
        out.write(text + "\n")
        out.flush()
        if retire:
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
