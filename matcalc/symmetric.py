"""Symmetric matrices: ``derive(..., symmetric=["S"])`` / ``--sym S``.

For a symmetric S only symmetric perturbations dS exist, and dλ = G:dS = sym(G):dS with
sym(G) = (G + Gᵀ)/2: that symmetric matrix is the gradient (the Matrix Cookbook's
G + Gᵀ − G∘I is not; Srinivasan & Panda, "What is the gradient of a scalar function of a
symmetric matrix?", arXiv:1911.06491).  The expression and the result also use Sᵀ = S, so
∂ logdet(S)/∂S reads S⁻¹, not S⁻ᵀ."""
from __future__ import annotations

from . import ir
from .ops import REGISTRY
from .ir import Expr

NOTE = ("{S} is symmetric: only symmetric dS exist, so the gradient is the symmetric part "
        "sym(G) = (G + Gᵀ)/2 of any G with dλ = G:d{S} (Srinivasan & Panda, arXiv:1911.06491; "
        "the Matrix Cookbook's G + Gᵀ − G∘I is not the gradient)")


def _elementwise(op: str) -> bool:
    """op acts entry by entry (its registry entry says so)."""
    spec = REGISTRY.get(op)
    return spec is not None and spec.elementwise


def is_symmetric(e: Expr, names) -> bool:
    """Whether e is symmetric because the symbols in ``names`` are (S, S⁻¹, S + I, 2S, …)."""
    if e.shape[0] != e.shape[1]:
        return False
    op = e.op
    if op == "sym":
        return e.attr in names
    if op in ("eye", "const"):
        return True
    if op in ("inv", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "abs", "sin", "cos", "softplus",
              "step", "sign"):
        return e.args[0].shape != ir.SCALAR and is_symmetric(e.args[0], names)
    if op in ("add", "mul"):
        return all(a.shape == ir.SCALAR or is_symmetric(a, names) for a in e.args)
    if op == "div":
        return all(a.shape == ir.SCALAR or is_symmetric(a, names) for a in e.args)
    if op == "matmul":  # AᵀBA and A Aᵀ are symmetric
        a, b = e.args
        return (a.op == "T" and a.args[0] is b) or (b.op == "T" and b.args[0] is a)
    return False


def use_symmetry(e: Expr, names) -> Expr:
    """e with every transpose of a symmetric quantity dropped (Sᵀ = S, S⁻ᵀ = S⁻¹)."""
    from .simplify import simplify

    out: dict = {}
    changed = False
    for n in ir.walk(e):
        if n.op == "T" and is_symmetric(out[n.args[0]], names):
            out[n] = out[n.args[0]]
            changed = True
        elif n.args:
            args = tuple(out[a] for a in n.args)
            out[n] = n if all(a is b for a, b in zip(args, n.args)) else ir.Expr(n.op, args, n.attr, n.shape)
        else:
            out[n] = n
    return simplify(out[e]) if changed else e


def symmetrize(G: Expr, names) -> Expr:
    """sym(G) = (G + Gᵀ)/2, written with the symmetry of ``names``; G itself if symmetric."""
    from .simplify import simplify

    G = use_symmetry(G, names)
    GT = use_symmetry(simplify(ir.T(G)), names)
    if GT is G or is_symmetric(G, names) or _canon(GT, names) == _canon(G, names):
        return G
    return simplify(ir.mul(ir.const(0.5), ir.add(G, GT)))


def _canon(e: Expr, names, transpose: bool = False):
    """A key equal for expressions equal up to the association of matrix products and where
    their transposes sit ((ABC)ᵀ = CᵀBᵀAᵀ, Sᵀ = S for S in ``names``)."""
    if e.shape == ir.SCALAR:
        transpose = False
    op = e.op
    if op == "T":
        return _canon(e.args[0], names, not transpose)
    if op in ("eye", "const") or (op == "sym" and e.attr in names):
        return (op, e.attr, e.shape if not transpose else e.shape[::-1])
    if op == "matmul":
        factors, stack = [], [e]
        while stack:
            f = stack.pop()
            if f.op == "matmul":
                stack.extend(reversed(f.args))
            else:
                factors.append(f)
        if transpose:
            factors.reverse()
        fs = []
        for f in factors:
            k = _canon(f, names, transpose)
            fs.extend(k[1] if k[0] == "matmul" else (k,))
        return ("matmul", tuple(fs))
    if op in ("add", "mul"):  # commutative: the order of the terms does not matter
        return (op, e.attr, tuple(sorted((_canon(a, names, transpose) for a in e.args), key=repr)))
    if op in ("div", "inv", "pow") or _elementwise(op):
        return (op, e.attr, tuple(_canon(a, names, transpose) for a in e.args))
    if op == "Diag":
        return (op, _canon(e.args[0], names))
    key = (op, e.attr, e.shape, tuple(_canon(a, names) for a in e.args))
    return ("T", key) if transpose else key


__all__ = ["NOTE", "is_symmetric", "use_symmetry", "symmetrize"]
