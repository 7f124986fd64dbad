"""Short names for the quantities a derivation keeps mentioning, as a paper does:
z = W@x + c (a pre-activation), p = exp(z), h = step(z), …

``auto_names`` picks them for the arguments and values of elementwise functions that
occur in the result; user definitions always win and keep their own names."""
from __future__ import annotations

from . import ir
from .ir import Expr
from .ops import REGISTRY

class DiffName(str):
    """The printed name of a named quantity's differential: ``DiffName("z")`` prints as dz
    (\\mathrm{d}z in LaTeX); ``.base`` is the quantity's own name."""

    base: str

    def __new__(cls, base: str, text: str | None = None):
        obj = str.__new__(cls, text or "d" + base)
        obj.base = base
        return obj


def definition_names(definitions: dict | None) -> dict:
    """node -> name for the user's definitions: each value as typed, and as simplify and
    stabilize write it (s = sqrt(x*x + 1) meets sqrt(x**2 + 1) in the result, K =
    exp(-D/(2*ell**2)) + I meets exp(-0.5*D/ell**2) + I), so the result says s and K."""
    from .simplify import simplify, stabilize

    out: dict = {}
    for name, node in (definitions or {}).items():
        out[node] = name
        for form in (simplify(node), simplify(stabilize(node))):
            if form.args:  # (y = 1*x simplifies to x itself: x stays x)
                out.setdefault(form, name)
    return out


def regroup(e: Expr, names: dict, products: bool = True) -> Expr:
    """e with every sum that holds all the terms of a named sum, each times one number k,
    written with that name: x + h∘tanh(W x + b) + h∘tanh(W x₁ + b) − y is x₂ − y for
    x₂ = x₁ + h∘tanh(W x₁ + b) and x₁ = x + h∘tanh(W x + b) (simplify flattens the
    definitions' sums into the ones they meet), 2 W₂h + 2 b₂ − 2y is 2o − 2y for
    o = W₂h + b₂; the largest named sums first; with ``products``, named products too
    (_named_chain: for printing only, since a named product is then computed as a whole,
    an n×n matrix where the chain it stood in needed only products with vectors).  The
    same value."""
    sums = sorted(((_terms(n), n) for n in names if n.op == "add"), key=lambda t: -len(t[0]))
    chains = sorted(((ir.chain_factors(n), n) for n in names if n.op == "matmul" and products),
                    key=lambda t: -len(t[0]))
    scaled_chains = [(ir.chain_factors(p), sc, n) for n in names if products and (sp := _scaled_chain(n)) is not None
                     for sc, p in [sp]]  # m = β A⁻¹Xᵀy: (its chain, its numbers, m)
    if not sums and not chains and not scaled_chains:
        return e
    sums = [([ir.split_coeff(t) for t in want], named) for want, named in sums]

    def group(n):
        if n.op == "matmul" and chains:
            return _named_chain(n, chains)
        if n.op == "mul" and scaled_chains:
            return _named_scaled_chain(n, scaled_chains)
        if n.op != "add":
            return n
        terms = list(n.args)
        for want, named in sums:
            if named is n or len(want) > len(terms) or named.shape != n.shape:
                continue
            k, rest = _multiple(want, terms)
            if k is None or (k == 1.0 and not rest):
                continue
            scaled = named if k == 1.0 else Expr("mul", (ir.const(k), named), None, named.shape)
            terms = [scaled] + rest
        if len(terms) == 1:
            return terms[0]
        return n if len(terms) == len(n.args) else Expr("add", tuple(terms), None, n.shape)  # (a named sum
        # replaces two or more terms)

    return ir.rebuild([e], group)[0]


def _named_chain(n: Expr, chains: list) -> Expr:
    """The matrix product n with every run of factors that is a named product (or its
    transpose) written with its name: -2 Xᵀ Z Zᵀ(y − Xb) is -2 Xᵀ Z g for g = Zᵀ(y − Xb),
    (y − Xb)ᵀZ is gᵀ, X.T@Pz@X for Pz = Z inv(ZᵀZ) Zᵀ (the longest named products first)."""
    fs = ir.chain_factors(n)
    changed = False
    for want, named in chains:
        k = len(want)
        if named is n:
            continue
        back = [_transposed(f) for f in reversed(want)]  # (ZᵀR)ᵀ = RᵀZ: gᵀ
        i = 0
        while i + k <= len(fs):
            if fs[i:i + k] == want:
                fs[i:i + k] = [named]
                changed = True
            elif fs[i:i + k] == back and back != want:
                fs[i:i + k] = [ir.T(named)]
                changed = True
            i += 1
    return ir.chain_product(fs) if changed else n


def _scaled_chain(n: Expr):
    """(its number factors, its product) for a node c·(A B …), else None."""
    if n.op != "mul":
        return None
    sc = [f for f in n.args if f.shape == ir.SCALAR]
    arr = [f for f in n.args if f.shape != ir.SCALAR]
    return (sc, arr[0]) if sc and len(arr) == 1 and arr[0].op == "matmul" else None


def _named_scaled_chain(n: Expr, scaled: list) -> Expr:
    """The product c·(…) with a run of factors and the numbers of a named c'·(product) written
    with its name: β X A⁻¹Xᵀy is X m for m = β A⁻¹Xᵀy (where the numbers are there to take)."""
    sp = _scaled_chain(n)
    if sp is None:
        return n
    sc, prod = sp
    fs = ir.chain_factors(prod)
    for want, need, named in scaled:
        k = len(want)
        i = next((i for i in range(len(fs) - k + 1) if fs[i:i + k] == want), None)
        rest = list(sc)
        if i is None or named is n or any(rest.count(f) < need.count(f) for f in need):
            continue
        for f in need:
            rest.remove(f)
        fs[i:i + k] = [named]
        out = ir.chain_product(fs)
        return Expr("mul", tuple(rest) + (out,), None, n.shape) if rest else out
    return n


def _transposed(f: Expr) -> Expr:
    """fᵀ, without a double transpose: (Zᵀ)ᵀ is Z."""
    return f.args[0] if f.op == "T" else ir.T(f)


REGROUP_STEP = ("the definitions by their names", "\\text{the definitions by their names}")  # (text, LaTeX)


def regrouped(e: Expr, names: dict, products: bool = True) -> Expr:
    """regroup(e, names, products), where a name stands for a sum or a product (else e itself,
    at no cost)."""
    ops = ("add", "matmul", "mul") if products else ("add",)
    return regroup(e, names, products) if any(n.op in ops for n in names) else e


def _multiple(want: list, terms: list):
    """(k, the other terms) if terms hold k·t for every term t = c·core of want (as
    (c, core) pairs), one number k for all; else (None, None)."""
    rest, k = list(terms), None
    for c, core in want:
        for i, t in enumerate(rest):
            ct, tcore = ir.split_coeff(t)
            if tcore == core and c != 0.0 and (k is None or ct == k * c):
                k = ct / c if k is None else k
                del rest[i]
                break
        else:
            return None, None
    return k, rest


def _terms(e: Expr) -> list:
    """The terms of a sum with the sums inside it opened: x₁ + h∘t is [x, h∘u, h∘t] for x₁ = x + h∘u."""
    out = []
    for t in e.args:
        out.extend(_terms(t) if t.op == "add" else [t])
    return out


# the letter a value gets, by the function that made it
LETTERS = {op.name: op.letter for op in REGISTRY.values() if op.letter}
PRE_ACTIVATION = "z"


def _compound(e: Expr) -> bool:
    return bool(e.args) and e.op != "T" and not (e.op == "mul" and len(e.args) == 2
                                                   and e.args[0].op == "const" and not e.args[1].args)


def auto_names(roots, taken: set, existing: dict, key=None) -> dict:
    """node -> name for the notable subexpressions of ``roots`` (a list of expressions).

    key(node) is a node's normal form (the identity without it): nodes with one normal form
    are one quantity and get one name (λ keeps the user's -y*(X@w), its differential the
    flattened product), and a node whose normal form has a name in ``existing`` takes it."""
    key = key or (lambda n: n)
    known = {key(n): name for n, name in existing.items()}
    wanted: list = []  # (node, letter) in order of first appearance, inner first
    alias: dict = {}  # a node -> the earlier node of its normal form
    first: dict = {}  # normal form -> its first node
    seen = set()

    def want(node, letter):
        k = key(node)
        if k in known:
            alias[node] = known[k]
        elif k in first:
            alias[node] = first[k]
        else:
            first[k] = node
            wanted.append((node, letter))

    def visit(root):
        for n in ir.walk(root):
            if n in seen or n in existing:
                continue
            seen.add(n)
            if n.op in LETTERS and _compound(n.args[0]):
                arg = n.args[0]
                if arg not in existing and arg not in alias and all(a is not arg for a, _ in wanted):
                    want(arg, PRE_ACTIVATION)
                want(n, LETTERS[n.op])

    for r in roots:
        visit(r)
    by_letter: dict = {}
    for node, letter in wanted:
        by_letter.setdefault(letter, []).append(node)
    names: dict = {}
    used = set(taken) | set(existing.values())
    for letter, nodes in by_letter.items():
        counter = 0
        for node in nodes:
            name = letter if len(nodes) == 1 and letter not in used else None
            while name is None or name in used:
                counter += 1
                name = f"{letter}{counter}"
            used.add(name)
            names[node] = name
    for node, other in alias.items():
        names[node] = other if isinstance(other, str) else names[other]
    return names


def definitions_in_order(names: dict) -> list:
    """[(name, node)] with every name after the names its value uses.  A quantity named in
    two forms (-(-y) and y) is written in its smallest one."""
    simplest: dict = {}  # name -> its smallest node
    for node, name in names.items():
        if name not in simplest or ir.tree_size(node) < ir.tree_size(simplest[name]):
            simplest[name] = node
    order: list = []
    placed: set = set()

    used: dict = {}

    def uses(name):  # the names its written value uses
        if name not in used:
            node = simplest[name]
            used[name] = [names[n] for n in ir.walk(node) if n is not node and n in names and names[n] != name]
        return used[name]

    for root in names:
        if names[root] in placed:  # (with all it uses)
            continue
        for first in [names[n] for n in ir.walk(root) if n in names]:
            if first in placed:
                continue
            stack = [(first, iter(uses(first)))]  # depth first, without Python's recursion
            seen = {first}
            while stack:
                name, pending = stack[-1]
                nxt = next((u for u in pending if u not in placed and u not in seen), None)
                if nxt is not None:
                    seen.add(nxt)
                    stack.append((nxt, iter(uses(nxt))))
                    continue
                stack.pop()
                if name not in placed:
                    placed.add(name)
                    order.append((name, simplest[name]))
    return order


def shared_names(roots, taken: set, existing: dict, min_size: int = 6) -> dict:
    """u1, u2, … for subexpressions used more than once: what keeps the printed form of a
    result whose tree is exponentially larger than its DAG (nested softmax) small."""
    uses: dict = {}
    size: dict = {}
    for r in roots:
        for n in ir.walk(r):
            if n not in size:
                size[n] = 1 + sum(size[a] for a in n.args)
                for a in n.args:
                    uses[a] = uses.get(a, 0) + 1
    names, counter = {}, 0
    for n in size:
        if uses.get(n, 0) >= 2 and size[n] >= min_size and n not in existing and n.op != "T":
            counter += 1
            while f"u{counter}" in taken:
                counter += 1
            names[n] = f"u{counter}"
    return names
