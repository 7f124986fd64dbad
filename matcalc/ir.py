"""The intermediate representation: small immutable expression nodes.

Every node has an operator name ``op``, a tuple of argument nodes ``args``, an
optional hashable ``attr`` (a symbol's name, a constant's value) and a ``shape``
``(rows, cols)`` whose entries are ints or dimension names; a scalar is ``(1, 1)``
and a column vector ``(n, 1)``.  Nodes are hash-consed: building the same
expression twice gives the same object, so equality is identity and common
subexpressions are shared for free (the IR is a DAG).

The constructors below only build and check shapes; they never rewrite.
Rewriting is ``simplify``'s job.
"""
from __future__ import annotations

import weakref

SCALAR = (1, 1)

# elementwise functions that only the optimiser writes (for speed and accuracy) are
# registry entries like the rest (expm1, log1p); see ops.REGISTRY


class Expr:
    __slots__ = ("op", "args", "attr", "shape", "__weakref__")

    _table: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()

    def __new__(cls, op: str, args: tuple = (), attr=None, shape=SCALAR):
        key = (op, attr, shape, tuple(id(a) for a in args))
        node = cls._table.get(key)
        if node is not None:
            return node
        node = object.__new__(cls)
        object.__setattr__(node, "op", op)
        object.__setattr__(node, "args", tuple(args))
        object.__setattr__(node, "attr", attr)
        object.__setattr__(node, "shape", shape)
        cls._table[key] = node
        return node

    def __setattr__(self, name, value):
        raise AttributeError("Expr nodes are immutable")

    def __reduce__(self):
        return (Expr, (self.op, self.args, self.attr, self.shape))

    # equality is identity thanks to hash-consing
    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    @property
    def is_scalar(self) -> bool:
        return self.shape == SCALAR

    @property
    def is_const(self) -> bool:
        return self.op == "const"

    def __repr__(self):
        from .printing import to_text

        return f"<{to_text(self)} : {fmt_shape(self.shape)}>"


# ---------------------------------------------------------------- shapes

def fmt_shape(shape) -> str:
    r, c = shape
    if shape == SCALAR:
        return "scalar"
    if c == 1:
        return f"length-{r} vector"
    if r == 1:
        return f"1×{c} row vector"
    return f"{r}×{c}"


def describe(shape) -> str:
    """For 'x is …': a scalar, a length-n vector, a 1×n row vector, of shape m×n."""
    text = fmt_shape(shape)
    return "of shape " + text if "×" in text and "row" not in text else "a " + text


class ShapeMismatch(Exception):
    """Internal: a constructor was given ill-shaped arguments (a bug, not user input)."""


def _broadcast(shapes):
    out = SCALAR
    for s in shapes:
        if s == SCALAR:
            continue
        if out == SCALAR:
            out = s
        elif s != out:
            raise ShapeMismatch(f"cannot broadcast {shapes}")
    return out


# ---------------------------------------------------------------- constructors

def sym(name: str, shape) -> Expr:
    return Expr("sym", (), name, tuple(shape))


def delta(name: str, shape) -> Expr:
    """The differential dX of a symbol X."""
    return Expr("delta", (), name, tuple(shape))


def const(value: float, shape=SCALAR) -> Expr:
    value = float(value)
    if value == 0:
        value = 0.0  # no -0.0
    return Expr("const", (), value, tuple(shape))


def eye(n) -> Expr:
    if n == 1:  # the 1×1 identity is the number 1
        return const(1.0)
    return Expr("eye", (), None, (n, n))


def add(*terms: Expr) -> Expr:
    if len(terms) == 1:
        return terms[0]
    return Expr("add", terms, None, _broadcast([t.shape for t in terms]))


def mul(*factors: Expr) -> Expr:
    """Hadamard product (a scalar factor scales)."""
    if len(factors) == 1:
        return factors[0]
    return Expr("mul", factors, None, _broadcast([f.shape for f in factors]))


def neg(a: Expr) -> Expr:
    return mul(const(-1.0), a)


def sub(a: Expr, b: Expr) -> Expr:
    return add(a, neg(b))


def div(a: Expr, b: Expr) -> Expr:
    return Expr("div", (a, b), None, _broadcast([a.shape, b.shape]))


def power(a: Expr, k: Expr) -> Expr:
    if not k.is_scalar:
        raise ShapeMismatch("exponent must be a scalar")
    return Expr("pow", (a, k), None, a.shape)


def matmul(a: Expr, b: Expr) -> Expr:
    if a.shape[1] != b.shape[0]:
        raise ShapeMismatch(f"matmul {a.shape} @ {b.shape}")
    return Expr("matmul", (a, b), None, (a.shape[0], b.shape[1]))


def T(a: Expr) -> Expr:
    return Expr("T", (a,), None, (a.shape[1], a.shape[0]))


def frob(a: Expr, b: Expr) -> Expr:
    if a.shape != b.shape:
        raise ShapeMismatch(f"frobenius {a.shape} : {b.shape}")
    return Expr("frob", (a, b), None, SCALAR)


def differential_of(e: Expr) -> Expr:
    """d(e), as the first line of a derivation writes it (never differentiated itself)."""
    return Expr("d", (e,), None, SCALAR)


def dim_factors(d) -> list:
    """The factors of a dimension: 3 -> [3], 'n' -> ['n'], '2*a*b' -> [2, 'a', 'b']."""
    if isinstance(d, int):
        return [d]
    return [int(f) if f.isdigit() else f for f in str(d).split("*")]


def dim_mul(a, b):
    """The product of two dimensions, in a canonical form: ints multiplied, names sorted
    ('a*b'), so equal products are equal values."""
    if a == 1:
        return b
    if b == 1:
        return a
    k, names = 1, []
    for f in dim_factors(a) + dim_factors(b):
        if isinstance(f, int):
            k *= f
        else:
            names.append(f)
    if not names:
        return k
    return "*".join(([str(k)] if k != 1 else []) + sorted(names))


def dim_div(a, b):
    """a / b for dimensions where b divides a (6/2 = 3, 'm*n'/'n' = 'm', '2*n'/2 = 'n', n/n = 1);
    None where it does not."""
    k, names = 1, []
    for f in dim_factors(a):
        if isinstance(f, int):
            k *= f
        else:
            names.append(f)
    for f in dim_factors(b):
        if isinstance(f, int):
            if k % f:
                return None
            k //= f
        elif f in names:
            names.remove(f)
        else:
            return None
    return dim_mul(k, "*".join(sorted(names))) if names else k


def size_expr(d, read: dict, div=lambda a, b: f"({a} // {b})", mul=lambda parts: "(" + " * ".join(parts) + ")",
              lit=str):
    """How to compute the size d from the sizes that can be read (``read``: dimension -> its
    reading, W.shape[0], size(W, 0) or a number), combined with ``div``, ``mul`` and ``lit``
    (of an integer factor): d itself, a product of its factors, or a product that holds d
    divided by the rest (n of C's n*p rows: C's rows // p); None where no such reading exists.
    As code by default; size_expr(d, sizes, operator.floordiv, math.prod, int) is the number."""
    if isinstance(d, int):
        return lit(d)
    if d in read:
        return read[d]
    if "*" in d:
        parts = [size_expr(f, read, div, mul, lit) for f in dim_factors(d)]
        if not any(p is None for p in parts):
            return mul(parts)
    for s in read:
        if isinstance(s, str) and "*" in s and (rest := dim_div(s, d)) not in (None, 1) and (
                rest in read or all(isinstance(f, int) or f in read for f in dim_factors(rest))):
            return div(read[s], size_expr(rest, read, div, mul, lit))
    return None


def dim(d) -> Expr:
    """The size of dimension d as a scalar value (a leaf; emitted from the arrays' .shape)."""
    if isinstance(d, int):
        return const(float(d))
    if "*" in str(d):
        return mul(*(dim(f) for f in dim_factors(d)))
    return Expr("dim", (), d, SCALAR)


class _Unifier:
    """The shape rules' interface (see ops) for IR construction: dimensions are final, so
    unifying is comparing."""

    def __init__(self, name, shapes):
        self.name, self.shapes = name, shapes

    def same(self, a, b):
        return a == b

    def one(self, d):
        return d == 1

    def mul(self, a, b):
        return dim_mul(a, b)

    def div(self, a, b):
        return dim_div(a, b)

    def fail(self, message):
        raise ShapeMismatch(message)

    fail_param = fail

    def what(self, i):
        return f"argument {i + 1} is {describe(self.shapes[i])}"


def func(name: str, *args: Expr, attr=None) -> Expr:
    """An operator of the registry applied to its arguments (``attr``: its integer
    parameter, an axis or a power); the shape comes from the operator's shape rule."""
    from .ops import REGISTRY

    op = REGISTRY.get(name)
    if op is None or op.shape is None:
        raise ShapeMismatch(f"unknown function {name}")
    if len(args) != op.nargs:
        raise ShapeMismatch(f"{name} takes {op.nargs} argument(s), got {len(args)}")
    shape = op.shape(_Unifier(name, [a.shape for a in args]), [a.shape for a in args], attr)
    return Expr(name, tuple(args), attr, tuple(shape))


def walk(root: Expr):
    """All distinct nodes of the DAG, children before parents (iterative post-order)."""
    seen = set()
    order = []
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        for a in reversed(node.args):
            if a not in seen:
                stack.append((a, False))
    return order


def tree_size(root: Expr) -> int:
    """How many nodes the expression has when written out as a tree (shared parts repeated)."""
    size: dict = {}
    for n in walk(root):
        size[n] = 1 + sum(size[a] for a in n.args)
    return size[root]


def symbols(root: Expr):
    """The symbols of an expression, in order of first appearance (left to right)."""
    return [n for n in walk(root) if n.op == "sym"]


# ---------------------------------------------------------------- DAG helpers shared by the stages

def outputs_root(outputs) -> Expr:
    """One node over several outputs, so that one walk sees their shared nodes once."""
    return Expr("outputs", tuple(outputs), None, SCALAR)


def dag(outputs) -> list:
    """Every node of the outputs, each once, arguments first."""
    return walk(outputs_root(outputs))


def rebuild(outputs, fn) -> list:
    """The DAG with ``fn`` applied to every node, bottom-up, once per distinct node."""
    memo: dict = {}
    for root in outputs:
        for node in walk(root):
            if node not in memo:
                args = tuple(memo[a] for a in node.args)
                memo[node] = fn(node if args == node.args else Expr(node.op, args, node.attr, node.shape))
    return [memo[o] for o in outputs]


def chain_factors(e: Expr) -> list:
    """The factors of a matrix product A(BC)D, left to right."""
    out, stack = [], [e]
    while stack:
        f = stack.pop()
        if f.op == "matmul":
            stack.extend(reversed(f.args))
        else:
            out.append(f)
    return out


def chain_product(fs: list) -> Expr:
    """The product of factors, left to right, as they are (chain_factors' inverse; simplify's
    _chain reassociates A(BC) as (AB)C as it multiplies)."""
    out = fs[0]
    for f in fs[1:]:
        out = matmul(out, f)
    return out


def use_counts(outputs) -> dict:
    """node -> how many argument slots refer to it, over the given roots."""
    uses: dict = {}
    for root in outputs:
        for n in walk(root):
            for a in n.args:
                uses[a] = uses.get(a, 0) + 1
    return uses


def split_coeff(e: Expr):
    """term = c * core with c a number; core None for a pure constant."""
    if e.op == "const":
        return e.attr, None
    if e.op == "mul" and e.args[0].op == "const" and e.args[0].shape == SCALAR:
        rest = e.args[1:]
        core = rest[0] if len(rest) == 1 else Expr("mul", rest, None, e.shape)
        if core.shape != e.shape:  # keep the broadcast shape
            return 1.0, e
        return e.args[0].attr, core
    return 1.0, e


def negative_term(e: Expr, keep=(), memo: dict | None = None):
    """(True, its positive part) if the term reads with a leading minus, else (False, e).
    Nodes in ``keep`` (those printed by a name) are taken whole: their signs stay inside.
    ``memo`` (for one ``keep``) keeps the answers: a printer asks of nested products again."""
    if memo is not None:
        hit = memo.get(e)
        if hit is None:
            hit = memo[e] = _negative_term(e, keep, memo)
        return hit
    return _negative_term(e, keep, memo)


def _negative_term(e: Expr, keep, memo):
    if e in keep:
        return False, e
    if e.op == "const" and e.attr < 0:
        return True, const(-e.attr, e.shape)
    if e.op == "mul" and e.args[0].op == "const" and e.args[0].shape == SCALAR and e.args[0].attr < 0:
        c = -e.args[0].attr
        rest = e.args[1:] if c == 1.0 else (const(c),) + e.args[1:]
        negative, pos = True, (rest[0] if len(rest) == 1 else Expr("mul", rest, None, e.shape))
        if pos.op != "mul":
            return negative, pos
        e = pos
    else:
        negative = False
    if e.op == "mul" and any(f.op in ("mul", "frob") for f in e.args):  # (-a)∘(-b) = a∘b: the signs
        fs = []                                                           # of the factors, outside
        for f in e.args:
            n, p = negative_term(f, keep, memo) if f.op in ("mul", "frob") else (False, f)
            negative ^= n
            fs.append(p)
        return negative, Expr("mul", tuple(fs), None, e.shape)
    if negative:
        return True, e
    if e.op == "frob":
        negative, pos = negative_term(e.args[0], keep, memo)
        if negative:
            return True, Expr("frob", (pos, e.args[1]), None, e.shape)
    return False, e
