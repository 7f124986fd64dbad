"""The H = Diag(h) form of a result: ``derive(..., form="diag")`` / ``--form diag``.

The default result writes an elementwise product of two vectors as h∘v; papers often
write it as Hv with the diagonal matrix H = Diag(h) (αHW₁ᵀ(p − 1)xᵀ for a ReLU layer).
This form rewrites h∘v as Diag(h)v, names Diag(h) (H for h), and cites h∘v = Diag(h)v.
A user definition ``H = Diag(...)`` is used in every form."""
from __future__ import annotations

from . import ir
from .ops import REGISTRY
from .ir import SCALAR, Expr

IDENTITY = "h∘v = Diag(h)v"
IDENTITY_LATEX = r"h\circ v = \operatorname{Diag}(h)\,v"


def _elementwise(op: str) -> bool:
    """op acts entry by entry (its registry entry says so)."""
    spec = REGISTRY.get(op)
    return spec is not None and spec.elementwise


def _vector(e: Expr) -> bool:
    return e.shape[1] == 1 and e.shape[0] != 1


def diag_form(G: Expr, names: dict, everywhere: bool) -> tuple[Expr, list]:
    """G with h∘v written Diag(h)v: for every such product when ``everywhere``, else only where
    Diag(h) has a name (a user's definition).  Returns (the new G, the Diag nodes it made)."""
    made: list = []
    out: dict = {}
    for n in ir.walk(G):
        args = tuple(out[a] for a in n.args)
        node = n if all(a is b for a, b in zip(args, n.args)) else ir.Expr(n.op, args, n.attr, n.shape)
        if node.op == "mul" and _vector(node):
            arrays = [a for a in node.args if a.shape != SCALAR]
            scalars = [a for a in node.args if a.shape == SCALAR]
            if len(arrays) == 2:
                h = _pick(arrays, names, everywhere)
                if h is not None:
                    v = arrays[1] if h is arrays[0] else arrays[0]
                    D = ir.func("Diag", h)
                    prod = _times(D, v)  # not simplified: that would undo it
                    node = Expr("mul", tuple(scalars) + (prod,), None, node.shape) if scalars else prod
                    if D not in made:
                        made.append(D)
        out[n] = node
    return out[G], made


def _times(D: Expr, v: Expr) -> Expr:
    """D v with D first in the chain: H W₁ᵀ(p − 1), not H(W₁ᵀ(p − 1))."""
    if v.op == "matmul":
        left = _times(D, v.args[0])
        return Expr("matmul", (left, v.args[1]), None, (left.shape[0], v.shape[1]))
    return Expr("matmul", (D, v), None, (D.shape[0], v.shape[1]))


def _pick(arrays, names, everywhere):
    """Which factor becomes the diagonal matrix: one whose Diag is named, else (everywhere) a
    named elementwise value (h = step(z)), else the first factor that is not a product."""
    for a in arrays:
        if ir.func("Diag", a) in names:
            return a
    if not everywhere:
        return None
    for a in arrays:
        if a in names and _elementwise(a.op):
            return a
    for a in arrays:
        if _elementwise(a.op):
            return a
    return arrays[0] if arrays[0].op != "matmul" else arrays[1]


def diag_name(D: Expr, names: dict, taken: set) -> str:
    """H for Diag(h) (the upper-case of h's name), else D, D1, …; never a name in use."""
    h = D.args[0]
    base = names.get(h, "")
    cand = base.upper() if base and base[0].isalpha() and not base.startswith("d:") else "D"
    name, k = cand, 0
    while name in taken:
        k += 1
        name = f"{cand}{k}"
    return name


__all__ = ["diag_form", "diag_name", "IDENTITY"]
