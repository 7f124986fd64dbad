"""SymPy in and out, and an exact check.

* ``to_sympy(G, symbols)``: an IR expression as a SymPy matrix expression
  (MatrixSymbol, MatMul, MatAdd, HadamardProduct, Transpose, Trace, Inverse,
  Determinant; elementwise functions as ``ElementwiseApplyFunction``).
* ``from_sympy(expr, wrt, shapes)``: a SymPy expression built from MatrixSymbols as
  matcalc text with the shapes of its symbols (an n×1 MatrixSymbol is a vector, a 1×1
  one or a plain Symbol a scalar).
* ``evaluate(expr, values, shapes)``: the numbers of such an expression at concrete values.
* ``exact_check(derivation)``: the gradient verified entry by entry at small concrete
  sizes, symbolically, with evaluation at random rational points (exact for rational
  functions, to 60 digits otherwise) where SymPy cannot decide whether a difference is 0.

SymPy is imported here only, and this module only when one of these is used.
"""
from __future__ import annotations

import itertools
import math
import re

import sympy as sp
from sympy.matrices.expressions.applyfunc import ElementwiseApplyFunction

from . import ir
from .errors import DeriveError
from .ir import SCALAR
from .ops import REGISTRY

# ---------------------------------------------------------------- IR -> SymPy

_x = sp.Dummy("x", real=True)

# elementwise op -> the SymPy function of one entry (each registry entry's ``sympy`` field)
ELEMENTWISE = {name: op.sympy for name, op in REGISTRY.items() if op.elementwise and op.sympy is not None}
# the functions from_sympy recognises when written out (sigmoid as 1/(1 + exp(-x)), …)
_WRITTEN_OUT = ("sigmoid", "softplus", "logsigmoid", "silu")


def exact_number(v: float):
    """A float as the number it stands for: the simplest fraction that rounds to it (1/3 for
    0.333…), else a simple fraction of √π, √2, √(2π), π or log 2 within 4 ulps of it (2/√π
    for erf's 1.1283791670955126, 1/√(2π) for gelu's), else its shortest decimal
    (1.000000000001 stays itself)."""
    from fractions import Fraction

    f = Fraction(v).limit_denominator(10 ** 6)
    if float(f) == v:
        return sp.Rational(f.numerator, f.denominator)
    for base in (sp.sqrt(sp.pi), sp.sqrt(2), sp.sqrt(2 * sp.pi), sp.pi, sp.log(2)):
        for c in (base, 1 / base):
            q = Fraction(v / float(c)).limit_denominator(1000)
            if q and abs(float(q) * float(c) - v) <= 4 * math.ulp(v):
                return sp.Rational(q.numerator, q.denominator) * c
    return sp.Rational(repr(v))


def dim_symbol(d):
    return sp.Integer(d) if isinstance(d, int) else sp.Symbol(d, integer=True, positive=True)


def _is_matrix(v) -> bool:
    return isinstance(v, sp.MatrixBase) or getattr(v, "is_Matrix", False)


class _ToSympy:
    def __init__(self, symbols: dict, explicit: dict | None = None, sizes: dict | None = None):
        self.symbols = symbols
        self.explicit = explicit  # name -> explicit value (concrete matrices / numbers), or None
        self.sizes = sizes or {}  # dimension name -> its size, for explicit values

    def shape(self, shape):
        return tuple(self.size(d) for d in shape)

    def size(self, d):
        """A dimension as a SymPy integer or symbol (a product a*c as the product)."""
        if isinstance(d, str) and "*" in d:
            return sp.Mul(*(self.size(f) for f in ir.dim_factors(d)))
        return dim_symbol(self.sizes.get(d, d))

    def ones(self, shape):
        r, c = self.shape(shape)
        return sp.ones(int(r), int(c)) if self.explicit is not None else sp.OneMatrix(r, c)

    def as_array(self, v, shape):
        """v (a scalar or a matrix) broadcast to shape."""
        if _is_matrix(v) or shape == SCALAR:
            return v
        return v * self.ones(shape)

    def scalar(self, v):
        """The number in a 1×1 matrix expression."""
        if not _is_matrix(v):
            return v
        if self.explicit is not None:
            return v[0, 0]
        return sp.Trace(v)

    def elementwise(self, f, v, shape):
        if not _is_matrix(v):
            return f(v)
        if self.explicit is not None:
            return v.applyfunc(f)
        return ElementwiseApplyFunction(sp.Lambda(_x, f(_x)), v)

    def hadamard(self, a, b, shape):
        if not _is_matrix(a) or not _is_matrix(b):
            return a * b
        if self.explicit is not None:
            return a.multiply_elementwise(b)
        return sp.HadamardProduct(a, b)

    def axis_sum(self, v, shape, axis):
        """The sums of v (an IR shape) along an axis: a row of column sums, or a column of row sums."""
        return self.ones((1, shape[0])) * v if axis == 0 else v * self.ones((shape[1], 1))

    def total(self, v):
        if not _is_matrix(v):
            return v
        if self.explicit is not None:
            return sum(v)
        r, c = v.shape
        return sp.Trace(sp.OneMatrix(c, r) * v)

    def convert(self, root):
        memo: dict = {}
        for n in ir.walk(root):
            memo[n] = self.node(n, [memo[a] for a in n.args])
        return memo[root]

    def node(self, n, a):  # noqa: C901 - one branch per operator
        op, shape = n.op, n.shape
        explicit = self.explicit is not None
        if op == "sym":
            if explicit:
                return self.explicit[n.attr]
            if shape == SCALAR:
                return sp.Symbol(n.attr, real=True)
            return sp.MatrixSymbol(n.attr, *self.shape(shape))
        if op == "const":
            v = exact_number(float(n.attr))
            return v if shape == SCALAR else v * self.ones(shape)
        if op == "eye":
            k = self.shape(shape)[0]
            return sp.eye(int(k)) if explicit else sp.Identity(k)
        if op == "add":
            terms = [self.as_array(t, shape) for t in a]
            if explicit or shape == SCALAR:
                out = terms[0]
                for t in terms[1:]:
                    out = out + t
                return out
            return sp.MatAdd(*terms)
        if op == "mul":
            scal = [t for t in a if not _is_matrix(t)]
            arrs = [t for t in a if _is_matrix(t)]
            out = None
            for t in arrs:
                out = t if out is None else self.hadamard(out, t, shape)
            s = sp.Mul(*scal) if scal else None
            if out is None:
                return s
            return out if s is None else s * out
        if op == "div":
            num, den = a
            if not _is_matrix(den):
                return num / den if not _is_matrix(num) else (1 / den) * num
            inv = den.applyfunc(lambda t: 1 / t) if explicit else sp.HadamardPower(den, -1)
            return self.hadamard(self.as_array(num, shape), inv, shape)
        if op == "pow":
            base, k = a
            if not _is_matrix(base):
                return base ** k
            return base.applyfunc(lambda t: t ** k) if explicit else sp.HadamardPower(base, k)
        if op == "matmul":
            x, y = a
            if not _is_matrix(x) or not _is_matrix(y):
                return x * y
            out = x * y
            return self.scalar(out) if shape == SCALAR else out
        if op == "T":
            return a[0] if not _is_matrix(a[0]) else (a[0].T if explicit else sp.Transpose(a[0]))
        if op == "solve":
            A, b = a
            return (A.inv() * b) if explicit else sp.Inverse(A) * b
        if op == "frob":
            x, y = a
            if not _is_matrix(x):
                return x * y
            return self.total(self.hadamard(x, y, n.args[0].shape)) if explicit else \
                sp.Trace(sp.Transpose(x) * y)
        if op in ELEMENTWISE:
            return self.elementwise(ELEMENTWISE[op], a[0], shape)
        if op == "dim":
            return self.size(n.attr)
        v = a[0]
        if op in ("sum", "mean") and n.attr is not None and _is_matrix(v):
            r, c = self.shape(n.args[0].shape)
            out = self.axis_sum(v, n.args[0].shape, n.attr)
            return out if op == "sum" else out / (r if n.attr == 0 else c)
        if op in ("logsumexp", "softmax") and n.attr is not None and _is_matrix(v):
            X = n.args[0]
            e = self.elementwise(sp.exp, v, X.shape)
            sums = self.axis_sum(e, X.shape, n.attr)
            if op == "logsumexp":
                return self.elementwise(sp.log, sums, shape)
            # each entry over the sum of its column (axis 0) or row (axis 1)
            spread = self.ones((X.shape[0], 1)) * sums if n.attr == 0 else sums * self.ones((1, X.shape[1]))
            inv = spread.applyfunc(lambda t: 1 / t) if explicit else sp.HadamardPower(spread, -1)
            return self.hadamard(e, inv, X.shape)
        if op == "mean" and _is_matrix(v):
            r, c = self.shape(n.args[0].shape)
            return self.total(v) / (r * c)
        if op == "mean":
            return v
        if not _is_matrix(v):  # reductions and matrix functions of a scalar
            scalar_of = {"sum": v, "tr": v, "det": v, "logdet": sp.log(sp.Abs(v)), "inv": 1 / v,
                         "diag": v, "Diag": v, "norm2": sp.Abs(v), "norm1": sp.Abs(v),
                         "logsumexp": v, "softmax": sp.Integer(1)}
            if op in scalar_of:
                return scalar_of[op]
        if op == "sum":
            return self.total(v)
        if op == "tr":
            return v.trace() if explicit else sp.Trace(v)
        if op == "det":
            return v.det() if explicit else sp.Determinant(v)
        if op == "logdet":
            if explicit:  # for the exact check: d log|det X| = d log(det X) wherever det X ≠ 0,
                return sp.log(v.det())  # and log(det) differentiates without sign()s
            return sp.log(sp.Abs(sp.Determinant(v)))
        if op == "inv":
            return v.inv() if explicit else sp.Inverse(v)
        if op == "diag":
            if explicit:
                return sp.Matrix([v[i, i] for i in range(v.shape[0])])
            from sympy.matrices.expressions.diagonal import DiagonalOf
            return DiagonalOf(v)
        if op == "Diag":
            if explicit:
                return sp.diag(*list(v))
            from sympy.matrices.expressions.diagonal import DiagMatrix
            return DiagMatrix(v)
        if op == "norm2":
            return sp.sqrt(self.total(self.hadamard(v, v, n.args[0].shape)))
        if op == "norm1":
            return self.total(self.elementwise(sp.Abs, v, n.args[0].shape))
        if op == "logsumexp":
            return sp.log(self.total(self.elementwise(sp.exp, v, n.args[0].shape)))
        if op == "matrix_power":
            k = int(n.attr)
            if explicit:
                return v ** k
            return sp.MatPow(v, k) if k > 0 else sp.MatPow(sp.Inverse(v), -k)
        if op == "kron":
            from sympy.matrices.expressions.kronecker import KroneckerProduct, kronecker_product

            A, B = (self.as_array(x, arg.shape) for x, arg in zip(a, n.args))
            return kronecker_product(A, B) if explicit else KroneckerProduct(A, B)
        if op == "vec" and explicit:  # the columns stacked (column-major)
            return v.T.reshape(v.shape[0] * v.shape[1], 1) if _is_matrix(v) else v
        if op == "unvec" and explicit:
            r, c = (int(x) for x in self.shape(n.attr))
            return v.reshape(c, r).T if _is_matrix(v) else v
        if op in ("kron_blocks", "kron_sum") and explicit:  # kron's adjoints (see ops)
            C, other = (self.as_array(x, arg.shape) for x, arg in zip(a, n.args))
            m, k = (int(x) for x in self.shape(n.shape if op == "kron_blocks" else n.args[1].shape))
            p, q = (int(x) for x in self.shape(n.args[1].shape if op == "kron_blocks" else n.shape))
            if op == "kron_blocks":  # entry (i, j): C's block (i, j) : B
                return sp.Matrix(m, k, lambda i, j: sum(C[i * p + u, j * q + w] * other[u, w]
                                                        for u in range(p) for w in range(q)))
            return sp.Matrix(p, q, lambda u, w: sum(other[i, j] * C[i * p + u, j * q + w]
                                                    for i in range(m) for j in range(k)))
        if op in ("softmax", "softmax_all"):  # (softmax_all: over every entry of a matrix)
            e = self.elementwise(sp.exp, v, shape)
            return (1 / self.total(e)) * e
        raise DeriveError(f"the operation {op!r} has no SymPy form")


def to_sympy(expr, symbols: dict):
    """An IR expression as a SymPy matrix expression (a SymPy scalar if it is a scalar)."""
    return _ToSympy(symbols).convert(expr)


def to_explicit(expr, values: dict, sizes: dict):
    """An IR expression evaluated on explicit SymPy values (name -> Matrix or number), its
    dimensions of the given sizes."""
    return _ToSympy({}, values, sizes).convert(expr)


def evaluate(expr, values: dict, shapes: dict | None = None):
    """The numbers of a SymPy matrix expression (from ``to_sympy``) at concrete values:
    ``values`` maps symbol names to NumPy arrays (vectors 1-D) or numbers; the sizes of
    the dimensions follow from them, and from ``shapes`` (name -> dimension names, as
    ``Derivation.user_shapes``) for dimensions of symbols that the expression does not
    contain.  Returns an ndarray (a matrix) or a float."""
    import numpy as np
    from sympy.matrices.expressions.diagonal import DiagMatrix, DiagonalOf

    arrays = {k: np.asarray(v, dtype=float) for k, v in values.items()}
    dims, subs = {}, {}
    for name, shape in (shapes or {}).items():
        for d, size in zip(shape, np.shape(arrays[name])):
            if isinstance(d, str):
                dims[dim_symbol(d)] = sp.Integer(size)
    for m in expr.atoms(sp.MatrixSymbol):
        a = arrays[m.name]
        a = a.reshape(-1, 1) if a.ndim == 1 else a.reshape(1, 1) if a.ndim == 0 else a
        for d, size in zip(m.shape, a.shape):
            if not d.is_Integer:
                dims[d] = sp.Integer(size)
    # SymPy cannot take the shape of DiagMatrix / DiagonalOf of an explicit matrix:
    # write them with Hadamard products by the identity first
    expr = expr.replace(lambda e: isinstance(e, DiagMatrix),
                        lambda e: sp.HadamardProduct(e.args[0] * sp.OneMatrix(1, e.shape[0]), sp.Identity(e.shape[0])))
    expr = expr.replace(lambda e: isinstance(e, DiagonalOf),
                        lambda e: sp.HadamardProduct(e.args[0], sp.Identity(e.shape[0])) * sp.OneMatrix(e.shape[0], 1))
    expr = expr.xreplace(dims)
    for m in expr.atoms(sp.MatrixSymbol):
        a = arrays[m.name].reshape(int(m.shape[0]), int(m.shape[1]))
        subs[m] = sp.ImmutableMatrix(a.tolist())
    for x in expr.atoms(sp.Symbol):
        if x.name in arrays and arrays[x.name].ndim == 0:
            subs[x] = sp.Float(float(arrays[x.name]), 30)
    expr = expr.xreplace(subs)
    expr = expr.replace(lambda e: isinstance(e, (sp.OneMatrix, sp.ZeroMatrix, sp.Identity)),
                        lambda e: sp.ImmutableMatrix(e.as_explicit()))

    def explicit(e):
        return sp.ImmutableMatrix(e.doit().as_explicit())

    from sympy.matrices.expressions.hadamard import HadamardPower

    # (SymPy 1.14 leaves Hadamard products and powers of explicit matrices unevaluated)
    expr = expr.replace(lambda e: isinstance(e, HadamardPower),
                        lambda e: explicit(e.args[0]).applyfunc(lambda t: t ** e.args[1].doit()))
    expr = expr.replace(lambda e: isinstance(e, sp.HadamardProduct),
                        lambda e: sp.ImmutableMatrix(
                            __import__("functools").reduce(lambda a, b: a.multiply_elementwise(b),
                                                           [explicit(a) for a in e.args])))
    out = expr.doit()
    if getattr(out, "is_Matrix", False):
        return np.array(sp.N(sp.Matrix(out.as_explicit())).tolist(), dtype=float)
    return float(sp.N(out))


# ---------------------------------------------------------------- SymPy -> matcalc text

_FUNC_NAMES = {sp.exp: "exp", sp.log: "log", sp.sin: "sin", sp.cos: "cos", sp.tanh: "tanh",
               sp.Abs: "abs", sp.sign: "sign", sp.Heaviside: "step", sp.tan: "tan", sp.cosh: "cosh",
               sp.sinh: "sinh", sp.asin: "arcsin", sp.acos: "arccos", sp.atan: "arctan", sp.erf: "erf"}


def _atomic(t: str) -> bool:
    """t is a name, a number, a call f(...) or a parenthesised group: no parentheses needed."""
    if re.fullmatch(r"[\w.]+", t):
        return True
    m = re.match(r"[\w]*\(", t)
    if not m or not t.endswith(")"):
        return t.endswith(".T") and _atomic(t[:-2])
    depth = 0
    for i, ch in enumerate(t[m.end() - 1:], m.end() - 1):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i != len(t) - 1:
            return False
    return True


def _wrap(t: str) -> str:
    return t if _atomic(t) else f"({t})"


class _FromSympy:
    def __init__(self):
        self.shapes: dict = {}   # name -> matcalc shape
        self.sym_shape: dict = {}
        self.bound: dict = {}    # the variable of an elementwise Lambda -> its argument's text

    def dim(self, d):
        if d.is_Integer:
            return int(d)
        if isinstance(d, sp.Symbol):
            return d.name
        raise DeriveError(f"the dimension {d} of a MatrixSymbol must be a number or a symbol")

    def declare(self, name: str, shape: tuple, node):
        if self.shapes.get(name, shape) != shape:
            raise DeriveError(f"the symbol {name} occurs with two shapes, {self.shapes[name]} and {shape}")
        self.shapes[name] = shape

    def unknown(self, e):
        if isinstance(e, sp.OneMatrix):
            raise DeriveError(f"the SymPy node OneMatrix({e.shape[0]}, {e.shape[1]}) has no matcalc "
                              "equivalent outside a matrix product (matcalc's ones take their size from it)")
        from sympy.matrices.expressions.matexpr import MatrixElement

        hint = ""
        if isinstance(e, MatrixElement):  # (x.T*S*x)[0, 0] at numeric sizes: SymPy wrote it entry by entry
            hint = ("; SymPy writes [0, 0] of a product entry by entry at numeric sizes: give the sizes as "
                    "symbols (MatrixSymbol('S', n, n)) or take Trace(...) of the 1×1 product")
        raise DeriveError(f"the SymPy node {type(e).__name__} ({e}) has no matcalc equivalent{hint}")

    def chain(self, mats) -> str:
        """A matrix product as text.  A matrix of ones J = 1 1ᵀ in it is written as its two
        vectors, each sized by its neighbour: A J B as A@1@(1.T@B)."""
        for k, a in enumerate(mats):
            if isinstance(a, sp.OneMatrix) and a.shape[0] != 1 and a.shape[1] != 1:
                left = self.chain(mats[:k]) + "@1" if k else "1"
                right = "(1.T@" + self.chain(mats[k + 1:]) + ")" if k + 1 < len(mats) else "1.T"
                if not k and k + 1 == len(mats):
                    self.unknown(a)  # alone, nothing would give 1 and 1.T their sizes
                return f"{left}@{right}"
        return "@".join(_wrap(self.text(a)) for a in mats)

    def text(self, e) -> str:  # noqa: C901 - one branch per node type
        from sympy.matrices.expressions.hadamard import HadamardPower

        if isinstance(e, (sp.MatrixSymbol, sp.Symbol)) and e.name in ("I", "eye") and e not in self.bound:
            raise DeriveError(f"the symbol {e.name} would read as matcalc's identity matrix: give it another "
                              f"name (SymPy's own identity is Identity(n))")
        if isinstance(e, sp.MatrixSymbol):
            name = e.name
            r, c = (self.dim(d) for d in e.shape)
            shape = () if (r, c) == (1, 1) else (r,) if c == 1 else (r, c)
            self.declare(name, shape, e)
            return name
        if isinstance(e, sp.Symbol) and e in self.bound:
            return self.bound[e]
        if isinstance(e, sp.Symbol):
            self.declare(e.name, (), e)
            return e.name
        if not isinstance(e, sp.Basic) or isinstance(e, sp.MatrixBase):  # an explicit Matrix([[1, 2], …])
            raise DeriveError(f"the SymPy {type(e).__name__} {str(e)[:60]} has no matcalc equivalent: matcalc "
                              "reads matrix expressions of MatrixSymbols (X = MatrixSymbol('X', n, m))")
        if e.is_Integer or e.is_Float:
            v = float(e)
            return (str(int(v)) if e.is_Integer else repr(v)) if v >= 0 else f"({v!r})"
        if e.is_Rational:
            return f"{e.p}/{e.q}" if e.p > 0 else f"(-{-e.p}/{e.q})"
        if e in (sp.E,):
            return "exp(1.0)"
        if e is sp.pi:
            return "pi"
        if isinstance(e, sp.Identity):
            return "I"
        if isinstance(e, sp.OneMatrix):  # a column 1, a row 1.T; a matrix only in a product (chain)
            r, c = e.shape
            return "1" if c == 1 else "1.T" if r == 1 else self.chain([e])
        if isinstance(e, sp.ZeroMatrix):
            return "(0.0*1)"
        if isinstance(e, (sp.MatMul, sp.Mul)):
            scal = [a for a in e.args if not getattr(a, "is_Matrix", False)]
            mats = [a for a in e.args if getattr(a, "is_Matrix", False)]
            if scal and scal[0] == -1 and (len(scal) > 1 or mats):
                return "-" + _wrap(self.text(sp.Mul(*scal[1:]) if not mats else
                                             sp.MatMul(*scal[1:], *mats)))
            parts = [self.text(a) for a in scal]
            if len(parts) > 1 or (parts and mats):
                parts = [_wrap(p) for p in parts]
            out = "*".join(parts)
            if mats:
                chain = self.chain(mats)
                out = f"{out}*({chain})" if out and len(mats) > 1 else f"{out}*{chain}" if out else chain
            return out
        if isinstance(e, (sp.MatAdd, sp.Add)):
            terms = [self.text(a) for a in e.args]
            out = terms[0]
            for t in terms[1:]:
                out += f" - {t[1:]}" if t.startswith("-") and _atomic(t[1:]) else f" + {t}"
            return out
        if isinstance(e, sp.Transpose):
            return f"{_wrap(self.text(e.arg))}.T"
        if isinstance(e, sp.Inverse):
            return f"inv({self.text(e.arg)})"
        if isinstance(e, sp.MatPow):
            base, k = e.args
            if k == -1:
                return f"inv({self.text(base)})"
            if k.is_Integer and k > 0:
                return "@".join([_wrap(self.text(base))] * int(k))
            if k.is_Integer and k < 0:
                return "inv(" + "@".join([_wrap(self.text(base))] * int(-k)) + ")"
            self.unknown(e)
        from sympy.matrices.expressions.diagonal import DiagMatrix, DiagonalOf

        if isinstance(e, sp.KroneckerProduct):
            out = _wrap(self.text(e.args[-1]))
            for a in reversed(e.args[:-1]):
                out = f"kron({self.text(a)}, {out})"
            return out
        if isinstance(e, DiagMatrix):
            return f"Diag({self.text(e.args[0])})"
        if isinstance(e, DiagonalOf):
            return f"diag({self.text(e.args[0])})"
        if isinstance(e, sp.Adjoint):  # (real matrices: the transpose)
            return f"{_wrap(self.text(e.arg))}.T"
        if isinstance(e, sp.Determinant):
            return f"det({self.text(e.arg)})"
        if isinstance(e, sp.Trace):
            return f"tr({self.text(e.arg)})"
        if isinstance(e, sp.HadamardProduct):
            return "*".join(_wrap(self.text(a)) for a in e.args)
        if isinstance(e, HadamardPower):
            base, k = e.args
            return f"{_wrap(self.text(base))}**{_wrap(self.text(k))}"
        if isinstance(e, ElementwiseApplyFunction):
            fn = e.function
            var = fn.variables[0] if isinstance(fn, sp.Lambda) else None
            body = fn.expr if isinstance(fn, sp.Lambda) else fn(_x)
            var = var if var is not None else _x
            name = self._elementwise_name(body, var)
            if name is not None:
                return f"{name}({self.text(e.expr)})"
            if not isinstance(fn, sp.Lambda) or len(fn.variables) != 1:
                raise DeriveError(f"the elementwise function {fn} has no matcalc equivalent")
            # any other body, tanh(t)**2 or exp(tanh(t)), with the argument for t: matcalc's
            # operators on arrays are entrywise already
            self.bound[var] = _wrap(self.text(e.expr))
            try:
                return f"({self.text(body)})"
            finally:
                del self.bound[var]
        if isinstance(e, sp.Pow):
            base, k = e.args
            if k == sp.Rational(1, 2):
                return f"sqrt({self.text(base)})"
            return f"{_wrap(self.text(base))}**{_wrap(self.text(k))}"
        if isinstance(e, sp.log) and isinstance(e.args[0], sp.Determinant):
            return f"logdet({self.text(e.args[0].arg)})"
        if (isinstance(e, sp.log) and isinstance(e.args[0], sp.Abs)
                and isinstance(e.args[0].args[0], sp.Determinant)):
            return f"logdet({self.text(e.args[0].args[0].arg)})"
        if isinstance(e, sp.Sum):  # an index sum, as (x.T*S*x)[0, 0] makes: back to matrices
            try:
                back = sp.MatrixExpr.from_index_summation(e)
            except Exception:  # noqa: BLE001 - SymPy's own failure: no matcalc equivalent then
                back = e
            if not isinstance(back, sp.Sum):
                return self.text(back)
        if isinstance(e, (sp.Max, sp.Min)):  # entrywise, through relu: Max(0, 2t) = relu(2t)
            return self._extremum(e)
        if isinstance(e, sp.Function) and len(e.args) >= 1:
            name = self._elementwise_name(e, None)
            if name is not None:
                return f"{name}({self.text(e.args[0])})"
        from sympy.matrices.expressions.matexpr import MatrixElement

        if isinstance(e, MatrixElement) and e.parent.shape == (1, 1):
            return f"sum({self.text(e.parent)})"
        self.unknown(e)

    def _extremum(self, e) -> str:
        """Max and Min of any arguments through relu: max(a, b) = a + relu(b − a) and
        min(a, b) = a − relu(a − b), nested for more than two; max(0, u) = relu(u)."""
        args = sorted(e.args, key=lambda a: a != sp.S.Zero)
        out = None if args[0] == sp.S.Zero else self.text(args[0])
        for b in args[1:]:
            tb = _wrap(self.text(b))
            if isinstance(e, sp.Max):
                out = f"relu({tb})" if out is None else f"({out} + relu({tb} - {_wrap(out)}))"
            else:
                out = f"(-relu(-{tb}))" if out is None else f"({out} - relu({_wrap(out)} - {tb}))"
        return out

    def _elementwise_name(self, body, var):
        """The matcalc name of f in f(var) (var None: body is f(arg) of any arg)."""
        def of_var(arg):  # the function of the variable itself (any argument when var is None)
            return var is None or arg == var

        if isinstance(body, sp.Max) and len(body.args) == 2 and sp.S.Zero in body.args \
                and of_var([a for a in body.args if a != sp.S.Zero][0]):
            return "relu"
        if isinstance(body, sp.Heaviside) and of_var(body.args[0]):
            return "step"
        if isinstance(body, sp.Pow) and body.args[1] == sp.Rational(1, 2) and of_var(body.args[0]):
            return "sqrt"
        for f, name in _FUNC_NAMES.items():
            if body.func == f and (var is None or body.args[0] == var):
                return name
        if var is not None:  # sigmoid, softplus and the like, written out
            for name in _WRITTEN_OUT:
                if sp.simplify(ELEMENTWISE[name](var) - body) == 0:
                    return name
        return None


def from_sympy(expr, wrt, shapes: dict | None = None):
    """(matcalc text, wrt as names, shapes) for a SymPy expression of MatrixSymbols."""
    conv = _FromSympy()
    text = conv.text(expr)
    declared = dict(conv.shapes)
    declared.update(shapes or {})

    def name(w):
        if isinstance(w, str):
            return w
        if isinstance(w, (sp.MatrixSymbol, sp.Symbol)):
            return w.name
        raise DeriveError(f"wrt must be a name or a MatrixSymbol, got {w!r}")

    wrt = [name(w) for w in wrt] if isinstance(wrt, (list, tuple)) else name(wrt)
    return text, wrt, declared


# ---------------------------------------------------------------- the exact check

EXACT_SIZES = (2, 3, 4)


def _report_class():
    from .check import CheckReport

    class ExactReport(CheckReport):
        """The report of ``check(exact=True)``: entries verified, and how."""

        __qualname__ = "ExactReport"  # (its repr's name, not _report_class.<locals>.ExactReport)

        def __str__(self):
            sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items()) or "none"
            if self.ok:
                return (f"exact check ok: {self.entries_checked} entries equal the derivative of λ "
                        f"(SymPy, sizes {sizes}; decided: {self.message})")
            if self.entries_checked == 0:
                return f"exact check cannot be made (SymPy, sizes {sizes}): {self.message}"
            return f"exact check FAILED (SymPy, sizes {sizes}): {self.message}"

        def to_dict(self):
            return {**super().to_dict(), "exact": True, "details": self.details}

    return ExactReport


def _rational_draw(shape, domain, rng):
    """A random value with rational entries, from a symbol's domain."""
    def q(lo, hi):
        return sp.Rational(int(rng.integers(lo * 8, hi * 8 + 1)), 8) or sp.Rational(1, 8)

    if not shape:
        return q(1, 2) if domain != "normal" else q(-2, 2)
    r, c = shape if len(shape) == 2 else (shape[0], 1)
    if domain in ("spd", "invertible") and r == c:
        R = sp.Matrix(r, r, lambda i, j: q(-1, 1))
        return R * R.T + sp.eye(r)
    if domain == "positive":
        return sp.Matrix(r, c, lambda i, j: q(1, 2))
    return sp.Matrix(r, c, lambda i, j: q(-2, 2))


def _almost_everywhere(e, x):
    """A derivative as it holds off a set of measure zero, as matcalc states it: the
    derivative of sign and step is 0, of |u| sign(u) u', of max(u, 0) step(u) u' (SymPy
    leaves these unevaluated where it cannot tell that u is real)."""
    e = e.replace(lambda t: isinstance(t, sp.DiracDelta), lambda t: sp.S.Zero)
    known = {sp.sign: lambda u: sp.S.Zero, sp.Heaviside: lambda u: sp.S.Zero,
             sp.Abs: lambda u: sp.sign(u) * sp.diff(u, x),
             sp.Max: lambda u: sp.Heaviside(u, 0) * sp.diff(u, x)}

    def rule(t):
        f = t.expr
        if len(t.variables) == 1 and type(f) in known and (type(f) is not sp.Max or sp.S.Zero in f.args):
            arg = f.args[0] if type(f) is not sp.Max else next(a for a in f.args if a != 0)
            return known[type(f)](arg)
        return t

    return e.replace(lambda t: isinstance(t, sp.Derivative), rule)


def _zero(want, got, points) -> tuple:
    """(want == got?, how decided) for two expressions of the entry symbols."""
    diff = want - got
    if diff == 0:
        return True, "symbolic"
    # the points first: a nonzero value there decides at once, where expanding a large
    # rational function (the entries of inv(X + A)) could take minutes
    for subs in points:
        v = diff.xreplace(subs)
        if v.is_Rational:  # a rational function at a rational point: decided exactly
            if v != 0:
                return False, "exact rational point"
            continue
        # transcendental values at a rational point: 60 significant digits, relative to the
        # size of the two sides
        value = sp.N(v, 60)
        scale = max(1.0, abs(complex(sp.N(want.xreplace(subs), 30))))
        if not value.is_number or abs(complex(value)) > 1e-40 * scale:
            return False, "rational point"
    ops = sp.count_ops(diff)  # zero at every point: proven symbolically where that is cheap
    try:
        if ops < 400 and (sp.expand(diff) == 0 or sp.cancel(sp.together(diff)) == 0):
            return True, "symbolic"
        if ops < 80 and sp.simplify(diff) == 0:
            return True, "symbolic"
    except Exception:  # noqa: BLE001 - SymPy could not decide: the points did
        pass
    return True, "rational points"



def _concrete(shape, chosen):
    """A symbolic shape at the chosen sizes (a product dimension a*b: its factors' product)."""
    return tuple(math.prod(chosen.get(f, f) for f in ir.dim_factors(x)) if isinstance(x, str) and "*" in x
                 else chosen.get(x, x) for x in shape)


def _explicit(d, chosen, symmetric):
    """(SymPy matrices of symbols for each input, their symbols, λ, the gradient) at the
    chosen sizes; NonInvertibleMatrixError where a matrix inverted is singular for every value."""
    values, entries = {}, {}
    for name, shape in d.user_shapes.items():
        conc = _concrete(shape, chosen)
        safe = "".join(ch if ch.isalnum() else "_" for ch in name)
        if not conc:
            v = sp.Symbol(safe, real=True)
            entries[name] = [v]
        elif name in symmetric:  # one symbol per pair (i, j) and (j, i)
            r = conc[0]
            v = sp.Matrix(r, r, lambda i, j: sp.Symbol(f"{safe}_{min(i, j)}{max(i, j)}", real=True))
            entries[name] = [v[i, j] for i in range(r) for j in range(i, r)]
        else:
            r, c = conc if len(conc) == 2 else (conc[0], 1)
            v = sp.Matrix(r, c, lambda i, j: sp.Symbol(f"{safe}_{i}{j}" if c > 1 else f"{safe}_{i}",
                                                      real=True))
            entries[name] = list(v)
        values[name] = v
    return values, entries, to_explicit(d.lam, values, chosen), to_explicit(d.gradient, values, chosen)

def exact_check(d, seed: int = 0, sizes: dict | None = None, domain: dict | None = None):
    """Verify d.gradient entry by entry against the derivative of λ, both written out
    with SymPy at small concrete sizes (distinct per dimension where there are at most
    three dimensions)."""
    import numpy as np

    from .check import infer_domains

    ExactReport = _report_class()
    dims = []
    for shape in d.user_shapes.values():  # (a product a*b: its factors)
        for x in shape:
            dims += [f for f in ir.dim_factors(x) if isinstance(f, str) and f not in dims]
    chosen = dict(sizes or {})
    free = [s for s in EXACT_SIZES if s not in chosen.values()] or list(EXACT_SIZES)
    mine = [x for x in dims if x not in chosen]
    for i, x in enumerate(mine):
        chosen[x] = free[i % len(free)]
    domains = infer_domains(d.lam, d.symbols)
    domains.update(domain or {})
    symmetric = set(getattr(d, "symmetric", ()) or ())  # symmetric=: S drawn symmetric, sym(G) checked
    # XᵀX of a wide X is singular for every X: then the sizes change hands (X tall)
    tries = [chosen] + [dict(chosen, **dict(zip(mine, order)))
                        for order in itertools.islice(itertools.permutations([chosen[x] for x in mine]), 1, 6)]
    if len(mine) == 1:  # one free size has no other order: the others of EXACT_SIZES (X d×3 is tall at d = 4)
        sizes = sorted(EXACT_SIZES + (max(EXACT_SIZES) + 1,), key=lambda v: v in chosen.values())  # (distinct first)
        tries += [dict(chosen, **{mine[0]: v}) for v in sizes if v != chosen[mine[0]]]
    for chosen in tries:
        try:
            values, entries, lam, G = _explicit(d, chosen, symmetric)
            break
        except sp.matrices.exceptions.NonInvertibleMatrixError:  # det(x@x.T): singular for every x
            continue
    else:
        return ExactReport(False, float("inf"), 0.0, tries[0], domains, 0, 0,
                           "a matrix that λ or its gradient inverts is singular for every value "
                           "(SymPy: det = 0) at these sizes" + (" and with the sizes exchanged" if len(tries) > 1 else ""))

    W = values[d.wrt]
    Gm = G if _is_matrix(G) else sp.Matrix([[G]])
    Wm = W if _is_matrix(W) else sp.Matrix([[W]])
    if not _is_matrix(G) and _is_matrix(W):  # a broadcast scalar gradient
        Gm = G * sp.ones(*W.shape)
    if not _is_matrix(Gm) or any(e.has(sp.nan, sp.zoo) for e in (lam, *Gm)):  # (0**-2: nan times ones is nan)
        return ExactReport(False, float("inf"), 0.0, chosen, domains, 0, 0,
                           "λ or its gradient is not finite for any value (SymPy gives nan or ∞ for "
                           "an entry: a zero to a negative power?)")
    rng = np.random.default_rng(seed)
    points = []
    for _ in range(2):
        subs = {}
        for name, shape in d.user_shapes.items():
            val = _rational_draw(_concrete(shape, chosen), domains.get(name, "normal"), rng)
            if name in symmetric:  # (S + Sᵀ)/2, its upper triangle in the order of the symbols
                val = (val + val.T) / 2
                val = [val[i, j] for i in range(val.shape[0]) for j in range(i, val.shape[0])]
            for s, q in zip(entries[name], list(val) if _is_matrix(val) or isinstance(val, list) else [val]):
                subs[s] = q
        points.append(subs)
    how: dict = {}
    checked = 0
    for i in range(Wm.shape[0]):
        for j in range(Wm.shape[1]):
            want = _almost_everywhere(sp.diff(lam, Wm[i, j]), Wm[i, j])
            if d.wrt in symmetric and i != j:  # the symbol stands at (i, j) and (j, i): sym(G) is half
                want = want / 2
            got = Gm[i, j]
            try:
                ok, method = _zero(want, got, points)
            except (ValueError, TypeError) as e:  # SymPy could not evaluate: say so, pass nothing
                ok, method = False, f"undecided: SymPy could not evaluate the entry ({e})"
            checked += 1
            how[method] = how.get(method, 0) + 1
            if not ok:
                entry = f"{d.wrt}[{i}, {j}]" if Wm.shape[1] > 1 else f"{d.wrt}[{i}]"
                msg = (f"entry {entry} differs ({method}): ∂λ/∂{entry} = {want}, "
                       f"but the gradient gives {got}")
                return ExactReport(False, float("inf"), 0.0, chosen, domains, checked, 0, msg,
                                   [{"entry": entry, "expected": str(want), "gradient": str(got)}])
    note = ", ".join(f"{v} {k}" for k, v in sorted(how.items()))
    return ExactReport(True, 0.0, 0.0, chosen, domains, checked, 0, note)
