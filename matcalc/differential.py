"""The differential dλ, one rule per operator (``jvp_rules[op]``).

A rule receives the node and the differentials of its arguments (``None`` where an
argument does not depend on the variable) and returns the node's differential,
an expression linear in dW, or ``None``.  Elementwise functions are one table
entry each: their derivative f'(x), given x and the node f(x) itself (so
d exp(x) reuses exp(x)).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import ir
from .ir import add, const, div, func, matmul, mul, T, frob, power

ONE = const(1.0)


@dataclass(frozen=True)
class Elementwise:
    derivative: Callable  # (x, fx) -> f'(x), elementwise
    rule: str             # how the step log cites it


def _minus(a, b):
    return add(a, mul(const(-1.0), b))


ELEMENTWISE = {
    "exp": Elementwise(lambda x, y: y, "d exp(X) = exp(X)∘dX"),
    "log": Elementwise(lambda x, y: div(ONE, x), "d log(X) = dX⊘X"),
    "sqrt": Elementwise(lambda x, y: div(const(0.5), y), "d sqrt(X) = dX⊘(2 sqrt(X))"),
    "sin": Elementwise(lambda x, y: func("cos", x), "d sin(X) = cos(X)∘dX"),
    "cos": Elementwise(lambda x, y: mul(const(-1.0), func("sin", x)), "d cos(X) = −sin(X)∘dX"),
    "tanh": Elementwise(lambda x, y: _minus(ONE, power(y, const(2.0))), "d tanh(X) = (1 − tanh²(X))∘dX"),
    "sigmoid": Elementwise(lambda x, y: mul(y, _minus(ONE, y)), "d σ(X) = σ(X)∘(1 − σ(X))∘dX"),
    "relu": Elementwise(lambda x, y: func("step", x), "d relu(X) = step(X)∘dX"),
    "step": Elementwise(lambda x, y: None, "d step(X) = 0 (almost everywhere)"),
    "abs": Elementwise(lambda x, y: func("sign", x), "d |X| = sign(X)∘dX"),
    "sign": Elementwise(lambda x, y: None, "d sign(X) = 0 (almost everywhere)"),
    "softplus": Elementwise(lambda x, y: func("sigmoid", x), "d softplus(X) = σ(X)∘dX"),
}
assert set(ELEMENTWISE) == set(ir.ELEMENTWISE_OPS)


def _sum(terms):
    terms = [t for t in terms if t is not None]
    return None if not terms else add(*terms)


def _jvp_mul(e, d):
    return _sum(mul(*(d[i] if j == i else a for j, a in enumerate(e.args)))
                for i in range(len(e.args)) if d[i] is not None)


def _jvp_div(e, d):
    a, b = e.args
    da, db = d
    if db is None:
        return div(da, b)
    num = mul(const(-1.0), e, db)  # d(a⊘b) = (da − (a⊘b)∘db)⊘b
    return div(num if da is None else add(da, num), b)


def _jvp_pow(e, d):
    a, k = e.args
    da, dk = d
    out = []
    if da is not None:
        km1 = const(k.attr - 1.0) if k.is_const else add(k, const(-1.0))
        coeff = mul(k, power(a, km1)) if not (k.is_const and k.attr == 2.0) else mul(const(2.0), a)
        out.append(mul(coeff, da))
    if dk is not None:
        out.append(mul(e, func("log", a), dk))
    return _sum(out)


def _tr_inv_dx(X, dX):
    return func("tr", matmul(func("inv", X), dX))


jvp_rules: dict[str, Callable] = {
    "add": lambda e, d: _sum(d),
    "mul": _jvp_mul,
    "div": _jvp_div,
    "pow": _jvp_pow,
    "matmul": lambda e, d: _sum([d[0] and matmul(d[0], e.args[1]), d[1] and matmul(e.args[0], d[1])]),
    "T": lambda e, d: T(d[0]),
    "frob": lambda e, d: _sum([d[0] and frob(d[0], e.args[1]), d[1] and frob(e.args[0], d[1])]),
    "sum": lambda e, d: func("sum", d[0]),
    "tr": lambda e, d: func("tr", d[0]),
    "diag": lambda e, d: func("diag", d[0]),
    "Diag": lambda e, d: func("Diag", d[0]),
    "det": lambda e, d: mul(e, _tr_inv_dx(e.args[0], d[0])),
    "logdet": lambda e, d: _tr_inv_dx(e.args[0], d[0]),
    "inv": lambda e, d: mul(const(-1.0), matmul(matmul(e, d[0]), e)),
    "norm2": lambda e, d: frob(div(e.args[0], e), d[0]),  # x/‖x‖: NaN at x = 0
    "norm1": lambda e, d: frob(func("sign", e.args[0]), d[0]),
    "logsumexp": lambda e, d: frob(func("softmax", e.args[0]), d[0]),
    # d softmax(x) = s∘(dx − (s:dx)1)
    "softmax": lambda e, d: mul(e, add(d[0], mul(const(-1.0), frob(e, d[0])))),
}

# how the step log cites the rule applied at each operator
RULE_NAMES = {
    "add": "d(A + B) = dA + dB",
    "mul": "d(A∘B) = dA∘B + A∘dB",
    "div": "d(A⊘B) = (dA − (A⊘B)∘dB)⊘B",
    "pow": "d(A^k) = k A^(k−1)∘dA",
    "matmul": "d(AB) = dA B + A dB",
    "T": "d(Aᵀ) = (dA)ᵀ",
    "frob": "d(A:B) = dA:B + A:dB",
    "sum": "d sum(A) = sum(dA)",
    "tr": "d tr(A) = tr(dA)",
    "diag": "d diag(A) = diag(dA)",
    "Diag": "d Diag(a) = Diag(da)",
    "det": "d det(X) = det(X) tr(X⁻¹dX)",
    "logdet": "d logdet(X) = tr(X⁻¹dX)",
    "inv": "d X⁻¹ = −X⁻¹ dX X⁻¹",
    "norm2": "d‖x‖ = (x/‖x‖):dx",
    "norm1": "d‖x‖₁ = sign(x):dx",
    "logsumexp": "d logsumexp(x) = softmax(x):dx",
    "softmax": "d softmax(x) = s∘(dx − (s:dx)1)",
}
RULE_NAMES.update({k: v.rule for k, v in ELEMENTWISE.items()})


def _jvp_elementwise(e, d):
    fprime = ELEMENTWISE[e.op].derivative(e.args[0], e)
    return None if fprime is None else mul(fprime, d[0])


for _op in ELEMENTWISE:
    jvp_rules[_op] = _jvp_elementwise


def differential(root: ir.Expr, wrt: str):
    """dλ for the symbol ``wrt``: returns (dλ or None, the rule names used in order, and
    the differential of every node, node -> dnode or None)."""
    dW = None
    memo: dict = {}
    used: list = []
    for node in ir.walk(root):
        if node.op == "sym":
            if node.attr == wrt:
                dW = dW or ir.delta(wrt, node.shape)
                memo[node] = dW
            else:
                memo[node] = None
            continue
        if not node.args:
            memo[node] = None
            continue
        d = [memo[a] for a in node.args]
        if all(x is None for x in d):
            memo[node] = None
            continue
        dn = jvp_rules[node.op](node, d)
        if dn is not None and dn.shape != node.shape:  # d(x + β) = dβ 1: keep the broadcast
            dn = mul(dn, const(1.0, node.shape))
        memo[node] = dn
        name = RULE_NAMES[node.op]
        if name not in used:
            used.append(name)
    return memo[root], used, memo
