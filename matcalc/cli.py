"""The command line: ``matcalc derive EXPR --wrt W [...]``.

Exit status: 0 success, 1 a numerical check failed, 2 the input was refused."""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys

EXIT_OK, EXIT_CHECK_FAILED, EXIT_REFUSED, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_OUTPUT = 74  # the output could not be written (sysexits.h's EX_IOERR)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors are refusals too: exit 2, no traceback
        self.print_usage(sys.stderr)
        sys.stderr.write(f"matcalc: error: {message}\n")
        sys.exit(EXIT_REFUSED)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = _Parser(prog="matcalc", description="Matrix calculus with the differential method: "
                "dλ = G : dW, step by step, with NumPy code and a numerical check.")
    p.add_argument("--version", action="version", version=f"matcalc {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    d = sub.add_parser("derive", help="the gradient of a scalar expression",
                       description="Print ∂λ/∂W and its shape for the scalar expression λ = EXPR.",
                       epilog='example: matcalc derive "alpha*(exp(W@x+c)-W@x-c+m*m-1):1" --wrt W --steps')
    d.add_argument("expr", metavar="EXPR", help="the expression, e.g. 'G:exp(X@W)'")
    d.add_argument("--wrt", action="append", required=True, metavar="NAME", type=str.strip,
                   help="the variable (repeat for several)")
    d.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS",
                   help="declare a shape: W=a,b  x=b  alpha=scalar  (ints allowed: W=n,3)")
    d.add_argument("--let", action="append", default=[], metavar="NAME=EXPR", dest="let",
                   help="name an intermediate quantity, e.g. --let l=W@x+c --let p=exp(l)")
    d.add_argument("--syntax", choices=["matcalc", "matlab"], default="matcalc",
                   help="the language of EXPR and --let: matcalc (default: * entrywise, @ the matrix "
                        "product) or matlab (matrixcalculus.org: * the matrix product, .* entrywise, ' "
                        "transpose); results print in it")
    d.add_argument("--sym", action="append", default=[], metavar="NAME", type=str.strip,
                   help="NAME is a symmetric matrix: its gradient is sym(G) = (G + Gᵀ)/2 (repeat for several)")
    d.add_argument("--at", action="append", default=[], metavar="NAME=VALUE",
                   help="evaluate the gradient at numbers: a number, a nested list or a file (.npy, .csv, "
                        ".txt) per symbol, e.g. --at x=[1,2] --at W=[[1,0],[0,1]] --at alpha=0.5 --at X=X.npy")
    d.add_argument("--form", choices=["diag"], default=None,
                   help="diag: write h∘v as Hv with H = Diag(h) named, as papers do")
    d.add_argument("--layout", choices=["denominator", "numerator"], default="denominator",
                   help="denominator (default): ∂λ/∂W has W's shape; numerator: its transpose")
    d.add_argument("--steps", action="store_true", help="print the derivation step by step")
    d.add_argument("--latex", action="store_true", help="print the gradient in LaTeX")
    d.add_argument("--code", action="store_true",
                   help="print the source of the gradient (NumPy, or the framework of --backend)")
    d.add_argument("--backend", default="numpy", metavar="numpy|torch|jax",
                   help="the framework of --code (default numpy; torch and jax use only their own ops)")
    d.add_argument("--check", action="store_true", help="check against finite differences (exit 1 if it fails)")
    d.add_argument("--domain", action="append", default=[], metavar="NAME=KIND", help=DOMAIN_HELP)
    d.add_argument("--exact", action="store_true",
                   help="verify the gradient entry by entry with SymPy at small sizes (exit 1 if it fails; "
                        f"2 if SymPy has not decided in {EXACT_SECONDS} s)")
    d.add_argument("--json", action="store_true", help="print one JSON object per --wrt")
    s = sub.add_parser("serve", help="a local web page: type an expression, read the derivation",
                       description="Serve matcalc's page on this machine (needs the web extra: "
                       "pip install 'matcalc-diff[web]'). Nothing is sent anywhere else.",
                       epilog="example: matcalc serve --open")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    s.add_argument("--open", action="store_true", help="open the page in the default browser")
    s.add_argument("--workers", type=int, default=2, metavar="N",
                   help="worker processes that run derivations (default 2)")
    s.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="stop a derivation after this long (default 10)")
    from .second_order import add_cli_parsers

    add_cli_parsers(sub)
    return p


def parse_shapes(items) -> dict:
    from .errors import DeriveError

    shapes = {}
    for item in items:
        name, sep, dims = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise DeriveError(f"--shape takes NAME=DIMS (like W=a,b or alpha=scalar), got {item!r}")
        dims = dims.strip()
        if not dims:  # (--shape x=$DIMS with DIMS unset: not a way to say scalar)
            raise DeriveError(f"--shape {item}: no dimensions after '=' (like {name}=a,b; "
                              f"{name}=scalar for a scalar)")
        shape = () if dims in ("scalar", "()") else tuple(p.strip() for p in dims.split(","))
        if "" in shape:
            raise DeriveError(f"--shape {item}: a dimension is empty (like W=a,b: names or ints "
                              "between the commas)")
        if shapes.get(name, shape) != shape:
            raise DeriveError(f"--shape {name} is given twice, as {','.join(shapes[name]) or 'scalar'} "
                              f"and as {','.join(shape) or 'scalar'}")
        shapes[name] = shape
    return shapes


def parse_lets(items) -> dict:
    from .errors import DeriveError

    out = {}
    for item in items:
        name, sep, expr = item.partition("=")
        if not sep or not name.strip() or not expr.strip():
            raise DeriveError(f"--let takes NAME=EXPR (like l=W@x+c), got {item!r}")
        if name.strip() in out and out[name.strip()].strip() != expr.strip():
            raise DeriveError(f"{name.strip()} is defined twice, as {out[name.strip()].strip()} and as "
                              f"{expr.strip()}")
        out[name.strip()] = expr
    return out


def parse_domains(items) -> dict | None:
    """--domain NAME=KIND (the check's draws of NAME: positive, spd, small, ...), as check(domain=)."""
    from .check import DOMAINS
    from .errors import DeriveError

    out = {}
    for item in items:
        name, sep, kind = (part.strip() for part in item.partition("="))
        if not sep or not name or not kind:
            raise DeriveError(f"--domain takes NAME=KIND (like b=positive), got {item!r}; the kinds are "
                              f"{', '.join(DOMAINS)}")
        out[name] = kind
    return out or None


DOMAIN_HELP = "where --check draws NAME's values: positive, small, spd, invertible, unit_simplex, ... (b=positive)"


def check_backend_args(args) -> None:
    """--backend names an installed framework and goes with --code or --json."""
    if args.backend != "numpy":
        from .backends import check_backend
        from .errors import DeriveError

        check_backend(args.backend)
        if not (args.code or args.json):
            raise DeriveError("--backend chooses the framework of --code (or of --json's "
                              "source); add --code")


_OPTION = re.compile(r"--[A-Za-z][A-Za-z0-9_-]*(=.*)?", re.S)  # (--(W:W) and --x:x are expressions)


def _protect_leading_minus(argv):
    """An expression that starts with '-' (``-t.T@log(softmax(z))``) is the expression, not an
    option: argparse would take it for an unknown flag.  Such a token (the first one after the
    command that is not an option's value) is marked with a leading space, removed after parsing."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("derive", "hessian", "jacobian"):
        return argv, None
    takes_value = {"--wrt", "--shape", "--let", "--layout", "--syntax", "--sym", "--form", "--at", "--backend"}
    i = 1
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return argv, None
        if tok in takes_value or _abbreviates(tok, takes_value):
            i += 2
            continue
        if tok.startswith("-") and len(tok) > 1 and tok != "-h" and not _OPTION.fullmatch(tok):
            argv[i] = " " + tok
            return argv, i
        if not tok.startswith("-"):
            return argv, None  # the expression is already a plain positional argument
        i += 1
    return argv, None


_FLAGS = {"--steps", "--latex", "--code", "--check", "--exact", "--json", "--kron", "--help"}


def _abbreviates(tok: str, takes_value: set) -> bool:
    """Whether tok is an abbreviation argparse reads as one option that takes a value (--wr:
    --wrt), so that the token after it is that value, not the expression."""
    matches = {o for o in takes_value | _FLAGS if o.startswith(tok)} if tok.startswith("--") and len(tok) > 2 else ()
    return len(matches) == 1 and next(iter(matches)) in takes_value


EXACT_SECONDS = 120  # SymPy's symbolic inverse of a large nest can run for hours


def _within(seconds: int, run):
    """run(), or a refusal once it has run ``seconds`` (a SIGALRM timer: the CLI's main thread,
    where there is one; SymPy is Python, so the interruption comes at its next bytecode)."""
    import signal

    from .errors import DeriveError

    import threading

    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return run()

    class Late(BaseException):  # (not an Exception: SymPy's own except clauses let it through)
        pass

    def stop(signum, frame):
        raise Late

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return run()
    except Late:
        raise DeriveError(f"SymPy has not decided in {seconds} s; the numerical check (--check) is fast") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check_status(report) -> int:
    """The exit status of a check that did not pass: 1 where it failed, 2 where it could not be
    made (λ not finite on any draw, or for any value: nothing was compared)."""
    return EXIT_REFUSED if report.entries_checked == 0 else EXIT_CHECK_FAILED


def parse_at(items) -> dict:
    """--at NAME=VALUE: VALUE is JSON (a number or nested lists of numbers), never evaluated, or a
    file NAME=X.npy (NumPy's, no pickled objects) or NAME=X.csv / X.txt (a table of numbers)."""
    from .errors import DeriveError

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name or not value.strip():
            raise DeriveError(f"--at takes NAME=VALUE (like x=[1,2] or alpha=0.5), got {item!r}")
        if name in out:
            raise DeriveError(f"--at {name} is given twice")
        if re.search(r"(?i)\.(npy|csv|txt)\s*$", value):  # a file: NumPy's .npy, or numbers in text
            out[name] = _read_array(name, value.strip())
            continue
        depth = _depth(value)
        if depth > 2:  # (json.loads would recurse that deep)
            raise DeriveError(f"--at {name}: {value.strip()[:60]!r} nests lists {depth} deep; an argument "
                              "is a number, a vector [1, 2] or a matrix [[1, 2], [3, 4]]")
        try:  # (nan, inf and -inf as JSON's NaN, Infinity and -Infinity, in any case, signed)
            v = json.loads(re.sub(r"(?i)([+-]?)\b(nan|inf(inity)?)\b",
                                  lambda m: "NaN" if m.group(2).lower() == "nan"
                                  else ("-" if m.group(1) == "-" else "") + "Infinity", value))
        except ValueError:
            raise DeriveError(f"--at {name}: {value.strip()[:60]!r} is not a number, a nested list of "
                              "numbers (like [[1, 2], [3, 4]]) or a file (.npy, .csv, .txt)") from None
        if not _numeric(v):
            raise DeriveError(f"--at {name}: {value.strip()[:60]!r} is not a number or a nested list of numbers")
        import numpy as np  # (only with --at: the cold CLI imports no NumPy)

        try:
            np.asarray(v, dtype=float)
        except ValueError:
            raise DeriveError(f"--at {name}: {value.strip()[:60]!r} is not an array: its rows differ in "
                              "length (or some entries are lists and some numbers)") from None
        out[name] = v
    return out


def _read_array(name: str, path: str):
    """The array in a .npy file (np.load, no pickled objects) or a .csv/.txt table of numbers
    (np.loadtxt: commas, or spaces) as a 2-D table: one row or column is a row or column, which
    a vector or a number may be given as too."""
    import warnings

    import numpy as np

    from .errors import DeriveError

    npy = path.lower().endswith(".npy")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (loadtxt warns of an empty file: said below)
            a = np.load(path, allow_pickle=False) if npy else \
                np.loadtxt(path, delimiter="," if path.lower().endswith(".csv") else None, ndmin=2)
    except OSError as e:
        raise DeriveError(f"--at {name}: cannot read {path!r} ({e.strerror or e})") from None
    except ValueError as e:
        what = "a NumPy .npy file of numbers" if npy else f"a table of numbers ({e})"
        raise DeriveError(f"--at {name}: {path!r} is not {what}") from None
    if a.size == 0:
        raise DeriveError(f"--at {name}: {path!r} holds no numbers")
    if a.dtype.kind not in "biuf" or a.ndim > 2:
        raise DeriveError(f"--at {name}: {path!r} holds {a.ndim}-D {a.dtype} values; an argument is a number, "
                          "a vector or a matrix of real numbers")
    return a.astype(float)


def _depth(text: str) -> int:
    """How deep the brackets and braces of a JSON value nest (outside strings, which a value of
    --at never has)."""
    deepest = level = 0
    for ch in text:
        level += (ch in "[{") - (ch in "]}")
        deepest = max(deepest, level)
    return deepest


def _numeric(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    return isinstance(v, list) and bool(v) and all(_numeric(x) for x in v)


def evaluate_at(d, values: dict):
    """The gradient of ``d`` at ``values`` (name -> number or nested list) as an array."""
    from .errors import DeriveError

    params = list(d.function.params)
    missing = [p for p in params if p not in values]
    if missing:
        raise DeriveError(f"--at gives no value for {', '.join(missing)} (the gradient of {d.wrt} needs "
                          f"{', '.join(params)})")
    return value_at(lambda: d.function(**{k: values[k] for k in params}), f"the gradient of {d.expr}")


def value_at(compute, what: str):
    """compute() as a float array, its failures as --at's refusals (``what``: what computes)."""
    import numpy as np

    from .errors import DeriveError, ShapeError

    try:
        with np.errstate(all="ignore"):
            return np.asarray(compute(), dtype=float)
    except np.linalg.LinAlgError:  # (a ValueError too)
        raise DeriveError(f"--at: {what} inverts or factorises a matrix (inv, solve, det, logdet) that is "
                          "singular at these values") from None
    except ShapeError as e:
        raise ShapeError(f"--at: {e.message}") from None
    except ValueError as e:  # (a value a symmetric symbol may not have: not a shape error)
        raise DeriveError(f"--at: {e}") from None


def _unknown_options(parser, argv) -> None:
    """A refusal naming an option the command does not have (and the one probably meant), before
    argparse, which would first say that a required --wrt is missing where --wrtt was typed."""
    import difflib

    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    command = sub.choices.get(argv[0]) if sub is not None and argv else None
    if command is None:
        return
    known = list(command._option_string_actions)
    takes_value = {o for a in command._actions if a.nargs != 0 for o in a.option_strings}
    skip = False
    for tok in argv[1:]:
        if skip or tok == "--":
            skip = False
            if tok == "--":
                return
            continue
        name = tok.split("=", 1)[0]
        if _OPTION.fullmatch(tok) and not any(k.startswith(name) for k in known):
            close = difflib.get_close_matches(name.lower(), known, 1, cutoff=0.75)
            hint = f" (did you mean {close[0]}?)" if close else (
                f" (an expression that begins with - goes after --: matcalc {argv[0]} --wrt x -- '{tok}')")
            command.error(f"{argv[0]} has no option {name}{hint}")
        skip = name in takes_value and "=" not in tok


def run(argv=None) -> int:
    argv, marked = _protect_leading_minus(argv)
    parser = build_parser()
    _unknown_options(parser, argv)
    args = parser.parse_args(argv)
    if marked is not None and getattr(args, "expr", None) == argv[marked]:
        args.expr = args.expr[1:]
    if args.command == "serve":  # the web framework is imported only here
        from .web import serve

        return serve(args)
    if args.command in ("hessian", "jacobian"):
        from .second_order import run_cli

        return run_cli(args)
    if args.command != "derive":
        build_parser().print_help(sys.stderr)
        return EXIT_REFUSED
    from .api import derive, shape_str
    from .errors import DeriveError, MatcalcError

    from .errors import with_notes

    try:
        check_backend_args(args)
        shapes = parse_shapes(args.shape)
        results, notes = with_notes(derive, args.expr, wrt=list(args.wrt), shapes=shapes,
                                    definitions=parse_lets(args.let) or None, syntax=args.syntax,
                                    symmetric=args.sym or None, form=args.form)
        at = parse_at(args.at) if args.at else None
        if at is not None:
            symbols = set().union(*(d.symbols for d in results.values()))
            unknown = [k for k in at if k not in symbols]
            if unknown:
                from .errors import not_symbols

                raise DeriveError(not_symbols("--at", unknown, sorted(symbols)))
            values = {w: evaluate_at(d, at) for w, d in results.items()}  # (a --sym value that is not
            # symmetric is refused there)
    except MatcalcError as e:
        print(f"matcalc: {e}", file=sys.stderr)
        return EXIT_REFUSED
    for note in notes:
        print(f"matcalc: {note}", file=sys.stderr)
    status = EXIT_OK
    out = []
    for w, d in results.items():
        try:
            domain = parse_domains(args.domain)
            report = d.check(domain=domain) if args.check else None
            exact = _within(EXACT_SECONDS, lambda: d.check(exact=True, domain=domain)) if args.exact else None
        except MatcalcError as e:  # arrays too large for memory, an operation SymPy has no form for
            print(f"matcalc: the check cannot be made: {e}", file=sys.stderr)
            return EXIT_REFUSED
        for r in (report, exact):
            if r is not None and not r.ok:
                status = max(status, check_status(r))
        if args.json:
            obj = json_object(d, report, exact, args.backend, notes)
            if at is not None:
                obj["value"] = (values[w] + 0.0).tolist()  # (+ 0.0: no -0.0)
                if args.layout == "numerator":
                    obj["numerator_value"] = (_numerator(values[w]) + 0.0).tolist()
            if args.layout == "numerator":
                obj["layout"] = "numerator"
            out.append(dumps(obj))
            continue
        if len(results) > 1:
            out.append(f"── {w} ──")
        if args.steps:
            out.extend(d.derivation_lines())
        else:
            out.append(f"∂{d.lam_symbol}/∂{w} = {d.text}")
            if d.short_text != d.text:
                where = ", ".join(f"{k} = {v}" for k, v in d.short_definitions().items())
                out.append(f"{' ' * (len(w) + 4)} = {d.short_text}    where {where}")
            out.append(f"shape: {d.shape_text}; {d.shape_reason}")
            if d.symmetric_note:
                out.append(d.symmetric_note)
        if args.layout == "numerator":
            text, shape = d.layout("numerator")
            out.append(f"numerator layout: ∂{d.lam_symbol}/∂{w} = {text}, shape {shape_str(shape)} "
                       f"(the transpose of the gradient)")
        if args.latex:
            out.append(f"latex: {d.latex}")
            if args.steps:
                out.append(d.steps_latex)
        if at is not None:
            import numpy as np

            where = ", ".join(f"{k}" for k in d.function.params)
            numerator = args.layout == "numerator"
            out.append(f"at the given {where}: ∂{d.lam_symbol}/∂{w}"
                       + (" in the numerator layout =" if numerator else " ="))
            value = _numerator(values[w]) if numerator else np.asarray(values[w])
            out.append(np.array2string(value + 0.0, precision=8, max_line_width=100,
                                       threshold=10 ** 6))  # (+ 0.0: no -0.)
        if args.code:
            out.append(Source(d.source(args.backend).rstrip()))
        if report is not None:
            out.append(str(report))
        if exact is not None:
            out.append(str(exact))
    print(joined(out, args.code and not args.json))
    if status != EXIT_OK and not args.json:
        print("matcalc: the " + ("check" if args.check and args.exact else "exact check" if args.exact
                                 else "numerical check") + (" failed" if status == EXIT_CHECK_FAILED
                                                            else " cannot be made"), file=sys.stderr)
    return status


class Source(str):
    """Emitted code among the lines a command prints."""


def joined(out, code: bool) -> str:
    """The lines a command prints; with --code, every line but the code's is a Python comment,
    so that `matcalc derive … --code > grad.py` writes a module that imports."""
    if not code:
        return "\n".join(out)
    return "\n".join(s if isinstance(s, Source) else "\n".join(f"# {line}".rstrip() for line in s.split("\n"))
                     for s in out)


def _numerator(value):
    """A gradient's value in the numerator layout: its transpose, a vector as a row."""
    import numpy as np

    value = np.asarray(value)
    return value.T if value.ndim == 2 else value[None, :] if value.ndim == 1 else value


def json_object(d, report=None, exact=None, backend: str = "numpy", notes=()) -> dict:
    """What ``derive --json`` prints for one wrt (``matcalc serve``'s ``POST /api/derive``
    returns a list of these): ``d.to_dict`` plus the LaTeX of the derivation and its text lines,
    the exact check's report (``--exact``), the source for another backend (``--backend``) and
    ``notes`` (NotationWarnings: ``A*B`` where ``@`` was likely meant) when there are any.
    (``dumps`` writes non-finite numbers as null.)"""
    from .printing import tex_name

    obj = d.to_dict(report)
    if exact is not None:
        obj["exact_check"] = exact.to_dict()
    if backend != "numpy":
        obj[f"{backend}_source"] = d.source(backend)
    obj.setdefault("wrt_latex", tex_name(d.wrt))
    obj.setdefault("objective_latex", d._lam_tex)
    obj.setdefault("short_latex", d.short_latex)
    obj.setdefault("definitions_latex", d.short_definitions(latex=True))
    obj.setdefault("steps_latex", d.steps_latex)
    obj.setdefault("derivation", d.derivation_lines())
    if notes:
        obj["notes"] = [getattr(n, "message", n) for n in notes]
    return obj


def finite(obj):
    """obj with every non-finite float (anywhere in its dicts and lists) as None: strict JSON
    (RFC 8259, a browser's JSON.parse) has no Infinity or NaN."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(obj) -> str:
    """The JSON text of a --json answer or a web reply: non-finite numbers are null."""
    return json.dumps(finite(obj), ensure_ascii=_ASCII_JSON, allow_nan=False)


def _printable_streams() -> None:
    """stdout and stderr that cannot encode matcalc's symbols (∂, λ, ∘, ×: a cp1252 or ASCII
    console, a redirect on Windows) write them as \\u escapes, never fail: JSON stays valid."""
    for stream in (sys.stdout, sys.stderr):
        try:
            "∂λ∘×ᵀ≤".encode(getattr(stream, "encoding", None) or "utf-8")
        except (UnicodeEncodeError, LookupError):
            global _ASCII_JSON
            _ASCII_JSON = _ASCII_JSON or stream is sys.stdout
            try:
                stream.reconfigure(errors="backslashreplace")
            except (AttributeError, ValueError):
                pass


_ASCII_JSON = False  # --json to a stdout that cannot encode every character: \u escapes


class _Diagnostics:
    """stderr that never raises: a message or note that cannot be written (stderr on a full
    disk) is dropped and remembered, so the exit status still tells what happened."""

    def __init__(self, stream):
        self.stream, self.failed = stream, False

    def write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError, AttributeError):  # (AttributeError: stderr closed, None)
            self.failed = True
        return len(text)

    def flush(self):
        try:
            self.stream.flush()
        except (OSError, ValueError, AttributeError):
            self.failed = True

    def __getattr__(self, name):
        return getattr(self.stream, name)


class _Closed:
    """stdout when the command started with it closed (>&-: Python's sys.stdout is None):
    writing to it fails as writing to a closed file does."""

    def write(self, text):
        import errno

        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self):
        pass

    def fileno(self):
        return 1


def main(argv=None) -> None:
    if sys.stdout is None:
        sys.stdout = _Closed()
    _printable_streams()
    sys.stderr = errors = _Diagnostics(sys.stderr)
    try:
        code = run(argv)
        sys.stdout.flush()  # (a write that fails, fails here: not at exit, unreported)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:  # the reader stopped (| head): as a command killed by SIGPIPE, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (no second error at exit)
        code = 141
    except OSError as e:  # the output cannot be written (a full disk): not matcalc's bug
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"matcalc: cannot write the output: {e.strerror or e}", file=sys.stderr)
        code = EXIT_OUTPUT
    except Exception as e:  # a bug in matcalc: say so briefly, never a raw traceback
        if os.environ.get("MATCALC_DEBUG"):
            raise
        print(f"matcalc: internal error ({type(e).__name__}: {e}); please report it "
              "(set MATCALC_DEBUG=1 for the traceback)", file=sys.stderr)
        code = EXIT_INTERNAL
    if errors.failed and code == EXIT_OK:  # a note was lost: the output is not all there
        code = EXIT_OUTPUT
    sys.exit(code)
