"""Moving dW out: from dλ to the canonical form dλ = G : dW.

dλ is linear in dW.  It is written as a sum of terms ``C : L`` where L is a
linear node (it contains dW) and C a coefficient that does not.  Each step takes
the outermost linear node L and applies the adjoint ("transpose") rule of its
operator — a Frobenius identity such as A:(BC) = (ACᵀ):B — which moves one
operator from L into the coefficient.  Coefficients reaching the same node are
collected, so a node shared by several terms is processed once (this is reverse
mode on the expression DAG, and stays linear in its size).  When only dW is
left, its coefficient is the gradient G.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import ir
from .ir import SCALAR, Expr, const
from .ops import REGISTRY
from .simplify import opened_quotients, settle, simplify
from .steplog import Step  # noqa: F401  (the step type, for callers of pullback)


@dataclass(frozen=True)
class Identity:
    key: str
    text: str   # as the step log prints it
    latex: str  # as the LaTeX derivation prints it
    minor: bool = False  # bookkeeping a paper does silently: merged into one line


IDENTITIES = {i.key: i for i in [
    Identity("frob_comm", "A:B = B:A", r"A:B = B:A", True),
    Identity("frob_transpose", "A:Bᵀ = Aᵀ:B", r"A:B^{\top} = A^{\top}:B", True),
    Identity("frob_matmul_right", "A:BC = ACᵀ:B", r"A:BC = AC^{\top}:B"),
    Identity("frob_matmul_left", "A:BC = BᵀA:C", r"A:BC = B^{\top}A:C"),
    Identity("frob_hadamard", "A:(B∘C) = (A∘B):C", r"A:(B\circ C) = (A\circ B):C"),
    Identity("frob_scalar", "A:(βB) = (βA):B", r"A:(\beta B) = (\beta A):B", True),
    Identity("frob_div", "A:(B⊘C) = (A⊘C):B", r"A:(B\oslash C) = (A\oslash C):B"),
    Identity("frob_linear", "A:(B + C) = A:B + A:C", r"A:(B + C) = A:B + A:C", True),
    Identity("frob_broadcast", "A:(β1) = sum(A) β", r"A:(\beta\mathbf{1}) = \operatorname{sum}(A)\,\beta"),
    Identity("frob_of_frob", "γ(A:B) = (γA):B", r"\gamma(A:B) = (\gamma A):B", True),
    Identity("frob_sum", "γ sum(B) = (γ1):B", r"\gamma\operatorname{sum}(B) = (\gamma\mathbf{1}):B"),
    Identity("frob_sum_axis", "c:sum(B, 0) = (1c):B, c:sum(B, 1) = (c1ᵀ):B",
             r"c:\operatorname{sum}_0(B) = (\mathbf{1}c):B,\ c:\operatorname{sum}_1(B) = (c\mathbf{1}^{\top}):B"),
    Identity("frob_mean", "γ mean(B) = (γ1/N):B", r"\gamma\operatorname{mean}(B) = (\gamma\mathbf{1}/N):B"),
    Identity("frob_mean_axis", "c:mean(B, 0) = (1c/m):B, c:mean(B, 1) = (c1ᵀ/n):B",
             r"c:\operatorname{mean}_0(B) = (\mathbf{1}c/m):B,\ c:\operatorname{mean}_1(B) = (c\mathbf{1}^{\top}/n):B"),
    Identity("frob_vec", "c:vec(B) = vec⁻¹(c):B", r"c:\operatorname{vec}(B) = \operatorname{vec}^{-1}(c):B"),
    Identity("frob_unvec", "C:vec⁻¹(b) = vec(C):b", r"C:\operatorname{vec}^{-1}(b) = \operatorname{vec}(C):b"),
    Identity("frob_kron", "C:(A⊗B) = kron_blocks(C, B):A = kron_sum(C, A):B",
             r"C:(A\otimes B) = \operatorname{blocks}(C, B):A = \operatorname{blocksum}(C, A):B"),
    Identity("frob_kron_sum", "C:kron_sum(D, A) = (A⊗C):D = kron_blocks(D, C):A",
             r"C:\operatorname{blocksum}(D, A) = (A\otimes C):D = \operatorname{blocks}(D, C):A"),
    Identity("frob_kron_blocks", "C:kron_blocks(D, B) = (C⊗B):D = kron_sum(D, C):B",
             r"C:\operatorname{blocks}(D, B) = (C\otimes B):D = \operatorname{blocksum}(D, C):B"),
    Identity("frob_trace", "γ tr(B) = (γI):B", r"\gamma\operatorname{tr}(B) = (\gamma I):B"),
    Identity("frob_diag", "a:diag(B) = Diag(a):B", r"a:\operatorname{diag}(B) = \operatorname{Diag}(a):B"),
    Identity("frob_Diag", "A:Diag(b) = diag(A):b", r"A:\operatorname{Diag}(b) = \operatorname{diag}(A):b"),
    Identity("collect", "collect like terms", r"\text{collect like terms}"),
    Identity("canonical", "read off G", r"\text{read off } G"),
]}


@dataclass(frozen=True)
class Event:
    """What the pullback did, for the step log: the running form ``state`` after it.
    kind: 'start' (the form dλ starts from), 'rule' (an identity moved an operator into a coefficient), 'collect' (like
    terms gathered), 'expand' (the named ``node`` is written out from here on),
    'canonical' (dλ = G : dW read off)."""

    kind: str
    state: Expr
    identity: Identity | None = None
    node: Expr | None = None


def _negative(e: Expr) -> bool:
    return e.op == "mul" and ir.negative_term(e)[0]


def factors_of_sum(e: Expr):
    """The terms of a running sum of contributions (kept flat, never nested)."""
    return e.args if e.op == "add" and getattr(e, "shape", None) is not None else (e,)


def term(cot: Expr, node: Expr) -> Expr:
    """The term C : L of the running form (a scalar coefficient just multiplies)."""
    if cot.shape == SCALAR and node.shape == SCALAR:
        return node if (cot.op == "const" and cot.attr == 1.0) else ir.mul(cot, node)
    if cot.shape == SCALAR and cot.op == "const":
        return ir.mul(cot, ir.func("sum", node)) if cot.attr != 1.0 else ir.func("sum", node)
    return ir.frob(cot, node)


def _state(cot: dict) -> Expr:
    terms = [term(c, n) for n, c in cot.items()]
    return ir.add(*terms) if terms else const(0.0)


def pullback(dlam: Expr | None, dW: Expr | None, record: bool = True, names: dict | None = None,
             dims: dict | None = None):
    """Returns (G, steps).  ``G`` has the shape of W.  ``names`` (node -> printed name) lets
    the log say when a named quantity such as dz is written out (dz = dW@x); ``dims``
    (printing.dim_sources) prints a dimension there as the size of a symbol, size(Q, 1)."""
    from .steplog import build_steps

    G, events = pullback_events(dlam, dW, record, names)
    return G, (build_steps(events, names or {}, dims) if record else [])


def pullback_events(dlam: Expr | None, dW: Expr | None, record: bool = True, names: dict | None = None):
    """Reverse mode on the DAG of dλ: returns (G, the events a step log is built from)."""
    names = names or {}
    events: list[Event] = []
    expanded: set = set()
    if dlam is None or dW is None:
        shape = dW.shape if dW is not None else SCALAR
        return const(0.0, shape), events
    linear = set()
    order = []
    for n in ir.walk(dlam):
        if n is dW or any(a in linear for a in n.args):
            linear.add(n)
            order.append(n)
    order.reverse()  # parents before children
    cot: dict = {dlam: const(1.0)}
    current = _state(cot) if record else None
    if record:
        events.append(Event("start", current))

    def report(kind, identity=None, node=None):
        nonlocal current
        after = _state(cot)
        if after is not current or kind == "expand":
            events.append(Event(kind, after, identity, node))
            current = after

    for node in order:
        if node not in cot:
            continue
        raw = cot[node]
        c = simplify(raw)
        if record and c is not raw:
            cot[node] = c
            report("collect", IDENTITIES["collect"])
        if node is dW:
            break
        if c.op == "const" and c.attr == 0.0:
            del cot[node]
            continue
        if record and node in names and node not in expanded:
            expanded.add(node)
            report("expand", node=node)
        del cot[node]
        lin = tuple(a in linear for a in node.args)
        contributions, key = REGISTRY[node.op].transpose(node, c, lin)
        identity = IDENTITIES[key]
        for i, contrib in contributions:
            child = node.args[i]
            if child.shape == SCALAR and contrib.shape != SCALAR:
                contrib = ir.func("sum", contrib)  # the adjoint of a broadcast is a sum
                b = IDENTITIES["frob_broadcast"]
                identity = Identity(key, f"{identity.text}; {b.text}", f"{identity.latex};\\ {b.latex}")
            contrib = simplify(contrib)
            if contrib.op == "const" and contrib.attr == 0.0:
                continue
            if child in cot:  # the running sum shows positive terms first: (αp - α1):dz
                terms = sorted((*factors_of_sum(cot[child]), contrib), key=_negative)
                cot[child] = ir.add(*terms)
            else:
                cot[child] = contrib
        if record:
            report("rule", identity)
    G = cot.get(dW, const(0.0, dW.shape))
    if G.shape != dW.shape:  # a scalar coefficient of an array variable: broadcast it
        G = ir.mul(G, const(1.0, dW.shape))
    G = opened_quotients(settle(G))
    if record:
        final = term(G, dW)
        if final is not current:
            events.append(Event("canonical", final, IDENTITIES["canonical"]))
    return G, events
