"""The operator registry: every entry is complete, and every user operator's gradient
agrees with finite differences of an independent NumPy λ (its own oracle here, not
matcalc's emitted code)."""
import subprocess
import sys

import numpy as np
import pytest
from scipy.special import erf as sp_erf
from scipy.special import erfc as sp_erfc
from scipy.special import gammaln as sp_gammaln
from scipy.special import polygamma as sp_polygamma
from scipy.stats import norm

import matcalc
from matcalc.ops import REGISTRY
from support.fd import central_fd_grad, rel_error

SIZES = {"a": 3, "b": 4, "c": 2, "d": 5, "n": 6}


def _sig(z):
    return 1.0 / (1.0 + np.exp(-z))


def _lse(X, axis=None):
    m = np.max(X, axis=axis, keepdims=True)
    out = m + np.log(np.sum(np.exp(X - m), axis=axis, keepdims=True))
    return out.reshape(()) if axis is None else np.squeeze(out, axis)


def _softmax(X, axis):
    e = np.exp(X - np.max(X, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _blocks(C, rows, cols):
    """C's blocks of rows × cols, by block index (i, j): loops, not a reshape."""
    return {(i, j): C[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols]
            for i in range(C.shape[0] // rows) for j in range(C.shape[1] // cols)}


def _kron_sum(C, A):  # Σᵢⱼ Aᵢⱼ C₍ᵢⱼ₎
    r, c = C.shape[0] // A.shape[0], C.shape[1] // A.shape[1]
    return sum(A[i, j] * blk for (i, j), blk in _blocks(C, r, c).items())


def _kron_blocks(C, B):  # entry (i, j): C₍ᵢⱼ₎ : B
    out = np.zeros((C.shape[0] // B.shape[0], C.shape[1] // B.shape[1]))
    for (i, j), blk in _blocks(C, *B.shape).items():
        out[i, j] = np.sum(blk * B)
    return out


def _unvec(v, rows):  # the columns of the result, stacked, are v
    return np.column_stack([v[k:k + rows] for k in range(0, len(v), rows)])


# elementwise f: (its NumPy oracle, the argument matcalc sees, the same argument in NumPy)
NORMAL = ("A@x", lambda A, x: A @ x)
POSITIVE = ("exp(A@x)", lambda A, x: np.exp(A @ x))
SMALL = ("0.3*tanh(A@x)", lambda A, x: 0.3 * np.tanh(A @ x))
ELEMENTWISE = {
    "exp": (np.exp, NORMAL), "log": (np.log, POSITIVE), "sqrt": (np.sqrt, POSITIVE),
    "sin": (np.sin, NORMAL), "cos": (np.cos, NORMAL), "tan": (np.tan, SMALL), "tanh": (np.tanh, NORMAL),
    "cosh": (np.cosh, NORMAL), "sinh": (np.sinh, NORMAL), "arcsin": (np.arcsin, SMALL),
    "arccos": (np.arccos, SMALL), "arctan": (np.arctan, NORMAL), "sigmoid": (_sig, NORMAL),
    "relu": (lambda z: np.maximum(z, 0), NORMAL), "step": (lambda z: (z > 0) * 1.0, NORMAL),
    "abs": (np.abs, NORMAL), "sign": (np.sign, NORMAL), "softplus": (lambda z: np.log1p(np.exp(z)), NORMAL),
    "logsigmoid": (lambda z: np.log(_sig(z)), NORMAL), "log1p": (np.log1p, POSITIVE),
    "expm1": (np.expm1, NORMAL), "erf": (sp_erf, NORMAL), "erfc": (sp_erfc, NORMAL),
    "logerfc": (lambda z: np.log(sp_erfc(z)), NORMAL), "gelu": (lambda z: z * norm.cdf(z), NORMAL),
    "silu": (lambda z: z * _sig(z), NORMAL), "gammaln": (sp_gammaln, POSITIVE),
    **{name: (lambda z, k=k: sp_polygamma(k, z), POSITIVE)
       for k, name in enumerate(["digamma", "trigamma"] + [f"polygamma{k}" for k in range(2, 5)])},
}

# (expression, shapes, NumPy λ of the inputs); every symbol's gradient is checked
CASES = [
    ("sum(X, 0)@u", {"X": ("a", "b"), "u": ("b",)}, lambda X, u: np.sum(X, 0) @ u),
    ("v.T@sum(X, 1)", {"X": ("a", "b"), "v": ("a",)}, lambda X, v: v @ np.sum(X, 1)),
    ("sum(exp(X), -1):v", {"X": ("a", "b"), "v": ("a",)}, lambda X, v: np.sum(np.exp(X), -1) @ v),
    ("mean(X*X)", {"X": ("a", "b")}, lambda X: np.mean(X * X)),
    ("mean(exp(X), 0)@u", {"X": ("a", "b"), "u": ("b",)}, lambda X, u: np.mean(np.exp(X), 0) @ u),
    ("mean(X, 1):v", {"X": ("a", "b"), "v": ("a",)}, lambda X, v: np.mean(X, 1) @ v),
    ("C:softmax(X, 0)", {"X": ("a", "b"), "C": ("a", "b")}, lambda X, C: np.sum(C * _softmax(X, 0))),
    ("C:softmax(X, 1)", {"X": ("a", "b"), "C": ("a", "b")}, lambda X, C: np.sum(C * _softmax(X, 1))),
    ("logsumexp(X, 0)@u", {"X": ("a", "b"), "u": ("b",)}, lambda X, u: _lse(X, 0) @ u),
    ("v.T@logsumexp(X, 1)", {"X": ("a", "b"), "v": ("a",)}, lambda X, v: v @ _lse(X, 1)),
    ("logsumexp(X)", {"X": ("a", "b")}, lambda X: float(_lse(X))),
    ("C:kron(A, B)", {"A": ("a", "b"), "B": ("c", "d"), "C": ("a*c", "b*d")},
     lambda A, B, C: np.sum(C * np.kron(A, B))),
    ("sum(exp(kron(A, x)))", {"A": ("a", "b"), "x": ("c",)},
     lambda A, x: np.sum(np.exp(np.kron(A, x[:, None])))),
    ("G:kron_sum(C, A)", {"C": ("a*c", "b*d"), "A": ("a", "b"), "G": ("c", "d")},
     lambda C, A, G: np.sum(G * _kron_sum(C, A))),
    ("sum(sin(kron_blocks(C, B)))", {"C": ("a*c", "b*d"), "B": ("c", "d")},
     lambda C, B: np.sum(np.sin(_kron_blocks(C, B)))),
    ("sum(exp(unvec(v, size(X, 0)))*X)", {"v": ("a*b",), "X": ("a", "b")},
     lambda v, X: np.sum(np.exp(_unvec(v, X.shape[0])) * X)),
    ("sum(unvec(v, 2)@X)", {"v": (12,), "X": (6, 4)}, lambda v, X: np.sum(_unvec(v, 2) @ X)),
    ("x:ones(size(x, 0)) + C:kron(ones(size(x, 0), size(B, 1)), B)", {"x": ("a",), "B": ("c", "d"), "C": ("a*c", "d*d")},
     lambda x, B, C: np.sum(x) + np.sum(C * np.kron(np.ones((len(x), B.shape[1])), B))),
    ("vec(X):y", {"X": ("a", "b")}, None),  # y's length is a·b: its oracle below
    ("sum(vec(X@B)**2)", {"X": ("a", "b"), "B": ("b", "c")}, lambda X, B: np.sum((X @ B) ** 2)),
    ("tr(matrix_power(X, 3)@A)", {"X": ("a", "a"), "A": ("a", "a")},
     lambda X, A: np.trace(np.linalg.matrix_power(X, 3) @ A)),
    ("tr(matrix_power(S, -2)@A)", {"S": ("a", "a"), "A": ("a", "a")},
     lambda S, A: np.trace(np.linalg.matrix_power(np.linalg.inv(S), 2) @ A)),
    ("sum(X)/size(X, 0) + size(X)", {"X": ("a", "b")}, lambda X: np.sum(X) / X.shape[0] + X.size),
    ("tr(A@Diag(x))", {"A": ("a", "a"), "x": ("a",)}, lambda A, x: np.trace(A @ np.diag(x))),
    ("diag(A):x", {"A": ("a", "a"), "x": ("a",)}, lambda A, x: np.diag(A) @ x),
    ("det(S) + logdet(S) + tr(inv(S)@A)", {"S": ("a", "a"), "A": ("a", "a")},
     lambda S, A: np.linalg.det(S) + np.linalg.slogdet(S)[1] + np.trace(np.linalg.inv(S) @ A)),
    ("norm2(A@x) + norm1(x)", {"A": ("a", "b"), "x": ("b",)},
     lambda A, x: np.linalg.norm(A @ x) + np.sum(np.abs(x))),
    ("softmax(A@x):y + logsumexp(A@x)", {"A": ("a", "b"), "x": ("b",), "y": ("a",)},
     lambda A, x, y: _softmax(A @ x, 0) @ y + float(_lse(A @ x))),
    ("sum(maximum(A@x, y)**2) + sum(minimum(A@x, y)*y) + sum(maximum(A@x, 0.3))",
     {"A": ("a", "b"), "x": ("b",), "y": ("a",)},
     lambda A, x, y: np.sum(np.maximum(A @ x, y) ** 2) + np.minimum(A @ x, y) @ y + np.sum(np.maximum(A @ x, 0.3))),
]
COVERED = {"sum", "mean", "softmax", "logsumexp", "kron", "kron_sum", "kron_blocks", "vec", "unvec", "ones", "matrix_power", "size", "tr", "Diag",
           "diag", "det", "logdet", "inv", "norm2", "norm1", "maximum", "minimum",
           "polygamma5", "polygamma6"}  # (the derivative of 6 is refused: test_the_polygamma_functions_end_at_order_6)


def _inputs(shapes, rng, spd=()):
    out = {}
    for name, shape in shapes.items():
        dims = tuple(d if isinstance(d, int) else int(np.prod([SIZES[f] for f in d.split("*")])) for d in shape)
        if name in spd:
            R = rng.standard_normal(dims)
            out[name] = R @ R.T / dims[0] + np.eye(dims[0])
        elif name == "X" and len(dims) == 2 and dims[0] == dims[1]:
            out[name] = np.eye(dims[0]) + 0.3 * rng.standard_normal(dims)
        else:
            out[name] = rng.standard_normal(dims)
    return out


def _check_all(expr, shapes, f, spd=()):
    rng = np.random.default_rng(7)
    inputs = _inputs(shapes, rng, spd)
    ds = matcalc.derive(expr, wrt=list(shapes), shapes=shapes)
    for w, d in ds.items():
        got = d.function(**inputs)
        want = central_fd_grad(lambda **kw: float(f(**kw)), inputs, w)
        assert np.shape(got) == np.shape(inputs[w])
        assert rel_error(got, want) < 1e-6, (expr, w, d.text)
        assert d.check().ok, (expr, w, str(d.check()))


def test_every_entry_is_complete():
    for op in REGISTRY.values():
        assert op.name and op.nargs >= 0, op
        if op.user:
            assert op.shape is not None and op.jvp is not None and op.rule, op.name
            assert op.numpy is not None or op.name in ("size", "ones"), op.name  # (typing builds them as
            # a dimension's size and the constant 1)
        if op.elementwise:
            assert op.derivative is not None and op.fold is not None and op.letter, op.name
            assert op.user or op.name in EMITTED_ONLY, op.name
        if op.transpose is not None:  # a linear operator: it has a differential too
            assert op.jvp is not None
        if op.vec is not None:  # its vec rule exists in the vec-form algebra
            from matcalc import vecform
            assert callable(getattr(vecform, "_r_" + op.name)), op.name


EMITTED_ONLY = {"erfcx"}  # made by optimize for emitted code, not in the language


def test_the_functions_only_emitted_code_uses_agree_with_their_definitions():
    from matcalc import runtime
    from matcalc.ops import _erfcx_float

    z = np.array([-5.0, -0.3, 0.0, 0.7, 4.0, 20.0])
    want = np.exp(z * z) * sp_erfc(z)
    np.testing.assert_allclose(runtime._erfcx(z), want, rtol=1e-12)
    np.testing.assert_allclose([_erfcx_float(v) for v in z], want, rtol=1e-12)
    assert runtime._erfcx(np.array([1e5]))[0] == pytest.approx(1 / (1e5 * np.sqrt(np.pi)), rel=1e-9)


def test_every_user_operator_has_an_oracle_here():
    user = {op.name for op in REGISTRY.values() if op.user}
    missing = user - set(ELEMENTWISE) - COVERED
    assert not missing, f"operators without an independent oracle in this file: {sorted(missing)}"


def test_every_identity_a_rule_names_exists():
    from matcalc.adjoint import IDENTITIES
    from matcalc import ir

    A, B = ir.sym("A", ("a", "b")), ir.sym("B", ("c", "d"))
    X = ir.sym("X", ("a", "b"))
    nodes = [ir.func("sum", X), ir.func("sum", X, attr=0), ir.func("mean", X), ir.func("mean", X, attr=1),
             ir.func("vec", X), ir.func("kron", A, B), ir.func("tr", ir.sym("S", ("n", "n"))),
             ir.func("diag", ir.sym("S", ("n", "n"))), ir.func("Diag", ir.sym("v", ("n", 1)))]
    for n in nodes:
        cot = ir.sym("C", n.shape)
        lin = tuple(True for _ in n.args)
        for i, contribution in REGISTRY[n.op].transpose(n, cot, lin)[0]:
            assert contribution.shape == n.args[i].shape, n.op
        assert REGISTRY[n.op].transpose(n, cot, lin)[1] in IDENTITIES


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_gradient(name):
    fn, (arg, arg_np) = ELEMENTWISE[name]
    expr = f"w:{name}({arg})"
    shapes = {"A": ("a", "b"), "x": ("b",), "w": ("a",)}
    _check_all(expr, shapes, lambda A, x, w: w @ fn(arg_np(A, x)))


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_text_reparses_and_folds(name):
    d = matcalc.derive(f"sum({name}(x))", wrt="x")
    again = matcalc.derive(f"sum({d.text}*x)", wrt="x")  # the printed text is valid input
    assert again.shape == d.shape
    spec = REGISTRY[name]
    assert np.isclose(spec.fold(0.25), float(ELEMENTWISE[name][0](np.array(0.25))))


@pytest.mark.parametrize("expr,shapes,f", [c for c in CASES if c[2] is not None], ids=[c[0] for c in CASES if c[2]])
def test_operator_gradient(expr, shapes, f):
    spd = ("S",) if "S" in shapes else ()
    _check_all(expr, shapes, f, spd)


def test_vec_pairs_with_a_vector_of_product_length():
    d = matcalc.derive("vec(X):y", wrt=["X", "y"], shapes={"X": ("a", "b")})
    assert d["y"].shape == ("a*b",)
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((3, 4)), rng.standard_normal(12)
    np.testing.assert_allclose(d["X"].function(X=X, y=y), y.reshape(3, 4, order="F"))
    np.testing.assert_allclose(d["y"].function(X=X, y=y), X.reshape(-1, order="F"))


def test_sizes_are_values_that_reparse():
    d = matcalc.derive("sum(alpha + x)", wrt="alpha")
    assert d.text == "size(x, 0)"
    again = matcalc.derive(f"alpha*{d.text}", wrt="alpha")
    x = np.arange(7.0)
    assert again.function(alpha=2.0, x=x) == 7.0 == d.function(alpha=2.0, x=x)
    assert "a" in d.latex


def test_attention_and_batch_cross_entropy_derive():
    att = matcalc.derive("O:(softmax(Q@K.T, 1)@V)", wrt=["Q", "K", "V"])
    for d in att.values():
        assert d.check().ok
    ce = matcalc.derive("-sum(Y*log(softmax(W@X, 0)))", wrt="W")
    assert ce.check().ok
    rng = np.random.default_rng(3)
    W, X = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    Y = np.eye(4)[:, rng.integers(0, 4, 5)]
    # the known closed form: (softmax(WX) colsum(Y) - Y) Xᵀ
    want = (_softmax(W @ X, 0) * Y.sum(0) - Y) @ X.T
    np.testing.assert_allclose(ce.function(W=W, X=X, Y=Y), want, rtol=1e-10)


def test_layer_norm_derives():
    expr = "g:(gamma*(x - mean(x)) / sqrt(mean((x - mean(x))**2) + 0.001))"
    d = matcalc.derive(expr, wrt="x")
    assert d.check().ok, str(d.check())
    rng = np.random.default_rng(5)
    g, x = rng.standard_normal(6), rng.standard_normal(6)

    def f(x):
        c = x - x.mean()
        return float(g @ (1.5 * c / np.sqrt(np.mean(c * c) + 0.001)))
    want = central_fd_grad(f, {"x": x}, "x")
    assert rel_error(d.function(g=g, x=x, gamma=1.5), want) < 1e-6


REFUSED = [
    ("sum(X, 2)", "axis 0", 8),
    ("sum(X, 0.5)", "integer", 8),
    ("sum(X, n)", "integer", 8),
    ("softmax(x, 1):x", "length 1", 1),
    ("softmax(X):X", "needs a vector", 1),
    ("tr(matrix_power(W, 2))", "square", 4),
    ("tr(matrix_power(X, 1.5))", "integer", 20),
    ("vec(X):vec(Y)", "declare the shapes", 1),
    ("sum(kron(A))", "two arguments", 5),
]


@pytest.mark.parametrize("expr,words,col", REFUSED, ids=[r[0] for r in REFUSED])
def test_refusals(expr, words, col):
    shapes = {"W": ("a", "b")} if "W" in expr else None
    with pytest.raises(matcalc.MatcalcError) as info:
        matcalc.derive(expr, wrt=next(n for n in ("X", "x", "W", "A") if n in expr), shapes=shapes)
    assert words in str(info.value), str(info.value)
    assert info.value.column == col, str(info.value)
    assert "^" in str(info.value)


@pytest.mark.parametrize("expr, shapes, grad", [
    ("sum(sum(c, 1)*c)", {"c": ("n", 1)}, lambda v: 2 * v),
    ("sum(mean(r, 0)*r)", {"r": (1, "m")}, lambda v: 2 * v),
    ("sum(logsumexp(r, 0)*r)", {"r": (1, "m")}, lambda v: 2 * v),
    ("sum(exp(sum(x, 1)))", {}, np.exp),  # x a column by its name
])
def test_a_reduction_along_an_axis_of_length_1_is_each_entry_alone(expr, shapes, grad):
    # as NumPy's c.sum(1) of a column: each entry alone (it was refused as a reduction of length 1)
    wrt = next(n for n in ("c", "r", "x") if n in expr)
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    v = np.random.default_rng(14).uniform(0.5, 1.5, 4)
    arg = v.reshape(1, -1) if shapes.get(wrt, ("n", 1))[0] == 1 else v
    np.testing.assert_allclose(np.ravel(d.function(**{wrt: arg})), grad(v), rtol=1e-12)
    assert d.check().ok and matcalc.hessian(expr, wrt, shapes=shapes).check().ok


def test_cli_refuses_a_bad_axis_with_exit_2():
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "sum(X, 3)", "--wrt", "X"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "axis" in r.stderr


def test_batch_layer_norm_with_broadcasting():
    # a row of column means broadcast over the rows, as NumPy does with a (1, n) array
    expr = "G:((X - mean(X, 0)) / sqrt(mean((X - mean(X, 0))**2, 0) + 0.001))"
    d = matcalc.derive(expr, wrt="X")
    rng = np.random.default_rng(9)
    G, X = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))

    def f(X):
        c = X - X.mean(0)
        return float(np.sum(G * c / np.sqrt((c * c).mean(0) + 0.001)))
    assert rel_error(d.function(G=G, X=X), central_fd_grad(f, {"X": X}, "X")) < 1e-6
    assert d.check().ok


def test_the_polygamma_functions_end_at_order_6():
    # SciPy's polygamma(k, x) is read for k = 0 … 6 (digamma, trigamma, …); the derivative of order 7 is refused
    x = np.array([0.3, 1.0, 4.5])
    for k in range(7):
        text = f"sum(polygamma({k}, x))"
        if k < 6:
            got = matcalc.derive(text, "x").function(x=x)
            np.testing.assert_allclose(got, sp_polygamma(k + 1, x), rtol=1e-12)
        else:
            with pytest.raises(matcalc.DeriveError, match=r"go up to polygamma\(6, x\), and this derivative needs polygamma\(7, x\)"):
                matcalc.derive(text, "x")
    y = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(matcalc.derive("sum(polygamma(6, x)*y)", "y").function(x=x, y=y),
                               sp_polygamma(6, x), rtol=1e-12)
    assert matcalc.derive("sum(polygamma(1, x))", "x").text == "polygamma(2, x)"  # SciPy's spelling, read back
    assert matcalc.derive("sum(lgamma(x))", "x").text == "digamma(x)"


def test_a_dirichlet_likelihood_and_its_hessian():
    # log p(p | α) = log Γ(Σα) − Σ log Γ(αᵢ) + Σ(αᵢ − 1) log pᵢ: the gradient and Hessian of its negative
    expr = "sum(gammaln(alpha)) - gammaln(sum(alpha)) - (alpha - 1).T@log(p)"
    shapes = {"alpha": ("k",), "p": ("k",)}
    a, p = np.array([0.7, 2.0, 3.5, 1.2]), np.array([0.1, 0.2, 0.3, 0.4])
    d = matcalc.derive(expr, "alpha", shapes=shapes)
    np.testing.assert_allclose(d.function(alpha=a, p=p), sp_polygamma(0, a) - sp_polygamma(0, a.sum()) - np.log(p),
                               rtol=1e-12)
    H = matcalc.hessian(expr, "alpha", shapes=shapes).matrix(alpha=a, p=p)
    np.testing.assert_allclose(H, np.diag(sp_polygamma(1, a)) - sp_polygamma(1, a.sum()), rtol=1e-12)
    lam = lambda a: sp_gammaln(a).sum() - sp_gammaln(a.sum()) - (a - 1) @ np.log(p)  # noqa: E731
    fd = np.array([(lam(a + h) - lam(a - h)) / 2e-6 for h in 1e-6 * np.eye(4)])
    np.testing.assert_allclose(d.function(alpha=a, p=p), fd, rtol=1e-6)
