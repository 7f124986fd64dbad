"""Rewrites for fast evaluation, between simplify and codegen.

The simplified form is the one a person reads; this pass picks the one a machine
should run: the order of every matrix chain (dynamic programming on a
representative size for symbolic dimensions, so (u vᵀ)w becomes u(vᵀw)), where a
scalar factor is applied (to the smallest operand), whether A(B + C) is cheaper
distributed, and ``inv(A) b`` as a linear solve when the inverse is not needed
elsewhere.  Every rewrite is an identity; the cost model only chooses among them.
"""
from __future__ import annotations

import math

from . import ir
from .ir import SCALAR, Expr
from .ops import REGISTRY

N = 1024  # the representative size of a symbolic dimension


def size(d) -> int:
    return d if isinstance(d, int) else N


def numel(shape) -> int:
    return size(shape[0]) * size(shape[1])


def local_cost(e: Expr) -> float:
    """Rough flop count of computing e from its arguments."""
    op = e.op
    if not e.args:
        return 0.0 if op != "eye" and op != "const" or e.shape == SCALAR else numel(e.shape)
    spec = REGISTRY.get(op)
    if spec is not None and spec.cost is not None:
        return float(spec.cost(e, size))
    return float(max(numel(e.shape), max(numel(a.shape) for a in e.args)))


def tree_cost(e: Expr, memo=None) -> float:
    memo = {} if memo is None else memo
    total = 0.0
    for n in ir.walk(e):
        if n not in memo:
            memo[n] = local_cost(n)
        total += memo[n]
    return total


def _chain(e: Expr, uses: dict, scalars: list) -> list:
    """The factors of a matrix chain, pulling out scalar factors of its operands; a transposed
    product used once is its factors transposed, in reverse ((AB)ᵀG = BᵀAᵀG: ordered with G)."""
    if e.op == "matmul" and uses.get(e, 1) <= 1:
        return _chain(e.args[0], uses, scalars) + _chain(e.args[1], uses, scalars)
    if e.op == "T" and e.args[0].op == "matmul" and uses.get(e, 1) <= 1 and uses.get(e.args[0], 1) <= 1 \
            and 1 not in e.shape:
        a, b = e.args[0].args
        return _chain(ir.matmul(_t(b), _t(a)), uses, scalars)
    if e.op == "mul" and uses.get(e, 1) <= 1:
        sc = [f for f in e.args if f.shape == SCALAR]
        arr = [f for f in e.args if f.shape != SCALAR]
        if sc and len(arr) == 1:
            scalars.extend(sc)
            return _chain(arr[0], uses, scalars)
    if e.op == "const" and e.shape != SCALAR and 1 not in e.shape:  # c·1 1ᵀ: a column times a row
        return [ir.const(e.attr, (e.shape[0], 1)), ir.const(1.0, (1, e.shape[1]))]
    return [e]


def _mm_cost(a_shape, b_shape, a: Expr | None = None, b: Expr | None = None, sz=size) -> float:
    if (a is not None and a.op == "Diag") or (b is not None and b.op == "Diag"):
        return sz(a_shape[0]) * sz(b_shape[1])
    return sz(a_shape[0]) * sz(a_shape[1]) * sz(b_shape[1])


MAX_DP = 24  # longer chains are ordered greedily (the DP is cubic in the length)


def order_chain(fs: list) -> Expr:
    """Optimal parenthesisation of a matrix chain (classic dynamic programming); for a
    very long chain, greedily the cheapest adjacent product first."""
    n = len(fs)
    if n == 1:
        return fs[0]
    if n > MAX_DP:
        fs = list(fs)
        while len(fs) > 1:
            k = min(range(len(fs) - 1), key=lambda i: _mm_cost(fs[i].shape, fs[i + 1].shape, fs[i], fs[i + 1]))
            fs[k:k + 2] = [ir.matmul(fs[k], fs[k + 1])]
        return fs[0]
    return _dp(fs, size)[1]


def _dp(fs: list, sz) -> tuple:
    """(cost, the product) of the cheapest order of the chain fs, its dimensions' sizes sz(d)."""
    n = len(fs)
    best = {(i, i): (0.0, fs[i]) for i in range(n)}
    for length in range(2, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            cand = None
            for k in range(i, j):
                cl, el = best[(i, k)]
                cr, er = best[(k + 1, j)]
                c = cl + cr + _mm_cost(el.shape, er.shape, el, er, sz)
                if cand is None or c < cand[0]:
                    cand = (c, (el, er))
            best[(i, j)] = (cand[0], ir.matmul(*cand[1]))
    return best[(0, n - 1)]


SMALL, LARGE = N // 32, N * 32  # a dimension far below and far above the others


def _order_depends_on_sizes(fs: list) -> bool:
    """Whether the cheapest order of the chain fs changes with the sizes of its symbolic
    dimensions (one of them far smaller or far larger than the rest: H@E@W of a one-hot H,
    an embedding E and a projection W is (HE)W for a large vocabulary, H(EW) for a small one):
    then the emitted code orders it for the shapes it is called with.  Only for chains of
    matrices (a vector at either end) without a Diag, I or ones factor, which every backend's
    multi_dot takes."""
    n = len(fs)
    if n < 3 or any(f.op in ("Diag", "eye", "const") for f in fs):
        return False
    if any(f.shape[0] == 1 for f in fs[1:]) or any(f.shape[1] == 1 for f in fs[:-1]):
        return False  # (a vector inside: an outer product)
    dims = {d for f in fs for d in f.shape if not isinstance(d, int)}
    if len(dims) < 2 or len(dims) > 8:
        return False
    first = _dp(fs, size)[1]
    for d in sorted(dims, key=str):
        for value in (SMALL, LARGE):
            if _dp(fs, lambda x, d=d, v=value: x if isinstance(x, int) else v if x == d else N)[1] != first:
                return True
    return False


def _apply_scalars(e: Expr, scalars: list) -> Expr:
    """Multiply the scalars into the smallest operand of the chain e (or e itself)."""
    if not scalars:
        return e
    s = scalars[0] if len(scalars) == 1 else ir.mul(*scalars)
    if e.op == "matmul":
        a, b = e.args
        target = min((e, a, b), key=lambda x: numel(x.shape))
        if target is a:
            return ir.matmul(_apply_scalars(a, scalars), b)
        if target is b:
            return ir.matmul(a, _apply_scalars(b, scalars))
    if e.op == "mul":  # flat, as simplify writes products: equal products meet as one node
        return ir.mul(*scalars, *e.args)
    return ir.mul(s, e)


_use_counts = ir.use_counts


def order_products(outputs: list) -> list:
    """The order of every matrix chain (with its scalar factors on the smallest operand),
    inv(A)b as a solve where the inverse is needed nowhere else, A(I + B) distributed where
    cheaper."""
    uses = _use_counts(outputs)
    inv_uses = {}
    for n, k in uses.items():
        if n.op == "inv":
            inv_uses[n] = inv_uses.get(n, 0) + k
        elif n.op == "T" and n.args[0].op == "inv":
            inv_uses[n.args[0]] = inv_uses.get(n.args[0], 0) + k - 1  # the T itself used the inv once
    # a product used once inside a bigger product is ordered with it, not on its own
    interior = set()
    for root in outputs:
        for n in ir.walk(root):
            if n.op == "matmul":
                for a in n.args:
                    inner = a
                    if a.op == "mul" and uses.get(a, 1) <= 1:
                        arr = [f for f in a.args if f.shape != SCALAR]
                        inner = arr[0] if len(arr) == 1 else a
                    if inner.op == "matmul" and uses.get(inner, 1) <= 1:
                        interior.add(inner)
    memo: dict = {}

    def opt(e: Expr) -> Expr:
        for node in ir.walk(e):
            if node in memo:
                continue
            args = tuple(memo[a] for a in node.args)
            new = node if args == node.args else Expr(node.op, args, node.attr, node.shape)
            memo[node] = rewrite(new)
        return memo[e]

    def rewrite(e: Expr, top: bool = False) -> Expr:
        if e.op == "matmul" and e in interior and not top:
            return e
        if e.op == "matmul":
            scalars: list = []
            fs = _chain(e, uses, scalars)
            fs = [_solve_left(fs, i) for i in range(len(fs))]
            fs = [f for f in fs if f is not None]
            best = _apply_scalars(order_chain(fs), scalars)
            split = _sum_times_vector(best)
            if split is not None:
                return split
            dist = _distribute(best)
            return dist if dist is not None and tree_cost(dist) < tree_cost(best) else best
        if e.op == "mul" and len(e.args) >= 2:
            sc = [f for f in e.args if f.shape == SCALAR]
            arr = [f for f in e.args if f.shape != SCALAR]
            if sc and len(arr) == 1 and arr[0].op == "matmul":
                return _apply_scalars(arr[0], sc)
        return e

    def _solve_left(fs, i):
        """inv(A) b -> solve(A, b) when that inverse is used nowhere else."""
        f = fs[i]
        if f is None or i + 1 >= len(fs):
            return f
        inv = f if f.op == "inv" else (f.args[0] if f.op == "T" and f.args[0].op == "inv" else None)
        if inv is None or inv_uses.get(inv, 0) > 1:
            return f
        A = inv.args[0] if f.op == "inv" else ir.T(inv.args[0])
        fs[i + 1] = Expr("solve", (A, fs[i + 1]), None, (A.shape[0], fs[i + 1].shape[1]))
        return None

    def _sum_times_vector(e: Expr):
        """(Sᵀ + S)w = Sᵀw + Sw for a sum of a few matrices given as they are (or transposed)
        times a vector: the products read the matrices where the sum would first write a new
        one (3-5x the time at 400-1500)."""
        if e.op != "matmul":
            return None
        a, b = e.args
        for side, other, s in ((0, a, b), (1, b, a)):
            if s.op == "add" and uses.get(s, 1) <= 1 and len(s.args) <= 3 and 1 in other.shape \
                    and 1 not in s.shape and all(_given(t) and t.shape == s.shape for t in s.args):
                return ir.add(*[rewrite(ir.matmul(other, t) if side == 0 else ir.matmul(t, other)) for t in s.args])
        return None

    def _distribute(e: Expr):
        """A(I + B) = A + AB when that is cheaper (only with an I term: distributing in
        general can grow the expression exponentially)."""
        if e.op != "matmul":
            return None
        a, b = e.args
        for side, other, s in ((0, a, b), (1, b, a)):
            if s.op == "add" and uses.get(s, 1) <= 1 and len(s.args) <= 3 \
                    and any(t.op == "eye" for t in s.args):  # A(I + B) = A + AB
                terms = []
                for t in s.args:
                    if t.shape == SCALAR:
                        return None
                    terms.append(rewrite(ir.matmul(other, t) if side == 0 else ir.matmul(t, other))
                                 if t.op != "eye" else other)
                return ir.add(*terms)
        return None

    return [opt(o) for o in outputs]


def _given(t: Expr) -> bool:
    """A matrix as it is given: a symbol, its transpose, or a number times one."""
    if t.op == "mul" and len(t.args) == 2 and t.args[0].shape == SCALAR:
        t = t.args[1]
    if t.op == "T":
        t = t.args[0]
    return t.op == "sym"


def stable_forms(outputs: list) -> list:
    """log(c + eᶻ) and eᶻ/(c + eᶻ) through softplus and sigmoid (see _stable_form)."""
    return _rebuild(outputs, _stable_form)


def rows_as_columns(outputs: list) -> list:
    """xᵀA as (Aᵀx)ᵀ (see _row_as_column)."""
    return _rebuild(outputs, _row_as_column)


def optimize(outputs: list, passes=None) -> list:
    """The outputs rewritten for evaluation by each pass of ``passes`` (default ``PASSES``)
    in order; every pass is an identity on values, so any subset gives the same numbers."""
    for p in PASSES if passes is None else passes:
        outputs = p(list(outputs))
    return outputs


def _c_plus_exp(e: Expr):
    """(c, z) if e is c + exp(z) with a constant c > 0, else None."""
    if e.op == "add" and len(e.args) == 2:
        for c, x in (e.args, e.args[::-1]):
            if c.op == "const" and c.shape == SCALAR and c.attr > 0 and x.op == "exp":
                return c.attr, x.args[0]
    return None


def _xlogx_power(a: Expr, b: Expr):
    """a∘b for a, b = p, logᵏ(x) (either order, k a whole number) where p is 0 wherever x is
    (a power of x, a sum or product of such, xᵏ log x), with log(x) taken in as xlogy(·, x)
    k times, else None."""
    for p, lg in ((a, b), (b, a)):
        k = 1
        if lg.op == "pow" and lg.args[1].op == "const" and lg.args[1].attr in (2.0, 3.0, 4.0):
            lg, k = lg.args[0], int(lg.args[1].attr)
        if lg.op == "log":
            for _ in range(k):
                p = _times_log(p, lg.args[0])
                if p is None:
                    break
            if p is not None:
                return p
    return None


def _times_log(p: Expr, x: Expr):
    """p∘log(x) with a factor of p that is 0 where x is 0 as xlogy(·, x), else None."""
    if p.op in ("pow", "xlogy", "add") and _zero_with(p, x):
        return ir.func("xlogy", p, x)
    if p.op == "mul":
        for k, f in enumerate(p.args):
            g = _times_log(f, x)
            if g is not None:
                return ir.mul(*p.args[:k], g, *p.args[k + 1:])
    return None


def _zero_with(q: Expr, x: Expr) -> bool:
    """q is 0 where x is: x itself, a (positive) power of such a q, xlogy(q, x), a sum of
    such terms or a product with such a factor."""
    if q == x:
        return True
    if q.op in ("pow", "xlogy"):
        return _zero_with(q.args[0], x) and (q.op == "pow" or q.args[1] == x)
    if q.op in ("add", "mul"):
        return (all if q.op == "add" else any)(_zero_with(a, x) for a in q.args)
    return False


def _stable_form(e: Expr) -> Expr:
    """log(c + eᶻ) = softplus(z − log c) + log c and eᶻ/(c + eᶻ) = σ(z − log c) for a
    constant c > 0: the same values, without inf/inf where eᶻ overflows; log cosh(z) as
    |z| + softplus(−2|z|) − log 2, finite where cosh(z) overflows; xᵏ∘log(x), the
    derivative of xᵏ in k, as xlogy(xᵏ, x), 0 and not 0·(−∞) where x = 0; 1 − σ(z) as σ(−z);
    quotients by norms through unit vectors (_unit_vectors).  (The printed derivation keeps
    the form the user wrote.)"""
    if e.op == "mul" and any(f.op == "mul" for f in e.args):  # log(x)∘(log(y)∘z): the factors side by side
        flat = ir.mul(*[g for f in e.args for g in (f.args if f.op == "mul" else (f,))])
        if flat.op == "mul" and any(_xlogx_power(flat.args[i], flat.args[j]) is not None
                                    for i in range(len(flat.args)) for j in range(i + 1, len(flat.args))):
            e = flat
    while e.op == "mul" and len(e.args) >= 2:
        pair = next(((i, j, p) for i in range(len(e.args)) for j in range(i + 1, len(e.args))
                     for p in [_xlogx_power(e.args[i], e.args[j])] if p is not None), None)
        if pair is None:
            break
        i, j, p = pair
        rest = [a for k, a in enumerate(e.args) if k not in (i, j)]
        e = ir.mul(*rest, p) if rest else p
    if e.op == "frob" or e.op == "matmul" and e.shape == SCALAR and e.args[0].op == "T":
        a, b = e.args if e.op == "frob" else (e.args[0].args[0], e.args[1])
        if a.shape == b.shape:  # a:b = sum(a∘b), where a∘b takes a log in
            m = ir.mul(a, b)
            stable = _stable_form(m)
            if stable is not m:
                return ir.func("sum", stable)
    spread = _log_terms_spread(e)
    if spread is not None:
        return spread
    if e.op == "log" and _c_plus_exp(e.args[0]):
        c, z = _c_plus_exp(e.args[0])
        shifted = z if c == 1.0 else ir.add(z, ir.const(-math.log(c)))
        sp = ir.func("softplus", shifted)
        return sp if c == 1.0 else ir.add(sp, ir.const(math.log(c)))
    if e.op == "log" and e.args[0].op == "cosh":  # log cosh z = |z| + softplus(−2|z|) − log 2
        a = ir.func("abs", e.args[0].args[0])
        return ir.add(a, ir.func("softplus", ir.mul(ir.const(-2.0), a)), ir.const(-math.log(2.0)))
    unit = _unit_vectors(e)
    if unit is not None:
        return unit
    if e.op == "exp" and e.args[0].op == "add":  # exp(−u² − log erfc(u)) = 1/erfcx(u)
        scaled = _over_erfcx(e.args[0])
        if scaled is not None:
            return scaled
    if e.op == "add" and len(e.args) == 2:  # 1 − σ(z) = σ(−z), all its digits where σ(z) rounds to 1
        one, rest = e.args if e.args[0].op == "const" else e.args[::-1]
        if one.op == "const" and one.attr == 1.0 and one.shape == SCALAR and rest.op == "mul" \
                and len(rest.args) == 2 and rest.args[0].op == "const" and rest.args[0].attr == -1.0 \
                and rest.args[1].op == "sigmoid" and rest.shape == e.shape:
            return ir.func("sigmoid", ir.neg(rest.args[1].args[0]))
    if e.op == "div" and e.args[0].op == "exp" and _c_plus_exp(e.args[1]):
        c, z = _c_plus_exp(e.args[1])
        if z == e.args[0].args[0]:
            return ir.func("sigmoid", z if c == 1.0 else ir.add(z, ir.const(-math.log(c))))
    return e


def _over_erfcx(s: Expr):
    """exp(s) for s = −u² − log erfc(u) + rest as exp(rest)/erfcx(u), erfcx(u) = exp(u²) erfc(u):
    the derivative of log erfc (a probit's log Φ), each digit exact where u² is large, and 0,
    not nan, where erfcx(u) overflows.  None if s has no such terms."""
    from .simplify import simplify

    for i, t in enumerate(s.args):
        if t.op == "mul" and len(t.args) == 2 and t.args[0] == ir.const(-1.0) and t.args[1].op == "logerfc":
            u = t.args[1].args[0]
            for j, q in enumerate(s.args):
                if j != i and q.shape == u.shape and simplify(ir.add(q, ir.power(u, ir.const(2.0)))) == \
                        ir.const(0.0, u.shape):
                    rest = [a for k, a in enumerate(s.args) if k not in (i, j)]
                    out = ir.div(ir.const(1.0), ir.func("erfcx", u))
                    return ir.mul(ir.func("exp", ir.add(*rest)), out) if rest else out
    return None


def _unit_vectors(e: Expr):
    """p/‖z‖ᵏ (or p/(z:z)ᵏ/²) with p of degree c ≤ k in z (z only in products, linear functions
    and sums of terms of one degree) as p with z/‖z‖ for z, divided by ‖z‖ k − c times: the
    same value, and finite where ‖z‖ᵏ or p overflow or underflow (the Hessian of ‖x‖ at x of
    1e±150 was inf or nan: (x:dx)x/‖x‖² is (u:dx)u, u = x/‖x‖; x/(x:x) is u/‖x‖); else None.
    Only for a vector z: z/‖z‖ of a matrix costs a pass over it (sum(X*Y)/norm2(X) in X took
    1.3-2x as long, norm2(X@W - Y) in W 3x)."""
    if e.op != "div":
        return None
    num, den = e.args
    k = 1.0
    if den.op == "pow" and den.args[1].op == "const" and 1 <= den.args[1].attr <= 16 \
            and float(den.args[1].attr).is_integer():  # (one division per power: a few at most)
        den, k = den.args[0], den.args[1].attr
    if den.op == "norm2":
        z = den.args[0]
    elif den.op == "frob" and den.args[0] is den.args[1]:  # z:z = ‖z‖²
        z, k = den.args[0], 2 * k
    else:
        return None
    # (z/‖z‖ costs an array of z's size: taken for a vector z, whose norm took as much)
    if sum(d != 1 for d in z.shape) != 1:
        return None
    c = _degree(num, z, {})
    if c is None or c > k or num is z and k == 1 or c == 0 and k == 1:
        return None
    norm = ir.func("norm2", z)
    u = ir.div(z, norm)
    out = ir.rebuild([num], lambda n: u if n == z else n)[0] if c else num
    for _ in range(int(k - c)):  # (one ‖z‖ at a time: ‖z‖² overflows where ‖z‖ does not)
        out = ir.div(out, norm)
    return out


_LINEAR = ("T", "sum", "tr", "vec", "unvec", "diag", "Diag")  # functions linear in their one argument


def _degree(e: Expr, z: Expr, memo: dict):
    """The degree of e in z where e is a product of factors linear in z (z itself, a linear
    function of such), a sum of terms of one degree, or a quotient by something without z;
    0 without z; None otherwise (z inside exp, a sum of unlike degrees, …)."""
    if e is z:
        return 1
    if e in memo:
        return memo[e]
    out = None
    if not e.args:
        out = 0
    elif e.op in ("mul", "matmul", "frob", "kron"):
        ds = [_degree(a, z, memo) for a in e.args]
        out = None if None in ds else sum(ds)
    elif e.op in _LINEAR:
        out = _degree(e.args[0], z, memo)
    elif e.op == "div":
        out = _degree(e.args[0], z, memo) if _degree(e.args[1], z, memo) == 0 else None
    elif e.op == "add":
        ds = {_degree(a, z, memo) for a in e.args}
        out = ds.pop() if len(ds) == 1 else None
    elif all(_degree(a, z, memo) == 0 for a in e.args):
        out = 0
    memo[e] = out
    return out


def _log_terms_spread(e: Expr):
    """p∘(a + b + …) as p∘a + p∘b + … where that lets a term take its log(x) into xlogy (p a
    power of x, a term with log(x): the second derivative of xᵏ∘yᵏ in k); else None.  (A
    Frobenius product goes through p∘(…), in _stable_form.)  Only where a log is in e: the
    spreading recurses into the terms, as many times as sums nest in products."""
    if e.op != "mul" or not _has_log(e):
        return None
    for k, s in enumerate(e.args):
        rest = e.args[:k] + e.args[k + 1:]
        if s.op != "add" or any(t.shape != s.shape for t in s.args) or not any(r.op in ("pow", "mul", "xlogy")
                                                                          for r in rest):
            continue
        if not any(_pairs_xlogy(list(rest) + list(t.args if t.op == "mul" else (t,))) for t in s.args):
            continue  # (no term takes a log in here: spreading would only recurse, once per nested sum)
        terms = [ir.mul(*rest, t) for t in s.args]
        stable = [_stable_form(t) for t in terms]
        if any(a is not b for a, b in zip(stable, terms)):
            return ir.add(*stable)
    return None


def _pairs_xlogy(fs) -> bool:
    """Whether two of the factors fs are a power of x and log(x) (_xlogx_power)."""
    return any(_xlogx_power(fs[i], fs[j]) is not None for i in range(len(fs)) for j in range(i + 1, len(fs)))


def _has_log(e: Expr) -> bool:
    """Whether log is applied anywhere in e (each shared node looked at once)."""
    seen, stack = set(), [e]
    while stack:
        n = stack.pop()
        if n.op == "log":
            return True
        for a in n.args:
            if id(a) not in seen:
                seen.add(id(a))
                stack.append(a)
    return False


_root, _dag, _rebuild = ir.outputs_root, ir.dag, ir.rebuild


def _t(e: Expr) -> Expr:
    return e.args[0] if e.op == "T" else e if e.shape == SCALAR else ir.T(e)


def _row_as_column(e: Expr) -> Expr:
    """xᵀA = (Aᵀx)ᵀ: a row-vector product written as a column one, so that equal
    products meet as one node (xᵀS⁻ᵀ and S⁻¹x) and are computed once."""
    if e.op == "matmul" and e.shape[0] == 1 and e.shape[1] != 1 and e.args[0].shape[1] != 1:
        a, b = e.args
        return _t(ir.matmul(_t(b), _t(a)))
    return e


def _diagonal_of_products(outputs: list) -> list:
    """diag(AB) = sum(A∘Bᵀ, 1) for a product used nowhere else: the n entries of the
    diagonal in n·k multiplications, without the n×n product (x xᵀ's diagonal is x∘x)."""
    uses = _use_counts([_root(outputs)])

    def fn(e: Expr) -> Expr:
        if e.op != "diag" or uses.get(e.args[0], 0) > 1:
            return e
        p, scalars = e.args[0], []
        if p.op == "mul" and sum(f.shape != SCALAR for f in p.args) == 1:  # diag(c·AB) = c·diag(AB)
            scalars = [f for f in p.args if f.shape == SCALAR]
            p = next(f for f in p.args if f.shape != SCALAR)
            if uses.get(p, 0) > 1:
                return e
        if p.op != "matmul" or any(f.op == "Diag" for f in p.args):  # (Diag(v)A is n² work, not n²k)
            return e
        a, b = p.args
        # (PQ)ᵀ as QᵀPᵀ: the same product as elsewhere (Xᵀ's factor X@W), computed once
        bt = ir.matmul(_t(b.args[1]), _t(b.args[0])) if b.op == "matmul" else _t(b)
        entries = ir.mul(*scalars, a, bt)
        return entries if a.shape[1] == 1 else ir.func("sum", entries, attr=1)

    return _rebuild(outputs, fn)


def _share_products(outputs: list) -> list:
    """(A + B)x = Ax + Bx when Ax and Bx are computed anyway (in another output, say)."""
    known = set(_dag(outputs))

    def fn(e: Expr) -> Expr:
        if e.op != "matmul":
            return e
        a, b = e.args
        for s, side in ((a, 0), (b, 1)):
            if s.op == "add" and not any(t.shape == SCALAR for t in s.args):
                parts = [ir.matmul(t, b) if side == 0 else ir.matmul(a, t) for t in s.args]
                if all(p in known for p in parts):
                    return ir.add(*parts)
        return e

    return _rebuild(outputs, fn)


def _split_sums(outputs: list) -> list:
    """sum(a − b + u∘v + k) = sum(a) − sum(b) + u:v + k·(number of entries), for a sum used
    nowhere else: each array summed is one dot product (with ones), a product summed is
    one dot product, a constant summed is a count, and the array additions that carried
    them are not done (they would read and write as much as the dot products read)."""
    uses = _use_counts([_root(outputs)])  # each edge once

    def fn(e: Expr) -> Expr:
        if e.op == "sum" and e.attr is None:
            X, c = e.args[0], 1.0
        elif e.op == "frob" and any(a.op == "const" and a.shape != SCALAR for a in e.args):
            X, c = (e.args[0], e.args[1].attr) if e.args[1].op == "const" else (e.args[1], e.args[0].attr)
        else:
            return e
        if X.op != "add" or uses.get(X, 0) > 1:
            return e
        ones = ir.const(1.0, X.shape)
        keep, out = [], []
        for t in X.args:
            fs = t.args if t.op == "mul" else (t,)
            sc = [f for f in fs if f.shape == SCALAR]
            arr = [f for f in fs if f.shape != SCALAR]
            if len(arr) == 1 and arr[0].op == "pow" and arr[0].args[1] == ir.const(2.0):
                arr = [arr[0].args[0], arr[0].args[0]]  # u² summed is u:u
            if not arr:  # a scalar added to every entry
                value = math.prod(f.attr for f in sc if f.op == "const")
                rest = [f for f in sc if f.op != "const"]
                out.append(ir.mul(*rest, ir.frob(ir.const(value, X.shape), ones)) if rest
                           else ir.frob(ir.const(value, X.shape), ones))
            elif len(arr) == 2 and arr[0].shape == arr[1].shape == X.shape:
                out.append(ir.mul(*sc, ir.frob(*arr)) if sc else ir.frob(*arr))
            elif len(arr) == 1 and arr[0].shape == X.shape:
                out.append(ir.mul(*sc, ir.frob(arr[0], ones)) if sc else ir.frob(arr[0], ones))
            else:
                keep.append(t)
        if not out:
            return e
        if keep:
            rest = keep[0] if len(keep) == 1 else ir.add(*keep)
            if rest.shape != X.shape:
                return e
            out.insert(0, ir.frob(rest, ones))
        total = out[0] if len(out) == 1 else ir.add(*out)
        return total if c == 1.0 else ir.mul(ir.const(c), total)

    return _rebuild(outputs, fn)


def _sigmoid_from_softplus(outputs: list) -> list:
    """σ(z) = exp(z − softplus(z)) = exp(−softplus(−z)) when that softplus is computed
    anyway (a logistic loss and its gradient): one exp instead of a second log-add-exp."""
    softplus = {n.args[0]: n for n in _dag(outputs) if n.op == "softplus"}

    def fn(e: Expr) -> Expr:
        if e.op != "sigmoid":
            return e
        z = e.args[0]
        if z in softplus:
            return ir.func("exp", ir.add(z, ir.neg(softplus[z])))
        minus_z = ir.neg(z)
        if minus_z in softplus:
            return ir.func("exp", ir.neg(softplus[minus_z]))
        return e

    return _rebuild(outputs, fn) if softplus else outputs


def _expm1_log1p(outputs: list) -> list:
    """eᶻ − 1 = expm1(z) when eᶻ is needed nowhere else, and log(1 + x) = log1p(x) when
    1 + x is needed nowhere else: one array operation fewer, and exact near z = 0."""
    uses = _use_counts([_root(outputs)])
    one, minus_one = ir.const(1.0), ir.const(-1.0)

    def fn(e: Expr) -> Expr:
        if e.op == "add" and minus_one in e.args:
            ex = next((t for t in e.args if t.op == "exp" and t.shape == e.shape
                       and uses.get(t, 0) == 1), None)
            if ex is not None:
                rest = list(e.args)
                rest.remove(minus_one)
                rest[rest.index(ex)] = ir.func("expm1", ex.args[0])
                return rest[0] if len(rest) == 1 else ir.add(*rest)
        if e.op == "log" and e.args[0].op == "add" and one in e.args[0].args \
                and uses.get(e.args[0], 0) == 1:
            rest = list(e.args[0].args)
            rest.remove(one)
            x = rest[0] if len(rest) == 1 else ir.add(*rest)
            if x.shape == e.shape:
                return ir.func("log1p", x)
        return e

    return _rebuild(outputs, fn)


def _signed(t: Expr) -> tuple:
    """(sign, term) of an addend: −b is (−1, b)."""
    if t.op == "mul" and len(t.args) == 2 and t.args[0] == ir.const(-1.0):
        return -1, t.args[1]
    return 1, t


def _reuse_sums(outputs: list) -> list:
    """a − b − c = a − (b + c) when the sum b + c is computed anyway (a VAE's z = Wx + c
    inside exp(z) − Wx − c): one array addition fewer."""
    known: dict = {}
    for n in _dag(outputs):
        if n.op == "add" and 2 <= len(n.args) <= 4:
            signed = [_signed(t) for t in n.args]
            if len({b for _, b in signed}) == len(signed):
                known.setdefault(signed[0][1], []).append((n, signed))

    def fn(e: Expr) -> Expr:
        while True:
            new = once(e)
            if new is e:
                return e
            e = new

    def once(e: Expr) -> Expr:
        if e.op != "add" or len(e.args) < 3:
            return e
        terms = [_signed(t) for t in e.args]
        index = {b: s for s, b in terms}
        if len(index) < len(terms):  # a term twice (not collected): leave it
            return e
        for _, b in terms:
            for z, zs in known.get(b, ()):
                if z == e or len(zs) >= len(terms):
                    continue
                sigma = index.get(zs[0][1], 0) * zs[0][0]
                if sigma and all(index.get(zb) == sigma * s for s, zb in zs):
                    used = {zb for _, zb in zs}
                    rest = [t for t in e.args if _signed(t)[1] not in used]
                    return ir.add(*rest, z if sigma == 1 else ir.neg(z))
        return e

    return _rebuild(outputs, fn)


def broadcast_of(e: Expr):
    """(v, ones, side) if e is a vector repeated: v 1ᵀ (side 0, each column v) or 1 vᵀ (side 1,
    each row vᵀ), with ones its matrix-of-ones factor; else None."""
    if e.op != "matmul":
        return None
    a, b = e.args
    if a.shape[1] != 1 or 1 in e.shape:
        return None
    if b.op == "const" and b.attr == 1.0 and a.op != "const":
        return a, b, 0
    if a.op == "const" and a.attr == 1.0 and b.op != "const":
        return b, a, 1
    return None


def _elementwise_before_broadcast(outputs: list) -> list:
    """f(v 1ᵀ) = f(v) 1ᵀ for an entrywise f, and (u 1ᵀ) ∘ (v 1ᵀ) = (u ∘ v) 1ᵀ (also +, ⊘ and
    scalars): the work on the vector, not on its copies (a layer norm's σ² + ε, squared)."""
    def fn(e: Expr) -> Expr:
        if e.op in ("add", "mul", "div") and e.shape != SCALAR:
            parts = [broadcast_of(a) if a.shape != SCALAR else a for a in e.args]
            vs = [p for p in parts if isinstance(p, tuple)]
            if any(p is None for p in parts) or len({(p[1], p[2]) for p in vs}) != 1:
                return e
            ones, side = vs[0][1], vs[0][2]
            args = [p[0] if isinstance(p, tuple) else p for p in parts]
            inner = Expr(e.op, tuple(args), e.attr, ir._broadcast([a.shape for a in args]))
            return ir.matmul(inner, ones) if side == 0 else ir.matmul(ones, inner)
        spec = REGISTRY.get(e.op)
        if (e.op == "pow" or spec is not None and spec.elementwise and len(e.args) == 1) and e.attr is None:
            b = broadcast_of(e.args[0])
            if b is None:
                return e
            v, ones, side = b
            inner = Expr(e.op, (v,) + e.args[1:], None, v.shape)
            return ir.matmul(inner, ones) if side == 0 else ir.matmul(ones, inner)
        return e

    return _rebuild(outputs, fn)


def ordered_when_called(outputs: list) -> list:
    """Each matrix chain (its products used once, inside it) whose cheapest order depends on
    the sizes of its symbolic dimensions as a chain node: the emitted code orders it for the
    shapes of each call (_order_depends_on_sizes).  The last pass: the others read products."""
    uses = _use_counts([_root(outputs)])
    inner = {a for n in _dag(outputs) if n.op == "matmul" for a in n.args
             if a.op == "matmul" and uses.get(a, 0) <= 1}

    def factors(e: Expr) -> list:
        return [g for a in e.args for g in (factors(a) if a in inner else [a])]

    memo: dict = {}
    for n in _dag(outputs):
        args = tuple(memo[a] for a in n.args)
        memo[n] = n if args == n.args else Expr(n.op, args, n.attr, n.shape)
        if n.op == "matmul" and n not in inner:
            fs = factors(n)
            if _order_depends_on_sizes(fs):
                memo[n] = Expr("chain", tuple(memo[f] for f in fs), None, n.shape)
    return [memo[o] for o in outputs]


# the rewrites ``optimize`` runs, in order: each takes and returns the list of outputs
PASSES = (stable_forms, order_products, _diagonal_of_products, rows_as_columns, _share_products, _sigmoid_from_softplus,
          _reuse_sums, _expm1_log1p, _split_sums, _elementwise_before_broadcast, ordered_when_called)
