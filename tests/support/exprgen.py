"""Random well-typed scalar matcalc expressions with an independent NumPy oracle.

This module knows nothing about matcalc.  It is the oracle for property-based
soundness tests: it generates an expression in the language of SPEC.md §1
*together with* its own NumPy evaluation, so that a gradient produced by
matcalc can be compared with finite differences of an independent λ.

Design
------
The generator is typed.  ``gen(ty, depth)`` builds a tree whose value has the
requested type ``ty`` -- a scalar, a column vector ``col(d)``, a row vector
``row(d)`` (the transpose of a column vector) or a matrix ``mat(r, c)`` -- over
the symbolic dimensions ``a, b, n, m``.  Every production is well-typed by
construction, so every generated expression is well-shaped.

Every tree node (:class:`Node`) carries

* ``text``: matcalc syntax, with only the parentheses the precedence table of
  SPEC §1 needs (plus parentheses around a unary minus that is not the left
  operand, and around non-atomic bases/exponents of ``**``);
* ``src``: a fully parenthesised NumPy expression computing the same value
  (vectors are 1-D arrays, whatever their orientation; ``col@row`` is
  ``np.outer``);
* a rough magnitude ``mag`` and, when the node is known to be entrywise
  positive, a lower bound ``lo`` -- used to keep function domains safe:
  ``log``/``sqrt``/fractional and negative powers/denominators only receive
  positive, bounded-away-from-zero arguments, ``exp`` only receives "tame"
  arguments (large ones are squashed with tanh/sin/cos/sigmoid first), and
  ``det``/``logdet``/``inv`` only receive matrices with det > 0 built by
  construction (SPD symbols, ``M@M.T + I``, ``Diag(positive)``, PD + skew,
  products/inverses/transposes of those ...).

``I``/``eye`` and ``1`` (all-ones) only ever appear next to a sibling whose
shape is determined by symbols, so their size is always inferable.

The same generator can be driven by Hypothesis (:func:`expressions`, which
shrinks towards leaves and the first listed productions) or by a NumPy
``Generator`` (:func:`random_case`, for long runs outside pytest).

:func:`eval_text` is a second, independent reference: a small interpreter
for the matcalc *text* (tokenizer + recursive-descent parser following the
precedence table of SPEC §1).  The self-check tests use it to make sure that
the rendered text means what the NumPy source computes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

try:  # Hypothesis is only needed for `expressions()`
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    st = None

__all__ = [
    "Case", "Node", "Ty", "SCALAR", "col", "row", "mat", "DIMS", "DEFAULT_SIZES",
    "expressions", "random_case", "make_case", "draw_inputs", "eval_text",
    "sym", "number", "identity", "add", "sub", "had", "div", "matmul", "frob",
    "frob_ones", "matmul_ones", "neg", "power", "transpose", "call",
    "ELEMENTWISE", "REDUCTIONS",
]

# --------------------------------------------------------------------------
# Types

DIMS = ("a", "b", "n", "m")
# Distinct sizes, "large" dims n, m larger than the "small" ones a, b.
DEFAULT_SIZES = {"a": 2, "b": 3, "m": 4, "n": 5}


@dataclass(frozen=True)
class Ty:
    kind: str                      # "scalar" | "col" | "row" | "mat"
    dims: Tuple[str, ...] = ()

    @property
    def square(self) -> bool:
        return self.kind == "mat" and self.dims[0] == self.dims[1]

    def __repr__(self) -> str:
        return f"{self.kind}{self.dims}" if self.dims else self.kind


SCALAR = Ty("scalar")


def col(d: str) -> Ty:
    return Ty("col", (d,))


def row(d: str) -> Ty:
    return Ty("row", (d,))


def mat(r: str, c: str) -> Ty:
    return Ty("mat", (r, c))


def _shape_of(ty: Ty) -> Tuple[str, ...]:
    """Declared (symbolic) shape of a symbol of type ty."""
    if ty.kind == "scalar":
        return ()
    if ty.kind == "col":
        return ty.dims
    if ty.kind == "mat":
        return ty.dims
    raise TypeError("a symbol cannot be a row vector; use transpose(sym)")


# --------------------------------------------------------------------------
# Nodes and builders

# precedence levels, lowest first (SPEC §1)
ADD, FROB, MUL, NEG, POW, ATOM = 1, 2, 3, 4, 5, 6


@dataclass(frozen=True)
class Node:
    text: str
    src: str
    ty: Ty
    prec: int = ATOM
    mag: float = 1.0                 # rough typical |entry|
    lo: Optional[float] = None       # lower bound on every entry, if known
    decls: frozenset = frozenset()   # {(name, shape, domain)}
    tags: frozenset = frozenset()    # language features used
    detpos: bool = False             # square, invertible, det > 0
    pd: bool = False                 # symmetric part positive definite
    symm: bool = False               # symmetric

    def __post_init__(self):
        # magnitudes are rough estimates; keep them finite
        m = self.mag
        object.__setattr__(self, "mag", 1e12 if not m < 1e12 else float(m))

    @property
    def syms(self) -> frozenset:
        return frozenset(d[0] for d in self.decls)


def _join(*nodes: Node) -> dict:
    decls = frozenset().union(*(n.decls for n in nodes))
    tags = frozenset().union(*(n.tags for n in nodes))
    return {"decls": decls, "tags": tags}


def _bcast_tag(a: Node, b: Node) -> set:
    return {"broadcast"} if a.ty != b.ty else set()


def _par(n: Node, ok: bool) -> str:
    return n.text if ok else f"({n.text})"


def _left(n: Node, level: int) -> str:
    return _par(n, n.prec >= level)


def _right(n: Node, level: int) -> str:
    # left associative: an operand of the same level on the right needs
    # parentheses; a unary minus on the right gets them for readability.
    return _par(n, n.prec > level and n.prec != NEG)


def _fmt_number(v: float) -> str:
    v = float(v)
    if v.is_integer():
        return str(int(v))
    return repr(v)


def _positive(n: Node, margin: float = 0.0) -> bool:
    return n.lo is not None and n.lo > margin


def sym(name: str, ty: Ty, domain: str = "normal") -> Node:
    """A symbol.  domain: normal | positive | spd | invertible."""
    shape = _shape_of(ty)
    mag, lo, flags = 1.0, None, {}
    if domain == "positive":
        mag, lo = 1.5, 0.2
    elif domain == "spd":
        if not ty.square:
            raise TypeError("an spd symbol must be a square matrix")
        mag, flags = 1.5, dict(detpos=True, pd=True, symm=True)
    elif domain == "invertible":
        if not ty.square:
            raise TypeError("an invertible symbol must be a square matrix")
        mag, flags = 2.0, dict(detpos=True)
    elif domain != "normal":
        raise ValueError(f"unknown domain {domain!r}")
    return Node(name, name, ty, ATOM, mag, lo,
                decls=frozenset({(name, shape, domain)}),
                tags=frozenset({"sym:" + domain}), **flags)


def number(v: float) -> Node:
    if v < 0:
        return neg(number(-v))
    return Node(_fmt_number(v), repr(float(v)), SCALAR, ATOM, abs(float(v)),
                float(v) if v > 0 else None, tags=frozenset({"number"}))


def identity(d: str, spelling: str = "I") -> Node:
    """I / eye of size d.  Only use it next to an operand of known shape."""
    if spelling not in ("I", "eye"):
        raise ValueError(spelling)
    return Node(spelling, f"np.eye(_n[{d!r}])", mat(d, d), ATOM, 1.0, None,
                tags=frozenset({spelling}), detpos=True, pd=True, symm=True)


def _elementwise_ty(a: Node, b: Node, what: str) -> Ty:
    if a.ty == b.ty:
        return a.ty
    if a.ty.kind == "scalar":
        return b.ty
    if b.ty.kind == "scalar":
        return a.ty
    raise TypeError(f"{what}: {a.ty} and {b.ty}")


def add(a: Node, b: Node, sp: str = " ") -> Node:
    ty = _elementwise_ty(a, b, "+")
    lo = a.lo + b.lo if (a.lo is not None and b.lo is not None) else None
    j = _join(a, b)
    pd = a.ty == b.ty and a.pd and b.pd          # PD + PD is PD
    return Node(f"{_left(a, ADD)}{sp}+{sp}{_right(b, ADD)}",
                f"({a.src} + {b.src})", ty, ADD, a.mag + b.mag, lo,
                decls=j["decls"], tags=j["tags"] | {"+"} | _bcast_tag(a, b),
                detpos=pd, pd=pd, symm=pd and a.symm and b.symm)


def sub(a: Node, b: Node, sp: str = " ") -> Node:
    ty = _elementwise_ty(a, b, "-")
    j = _join(a, b)
    return Node(f"{_left(a, ADD)}{sp}-{sp}{_right(b, ADD)}",
                f"({a.src} - {b.src})", ty, ADD, a.mag + b.mag, None,
                decls=j["decls"], tags=j["tags"] | {"-"} | _bcast_tag(a, b))


def had(a: Node, b: Node, op: str = "*") -> Node:
    """Hadamard product (or scalar times array): * ∘ ⊙."""
    if op not in ("*", "∘", "⊙"):
        raise ValueError(op)
    ty = _elementwise_ty(a, b, op)
    if a.text == b.text:
        lo = 0.0 if a.lo is None else a.lo * a.lo
    elif a.lo is not None and b.lo is not None:
        lo = a.lo * b.lo
    else:
        lo = None
    tags = {"*", "*" + op} | _bcast_tag(a, b) | ({"unicode"} if op != "*" else set())
    j = _join(a, b)
    flags = {}
    for s, m in ((a, b), (b, a)):               # positive scalar × det>0 matrix
        if s.ty == SCALAR and _positive(s) and m.detpos:
            flags = dict(detpos=True, pd=m.pd, symm=m.symm)
    return Node(f"{_left(a, MUL)}{op}{_right(b, MUL)}",
                f"({a.src} * {b.src})", ty, MUL, a.mag * b.mag, lo,
                decls=j["decls"], tags=j["tags"] | tags, **flags)


def div(a: Node, b: Node, op: str = "/") -> Node:
    if op not in ("/", "⊘"):
        raise ValueError(op)
    ty = _elementwise_ty(a, b, op)
    blo = b.lo if b.lo is not None else 0.05
    lo = a.lo / b.mag if (a.lo is not None and b.lo is not None) else None
    tags = {"/", "/" + op} | _bcast_tag(a, b) | ({"unicode"} if op != "/" else set())
    j = _join(a, b)
    return Node(f"{_left(a, MUL)}{op}{_right(b, MUL)}",
                f"({a.src} / {b.src})", ty, MUL, a.mag / max(blo, 0.05), lo,
                decls=j["decls"], tags=j["tags"] | tags)


def matmul(a: Node, b: Node) -> Node:
    ka, kb = a.ty.kind, b.ty.kind
    src = f"({a.src} @ {b.src})"
    mag = a.mag * b.mag * 2.0
    if ka == "mat" and kb == "mat" and a.ty.dims[1] == b.ty.dims[0]:
        ty, tag = mat(a.ty.dims[0], b.ty.dims[1]), "@mm"
    elif ka == "mat" and kb == "col" and a.ty.dims[1] == b.ty.dims[0]:
        ty, tag = col(a.ty.dims[0]), "@mv"
    elif ka == "row" and kb == "mat" and a.ty.dims[0] == b.ty.dims[0]:
        ty, tag = row(b.ty.dims[1]), "@vm"
    elif ka == "row" and kb == "col" and a.ty.dims == b.ty.dims:
        ty, tag = SCALAR, "@dot"                   # x.T@y
    elif ka == "col" and kb == "col" and a.ty.dims == b.ty.dims:
        ty, tag = SCALAR, "@vecvec"                # x@y: inner product
    elif ka == "col" and kb == "row":
        ty, tag = mat(a.ty.dims[0], b.ty.dims[0]), "@outer"  # x@y.T
        src = f"np.outer({a.src}, {b.src})"
        mag = a.mag * b.mag
    else:
        raise TypeError(f"@: {a.ty} and {b.ty}")
    j = _join(a, b)
    return Node(f"{_left(a, MUL)}@{_right(b, MUL)}", src, ty, MUL, mag, None,
                decls=j["decls"], tags=j["tags"] | {"@", tag},
                detpos=a.detpos and b.detpos)           # det(AB) = det A det B


def matmul_ones(a: Node) -> Node:
    """``M@1`` (M times the all-ones vector) or ``r@1`` for a row r (a sum)."""
    if a.ty.kind == "mat":
        k, ty = a.ty.dims[1], col(a.ty.dims[0])
    elif a.ty.kind == "row":
        k, ty = a.ty.dims[0], SCALAR
    else:
        raise TypeError(f"@1 of {a.ty}")
    j = _join(a)
    return Node(f"{_left(a, MUL)}@1", f"({a.src} @ np.ones(_n[{k!r}]))", ty,
                MUL, a.mag * 4.0, None, decls=j["decls"],
                tags=j["tags"] | {"@", "ones", "ones@"})


def _array_size(ty: Ty) -> float:
    return {"col": 4.0, "row": 4.0, "mat": 10.0}.get(ty.kind, 1.0)


def frob(a: Node, b: Node) -> Node:
    if a.ty != b.ty or a.ty.kind == "scalar":
        raise TypeError(f":: {a.ty} and {b.ty}")
    lo = 0.0 if a.text == b.text else None
    j = _join(a, b)
    return Node(f"{_left(a, FROB)}:{_right(b, FROB)}",
                f"np.sum({a.src} * {b.src})", SCALAR, FROB,
                a.mag * b.mag * _array_size(a.ty), lo, decls=j["decls"],
                tags=j["tags"] | {":", ":" + a.ty.kind})


def frob_ones(a: Node, ones_left: bool = False) -> Node:
    """``A:1`` or ``1:A`` -- the sum of entries."""
    if a.ty.kind == "scalar":
        raise TypeError(":1 of a scalar")
    text = f"1:{_right(a, FROB)}" if ones_left else f"{_left(a, FROB)}:1"
    lo = a.lo * 2 if a.lo is not None else None
    j = _join(a)
    return Node(text, f"np.sum({a.src})", SCALAR, FROB,
                a.mag * _array_size(a.ty), lo, decls=j["decls"],
                tags=j["tags"] | {":", "ones", "ones:"})


def neg(a: Node) -> Node:
    j = _join(a)
    return Node("-" + _par(a, a.prec >= POW), f"(-{a.src})", a.ty, NEG,
                a.mag, None, decls=j["decls"], tags=j["tags"] | {"neg"},
                symm=a.symm)


def power(a: Node, k: Node) -> Node:
    """``a ** k``, k a scalar node (a number, a negated number or a symbol)."""
    if k.ty != SCALAR:
        raise TypeError("exponent must be a scalar")
    kv = _number_value(k)
    if kv is not None and float(kv).is_integer() and kv > 0:
        mag = min(a.mag, 1e6) ** kv
        if a.lo is not None:
            lo = a.lo ** kv
        elif int(kv) % 2 == 0:
            lo = 0.0
        else:
            lo = None
    elif kv is not None:
        if not _positive(a):
            raise TypeError(f"{a.text} ** {kv}: base must be positive")
        if kv > 0:
            mag, lo = min(a.mag, 1e6) ** kv, a.lo ** kv
        else:
            mag, lo = (1.0 / a.lo) ** (-kv), min(a.mag, 1e6) ** kv
    else:
        if not _positive(a):
            raise TypeError(f"{a.text} ** {k.text}: base must be positive")
        big = min(max(a.mag, 1.0 / a.lo), 1e4)
        mag, lo = big ** 3, big ** -3
    j = _join(a, k)
    tag = "**int" if kv is not None and float(kv).is_integer() and kv > 0 else (
        "**real" if kv is not None else "**sym")
    return Node(f"{_par(a, a.prec == ATOM)}**{_par(k, k.prec == ATOM)}",
                f"({a.src} ** {k.src})", a.ty, POW, mag, lo,
                decls=j["decls"], tags=j["tags"] | {"**", tag})


def _number_value(k: Node) -> Optional[float]:
    try:
        return float(eval(k.src, {"__builtins__": {}}, {}))
    except Exception:
        return None


TRANSPOSE_SPELLINGS = (".T", "'", "ᵀ", "^T")


def transpose(a: Node, spelling: str = ".T") -> Node:
    if spelling not in TRANSPOSE_SPELLINGS:
        raise ValueError(spelling)
    k = a.ty.kind
    if k == "col":
        ty, src = row(a.ty.dims[0]), a.src
    elif k == "row":
        ty, src = col(a.ty.dims[0]), a.src
    elif k == "mat":
        ty, src = mat(a.ty.dims[1], a.ty.dims[0]), f"({a.src}).T"
    else:
        raise TypeError("transpose of a scalar")
    j = _join(a)
    tags = j["tags"] | {"T", "T" + spelling} | ({"row"} if ty.kind == "row" else set())
    return Node(_par(a, a.prec == ATOM) + spelling, src, ty, ATOM, a.mag, a.lo,
                decls=j["decls"], tags=tags,
                detpos=a.detpos, pd=a.pd, symm=a.symm)


def _sigmoid_lo(m: float) -> float:
    return 1.0 / (1.0 + math.exp(min(m, 700.0)))


# name -> numpy template
ELEMENTWISE = {
    "exp": "np.exp({})",
    "log": "np.log({})",
    "sqrt": "np.sqrt({})",
    "sin": "np.sin({})",
    "cos": "np.cos({})",
    "tanh": "np.tanh({})",
    "sigmoid": "_sigmoid({})",
    "relu": "np.maximum({}, 0.0)",
    "step": "np.heaviside({}, 0.0)",
    "abs": "np.abs({})",
    "sign": "np.sign({})",
    "softplus": "np.logaddexp(0.0, {})",
    "cosh": "np.cosh({})",
    "sinh": "np.sinh({})",
    "tan": "np.tan({})",
    "arcsin": "np.arcsin({})",
    "arccos": "np.arccos({})",
    "arctan": "np.arctan({})",
    "log1p": "np.log1p({})",
    "expm1": "np.expm1({})",
    "erf": "_erf({})",
    "gelu": "_gelu({})",
    "silu": "_silu({})",
    "logsigmoid": "_logsigmoid({})",
    "gammaln": "_gammaln({})",
    "digamma": "_digamma({})",
}

# reductions along an axis: name -> numpy template of (array, axis); rows/columns as 1-D
AXIS_REDUCTIONS = {
    "sum": "np.sum({}, axis={})",
    "mean": "np.mean({}, axis={})",
    "logsumexp": "_logsumexp_axis({}, {})",
    "softmax": "_softmax_axis({}, {})",
}

REDUCTIONS = {
    "sum": "np.sum({})",
    "tr": "np.trace({})",
    "det": "np.linalg.det({})",
    "logdet": "_logdet({})",
    "inv": "np.linalg.inv({})",
    "diag": "np.diag({})",
    "Diag": "np.diag({})",
    "norm2": "np.sqrt(np.sum(np.square({})))",
    "norm1": "np.sum(np.abs({}))",
    "logsumexp": "_logsumexp({})",
    "softmax": "_softmax({})",
}


def call(fname: str, a: Node) -> Node:
    """A function call: elementwise functions and reductions of SPEC §1."""
    m, lo, flags = a.mag, None, {}
    k = a.ty.kind
    if fname in ELEMENTWISE:
        ty = a.ty
        src = ELEMENTWISE[fname].format(a.src)
        if fname in ("log", "sqrt", "gammaln", "digamma") and not _positive(a):
            raise TypeError(f"{fname} of a possibly non-positive {a.text}")
        if fname == "exp":
            m = math.exp(min(1.5 * a.mag, 50.0))
            lo = math.exp(-min(1.5 * a.mag, 50.0))
        elif fname == "log":
            m = max(abs(math.log(a.lo)), math.log(max(a.mag, 1.0))) + 1.0
        elif fname == "sqrt":
            m, lo = math.sqrt(a.mag), math.sqrt(a.lo)
        elif fname == "gammaln":  # log Γ: −log x near 0, x log x far out
            m = max(abs(math.log(a.lo)), a.mag * math.log(max(a.mag, 1.0))) + 1.0
        elif fname == "digamma":  # ψ(x) ≈ −1/x near 0, log x far out
            m = 1.0 / a.lo + math.log(max(a.mag, 1.0)) + 1.0
        elif fname in ("sin", "cos", "tanh", "sign"):
            m = 1.0
        elif fname == "sigmoid":
            m, lo = 1.0, _sigmoid_lo(a.mag)
        elif fname in ("relu", "abs"):
            lo = 0.0
        elif fname == "step":
            m, lo = 1.0, 0.0
        elif fname == "softplus":
            m, lo = a.mag + 0.7, math.log1p(math.exp(-min(a.mag, 50.0)))
        elif fname in ("cosh", "sinh"):
            m = math.cosh(min(a.mag, 50.0))
            lo = 1.0 if fname == "cosh" else None
        elif fname == "tan":
            if a.mag > 1.2:
                raise TypeError(f"tan of a possibly large {a.text}")
            m = math.tan(a.mag)
        elif fname in ("arcsin", "arccos"):
            if a.mag > 0.9:
                raise TypeError(f"{fname} of a possibly large {a.text}")
            m = 3.2
            lo = math.acos(min(a.mag, 1.0)) if fname == "arccos" else None
        elif fname == "arctan":
            m = 1.6
        elif fname == "log1p":
            if not _positive(a):
                raise TypeError(f"log1p of a possibly non-positive {a.text}")
            m, lo = math.log1p(a.mag), math.log1p(a.lo) if a.lo else None
        elif fname == "expm1":
            m = math.exp(min(1.5 * a.mag, 50.0))
        elif fname == "erf":
            m = 1.0
        elif fname in ("gelu", "silu"):
            m = a.mag
        elif fname == "logsigmoid":
            m = a.mag + 0.7
    elif fname in REDUCTIONS:
        src = REDUCTIONS[fname].format(a.src)
        if fname == "sum":
            if k == "scalar":
                raise TypeError("sum of a scalar")
            ty, m = SCALAR, a.mag * _array_size(a.ty)
            lo = a.lo * 2 if a.lo is not None else None
        elif fname == "tr":
            if not a.ty.square:
                raise TypeError(f"tr of {a.ty}")
            ty, m = SCALAR, a.mag * 3
        elif fname in ("det", "logdet", "inv"):
            if not a.ty.square:
                raise TypeError(f"{fname} of {a.ty}")
            if not a.detpos:
                raise TypeError(f"{fname} of {a.text}: det > 0 not guaranteed")
            if fname == "det":
                ty, m = SCALAR, max(a.mag, 1.0) ** 4
            elif fname == "logdet":
                ty, m = SCALAR, 2.0 + 4.0 * math.log(max(a.mag, 1.0))
            else:
                ty, m = a.ty, 1.5
                flags = dict(detpos=True, pd=a.pd, symm=a.symm)
        elif fname == "diag":
            if not a.ty.square:
                raise TypeError(f"diag of {a.ty}")
            ty = col(a.ty.dims[0])
        elif fname == "Diag":
            if k != "col":
                raise TypeError(f"Diag of {a.ty}")
            ty = mat(a.ty.dims[0], a.ty.dims[0])
            if _positive(a, 0.0):
                flags = dict(detpos=True, pd=True, symm=True)
            else:
                flags = dict(symm=True)
        elif fname in ("norm2", "norm1"):
            if k == "scalar" or (fname == "norm1" and k != "col"):
                raise TypeError(f"{fname} of {a.ty}")
            ty, m, lo = SCALAR, a.mag * _array_size(a.ty), 0.0
        elif fname == "logsumexp":
            if k != "col":
                raise TypeError(f"logsumexp of {a.ty}")
            ty, m = SCALAR, a.mag + 2.0
        elif fname == "softmax":
            if k != "col":
                raise TypeError(f"softmax of {a.ty}")
            ty, m, lo = a.ty, 1.0, math.exp(-2.0 * min(a.mag, 50.0)) / 6.0
    else:
        raise ValueError(f"unknown function {fname}")
    j = _join(a)
    return Node(f"{fname}({a.text})", src, ty, ATOM, m, lo,
                decls=j["decls"], tags=j["tags"] | {fname}, **flags)


def call_axis(fname: str, a: Node, axis: int) -> Node:
    """sum/mean/logsumexp/softmax of a matrix along an axis (0: down the columns)."""
    if a.ty.kind != "mat":
        raise TypeError(f"{fname} along an axis of {a.ty}")
    r, c = a.ty.dims
    src = AXIS_REDUCTIONS[fname].format(a.src, axis)
    m, lo = a.mag, None
    if fname == "softmax":
        ty, m, lo = a.ty, 1.0, math.exp(-2.0 * min(a.mag, 50.0)) / 6.0
    else:
        ty = row(c) if axis == 0 else col(r)
        if fname == "sum":
            m = a.mag * 6
        elif fname == "logsumexp":
            m = a.mag + 2.0
    j = _join(a)
    return Node(f"{fname}({a.text}, {axis})", src, ty, ATOM, m, lo,
                decls=j["decls"], tags=j["tags"] | {fname + "_axis"})


def matrix_power(a: Node, k: int) -> Node:
    """matrix_power(A, k) of a square matrix (k < 0 only of a matrix with det > 0)."""
    if a.ty.kind != "mat" or not a.ty.square:
        raise TypeError(f"matrix_power of {a.ty}")
    if k < 0 and not a.detpos:
        raise TypeError(f"matrix_power({a.text}, {k}): det > 0 not guaranteed")
    j = _join(a)
    return Node(f"matrix_power({a.text}, {k})", f"np.linalg.matrix_power({a.src}, {k})", a.ty, ATOM,
                max(a.mag, 1.0) ** abs(k) * 3 ** (abs(k) - 1) if k > 0 else 2.0, None,
                decls=j["decls"], tags=j["tags"] | {"matrix_power"})


def _with(n: Node, **kw) -> Node:
    return replace(n, **kw)


# --------------------------------------------------------------------------
# NumPy evaluation of the generated source

def _h_sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _h_logdet(X):
    sign, val = np.linalg.slogdet(X)
    return val if sign > 0 else float("nan")


def _h_logsumexp(v):
    mx = np.max(v)
    return mx + np.log(np.sum(np.exp(v - mx)))


def _h_softmax(v):
    z = np.exp(v - np.max(v))
    return z / np.sum(z)


def _h_erf(x):
    from scipy.special import erf
    return erf(x)


def _h_gelu(x):
    from scipy.stats import norm
    return x * norm.cdf(x)


def _h_gammaln(x):
    from scipy.special import gammaln
    return gammaln(x)


def _h_digamma(x):
    from scipy.special import digamma
    return digamma(x)


def _h_silu(x):
    return x * _h_sigmoid(x)


def _h_logsigmoid(x):
    return -np.logaddexp(0.0, -x)


def _h_logsumexp_axis(X, axis):
    mx = np.max(X, axis=axis, keepdims=True)
    return np.squeeze(mx, axis) + np.log(np.sum(np.exp(X - mx), axis=axis))


def _h_softmax_axis(X, axis):
    z = np.exp(X - np.max(X, axis=axis, keepdims=True))
    return z / np.sum(z, axis=axis, keepdims=True)


_HELPERS = {"np": np, "_sigmoid": _h_sigmoid, "_logdet": _h_logdet,
            "_logsumexp": _h_logsumexp, "_softmax": _h_softmax, "_erf": _h_erf, "_gelu": _h_gelu,
            "_silu": _h_silu, "_logsigmoid": _h_logsigmoid, "_logsumexp_axis": _h_logsumexp_axis,
            "_softmax_axis": _h_softmax_axis, "_gammaln": _h_gammaln, "_digamma": _h_digamma}


def _dim_sizes(shapes: Dict[str, tuple], inputs: dict) -> Dict[str, int]:
    sizes: Dict[str, int] = {}
    for name, shape in shapes.items():
        if name not in inputs:
            continue
        actual = np.shape(inputs[name])
        for d, s in zip(shape, actual):
            if isinstance(d, str):
                sizes[d] = s
    return sizes


class _Evaluator:
    """f(**inputs) -> float for a NumPy source string (picklable, readable)."""

    def __init__(self, src: str, shapes: Dict[str, tuple]):
        self.src = src
        self.shapes = dict(shapes)
        self._code = compile(src, "<exprgen>", "eval")

    def __call__(self, **inputs) -> float:
        env = dict(_HELPERS)
        env["_n"] = _dim_sizes(self.shapes, inputs)
        env.update(inputs)
        with np.errstate(all="ignore"):
            val = eval(self._code, env)
        if np.ndim(val) != 0:
            raise ValueError(f"not a scalar: shape {np.shape(val)} from {self.src}")
        return float(val)

    def __repr__(self) -> str:
        return f"lambda **inputs: {self.src}"


# --------------------------------------------------------------------------
# Inputs

def _draw_value(rng: np.random.Generator, shape: Tuple[int, ...], domain: str):
    if domain == "normal":
        v = rng.standard_normal(shape)
    elif domain == "positive":
        v = rng.uniform(0.2, 2.0, shape)
    elif domain == "spd":
        n = shape[0]
        R = rng.standard_normal((n, n))
        v = R @ R.T / n + np.eye(n)
    elif domain == "invertible":
        n = shape[0]
        for _ in range(1000):
            v = 2.0 * np.eye(n) + rng.standard_normal((n, n)) / math.sqrt(n)
            if np.linalg.det(v) > 0 and np.linalg.svd(v, compute_uv=False)[-1] > 0.5:
                break
        else:  # pragma: no cover
            raise RuntimeError("could not draw an invertible matrix")
    else:
        raise ValueError(f"unknown domain {domain!r}")
    return float(v) if shape == () else v


def draw_inputs(shapes: Dict[str, tuple], domains: Dict[str, str],
                rng: np.random.Generator, sizes: Optional[Dict[str, int]] = None
                ) -> dict:
    """Draw every symbol: scalars as floats, vectors 1-D, matrices 2-D.

    ``sizes`` maps symbolic dims to distinct concrete sizes (default
    :data:`DEFAULT_SIZES`); ints in a shape are used as they are.
    """
    sizes = dict(DEFAULT_SIZES if sizes is None else sizes)
    out = {}
    for name in sorted(shapes):
        shape = tuple(sizes[d] if isinstance(d, str) else int(d) for d in shapes[name])
        out[name] = _draw_value(rng, shape, domains.get(name, "normal"))
    return out


# --------------------------------------------------------------------------
# Cases

# Greek names that SPEC §2 lists explicitly as scalars by default.
_SPEC_GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "lambda", "mu",
               "sigma", "tau"}


def default_shape_kind(name: str) -> str:
    """The kind SPEC §2 gives a name by default: scalar | col | mat."""
    if name[0].isupper():
        return "mat"
    if name in _SPEC_GREEK:
        return "scalar"
    return "col"


def _kind_of_shape(shape: tuple) -> str:
    return {0: "scalar", 1: "col", 2: "mat"}[len(shape)]


@dataclass
class Case:
    expr: str
    shapes: Dict[str, tuple]
    domains: Dict[str, str]
    wrt: List[str]
    f: Callable[..., float]
    draw_inputs: Callable[..., dict]
    numpy_src: str = ""
    # Only the declarations a user would have to write when relying on the
    # default kinds of SPEC §2 (dims of default-kind symbols are left to
    # inference): e.g. {"mu": ("a",), "s": ()}.
    declared: Dict[str, tuple] = field(default_factory=dict)
    features: frozenset = frozenset()

    def __repr__(self) -> str:
        return (f"Case(expr={self.expr!r}, shapes={self.shapes!r}, "
                f"domains={self.domains!r}, wrt={self.wrt!r}, "
                f"numpy_src={self.numpy_src!r})")


def make_case(node: Node, wrt: Optional[Sequence[str]] = None) -> Case:
    """Turn a scalar node into a Case."""
    if node.ty != SCALAR:
        raise TypeError(f"λ must be a scalar, got {node.ty}")
    shapes: Dict[str, tuple] = {}
    domains: Dict[str, str] = {}
    for name, shape, domain in sorted(node.decls):
        if name in shapes and (shapes[name] != shape or domains[name] != domain):
            raise TypeError(f"symbol {name} declared twice: {shape}/{domain} "
                            f"and {shapes[name]}/{domains[name]}")
        shapes[name], domains[name] = shape, domain
    if wrt is None:
        wrt = sorted(shapes)
    declared = {n: s for n, s in shapes.items()
                if default_shape_kind(n) != _kind_of_shape(s)}
    return Case(expr=node.text, shapes=shapes, domains=domains, wrt=list(wrt),
                f=_Evaluator(node.src, shapes),
                draw_inputs=partial(draw_inputs, shapes, domains),
                numpy_src=node.src, declared=declared, features=node.tags)


# --------------------------------------------------------------------------
# Choosers: where the random decisions come from

class _RngChooser:
    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def weighted(self, weights: Sequence[int]) -> int:
        w = np.asarray(weights, dtype=float)
        return int(self.rng.choice(len(w), p=w / w.sum()))


class _DrawChooser:
    """Hypothesis-driven; shrinks towards the first option."""

    def __init__(self, draw):
        self.draw = draw

    def weighted(self, weights: Sequence[int]) -> int:
        total = sum(weights)
        r = self.draw(st.integers(0, total - 1))
        for i, w in enumerate(weights):
            if r < w:
                return i
            r -= w
        return len(weights) - 1  # pragma: no cover


# --------------------------------------------------------------------------
# The generator

# symbol pools: (kind, domain) -> names.  Non-default kinds on purpose:
# s, t, r are declared scalars, mu a declared vector, k a declared matrix;
# sigma (scalar) and Sigma (matrix) are different symbols.
POOLS = {
    ("scalar", "normal"): ["alpha", "gamma", "delta", "tau", "s", "t"],
    ("scalar", "positive"): ["beta", "sigma", "r"],
    ("col", "normal"): ["x", "y", "z", "u", "v", "w", "c", "h", "mu", "b0"],
    ("col", "positive"): ["p", "q"],
    ("mat", "normal"): ["A", "B", "C", "W", "X", "Y", "W0", "W1", "k"],
    ("mat", "positive"): ["P", "Q"],
    ("mat", "spd"): ["S", "Sigma", "S1"],
    ("mat", "invertible"): ["V", "U"],
}

NUMBERS = (2, 0.5, 3, 1, 1.5, 0.25)

MAG_CAP = 10.0     # larger subexpressions are squashed (tanh, sin, ...)
TAME = 3.0         # bound on the argument of exp
LEAF_WEIGHT = {1: 7, 2: 4, 3: 2}   # vs 10 for a composite node


class _Gen:
    def __init__(self, chooser, max_depth: int = 4, exclude=frozenset(),
                 max_nodes: int = 40):
        self.ch = chooser
        self.max_depth = max_depth
        self.exclude = frozenset(exclude)
        self.nodes_left = max_nodes
        self.registry: Dict[str, Tuple[Ty, str]] = {}

    # -- choices --------------------------------------------------------
    def pick(self, options):
        """options: [(weight, tag, thunk)]; excluded tags are dropped."""
        opts = [o for o in options
                if o[0] > 0 and (o[1] is None or o[1] not in self.exclude)]
        if not opts:
            raise _Excluded()
        return opts[self.ch.weighted([o[0] for o in opts])][2]()

    def one_of(self, values, weights=None):
        weights = weights or [1] * len(values)
        return values[self.ch.weighted(weights)]

    def dim(self) -> str:
        return self.one_of(DIMS)

    def sp(self) -> str:
        return self.one_of([" ", ""], [3, 1])

    def mul_op(self) -> str:
        return self.pick([(6, None, lambda: "*"), (1, "unicode", lambda: "∘"),
                          (1, "unicode", lambda: "⊙")])

    def div_op(self) -> str:
        return self.pick([(6, None, lambda: "/"), (1, "unicode", lambda: "⊘")])

    def tr_op(self) -> str:
        return self.pick([(6, None, lambda: ".T"), (1, "prime", lambda: "'"),
                          (1, "unicode", lambda: "ᵀ"), (1, "caret", lambda: "^T")])

    def eye(self, d: str) -> Node:
        return identity(d, self.pick([(8, None, lambda: "I"),
                                      (1, "eye", lambda: "eye")]))

    # -- symbols --------------------------------------------------------
    def symbol(self, ty: Ty, domain: str = "normal") -> Node:
        same = sorted(n for n, (t, d) in self.registry.items()
                      if t == ty and d == domain)
        pool = [n for n in POOLS[(ty.kind, domain)] if n not in self.registry]

        def reuse():
            return self.one_of(same)

        def fresh():
            if pool:
                return self.one_of(pool)
            base = POOLS[(ty.kind, domain)][0]
            i = 2
            while f"{base}{i}" in self.registry:
                i += 1
            return f"{base}{i}"

        opts = []
        if same:
            opts.append((3, None, reuse))
        opts.append((1 if same else 2, None, fresh))
        name = self.pick(opts)
        self.registry[name] = (ty, domain)
        return sym(name, ty, domain)

    # -- generic entry points ------------------------------------------
    def gen(self, ty: Ty, depth: int) -> Node:
        if depth <= 0 or self.nodes_left <= 0 or self.ch.weighted(
                [LEAF_WEIGHT.get(depth, 2), 10]) == 0:
            node = self.leaf(ty)
        else:
            self.nodes_left -= 1
            node = self.composite(ty, depth - 1)
        if node.mag > MAG_CAP:
            node = self.squash(node)
        return node

    def composite(self, ty: Ty, depth: int) -> Node:
        fn = {"scalar": self._scalar, "col": self._col, "row": self._row,
              "mat": self._mat}[ty.kind]
        try:
            return fn(ty, depth)
        except _Excluded:
            return self.leaf(ty)

    def bounded(self, ty: Ty, depth: int, bound: float) -> Node:
        node = self.gen(ty, depth)
        return self.squash(node) if node.mag > bound else node

    def tame(self, ty: Ty, depth: int) -> Node:
        return self.bounded(ty, depth, TAME)

    def squash(self, node: Node) -> Node:
        """Bring a large subexpression back to O(1) without flattening it:
        sin/cos keep |derivative| = |node'|, a log grows slowly, and tanh /
        sigmoid get a scaled-down argument (a saturated tanh would have a
        gradient below what finite differences can resolve)."""
        def scaled(f):
            c = next((c for c in (0.5, 0.25, 0.1, 0.05, 0.01) if c * node.mag <= 1.5),
                     0.001)
            return lambda: call(f, had(number(c), node, self.mul_op()))

        def log1sq():
            return call("log", add(number(1), had(node, node, self.mul_op()), self.sp()))

        periodic = 3 if node.mag <= 20 else 0   # no sin(huge): too oscillatory
        short = 1 if len(node.text) <= 30 else 0  # log1sq repeats the text
        return self.pick([(periodic, None, lambda: call("sin", node)),
                          (periodic // 3, None, lambda: call("cos", node)),
                          (2, None, scaled("tanh")),
                          (1, None, scaled("sigmoid")),
                          (short, None, log1sq)])

    def array_ty(self) -> Ty:
        return self.pick([(3, None, lambda: col(self.dim())),
                          (1, "row", lambda: row(self.dim())),
                          (3, None, lambda: mat(self.dim(), self.dim()))])

    def square(self) -> Ty:
        d = self.dim()
        return mat(d, d)

    # -- leaves ---------------------------------------------------------
    def leaf(self, ty: Ty) -> Node:
        if ty.kind == "scalar":
            return self.pick([
                (4, None, lambda: self.symbol(SCALAR)),
                (2, None, lambda: number(self.one_of(NUMBERS))),
                (1, None, lambda: self.symbol(SCALAR, "positive")),
            ])
        if ty.kind == "col":
            return self.pick([(4, None, lambda: self.symbol(ty)),
                              (1, None, lambda: self.symbol(ty, "positive"))])
        if ty.kind == "row":
            return transpose(self.leaf(col(ty.dims[0])), self.tr_op())
        r, c = ty.dims
        opts = [(4, None, lambda: self.symbol(ty)),
                (2, "T", lambda: transpose(self.symbol(mat(c, r)), self.tr_op())),
                (1, None, lambda: self.symbol(ty, "positive"))]
        if r == c:
            opts += [(1, None, lambda: self.symbol(ty, "spd")),
                     (1, None, lambda: self.symbol(ty, "invertible"))]
        return self.pick(opts)

    # -- shared productions --------------------------------------------
    def bin_add(self, ty: Ty, d: int) -> Node:
        return add(self.gen(ty, d), self.gen(ty, d), self.sp())

    def bin_sub(self, ty: Ty, d: int) -> Node:
        a, b = self.gen(ty, d), self.gen(ty, d)
        if a.text == b.text:  # avoid structural zeros (norm2(x - x) ...)
            return add(a, b, self.sp())
        return sub(a, b, self.sp())

    def broadcast(self, ty: Ty, d: int) -> Node:
        """array ± scalar (a scalar broadcasts)."""
        arr, s = self.gen(ty, d), self.gen(SCALAR, d)
        return self.pick([
            (2, None, lambda: add(arr, s, self.sp())),
            (1, None, lambda: add(s, arr, self.sp())),
            (2, "-", lambda: sub(arr, s, self.sp())),
            (1, "-", lambda: sub(s, arr, self.sp())),
        ])

    def hadamard(self, ty: Ty, d: int) -> Node:
        return had(self.bounded(ty, d, 5.0), self.bounded(ty, d, 5.0), self.mul_op())

    def scale(self, ty: Ty, d: int) -> Node:
        s, arr = self.bounded(SCALAR, d, 5.0), self.bounded(ty, d, 5.0)
        if self.one_of([0, 1], [3, 1]):
            return had(arr, s, self.mul_op())
        return had(s, arr, self.mul_op())

    def divide(self, ty: Ty, d: int) -> Node:
        """array/positive array, array/positive scalar, scalar/positive array."""
        opts = [(2, None, lambda: div(self.gen(ty, d), self.pos(ty, d), self.div_op()))]
        if ty.kind != "scalar":
            opts += [(1, None, lambda: div(self.gen(ty, d), self.pos(SCALAR, d), self.div_op())),
                     (1, None, lambda: div(self.gen(SCALAR, d), self.pos(ty, d), self.div_op()))]
        return self.pick(opts)

    def elementwise(self, ty: Ty, d: int) -> Node:
        def plain(f):
            return lambda: call(f, self.gen(ty, d))
        return self.pick([
            (3, "exp", lambda: call("exp", self.tame(ty, d))),
            (2, "log", lambda: call("log", self.pos(ty, d))),
            (1, "sqrt", lambda: call("sqrt", self.pos(ty, d))),
            (1, "sin", plain("sin")), (1, "cos", plain("cos")),
            (1, "tanh", lambda: call("tanh", self.bounded(ty, d, 2.0))),
            (1, "sigmoid", lambda: call("sigmoid", self.bounded(ty, d, 3.0))),
            (2, "relu", plain("relu")), (1, "step", plain("step")),
            (1, "abs", plain("abs")), (1, "sign", plain("sign")),
            (1, "softplus", plain("softplus")),
            (1, "cosh", lambda: call("cosh", self.bounded(ty, d, 3.0))),
            (1, "sinh", lambda: call("sinh", self.bounded(ty, d, 3.0))),
            (1, "tan", lambda: call("tan", had(number(0.8), call("tanh", self.gen(ty, d)), self.mul_op()))),
            (1, "arcsin", lambda: call("arcsin", had(number(0.6), call("tanh", self.gen(ty, d)), self.mul_op()))),
            (1, "arccos", lambda: call("arccos", had(number(0.6), call("tanh", self.gen(ty, d)), self.mul_op()))),
            (1, "arctan", plain("arctan")),
            (1, "log1p", lambda: call("log1p", self.pos(ty, d))),
            (1, "expm1", lambda: call("expm1", self.tame(ty, d))),
            (1, "erf", plain("erf")), (1, "gelu", plain("gelu")), (1, "silu", plain("silu")),
            (1, "logsigmoid", plain("logsigmoid")),
            (1, "gammaln", lambda: call("gammaln", self.pos(ty, d))),
            (1, "digamma", lambda: call("digamma", self.pos(ty, d))),
        ])

    def powered(self, ty: Ty, d: int) -> Node:
        def integer():
            k = self.one_of([2, 3], [3, 1])
            return power(self.bounded(ty, d, 3.0 if k == 2 else 2.0), number(k))

        def real():
            k = self.one_of([0.5, 1.5, -1, -0.5, 2.5])
            return power(self.pos(ty, d, bound=4.0), number(k))

        def symbolic():
            base = self.pos_nice(ty, d)
            k = self.pick([(2, None, lambda: self.symbol(SCALAR)),
                           (1, None, lambda: self.symbol(SCALAR, "positive"))])
            return power(base, k)

        return self.pick([(3, None, integer), (2, None, real), (1, "**sym", symbolic)])

    # -- positive-valued subexpressions --------------------------------
    def pos(self, ty: Ty, d: int, bound: float = MAG_CAP) -> Node:
        """Entrywise positive, bounded away from 0 (lo >~ 0.05)."""
        for _ in range(4):
            node = self._pos(ty, d)
            if node.mag <= bound and _positive(node, 0.001):
                return node
        return self.pos_leaf(ty)

    def pos_leaf(self, ty: Ty) -> Node:
        if ty.kind == "row":
            return transpose(self.symbol(col(ty.dims[0]), "positive"), self.tr_op())
        return self.symbol(ty, "positive")

    def _pos(self, ty: Ty, d: int) -> Node:
        if d <= 0 or self.nodes_left <= 0 or self.ch.weighted(
                [LEAF_WEIGHT.get(d + 1, 2), 10]) == 0:
            return self.pos_leaf(ty)
        self.nodes_left -= 1
        d -= 1

        def one_plus_square():
            e = self.bounded(ty, d, 2.0)
            short = 2 if len(e.text) <= 30 else 0
            return self.pick([
                (short, None, lambda: add(number(1), had(e, e, self.mul_op()), self.sp())),
                (short // 2, None, lambda: add(had(e, e, self.mul_op()), number(1), self.sp())),
                (1, None, lambda: add(number(1), power(e, number(2)), self.sp())),
            ])

        def small_pos():
            return self.pos(ty, d, bound=3.0)

        opts = [
            (3, "exp", lambda: call("exp", self.tame(ty, d))),
            (2, None, one_plus_square),
            (1, "softplus", lambda: call("softplus", self.tame(ty, d))),
            (1, "sigmoid", lambda: call("sigmoid", self.tame(ty, d))),
            (1, "abs", lambda: add(call("abs", self.gen(ty, d)), number(1), self.sp())),
            (1, "relu", lambda: add(call("relu", self.gen(ty, d)), number(0.5), self.sp())),
            (1, "+", lambda: add(self.pos(ty, d), self.pos(ty, d), self.sp())),
            (1, "*", lambda: had(small_pos(), small_pos(), self.mul_op())),
        ]
        if ty.kind == "col":
            opts.append((1, "softmax", lambda: call("softmax", self.tame(ty, d))))
        if ty.kind == "scalar":
            def one_plus_frob():
                e = self.bounded(self.array_ty(), d, 1.0)
                return add(number(1), frob(e, e), self.sp())
            opts += [
                (1, ":", one_plus_frob),
                (1, "norm2", lambda: add(call("norm2", self.bounded(self.array_ty(), d, 2.0)),
                                         number(1), self.sp())),
                (1, "tr", lambda: call("tr", self.symbol(self.square(), "spd"))),
                (1, "det", lambda: call("det", self.symbol(self.square(), "spd"))),
            ]
        return self.pick(opts)

    def pos_nice(self, ty: Ty, d: int) -> Node:
        """Positive with entries in about [0.2, 3] (base of a symbolic power)."""
        return self.pick([
            (3, None, lambda: self.pos_leaf(ty)),
            (1, "exp", lambda: call("exp", self.squash(self.gen(ty, d)))),
            (1, "sigmoid", lambda: add(call("sigmoid", self.gen(ty, d)), number(0.5),
                                       self.sp())),
        ])

    # -- matrices with det > 0 ------------------------------------------
    def spd(self, n: str, d: int, need_pd: bool = False) -> Node:
        """Square n×n, invertible, det > 0 (pd: symmetric part PD, too)."""
        sq = mat(n, n)
        leaf_opts = [(3, None, lambda: self.symbol(sq, "spd"))]
        if not need_pd:
            leaf_opts.append((1, None, lambda: self.symbol(sq, "invertible")))
        if d <= 0 or self.nodes_left <= 0 or self.ch.weighted(
                [LEAF_WEIGHT.get(d + 1, 2), 10]) == 0:
            return self.pick(leaf_opts)
        self.nodes_left -= 1
        d -= 1

        def gram():
            k = self.dim()
            eye = self.eye(n)

            def mmt():
                M = self.bounded(mat(n, k), d, 2.0)
                return matmul(M, transpose(M, self.tr_op()))

            def mtm():
                M = self.bounded(mat(k, n), d, 2.0)
                return matmul(transpose(M, self.tr_op()), M)

            G = self.pick([(2, None, mmt), (1, None, mtm)])
            node = self.pick([(3, None, lambda: add(G, eye, self.sp())),
                              (1, None, lambda: add(eye, G, self.sp()))])
            return _with(node, detpos=True, pd=True, symm=True)

        def diag_pos():
            return call("Diag", self.pos(col(n), d, bound=4.0))

        def pd_sum():
            node = add(self.spd(n, d, True), self.spd(n, d, True), self.sp())
            return _with(node, detpos=True, pd=True)

        def skew():
            P = self.spd(n, d, True)
            K = self.bounded(sq, d, 3.0)
            node = sub(add(P, K, self.sp()), transpose(K, self.tr_op()), self.sp())
            return _with(node, detpos=True, pd=P.pd, symm=False)

        def plus_scaled_eye():
            P = self.spd(n, d, True)
            node = add(P, had(self.pos_leaf(SCALAR), self.eye(n), self.mul_op()), self.sp())
            return _with(node, detpos=True, pd=True, symm=P.symm)

        def product():
            node = matmul(self.spd(n, d), self.spd(n, d))
            return _with(node, detpos=True)

        def inverse():
            return call("inv", self.spd(n, d, need_pd))

        def scaled():
            P = self.spd(n, d, need_pd)
            node = had(self.pos_leaf(SCALAR), P, self.mul_op())
            return _with(node, detpos=True, pd=P.pd, symm=P.symm)

        def transposed():
            P = self.spd(n, d, need_pd)
            return transpose(P, self.tr_op())

        opts = [(3, "@", gram), (1, "Diag", diag_pos), (1, "+", pd_sum),
                (1, "-", skew), (1, "I", plus_scaled_eye), (1, "inv", inverse),
                (1, "*", scaled), (1, "T", transposed)]
        if not need_pd:
            opts.append((1, "@", product))
        try:
            return self.pick(opts)
        except _Excluded:
            return self.pick(leaf_opts)

    def small_spd(self, n: str, d: int) -> Node:
        """det > 0 with a moderate determinant (the argument of det)."""
        sq = mat(n, n)
        S = lambda: self.symbol(sq, "spd")
        return self.pick([
            (4, None, S),
            (1, None, lambda: self.symbol(sq, "invertible")),
            (1, "inv", lambda: call("inv", S())),
            (1, "Diag", lambda: call("Diag", self.pos_leaf(col(n)))),
            (1, "@", lambda: _with(matmul(S(), S()), detpos=True)),
            (1, "T", lambda: transpose(self.symbol(sq, "invertible"), self.tr_op())),
        ])

    # -- productions by type ---------------------------------------------
    def _scalar(self, ty: Ty, d: int) -> Node:
        S = SCALAR

        def frob_pair():
            t = self.array_ty()
            a = self.bounded(t, d, 5.0)
            b = self.pick([(3, None, lambda: self.bounded(t, d, 5.0)), (1, None, lambda: a)])
            return frob(a, b)

        def ones():
            a = self.gen(self.array_ty(), d)

            def row_sum():     # x.T@1
                return matmul_ones(transpose(self.gen(col(self.dim()), d), self.tr_op()))

            return self.pick([(3, None, lambda: frob_ones(a)),
                              (1, None, lambda: frob_ones(a, ones_left=True)),
                              (1, "row", row_sum)])

        def det():
            return call("det", self.small_spd(self.dim(), d))

        def dot():
            k = self.dim()
            return matmul(self.bounded(row(k), d, 5.0), self.bounded(col(k), d, 5.0))

        def inner():
            k = self.dim()
            return matmul(self.bounded(col(k), d, 5.0), self.bounded(col(k), d, 5.0))

        return self.pick([
            (2, "+", lambda: self.bin_add(S, d)),
            (2, "-", lambda: self.bin_sub(S, d)),
            (2, "*", lambda: self.hadamard(S, d)),
            (1, "/", lambda: self.divide(S, d)),
            (1, "neg", lambda: neg(self.gen(S, d))),
            (1, "**", lambda: self.powered(S, d)),
            (2, "fn", lambda: self.elementwise(S, d)),
            (4, ":", frob_pair),
            (2, "ones", ones),
            (3, "sum", lambda: call("sum", self.gen(self.array_ty(), d))),
            (2, "tr", lambda: call("tr", self.gen(self.square(), d))),
            (1, "det", det),
            (2, "logdet", lambda: call("logdet", self.spd(self.dim(), d))),
            (2, "norm2", lambda: call("norm2", self.gen(self.array_ty(), d))),
            (1, "norm1", lambda: call("norm1", self.gen(col(self.dim()), d))),
            (1, "logsumexp", lambda: call("logsumexp", self.gen(col(self.dim()), d))),
            (3, "@", dot),
            (1, "vecvec", inner),
        ])

    def _col(self, ty: Ty, d: int) -> Node:
        n = ty.dims[0]

        def mv():
            k = self.dim()
            return matmul(self.bounded(mat(n, k), d, 5.0), self.bounded(col(k), d, 5.0))

        return self.pick([
            (2, "+", lambda: self.bin_add(ty, d)),
            (2, "-", lambda: self.bin_sub(ty, d)),
            (1, "broadcast", lambda: self.broadcast(ty, d)),
            (2, "*", lambda: self.hadamard(ty, d)),
            (1, "*", lambda: self.scale(ty, d)),
            (1, "/", lambda: self.divide(ty, d)),
            (1, "neg", lambda: neg(self.gen(ty, d))),
            (1, "**", lambda: self.powered(ty, d)),
            (3, "fn", lambda: self.elementwise(ty, d)),
            (4, "@", mv),
            (1, "softmax", lambda: call("softmax", self.bounded(ty, d, 2.0))),
            (1, "diag", lambda: call("diag", self.gen(mat(n, n), d))),
            (1, "row", lambda: transpose(self.gen(row(n), d), self.tr_op())),
            (1, "ones", lambda: matmul_ones(self.gen(mat(n, self.dim()), d))),
            (1, "sum_axis", lambda: call_axis(self.one_of(["sum", "mean", "logsumexp"]),
                                              self.bounded(mat(n, self.dim()), d, 3.0), 1)),
        ])

    def _row(self, ty: Ty, d: int) -> Node:
        n = ty.dims[0]

        def vm():
            k = self.dim()
            return matmul(self.bounded(row(k), d, 5.0), self.bounded(mat(k, n), d, 5.0))

        return self.pick([
            (2, "+", lambda: self.bin_add(ty, d)),
            (1, "-", lambda: self.bin_sub(ty, d)),
            (1, "broadcast", lambda: self.broadcast(ty, d)),
            (1, "*", lambda: self.hadamard(ty, d)),
            (1, "*", lambda: self.scale(ty, d)),
            (1, "/", lambda: self.divide(ty, d)),
            (1, "neg", lambda: neg(self.gen(ty, d))),
            (1, "**", lambda: self.powered(ty, d)),
            (2, "fn", lambda: self.elementwise(ty, d)),
            (3, "@", vm),
            (3, "T", lambda: transpose(self.gen(col(n), d), self.tr_op())),
            (1, "sum_axis", lambda: call_axis(self.one_of(["sum", "mean"]), self.gen(mat(self.dim(), n), d), 0)),
        ])

    def _mat(self, ty: Ty, d: int) -> Node:
        r, c = ty.dims

        def mm():
            k = self.dim()
            return matmul(self.bounded(mat(r, k), d, 5.0), self.bounded(mat(k, c), d, 5.0))

        def outer():
            return matmul(self.bounded(col(r), d, 5.0),
                          self.bounded(row(c), d, 5.0))

        opts = [
            (2, "+", lambda: self.bin_add(ty, d)),
            (2, "-", lambda: self.bin_sub(ty, d)),
            (1, "broadcast", lambda: self.broadcast(ty, d)),
            (2, "*", lambda: self.hadamard(ty, d)),
            (1, "*", lambda: self.scale(ty, d)),
            (1, "/", lambda: self.divide(ty, d)),
            (1, "neg", lambda: neg(self.gen(ty, d))),
            (1, "**", lambda: self.powered(ty, d)),
            (3, "fn", lambda: self.elementwise(ty, d)),
            (4, "@", mm),
            (2, "outer", outer),
            (2, "T", lambda: transpose(self.gen(mat(c, r), d), self.tr_op())),
            (1, "softmax_axis", lambda: call_axis("softmax", self.bounded(ty, d, 3.0), self.one_of([0, 1]))),
        ]
        if r == c:
            opts += [
                (1, "Diag", lambda: call("Diag", self.gen(col(r), d))),
                (1, "inv", lambda: call("inv", self.spd(r, d))),
                (1, "spd", lambda: self.spd(r, d)),
                (1, "matrix_power", lambda: matrix_power(self.bounded(ty, d, 1.5), self.one_of([2, 3]))),
                (1, "matrix_power", lambda: matrix_power(self.spd(r, d), -1)),
                (2, "I", lambda: self.with_identity(ty, d)),
            ]
        return self.pick(opts)

    def with_identity(self, ty: Ty, d: int) -> Node:
        """E ± I, I ± E, E ± s*I, E@I, I@E, I∘E (E of known shape)."""
        n = ty.dims[0]
        E = self.bounded(ty, d, 5.0)
        eye = self.eye(n)

        def scaled_eye():
            return had(self.bounded(SCALAR, d, 3.0), eye, self.mul_op())

        return self.pick([
            (3, None, lambda: add(E, eye, self.sp())),
            (1, None, lambda: add(eye, E, self.sp())),
            (1, "-", lambda: sub(E, eye, self.sp())),
            (1, "-", lambda: sub(eye, E, self.sp())),
            (1, None, lambda: add(E, scaled_eye(), self.sp())),
            (1, None, lambda: add(scaled_eye(), E, self.sp())),
            (1, "@", lambda: matmul(E, eye)),
            (1, "@", lambda: matmul(eye, E)),
            (1, "*", lambda: had(eye, E, self.mul_op())),
        ])

    # -- top level ------------------------------------------------------
    def top(self) -> Node:
        node = self.composite(SCALAR, self.max_depth - 1)
        if node.mag > 1e3:
            node = self.squash(node)
        if not node.syms:
            x = self.symbol(col(self.dim()))
            node = add(node, frob(x, x), self.sp())
        return node


class _Excluded(Exception):
    """Every option of a choice was excluded."""


def _generate(chooser, max_depth: int, exclude) -> Case:
    g = _Gen(chooser, max_depth=max_depth, exclude=exclude)
    return make_case(g.top())


def random_case(rng: np.random.Generator, max_depth: int = 4,
                exclude: Sequence[str] = ()) -> Case:
    """A random Case driven by a NumPy Generator (no Hypothesis needed)."""
    return _generate(_RngChooser(rng), max_depth, frozenset(exclude))


def expressions(max_depth: int = 4, exclude: Sequence[str] = ()):
    """Hypothesis strategy of :class:`Case` (scalar λ, well-typed).

    ``exclude``: feature tags to leave out, e.g. ``{"det", "unicode", "eye"}``
    (see ``Case.features`` for the tags of a case) -- handy for bisecting a
    failure to one language feature.
    """
    if st is None:  # pragma: no cover
        raise RuntimeError("hypothesis is not installed")
    exclude = frozenset(exclude)

    @st.composite
    def _cases(draw):
        return _generate(_DrawChooser(draw), max_depth, exclude)

    return _cases()


# --------------------------------------------------------------------------
# An independent interpreter for matcalc text (reference for self-checks)

_TOKEN = re.compile(r"""\s*(?:
    (?P<num>\d+(?:\.\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\*\*|\.T|\^T|[-+*/@:()'ᵀ∘⊙⊘,])
)""", re.X)


def _tokenize(text: str) -> List[Tuple[str, str]]:
    toks, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise SyntaxError(f"bad character at {pos}: {text[pos:]!r}")
        kind = m.lastgroup
        toks.append((kind, m.group(kind)))
        pos = m.end()
    return toks


class _Eye:
    """I of a size fixed by the other operand; s*I stays lazy."""

    def __init__(self, scale: float = 1.0):
        self.scale = scale

    def at(self, n: int) -> np.ndarray:
        return self.scale * np.eye(n)


def _is_arr(v) -> bool:
    return isinstance(v, np.ndarray)


def _ewise(op: str, a, b):
    if _is_arr(a) and _is_arr(b) and a.shape != b.shape:
        raise TypeError(f"{op}: shapes {a.shape} and {b.shape}")
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op in ("*", "∘", "⊙"):
        return a * b
    return a / b


def _binop(op: str, a, b):
    if isinstance(a, _Eye) or isinstance(b, _Eye):
        if op in ("*", "∘", "⊙") and not _is_arr(a) and not _is_arr(b):
            if isinstance(a, _Eye) and isinstance(b, _Eye):
                raise TypeError("I*I: size unknown")
            eye, s = (a, b) if isinstance(a, _Eye) else (b, a)
            return _Eye(eye.scale * float(s))
        if op == "@":
            if isinstance(a, _Eye):
                a = a.at(b.shape[0])
            if isinstance(b, _Eye):
                b = b.at(a.shape[1])
        else:
            other = b if isinstance(a, _Eye) else a
            if not _is_arr(other) or other.shape[0] != other.shape[1]:
                raise TypeError(f"{op} of I and a non-square operand")
            n = other.shape[0]
            a = a.at(n) if isinstance(a, _Eye) else a
            b = b.at(n) if isinstance(b, _Eye) else b
    if op == ":":
        if not _is_arr(a) and _is_arr(b) and a == 1.0:
            return float(np.sum(b))
        if _is_arr(a) and not _is_arr(b) and b == 1.0:
            return float(np.sum(a))
        if not (_is_arr(a) and _is_arr(b)) or a.shape != b.shape:
            raise TypeError(f":: {np.shape(a)} and {np.shape(b)}")
        return float(np.sum(a * b))
    if op == "@":
        if _is_arr(a) and not _is_arr(b) and b == 1.0:
            b = np.ones((a.shape[1], 1))
        if not (_is_arr(a) and _is_arr(b)):
            raise TypeError("@ of a scalar")
        if a.shape[1] != b.shape[0]:
            if a.shape[1] == 1 and b.shape[1] == 1 and a.shape[0] == b.shape[0]:
                a = a.T                      # x@y of two column vectors
            else:
                raise TypeError(f"@: {a.shape} and {b.shape}")
        out = a @ b
        return float(out[0, 0]) if out.shape == (1, 1) else out
    return _ewise(op, a, b)


def _col_vec(v, fname):
    if not (_is_arr(v) and v.shape[1] == 1):
        raise TypeError(f"{fname} needs a column vector, got {np.shape(v)}")
    return v


def _apply_axis(fname: str, v, axis: int):
    """Reductions along an axis of a 2-D value (vectors are (n, 1) here)."""
    if fname == "sum":
        return np.sum(v, axis=axis, keepdims=True)
    if fname == "mean":
        return np.mean(v, axis=axis, keepdims=True)
    e = np.exp(v)
    if fname == "logsumexp":
        return np.log(np.sum(e, axis=axis, keepdims=True))
    if fname == "softmax":
        return e / np.sum(e, axis=axis, keepdims=True)
    if fname == "matrix_power":
        return np.linalg.matrix_power(v, axis)
    raise NameError(f"unknown function {fname} with an integer parameter")


def _apply(fname: str, v, extra=None):
    if isinstance(v, _Eye):
        raise TypeError(f"{fname}(I): size unknown")
    if extra is not None:
        out = _apply_axis(fname, v, extra)
        return float(out[0, 0]) if out.shape == (1, 1) else out
    ew = {
        "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin,
        "cos": np.cos, "tanh": np.tanh,
        "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
        "relu": lambda x: np.where(x > 0, x, 0.0),
        "step": lambda x: np.where(x > 0, 1.0, 0.0),
        "abs": np.abs, "sign": np.sign,
        "softplus": lambda x: np.log1p(np.exp(x)),
        "cosh": np.cosh, "sinh": np.sinh, "tan": np.tan, "arcsin": np.arcsin, "arccos": np.arccos,
        "arctan": np.arctan, "log1p": np.log1p, "expm1": np.expm1, "erf": _h_erf, "gelu": _h_gelu,
        "silu": lambda x: x / (1.0 + np.exp(-x)), "logsigmoid": lambda x: -np.log1p(np.exp(-x)),
        "gammaln": _h_gammaln, "digamma": _h_digamma,
    }
    if fname in ew:
        out = ew[fname](v)
        return out if _is_arr(v) else float(out)
    if fname == "sum":
        return float(np.sum(v))
    if fname == "tr":
        return float(np.trace(v))
    if fname == "det":
        return float(np.linalg.det(v))
    if fname == "logdet":
        return float(np.log(np.linalg.det(v)))
    if fname == "inv":
        return np.linalg.inv(v)
    if fname == "diag":
        return np.diagonal(v).reshape(-1, 1).copy()
    if fname == "Diag":
        return np.diagflat(_col_vec(v, fname))
    if fname == "norm2":
        return float(np.linalg.norm(v))
    if fname == "norm1":
        return float(np.abs(_col_vec(v, fname)).sum())
    if fname == "logsumexp":
        return float(np.log(np.exp(_col_vec(v, fname)).sum()))
    if fname == "softmax":
        e = np.exp(_col_vec(v, fname))
        return e / e.sum()
    raise NameError(f"unknown function {fname}")


class _Parser:
    def __init__(self, text: str, env: dict):
        self.toks = _tokenize(text)
        self.i = 0
        self.env = env

    def peek(self):
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self, expected=None):
        kind, val = self.toks[self.i]
        if expected is not None and val != expected:
            raise SyntaxError(f"expected {expected!r}, got {val!r}")
        self.i += 1
        return kind, val

    def parse(self):
        v = self.sum()
        if self.i != len(self.toks):
            raise SyntaxError(f"trailing tokens {self.toks[self.i:]}")
        return v

    def sum(self):
        v = self.frob()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            v = _binop(op, v, self.frob())
        return v

    def frob(self):
        v = self.term()
        while self.peek() == ":":
            self.take()
            v = _binop(":", v, self.term())
        return v

    def term(self):
        v = self.unary()
        while self.peek() in ("*", "∘", "⊙", "/", "⊘", "@"):
            op = self.take()[1]
            v = _binop(op, v, self.unary())
        return v

    def unary(self):
        if self.peek() == "-":
            self.take()
            v = self.unary()
            return _Eye(-v.scale) if isinstance(v, _Eye) else -v
        return self.power()

    def power(self):
        base = self.postfix()
        if self.peek() == "**":
            self.take()
            k = self.unary()
            if _is_arr(k) or isinstance(k, _Eye):
                raise TypeError("exponent must be a scalar")
            return np.power(base, k) if _is_arr(base) else float(base ** k)
        return base

    def postfix(self):
        v = self.atom()
        while self.peek() in (".T", "'", "ᵀ", "^T"):
            self.take()
            if _is_arr(v):
                v = v.T
        return v

    def atom(self):
        kind, val = self.take()
        if kind == "num":
            return float(val)
        if kind == "name":
            if self.peek() == "(":
                self.take("(")
                arg = self.sum()
                extra = None
                if self.peek() == ",":  # an integer parameter: an axis or a power
                    self.take(",")
                    sign = -1 if self.peek() == "-" else 1
                    if sign < 0:
                        self.take("-")
                    extra = sign * int(self.take()[1])
                self.take(")")
                return _apply(val, arg, extra)
            if val in ("I", "eye"):
                return _Eye()
            if val not in self.env:
                raise NameError(val)
            return self.env[val]
        if val == "(":
            v = self.sum()
            self.take(")")
            return v
        raise SyntaxError(f"unexpected {val!r}")


def eval_text(text: str, inputs: dict) -> float:
    """Evaluate matcalc text directly (SPEC §1 semantics) on NumPy inputs.

    Vectors (1-D inputs) are treated as columns; ``'``/``.T``/``ᵀ``/``^T``
    make rows.  Independent of the generator's NumPy source.
    """
    env = {}
    for name, v in inputs.items():
        if np.ndim(v) == 0:
            env[name] = float(v)
        elif np.ndim(v) == 1:
            env[name] = np.asarray(v, dtype=float).reshape(-1, 1)
        else:
            env[name] = np.asarray(v, dtype=float)
    with np.errstate(all="ignore"):
        out = _Parser(text, env).parse()
    if _is_arr(out) or isinstance(out, _Eye):
        raise TypeError(f"not a scalar: {text}")
    return float(out)
