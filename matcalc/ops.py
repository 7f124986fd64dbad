"""The operator registry: everything matcalc knows about one operator, in one entry.

An entry (:class:`Op`) holds an operator's arity and integer parameters (an axis, a
power), its shape rule, its differential and the identity the step log cites, its
adjoint where it is linear, constant folding, text and LaTeX printing, NumPy emission,
the input domain its argument needs for a numerical check, the letter its value gets
in a derivation, and its cost.  The stages (``shapes``, ``differential``, ``adjoint``,
``simplify``, ``optimize``, ``printing``, ``codegen``, ``check``, ``naming``) read these
entries; adding a function means adding one entry here (and its oracle to the tests'
random-expression generator).

Shape rules are written once against a small unifier interface ``u`` so the same rule
types user input (with dimension variables, and a caret on failure) and checks IR
construction: ``u.same(a, b)`` unifies two dimensions, ``u.one(d)`` tests for a
literal 1, ``u.mul(a, b)`` is a product dimension, ``u.fail(message)`` refuses and
``u.what(i)`` describes argument i for a message.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional

SCALAR = (1, 1)


@dataclass(frozen=True)
class Op:
    name: str
    shape: Callable                       # (u, arg shapes, attr) -> shape
    nargs: int = 1                        # array arguments
    params: tuple = ()                    # trailing integer parameters, by name
    params_optional: bool = False         # sum(X) and sum(X, 0)
    jvp: Optional[Callable] = None        # (node, [dargs or None]) -> dnode or None
    rule: str = ""                        # how the step log cites the differential
    derivative: Optional[Callable] = None  # elementwise: (x, f(x)) -> f'(x), None for 0 a.e.
    transpose: Optional[Callable] = None  # linear ops: (node, cot, lin) -> ([(i, contribution)], identity key)
    fold: Optional[Callable] = None       # float -> float (a constant argument)
    scalar_form: Optional[Callable] = None  # (1×1 argument, attr) -> the op on it, as other ops
    text: Optional[Callable] = None       # (printer, node) -> text; default name(args)
    latex: object = None                  # "\\cosh" (name), or (printer, node) -> (tex, precedence)
    numpy: object = None                  # template "np.cosh({0})", or (emitter, node, codes) -> code
    torch: object = None                  # the same for PyTorch (torch.* only: no host copies)
    jax: object = None                    # the same for JAX (jax.* / jnp.* only)
    sympy: object = None                  # elementwise: the SymPy function of one entry
    vec: Optional[Callable] = None        # linear ops: (node, vec forms of args, lin) -> the vec form (vecform)
    in_place: bool = False                # np.<ufunc>(t, out=t) on a fresh matrix
    ufunc: str = ""                       # the NumPy ufunc for in-place evaluation
    helpers: tuple = ()                   # emitted helper functions the template uses
    domain: Optional[str] = None          # what the argument needs: 'positive', 'unit_interval', 'small', 'invertible'
    letter: Optional[str] = None          # the short name of its value in derivations
    cost: Optional[Callable] = None       # (node, size) -> flops
    elementwise: bool = False
    transposes: bool = False              # f(Xᵀ) = f(X)ᵀ though not entry by entry (softmax over all entries)
    user: bool = True                     # callable by name in the language
    shape_attr: bool = False              # attr is the result's shape (unvec, kron_sum): the shape
                                          # rule works it out from a call as written
    smooth: bool = True                   # False: piecewise constant or kinked (fd-checks avoid kinks)
    aliases: tuple = ()
    fold_const: Optional[Callable] = None  # (c, shape, attr) -> the op on c·1, an array of
                                          # that shape holding c, as IR (sum(c1) = c·size)
    view: bool = False                    # its emitted value may be a view of its argument (a
                                          # transpose, reshape or diagonal): never returned as is

    @property
    def arity(self) -> int:
        return self.nargs + len(self.params)


REGISTRY: dict = {}


def register(op: Op) -> Op:
    REGISTRY[op.name] = op
    return op


def get(name: str) -> Optional[Op]:
    return REGISTRY.get(name)


def user_functions() -> dict:
    """Name (and alias) -> Op for every function a user may call."""
    out = {}
    for op in REGISTRY.values():
        if op.user:
            out[op.name] = op
            for a in op.aliases:
                out[a] = op
    return out


# ------------------------------------------------------------------ shape rules

def same_shape(u, s, attr):
    return s[0]


def to_scalar(u, s, attr):
    return SCALAR


def square(u, s, what: str):
    r, c = s[0]
    if not u.same(r, c):
        u.fail(f"{what} needs a square matrix, but {u.what(0)}")


def square_to(result):
    def rule(u, s, attr, _r=result):
        square(u, s, u.name)
        return _r(s[0])
    return rule


def norm_axis(u, axis: int, meaning: str = "0 (down the columns), 1 (along the rows)") -> int:
    """0 or 1 for NumPy's axis 0, 1, -2 or -1 of a matrix; other axes are refused."""
    if axis not in (0, 1, -1, -2):
        u.fail_param(f"{u.name} takes axis {meaning} or -1/-2, not {axis}")
    return axis % 2


def axis_rule(keeps_shape: bool, vector_only_without_axis: bool = False, scalar_without_axis: bool = True):
    """sum/mean/logsumexp(X, axis): axis 0 reduces down the columns to a row, axis 1
    along the rows to a column; softmax(X, axis) keeps the shape."""
    def rule(u, s, attr):
        (r, c), = s
        if attr is None:
            if vector_only_without_axis and not (u.one(c) or u.one(r)):
                u.fail(f"{u.name} needs a vector, but {u.what(0)} (give an axis for a matrix: "
                       f"{u.name}(X, 0) or {u.name}(X, 1))")
            return s[0] if keeps_shape else SCALAR
        axis = norm_axis(u, attr)
        if u.one(r) and u.one(c):
            u.fail(f"{u.name} along an axis needs an array, but {u.what(0)}")
        reduced = r if axis == 0 else c
        if u.one(reduced):
            if not keeps_shape:  # sum(c, 1) of a column c: each entry alone, c itself (as NumPy's)
                return s[0]
            kind = "row" if axis == 0 else "column"
            u.fail(f"{u.name}(·, {attr}) over an axis of length 1 takes each entry alone: {u.what(0)}, a "
                   f"{kind} vector, so every entry would be 1 and its derivative 0 (over the vector's entries: "
                   f"{u.name}(·, {1 - axis}); a size that is 1 at some calls only is declared by a name)")
        if keeps_shape:
            return s[0]
        return (1, c) if axis == 0 else (r, 1)
    return rule


def _diag_rule(u, s, attr):
    r, c = s[0]
    if not u.same(r, c):
        u.fail(f"diag needs a square matrix, but {u.what(0)} (Diag(v) makes a diagonal matrix from a vector)")
    return (s[0][0], 1)


def _Diag_rule(u, s, attr):
    r, c = s[0]
    if not u.one(c):
        u.fail(f"Diag needs a column vector, but {u.what(0)} (diag(X) takes a matrix's diagonal)")
    return (r, r)


def _kron_rule(u, s, attr):
    (ra, ca), (rb, cb) = s
    return (u.mul(ra, rb), u.mul(ca, cb))


def _vec_rule(u, s, attr):
    r, c = s[0]
    return (u.mul(r, c), 1)


def _unvec_rule(u, s, attr):
    """unvec(v, rows): the matrix whose columns, stacked, are v.  Built inside matcalc, attr
    is that shape; as written, attr is [the number of rows] (a dimension)."""
    if isinstance(attr, tuple):
        return attr
    (n, c), rows = s[0], attr[0]
    cols = u.div(n, rows) if u.one(c) else None
    if cols is None:
        u.fail(f"unvec(v, rows) needs a vector v whose length is a multiple of rows, but {u.what(0)} "
               f"and rows is {rows}")
    return (rows, cols)


MAX_MATRIX_POWER = 64  # the differential of Xᵏ is a sum of |k| products, its Hessian of k² (2 s at 64)


def _matrix_power_rule(u, s, attr):
    square(u, s, "matrix_power")
    if attr is not None and abs(attr) > MAX_MATRIX_POWER:
        u.fail_param(f"matrix_power's power must be between -{MAX_MATRIX_POWER} and {MAX_MATRIX_POWER}, got {attr}: "
               f"the differential of Xᵏ is a sum of |k| products")
    return s[0]


def _ones_rule(u, s, attr):
    """ones(rows) a column of ones, ones(rows, cols) a matrix (sizes as unvec's rows): the
    all-ones array where nothing beside it gives 1 its shape (kron(ones(2, 3), B))."""
    if isinstance(attr, tuple):
        return attr
    if not attr:
        u.fail("ones takes its rows, and its columns for a matrix: ones(size(X, 0), size(X, 1))")
    return (attr[0], attr[1] if len(attr) > 1 else 1)


def _blocks_rule(u, s, attr):
    """kron_sum(C, A) and kron_blocks(C, B): C in blocks of the second argument's shape, one
    block per entry of the result (attr: that shape, where matcalc builds them)."""
    if isinstance(attr, tuple):
        return attr
    (r, c), (p, q) = s
    shape = (u.div(r, p), u.div(c, q))
    if None in shape:
        u.fail(f"{u.name} needs its first argument made of blocks of the second's shape, but {u.what(0)} and "
               f"{u.what(1)}")
    return shape


# ------------------------------------------------------------------ helpers for rules

def _ir():
    from . import ir
    return ir


def _vf():
    from . import vecform  # the Kronecker/vec algebra the vec rules build with
    return vecform


def _vec_form_rule(name):
    """The vec-form rule ``vecform._r_<name>``: vec(op(L)) = J vec(L), built lazily."""
    return lambda e, forms, lin: getattr(_vf(), "_r_" + name)(e, forms, lin)


def _sp():
    import sympy  # only where a SymPy form is asked for
    return sympy


def _ones(shape):
    return _ir().const(1.0, shape)


def _sum_opt(terms):
    terms = [t for t in terms if t is not None]
    return None if not terms else _ir().add(*terms)


def broadcast_axis(c, shape, axis):
    """The row (axis 0) or column (axis 1) c spread over an array of ``shape``:
    1 c (a column of ones times the row) or c 1ᵀ."""
    ir = _ir()
    r, cols = shape
    if axis == 0:
        return ir.matmul(_ones((r, 1)), c)
    return ir.matmul(c, _ones((1, cols)))


def count(shape):
    """The number of entries of an array of ``shape`` as a value."""
    ir = _ir()
    parts = [ir.dim(d) for d in shape if d != 1]
    return ir.const(1.0) if not parts else (parts[0] if len(parts) == 1 else ir.mul(*parts))


def axis_count(shape, axis):
    return count((shape[0], 1) if axis == 0 else (1, shape[1]))


def _reduced(shape, axis):
    """(the shape a reduction of an array of ``shape`` along ``axis`` (None: all) gives, the
    number of entries it reduces into each)"""
    if axis is None:
        return SCALAR, count(shape)
    return ((1, shape[1]) if axis == 0 else (shape[0], 1)), axis_count(shape, axis)


def _filled(value, shape):
    """value (IR, a scalar) in every entry of an array of shape."""
    ir = _ir()
    return value if shape == SCALAR else ir.mul(value, ir.const(1.0, shape))


def _fold_sum(c, shape, axis):
    out, n = _reduced(shape, axis)
    return _filled(_ir().mul(_c(c), n), out)


def _fold_logsumexp(c, shape, axis):  # log(n eᶜ) = c + log n
    out, n = _reduced(shape, axis)
    return _filled(_ir().add(_c(c), _ir().func("log", n)), out)


def _fold_softmax(c, shape, axis):  # eᶜ/(n eᶜ) = 1/n
    n = count(shape) if axis is None else axis_count(shape, axis)
    return _ir().div(_ir().const(1.0, shape), n)


def elementwise(name, derivative, rule, fold, numpy, *, latex=None, domain=None, letter=None,
                in_place=False, helpers=(), smooth=True, aliases=(), ufunc="", torch=None, jax=None,
                sympy=None):
    return register(Op(name, same_shape, jvp=_jvp_elementwise, derivative=derivative, rule=rule, fold=fold,
                       numpy=numpy, torch=torch, jax=jax, sympy=sympy,
                       latex=latex, domain=domain, letter=letter, in_place=in_place, helpers=helpers,
                       elementwise=True, smooth=smooth, aliases=aliases,
                       ufunc=ufunc or (name if in_place else "")))


def _jvp_elementwise(e, d):
    fprime = REGISTRY[e.op].derivative(e.args[0], e)
    return None if fprime is None or d[0] is None else _ir().mul(fprime, d[0])


# ------------------------------------------------------------------ elementwise functions

def _f(name):
    return lambda *a: _ir().func(name, *a)


def _c(v):
    return _ir().const(v)


def _minus(a, b):
    ir = _ir()
    return ir.add(a, ir.mul(ir.const(-1.0), b))


def _sq(x):
    return _ir().power(x, _c(2.0))


def _safe_exp(v):
    return math.exp(v) if v < 700 else float("inf")


def _sigmoid_num(v):
    return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))


_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _phi(x):
    """The standard normal density at x."""
    ir = _ir()
    return ir.mul(_c(_INV_SQRT_2PI), ir.func("exp", ir.mul(_c(-0.5), _sq(x))))


def _Phi(x):
    """The standard normal distribution function at x: erfc(−x/√2)/2 (= (1 + erf(x/√2))/2,
    without the cancellation of 1 + erf where x is far below 0)."""
    ir = _ir()
    return ir.mul(_c(0.5), ir.func("erfc", ir.mul(_c(-1.0 / _SQRT2), x)))


def _fw_gelu(em, n, a):
    em.helpers.add("_gelu")  # (torch's and jax's own gelu are 0 below x = -8 or so: 1 + erf cancels there)
    return f"_gelu({a[0]})"


def _gelu_prime(x, y):
    ir = _ir()
    return ir.add(_Phi(x), ir.mul(x, _phi(x)))


def _silu_prime(x, y):
    ir = _ir()
    s = ir.func("sigmoid", x)
    return ir.mul(s, ir.add(_c(1.0), ir.mul(x, _minus(_c(1.0), s))))


elementwise("exp", lambda x, y: y, "d exp(X) = exp(X)∘dX", _safe_exp, "np.exp({0})",
            latex=lambda p, e: _tex_exp(p, e), letter="p", in_place=True,
            torch="torch.exp({0})", jax="jnp.exp({0})",
            sympy=lambda t: _sp().exp(t))
elementwise("log", lambda x, y: _ir().div(_c(1.0), x), "d log(X) = dX⊘X", math.log, "np.log({0})",
            latex="\\log", domain="positive", letter="g", in_place=True, aliases=("ln",),
            torch="torch.log({0})", jax="jnp.log({0})",
            sympy=lambda t: _sp().log(t))
elementwise("sqrt", lambda x, y: _ir().div(_c(0.5), y), "d sqrt(X) = dX⊘(2 sqrt(X))", math.sqrt,
            "np.sqrt({0})", latex=lambda p, e: (f"\\sqrt{{{p.p(e.args[0])[0]}}}", 7),
            domain="positive", letter="q", in_place=True,
            torch="torch.sqrt({0})", jax="jnp.sqrt({0})",
            sympy=lambda t: _sp().sqrt(t))
elementwise("sin", lambda x, y: _ir().func("cos", x), "d sin(X) = cos(X)∘dX", math.sin, "np.sin({0})",
            latex="\\sin", letter="u", in_place=True,
            torch="torch.sin({0})", jax="jnp.sin({0})",
            sympy=lambda t: _sp().sin(t))
elementwise("cos", lambda x, y: _ir().neg(_ir().func("sin", x)), "d cos(X) = −sin(X)∘dX", math.cos,
            "np.cos({0})", latex="\\cos", letter="u", in_place=True,
            torch="torch.cos({0})", jax="jnp.cos({0})",
            sympy=lambda t: _sp().cos(t))
elementwise("tan", lambda x, y: _ir().add(_c(1.0), _sq(y)), "d tan(X) = (1 + tan²(X))∘dX", math.tan,
            "np.tan({0})", latex="\\tan", letter="u", in_place=True, domain="small",
            torch="torch.tan({0})", jax="jnp.tan({0})",
            sympy=lambda t: _sp().tan(t))
elementwise("tanh", lambda x, y: _minus(_c(1.0), _sq(y)), "d tanh(X) = (1 − tanh²(X))∘dX", math.tanh,
            "np.tanh({0})", latex="\\tanh", letter="t", in_place=True,
            torch="torch.tanh({0})", jax="jnp.tanh({0})",
            sympy=lambda t: _sp().tanh(t))
elementwise("cosh", lambda x, y: _ir().func("sinh", x), "d cosh(X) = sinh(X)∘dX",
            lambda v: math.cosh(v) if abs(v) < 700 else float("inf"), "np.cosh({0})", latex="\\cosh",
            letter="u", in_place=True,
            torch="torch.cosh({0})", jax="jnp.cosh({0})",
            sympy=lambda t: _sp().cosh(t))
elementwise("sinh", lambda x, y: _ir().func("cosh", x), "d sinh(X) = cosh(X)∘dX",
            lambda v: math.sinh(v) if abs(v) < 700 else float("inf"), "np.sinh({0})", latex="\\sinh",
            letter="u", in_place=True,
            torch="torch.sinh({0})", jax="jnp.sinh({0})",
            sympy=lambda t: _sp().sinh(t))
elementwise("arcsin", lambda x, y: _ir().div(_c(1.0), _ir().func("sqrt", _minus(_c(1.0), _sq(x)))),
            "d arcsin(X) = dX⊘sqrt(1 − X²)", math.asin, "np.arcsin({0})", latex="\\arcsin",
            letter="u", in_place=True, domain="unit_interval",
            torch="torch.asin({0})", jax="jnp.arcsin({0})", aliases=("asin",),
            sympy=lambda t: _sp().asin(t))
elementwise("arccos", lambda x, y: _ir().div(_c(-1.0), _ir().func("sqrt", _minus(_c(1.0), _sq(x)))),
            "d arccos(X) = −dX⊘sqrt(1 − X²)", math.acos, "np.arccos({0})", latex="\\arccos",
            letter="u", in_place=True, domain="unit_interval",
            torch="torch.acos({0})", jax="jnp.arccos({0})", aliases=("acos",),
            sympy=lambda t: _sp().acos(t))
elementwise("arctan", lambda x, y: _ir().div(_c(1.0), _ir().add(_c(1.0), _sq(x))),
            "d arctan(X) = dX⊘(1 + X²)", math.atan, "np.arctan({0})", latex="\\arctan", letter="u",
            in_place=True,
            torch="torch.atan({0})", jax="jnp.arctan({0})", aliases=("atan",),
            sympy=lambda t: _sp().atan(t))
elementwise("sigmoid", lambda x, y: _ir().mul(y, _minus(_c(1.0), y)), "d σ(X) = σ(X)∘(1 − σ(X))∘dX",
            _sigmoid_num, "_sigmoid({0})", latex="\\sigma", letter="s", helpers=("_sigmoid",),
            torch="torch.sigmoid({0})", jax="jax.nn.sigmoid({0})",
            sympy=lambda t: 1 / (1 + _sp().exp(-t)))
elementwise("relu", lambda x, y: _ir().func("step", x), "d relu(X) = step(X)∘dX",
            lambda v: max(v, 0.0), "np.maximum({0}, 0.0)", letter="r", smooth=False,
            torch="torch.relu({0})", jax="jax.nn.relu({0})",
            sympy=lambda t: _sp().Max(t, 0))
elementwise("step", lambda x, y: None, "d step(X) = 0 (almost everywhere)",
            lambda v: 1.0 if v > 0 else 0.0, "np.heaviside({0}, 0.0)", letter="h", smooth=False,
            torch="torch.sign(torch.relu({0}))", jax="jnp.heaviside({0}, 0.0)",
            sympy=lambda t: _sp().Heaviside(t, 0))  # (torch: heaviside has no derivative, sign(relu) has)
elementwise("abs", lambda x, y: _ir().func("sign", x), "d |X| = sign(X)∘dX", abs, "np.abs({0})",
            latex=lambda p, e: (f"\\left|{p.p(e.args[0])[0]}\\right|", 7), letter="u", smooth=False,
            torch="torch.abs({0})", jax="jnp.abs({0})",
            sympy=lambda t: _sp().Abs(t))
elementwise("sign", lambda x, y: None, "d sign(X) = 0 (almost everywhere)",
            lambda v: float((v > 0) - (v < 0)), "np.sign({0})", letter="u", smooth=False,
            torch="torch.sign({0})", jax="jnp.sign({0})",
            sympy=lambda t: _sp().sign(t))
elementwise("softplus", lambda x, y: _ir().func("sigmoid", x), "d softplus(X) = σ(X)∘dX",
            lambda v: v + math.log1p(math.exp(-v)) if v > 0 else math.log1p(math.exp(v)),
            "np.logaddexp(0.0, {0})", letter="q",
            torch="torch.nn.functional.softplus({0}, threshold=37.0)", jax="jnp.logaddexp({0}, 0.0)",
            sympy=lambda t: _sp().log(1 + _sp().exp(t)))
elementwise("logsigmoid", lambda x, y: _ir().func("sigmoid", _ir().neg(x)),
            "d log σ(X) = σ(−X)∘dX", lambda v: -(-v + math.log1p(math.exp(v)) if v < 0 else math.log1p(math.exp(-v))),
            "(-np.logaddexp(0.0, -{0}))", latex="\\log\\sigma", letter="g",
            torch="torch.nn.functional.logsigmoid({0})", jax="jax.nn.log_sigmoid({0})",
            sympy=lambda t: -_sp().log(1 + _sp().exp(-t)))
elementwise("log1p", lambda x, y: _ir().div(_c(1.0), _ir().add(_c(1.0), x)), "d log1p(X) = dX⊘(1 + X)",
            math.log1p, "np.log1p({0})", latex="\\operatorname{log1p}", domain="positive", letter="g",
            in_place=True,
            torch="torch.log1p({0})", jax="jnp.log1p({0})",
            sympy=lambda t: _sp().log(1 + t))
elementwise("expm1", lambda x, y: _ir().func("exp", x), "d expm1(X) = exp(X)∘dX",
            lambda v: math.expm1(v) if v < 700 else float("inf"), "np.expm1({0})",
            latex="\\operatorname{expm1}", letter="p", in_place=True,
            torch="torch.expm1({0})", jax="jnp.expm1({0})",
            sympy=lambda t: _sp().exp(t) - 1)
elementwise("erf", lambda x, y: _ir().mul(_c(2.0 / math.sqrt(math.pi)), _ir().func("exp", _ir().neg(_sq(x)))),
            "d erf(X) = (2/√π) exp(−X²)∘dX", math.erf, "_erf({0})", latex="\\operatorname{erf}",
            letter="u", helpers=("_erf",),
            torch="torch.special.erf({0})", jax="jax.scipy.special.erf({0})",
            sympy=lambda t: _sp().erf(t))
elementwise("erfc", lambda x, y: _ir().mul(_c(-2.0 / math.sqrt(math.pi)), _ir().func("exp", _ir().neg(_sq(x)))),
            "d erfc(X) = −(2/√π) exp(−X²)∘dX", math.erfc, "_erfc({0})", latex="\\operatorname{erfc}",
            letter="u", helpers=("_erfc",),
            torch="torch.special.erfc({0})", jax="jax.scipy.special.erfc({0})",
            sympy=lambda t: _sp().erfc(t))
def _logerfc_float(v: float) -> float:
    if v < 1.0:
        return math.log1p(-math.erf(v))
    from scipy.special import log_ndtr  # log erfc(v) = log 2 + log Φ(−√2 v), finite far past erfc's underflow

    return math.log(2.0) + float(log_ndtr(-_SQRT2 * v))


def _fw_logerfc(em, n, a):
    em.helpers.add("_logerfc")
    return f"_logerfc({a[0]})"


def _erfcx_float(v: float) -> float:
    from scipy.special import erfcx  # exp(v²) erfc(v), finite where erfc underflows

    return float(erfcx(v))


# exp(x²) erfc(x): only in emitted code, where 1/erfcx(z) stands for exp(−z² − logerfc(z))
# (optimize._over_erfcx); not in the language (its derivative 2x·erfcx(x) − 2/√π cancels at large x)
REGISTRY["erfcx"] = replace(
    elementwise("erfcx", lambda x, y: _ir().add(_ir().mul(_c(2.0), x, y), _c(-2.0 / math.sqrt(math.pi))),
                "d erfcx(X) = (2X∘erfcx(X) − 2/√π)∘dX", _erfcx_float, "_erfcx({0})",
                latex="\\operatorname{erfcx}", letter="u", helpers=("_erfcx",),
                torch="torch.special.erfcx({0})", jax="jax.scipy.special.erfcx({0})",
                sympy=lambda t: _sp().exp(t ** 2) * _sp().erfc(t)), user=False)
elementwise("logerfc", lambda x, y: _ir().mul(_c(-2.0 / math.sqrt(math.pi)),
                                             _ir().func("exp", _ir().sub(_ir().neg(_sq(x)), y))),
            "d log erfc(X) = −(2/√π) exp(−X² − log erfc(X))∘dX", _logerfc_float, "_logerfc({0})",
            latex="\\log\\operatorname{erfc}", letter="u", helpers=("_logerfc",),
            torch=_fw_logerfc, jax=_fw_logerfc,
            sympy=lambda t: _sp().log(_sp().erfc(t)))
elementwise("gelu", _gelu_prime, "d gelu(X) = (Φ(X) + X∘φ(X))∘dX",
            lambda v: 0.5 * v * math.erfc(-v / _SQRT2), "_gelu({0})", latex="\\operatorname{gelu}",
            letter="r", helpers=("_gelu",),
            torch=_fw_gelu, jax=_fw_gelu,
            sympy=lambda t: t * (1 + _sp().erf(t / _sp().sqrt(2))) / 2)
elementwise("silu", _silu_prime, "d silu(X) = σ(X)∘(1 + X∘(1 − σ(X)))∘dX",
            lambda v: v * _sigmoid_num(v), "({0} * _sigmoid({0}))", latex="\\operatorname{silu}", letter="r",
            helpers=("_sigmoid",),
            torch="torch.nn.functional.silu({0})", jax="jax.nn.silu({0})",
            sympy=lambda t: t / (1 + _sp().exp(-t)))


# log Γ and its derivatives, the polygamma functions ψ⁽ᵏ⁾ (ψ = ψ⁽⁰⁾ digamma, ψ⁽¹⁾ trigamma): the
# likelihoods of the gamma, beta, Dirichlet, Student-t and negative binomial distributions
MAX_POLYGAMMA = 6  # ψ⁽⁶⁾ is the seventh derivative of log Γ; its own derivative is refused


def polygamma_name(k: int) -> str:
    return {0: "digamma", 1: "trigamma"}.get(k, f"polygamma{k}")


def _polygamma_float(k: int):
    def fold(v: float) -> float:
        from scipy.special import polygamma  # NumPy and math have no polygamma

        return float(polygamma(k, v))
    return fold


def _polygamma_prime(k: int):
    def prime(x, y):
        if k == MAX_POLYGAMMA:
            from .errors import DeriveError

            raise DeriveError(f"matcalc's polygamma functions go up to polygamma({MAX_POLYGAMMA}, x), and this "
                              f"derivative needs polygamma({k + 1}, x)")
        return _ir().func(polygamma_name(k + 1), x)
    return prime


elementwise("gammaln", lambda x, y: _ir().func("digamma", x), "d log Γ(X) = ψ(X)∘dX", math.lgamma,
            "_gammaln({0})", latex="\\log\\Gamma", domain="positive", letter="g", helpers=("_gammaln",),
            aliases=("lgamma", "loggamma"), torch="torch.lgamma({0})", jax="jax.scipy.special.gammaln({0})",
            sympy=lambda t: _sp().loggamma(t))
for _k in range(MAX_POLYGAMMA + 1):
    _name = polygamma_name(_k)
    elementwise(_name, _polygamma_prime(_k), f"d ψ⁽{_k}⁾(X) = ψ⁽{_k + 1}⁾(X)∘dX", _polygamma_float(_k),
                f"_polygamma({_k}, {{0}})" if _k else "_digamma({0})",
                latex=f"\\psi^{{({_k})}}" if _k else "\\psi",
                domain="positive", letter="u", helpers=("_polygamma",) if _k else ("_digamma",),
                torch=f"torch.polygamma({_k}, {{0}})" if _k else "torch.digamma({0})",
                jax=f"jax.scipy.special.polygamma({_k}, {{0}})" if _k else "jax.scipy.special.digamma({0})",
                sympy=lambda t, k=_k: _sp().polygamma(k, t))
    if _k >= 2:  # printed as SciPy writes it, polygamma(k, x) (parse reads it back)
        REGISTRY[_name] = replace(REGISTRY[_name], text=lambda p, e, k=_k: f"polygamma({k}, {p.p(e.args[0])[0]})")


def _entrywise_pair_rule(u, s, attr):
    """maximum(A, B), minimum(A, B): two arrays of one shape, or a number and an array (the typing
    spreads a row or column over a matrix first, as for +)."""
    (ra, ca), (rb, cb) = s
    if u.one(ra) and u.one(ca):
        return s[1]
    if u.one(rb) and u.one(cb):
        return s[0]
    if not (u.same(ra, rb) and u.same(ca, cb)):
        u.fail(f"{u.name} compares two arrays entry by entry, but {u.what(0)} and {u.what(1)} (a number and an "
               f"array compare each entry with the number)")
    return s[0]


def _jvp_extremum(larger: bool):
    """d max(a, b) = s∘da + (1 − s)∘db, s = step(a − b) (a > b: a is taken); for min, s = step(b − a).
    At a tie b's derivative (step(0) = 0), as relu's: maximum(z, 0) = relu(z)."""
    def jvp(e, d):
        ir = _ir()
        a, b = e.args
        s = ir.func("step", _minus(a, b) if larger else _minus(b, a))
        terms = [t for t in (None if d[0] is None else ir.mul(s, d[0]),
                             None if d[1] is None else ir.mul(_minus(_c(1.0), s), d[1])) if t is not None]
        if not terms:
            return None
        out = ir.add(*terms) if len(terms) > 1 else terms[0]
        return out if out.shape == e.shape else ir.mul(out, _ones(e.shape))
    return jvp


for _name, _larger in (("maximum", True), ("minimum", False)):
    register(Op(_name, _entrywise_pair_rule, nargs=2, jvp=_jvp_extremum(_larger), smooth=False,
                rule=(f"d {_name}(A, B) = s∘dA + (1 − s)∘dB, s = step({'A − B' if _larger else 'B − A'})"),
                numpy=f"np.{_name}({{0}}, {{1}})", torch=f"torch.{_name}({{0}}, {{1}})", jax=f"jnp.{_name}({{0}}, {{1}})",
                latex=lambda p, e, _t="\\max" if _larger else "\\min": (
                    f"{_t}\\left({p.p(e.args[0])[0]}, {p.p(e.args[1])[0]}\\right)", 7)))


def _tex_exp(p, e):
    """e^{x} binds as a power (5): a transpose or inverse of it gets brackets, (e^{x})^{⊤}
    (e^{x}^{⊤} is a double superscript); a long exponent reads exp(…)."""
    s = p.p(e.args[0])[0]
    return (f"e^{{{s}}}", 5) if len(s) <= 30 else (f"\\exp\\left({s}\\right)", 7)


# ------------------------------------------------------------------ reductions and matrix functions

def _jvp_linear(e, d):
    ir = _ir()
    return None if d[0] is None else ir.func(e.op, d[0], attr=e.attr)


def _tr_inv_dx(X, dX):
    ir = _ir()
    return ir.func("tr", ir.matmul(ir.func("inv", X), dX))


def _t_sum(n, c, lin):
    X = n.args[0]
    if n.attr is None:
        return [(0, _ir().mul(c, _ones(X.shape)))], "frob_sum"
    return [(0, broadcast_axis(c, X.shape, n.attr % 2))], "frob_sum_axis"


def _t_mean(n, c, lin):
    ir = _ir()
    X = n.args[0]
    if n.attr is None:
        return [(0, ir.mul(c, ir.div(_ones(X.shape), count(X.shape))))], "frob_mean"
    axis = n.attr % 2
    return [(0, ir.div(broadcast_axis(c, X.shape, axis), axis_count(X.shape, axis)))], "frob_mean_axis"


def _jvp_softmax(e, d):
    ir = _ir()
    if d[0] is None:
        return None
    if e.attr is None:  # d softmax(x) = s∘(dx − (s:dx)1)
        return ir.mul(e, ir.add(d[0], ir.neg(ir.frob(e, d[0]))))
    axis = e.attr % 2
    inner = ir.func("sum", ir.mul(e, d[0]), attr=axis)
    return ir.mul(e, ir.add(d[0], ir.neg(broadcast_axis(inner, e.shape, axis))))


def _jvp_logsumexp(e, d):
    ir = _ir()
    if d[0] is None:
        return None
    X = d[0]
    if e.attr is None:
        return ir.frob(ir.func("softmax_all", e.args[0]) if e.args[0].shape[1] != 1 and e.args[0].shape[0] != 1
                       else ir.func("softmax", e.args[0]), X)
    axis = e.attr % 2
    return ir.func("sum", ir.mul(ir.func("softmax", e.args[0], attr=axis), X), attr=axis)


def _jvp_matrix_power(e, d):
    """d(Xᵏ) = Σᵢ Xⁱ dX Xᵏ⁻¹⁻ⁱ; for k < 0 the same sum in X⁻¹ with dX⁻¹ = −X⁻¹ dX X⁻¹."""
    ir = _ir()
    if d[0] is None or e.attr == 0:  # X⁰ = I: no differential
        return None
    X, k = e.args[0], e.attr
    base, dbase = (X, d[0]) if k > 0 else (ir.func("inv", X), ir.neg(ir.matmul(ir.matmul(ir.func("inv", X), d[0]), ir.func("inv", X))))
    m = abs(k)

    def pw(j):
        if j == 0:
            return None
        if j == 1:
            return base
        return ir.func("matrix_power", X, attr=j if k > 0 else -j)
    terms = []
    for i in range(m):
        left, right = pw(i), pw(m - 1 - i)
        t = dbase
        if left is not None:
            t = ir.matmul(left, t)
        if right is not None:
            t = ir.matmul(t, right)
        terms.append(t)
    return terms[0] if len(terms) == 1 else ir.add(*terms)


def _jvp_kron(e, d):
    ir = _ir()
    A, B = e.args
    return _sum_opt([d[0] and ir.func("kron", d[0], B), d[1] and ir.func("kron", A, d[1])])


def _t_bilinear(first, second, identity):
    """The transpose rule of an operator linear in each of its two arguments: first(args, c)
    and second(args, c) the adjoints of the cotangent c, cited as ``identity``."""
    def rule(n, c, lin):
        return [(i, f(n.args, c)) for i, f in enumerate((first, second)) if lin[i]], identity
    return rule


# C:(A⊗B) = kron_blocks(C, B):A = kron_sum(C, A):B
_t_kron = _t_bilinear(lambda a, c: _ir().func("kron_blocks", c, a[1], attr=a[0].shape),
                      lambda a, c: _ir().func("kron_sum", c, a[0], attr=a[1].shape), "frob_kron")
# kron_sum(D, A) = Σᵢⱼ Aᵢⱼ D₍ᵢⱼ₎: C:kron_sum(D, A) = (A⊗C):D = kron_blocks(D, C):A
_t_kron_sum = _t_bilinear(lambda a, c: _ir().func("kron", a[1], c),
                          lambda a, c: _ir().func("kron_blocks", a[0], c, attr=a[1].shape), "frob_kron_sum")
# kron_blocks(D, B)ᵢⱼ = D₍ᵢⱼ₎ : B: C:kron_blocks(D, B) = (C⊗B):D = kron_sum(D, C):B
_t_kron_blocks = _t_bilinear(lambda a, c: _ir().func("kron", c, a[1]),
                             lambda a, c: _ir().func("kron_sum", a[0], c, attr=a[1].shape), "frob_kron_blocks")


def _np_axis_template(all_form, axis_form):
    def emit(em, n, a):
        if n.attr is None:
            return all_form(em, n, a)
        return axis_form(em, n, a, n.attr % 2)
    return emit


def _np_sum(em, n, a):
    return em.total(a[0], n.args[0].shape)


def _np_sum_axis(em, n, a, axis):
    X = n.args[0]
    if len(em.np_shape(X.shape)) == 1:  # a vector summed along its long axis
        return em.total(a[0], X.shape)
    return f"np.add.reduce({a[0]}, {axis})"


def _np_mean(em, n, a):
    X = n.args[0]
    return f"({em.total(a[0], X.shape)} / {em.count_src(X.shape)})"


def _np_mean_axis(em, n, a, axis):
    X = n.args[0]
    if len(em.np_shape(X.shape)) == 1:
        return f"({em.total(a[0], X.shape)} / {em.count_src(X.shape)})"
    return f"np.mean({a[0]}, {axis})"


def _np_lse_axis(em, n, a, axis):
    X = n.args[0]
    if len(em.np_shape(X.shape)) == 1:
        em.helpers.add("_logsumexp")
        return f"_logsumexp({a[0]})"
    em.helpers.add("_logsumexp_axis")
    return f"_logsumexp_axis({a[0]}, {axis})"


def _np_softmax_axis(em, n, a, axis):
    X = n.args[0]
    if len(em.np_shape(X.shape)) == 1:
        em.helpers.add("_softmax")
        return f"_softmax({a[0]})"
    em.helpers.add("_softmax_axis")
    return f"_softmax_axis({a[0]}, {axis})"


def _np_kron(em, n, a):
    A, B = n.args
    x, y = em.as_2d(a[0], A.shape), em.as_2d(a[1], B.shape)
    if em.mod == "torch":  # torch.kron fails on a transposed operand, even an n×1 one torch calls contiguous
        x, y = (f"{v}.clone(memory_format=torch.contiguous_format)" for v in (x, y))
    return em.from_2d(f"{em.mod}.kron({x}, {y})", n.shape)


def _np_vec(em, n, a):
    X = n.args[0]
    return f"{a[0]}.reshape(-1, order='F')" if len(em.np_shape(X.shape)) == 2 else a[0]


def _np_unvec(em, n, a):
    if len(em.np_shape(n.shape)) < 2:
        return a[0] if n.shape != SCALAR else em.item0(a[0])
    return f"{a[0]}.reshape({em.shape_src(n.shape)}, order='F')"


def _blocks_einsum(em, n, a, spec, small):
    """The block contractions of kron's adjoint: C reshaped to (m, p, n, q) against ``small``."""
    c, other = n.args
    (m, k), (p, q) = (n.shape, other.shape) if spec == "ipjq,pq->ij" else (other.shape, n.shape)
    dims = ", ".join(em.dim(d) for d in (m, p, k, q))
    code = f"{em.mod}.einsum('{spec}', {em.mod}.reshape({a[0]}, ({dims})), {em.as_2d(a[1], other.shape)})"
    return em.from_2d(code, n.shape)


def _np_kron_blocks(em, n, a):  # entry (i, j): C's block (i, j) : B
    return _blocks_einsum(em, n, a, "ipjq,pq->ij", 1)


def _np_kron_sum(em, n, a):  # Σᵢⱼ Aᵢⱼ C's block (i, j)
    return _blocks_einsum(em, n, a, "ipjq,ij->pq", 0)


def _fw_reduce(fn):
    """sum/mean over everything, or along an axis of a matrix (a vector: over everything)."""
    def emit(em, n, a):
        X = n.args[0]
        if X.shape == SCALAR:
            return a[0]
        if n.attr is None or len(em.np_shape(X.shape)) < 2:
            return f"{em.mod}.{fn}({a[0]})"
        return f"{em.mod}.{fn}({a[0]}, {n.attr})"
    return emit


_fw_sum, _fw_mean = _fw_reduce("sum"), _fw_reduce("mean")


def _fw_norm1(em, n, a):
    return f"{em.mod}.sum({em.mod}.abs({a[0]}))"


def _fw_logsumexp(em, n, a):
    X = n.args[0]
    if X.shape == SCALAR:
        return a[0]
    axis = n.attr if n.attr is not None and len(em.np_shape(X.shape)) == 2 else None
    if em.mod == "torch":
        return f"torch.logsumexp({a[0]}.reshape(-1), 0)" if axis is None else f"torch.logsumexp({a[0]}, {axis})"
    return f"jax.scipy.special.logsumexp({a[0]})" if axis is None else \
        f"jax.scipy.special.logsumexp({a[0]}, {axis})"


def _fw_softmax(em, n, a):
    X = n.args[0]
    if X.shape == SCALAR:
        return f"({a[0]} * 0.0 + 1.0)"
    axis = n.attr if n.attr is not None and len(em.np_shape(X.shape)) == 2 else 0
    return f"torch.softmax({a[0]}, {axis})" if em.mod == "torch" else f"jax.nn.softmax({a[0]}, axis={axis})"


def _fw_softmax_all(em, n, a):
    flat = f"{em.mod}.reshape({a[0]}, (-1,))"
    s = f"torch.softmax({flat}, 0)" if em.mod == "torch" else f"jax.nn.softmax({flat})"
    return f"{em.mod}.reshape({s}, {em.shape_src(n.shape)})"


def _fw_vec(em, n, a):
    return f"{a[0]}.T.reshape(-1)" if len(em.np_shape(n.args[0].shape)) == 2 else a[0]


def _fw_unvec(em, n, a):
    if len(em.np_shape(n.shape)) < 2:
        return a[0] if n.shape != SCALAR else em.item0(a[0])
    r, c = n.shape
    return f"{a[0]}.reshape(({em.dim(c)}, {em.dim(r)})).T"


def _fw_matrix_power(em, n, a):
    k = n.attr
    base = a[0] if k > 0 else f"{em.mod}.linalg.inv({a[0]})"
    return f"{em.mod}.linalg.matrix_power({base}, {abs(k)})"


def _np_matrix_power(em, n, a):
    k = n.attr
    if k < 0:
        em.helpers.add("_lu")
        return f"np.linalg.matrix_power(_inv({a[0]}), {-k})"
    return f"np.linalg.matrix_power({a[0]}, {k})"


def _tex_call(name):
    return lambda p, e: (f"{name}\\left({', '.join(p.p(x)[0] for x in e.args)}"
                         + (f", {e.attr}" if e.attr is not None and not isinstance(e.attr, tuple) else "")
                         + "\\right)", 7)


def _tex_axis(name):
    def tex(p, e):
        s = p.p(e.args[0])[0]
        if e.attr is None:
            return f"{name}\\left({s}\\right)", 7
        return f"{name}_{{{e.attr}}}\\left({s}\\right)", 7
    return tex


def _cube_cost(n, size):
    return size(n.args[0].shape[0]) ** 3


register(Op("sum", axis_rule(False), params=("axis",), params_optional=True, jvp=_jvp_linear,
            rule="d sum(A) = sum(dA)", transpose=_t_sum, numpy=_np_axis_template(_np_sum, _np_sum_axis),
            fold_const=_fold_sum,
            latex=_tex_axis("\\operatorname{sum}"),
            torch=_fw_sum, jax=_fw_sum,
            vec=_vec_form_rule("sum")))
register(Op("mean", axis_rule(False), params=("axis",), params_optional=True, jvp=_jvp_linear,
            rule="d mean(A) = mean(dA)", transpose=_t_mean, numpy=_np_axis_template(_np_mean, _np_mean_axis),
            latex=_tex_axis("\\operatorname{mean}"), scalar_form=lambda a, attr: a,
            fold_const=lambda c, shape, axis: _filled(_c(c), _reduced(shape, axis)[0]),
            torch=_fw_mean, jax=_fw_mean,
            vec=_vec_form_rule("mean")))
register(Op("tr", square_to(lambda s: SCALAR), jvp=_jvp_linear, rule="d tr(A) = tr(dA)",
            transpose=lambda n, c, lin: ([(0, _ir().mul(c, _ir().eye(n.args[0].shape[0])))], "frob_trace"),
            numpy="np.trace({0})", latex="\\operatorname{tr}", aliases=("trace", "Tr"), scalar_form=lambda a, attr: a,
            fold_const=lambda c, shape, axis: _ir().mul(_c(c), count((shape[0], 1))),
            torch="torch.trace({0})", jax="jnp.trace({0})",
            vec=_vec_form_rule("tr")))
register(Op("det", square_to(lambda s: SCALAR), jvp=lambda e, d: _ir().mul(e, _tr_inv_dx(e.args[0], d[0])),
            rule="d det(X) = det(X) tr(X⁻¹dX)", numpy="np.linalg.det({0})", latex="\\det",
            domain="invertible", scalar_form=lambda a, attr: a, cost=_cube_cost,
            torch="torch.linalg.det({0})", jax="jnp.linalg.det({0})"))
register(Op("logdet", square_to(lambda s: SCALAR), jvp=lambda e, d: _tr_inv_dx(e.args[0], d[0]),
            rule="d logdet(X) = tr(X⁻¹dX)", numpy="np.linalg.slogdet({0})[1]", latex="\\log\\det",
            domain="invertible", cost=_cube_cost,
            scalar_form=lambda a, attr: _ir().func("log", _ir().func("abs", a)),
            torch="torch.linalg.slogdet({0})[1]", jax="jnp.linalg.slogdet({0})[1]"))
register(Op("inv", square_to(lambda s: s), jvp=lambda e, d: _ir().neg(_ir().matmul(_ir().matmul(e, d[0]), e)),
            rule="d X⁻¹ = −X⁻¹ dX X⁻¹", numpy="np.linalg.inv({0})", domain="invertible", cost=_cube_cost,
            latex=lambda p, e: (f"{p.wrap(e.args[0], 7)}^{{-1}}", 6),
            scalar_form=lambda a, attr: _ir().div(_c(1.0), a),
            torch="torch.linalg.inv({0})", jax="jnp.linalg.inv({0})"))
register(Op("diag", _diag_rule, jvp=_jvp_linear, view=True, rule="d diag(A) = diag(dA)",
            transpose=lambda n, c, lin: ([(0, _ir().func("Diag", c))], "frob_diag"), numpy="np.diag({0})",
            latex="\\operatorname{diag}", scalar_form=lambda a, attr: a,
            fold_const=lambda c, shape, attr: _ir().const(c, (shape[0], 1)),
            torch="torch.diagonal({0})", jax="jnp.diagonal({0})"))
register(Op("Diag", _Diag_rule, jvp=_jvp_linear, rule="d Diag(a) = Diag(da)",
            transpose=lambda n, c, lin: ([(0, _ir().func("diag", c))], "frob_Diag"), numpy="np.diag({0})",
            latex="\\operatorname{Diag}", scalar_form=lambda a, attr: a,
            fold_const=lambda c, shape, attr: _ir().mul(_c(c), _ir().eye(shape[0])),
            torch="torch.diag({0})", jax="jnp.diag({0})"))
register(Op("norm2", to_scalar, jvp=lambda e, d: _ir().frob(_ir().div(e.args[0], e), d[0]),
            rule="d‖x‖ = (x/‖x‖):dx", numpy="_norm2({0})", helpers=("_norm2",), aliases=("norm",),
            latex=lambda p, e: (f"\\left\\|{p.p(e.args[0])[0]}\\right\\|", 7), smooth=False,
            fold_const=lambda c, shape, attr: _ir().mul(_c(abs(c)), _ir().func("sqrt", count(shape))),
            torch="torch.linalg.vector_norm({0})", jax="jnp.linalg.norm({0})"))
register(Op("norm1", to_scalar, jvp=lambda e, d: _ir().frob(_ir().func("sign", e.args[0]), d[0]),
            rule="d‖x‖₁ = sign(x):dx", numpy=lambda em, n, a: em.total(f"np.abs({a[0]})", n.args[0].shape),
            latex=lambda p, e: (f"\\left\\|{p.p(e.args[0])[0]}\\right\\|_{{1}}", 7), smooth=False,
            fold_const=lambda c, shape, attr: _ir().mul(_c(abs(c)), count(shape)),
            torch=_fw_norm1, jax=_fw_norm1))
register(Op("logsumexp", axis_rule(False), params=("axis",), params_optional=True, jvp=_jvp_logsumexp,
            rule="d logsumexp(X) = softmax(X):dX", fold_const=_fold_logsumexp,
            numpy=_np_axis_template(lambda em, n, a: (em.helpers.add("_logsumexp"), f"_logsumexp({a[0]})")[1],
                                    _np_lse_axis),
            latex=_tex_axis("\\operatorname{logsumexp}"),
            torch=_fw_logsumexp, jax=_fw_logsumexp))
register(Op("softmax", axis_rule(True, vector_only_without_axis=True), params=("axis",), params_optional=True,
            jvp=_jvp_softmax, rule="d softmax(x) = s∘(dx − (s:dx)1)", letter="s", fold_const=_fold_softmax,
            numpy=_np_axis_template(lambda em, n, a: (em.helpers.add("_softmax"), f"_softmax({a[0]})")[1],
                                    _np_softmax_axis),
            latex=_tex_axis("\\operatorname{softmax}"),
            torch=_fw_softmax, jax=_fw_softmax))
# softmax over every entry of a matrix: the gradient of logsumexp(X) (not user syntax)
register(Op("softmax_all", same_shape, jvp=lambda e, d: None if d[0] is None else _ir().mul(
             e, _ir().add(d[0], _ir().neg(_ir().frob(e, d[0])))), rule="d softmax(X) = S∘(dX − (S:dX)1)",
            numpy="_softmax({0})", helpers=("_softmax",), user=False, letter="s", transposes=True,
            text=lambda p, e: f"exp({p.p(e.args[0])[0]} - logsumexp({p.p(e.args[0])[0]}))",
            latex="\\operatorname{softmax}",
            torch=_fw_softmax_all, jax=_fw_softmax_all))
# a∘log(b) with 0 where a = 0: the emitted form of xᵏ∘log(x), d(xᵏ)/dk, which is 0 at x = 0
# for k > 0 where the product is 0·(−∞) (optimize.stable_forms; not user syntax)
register(Op("xlogy", lambda u, s, attr: _ir()._broadcast(s), nargs=2, user=False,
            jvp=lambda e, d: _sum_opt([d[0] and _ir().mul(_ir().func("log", e.args[1]), d[0]),
                                       d[1] and _ir().mul(_ir().div(e.args[0], e.args[1]), d[1])]),
            rule="d(A∘log B) = log(B)∘dA + (A⊘B)∘dB", numpy="_xlogy({0}, {1})", helpers=("_xlogy",),
            text=lambda p, e: f"{p.wrap(e.args[0], 3)}*log({p.p(e.args[1])[0]})",
            latex=lambda p, e: (f"{p.wrap(e.args[0], 3)} \\circ \\log\\left({p.p(e.args[1])[0]}\\right)", 3),
            torch="torch.xlogy({0}, {1})", jax="jax.scipy.special.xlogy({0}, {1})"))
register(Op("kron", _kron_rule, nargs=2, jvp=_jvp_kron, rule="d(A⊗B) = dA⊗B + A⊗dB", transpose=_t_kron,
            numpy=_np_kron, latex=lambda p, e: (f"{p.wrap(e.args[0], 3)} \\otimes {p.wrap(e.args[1], 3, True)}", 2),
            cost=lambda n, size: size(n.shape[0]) * size(n.shape[1]),
            torch=_np_kron, jax=_np_kron))
register(Op("vec", _vec_rule, jvp=_jvp_linear, view=True, rule="d vec(X) = vec(dX)", scalar_form=lambda a, attr: a,
            transpose=lambda n, c, lin: ([(0, _ir().func("unvec", c, attr=n.args[0].shape))], "frob_vec"),
            vec=_vec_form_rule("vec"),
            numpy=_np_vec, latex="\\operatorname{vec}",
            torch=_fw_vec, jax=_fw_vec))
register(Op("unvec", _unvec_rule, view=True, jvp=lambda e, d: None if d[0] is None else _ir().func("unvec", d[0], attr=e.shape),
            rule="d vec⁻¹(v) = vec⁻¹(dv)", params=("rows",), shape_attr=True, scalar_form=lambda a, attr: a,
            text=lambda p, e: f"unvec({p.arg(e.args[0])}, {p.dim(e.shape[0])})",
            transpose=lambda n, c, lin: ([(0, _ir().func("vec", c))], "frob_unvec"), vec=_vec_form_rule("unvec"),
            numpy=_np_unvec, latex=lambda p, e: (
                f"\\operatorname{{vec}}^{{-1}}_{{{p.dim(e.shape[0])}}}\\left({p.p(e.args[0])[0]}\\right)", 7),
            torch=_fw_unvec, jax=_fw_unvec))
# an array of ones of a given size (not an IR operator: typing builds it as the constant 1)
register(Op("ones", _ones_rule, nargs=0, params=("rows", "cols"), params_optional=True, shape_attr=True,
            jvp=lambda e, d: None, rule="d ones(n, m) = 0", latex="\\mathbf{1}"))
register(Op("kron_blocks", _blocks_rule, nargs=2, transpose=_t_kron_blocks, shape_attr=True,
            jvp=lambda e, d: _sum_opt([d[0] and _ir().func("kron_blocks", d[0], e.args[1], attr=e.shape),
                                       d[1] and _ir().func("kron_blocks", e.args[0], d[1], attr=e.shape)]),
            rule="d kron_blocks(C, B) = kron_blocks(dC, B) + kron_blocks(C, dB)", numpy=_np_kron_blocks,
            latex=lambda p, e: (f"\\operatorname{{blocks}}\\left({p.p(e.args[0])[0]} : {p.p(e.args[1])[0]}\\right)", 7),
            torch=_np_kron_blocks, jax=_np_kron_blocks))
register(Op("kron_sum", _blocks_rule, nargs=2, transpose=_t_kron_sum, shape_attr=True,
            jvp=lambda e, d: _sum_opt([d[0] and _ir().func("kron_sum", d[0], e.args[1], attr=e.shape),
                                       d[1] and _ir().func("kron_sum", e.args[0], d[1], attr=e.shape)]),
            rule="d kron_sum(C, A) = kron_sum(dC, A) + kron_sum(C, dA)", numpy=_np_kron_sum,
            latex=lambda p, e: (f"\\operatorname{{blocksum}}\\left({p.p(e.args[0])[0]}, {p.p(e.args[1])[0]}\\right)", 7),
            torch=_np_kron_sum, jax=_np_kron_sum))
def _text_matrix_power(p, e):
    """X@X and X@X@X as products where shorter than matrix_power(X, k), else by name."""
    X, k = e.args[0], e.attr
    base, prec = p.p(X)
    if k in (2, 3) and prec >= 6 and k * len(base) + k + 1 <= len(base) + 17:  # (X, X.T, cos(X): not -P@-P;
        # shorter with the brackets a context may need)
        ir = _ir()
        return p.p(ir.matmul(ir.matmul(X, X), X) if k == 3 else ir.matmul(X, X))
    return f"matrix_power({p.arg(X)}, {k})"


register(Op("matrix_power", _matrix_power_rule, params=("power",), jvp=_jvp_matrix_power, text=_text_matrix_power,
            rule="d Xᵏ = Σᵢ Xⁱ dX Xᵏ⁻¹⁻ⁱ", numpy=_np_matrix_power, domain="invertible_if_negative",
            scalar_form=lambda a, k: _ir().power(a, _c(float(k))),
            latex=lambda p, e: (f"{p.wrap(e.args[0], 7)}^{{{e.attr}}}", 6),
            cost=lambda n, size: abs(n.attr) * size(n.shape[0]) ** 3,
            torch=_fw_matrix_power, jax=_fw_matrix_power))
def size_rule(u, s, attr):
    """size(X): its number of entries; size(X, axis): the length of one axis, as NumPy's."""
    if attr is not None:
        norm_axis(u, attr, "0 (the number of rows), 1 (of columns)")
    return SCALAR


register(Op("size", size_rule, params=("axis",), params_optional=True, jvp=lambda e, d: None,
            rule="d size(X) = 0", numpy="{0}", user=True))


# ------------------------------------------------------------------ structural operators
# Built by ir's constructors (their shapes are checked there), printed and emitted by the
# visitors' own cases; their differentials and adjoints live here with everything else's.

def _jvp_mul(e, d):
    ir = _ir()
    return _sum_opt([ir.mul(*(d[i] if j == i else a for j, a in enumerate(e.args)))
                     for i in range(len(e.args)) if d[i] is not None])


def _jvp_div(e, d):
    ir = _ir()
    a, b = e.args
    da, db = d
    if db is None:
        return ir.div(da, b)
    num = ir.mul(_c(-1.0), e, db)  # d(a⊘b) = (da − (a⊘b)∘db)⊘b
    return ir.div(num if da is None else ir.add(da, num), b)


def _jvp_pow(e, d):
    ir = _ir()
    a, k = e.args
    da, dk = d
    out = []
    if da is not None:
        km1 = _c(k.attr - 1.0) if k.is_const else ir.add(k, _c(-1.0))
        coeff = ir.mul(k, ir.power(a, km1)) if not (k.is_const and k.attr == 2.0) else ir.mul(_c(2.0), a)
        out.append(ir.mul(coeff, da))
    if dk is not None:
        out.append(ir.mul(e, ir.func("log", a), dk))
    return _sum_opt(out)


def _t_mul(node, cot, lin):
    ir = _ir()
    i = lin.index(True)
    others = [a for j, a in enumerate(node.args) if j != i]
    key = "frob_scalar" if all(o.shape == SCALAR for o in others) else "frob_hadamard"
    return [(i, ir.mul(cot, *others))], key


def _t_matmul(node, cot, lin):
    ir = _ir()
    a, b = node.args
    out = []
    if lin[0]:
        out.append((0, ir.matmul(cot, ir.T(b))))
    if lin[1]:
        out.append((1, ir.matmul(ir.T(a), cot)))
    return out, "frob_matmul_right" if lin[0] else "frob_matmul_left"


def _t_frob(node, cot, lin):
    i = lin.index(True)
    return [(i, _ir().mul(cot, node.args[1 - i]))], "frob_comm" if i == 0 else "frob_of_frob"


def _structural(name, **kw):
    return register(Op(name, None, user=False, **kw))


_structural("add", nargs=2, jvp=lambda e, d: _sum_opt(d), rule="d(A + B) = dA + dB",
            transpose=lambda n, c, lin: ([(i, c) for i, l in enumerate(lin) if l], "frob_linear"),
            vec=_vec_form_rule("add"))
_structural("mul", nargs=2, jvp=_jvp_mul, rule="d(A∘B) = dA∘B + A∘dB", transpose=_t_mul,
            vec=_vec_form_rule("mul"))
_structural("div", nargs=2, jvp=_jvp_div, rule="d(A⊘B) = (dA − (A⊘B)∘dB)⊘B",
            transpose=lambda n, c, lin: ([(0, _ir().div(c, n.args[1]))], "frob_div"),
            vec=_vec_form_rule("div"))
_structural("pow", nargs=2, jvp=_jvp_pow, rule="d(A^k) = k A^(k−1)∘dA")
_structural("matmul", nargs=2, rule="d(AB) = dA B + A dB", transpose=_t_matmul,
            jvp=lambda e, d: _sum_opt([d[0] and _ir().matmul(d[0], e.args[1]),
                                       d[1] and _ir().matmul(e.args[0], d[1])]),
            cost=lambda n, size: size(n.shape[0]) * size(n.shape[1]) if "Diag" in (n.args[0].op, n.args[1].op)
            else size(n.args[0].shape[0]) * size(n.args[0].shape[1]) * size(n.args[1].shape[1]),
            vec=_vec_form_rule("matmul"))
_structural("T", view=True, jvp=lambda e, d: _ir().T(d[0]), rule="d(Aᵀ) = (dA)ᵀ",
            transpose=lambda n, c, lin: ([(0, _ir().T(c))], "frob_transpose"), cost=lambda n, size: 0.0,
            vec=_vec_form_rule("T"))
_structural("frob", nargs=2, rule="d(A:B) = dA:B + A:dB", transpose=_t_frob,
            jvp=lambda e, d: _sum_opt([d[0] and _ir().frob(d[0], e.args[1]), d[1] and _ir().frob(e.args[0], d[1])]),
            vec=_vec_form_rule("frob"))
for _leaf in ("sym", "delta", "const", "eye", "dim"):
    _structural(_leaf, nargs=0)
# d(λ): the differential of an expression as the first line of a derivation shows it
_structural("d", nargs=1, text=lambda p, e: f"d({p.p(e.args[0])[0]})",
            latex=lambda p, e: (f"\\mathrm{{d}}\\left({p.p(e.args[0])[0]}\\right)", 7))
# solve(A, B) = A⁻¹B: written by the optimiser for inv(A)@B when the inverse is needed nowhere else
_structural("solve", nargs=2, numpy="np.linalg.solve({0}, {1})",
            cost=lambda n, size: size(n.args[0].shape[0]) ** 3 / 3
            + size(n.args[0].shape[0]) ** 2 * size(n.args[1].shape[1]),
            torch="torch.linalg.solve({0}, {1})", jax="jnp.linalg.solve({0}, {1})")
# A@B@C… in the order that costs least for the shapes of a call: written by the optimiser for a chain
# whose best order depends on sizes it does not know (multi_dot: a vector may end it on either side)
def _np_chain(em, n, a):
    em.helpers.add("_chain")
    return f"_chain({', '.join(a)})"


_structural("chain", nargs=3, numpy=_np_chain,
            cost=lambda n, size: sum(size(n.args[0].shape[0]) * size(f.shape[0]) * size(f.shape[1])
                                     for f in n.args[1:]),
            torch=lambda em, n, a: f"torch.linalg.multi_dot([{', '.join(a)}])",
            jax=lambda em, n, a: f"jnp.linalg.multi_dot([{', '.join(a)}])")
# the root over several outputs, so that one walk sees their shared nodes once
_structural("outputs", nargs=0)
