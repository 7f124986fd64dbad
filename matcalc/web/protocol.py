"""The questions the page asks, checked before any work is done.

Plain Python (no web framework): the server calls :func:`derive_params` on the JSON body of
``POST /api/derive`` and hands the result to a worker process, which calls :func:`answer`."""
from __future__ import annotations

import inspect
import re

from ..errors import DeriveError, MatcalcError, with_notes

#: Size limits of one question. A larger one is refused (HTTP 413) before any work is done.
LIMITS = {
    "body_bytes": 64 * 1024,      # the whole JSON body
    "expr_chars": 5000,           # the expression (the longest public case has about 100)
    "definition_chars": 5000,     # each definition
    "definitions": 50,
    "wrt": 20,
    "shapes": 100,
    "name_chars": 64,
    "answer_bytes": 8 * 1024 * 1024,  # the JSON answer (a longer one is refused with 422)
}

KEYS = ("expr", "wrt", "shapes", "definitions", "syntax", "check")
#: Keys only some questions take: derive's ``backends`` (torch/jax source besides NumPy's, as
#: the CLI's --backend), symbols' ``mode`` (a Jacobian's F need not be a scalar).
EXTRA_KEYS = {"derive": ("backends",), "hessian": ("backends",), "jacobian": ("backends",),
              "symbols": ("mode",)}
#: What the page can ask: the gradient (/api/derive), the Hessian and the Jacobian.
MODES = ("gradient", "hessian", "jacobian")
BACKENDS = ("torch", "jax")
_NAME_LIST = re.compile(r"[\s,;]+")
_ITEM_SPLIT = re.compile(r"[;\n]+|\s+(?=[^\s=,;]+\s*=)")


class RequestError(Exception):
    """A question refused before it reaches matcalc: ``status`` is 400, or 413 when too large."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


def _too_long(what: str, n: int, limit: int):
    return RequestError(f"{what} is {n} characters long; the limit is {limit}", 413)


def _items(text: str) -> list:
    """'W=a,b; x=b' or one NAME=… per line -> ['W=a,b', 'x=b']."""
    return [t.strip() for t in _ITEM_SPLIT.split(text) if t.strip()]


def _check_name(name, what):
    if not isinstance(name, str) or not name.strip():
        raise RequestError(f"{what} must be a non-empty name, got {name!r}")
    if len(name) > LIMITS["name_chars"]:
        raise _too_long(f"the name {name[:20]!r}…", len(name), LIMITS["name_chars"])
    return name.strip()


def _shapes(value) -> dict:
    from ..cli import parse_shapes

    if value is None or value == "":
        return {}
    if isinstance(value, str):
        items = _items(value)
    elif isinstance(value, dict):
        items = []
        for name, dims in value.items():
            name = _check_name(name, "a shape's key")
            if isinstance(dims, str):
                items.append(f"{name}={dims}")
            elif isinstance(dims, (list, tuple)) and all(
                    isinstance(x, str) and not re.search(r"[,;=]", x) or (isinstance(x, int) and not isinstance(x, bool))
                    for x in dims):  # (each a single dimension: "d; X=k,k" is no name)
                items.append(f"{name}=" + (",".join(str(x) for x in dims) if dims else "scalar"))
            else:
                raise RequestError(f"the shape of {name} must be a list of dimension names or ints "
                                   f"(like [\"a\", \"b\"] or [] for a scalar) or text like \"a,b\", got {dims!r}")
    else:
        raise RequestError('shapes must be an object like {"W": ["a", "b"], "alpha": []} or text like "W=a,b; alpha=scalar"')
    if len(items) > LIMITS["shapes"]:
        raise RequestError(f"{len(items)} shapes; the limit is {LIMITS['shapes']}", 413)
    for item in items:
        if "=" not in item:
            raise RequestError(f"a shape is written NAME=DIMS (like W=a,b or alpha=scalar), got {item!r}")
        if len(item) > 2 * LIMITS["name_chars"] + 1:
            raise _too_long(f"the shape {item[:20]!r}…", len(item), 2 * LIMITS["name_chars"] + 1)
    return parse_shapes(items)


def _definitions(value):
    from ..cli import parse_lets

    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, str):
        items = _items(value)
        for item in items:
            name, sep, text = item.partition("=")
            if not sep or not name.strip() or not text.strip():
                raise RequestError(f"a definition is written NAME = EXPR (like l = W@x+c), got {item!r}")
        out = parse_lets(items)
    elif isinstance(value, dict):
        out = {}
        for name, text in value.items():
            name = _check_name(name, "a definition's name")
            if not isinstance(text, str) or not text.strip():
                raise RequestError(f"the definition of {name} must be expression text, got {text!r}")
            out[name] = text
    else:
        raise RequestError('definitions must be an object like {"l": "W@x+c"} or text like "l = W@x+c; p = exp(l)"')
    if len(out) > LIMITS["definitions"]:
        raise RequestError(f"{len(out)} definitions; the limit is {LIMITS['definitions']}", 413)
    for name, text in out.items():
        if len(text) > LIMITS["definition_chars"]:
            raise _too_long(f"the definition of {name}", len(text), LIMITS["definition_chars"])
    return {k.strip(): v.strip() for k, v in out.items()} or None


def _wrt(value, need: bool) -> list:
    if value is None or value == "" or value == []:
        if need:
            raise RequestError("wrt is missing: name the variable(s) to differentiate with respect to, "
                               'like "wrt": "W" or "wrt": ["X", "W"]')
        return []
    if isinstance(value, str):
        names = [n for n in _NAME_LIST.split(value) if n]
    elif isinstance(value, list):
        names = [_check_name(n, "each wrt") for n in value]
    else:
        raise RequestError(f'wrt must be a name or a list of names, got {value!r}')
    if len(names) > LIMITS["wrt"]:
        raise RequestError(f"{len(names)} wrt names; the limit is {LIMITS['wrt']}", 413)
    for n in names:
        _check_name(n, "each wrt")
    return list(dict.fromkeys(names))   # in order, once each (as repeated --wrt in the CLI)


def syntaxes() -> list:
    """The expression languages this matcalc reads."""
    from .. import derive

    if "syntax" in inspect.signature(derive).parameters:
        return ["matcalc", "matlab"]
    return ["matcalc"]


def _syntax(value):
    if value is None or value == "" or value == "matcalc":
        return None
    if not isinstance(value, str) or len(value) > 32:
        raise RequestError(f"syntax must be a name like \"matcalc\", got {value!r}")
    from .. import derive

    if "syntax" not in inspect.signature(derive).parameters:
        raise RequestError(f"syntax {value!r} is not available in this version of matcalc; "
                           "it reads only 'matcalc' syntax")
    return value


def _backends(value) -> list:
    if value is None or value == []:
        return []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(b, str) for b in names):
        raise RequestError(f'backends must be a list like ["torch", "jax"], got {value!r}')
    for b in names:
        if b not in BACKENDS:
            raise RequestError(f"unknown backend {b!r} in backends; choose from " + ", ".join(BACKENDS)
                               + " (NumPy's source is always there)")
    return list(dict.fromkeys(names))


def _mode(value) -> str:
    if value is None or value == "":
        return "gradient"
    if value not in MODES:
        raise RequestError(f"mode must be one of {', '.join(MODES)}, got {value!r}")
    return value


def derive_params(payload, need_wrt: bool = True, kind: str = "derive") -> dict:
    """The checked, normalised question: expr, wrt (a list), shapes (a dict), definitions
    (a dict or None), syntax (None for matcalc's own) and check (a bool); for ``derive``
    also backends (a list), for ``symbols`` mode (gradient, hessian or jacobian).
    Raises :class:`RequestError` (or a :class:`MatcalcError` for a malformed shape or definition)."""
    if not isinstance(payload, dict):
        raise RequestError('the body must be a JSON object like {"expr": "G:(X@W)", "wrt": "W"}')
    keys = KEYS + EXTRA_KEYS.get(kind, ())
    unknown = [k for k in payload if k not in keys]
    if unknown:
        raise RequestError(f"unknown key {unknown[0]!r}; the keys are " + ", ".join(keys))
    expr = payload.get("expr")
    if expr is not None and not isinstance(expr, str):
        raise RequestError(f"expr must be text (a JSON string), got {type(expr).__name__}: {str(expr)[:40]!r}")
    if not isinstance(expr, str) or not expr.strip():
        raise RequestError("expr is missing: give the scalar expression to differentiate, "
                           'like "expr": "alpha*(exp(W@x+c)-W@x-c+m*m-1):1"')
    if len(expr) > LIMITS["expr_chars"]:
        raise _too_long("the expression", len(expr), LIMITS["expr_chars"])
    check = payload.get("check")
    check = False if check is None else check
    if not isinstance(check, bool):
        raise RequestError(f"check must be true or false, got {check!r}")
    out = {"expr": expr, "wrt": _wrt(payload.get("wrt"), need_wrt), "shapes": _shapes(payload.get("shapes")),
           "definitions": _definitions(payload.get("definitions")), "syntax": _syntax(payload.get("syntax")),
           "check": check}
    if kind in ("derive", "hessian", "jacobian"):
        out["backends"] = _backends(payload.get("backends"))
    if kind == "symbols":
        out["mode"] = _mode(payload.get("mode"))
    return out


def refusal(e: MatcalcError) -> dict:
    """The body of a 400 for a refusal: the message the CLI prints (with the caret), and where."""
    return {"error": str(e), "kind": e.kind, "column": e.column,
            "end_column": None if e.end is None else e.end + 1}


def _backend_sources(d, obj, backends):
    """``<backend>_source`` for each further backend (what the CLI's --backend adds); where
    matcalc cannot write one, ``<backend>_error`` says why (the NumPy answer still stands)."""
    for b in backends:
        if f"{b}_source" in obj:
            continue
        try:
            obj[f"{b}_source"] = d.source(b)
        except MatcalcError as e:
            obj[f"{b}_error"] = str(e)
    return obj


def _second_order(kind: str, p: dict):
    from .. import second_order

    results, notes = second_order.compute(kind, p["expr"], list(p["wrt"]), p["shapes"], p["definitions"],
                                          syntax=p["syntax"] or "matcalc")
    backends = list(p.get("backends") or [])
    first = backends[0] if backends else "numpy"
    out = []
    for key, r in results.items():
        report = r.check() if p["check"] else None
        try:
            obj = second_order.json_object(r, report, key, notes, first, several=len(results) > 1)
        except MatcalcError as e:  # the first backend's source could not be written
            obj = second_order.json_object(r, report, key, notes, several=len(results) > 1)
            obj[f"{first}_error"] = str(e)
        out.append(_backend_sources(r, obj, backends))
    return out


def answer(kind: str, p: dict):
    """Run one normalised question (in a worker process). ``derive`` returns what
    ``matcalc derive --json`` prints, as a list; ``hessian`` and ``jacobian`` what
    ``matcalc hessian|jacobian --json`` prints; ``symbols`` the variables of the expression."""
    from .. import derive
    from ..cli import json_object

    extra = {"syntax": p["syntax"]} if p.get("syntax") else {}
    if kind in ("hessian", "jacobian"):
        return _second_order(kind, p)
    if kind == "derive":
        results, notes = with_notes(derive, p["expr"], wrt=list(p["wrt"]), shapes=p["shapes"],
                                    definitions=p["definitions"], **extra)
        backends = list(p.get("backends") or [])
        first = backends[0] if backends else "numpy"
        out = []
        for d in results.values():
            try:
                obj = json_object(d, d.check() if p["check"] else None, backend=first, notes=notes)
            except MatcalcError as e:  # the first backend's source could not be written
                obj = json_object(d, d.check() if p["check"] else None, notes=notes)
                obj[f"{first}_error"] = str(e)
            out.append(_backend_sources(d, obj, backends))
        return out
    if kind == "symbols":
        from ..api import _typed, _typed_any, shape_str

        # a Hessian refuses an array-valued F itself, pointing to the Jacobian
        typer = _typed_any if p.get("mode") in ("hessian", "jacobian") else _typed
        if extra and "syntax" not in inspect.signature(typer).parameters:
            return {"symbols": [], "definitions": list(p["definitions"] or {})}
        typed = typer(p["expr"], p["shapes"], p["definitions"], **extra)
        return {"symbols": [{"name": n, "shape": list(s), "shape_text": shape_str(s)}
                            for n, s in typed.user_shapes.items()],
                "definitions": list(p["definitions"] or {})}
    raise DeriveError(f"unknown question {kind!r}")
