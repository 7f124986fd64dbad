"""Symmetric matrices: ``derive(..., symmetric=["S"])`` / ``--sym S``.

For a symmetric S only symmetric perturbations dS exist, and dλ = G:dS = sym(G):dS with
sym(G) = (G + Gᵀ)/2: that symmetric matrix is the gradient (the Matrix Cookbook's
G + Gᵀ − G∘I is not; Srinivasan & Panda, "What is the gradient of a scalar function of a
symmetric matrix?", arXiv:1911.06491).  The expression and the result also use Sᵀ = S, so
∂ logdet(S)/∂S reads S⁻¹, not S⁻ᵀ."""
from __future__ import annotations

import functools

from . import ir
from .ops import REGISTRY
from .ir import Expr

NOTE = ("{S} is symmetric: only symmetric d{S} exist, so the gradient is the symmetric part "
        "sym(G) = (G + Gᵀ)/2 of any G with dλ = G:d{S} (Srinivasan & Panda, arXiv:1911.06491; "
        "the Matrix Cookbook's G + Gᵀ − G∘I is not the gradient)")


def _elementwise(op: str) -> bool:
    """op acts entry by entry, or at least commutes with the transpose (its registry entry
    says so)."""
    spec = REGISTRY.get(op)
    return spec is not None and (spec.elementwise or spec.transposes)


def is_symmetric(e: Expr, names) -> bool:
    """Whether e is symmetric because the symbols in ``names`` are (S, S⁻¹, S + I, 2S, XᵀSX, …)."""
    return e.shape[0] == e.shape[1] and (e.shape == ir.SCALAR or symmetric_form(e, names))


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


def symmetric_form(e: Expr, names=frozenset()) -> bool:
    """Whether e equals its transpose by its form alone: XᵀX, XᵀSX, (XᵀX)⁻¹, exp(XᵀX) + I,
    x xᵀ, with Sᵀ = S for S in ``names`` (_canon of e and of eᵀ agree)."""
    if e.shape[0] != e.shape[1] or e.shape == ir.SCALAR:
        return False
    _room()
    try:
        return _canon(e, frozenset(names)) == _canon(e, frozenset(names), True)
    except RecursionError:  # (a very deep tree: not known to be symmetric)
        return False


def symmetrize(G: Expr, names) -> Expr:
    """sym(G) = (G + Gᵀ)/2, written with the symmetry of ``names``; G itself if symmetric."""
    from .simplify import scale, simplify, split_coeff

    names = frozenset(names)
    G = use_symmetry(G, names)
    GT = use_symmetry(simplify(ir.T(G)), names)
    _room()
    if GT is G or is_symmetric(G, names) or _canon(GT, names) == _canon(G, names):
        return G
    try:
        raw = _opened(G)
        opened = use_symmetry(simplify(raw), names)  # S⁻¹(I - yyᵀS⁻¹) = S⁻¹ - S⁻¹yyᵀS⁻¹
    except RecursionError:  # (a very deep G: left as it is)
        raw = opened = G
    if is_symmetric(opened, names):
        return opened
    if is_symmetric(raw, names):  # Hᵀ S⁻¹(I - vvᵀS⁻¹) H, symmetric multiplied out (simplify collects it again)
        return G
    if G.op == "add":  # the symmetric terms as they are: S⁻¹ + (A + Aᵀ)/2, not (Aᵀ + S⁻¹ + (Aᵀ + S⁻¹)ᵀ)/2
        kept = [t for t in G.args if is_symmetric(t, names)]
        rest = [t for t in G.args if not is_symmetric(t, names)]
        if kept and rest:
            R = simplify(ir.add(*rest))
            RT = use_symmetry(simplify(ir.T(R)), names)
            return simplify(ir.add(*kept, ir.mul(ir.const(0.5), ir.add(R, RT))))
    plain = simplify(ir.mul(ir.const(0.5), ir.add(G, GT)))
    c, core = split_coeff(opened)
    if core is None or core.op != "add":
        return plain
    # the transpose term by term, each with Sᵀ = S: (S - A)ᵀ = S - Aᵀ, so G + Gᵀ = 2S - A - Aᵀ
    half = [scale(0.5 * c, t) for t in core.args]
    spread = simplify(ir.add(*half, *[use_symmetry(simplify(ir.T(t)), names) for t in half]))
    return spread if ir.tree_size(spread) <= ir.tree_size(plain) else plain


def _opened(e: Expr, most: int = 16) -> Expr:
    """e with its matrix products of sums multiplied out, while a product has at most
    ``most`` terms: A(B + C) = AB + AC."""
    if e.op == "add":
        return ir.add(*[_opened(t, most) for t in e.args])
    if e.op == "mul" and sum(a.shape != ir.SCALAR for a in e.args) == 1:
        return ir.mul(*[_opened(a, most) for a in e.args])
    if e.op != "matmul":
        return e
    a, b = (_opened(x, most) for x in e.args)
    ta = a.args if a.op == "add" and all(t.shape == a.shape for t in a.args) and 1 not in a.shape else (a,)
    tb = b.args if b.op == "add" and all(t.shape == b.shape for t in b.args) and 1 not in b.shape else (b,)
    # (no broadcast term, x - μ; no vector: (y - Hx)(y - Hx)ᵀ stays whole on both sides)
    if len(ta) * len(tb) > most or len(ta) * len(tb) == 1:
        return ir.matmul(a, b)
    return ir.add(*[ir.matmul(x, y) for x in ta for y in tb])


def _scaled_chain(e: Expr):
    """(c, the factors of a matrix product) with the numbers of factors c·F taken out:
    A(−(BC))D is −1 and A, B, C, D, as its transpose's factors are."""
    c, out = 1.0, []
    for f in ir.chain_factors(e):
        arrays = [a for a in f.args if a.shape != ir.SCALAR] if f.op == "mul" else ()
        if len(arrays) == 1 and all(a.op == "const" for a in f.args if a.shape == ir.SCALAR):
            for a in f.args:
                c *= a.attr if a.shape == ir.SCALAR else 1.0
            k, inner = _scaled_chain(arrays[0]) if arrays[0].op == "matmul" else (1.0, [arrays[0]])
            c *= k
            out.extend(inner)
        else:
            out.append(f)
    return c, out


def _canon(e: Expr, names: frozenset, transpose: bool = False) -> int:
    """A key equal for expressions equal up to the association of matrix products and where
    their transposes sit ((ABC)ᵀ = CᵀBᵀAᵀ, Sᵀ = S for S in ``names``): a number, that of a key
    whose parts are the numbers of its parts' keys (a key written out in full would repeat a
    part used twice, doubling with every layer of a deep network's gradient).  Numbers from
    before a _room() that cleared them are not compared with later ones."""
    return _canon_of(e, names, transpose)


def _room() -> None:
    """The key numbers start again when there are too many (before a comparison, never inside one)."""
    if len(_KEYS) > _MOST_KEYS:
        _canon_of.cache_clear()
        _IDS.clear()
        _KEYS.clear()


@functools.lru_cache(maxsize=1 << 16)
def _canon_of(e: Expr, names: frozenset, transpose: bool = False) -> int:
    if e.shape == ir.SCALAR:
        transpose = False
    op = e.op
    if op == "T":
        return _canon_of(e.args[0], names, not transpose)
    if op in ("eye", "const") or (op == "sym" and e.attr in names):
        return _key(op, e.attr, e.shape if not transpose else e.shape[::-1])
    if op == "matmul":
        c, factors = _scaled_chain(e)
        if transpose:
            factors.reverse()
        fs = []
        for f in factors:
            k = _canon_of(f, names, transpose)
            fs.extend(_KEYS[k][1] if _KEYS[k][0] == "matmul" else (k,))
        fs = [k for k in fs if _KEYS[k][0] != "eye"] or fs[:1]  # (AIB = AB)
        chain = _key("matmul", tuple(fs))
        return chain if c == 1.0 else _key("mul", None, tuple(sorted((_key("const", c, ir.SCALAR), chain))))
    if op == "mul" and any(a.op == "eye" for a in e.args):  # I∘X is diagonal: its own transpose
        transpose = False
    if op in ("add", "mul"):  # commutative: the order of the terms does not matter
        return _key(op, e.attr, tuple(sorted(_canon_of(a, names, transpose) for a in e.args)))
    if op in ("div", "inv", "pow", "matrix_power") or _elementwise(op):  # (Xᵏ)ᵀ = (Xᵀ)ᵏ
        return _key(op, e.attr, tuple(_canon_of(a, names, transpose) for a in e.args))
    if op == "Diag":
        return _key(op, _canon_of(e.args[0], names))
    key = _key(op, e.attr, e.shape, tuple(_canon_of(a, names) for a in e.args))
    return _key("T", key) if transpose else key


def _key(*key) -> int:
    """The number of a key (its parts numbers or plain values), the same for equal keys."""
    i = _IDS.get(key)
    if i is None:
        i = _IDS[key] = len(_KEYS)
        _KEYS.append(key)
    return i


_IDS: dict = {}   # key -> its number
_KEYS: list = []  # number -> key
_MOST_KEYS = 1 << 20  # then the numbers start again (with _canon_of's memo)


__all__ = ["NOTE", "is_symmetric", "symmetric_form", "use_symmetry", "symmetrize"]
