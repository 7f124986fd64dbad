"""The differential dλ, one rule per operator (the ``jvp`` of its registry entry).

A rule receives the node and the differentials of its arguments (``None`` where an
argument does not depend on the variable) and returns the node's differential,
an expression linear in dW, or ``None``.  Elementwise functions give their derivative
f'(x), from x and the node f(x) itself (so d exp(x) reuses exp(x)).
"""
from __future__ import annotations

from . import ir
from .ir import const, mul
from .ops import REGISTRY


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
        op = REGISTRY[node.op]
        dn = op.jvp(node, d)
        if dn is not None and dn.shape != node.shape:  # d(x + β) = dβ 1: keep the broadcast
            dn = mul(dn, const(1.0, node.shape))
        memo[node] = dn
        if op.rule not in used:
            used.append(op.rule)
    return memo[root], used, memo
