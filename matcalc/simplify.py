"""Simplification to the textbook form.

``simplify(e)`` rebuilds an expression bottom-up with canonical constructors
(``s_add``, ``s_mul``, …): each assumes its arguments are already simplified and
returns a simplified node.  Like terms are collected with a dictionary keyed by
the (hash-consed) term, constants are folded, ``∘1``, ``@I`` and double
transposes vanish, scalars move to the front, common factors are pulled out
(``αp − α = α(p − 1)``, ``Ax + Aᵀx = (A + Aᵀ)x``) and ``Diag(h)v`` becomes ``h∘v``.
"""
from __future__ import annotations

import itertools
import math
import weakref

from . import ir
from .ir import SCALAR, Expr, const
from .ops import MAX_MATRIX_POWER, REGISTRY, axis_count, broadcast_axis, count
from .symmetric import symmetric_form

_cache: "weakref.WeakKeyDictionary[Expr, Expr]" = weakref.WeakKeyDictionary()


def _pending(e: Expr):
    """The nodes of e not simplified yet, children first (cached subtrees are not entered)."""
    order, seen, stack = [], set(), [(e, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
        elif node not in seen and node not in _cache:
            seen.add(node)
            stack.append((node, True))
            stack.extend((a, False) for a in reversed(node.args))
    return order


_SAME = object()  # a memo's value for a key that is its own value (the entry would keep it alive)


def _memo_get(memo, e: Expr):
    hit = memo.get(e)
    return e if hit is _SAME else hit


def _memo_set(memo, e: Expr, out: Expr) -> None:
    memo[e] = _SAME if out is e else out


def simplify(e: Expr) -> Expr:
    hit = _memo_get(_cache, e)
    if hit is not None:
        return hit
    for node in _pending(e):
        if node in _cache:
            continue
        args = tuple(_memo_get(_cache, a) for a in node.args)
        out = _rebuild(node, args)
        if out.shape != node.shape:  # a cancellation must not lose a broadcast (τ + u - u)
            out = s_mul(out, const(1.0, node.shape))
        _memo_set(_cache, node, out)
        if out not in _cache:
            _memo_set(_cache, out, out)
    return _memo_get(_cache, e)


def settle(e: Expr, rounds: int = 3) -> Expr:
    """simplify(e), then passes over the result until a pass changes nothing (at most rounds).
    The rules reach a form, not always the last one: a sum partly factored keeps its other
    terms as they were (A@B@X + A@B@X.T + …), and the memo takes every result as final.  A
    pass runs every node's rules again on the result, with a memo of its own."""
    out = _memo_get(_settled, e)
    if out is not None:
        return out
    out = simplify(e)
    for _ in range(rounds):
        again = simplify_pass(out)
        if again == out:
            break
        out = again
    _memo_set(_settled, e, out)
    _memo_set(_settled, out, out)
    return out


_OPENING = [False]  # True in a gradient's last pass (opened_quotients) only


def opened_quotients(e: Expr) -> Expr:
    """A last pass over a settled gradient e where quotients meet what cancels them: products
    opened over a sum with such a quotient (_opened_over_quotient), numbers taken into a summed
    quotient (_into_summed_quotient), terms brought over a sum's denominator (_common_denominator);
    taken if the whole is shorter: inside the rules, such a form met by other rules can keep like
    terms apart elsewhere, and get longer."""
    if not any(n.op == "div" for n in ir.walk(e)):
        return e
    _OPENING[0] = True
    try:
        again = simplify_pass(e)
    finally:
        _OPENING[0] = False
    return again if ir.tree_size(again) < ir.tree_size(e) else e


def simplify_pass(e: Expr) -> Expr:
    """Every node's rules run once more over e, bottom-up, with a memo of this pass's own."""
    memo: dict = {}
    for node in ir.walk(e):
        if node not in memo:
            out = _rebuild(node, tuple(memo[a] for a in node.args))
            if out.shape != node.shape:
                out = s_mul(out, const(1.0, node.shape))
            memo[node] = out
    return memo[e]


_settled: "weakref.WeakKeyDictionary[Expr, Expr]" = weakref.WeakKeyDictionary()


def _rebuild(node: Expr, args) -> Expr:
    op = node.op
    if not args:
        return node
    if op == "add":
        return s_add(*args)
    if op == "mul":
        return s_mul(*args)
    if op == "matmul":
        return s_matmul(*args)
    if op == "T":
        return s_T(args[0])
    if op == "div":
        return s_div(*args)
    if op == "pow":
        return s_pow(*args)
    if op == "frob":
        return s_frob(*args)
    return s_func(op, *args, attr=node.attr)


# ------------------------------------------------------------------ helpers

def is_zero(e: Expr) -> bool:
    return e.op == "const" and e.attr == 0.0


split_coeff = ir.split_coeff


def factors(e: Expr):
    return list(e.args) if e.op == "mul" else [e]


def _rank(f: Expr) -> int:
    if f.op == "const":
        return 0 if f.shape == SCALAR else 2
    return 1 if f.shape == SCALAR else 3


def scale(c: float, e: Expr) -> Expr:
    return e if c == 1.0 else s_mul(const(c), e)


# ------------------------------------------------------------------ add

def s_add(*terms: Expr) -> Expr:
    shape = ir._broadcast([t.shape for t in terms])
    out = _s_add(terms)
    if out.shape != shape:  # the array terms cancelled: τ + u - u = τ1
        out = s_mul(out, const(1.0, shape))
    return out


def _s_add(terms) -> Expr:
    flat = []
    for t in terms:
        flat.extend(t.args if t.op == "add" else [t])
    shape = ir._broadcast([t.shape for t in flat])
    inner = next((t.args[0].shape for t in flat if t.op == "vec"), None)
    if inner is not None and len(flat) > 1:  # c vec(A) + vec(B) + d1 = vec(cA + B + d1): vec is linear
        vecs = [split_coeff(t) for t in flat]
        if all(core is not None and core.op == "vec" and core.args[0].shape == inner
               or t.op == "const" and t.shape == shape or t.shape == SCALAR for t, (_, core) in zip(flat, vecs)):
            return s_func("vec", s_add(*[const(t.attr, inner) if t.op == "const"
                                          else s_mul(t, const(1.0, inner)) if t.shape == SCALAR
                                          else scale(c, core.args[0]) for t, (c, core) in zip(flat, vecs)]))
    shorter = _open_brackets(flat, shape)
    if shorter is None:
        shorter = _complementary_sigmoids(flat, shape)
    if shorter is None:
        shorter = _common_denominator(flat, shape)
    if shorter is not None:
        return shorter
    if len(flat) > 1 and any(t.shape == shape for t in flat) and all(
            t.shape == SCALAR or t.op in ("const", "mul", "div") for t in flat):  # β1 - 1 = (β - 1)1
        betas = [t if t.shape == SCALAR else _spread_number(t) for t in flat]
        if all(b is not None for b in betas) and any(t.shape != SCALAR and t.op != "const" for t in flat):
            return s_mul(_s_add(betas), const(1.0, shape))
    if any(t.shape == shape and _spread_number(t) is None for t in flat):  # x - mu∘1 = x - mu (the sum spreads mu)
        flat = [b if t.op == "mul" and t.shape != SCALAR and (b := _spread_number(t)) is not None else t for t in flat]
    total = 0.0
    coeffs: dict = {}
    shown: dict = {}  # a term's like-key -> the form it was first written in
    for t in flat:
        c, core = split_coeff(t)
        if core is None:
            total += c
        else:
            key = _like_key(core)
            shown.setdefault(key, core)
            coeffs[key] = coeffs.get(key, 0.0) + c
    if not math.isfinite(total) or not all(math.isfinite(c) for c in coeffs.values()):
        return Expr("add", tuple(flat), None, shape)  # an overflow: leave the sum alone
    ones = next((key for key in coeffs if key.op == "const" and key.attr == 1.0 and key.shape == shape), None)
    if ones is not None and total != 0.0:  # 1 - 1 of a number and an array of ones: one array
        coeffs[ones] += total
        total = 0.0
    items = [(shown[key], c) for key, c in coeffs.items() if c != 0.0]
    # a/d + b/d = (a + b)/d, Diag(a) - Diag(b) = Diag(a - b)
    items = _merge_terms(items, lambda core: core.args[1] if core.op == "div" and core.args[1].shape == SCALAR
                         else None, lambda num, d: s_div(num, d))
    items = _merge_terms(items, lambda core: "Diag" if core.op == "Diag" else None,
                         lambda arg, _: s_func("Diag", arg))
    # A:C - B:C = (A - B):C, a common second side that is not a symbol (log(q):p - z:p, p = softmax(z),
    # in a KL through softmax; C:Y + D:Y reads as well as (C + D):Y)
    items = _merge_terms(items, lambda core: core.args[1] if core.op == "frob" and core.args[1].args else None,
                         lambda arg, side: s_frob(arg, side))
    if not items:
        return const(total, shape)
    full = any(core.shape == shape for core, _ in items)
    # positive terms first, then negative ones, a constant last in its group: I - inv(S).T,
    # p - 1, 1 - tanh(z)**2
    items.sort(key=lambda it: it[1] < 0)
    if len(items) + (total != 0.0) > 1:
        factored = _factor(items, total, shape)
        if factored is not None:
            return factored
    out = [scale(c, core) for core, c in items]
    if total != 0.0:
        k = const(total, SCALAR if full else shape)
        npos = sum(c > 0 for _, c in items)
        out.insert(npos if total > 0 else len(out), k)
    if len(out) == 1:
        return out[0]
    return Expr("add", tuple(out), None, ir._broadcast([t.shape for t in out]))


def _merge_terms(items, key, build):
    """(core, coefficient) items with the terms whose key(core) is one (not None) merged into
    build(Σ c·core.args[0], key): terms that differ only in their first argument, as one; a
    merged term that cancels is left out."""
    groups: dict = {}
    for core, c in items:
        k = key(core)
        if k is not None:
            groups.setdefault(k, []).append((core, c))
    for k, group in groups.items():
        if len(group) > 1:
            merged = build(s_add(*[scale(c, core.args[0]) for core, c in group]), k)
            items = [it for it in items if it not in group] + ([] if is_zero(merged) else [(merged, 1.0)])
    return items


_unordered: "weakref.WeakKeyDictionary[Expr, Expr]" = weakref.WeakKeyDictionary()


def _order_free(e: Expr) -> Expr:
    """e with the terms of every sum and the factors of every entrywise product in it in one
    order (a key only: log(a + b) and log(b + a) are one term, exp(a + b)∘exp(b + a) one power,
    log(A∘X + 1) and log(X∘A + 1) one term)."""
    hit = _memo_get(_unordered, e)
    if hit is None:
        args = tuple(_order_free(a) for a in e.args)
        if e.op in ("add", "mul"):
            args = tuple(sorted(args, key=id))
        hit = e if args == e.args else Expr(e.op, args, e.attr, e.shape)
        _memo_set(_unordered, e, hit)
    return hit


def _like_key(core: Expr) -> Expr:
    return _order_free(_like_key_ordered(core))


def _like_key_ordered(core: Expr) -> Expr:
    """What like terms share: a matrix chain as its factors with the transposes moved in,
    so (AB)ᵀ, BᵀAᵀ and (A)ᵀ… are one term (tr(X⁴)'s gradient collects to 4(X³)ᵀ, not
    (X³)ᵀ + 3(X²)ᵀXᵀ), Xᵏ is X…X; an inner product in any spelling (x:y, y:x, xᵀy, sum(x∘y),
    sum(x**2) for y = x) is one term; and Y**-1 is 1/Y."""
    if core.shape == SCALAR and core.op in _INNER_OPS:
        pair = _inner_pair(core)
        if pair is not None:
            return _pair_key(*pair)
    if core.op == "mul" and any(f.shape == SCALAR and f.op in _INNER_OPS for f in core.args):
        keyed = tuple(_like_key_ordered(f) if f.shape == SCALAR and f.op in _INNER_OPS else f
                      for f in core.args)  # 2(dx:x)x and 2(x:dx)x: one term (_order_free orders them)
        return Expr("mul", keyed, None, core.shape)
    if core.op in ("matmul", "T", "matrix_power"):
        fs = _chain_key(core)
        return fs[0] if len(fs) == 1 else Expr("matmul", tuple(fs), None, core.shape)
    if core.op == "pow" and core.args[1].op == "const" and core.args[1].attr < 0:  # Y**-1 and 1/Y
        b, k = core.args[0], -core.args[1].attr
        return Expr("div", (const(1.0), b if k == 1.0 else Expr("pow", (b, const(k)), None, b.shape)), None,
                    core.shape)
    return core


_INNER_OPS = ("frob", "matmul", "sum", "tr")


def _pair_key(a: Expr, b: Expr) -> Expr:
    """One key for a:b, b:a, aᵀ:bᵀ and bᵀ:aᵀ (a key only): of the two, the pair with fewer
    transposes on top."""
    def flip(x):
        return x.args[0] if x.op == "T" else Expr("T", (x,), None, x.shape[::-1])

    pairs = [tuple(sorted(p, key=id)) for p in ((a, b), (flip(a), flip(b)))]
    best = min(pairs, key=lambda p: (sum(x.op == "T" for x in p), id(p[0]), id(p[1])))
    return Expr("frob", best, None, SCALAR)


def _inner_pair(e: Expr):
    """(a, b) where the number e is the inner product a:b written as a:b, aᵀb of columns,
    tr(aᵀb), sum(a∘b) or sum(a**2); else None."""
    if e.op == "frob":
        return e.args
    if e.op == "tr" and e.args[0].op == "matmul":  # tr(AB) = Aᵀ:B
        A, B = e.args[0].args
        return (A.args[0] if A.op == "T" else Expr("T", (A,), None, A.shape[::-1])), B
    if e.op == "matmul" and e.args[0].op == "T" and e.args[0].shape[0] == 1 and e.args[1].shape[1] == 1:
        return e.args[0].args[0], e.args[1]
    if e.op == "sum" and e.attr is None:
        a = e.args[0]
        if a.op == "pow" and a.args[1].op == "const" and a.args[1].attr == 2.0:
            return a.args[0], a.args[0]
        if a.op == "mul" and len(a.args) == 2 and a.args[0].shape == a.args[1].shape == a.shape:
            return a.args
    return None


def _chain_key(e: Expr) -> list:
    """The factors of a matrix chain, with every transpose on a single factor (a key only)."""
    if e.op == "matmul":
        return [f for a in e.args for f in _chain_key(a)]
    if e.op == "matrix_power" and isinstance(e.attr, int) and 2 <= e.attr <= 8:
        return _chain_key(e.args[0]) * e.attr
    if e.op == "T":
        inner = e.args[0]
        if inner.op == "T":
            return _chain_key(inner.args[0])
        if inner.op in ("matmul", "matrix_power"):
            fs = _chain_key(inner)
            if len(fs) > 1:
                return [f.args[0] if f.op == "T" else Expr("T", (f,), None, f.shape[::-1]) for f in reversed(fs)]
    return [e]


def _open_brackets(flat, shape):
    """c(a + b) + … = ca + cb + … for a number c, when terms then cancel and the sum gets
    shorter: (1 − σ(z)) − (1 − σ(−z)) = σ(−z) − σ(z).  Terms _opened_where_alike opens are
    opened too where that leaves fewer terms than without them.  None otherwise."""
    opened, inside, outside, maybe = [], [], [], []
    for t in flat:
        c, core = split_coeff(t)
        if core is not None and core.op == "add" and core.shape == t.shape:
            opened.extend(scale(c, u) for u in core.args)
            inside.extend(_key_of(split_coeff(u)[1]) for u in core.args)
        elif core is not None and core.op == "frob" and any(a.op == "add" for a in core.args):
            i = 0 if core.args[0].op == "add" else 1  # (C + D):Y = C:Y + D:Y
            whole = core.args[i].shape  # (a broadcast term counts as the array it spreads to: (C + β):Y)
            terms = [u if u.shape == whole else s_mul(u, const(1.0, whole)) for u in core.args[i].args]
            parts = [s_frob(u, core.args[1]) if i == 0 else s_frob(core.args[0], u) for u in terms]
            opened.extend(scale(c, u) for u in parts)
            inside.extend(_key_of(split_coeff(u)[1]) for u in parts)
        elif core is not None and (parts := _opened_where_alike(core)) is not None:
            maybe.append((t, c, core, parts, [_key_of(split_coeff(u)[1]) for u in parts]))
        else:
            opened.append(t)
            outside.append(_key_of(core))
    closed = _opened_sum(opened + [t for t, *_ in maybe], inside, outside + [_key_of(m[2]) for m in maybe],
                         flat, shape)

    def meets(i, core, keys):  # a part's like in another term (an equal term is collected anyway)
        own = _key_of(core)
        elsewhere = set(inside) | {k for k in outside if k != own} | {
            k for j, m in enumerate(maybe) if j != i and m[2] != core for k in m[4] + [_key_of(m[2])]}
        return any(k in elsewhere for k in keys)

    wide = [(t, c, parts, keys) for i, (t, c, core, parts, keys) in enumerate(maybe) if meets(i, core, keys)]
    if not wide:
        return closed
    rest = [t for t, *_ in maybe if all(t is not w[0] for w in wide)]
    out = _opened_sum(opened + rest + [scale(c, u) for _, c, parts, _ in wide for u in parts],
                      inside + [k for *_, keys in wide for k in keys],
                      outside + [_key_of(split_coeff(t)[1]) for t in rest], flat, shape)
    count = lambda e: len(e.args) if e.op == "add" else 1  # noqa: E731
    if out is None or count(out) >= count(closed if closed is not None else Expr("add", tuple(flat), None, shape)):
        return closed
    return out


def _opened_sum(opened, inside, outside, flat, shape):
    """The sum of opened (flat's terms, some brackets opened) where a term inside a bracket
    meets its like outside or in another bracket and the sum gets shorter (else it never
    does, and trying would redo every bracket nested inside: exponential); else None."""
    if not inside or len(set(inside) | set(outside)) == len(inside) + len(outside):
        return None
    return _if_shorter(opened, flat, shape)


def _opened_where_alike(core: Expr):
    """The terms of core opened, for _open_brackets to take where one meets its like: a
    transposed sum or entrywise product with the transposes pushed down ((A − Aᵀ)ᵀ = Aᵀ − A,
    (f(X)∘g(Xᵀ))ᵀ = f(Xᵀ)∘g(X): (W − Wᵀ)ᵀ + W − Wᵀ = 0), or a matrix product with a sum among
    its factors distributed over it ((I − K⁻¹yyᵀ)K⁻¹ + K⁻¹(I − yyᵀK⁻¹) = 2K⁻¹ − 2K⁻¹yyᵀK⁻¹),
    transposed too; else None."""
    if core.op == "T" and core.args[0].op == "add":
        return [_pushed_T(u) for u in core.args[0].args]
    if core.op == "T" and core.args[0].op == "mul":
        return [_pushed_T(core.args[0])]
    if core.op == "T" and core.args[0].op == "matmul":  # (HᵀS⁻¹(I − vvᵀS⁻¹)H)ᵀ, S symmetric
        parts = _opened_where_alike(core.args[0])
        return None if parts is None else [s_T(u) for u in parts]
    if core.op == "matmul":
        fs = ir.chain_factors(core)
        i = next((i for i, f in enumerate(fs) if f.op == "add"), None)
        if i is not None:
            return [_chain(fs[:i] + [u if u.shape == fs[i].shape else s_mul(u, const(1.0, fs[i].shape))]
                           + fs[i + 1:]) for u in fs[i].args]
    return None


def _pushed_T(e: Expr) -> Expr:
    """eᵀ with the transpose taken down through sums, entrywise products, numbers and entrywise
    functions to the leaves (f(X)ᵀ = f(Xᵀ)), where s_T leaves it on top."""
    if e.op in ("add", "mul") and e.shape != SCALAR:
        parts = [_pushed_T(u) for u in e.args]
        return s_add(*parts) if e.op == "add" else s_mul(*parts)
    op = REGISTRY.get(e.op)
    if op is not None and op.elementwise and len(e.args) == 1 and e.attr is None:
        return s_func(e.op, _pushed_T(e.args[0]))
    if e.op == "pow" and e.args[1].shape == SCALAR:
        return s_pow(_pushed_T(e.args[0]), e.args[1])
    return s_T(e)


def _key_of(core):
    return None if core is None else _like_key(core)


def _complementary_sigmoids(flat, shape):
    """a∘σ(z) + b∘σ(−z) = (a − b)∘σ(z) + b, with σ(−z) = 1 − σ(z) and the products written
    out, when the sum gets shorter: the logistic loss with 0/1 labels, (1 − y)∘σ(z) − y∘σ(−z),
    becomes σ(z) − y, as PyTorch's BCE-with-logits computes it.  None when the sum has no such
    pair, is not linear in σ, or would not get shorter."""
    sig = [f.args[0] for t in flat for f in factors(t) if f.op == "sigmoid"]
    if len(sig) < 2:
        return None
    seen = set(sig)  # (a set: a sum of a deep nest's Hessian holds hundreds of σ)
    pair = next((z for z in sig if _negated(z) in seen), None)
    if pair is None:
        return None
    z, minus = (pair, _negated(pair)) if pair.op != "mul" or pair.args[0].op != "const" else (
        _negated(pair), pair)  # σ of the side without a leading −1 stays
    s_z, s_minus = Expr("sigmoid", (z,), None, z.shape), Expr("sigmoid", (minus,), None, z.shape)
    one_minus = (const(1.0), s_mul(const(-1.0), s_z))
    terms = []
    for t in flat:
        fs = factors(t)
        if s_z not in fs and s_minus not in fs:
            terms.append(t)
            continue
        if sum(f in (s_z, s_minus) for f in fs) > 1 or any(
                f not in (s_z, s_minus) and _contains(f, (s_z, s_minus)) for f in fs):
            return None  # not linear in σ: σ(z)∘σ(−z) written out is a cubic that cancels
        choices = [one_minus if f == s_minus else (f.args if f.op == "add" else (f,)) for f in fs]
        if math.prod(len(c) for c in choices) > 16:
            return None
        for pick in itertools.product(*choices):
            terms.append(s_mul(*pick))
    return _if_shorter(terms, flat, shape)


def _common_denominator(flat, shape):
    """Terms over powers of one base B brought over the highest, when the numerator then
    shortens: 1/s − u²/s³ = (s² − u²)/s³ = 1/s³ for s = sqrt(u² + 1), since s² = u² + 1 (the
    Hessian of sqrt(1 + u²)).  A whole power of B that multiplies a numerator is written out
    when B is a sum; None when the terms have no such denominators, or no terms of the
    numerator cancel (then the quotients read better apart), or nothing gets shorter."""
    parts, others = [], []  # (coefficient, numerator, exponent of B in the denominator); the rest
    base, root, split = None, False, False
    for t in flat:
        c, core = split_coeff(t)
        if core is None or core.op != "div":
            others.append(t)
            continue
        num, den = core.args
        if den.op == "mul":  # u²/(δ² s³): the power of a sum apart, δ² with the numerator
            sums = [f for f in den.args if _base_exponent(f)[0].op == "add"]
            if len(sums) == 1:
                rest = [f for f in den.args if f is not sums[0]]
                num, den, split = s_div(num, s_mul(*rest)), sums[0], True
        b, k = _base_exponent(den)
        if base is None:
            base = b
        if b is not base or k <= 0 or not math.isfinite(2 * k) or 2 * k != round(2 * k):  # (whole or half powers)
            others.append(t)
            continue
        parts.append((c, num, k))
        root = root or _exponents([den], {})[1] != set()
    if _OPENING[0] and base is not None and base.op == "add" and others and len(others) <= 3:
        # (the gradient's last pass) y∘e⊘(θ + e) + θ∘e⊘(θ + e) − y = θ∘(e − y)⊘(θ + e): every other
        # term an array over the sum's denominator, or none of them
        whole = [split_coeff(t) for t in others]
        if all(core is not None and core.shape == shape for _, core in whole):
            parts.extend((c, core, 0.0) for c, core in whole)
            others = []
    if base is None or len({k for _, _, k in parts}) < 2 or len(parts) > 8:
        return None
    top = max(k for _, _, k in parts)
    if base.op != "add" or len(base.args) > 4 or any(top - k not in (0.0, 1.0) for _, _, k in parts):
        return None  # (only B itself written out, B a sum, can cancel against the other terms)
    terms = []
    for c, num, k in parts:  # (x/δ)ᵏ as xᵏ/δᵏ in the numerators and in B (its derivative's form)
        num = s_mul(*[_quotient_power(f) for f in factors(num)]) if num.op == "mul" else _quotient_power(num)
        if k == top:
            terms.append(scale(c, num))
        else:  # num∘B, B a sum: written out
            terms.extend(scale(c, s_mul(num, _quotient_power(u))) for u in base.args)
    keys = [_key_of(split_coeff(t)[1]) for t in terms]
    if len(set(keys)) == len(keys):  # no like terms: nothing can cancel
        return None
    numerator = _s_add(terms)
    kept = len(numerator.args) if numerator.op == "add" else 1
    if kept >= len(terms) or kept > len(parts) or split and kept > 1:  # no terms cancelled (or, with a
        return None  # denominator taken apart, not down to one: 1/s − u²/(δ²s³) = 1/s³): they stay apart
    out = s_div(numerator, _power(base, top, root))
    if others:
        out = _s_add(others + [out])
    before = ir.tree_size(Expr("add", tuple(flat), None, shape))
    if out.shape != shape or ir.tree_size(out) >= (0.6 * before if split else before):
        return None  # (a denominator taken apart: for a clear gain only)
    return out


def _ones_row(e: Expr) -> bool:
    """A row of one number, c1ᵀ (a const 1×k, k not 1)."""
    return e.op == "const" and e.shape[0] == 1 and e.shape[1] != 1


def _quotient_power(u: Expr) -> Expr:
    """(x/δ)ᵏ as xᵏ/δᵏ for a scalar δ and a whole k from 2 to 4 (a numerator's term to meet);
    u itself otherwise."""
    c, core = split_coeff(u)
    if core is None or core.op != "pow" or core.args[0].op != "div" or core.args[0].args[1].shape != SCALAR:
        return u
    k = core.args[1]
    if k.op != "const" or k.attr not in (2.0, 3.0, 4.0):
        return u
    return scale(c, s_div(s_pow(core.args[0].args[0], k), s_pow(core.args[0].args[1], k)))


def _if_shorter(terms, flat, shape):
    """The sum of terms (an equal rewriting of the sum of flat) if it is shorter, or as long
    with like terms merged (y - (x - y) is 2*y - x, no bracket), else None."""
    out = _s_add(terms)
    size, before = ir.tree_size(out), ir.tree_size(Expr("add", tuple(flat), None, shape))
    merged = (len(out.args) if out.op == "add" else 1) < len(terms)
    if out.shape != shape or size > before or size == before and not merged:
        return None
    return out


def _contains(e: Expr, nodes) -> bool:
    return any(n in nodes for n in ir.walk(e))


def _gate(f: Expr):
    """(u, True) for step(u), (u, False) for 1 − step(u): an array of 0s and 1s; else None."""
    if f.op == "step":
        return f.args[0], True
    if f.op == "add" and len(f.args) == 2:
        one, other = f.args if f.args[0].op == "const" else f.args[::-1]
        c, core = split_coeff(other)
        if one.op == "const" and one.attr == 1.0 and c == -1.0 and core is not None and core.op == "step":
            return core.args[0], False
    return None


def _gates_met(fs: list):
    """The factors with the 0/1 gates on one argument u (step(±u), 1 − step(±u)) taken
    together: None where two are never both 1 (the product is 0: step(u) and 1 − step(u),
    step(u) and step(−u), step(0) being 0); step(u) and 1 − step(−u) are step(u).  Equal
    gates stay (s_pow's sᵏ = s)."""
    gates = [(i, g) for i, g in enumerate(map(_gate, fs)) if g is not None]
    drop = set()
    for a, (i, (u, on)) in enumerate(gates):
        for j, (v, on2) in gates[a + 1:]:
            if v == u:
                if on != on2:
                    return None
            elif is_zero(s_add(u, v)):  # v = −u
                if on and on2:
                    return None
                if on != on2:  # step(u)∘(1 − step(−u)) = step(u)
                    drop.add(j if on else i)
    return [f for i, f in enumerate(fs) if i not in drop] if drop else fs


def _negated(z: Expr) -> Expr:
    return s_mul(const(-1.0), z)


def _without_minus(e: Expr):
    """−e written with one minus fewer, where e holds a sum of negative terms only, reached
    through :, a Hadamard factor or a transpose: −(dσ∘(−P − Q)):B = (dσ∘(P + Q)):B; else None."""
    if e.op == "add":
        if all(ir.negative_term(t)[0] for t in e.args):
            return s_add(*[scale(-1.0, t) for t in e.args])
        return None
    if e.op == "T":
        a = _without_minus(e.args[0])
        return None if a is None else s_T(a)
    if e.op == "frob":
        for i, a in enumerate(e.args):
            a = _without_minus(a)
            if a is not None:
                return s_frob(*(a if j == i else b for j, b in enumerate(e.args)))
        return None
    if e.op == "mul" and e.args[0].op != "const":
        for i, a in enumerate(e.args):
            a = _without_minus(a) if a.shape == e.shape else None
            if a is not None:
                return s_mul(*(a if j == i else b for j, b in enumerate(e.args)))
    return None


def _common_factors(items) -> list:
    """The factors (not numbers) every term's core has."""
    common = None
    for core, _ in items:
        fs = [f for f in factors(core) if f.op != "const"]
        if common is None:
            common = fs
        else:
            rest, keep = list(fs), []
            for f in common:
                if f in rest:
                    rest.remove(f)
                    keep.append(f)
            common = keep
        if not common:
            break
    return common or []


def _factor(items, total, shape):
    """Pull out what every term shares: a common Hadamard factor, a common left or
    right matrix factor, or a common numeric coefficient."""
    if total == 0.0:
        common = _common_factors(items)
        if common and len(items) > 1:
            inner = []
            for core, c in items:
                fs = factors(core)
                for f in common:
                    fs.remove(f)
                inner.append(scale(c, s_mul(*fs) if fs else const(1.0)))
            return s_mul(*common, s_add(*inner))
        for side in (0, 1):
            if len(items) > 1 and all(core.op == "matmul" for core, _ in items):
                first = items[0][0].args[side]
                if all(core.args[side] is first for core, _ in items) and len(
                        {core.args[1 - side].shape for core, _ in items}) == 1:  # (no broadcast term)
                    others = s_add(*[scale(c, core.args[1 - side]) for core, c in items])
                    return s_matmul(first, others) if side == 0 else s_matmul(others, first)
    grouped = _group_products(items, shape)
    if grouped is not None:
        return s_add(grouped, const(total)) if total != 0.0 else grouped
    mags = {abs(c) for _, c in items}
    if total != 0.0:
        mags.add(abs(total))
    if len(mags) == 1:
        m = mags.pop()
        if m != 1.0:
            inner = [scale(c / m, core) for core, c in items]
            if total:
                inner.append(const(total / m))
            return s_mul(const(m), s_add(*inner))
    return None


def _group_products(items, shape):
    """b + Aᵀx + Ax = b + (Aᵀ + A)x: the products among the terms that share a right (or
    left) factor, as one product; None if no two terms share one."""
    products = [_scaled_product(core) for core, _ in items]  # (scalar factors, a product) or None
    for side in (1, 0):
        groups: dict = {}
        for i, sp in enumerate(products):
            if sp is not None:
                sc, m = sp
                groups.setdefault((sc, m.args[side], m.args[1 - side].shape), []).append(i)
        groups = {k: g for k, g in groups.items() if len(g) > 1}
        if not groups or len(groups) == 1 and len(next(iter(groups.values()))) == len(items) \
                and not next(iter(groups))[0]:
            continue  # (every term shares it: _factor's own case)
        out, done = [], set()
        for i, (core, c) in enumerate(items):
            if i in done:
                continue
            sp = products[i]
            g = groups.get((sp[0], sp[1].args[side], sp[1].args[1 - side].shape)) if sp is not None else None
            if g is None:
                out.append(scale(c, core))
                continue
            done.update(g)
            sc, m = sp
            others = s_add(*[scale(items[j][1], products[j][1].args[1 - side]) for j in g])
            out.append(s_mul(*sc, s_matmul(m.args[side], others) if side == 0 else s_matmul(others, m.args[side])))
        return Expr("add", tuple(out), None, shape) if len(out) > 1 else out[0]
    return None


def _scaled_product(core: Expr):
    """(its scalar factors, as a tuple, and the matrix product) of a product γ·(A@x) or A@x,
    else None: b − ½γSᵀw − ½γSw is b − ½γ(Sᵀ + S)w."""
    if core.op == "matmul":
        return (), core
    if core.op == "mul":
        sc = tuple(f for f in core.args if f.shape == SCALAR)
        rest = [f for f in core.args if f.shape != SCALAR]
        if sc and len(rest) == 1 and rest[0].op == "matmul" and rest[0].shape == core.shape:
            return sc, rest[0]
    return None


# ------------------------------------------------------------------ mul

def s_mul(*fs: Expr) -> Expr:
    flat = []
    for f in fs:
        flat.extend(f.args if f.op == "mul" else [f])
    shape = ir._broadcast([f.shape for f in flat])
    arrays = [f for f in flat if f.shape != SCALAR]
    if len(arrays) > 1 and all(f.op == "vec" and f.args[0].shape == arrays[0].args[0].shape for f in arrays):
        # vec(A)∘vec(B) = vec(A∘B), entry by entry
        return s_mul(*[f for f in flat if f.shape == SCALAR], s_func("vec", s_mul(*[f.args[0] for f in arrays])))
    if len(arrays) == 2 and all(f.op == "kron" for f in arrays) \
            and all(p.shape == q.shape for p, q in zip(arrays[0].args, arrays[1].args)):
        # (P⊗Q)∘(R⊗S) = (P∘R)⊗(Q∘S) for P, R and Q, S of one shape
        return s_mul(*[f for f in flat if f.shape == SCALAR],
                     s_func("kron", *(s_mul(p, q) for p, q in zip(arrays[0].args, arrays[1].args))))
    c = 1.0
    multiplied = 0  # numbers other than ±1 multiplied here (only their product has roundings to undo)
    rest, denominators = [], []
    for f in flat:
        if f.op == "const":
            c *= f.attr
            multiplied += abs(f.attr) != 1.0
        elif f.op == "div":  # a∘(b⊘d) = (a∘b)⊘d: one division per product
            n0, d0 = f.args
            if n0.op == "const" and n0.shape == SCALAR:
                c *= n0.attr
                multiplied += abs(n0.attr) != 1.0
            else:
                rest.extend(factors(n0))
            denominators.append(d0)
        else:
            rest.append(f)
    if multiplied > 1:  # (a number as typed, 1.0000000000000002, stays as it is)
        c = _rounded(c)
    for f in list(rest):  # (its number of entries)∘mean(X) = sum(X), along an axis too
        if f.op == "mean":
            n = count(f.args[0].shape) if f.attr is None else axis_count(f.args[0].shape, f.attr)
            dims = factors(n)  # (a size declared as a number is a const: left alone)
            if all(g.op == "dim" for g in dims) and all(rest.count(g) >= dims.count(g) for g in dims):
                for g in dims:
                    rest.remove(g)
                rest[rest.index(f)] = s_func("sum", f.args[0], attr=f.attr)
    for f in list(rest):  # sign(u)∘u = |u| (log|det X|'s derivative: sign(d) d / |d|)
        if f.op == "sign" and f.args[0] in rest and f.args[0].shape == f.shape:
            rest.remove(f)
            rest[rest.index(f.args[0])] = s_func("abs", f.args[0])
    _sign_by_abs(rest, denominators)
    rest = _gates_met(rest)  # step(u)∘(1 − step(u)) = 0, step(u)∘step(−u) = 0, step(u)∘(1 − step(−u)) = step(u)
    if rest is None:
        return const(0.0, shape)
    for i, f in enumerate(rest):  # c∘(−a − b) = −c∘(a + b): a sum of negative terms only, its sign outside
        if f.op == "add" and all(split_coeff(t)[0] < 0 for t in f.args):
            c, rest[i] = -c, s_add(*[scale(-1.0, t) for t in f.args])
    if _OPENING[0] and not denominators and c != 0.0:
        opened = _opened_over_quotient(c, rest, shape)
        if opened is None:
            opened = _into_summed_quotient(c, rest, shape)
        if opened is not None:  # (1 − y⊘(t∘u))∘t∘u = t∘u − y; sum(r⊘(ν²σ⁴q))νσ = sum(r⊘(νσ³q))
            return opened
    if denominators and c != 0.0:  # x∘y⊘x = y, 4x⊘(4y) = x⊘y, x⊘x³ = 1⊘x²
        c, rest, denominators = _cancel_quotient(c, rest, denominators)
    if denominators and c != 0.0:
        for d in list(denominators):
            sinh = next((f for f in rest if d.op == "cosh" and f.op == "sinh" and f.args[0] == d.args[0]
                         and f.shape == d.shape), None)
            if sinh is not None:  # sinh(z)⊘cosh(z) = tanh(z) (log cosh's derivative)
                rest[rest.index(sinh)] = s_func("tanh", d.args[0])
                denominators.remove(d)
        if not denominators:
            return s_mul(const(c), *rest) if rest else const(c, shape)
        num = s_mul(*rest) if rest else const(1.0)
        negative, pos = ir.negative_term(num)
        flipped = pos if negative else _without_minus(num)  # -2*(-(P + Q)/α) = 2*(P + Q)/α
        if flipped is not None and flipped.shape == num.shape and _without_minus(flipped) is None:
            c, num = -c, flipped
        q = _div_node(num, s_mul(*denominators), shape)
        return q if c == 1.0 else Expr("mul", (const(c), q), None, shape)
    if any(f.op == "eye" for f in rest):  # I∘Xᵀ = I∘X: only the diagonal stays
        rest = [f.args[0] if f.op == "T" else f for f in rest]
    for f in list(rest):  # relu(z)∘step(z) = relu(z) (step is relu's derivative: relu(z)² differentiated)
        if f.op == "step" and any(g.op == "relu" and g.args[0] == f.args[0] and g.shape == f.shape for g in rest):
            rest.remove(f)
    rest = _collect_powers(rest)
    if len(rest) == 1 and rest[0].shape == shape:  # -(-a - b) = a + b, inside (…):B too; and
        flipped = _without_minus(rest[0])              # c(-a - b) = -c(a + b)
        if flipped is not None and (c < 0 or rest[0].op == "add") and _without_minus(flipped) is None:
            return scale(-c, flipped)  # (a form that flips back, frob(-a, b) terms, stays: no loop)
    if not math.isfinite(c):  # an overflow: keep the factors as they are
        return Expr("mul", tuple(flat), None, shape)
    if c == 0.0 or not rest:
        return const(c, shape)
    reach = ir._broadcast([f.shape for f in rest])
    out = []
    if c != 1.0:
        out.append(const(c))
    if reach != shape:
        out.append(const(1.0, shape))  # the all-ones array that carries the shape
    # Diag(h)∘I and friends are left alone; order: number, scalars, ones, arrays
    out.extend(rest)
    out.sort(key=_rank)
    if len(out) == 1:
        return out[0]
    return Expr("mul", tuple(out), None, shape)


def _opened_over_quotient(c: float, rest: list, shape):
    """c times the factors rest with a sum among them multiplied out, where a term of the sum is
    a quotient whose denominator the other factors cancel ((1 − y⊘(t∘u))∘t∘u = t∘u − y: a Poisson
    rate's gradient), and the result is shorter; else None.  (Where they cancel only a part, the
    form changed stops like terms elsewhere from meeting.)"""
    for i, f in enumerate(rest):
        if f.op != "add" or f.shape != shape:
            continue
        others = rest[:i] + rest[i + 1:]
        if not any(_cancelled(t, others) for t in f.args):
            continue
        terms = [s_mul(const(c), t, *others) for t in f.args]
        opened = s_add(*[_spread_number(t) or t for t in terms])  # (β∘1 + A = β + A)
        if _shorter(opened, c, rest):
            return opened
    return None


def _into_summed_quotient(c: float, rest: list, shape):
    """The numbers among rest taken inside a sum of a quotient whose denominator has one of them
    (sum(r⊘(ν²σ⁴q))∘ν∘σ = sum(r⊘(νσ³q)): a Student-t scale's gradient), where that is shorter;
    else None."""
    for i, f in enumerate(rest):
        if f.op not in ("sum", "mean") or f.attr is not None or f.args[0].op != "div":
            continue
        den = factors(f.args[0].args[1])
        base = lambda x: x.args[0] if x.op == "pow" else x  # noqa: E731
        moved = [g for j, g in enumerate(rest) if j != i and g.shape == SCALAR and g.op != "const"
                 and any(base(g) == base(d) for d in den)]
        if not moved:
            continue
        kept = [g for j, g in enumerate(rest) if j != i and all(g is not m for m in moved)]
        inside = s_func(f.op, s_mul(*moved, f.args[0]))
        out = s_mul(const(c), inside, *kept)
        if _shorter(out, c, rest):
            return out
    return None


def _shorter(out: Expr, c: float, rest: list) -> bool:
    """Whether out is a smaller tree than the product c∘rest."""
    return ir.tree_size(out) < sum(ir.tree_size(g) for g in rest) + (c != 1.0) + 1


def _cancelled(term: Expr, others: list) -> bool:
    """Whether term is (a number times) a quotient whose denominator's factors are all among others."""
    core = split_coeff(term)[1]
    if core is None or core.op != "div":
        return False
    left = list(others)
    for d in factors(core.args[1]):
        if d not in left:
            return False
        left.remove(d)
    return True


# ------------------------------------------------------------------ matmul

def _split_scalars(e: Expr):
    """(scalar factors, array part) of a product."""
    if e.op != "mul":
        return [], e
    sc = [f for f in e.args if f.shape == SCALAR]
    if not sc:
        return [], e
    arr = [f for f in e.args if f.shape != SCALAR]
    return sc, (arr[0] if len(arr) == 1 else s_mul(*arr))


def _sign_by_abs(rest: list, denominators: list) -> None:
    """sign(u)∘|u|ᵏ = u∘|u|ᵏ⁻¹, sign(u)²∘|u|ᵏ = |u|ᵏ (both 0 at u = 0 too) and sign(u)⊘|u| = 1⊘u,
    in a product's factors and denominators: the gradient of Σ|x|³ is 3x∘|x|, not 3|x|²∘sign(x)."""
    def power_of_abs(g, u):
        if g.op == "abs" and g.args[0] == u:
            return 1.0
        if g.op == "pow" and g.args[0].op == "abs" and g.args[0].args[0] == u and g.args[1].op == "const":
            return g.args[1].attr
        return None

    for f in list(rest):
        squared = f.op == "pow" and f.args[0].op == "sign" and f.args[1] == const(2.0)
        if not (f.op == "sign" or squared) or f not in rest:
            continue
        u = f.args[0].args[0] if squared else f.args[0]
        if u.shape != f.shape:
            continue
        g = next((g for g in rest if g is not f and ((k := power_of_abs(g, u) or 0) == 1.0 or k >= 2.0)), None)  # (not
        # |u|^1.5: u∘|u|^-0.5 would be nan at 0)
        if g is not None:
            rest.remove(f)
            if not squared:
                k = power_of_abs(g, u)
                rest[rest.index(g)] = u
                if k != 1.0:
                    rest.append(s_pow(s_func("abs", u), const(k - 1.0)))
        elif not squared and (d := next((d for d in denominators if power_of_abs(d, u) == 1.0), None)) is not None:
            rest.remove(f)
            denominators[denominators.index(d)] = u
    for f in list(rest):  # u²∘|u|ᵏ = |u|ᵏ⁺² (20|x|³, not 5|x|³ + 15x²|x|); u∘|u|²ᵐ = u²ᵐ⁺¹ (4x³, not 4x|x|²)
        u, sq = (f.args[0], True) if f.op == "pow" and f.args[1] == const(2.0) else (f, False)
        g = next((g for g in rest if g is not f and power_of_abs(g, u) is not None), None) if f in rest else None
        if g is None or g.shape != f.shape:
            continue
        k = power_of_abs(g, u)
        if sq:
            rest.remove(f)
            rest[rest.index(g)] = s_pow(s_func("abs", u), const(k + 2.0))
        elif k == round(k) and k % 2 == 0:
            rest.remove(f)
            rest[rest.index(g)] = s_pow(u, const(k + 1.0))


def ones_multiple(e: Expr):
    """s (a scalar expression) if the array e is s times an array of ones (c1, β(c1)/γ, a sum
    of such terms), else None: e·X is then s (1 1ᵀ X), which prints with its ones."""
    if e.shape == SCALAR:
        return None
    if e.op == "const":
        return const(e.attr)
    if e.op == "mul":
        sc, arr = _split_scalars(e)
        inner = ones_multiple(arr) if sc and arr.shape == e.shape else None
        return None if inner is None else s_mul(*sc, inner)
    if e.op == "div" and e.args[1].shape == SCALAR:
        inner = ones_multiple(e.args[0])
        return None if inner is None else s_div(inner, e.args[1])
    if e.op == "add":
        parts = [ones_multiple(t) for t in e.args]
        return None if any(p is None for p in parts) else s_add(*parts)
    return None


def s_matmul(a: Expr, b: Expr) -> Expr:
    shape = (a.shape[0], b.shape[1])
    if is_zero(a) or is_zero(b):
        return const(0.0, shape)
    if a.op == "eye":
        return b
    if b.op == "eye":
        return a
    if a.shape == SCALAR or b.shape == SCALAR:
        return s_mul(a, b)
    for i, x in enumerate((a, b)):  # (β + 2 spread over an array)B = (β + 2)(1 1ᵀ B): its ones stay
        if x.op == "add" and (beta := _spread_number(x)) is not None:
            ones = const(1.0, x.shape)
            return s_mul(beta, s_matmul(ones, b) if i == 0 else s_matmul(a, ones))
    if a.op == "const" and b.op == "const" and a.shape[1] == 1:  # 1 1ᵀ = 1
        return const(a.attr * b.attr, shape)
    if a.op == "kron" and b.op == "kron" and a.args[0].shape[1] == b.args[0].shape[0] \
            and a.args[1].shape[1] == b.args[1].shape[0]:  # (A⊗B)(C⊗D) = AC⊗BD
        return s_func("kron", s_matmul(a.args[0], b.args[0]), s_matmul(a.args[1], b.args[1]))
    if b.op == "vec" and (pq := _kron_factors(a)) is not None \
            and b.args[0].shape == (pq[1].shape[1], pq[0].shape[1]):  # (P⊗Q) vec(X) = vec(Q X Pᵀ)
        return s_func("vec", s_matmul(s_matmul(pq[1], b.args[0]), s_T(pq[0])))
    if a.op == "const" and b.op == "const":  # (1 1ᵀ)(1 1ᵀ) = k 1 1ᵀ, k the inner size
        return s_mul(const(a.attr * b.attr), count((a.shape[1], 1)), const(1.0, shape))
    if a.op == "const" and a.shape[0] != 1 and a.shape[1] != 1 and b.shape[1] == 1:  # (c 1 1ᵀ) v = c sum(v) 1
        return s_mul(const(a.attr), s_func("sum", b), const(1.0, shape))
    if b.op == "const" and b.shape[0] != 1 and b.shape[1] != 1 and a.shape[0] == 1:  # uᵀ(c 1 1ᵀ) = c sum(u) 1ᵀ
        return s_mul(const(b.attr), s_func("sum", a), const(1.0, shape))
    sa, a2 = _split_scalars(a)
    sb, b2 = _split_scalars(b)
    if sa or sb:
        return s_mul(*sa, *sb, s_matmul(a2, b2))
    for i, f in enumerate((a, b)):  # (-A - B)C = -(A + B)C
        if f.op == "add" and all(ir.negative_term(t)[0] for t in f.args):
            pos = s_add(*[_negated(t) for t in f.args])
            return _negated(s_matmul(pos, b) if i == 0 else s_matmul(a, pos))
    for x in (a, b):  # A(c1) = c(A1): the scalar floats out, a bare 1 is left in the product
        if x.op == "const" and x.attr not in (0.0, 1.0):
            ones = const(1.0, x.shape)
            return s_mul(const(x.attr), s_matmul(ones if x is a else a, ones if x is b else b))
    for i, f in enumerate((a, b)):  # (A⊘β)B = (AB)⊘β
        if f.op == "div" and f.args[1].shape == SCALAR and f.args[0].shape == f.shape:
            return s_div(s_matmul(f.args[0], b) if i == 0 else s_matmul(a, f.args[0]), f.args[1])
    if b.op == "const" and a.shape[1] != 1 and b.shape[1] == 1 and a.op != "Diag":  # X c1 = c sum(X, 1)
        return s_mul(const(b.attr), s_func("sum", a, attr=None if a.shape[0] == 1 else 1))
    if a.op == "const" and b.shape[0] != 1 and a.shape[0] == 1 and b.op != "Diag":  # c1ᵀX = c sum(X, 0)
        return s_mul(const(a.attr), s_func("sum", b, attr=None if b.shape[1] == 1 else 0))
    if a.op == "matmul" and a.args[0].shape[1] == 1 and b.shape[1] == 1 and _ones_row(a.args[1]):
        return s_mul(const(a.args[1].attr), s_func("sum", b), a.args[0])  # (u 1ᵀ)v = sum(v) u
    if b.op == "matmul" and b.args[1].shape[0] == 1 and a.shape[0] == 1 and _ones_row(s_T(b.args[0])):
        return s_mul(const(b.args[0].attr), s_func("sum", a), b.args[1])  # uᵀ(1 vᵀ) = sum(u) vᵀ
    if b.op == "matmul":  # products read left to right: A(BC) = (AB)C (codegen picks the order)
        return s_matmul(s_matmul(a, b.args[0]), b.args[1])
    if a.op == "Diag":
        if b.op == "Diag":
            return s_func("Diag", s_mul(a.args[0], b.args[0]))
        if b.shape[1] == 1:  # Diag(h)v = h∘v
            return s_mul(a.args[0], b)
    if b.op == "Diag" and a.shape[0] == 1:  # vᵀDiag(h) = (h∘v)ᵀ
        return s_T(s_mul(b.args[0], s_T(a)))
    if b.op == "Diag" and a.op == "matmul" and a.args[1].op == "Diag":  # A Diag(g) Diag(h) = A Diag(g∘h)
        return s_matmul(a.args[0], s_func("Diag", s_mul(a.args[1].args[0], b.args[0])))
    last = a.args[1] if a.op == "matmul" else a
    if _inverse_pair(last, b):  # X⁻¹X = I, and through transposes: X⁻ᵀXᵀ = I
        return a.args[0] if a.op == "matmul" else ir.eye(shape[0])
    rest = _inverse_part(last, b)
    if rest is not None:  # (F₁…Fₖ)⁻¹F₁ = (F₂…Fₖ)⁻¹ for a square F₁, and its mirror images
        return s_matmul(a.args[0], rest) if a.op == "matmul" else rest
    back = _cancel_behind(a, b)
    if back is not None:  # M⁻¹F₁…Fₖ = I for M = F₁…Fₖ of any factors, met one factor at a time
        return back
    opened = _transposed_cancel(last, b)
    if opened is not None:  # M⁻ᵀ(PM)ᵀ = Pᵀ and (MP)ᵀM⁻ᵀ = Pᵀ, M a product of any factors
        return s_matmul(a.args[0], opened) if a.op == "matmul" else opened
    if b.op == "T" and b.args[0].op == "matmul" and _inverse_pair(last, s_T(b.args[0].args[1])):
        # X⁻ᵀ(YX)ᵀ = X⁻ᵀXᵀYᵀ = Yᵀ: the transposed product opens where a factor cancels
        return s_matmul(a.args[0], s_T(b.args[0].args[0])) if a.op == "matmul" else s_T(b.args[0].args[0])
    if last.op == "T" and last.args[0].op == "matmul" and _inverse_pair(s_T(_first_factor(last.args[0])), b):
        # (XY)ᵀX⁻ᵀ = YᵀXᵀX⁻ᵀ = Yᵀ
        opened = s_T(_without_first(last.args[0]))
        return s_matmul(a.args[0], opened) if a.op == "matmul" else opened
    merged = _power_product(last, b)
    if merged is not None:  # XᵃXᵇ = Xᵃ⁺ᵇ: tr(X⁵)'s terms collect to 5(X⁴)ᵀ
        return s_matmul(a.args[0], merged) if a.op == "matmul" else merged
    return Expr("matmul", (a, b), None, shape)


def _cancel_behind(a: Expr, b: Expr, most: int = 8):
    """a b where a ends with M⁻¹F₁…Fⱼ and b is Fⱼ₊₁, the last factor of M = F₁…Fₖ (or with
    M⁻ᵀ and the factors of Mᵀ = Fₖᵀ…F₁ᵀ): what stands before M⁻¹ (I if nothing); else None.
    The factors need not be square (M = XY of X n×m, Y m×n).  At most ``most`` factors back."""
    inv = b.args[0] if b.op == "T" else b
    if inv.op == "inv" and inv.args[0].op == "matmul":  # F₁…Fₖ M⁻¹ = I, the factors already in a
        fm = ir.chain_factors(inv.args[0])
        partner = [s_T(f) for f in reversed(fm)] if b.op == "T" else fm
        if len(partner) <= most:
            seen, e = [], a
            while len(seen) < len(partner):
                z, e = (e.args[1], e.args[0]) if e.op == "matmul" else (e, None)
                seen.insert(0, z)
                if e is None:
                    break
            if seen == partner:
                return e if e is not None else ir.eye(b.shape[1])
    tail, e = [b], a
    while len(tail) <= most:
        z, head = (e.args[1], e.args[0]) if e.op == "matmul" else (e, None)
        inv = z.args[0] if z.op == "T" else z
        if inv.op == "inv" and inv.args[0].op == "matmul" and len(tail) > 1:
            fm = ir.chain_factors(inv.args[0])
            partner = [s_T(f) for f in reversed(fm)] if z.op == "T" else fm
            if partner == tail:
                return head if head is not None else ir.eye(b.shape[1])
        if head is None:
            return None
        tail.insert(0, z)
        e = head
    return None


def _transposed_cancel(x: Expr, y: Expr):
    """x y for x = M⁻ᵀ and y = (PM)ᵀ (Pᵀ), or x = (MP)ᵀ and y = M⁻ᵀ (Pᵀ), where M is a product
    whose factors need not be square (a square XY of X n×m, Y m×n); else None."""
    for inverse, product, right in ((x, y, True), (y, x, False)):
        if not (inverse.op == "T" and inverse.args[0].op == "inv" and inverse.args[0].args[0].op == "matmul"
                and product.op == "T" and product.args[0].op == "matmul"):
            continue
        fm, fp = ir.chain_factors(inverse.args[0].args[0]), ir.chain_factors(product.args[0])
        k = len(fm)
        if len(fp) > k and (fp[-k:] if right else fp[:k]) == fm:
            return s_T(_product_as_is(fp[:-k] if right else fp[k:]))
    return None


def _product_as_is(fs: list) -> Expr:
    """F₁…Fₖ read left to right, from factors of a product already simplified: built as it
    was, without running the rules again."""
    out = fs[0]
    for f in fs[1:]:
        out = Expr("matmul", (out, f), None, (out.shape[0], f.shape[1]))
    return out


def _first_factor(e: Expr) -> Expr:
    """The leftmost factor of a product read left to right ((F₁F₂)F₃: F₁)."""
    while e.op == "matmul":
        e = e.args[0]
    return e


def _all_transposed(e: Expr) -> bool:
    """Whether every factor of the product e is a transpose (stops at the first that is not)."""
    while e.op == "matmul":
        if e.args[1].op != "T":
            return False
        e = e.args[0]
    return e.op == "T"


def _without_first(e: Expr) -> Expr:
    """F₂…Fₖ of the product e = F₁…Fₖ."""
    return _product_as_is(ir.chain_factors(e)[1:])


def _inverse_part(x: Expr, y: Expr):
    """x y where one of them is the inverse of a product M = F₁…Fₖ (or its transpose) and the
    other is the square end factor of M (of Mᵀ = Fₖᵀ…F₁ᵀ) beside it: M⁻¹F₁ = (F₂…Fₖ)⁻¹,
    FₖM⁻¹ = (F₁…Fₖ₋₁)⁻¹, M⁻ᵀFₖᵀ = ((F₁…Fₖ₋₁)⁻¹)ᵀ, F₁ᵀM⁻ᵀ = ((F₂…Fₖ)⁻¹)ᵀ; else None."""
    for inverse, other, left in ((x, y, True), (y, x, False)):
        transposed = inverse.op == "T"
        inv = inverse.args[0] if transposed else inverse
        if inv.op != "inv" or inv.args[0].op != "matmul" or other.shape[0] != other.shape[1]:
            continue
        M = inv.args[0]
        if left != transposed:  # the factor beside it is F₁ (or F₁ᵀ)
            end = s_T(_first_factor(M)) if transposed else _first_factor(M)
            rest = _without_first(M) if end == other else None
        else:  # … or Fₖ (or Fₖᵀ)
            end = s_T(M.args[1]) if transposed else M.args[1]
            rest = M.args[0] if end == other else None
        if rest is not None:
            out = s_func("inv", rest)
            return s_T(out) if transposed else out
    return None


def _matrix_power_of(f: Expr):
    """(X, k, transposed) for f = Xᵏ, X⁻¹, X or their transposes (X square), else None."""
    if f.shape[0] != f.shape[1] or f.shape == SCALAR:
        return None
    if f.op == "T":
        inner = _matrix_power_of(f.args[0])
        return None if inner is None else (inner[0], inner[1], not inner[2])
    if f.op == "matrix_power":
        return f.args[0], f.attr, False
    if f.op == "inv":
        return f.args[0], -1, False
    return f, 1, False


def _power_product(x: Expr, y: Expr):
    """XᵃXᵇ as Xᵃ⁺ᵇ (through transposes: (Xᵃ)ᵀ(Xᵇ)ᵀ = (Xᵃ⁺ᵇ)ᵀ) when one of them is a
    matrix_power or an inverse and |a + b| ≤ 64; else None (X X stays)."""
    px, py = _matrix_power_of(x), _matrix_power_of(y)
    if px is None or py is None or px[0] != py[0] or px[2] != py[2] \
            or not any(f.op in ("matrix_power", "inv") or f.op == "T" and f.args[0].op in ("matrix_power", "inv")
                       for f in (x, y)):
        return None
    k = px[1] + py[1]
    if abs(k) > MAX_MATRIX_POWER:
        return None
    base = px[0]
    power = ir.eye(base.shape[0]) if k == 0 else base if k == 1 else s_func("inv", base) if k == -1 \
        else ir.func("matrix_power", base, attr=k)
    return s_T(power) if px[2] else power


def _inverse_pair(x: Expr, y: Expr) -> bool:
    """Whether x y = I: X⁻¹ X, X X⁻¹, X⁻ᵀ Xᵀ, Xᵀ X⁻ᵀ."""
    if x.op == "T" and y.op == "T":
        x, y = x.args[0], y.args[0]
    return (x.op == "inv" and x.args[0] is y) or (y.op == "inv" and y.args[0] is x)


# ------------------------------------------------------------------ transpose

_T_INVARIANT = ("eye", "Diag")


def _tcost(e: Expr) -> int:
    """How many transposes s_T(e) leaves on top."""
    if e.op == "T" or e.shape == SCALAR or e.op in _T_INVARIANT or e.op == "const" or symmetric_form(e):
        return 0
    if _entrywise_of_transpose(e):
        return 0
    return 1


def _entrywise_of_transpose(e: Expr) -> bool:
    """e = f(Xᵀ) for an entrywise f, a power with a number exponent too: f(Xᵀ)ᵀ = f(X)."""
    if e.op == "pow":
        return e.args[0].op == "T" and e.args[1].shape == SCALAR
    op = REGISTRY.get(e.op)
    return op is not None and op.elementwise and len(e.args) == 1 and e.args[0].op == "T" and e.attr is None


def s_T(a: Expr) -> Expr:
    r, c = a.shape
    if a.op == "T":
        return a.args[0]
    if a.shape == SCALAR or a.op in _T_INVARIANT:
        return a
    if a.op == "const":
        return const(a.attr, (c, r))
    if a.op not in ("sym", "add") and symmetric_form(a):  # (XᵀX)⁻ᵀ = (XᵀX)⁻¹ (a sum: below, in order)
        return a
    if a.op == "mul" and any(f.op == "eye" for f in a.args):  # (I∘X)ᵀ = I∘X, a diagonal matrix
        return a
    if _entrywise_of_transpose(a):  # f(Xᵀ)ᵀ = f(X)
        X = a.args[0].args[0]
        return s_pow(X, a.args[1]) if a.op == "pow" else s_func(a.op, X)
    if a.op == "mul":
        sc, arr = _split_scalars(a)
        if sc:
            return s_mul(*sc, s_T(arr))
        if sum(_tcost(f) for f in a.args) < 1 + sum(f.op == "T" or _entrywise_of_transpose(f) for f in a.args):
            return s_mul(*[s_T(f) for f in a.args])  # (Aᵀ∘Bᵀ)ᵀ = A∘B, (Aᵀ∘B)ᵀ = A∘Bᵀ
    if a.op == "matmul":  # (ABᵀC)ᵀ = CᵀBAᵀ when that has no more transposes (a flat chain reads better)
        fs = ir.chain_factors(a)
        if sum(_tcost(f) for f in fs) <= 1 + sum(f.op == "T" for f in fs):
            out = s_T(fs[-1])
            for f in reversed(fs[:-1]):
                out = s_matmul(out, s_T(f))
            return out
    if a.op == "div" and a.args[1].shape == SCALAR:  # (A/β)ᵀ = Aᵀ/β
        return s_div(s_T(a.args[0]), a.args[1])
    if a.op == "add":  # (A + Bᵀ)ᵀ = Aᵀ + B when no term keeps a transpose
        terms = [s_T(t) for t in a.args]
        if not any(t.op == "T" for t in terms) or set(terms) == set(a.args):  # (Aᵀ + A)ᵀ = A + Aᵀ
            return s_add(*terms)
    return Expr("T", (a,), None, (c, r))


# ------------------------------------------------------------------ the rest

def s_div(a: Expr, b: Expr) -> Expr:
    shape = ir._broadcast([a.shape, b.shape])
    if b.op == "const" and b.attr != 0.0:
        return s_mul(const(1.0 / b.attr), a) if shape == a.shape else s_mul(const(1.0 / b.attr), a, const(1.0, shape))
    if is_zero(a):
        return const(0.0, shape)
    if b.op == "div":  # a⊘(b⊘d) = (a∘d)⊘b
        return s_div(s_mul(a, b.args[1]), b.args[0])
    # a⊘b as a product, so that numbers and nested divisions gather in one place
    return s_mul(a, _div_node(const(1.0), b, b.shape))


def _div_node(num: Expr, den: Expr, shape) -> Expr:
    """num⊘den with num free of numeric factors (they stay outside, in the product)."""
    if num.op == "div":
        num, den = num.args[0], s_mul(num.args[1], den)
    if ir._broadcast([num.shape, den.shape]) != shape:  # keep the shape: alpha*1/beta
        num = s_mul(num, const(1.0, shape))
    if den.op == "const" and den.attr != 0.0:
        return s_mul(const(1.0 / den.attr), num, const(1.0, shape)) if num.shape != shape \
            else s_mul(const(1.0 / den.attr), num)
    return Expr("div", (num, den), None, ir._broadcast([num.shape, den.shape, shape]))


def _cancel_quotient(c, rest, denominators):
    """(c, numerator factors, denominators) with the numbers of the denominators moved into c
    and the powers of one base cancelled: -4(x − m)²s ⊘ (4s⁴) = -(x − m)² ⊘ s³."""
    dens = []
    for d in denominators:
        for f in factors(d):
            if f.op == "const" and f.shape == SCALAR and f.attr != 0.0 and c / f.attr == round(c / f.attr, 6):
                c /= f.attr  # (a number that stays short: 4/4, 1/2; 1/3 stays a division by 3)
            elif f.op == "const" and f.shape == SCALAR and abs(c) != 1.0 and _ratio(c, f.attr) is not None:
                c, q = _ratio(c, f.attr)  # -3/9 = -1/3, 3/-9 = -1/3, 0.001/0.003 = 1/3
                if q != 1.0:
                    dens.append(const(q))
            else:
                dens.append(f)

    same: dict = {}  # (β + α is α + β, above and below)
    (num, roots), (den, roots_below) = _exponents(rest, same), _exponents(dens, same)
    common = [b for b in num if b in den]
    if not common:
        return c, rest, ([s_mul(*dens)] if dens else [])
    roots |= roots_below
    for b in common:
        k = num[b] - den[b]
        num[b], den[b] = max(k, 0.0), max(-k, 0.0)
    rest = [_power(b, k, b in roots) for b, k in num.items() if k != 0.0]
    dens = [_power(b, k, b in roots) for b, k in den.items() if k != 0.0]
    return c, rest, ([s_mul(*dens)] if dens else [])


def _ratio(a: float, b: float):
    """(p, q) with a/b = p/q, q a whole number of at most 10⁶ prime to 10 and p a short
    decimal, where a and b are short decimals up to rounding (as typed, 0.7² = 0.49): 3/9 =
    1/3, 0.001/0.003 = 1/3, 0.7/0.49 = 10/7, 3e-9/9 = 1e-9/3; else None."""
    from fractions import Fraction

    def short(x):  # x as a decimal of at most 12 significant digits, or None
        f = Fraction("%.12g" % x)
        return f if f and abs(f - Fraction(x)) <= 1e-14 * abs(x) else None

    try:
        fa, fb = short(float(a)), short(float(b))
    except (ValueError, OverflowError):
        return None
    if fa is None or fb is None:
        return None
    r = fa / fb
    q, tens = r.denominator, 1
    for p in (2, 5):
        while q % p == 0:
            q //= p
            tens *= p
    p = Fraction(r.numerator, tens)
    if q > 10 ** 6 or short(float(p)) != p:
        return None
    return float(p), float(q)


def _base_exponent(f: Expr):
    """(b, k) for f = b**k with a constant k, sqrt(b)**k (k/2) or sqrt(b) (1/2), else (f, 1)."""
    if f.op == "sqrt":
        return f.args[0], 0.5
    if f.op == "pow" and f.args[1].op == "const":
        if f.args[0].op == "sqrt":
            return f.args[0].args[0], 0.5 * f.args[1].attr
        return f.args[0], f.args[1].attr
    return f, 1.0


def _power(b: Expr, k: float, root: bool) -> Expr:
    """b**k; with root (b was met as sqrt(b)), an odd multiple of 1/2 as a power of sqrt(b):
    sqrt(b)**3, not b**1.5, where s = sqrt(u² + 1) is a name; det(S)**-0.5 stays so."""
    if root and (2 * k) % 2 == 1:
        return s_pow(s_func("sqrt", b), const(2 * k))
    return s_pow(b, const(k))


def _collect_powers(fs):
    """x∘x = x**2, x**a∘x = x**(a + 1) with constant exponents."""
    if len(fs) < 2:
        return fs
    exps, roots = _exponents(fs, {})
    if len(exps) == len(fs):
        return fs
    return [_power(b, k, b in roots) for b, k in exps.items()]


def _exponents(fs, same: dict):
    """({base: the sum of its exponents in the factors fs}, the bases met under a square root);
    a base with its sums and products in any order is one (x + y and y + x): ``same`` maps
    its order-free key to the base as first written."""
    out: dict = {}
    roots = set()
    for f in fs:
        base, k = _base_exponent(f)
        base = same.setdefault(_order_free(base), base)
        out[base] = out.get(base, 0.0) + k
        if base is not f and (f.op == "sqrt" or f.args[0].op == "sqrt"):
            roots.add(base)
    return out, roots


def s_pow(a: Expr, k: Expr) -> Expr:
    if a.op == "vec" and k.shape == SCALAR:  # vec(X)ᵏ = vec(Xᵏ), entry by entry
        return s_func("vec", s_pow(a.args[0], k))
    beta = _spread_number(a) if k.shape == SCALAR else None
    if beta is not None:  # (β1)ᵏ = βᵏ1
        return s_mul(s_pow(beta, k), const(1.0, a.shape))
    if k.op == "const":
        if k.attr == 1.0 or (a.op in ("step", "eye") or _gate(a) is not None) and k.attr > 0:
            return a  # (step(z)ᵏ = step(z), (1 − step(z))ᵏ = 1 − step(z), Iᵏ = I: entries 0 or 1)
        if k.attr == 0.0:
            return const(1.0, a.shape)
        if a.op == "const":
            try:
                v = a.attr ** k.attr
                if isinstance(v, float) and math.isfinite(v):
                    return const(v, a.shape)
            except (OverflowError, ZeroDivisionError):
                pass
        if a.op == "mul" and a.args[0].op == "const" and a.args[0].shape == SCALAR and k.attr == round(k.attr) \
                and abs(k.attr) <= 4:  # (cx)ᵏ = cᵏxᵏ for a whole k: exp(-(-x/√2)**2) is exp(-0.5*x**2)
            rest = a.args[1] if len(a.args) == 2 else Expr("mul", a.args[1:], None, a.shape)
            try:
                ck = a.args[0].attr ** k.attr
            except (OverflowError, ZeroDivisionError):  # (1e308 squared)
                ck = math.inf
            if rest.shape == a.shape and math.isfinite(ck) and a.args[0].attr != 0.0:
                return s_mul(const(ck), s_pow(rest, k))
    return Expr("pow", (a, k), None, a.shape)


def s_frob(a: Expr, b: Expr) -> Expr:
    if is_zero(a) or is_zero(b):
        return const(0.0)
    if a.shape == SCALAR or b.shape == SCALAR:  # a number spread over the other's shape: β:X = β sum(X)
        return s_mul(a, b) if a.shape == b.shape else s_mul(*((a, s_func("sum", b)) if a.shape == SCALAR
                                                               else (b, s_func("sum", a))))
    if a.op == "const":
        return s_mul(const(a.attr), s_func("sum", b))
    if b.op == "const":
        return s_mul(const(b.attr), s_func("sum", a))
    if a.op == "eye" or b.op == "eye":  # X:I = tr(X)
        return s_func("tr", b if a.op == "eye" else a)
    for x, y in ((a, b), (b, a)):  # (Xᵃ)ᵀ:Xᵇ = tr(Xᵃ⁺ᵇ): X⁻ᵀ:X = n, (X⁻²)ᵀ:X = tr(X⁻¹)
        if x.op == "T" and (merged := _power_product(x.args[0], y)) is not None:
            return s_func("tr", merged)
    for x, y in ((a, b), (b, a)):  # (LR):Y = L:(YRᵀ) = R:(LᵀY), where YRᵀ or LᵀY is I: tr(L), tr(R)
        if x.op == "matmul" and y.shape[0] == y.shape[1]:
            L, R = x.args
            if L.shape == R.shape[::-1] == y.shape and s_matmul(y, s_T(R)).op == "eye":
                return s_func("tr", L)
            if L.shape == R.shape[::-1] == y.shape[::-1] and s_matmul(s_T(L), y).op == "eye":
                return s_func("tr", R)
    for x, y in ((a, b), (b, a)):  # (β1):X = β sum(X)
        if (beta := _spread_number(x)) is not None:
            return s_mul(beta, s_func("sum", y))
    for i, x in enumerate((a, b)):  # (A/β):B = (A:B)/β: a scalar denominator comes out
        if x.op == "div" and x.args[1].shape == SCALAR and x.args[0].shape == x.shape:
            return s_div(s_frob(x.args[0], b) if i == 0 else s_frob(a, x.args[0]), x.args[1])
    for i, x in enumerate((a, b)):  # (-A):B = -(A:B): the minus outside, where terms meet
        if x.op == "mul" and x.args[0].op == "const" and x.args[0].attr == -1.0 and x.args[0].shape == SCALAR:
            rest = x.args[1] if len(x.args) == 2 else Expr("mul", x.args[1:], None, x.shape)
            if rest.shape == x.shape:
                return s_mul(const(-1.0), s_frob(rest, b) if i == 0 else s_frob(a, rest))
    if a.shape[0] == b.shape[0] == 1 and a.shape[1] != 1:  # rows: uᵀ:vᵀ = u:v (xᵀAᵀ:xᵀ = Ax:x), with fewer ᵀ
        ta, tb = s_T(a), s_T(b)
        if _transposes(ta) + _transposes(tb) < _transposes(a) + _transposes(b):
            return s_frob(ta, tb)
    return Expr("frob", (a, b), None, SCALAR)


def _transposes(e: Expr) -> int:
    """How many transposes e's tree shows."""
    return sum(n.op == "T" for n in ir.walk(e))


def _fold_blocks(name: str, C: Expr, M: Expr, shape):
    """The adjoints of a Kronecker product, kron_sum(C, A) = Σᵢⱼ Aᵢⱼ C₍ᵢⱼ₎ and
    kron_blocks(C, B)ᵢⱼ = C₍ᵢⱼ₎ : B (C₍ᵢⱼ₎ C's block (i, j), of the result's shape for
    kron_sum, of B's for kron_blocks), where C's blocks are known: C = I (square blocks, so
    C₍ᵢⱼ₎ = δᵢⱼ I) gives tr(A) I and tr(B) I, C = c1 gives c sum(A) 1 and c sum(B) 1,
    C = P⊗Q (also through transposes and inverses: _kron_factors) gives (A:P) Q and (Q:B) P,
    C = u wᵀ gives U A Wᵀ and Uᵀ B W (U, W: u, w unvec'd into columns of a block's height
    and width); numbers in C come out.  None otherwise."""
    sc, C = _split_scalars(C)
    if C.shape != (ir.dim_mul(M.shape[0], shape[0]), ir.dim_mul(M.shape[1], shape[1])) if name == "kron_sum" \
            else C.shape != (ir.dim_mul(shape[0], M.shape[0]), ir.dim_mul(shape[1], M.shape[1])):
        return None  # (a broadcast number: left as it is)
    out = None
    if C.op == "eye" and M.shape[0] == M.shape[1] and shape[0] == shape[1]:
        out = s_mul(s_func("tr", M), ir.eye(shape[0]))
    elif C.op == "const":
        out = s_mul(const(C.attr), s_func("sum", M), const(1.0, shape))
    elif (pq := _kron_factors(C)) is not None:
        P, Q = pq
        if name == "kron_sum" and P.shape == M.shape and Q.shape == shape:
            out = s_mul(s_frob(M, P), Q)
        elif name == "kron_blocks" and Q.shape == M.shape and P.shape == shape:
            out = s_mul(s_frob(Q, M), P)
    elif (uw := _outer_factors(C)) is not None:  # C = u wᵀ: its block (i, j) is uᵢ wⱼᵀ
        u, w = uw[0], s_T(uw[1])
        p, q = (shape if name == "kron_sum" else M.shape)
        U, W = s_func("unvec", u, attr=(p, ir.dim_div(u.shape[0], p))), \
            s_func("unvec", w, attr=(q, ir.dim_div(w.shape[0], q)))
        # Σᵢⱼ Aᵢⱼ uᵢ wⱼᵀ = U A Wᵀ and uᵢᵀ B wⱼ = (Uᵀ B W)ᵢⱼ, with U's columns the uᵢ
        out = s_matmul(s_matmul(U, M), s_T(W)) if name == "kron_sum" else s_matmul(s_matmul(s_T(U), M), W)
    if out is None:
        return None
    return s_mul(*sc, out) if sc else out


def _kron_factors(C: Expr):
    """(P, Q) with C = P⊗Q, through transposes, inverses and powers of a Kronecker product
    ((P⊗Q)ᵀ = Pᵀ⊗Qᵀ, (P⊗Q)⁻¹ = P⁻¹⊗Q⁻¹ and (P⊗Q)ᵏ = Pᵏ⊗Qᵏ for square P, Q); else None."""
    if C.op == "kron":
        return C.args
    if C.op in ("T", "inv", "matrix_power"):
        pq = _kron_factors(C.args[0])
        if pq is None:
            return None
        if C.op == "T":
            return s_T(pq[0]), s_T(pq[1])
        if all(m.shape[0] == m.shape[1] for m in pq):  # ((P⊗Q)ᵏ = Pᵏ⊗Qᵏ)
            return tuple(s_func(C.op, m, attr=C.attr) for m in pq)
    return None


def s_func(name: str, a: Expr, *more: Expr, attr=None) -> Expr:
    op = REGISTRY[name]
    if name in ("sum", "mean", "logsumexp", "softmax") and attr is not None and a.shape != SCALAR \
            and a.shape[1 - attr] == 1:  # along a vector's own axis: over every entry (sum(u, 0) of a column u)
        return s_func(name, a)
    if more and name == "kron" and a.op == "eye" and more[0].op == "eye":  # I⊗I = I
        return ir.eye(ir.dim_mul(a.shape[0], more[0].shape[0]))
    if more and name in ("kron", "kron_sum", "kron_blocks") and (is_zero(a) or is_zero(more[0])):
        return const(0.0, ir.func(name, a, *more, attr=attr).shape)  # bilinear: 0 with a zero argument
    if more and name == "kron" and SCALAR in (a.shape, more[0].shape):  # β⊗B = B⊗β = βB
        return s_mul(a, more[0])
    if more and name in ("kron_sum", "kron_blocks") and more[0].shape == SCALAR:  # blocks of 1×1: entries
        return s_mul(a, more[0])
    if more and name in ("kron_sum", "kron_blocks") and a.shape == more[0].shape:  # one block: C:A
        return s_frob(a, more[0])
    if more and name == "kron" and (a.op == "const") != (more[0].op == "const"):
        # c1⊗B = 1⊗(cB) and B⊗c1 = (cB)⊗1: the number moves to the other factor
        first = a.op == "const"
        k, B = (a, more[0]) if first else (more[0], a)
        if k.attr != 1.0:
            B, k = s_mul(const(k.attr), B), const(1.0, k.shape)
            return ir.func("kron", k, B) if first else ir.func("kron", B, k)
    if more and name == "kron" and a.op == "const" and more[0].op == "const":
        return const(a.attr * more[0].attr, ir.func(name, a, *more).shape)
    if more and name in ("kron_sum", "kron_blocks"):
        folded = _fold_blocks(name, a, more[0], attr)
        if folded is not None:
            return folded
    if more:
        return ir.func(name, a, *more, attr=attr)
    if a.op == "const" and op.fold is not None:
        try:
            v = float(op.fold(a.attr))
            if math.isfinite(v):
                return const(v, a.shape)
        except (ValueError, OverflowError):
            pass
    if op.elementwise and a.op == "vec":  # f(vec(X)) = vec(f(X)), entry by entry
        return s_func("vec", s_func(name, a.args[0]))
    if op.elementwise and a.op == "kron" and any(f.op == "const" and f.attr == 1.0 for f in a.args):
        # f(1⊗B) = 1⊗f(B) and f(B⊗1) = f(B)⊗1: the entries of 1⊗B are B's
        return ir.func("kron", *(f if f.op == "const" else s_func(name, f) for f in a.args))
    if name == "vec" and a.op == "const":  # vec(c1) = c1
        return const(a.attr, (ir.dim_mul(a.shape[0], a.shape[1]), 1))
    beta = _spread_number(a) if op.elementwise else None
    if beta is not None:  # f(β1) = f(β)1, so that sum(f(β1)) is the count times f(β)
        return s_mul(s_func(name, beta), const(1.0, a.shape))
    if a.shape == SCALAR and op.scalar_form is not None:  # det(β) = β, inv(β) = 1/β, …
        return op.scalar_form(a, attr)
    if a.shape == SCALAR and name in ("sum", "tr", "mean"):
        return a
    if a.op == "const" and op.fold_const is not None:  # sum(c1) = c·(its size), Diag(c1) = cI, …
        return simplify(op.fold_const(a.attr, a.shape, attr))
    if name in ("logsumexp", "softmax") and (beta := _spread_number(a)) is not None:
        at0 = simplify(op.fold_const(0.0, a.shape, attr))  # softmax(β1) = softmax(0), logsumexp(β1) = β + logsumexp(0)
        return at0 if name == "softmax" else s_add(s_mul(beta, const(1.0, at0.shape)), at0)
    if op.fold_const is not None and op.transpose is not None and op.nargs == 1 and a.op in ("mul", "div") \
            and (beta := _spread_number(a)) is not None:  # linear: Diag(β1) = βI, sum(β1, 0) = β sum(1, 0)
        return s_mul(beta, s_func(name, const(1.0, a.shape), attr=attr))
    if op.fold_const is not None and op.transpose is not None and op.nargs == 1:
        # linear: sum(βX) = β sum(X), Diag(X/β) = Diag(X)/β (then c1 folds: sum(1/n) = 1)
        if a.op == "add" and name in ("sum", "tr", "mean") and all(split_coeff(t)[0] < 0 for t in a.args):
            return s_mul(const(-1.0), s_func(name, s_add(*[scale(-1.0, t) for t in a.args]), attr=attr))
        if a.op == "mul" and name == "Diag" and a.args[0].op == "const" and a.args[0].shape == SCALAR:
            k = a.args[0].attr  # Diag(−h) = −Diag(h), Diag(2h) = 2 Diag(h): the number meets the others
            return s_mul(const(k), s_func(name, scale(1.0 / k, a), attr=attr))
        if a.op == "mul":
            sc, arr = _split_scalars(a)
            if sc and arr.shape == a.shape and (name in ("sum", "tr", "mean") or arr.op == "const"):
                return s_mul(*sc, s_func(name, arr, attr=attr))
        if a.op == "div" and a.args[1].shape == SCALAR and (name in ("sum", "tr", "mean")
                                                            or _split_scalars(a.args[0])[1].op == "const"):
            return s_div(s_func(name, a.args[0], attr=attr), a.args[1])
    if a.op == "add" and name == "sum" and attr is None:  # linear: where terms then cancel
        split = s_add(*[s_func(name, t if t.shape == a.shape else s_mul(t, const(1.0, a.shape)))
                        for t in a.args])  # (sum(x - mean(x)) = 0; a broadcast term counts n times)
        if ir.tree_size(split) < ir.tree_size(a):
            return split
    if a.op == "eye" and name in ("sum", "tr", "mean"):  # sum(I) = tr(I) = n, mean(I) = 1/n
        n = count((a.shape[0], 1))
        if attr is not None:
            return ir.func(name, a, attr=attr)
        return s_div(const(1.0), n) if name == "mean" else n
    if name == "sum" and (a.op == "softmax" and a.attr == attr or a.op == "softmax_all" and attr is None):
        return const(1.0, ir.func(name, a, attr=attr).shape)  # softmax's entries sum to 1 (along its axis)
    if name == "sum" and attr is None and (outer := _outer_factors(a, ones=True)) is not None:
        return s_mul(s_func("sum", outer[0]), s_func("sum", outer[1]))  # sum(u vᵀ) = sum(u) sum(v)
    if name == "sum" and attr is None and a.op in ("add", "mul", "div") \
            and (beta := _spread_number(a)) is not None:
        return s_mul(beta, count(a.shape))  # sum(β1) = β·(the number of entries)
    if name == "sum" and attr is None and a.op == "pow" and a.args[1].op == "const" and a.args[1].attr == 2.0 \
            and a.shape[1] == 1 and a.shape[0] != 1 and a.args[0].op in ("sym", "delta"):  # sum(x**2) = xᵀx
        return s_matmul(s_T(a.args[0]), a.args[0])
    if name == "sum" and attr is None and (entries := _transposed_entries(a)) is not None:
        return s_func("sum", entries)  # sum(xᵀ∘xᵀ) = sum(x∘x)
    if name == "sum" and attr is not None and (outer := _outer_factors(a, ones=True)) is not None:
        u, v = outer  # an outer product u vᵀ (c1 1ᵀ too): along its rows u sum(v), along its columns sum(u) vᵀ
        return s_mul(u, s_func("sum", v)) if attr == 1 else s_mul(s_func("sum", u), v)
    if name in ("sum", "tr") and attr is None and a.op == "kron" and (name == "sum" or all(
            m.shape[0] == m.shape[1] for m in a.args)):  # sum(A⊗B) = sum(A) sum(B), tr(A⊗B) = tr(A) tr(B)
        return s_mul(*[s_func(name, m) for m in a.args])
    if name == "sum" and attr is None and a.op == "sum" and a.attr is not None:  # sum(sum(X, 1)) = sum(X)
        return s_func("sum", a.args[0])
    if name == "sum" and attr is not None and a.op == "T" and a.shape[0] != 1 and a.shape[1] != 1:
        return s_T(s_func("sum", a.args[0], attr=1 - attr))  # sum(Aᵀ, 1) = sum(A, 0)ᵀ
    if name in ("sum", "mean", "logsumexp") and attr is not None and a.shape[attr] == 1:
        return a  # along an axis of length 1 (sum(r, 0) of a row r): each entry alone
    if name == "sum" and a.op == "kron":  # sums of A⊗B: sum(A) sum(B), and along an axis A's ⊗ B's
        A, B = a.args
        if attr is None:
            return s_mul(s_func("sum", A), s_func("sum", B))
        return s_func("kron", s_func("sum", A, attr=attr), s_func("sum", B, attr=attr))
    if name == "sum" and attr is not None and a.op == "matmul" and a.args[attr].op == "Diag":
        m, h = (a.args[0], a.args[1].args[0]) if attr == 1 else (a.args[1], a.args[0].args[0])
        return s_matmul(m, h) if attr == 1 else s_matmul(s_T(h), m)  # M Diag(h) 1 = M h, 1ᵀ Diag(h) M = hᵀM
    if name == "sum" and attr is not None and a.shape[0] != 1 and a.shape[1] != 1:
        along = _sum_along(a, attr)
        if along is not None:
            return along
    if name == "matrix_power" and attr in (0, 1):  # X⁰ = I, X¹ = X
        return ir.eye(a.shape[0]) if attr == 0 else a
    if name == "unvec" and ((back := _unvec(a, attr)) is not None or (back := _unvec_kron(a, attr)) is not None):
        return back
    if attr is not None or op.nargs != 1:
        return ir.func(name, a, attr=attr)
    if name == "sqrt" and a.op == "pow" and a.args[1].op == "const" and a.args[1].attr == 2.0 \
            and all(f.op == "dim" for f in factors(a.args[0])):  # √(n²) = n for a size n
        return a.args[0]
    if name == "tr" and a.op == "T":
        return s_func("tr", a.args[0])
    if name == "tr" and a.op == "matmul" and a.args[0].shape[1] == 1:  # tr(u vᵀ) = vᵀu
        return s_matmul(a.args[1], a.args[0])
    if name == "inv":
        if a.op == "inv":
            return a.args[0]
        if a.op == "eye":
            return a
        if a.op == "Diag":  # Diag(v)⁻¹ = Diag(1⊘v): n divisions, not an inverse
            return s_func("Diag", s_div(const(1.0), a.args[0]))
        if a.op == "T":  # (Xᵀ)⁻¹ = (X⁻¹)ᵀ, as X⁻ᵀ prints
            return s_T(s_func("inv", a.args[0]))
        if a.op == "matrix_power" and isinstance(a.attr, int) and abs(a.attr) < MAX_MATRIX_POWER:  # (Xᵏ)⁻¹ = X⁻ᵏ
            return s_func("matrix_power", a.args[0], attr=-a.attr)
        if a.op == "matmul" and _all_transposed(a):  # (BᵀAᵀ)⁻¹ = ((AB)⁻¹)ᵀ
            return s_T(s_func("inv", s_T(a)))
        sc, X = _split_scalars(a)  # (cX)⁻¹ = X⁻¹/c and (X/c)⁻¹ = cX⁻¹: the number comes out
        if sc and X.shape == a.shape:
            return s_div(s_func("inv", X), s_mul(*sc))
        if a.op == "div" and a.args[1].shape == SCALAR and a.args[0].shape == a.shape:
            return s_mul(a.args[1], s_func("inv", a.args[0]))
    if name == "diag" and a.op == "Diag":
        return a.args[0]
    if name == "diag" and a.op == "eye":  # diag(I) = 1
        return const(1.0, (a.shape[0], 1))
    if name == "diag" and a.op == "T":  # diag(Xᵀ) = diag(X)
        return s_func("diag", a.args[0])
    if name == "diag" and a.shape[0] == a.shape[1] and a.op in REGISTRY and REGISTRY[a.op].elementwise \
            and len(a.args) == 1 and a.attr is None and (inner := s_func("diag", a.args[0])).op != "diag":
        return s_func(a.op, inner)  # diag(f(M)) = f(diag(M)) where diag(M) simplifies: diag(sign(X - Diag(diag X))) = 0
    if name == "diag" and a.op == "mul" and a.shape[0] == a.shape[1] and all(f.shape in (a.shape, SCALAR) for f in a.args):
        parts = [f if f.shape == SCALAR else s_func("diag", f) for f in a.args]  # diag(A∘B) = diag(A)∘diag(B)
        if not any(p.op == "diag" and p.args[0] in a.args for p in parts if p.shape != SCALAR):  # (each simplifies)
            return s_mul(*parts)
    if name == "diag" and a.op == "add":  # linear, where the terms' diagonals then simplify
        split = s_add(*[s_func("diag", t) for t in a.args])
        if ir.tree_size(split) <= ir.tree_size(a):
            return split
    if name == "diag" and (outer := _outer_factors(a, ones=True)) is not None:  # diag(u vᵀ) = u∘v
        return s_mul(outer[0], s_T(outer[1]))
    if name == "diag" and a.op == "matmul":  # diag(A Diag(v) B) = (A∘Bᵀ) v: n·m work, not a product
        fs = ir.chain_factors(a)
        i = next((i for i, f in enumerate(fs) if f.op == "Diag"), None)
        if i is not None:
            v, A, B = fs[i].args[0], fs[:i], fs[i + 1:]
            if not A:
                return s_mul(v, s_func("diag", _chain(B)))
            if not B:
                return s_mul(v, s_func("diag", _chain(A)))
            return s_matmul(s_mul(_chain(A), s_T(_chain(B))), v)
    if name == "log":
        if a.op == "exp":
            return a.args[0]
        if a.op == "add" and len(a.args) == 2:  # log(1 + exp(z)) = softplus(z), stable
            x, y = a.args
            if y.op == "const" and y.attr == 1.0 and x.op == "exp":
                return s_func("softplus", x.args[0])
            if x.op == "const" and x.attr == 1.0 and y.op == "exp":
                return s_func("softplus", y.args[0])
    if name == "sum" and a.op == "mul" and len(a.args) == 2 and a.args[0].shape == a.args[1].shape:
        return s_frob(*a.args)
    if name == "vec" and (back := _vec_back(a)) is not None:  # vec(f(unvec(u))) = f(u)
        return back
    if name == "unvec" and a.op == "vec":
        return a.args[0]
    return ir.func(name, a, attr=attr)


def _entrywise(e: Expr) -> bool:
    return e.op in ("add", "mul", "div", "pow") or e.op in REGISTRY and REGISTRY[e.op].elementwise


def _entrywise_leaves(e: Expr) -> list:
    """The array operands of e's entrywise work (see _entrywise_map)."""
    if e.shape == SCALAR:
        return []
    return [f for a in e.args for f in _entrywise_leaves(a)] if _entrywise(e) else [e]


def _entrywise_map(e: Expr, leaf):
    """e with each operand x of its entrywise work (sums, products, quotients, powers,
    entrywise functions) replaced by leaf(x), numbers kept; None where a leaf gives None."""
    if e.shape == SCALAR:  # a number spread over the entries (in a sum or a product)
        return e
    if _entrywise(e):
        args = [_entrywise_map(a, leaf) for a in e.args]
        if any(a is None for a in args):
            return None
        build = {"add": s_add, "mul": s_mul, "div": s_div, "pow": s_pow}.get(e.op)
        return build(*args) if build else s_func(e.op, *args, attr=e.attr)
    return leaf(e)


def _vec_back(M: Expr):
    """vec(M) moved inside M's entrywise work where that undoes an unvec (vec commutes with
    it, entry by entry: vec(X∘exp(unvec(u))) = vec(X)∘exp(u)); else None."""
    leaves = _entrywise_leaves(M)
    if not any(f.op == "unvec" for f in leaves) or any(f.shape != M.shape for f in leaves):
        return None  # (a broadcast operand, x + M of a column x, has no vec of M's length)
    n = ir.dim_mul(M.shape[0], M.shape[1])
    return _entrywise_map(M, lambda x: x.args[0] if x.op == "unvec" else const(x.attr, (n, 1)) if x.op == "const"
                          else ir.func("vec", x))


def _unvec(v: Expr, shape):
    """unvec(v) as a matrix expression, where v is vec(X) or (B⊗A)vec(X) = vec(AXBᵀ) (the vec
    trick, B⊗A also seen through a transpose, _kron_factors), a ⊗ b = vec(b aᵀ) of two vectors,
    or entrywise work on them (unvec commutes with it, entry by entry); else None."""
    return _entrywise_map(v, lambda x: _unvec_one(x, tuple(shape)))


def _unvec_one(v: Expr, shape):
    if v.op == "vec" and v.args[0].shape == shape:
        return v.args[0]
    if 1 in shape:  # unvec(u, 1) = uᵀ, unvec(u, size(u, 0)) = u
        return v if shape[1] == 1 else s_T(v)
    if v.op == "const":  # unvec(c1) = c1 of the matrix's shape
        return const(v.attr, shape)
    if v.op == "T" and v.args[0].op == "kron":  # (p ⊗ q)ᵀ = pᵀ ⊗ qᵀ
        v = ir.func("kron", *(s_T(a) for a in v.args[0].args))
    if v.op == "kron" and all(a.shape[1] == 1 for a in v.args) and v.args[1].shape[0] == shape[0]:
        a, b = v.args  # a ⊗ b = vec(b aᵀ)
        return s_matmul(b, s_T(a))
    if v.op != "matmul" or v.args[1].op != "vec":
        return None
    M, X = v.args[0], v.args[1].args[0]
    if M.op == "add":
        terms = [_unvec_one(s_matmul(m, v.args[1]), shape) for m in M.args]
        return None if any(t is None for t in terms) else s_add(*terms)
    pq = _kron_factors(M)
    if pq is None:
        return None
    B, A = pq
    if A.shape[1] != X.shape[0] or B.shape[1] != X.shape[1] or (A.shape[0], B.shape[0]) != tuple(shape):
        return None
    return s_matmul(s_matmul(A, X), s_T(B))


def _unvec_kron(v: Expr, shape):
    """unvec((B⊗A) u) = A unvec(u) Bᵀ for any vector u (unvec(u) of A's columns × B's
    columns), where B⊗A is seen (_kron_factors); else None."""
    if v.op != "matmul" or (pq := _kron_factors(v.args[0])) is None:
        return None
    B, A = pq
    if (A.shape[0], B.shape[0]) != tuple(shape):
        return None
    inner = s_func("unvec", v.args[1], attr=(A.shape[1], B.shape[1]))
    return s_matmul(s_matmul(A, inner), s_T(B))


def _constant_along(f: Expr, axis: int):
    """v where f is v spread along ``axis`` (u@1ᵀ along the rows: u; 1@v down the columns:
    v; a number: itself), else None."""
    if f.shape == SCALAR:
        return f
    if f.op == "matmul":
        u, v = f.args
        ones = v if axis == 1 else u
        if ones.op == "const" and ones.attr == 1.0 and (ones.shape[0] == 1 if axis == 1 else ones.shape[1] == 1):
            return u if axis == 1 else v
    return None


def _sum_along(a: Expr, axis: int):
    """sum(a, axis) rewritten, or None: a factor (or divisor) constant along the axis comes
    out, sum(u@1ᵀ∘C, 1) = u∘sum(C, 1); a sum of terms is summed term by term where that is
    shorter."""
    if a.op in ("mul", "div"):
        fs = list(a.args) if a.op == "mul" else [a.args[0]]
        out = [_constant_along(f, axis) for f in fs]
        if a.op == "div":
            d = _constant_along(a.args[1], axis)
            if d is None or a.args[1].shape == SCALAR:
                return None
            out.append(s_div(const(1.0), d))
            fs.append(None)
        pulled = [v for v, f in zip(out, fs) if v is not None]
        rest = [f for v, f in zip(out, fs) if v is None and f is not None]
        if not pulled:
            return _sum_along_product(a, axis) if a.op == "mul" else None
        if not rest:  # every factor constant along the axis: sum(u@1ᵀ, 1) = u·(the row length)
            return s_mul(*pulled, axis_count(a.shape, axis))
        if ir._broadcast([f.shape for f in rest]) != a.shape:
            return None
        return s_mul(*pulled, s_func("sum", s_mul(*rest), attr=axis))
    if a.op == "add" and all(t.shape == a.shape for t in a.args):
        split = s_add(*[s_func("sum", t, attr=axis) for t in a.args])
        if ir.tree_size(split) < ir.tree_size(a):
            return split
    if a.op == "matmul":  # sum(A@M, 1) = A@sum(M, 1), sum(M@B, 0) = sum(M, 0)@B: where that sum gets shorter
        A, M = a.args if axis == 1 else a.args[::-1]
        inner = s_func("sum", M, attr=axis)
        if inner.op != "sum":
            out = s_matmul(A, inner) if axis == 1 else s_matmul(inner, A)
            if ir.tree_size(out) < ir.tree_size(Expr("sum", (a,), axis, out.shape)):
                return out
    return None


def _sum_along_product(a: Expr, axis: int):
    """sum(C∘(1@r), 1) = C@rᵀ and sum(C∘(u@1ᵀ), 0) = uᵀ@C (a vector spread across the axis
    summed: a matrix-vector product); or a factor that is a sum of a few terms opened,
    sum(C∘(P - Q), 1) = sum(C∘P, 1) - sum(C∘Q, 1), where the sums then get shorter (a graph's
    Σ W_ij (x_i - x_j)², whose C∘(x@1ᵀ - 1@xᵀ) sums to x∘(C@1) - C@x); else None."""
    across = [_constant_along(f, 1 - axis) if f.shape != SCALAR else None for f in a.args]
    spread = [k for k, v in enumerate(across) if v is not None and v.shape != SCALAR]
    if len(spread) == 1:
        v = across[spread[0]]
        rest = [f for k, f in enumerate(a.args) if k != spread[0]]
        if ir._broadcast([f.shape for f in rest]) == a.shape:
            m = s_mul(*rest)
            return s_matmul(m, s_T(v)) if axis == 1 else s_matmul(s_T(v), m)
    sums = [k for k, f in enumerate(a.args) if f.op == "add" and f.shape == a.shape and len(f.args) <= 4]
    if len(sums) != 1 or len(a.args) > 3:
        return None
    others = [f for k, f in enumerate(a.args) if k != sums[0]]
    parts = [s_func("sum", s_mul(*others, t), attr=axis) for t in a.args[sums[0]].args]
    split = s_add(*parts)
    whole = Expr("sum", (a,), axis, split.shape)
    # shorter; or where a part's sum folds (sum(P, 1) = 1 of a softmax P, sum(P∘c1ᵀ, 1) = c) with no more
    # distinct parts (C written again in each sum(C∘…) is one part: printed results name it where long)
    folded = any(all(n.op != "sum" for n in ir.walk(p)) for p in parts) and _dag_size(split) <= _dag_size(whole)
    return split if ir.tree_size(split) < ir.tree_size(whole) or folded else None


def _dag_size(e: Expr) -> int:
    """How many distinct nodes e has."""
    return sum(1 for _ in ir.walk(e))


def _spread_number(a: Expr):
    """β for an array a = β1 (a number β spread over a's shape: β∘1, c1⊘β), else None."""
    if a.shape == SCALAR:
        return None
    if a.op == "mul" and any(f.shape != SCALAR for f in a.args):
        parts = [f if f.shape == SCALAR else _spread_number(f) for f in a.args]
        return s_mul(*parts) if all(p is not None for p in parts) else None
    if a.op == "div" and a.args[0].shape != SCALAR and a.args[1].shape == SCALAR:
        beta = _spread_number(a.args[0])
        return None if beta is None else s_div(beta, a.args[1])
    if a.op == "add":  # 1 - β²1
        parts = [t if t.shape == SCALAR else _spread_number(t) for t in a.args]
        return s_add(*parts) if all(p is not None for p in parts) else None
    if a.op == "const":
        return const(a.attr)
    return None


def _transposed_entries(a: Expr):
    """X for an a that is Xᵀ entry by entry (Xᵀ, (Xᵀ)², exp(Xᵀ)∘Yᵀ), with X no transpose of
    its own: the sum of the entries is the same; else None."""
    if a.op == "T":
        return a.args[0]
    spec = REGISTRY.get(a.op)
    elementwise = a.op in ("mul", "pow", "div") or spec is not None and spec.elementwise
    if not elementwise or a.shape == SCALAR:
        return None
    args = []
    for x in a.args:
        if x.shape == SCALAR:
            args.append(x)
            continue
        inner = _transposed_entries(x)
        if inner is None:
            return None
        args.append(inner)
    return Expr(a.op, tuple(args), a.attr, (a.shape[1], a.shape[0]))


def _one_minus(a: Expr):
    """x if a is 1 - x (as add(1, -1∘x) in either order), else None."""
    if a.op == "add" and len(a.args) == 2:
        for one, rest in (a.args, a.args[::-1]):
            if one.op == "const" and one.attr == 1.0 and rest.op == "mul" and len(rest.args) == 2 \
                    and rest.args[0].op == "const" and rest.args[0].attr == -1.0:
                return rest.args[1]
    return None


def _stable_log(a: Expr):
    """An equal form of log(a) with better numerics, or None."""
    if a.op == "exp":
        return a.args[0]
    if a.op == "add" and len(a.args) == 2:  # log(1 + exp(z)) = softplus(z)
        folded = s_func("log", a)
        if folded.op != "log":
            return folded
    if a.op == "softmax":  # log softmax(x) = x - logsumexp(x), along an axis too
        x = a.args[0]
        if a.attr is None:
            return ir.add(x, ir.neg(ir.func("logsumexp", x)))
        return ir.add(x, ir.neg(broadcast_axis(ir.func("logsumexp", x, attr=a.attr), x.shape, a.attr)))
    if a.op == "sigmoid":  # log σ(z) = -softplus(-z)
        return ir.neg(ir.func("softplus", ir.neg(a.args[0])))
    erfc = _erfc_multiple(a)
    if erfc is not None:  # log(c erfc(z)), finite where erfc(z) underflows (a probit's log Φ at z < −38)
        c, z = erfc
        out = ir.func("logerfc", z)
        return out if c == 1.0 else ir.add(ir.const(math.log(c)), out)
    if a.op == "pow" and a.args[1].op == "const" and _erfc_multiple(a.args[0]) is not None:
        return ir.mul(a.args[1], _stable_log(a.args[0]))  # log(fᵏ) = k log f, f = c erfc(z) > 0
    x = _one_minus(a)
    if x is not None and x.op == "sigmoid":  # log(1 - σ(z)) = -softplus(z)
        return ir.neg(ir.func("softplus", x.args[0]))
    if a.op == "sum" and a.args[0].op == "exp":  # log sum exp(z) = logsumexp(z), along an axis too
        return ir.func("logsumexp", a.args[0].args[0], attr=a.attr)
    if a.op == "mean" and a.args[0].op == "exp":  # log mean exp(z) = logsumexp(z) − log(the count)
        z = a.args[0].args[0]
        n = count(z.shape) if a.attr is None else axis_count(z.shape, a.attr)
        return ir.add(ir.func("logsumexp", z, attr=a.attr), ir.neg(ir.func("log", n)))
    ones = a.args[0].args[0] if a.op == "matmul" and a.args[0].op == "T" else a.args[0] if a.op == "matmul" else None
    if ones is not None and a.args[1].op == "exp" and ones.op == "const" and ones.attr == 1.0 \
            and 1 in ones.shape and ones.shape != (1, 1) and a.args[1].shape[0] != 1:
        # log(1ᵀ exp(Z)): Z's column sums (1.T as typed: a column of ones transposed), more than one entry each
        out = ir.func("logsumexp", a.args[1].args[0], attr=None if a.shape == SCALAR else 0)
        return out if out.shape == a.shape else None
    if a.op == "sum" and a.args[0].op == "mul" and len(a.args[0].args) == 2 and a.args[0].args[0].op == "const" \
            and a.args[0].args[0].attr > 0 and a.args[0].args[1].op == "exp":  # log sum(c exp(z)) = log c + logsumexp(z)
        c, e = a.args[0].args
        return ir.add(ir.const(math.log(c.attr)), ir.func("logsumexp", e.args[0], attr=a.attr))
    if a.op == "matmul" and a.args[0].op == "exp" and a.args[1].op == "const" and a.args[1].attr == 1.0 \
            and a.args[1].shape[1] == 1:
        out = ir.func("logsumexp", a.args[0].args[0], attr=1)  # log(exp(X)@1): the rows' logsumexp
        return out if out.shape == a.shape else None
    if a.op == "frob" and a.args[1].op == "const" and a.args[1].attr == 1.0 and a.args[0].op == "exp":
        return ir.func("logsumexp", a.args[0].args[0])
    if a.op == "det":  # log det X = logdet X
        return _logdet(a.args[0])
    if a.op == "diag":  # log diag(A) = diag(log A), where log A has a better form (log softmax(S, 1))
        inner = _stable_log(a.args[0])
        return None if inner is None or inner.shape != a.args[0].shape else ir.func("diag", inner)
    if a.op == "pow" and a.args[0].op == "det" and a.args[1].op == "const":  # log(det(X)ᵏ) = k logdet X
        return ir.mul(ir.const(a.args[1].attr), _logdet(a.args[0].args[0]))
    return None


def _number(e: Expr):
    """The value of a scalar without symbols (0.5, sqrt(pi)/2), else None."""
    if e.shape != SCALAR or any(n.op in ("sym", "delta") for n in ir.walk(e)):
        return None
    v = simplify(e)
    return v.attr if v.op == "const" else None


def _erfc_multiple(a: Expr):
    """(c, z) with a = c erfc(z) for a number c > 0: erfc(z), 0.5*erfc(z), erfc(z)/2,
    k(1 ± erf(z)) = k erfc(∓z), k + m erf(z) with m = ±k, 1 − 0.5 erfc(z) = 0.5 erfc(−z);
    else None."""
    if a.op == "erfc":
        return 1.0, a.args[0]
    if a.op in ("mul", "div") and len(a.args) == 2:
        numbers = [_number(t) for t in a.args]
        for k in (0, 1):
            c, inner = numbers[k], _erfc_multiple(a.args[1 - k]) if numbers[k] is not None else None
            if inner is None or not c or a.op == "div" and k == 0:
                continue
            c = inner[0] * (c if a.op == "mul" else 1.0 / c)
            return (c, inner[1]) if c > 0 else None
        return None
    if a.op != "add" or len(a.args) != 2:
        return None
    numbers = [_number(t) for t in a.args]
    if (numbers[0] is None) == (numbers[1] is None):
        return None
    k = numbers[0] if numbers[0] is not None else numbers[1]
    t = a.args[1] if numbers[0] is not None else a.args[0]
    m, f = 1.0, t
    if t.op == "mul":  # m f: its numbers multiplied (−(0.5 erfc(z)) too), one other factor
        flat, todo = [], list(t.args)
        while todo:
            u = todo.pop()
            todo.extend(u.args) if u.op == "mul" else flat.append(u)
        rest = [u for u in flat if _number(u) is None]
        if len(rest) != 1:
            return None
        m, f = math.prod(_number(u) for u in flat if u is not rest[0]), rest[0]
    if f.op == "erf" and k > 0 and abs(m) == k:  # k(1 ± erf(z)) = k erfc(∓z)
        return k, ir.neg(f.args[0]) if m > 0 else f.args[0]
    if f.op == "erfc" and m < 0 and k == -2 * m:  # k − (k/2) erfc(z) = (k/2) erfc(−z)
        return -m, ir.neg(f.args[0])
    return None


def _logdet(X: Expr) -> Expr:
    """logdet X written through its factors: log|Xᵀ| = log|X|, log|X⁻¹| = −log|X|, log|Xᵏ| =
    k log|X|, log|AB| = log|A| + log|B| (A, B square), log|cX| = n log|c| + log|X|.  The
    gradient then never inverts a power (X⁶⁴)⁻¹, which loses every digit."""
    if X.op == "T":
        return _logdet(X.args[0])
    if X.op == "inv":
        return ir.neg(_logdet(X.args[0]))
    if X.op == "matrix_power":
        return ir.mul(ir.const(float(X.attr)), _logdet(X.args[0]))
    if X.op == "matmul" and all(f.shape[0] == f.shape[1] for f in X.args):
        return ir.add(*[_logdet(f) for f in X.args])
    if X.op == "mul" and len(X.args) == 2 and X.args[0].shape == SCALAR and X.args[1].shape == X.shape:
        c, Y = X.args
        return ir.add(ir.mul(count((X.shape[0], 1)), ir.func("log", ir.func("abs", c))), _logdet(Y))
    return ir.func("logdet", X)


def _summed(den: Expr, node: bool = False):
    """X for den = sum(X), or sum(X, axis) spread back over X's shape (1@sum(X, 0),
    sum(X, 1)@1ᵀ); with ``node`` that sum itself; else None."""
    if den.op == "matmul":  # 1@sum(X, 0) (a column of ones first) or sum(X, 1)@1ᵀ (a row of ones last)
        a, b = (const(f.args[0].attr, f.shape) if f.op == "T" and f.args[0].op == "const" else f
                for f in den.args)  # (1.T as typed: the transpose of a column of ones)
        if a.op == "const" and a.attr == 1.0 and a.shape[1] == 1 and b.op == "sum" and b.attr == 0:
            den = b
        elif b.op == "const" and b.attr == 1.0 and b.shape[0] == 1 and a.op == "sum" and a.attr == 1:
            den = a
        else:
            return None
    if den.op != "sum":
        return None
    return den if node else den.args[0]


def _rounded(c: float) -> float:
    """A product of numbers that missed a simple fraction by a few roundings taken as it:
    2·(1/√2)·(1/√2) is 1.0000000000000002, and printed as 1*x it read 1, not x."""
    if not 1e-6 < abs(c) < 1e9:  # (inf and nan too)
        return c
    k = c * 720.0  # (a multiple of 1/720: halves, thirds, quarters, fifths, sixths, …)
    r = round(k)
    return r / 720.0 if r and r != k and abs(k - r) <= 8e-16 * abs(k) else c


def stabilize(e: Expr) -> Expr:
    """Rewrite the primal where an equal form has a better derivative or better numerics:
    log(1 + exp(z)) = log1p(exp(z)) = softplus(z), log σ(z) = -softplus(-z), log(1 - σ(z)) = -softplus(z),
    log sum exp(z) = logsumexp(z), log softmax(x) = x - logsumexp(x), log det X = logdet X,
    exp(z)/(c + exp(z)) = σ(z − log c) and 1/(1 + exp(-z)) = σ(z) (c > 0), exp(z)/sum(exp(z)) = softmax(z) (along an axis
    too), log(exp(z)) = z, norm2(x)**2 = x:x,
    logdet(Xᵏ) = k logdet(X), det(Xᵏ) = det(X)ᵏ.  Everything else is
    kept as the user wrote it, so the derivation reads in the user's terms."""
    memo: dict = {}
    for node in ir.walk(e):
        args = tuple(memo[a] for a in node.args)
        new = node if args == node.args else Expr(node.op, args, node.attr, node.shape)
        if new.op == "log":
            better = _stable_log(new.args[0])
            if better is not None and better.shape == new.shape:
                new = better
        elif new.op == "log1p" and new.args[0].op == "exp":  # log1p(exp(z)) = softplus(z)
            new = ir.func("softplus", new.args[0].args[0])
        elif new.op == "div":
            num, den = new.args
            beside = _exp_beside_number(den)
            if beside is not None and num is beside[0]:  # e^z/(c + e^z) = σ(z − log c)
                z, c = num.args[0], beside[1]
                new = ir.func("sigmoid", z if c == 1.0 else ir.add(z, ir.const(-math.log(c))))
            elif beside is not None and num.op == "const" and num.shape == SCALAR:  # a/(c + e^w) = (a/c) σ(log c − w)
                w, c = beside[0].args[0], beside[1]
                better = ir.func("sigmoid", ir.neg(w) if c == 1.0 else ir.add(ir.const(math.log(c)), ir.neg(w)))
                if num.attr != c:
                    better = ir.mul(ir.const(num.attr / c), better)
                if better.shape == new.shape:
                    new = better
            elif num.op == "exp" and _summed(den) is num:  # e^z/Σe^z = softmax(z)
                z, den = num.args[0], _summed(den, True)
                if den.attr is not None:
                    new = ir.func("softmax", z, attr=den.attr)
                elif z.shape[1] == 1:
                    new = ir.func("softmax", z)
                elif z.shape[0] != 1:
                    new = ir.func("softmax_all", z)
        elif new.op == "logdet":  # log|Xᵏ| = k log|X|, log|Xᵀ| = log|X|, … (_logdet)
            new = _logdet(new.args[0])
        elif new.op == "det" and new.args[0].op == "matrix_power":  # det(Xᵏ) = det(X)ᵏ
            X, k = new.args[0].args[0], new.args[0].attr
            new = ir.power(ir.func("det", X), ir.const(float(k)))
        elif new.op == "pow" and new.args[0].op == "norm2" and new.args[1].op == "const" \
                and new.args[1].attr == 2.0:
            x = new.args[0].args[0]
            new = ir.frob(x, x)
        memo[node] = new
    return memo[e]


def _exp_beside_number(den: Expr):
    """(e^w, c) where den = c + e^w for a number c > 0, else None."""
    if den.op != "add" or len(den.args) != 2:
        return None
    ex, other = den.args if den.args[0].op == "exp" else den.args[::-1]
    if ex.op == "exp" and other.op == "const" and other.shape == SCALAR and other.attr > 0:
        return ex, other.attr
    return None


def _outer_factors(a: Expr, ones: bool = False):
    """(u, vᵀ) for a matrix product a = u vᵀ whose chain has a column u@B… (a 1×n row after it),
    with an array of c's taken as c1@1ᵀ if ``ones``; else None."""
    if a.op != "matmul":
        return None
    fs = []
    for f in ir.chain_factors(a):
        fs += [const(f.attr, (f.shape[0], 1)), const(1.0, (1, f.shape[1]))] \
            if ones and f.op == "const" and f.shape[0] != 1 and f.shape[1] != 1 else [f]
    k = next((i for i, f in enumerate(fs) if f.shape[1] == 1), None)
    if k is None or k + 1 == len(fs):
        return None
    return _chain(fs[:k + 1]), _chain(fs[k + 1:])


def _chain(fs: list) -> Expr:
    """The product of a chain's factors, left to right."""
    out = fs[0]
    for f in fs[1:]:
        out = s_matmul(out, f)
    return out
