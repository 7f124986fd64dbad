"""Values and derivatives at extreme but finite inputs, against values worked out in
mpmath at 50 digits."""
import warnings

import mpmath
import pytest
import numpy as np

import matcalc

mpmath.mp.dps = 50


def test_gelu_stays_exact_far_on_the_negative_side():
    # 1 + erf(x/√2) cancelled to 0 for x below about -8: gelu(-30) was 0
    x = np.array([-30.0, -10.0, -1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = matcalc.jacobian("gelu(x)", "x").value_function
    want = [float(mpmath.mpf(v) / 2 * mpmath.erfc(-mpmath.mpf(v) / mpmath.sqrt(2))) for v in x]
    np.testing.assert_allclose(f(x=x), want, rtol=1e-13)
    assert f(x=x)[0] < 0


def test_log_cosh_stays_finite_where_cosh_overflows():
    # the log-cosh loss: cosh(750) overflows, log cosh(750) = 749.31
    x = np.array([750.0, -800.0, 1.0, 1e-3])
    want = float(mpmath.fsum(mpmath.log(mpmath.cosh(mpmath.mpf(v))) for v in x))
    value, grads = matcalc.value_and_grad("sum(log(cosh(x)))", wrt=["x"]).function(x=x)
    assert value == pytest.approx(want, rel=1e-14)
    np.testing.assert_allclose(grads["x"], [float(mpmath.tanh(mpmath.mpf(v))) for v in x], rtol=1e-14)


def _gelu_prime(v):
    v = mpmath.mpf(v)
    return mpmath.ncdf(v) + v * mpmath.npdf(v)


def test_the_gelu_derivative_stays_exact_far_on_the_negative_side():
    # Φ(x) = (1 + erf(x/√2))/2 cancelled: the derivative was 1% off at x = -10
    x = np.array([-30.0, -10.0, -8.0, -1.0, 2.0])
    d = matcalc.derive("sum(gelu(x))", "x")
    np.testing.assert_allclose(d.function(x=x), [float(_gelu_prime(v)) for v in x], rtol=1e-12)


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_gelu_in_the_frameworks_stays_exact_far_on_the_negative_side(backend):
    # torch.nn.functional.gelu is 0 below x = -8
    module = pytest.importorskip(backend)
    if backend == "jax":
        module.config.update("jax_enable_x64", True)
    x = np.array([-15.0, -10.0, -8.5, 1.0])
    want = [float(mpmath.mpf(v) / 2 * mpmath.erfc(-mpmath.mpf(v) / mpmath.sqrt(2))) for v in x]
    f = matcalc.derive("sum(gelu(x)*y)", wrt="y").callable(backend)
    np.testing.assert_allclose(np.asarray(f(x=x, y=np.ones(4))), want, rtol=1e-12)
    g = matcalc.derive("sum(gelu(x))", wrt="x").callable(backend)
    np.testing.assert_allclose(np.asarray(g(x=x)), [float(_gelu_prime(v)) for v in x], rtol=1e-12)


@pytest.mark.parametrize("scale", [1e150, 1e-150, 1e160, 1e-200, 1.0])
def test_the_hessian_of_a_norm_stays_finite_at_large_and_small_scales(scale):
    # (x:dx)x/‖x‖² and xxᵀ/‖x‖³ overflowed or underflowed: inf, nan or 0 at ‖x‖ of 1e±150;
    # H = (I − uuᵀ)/‖x‖ with u = x/‖x‖, in exact arithmetic (mpmath)
    x = np.array([3.0, -4.0, 12.0]) * scale
    mpmath.mp.dps = 50
    xs = [mpmath.mpf(float(v)) for v in x]
    n = mpmath.sqrt(sum(v * v for v in xs))
    want = np.array([[float(((1 if i == j else 0) - xs[i] * xs[j] / n ** 2) / n) for j in range(3)]
                     for i in range(3)])
    h = matcalc.hessian("norm2(x)", "x")
    np.testing.assert_allclose(h.matrix(x=x), want, rtol=1e-13, atol=0)
    np.testing.assert_allclose(h.hvp(np.array([1.0, 2.0, -1.0]), x=x), want @ [1.0, 2.0, -1.0], rtol=1e-13)
    g = matcalc.hessian("norm2(A@x - y)", "x")
    A, y = np.eye(3), np.zeros(3)
    np.testing.assert_allclose(g.hvp(np.array([1.0, 2.0, -1.0]), A=A, x=x, y=y), want @ [1.0, 2.0, -1.0], rtol=1e-13)


def test_a_quotient_by_a_squared_norm_stays_finite():
    # x/(x:x), the gradient of log ‖x‖, was 0 at ‖x‖ of 1e200 (x:x overflows): now u/‖x‖
    x = np.array([3.0, -4.0, 12.0]) * 1e200
    np.testing.assert_allclose(matcalc.derive("log(norm2(x))", "x").function(x=x), x / 13e200 / 13e200, rtol=1e-14)


@pytest.mark.parametrize("scale", [1e110, 1e-110])
def test_the_hessian_of_a_quotient_by_a_norm_stays_finite(scale):
    # (a:x)/‖x‖: its Hessian's −(a:x)/‖x‖³·I overflowed (wrong numbers, no error) at ‖x‖ of 1e±110
    h = matcalc.hessian("(a:x)/norm2(x)", "x")
    a, x = np.array([1.0, 0.0, 0.0]), np.array([scale, 0.0, 0.0])
    np.testing.assert_allclose(np.diag(h.matrix(a=a, x=x)) * scale * scale, [0.0, -1.0, -1.0], atol=1e-12)


def test_the_hessian_of_a_saturated_log_sigmoid_keeps_its_digits():
    # -σ(-x)(1 - σ(-x)): 1 - σ(-x) rounded to 0 for x ≤ -37 (torch had it exact); σ(-x)σ(x) now
    h = matcalc.hessian("sum(logsigmoid(x))", "x")
    x = np.array([-40.0, -100.0, -700.0, 0.5, 30.0])
    mpmath.mp.dps = 50
    want = [float(-mpmath.exp(v) / (1 + mpmath.exp(v)) ** 2) for v in x]
    np.testing.assert_allclose(h.hvp(np.ones(5), x=x), want, rtol=1e-13)


def test_a_vector_given_after_an_abbreviated_option_and_the_size_of_a_square_matrix():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "--wr", "x", "-x:x"], capture_output=True,
                       text=True, timeout=60)  # (--wr took the expression for its value)
    assert r.returncode == 0 and "-2*x" in r.stdout, r.stderr
    assert matcalc.derive("mean(X)", "X", shapes={"X": ("n", "n")}).text == "1/size(X)"  # (was 1/size(X, 0)**2)


@pytest.mark.parametrize("expr", [
    "-sum(y*log(0.5*erfc(-(X@w)/sqrt(2))) + (1 - y)*log(0.5*erfc((X@w)/sqrt(2))))",
    "-sum(y*log(0.5*(1 + erf((X@w)/sqrt(2)))) + (1 - y)*log(0.5*(1 - erf((X@w)/sqrt(2)))))",
])
def test_a_probit_likelihood_stays_finite_where_erfc_underflows(expr):
    # log Φ(z) through log(erfc(−z/√2)): erfc underflows below z = −38, and the gradient was nan
    # (value inf); log Φ(z) = log erfc(−z/√2) − log 2 is taken as logerfc
    X = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    y = np.array([1.0, 0.0, 1.0])
    w = np.array([-40.0, 1000.0])
    z = [mpmath.mpf(v) for v in X @ w]
    logPhi = lambda t: mpmath.log(mpmath.ncdf(t))  # noqa: E731
    value = -mpmath.fsum(logPhi(t) if yi else logPhi(-t) for t, yi in zip(z, y))
    dz = [-mpmath.diff(logPhi, t) if yi else mpmath.diff(logPhi, -t) for t, yi in zip(z, y)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v, g = matcalc.value_and_grad(expr, wrt=["w"]).function(X=X, y=y, w=w)
        h = matcalc.hessian(expr, "w")
    assert v == pytest.approx(float(value), rel=1e-13)
    np.testing.assert_allclose(g["w"], X.T @ np.array([float(t) for t in dz]), rtol=1e-13)
    d2 = [-mpmath.diff(logPhi, t, 2) if yi else -mpmath.diff(logPhi, -t, 2) for t, yi in zip(z, y)]
    # (the second derivative, 1 − 1/z² + …, is a difference of two terms near z: 2e-10 at z = 1000)
    np.testing.assert_allclose(h.matrix(X=X, y=y, w=w), X.T @ np.diag([float(t) for t in d2]) @ X, rtol=1e-9)


@pytest.mark.parametrize("expr, sign, scale", [
    ("sum(log(erfc(x)*0.5))", 1, 0.5), ("sum(log(erfc(x)/2))", 1, 0.5), ("sum(log(sqrt(pi)*erfc(x)))", 1, None),
    ("sum(log((1 + erf(x))/2))", -1, 0.5), ("sum(log(0.5 + 0.5*erf(x)))", -1, 0.5),
    ("sum(log(0.5*erf(x) + 0.5))", -1, 0.5), ("sum(log(1 - 0.5*erfc(x)))", -1, 0.5),
    ("sum(log(erfc(x)**2))", 1, None), ("sum(log(1 - erf(x)))", 1, 1.0), ("sum(log(2 - erfc(x)))", -1, 1.0),
])
def test_every_spelling_of_log_erfc_stays_finite(expr, sign, scale):
    # each was log of an erfc that underflows at |x| ≥ 27: its gradient was nan there
    x = np.array([-60.0, -38.0, -3.0, 0.2, 5.0, 38.0, 60.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = matcalc.derive(expr, "x")
    k = 2 if "**2" in expr else 1
    want = [float(k * mpmath.diff(lambda t: mpmath.log(mpmath.erfc(sign * t)), mpmath.mpf(v))) for v in x]
    np.testing.assert_allclose(d.function(x=x), want, rtol=1e-13)
    if scale is not None:
        value = float(mpmath.fsum(mpmath.log(scale * mpmath.erfc(sign * mpmath.mpf(v))) for v in x))
        assert matcalc.value_and_grad(expr, wrt=["x"]).function(x=x)[0] == pytest.approx(value, rel=1e-13)


# Empty arrays (a dimension of 0): the values NumPy and SciPy give for the same λ, and
# gradients of the argument's shape.  The reductions were NumPy's "zero-size array to
# reduction operation maximum" error.
def _log_sum_exp(X, axis=None):
    """log Σ exp over an axis, -inf for no terms, as SciPy's logsumexp gives from 1.14 on
    (SciPy 1.13, the last for Python 3.9, raises on an empty array)."""
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(X), axis=axis))


EMPTY = [
    # (λ, wrt, shapes, the zero dimension, λ of the arrays in NumPy/SciPy)
    ("norm2(x)", "x", {"x": ("n",)}, "n", lambda x: np.linalg.norm(x)),
    ("logsumexp(x)", "x", {"x": ("n",)}, "n", lambda x: _log_sum_exp(x)),
    ("softmax(x):y", "x", {"x": ("n",), "y": ("n",)}, "n", lambda x, y: 0.0),  # (a sum of no terms:
    # SciPy's softmax of an empty array raises NumPy's reduction error)
    ("norm2(X)", "X", {"X": ("a", "b")}, "a", lambda X: np.linalg.norm(X)),
    ("sum(logsumexp(X, 0))", "X", {"X": ("a", "b")}, "a",
     lambda X: np.sum(_log_sum_exp(X, 0))),
    ("sum(logsumexp(X, 1))", "X", {"X": ("a", "b")}, "b",
     lambda X: np.sum(_log_sum_exp(X, 1))),
    ("softmax(X, 1):Y", "X", {"X": ("a", "b"), "Y": ("a", "b")}, "b", lambda X, Y: 0.0),
]


@pytest.mark.parametrize("expr,wrt,shapes,zero,numpy_value", EMPTY, ids=[c[0] for c in EMPTY])
def test_reductions_of_an_empty_array_give_numpy_s_values(expr, wrt, shapes, zero, numpy_value):
    rng = np.random.default_rng(3)
    sizes = {"n": 4, "a": 2, "b": 3, zero: 0}
    args = {k: rng.standard_normal(tuple(sizes[d] for d in dims)) for k, dims in shapes.items()}
    vg = matcalc.value_and_grad(expr, wrt=[wrt], shapes=shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (log 0, as in SciPy)
        want = numpy_value(**args)
        value, grads = vg.function(**args)
        grad = matcalc.derive(expr, wrt, shapes=shapes).function(**args)
    assert value == want
    assert grads[wrt].shape == grad.shape == args[wrt].shape


@pytest.mark.parametrize("expr", ["X.T", "vec(X.T)", "kron(X, A)"])
@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
def test_the_dense_jacobian_at_an_empty_matrix_is_empty(expr, shape):
    # a permutation of vec(X) was a reshape with -1, which has no size to infer at 0
    jac = matcalc.jacobian(expr, "X", shapes={"X": ("a", "b"), "A": ("c", "d")})
    args = {"X": np.zeros(shape), "A": np.ones((2, 3))}
    M = jac.matrix(**{k: v for k, v in args.items() if k in expr})
    out = jac.value_function(**{k: v for k, v in args.items() if k in expr})
    assert M.shape == (np.size(out), 0)


def test_the_gradient_of_a_norm_is_nan_where_the_norm_is():
    # a / ‖x‖ was taken as 0 wherever ‖x‖ > 0 failed, nan included: a gradient of zeros and one nan
    X = np.array([[1.0, np.nan, 2.0], [2.0, 3.0, 4.0]])
    assert np.isnan(matcalc.derive("norm2(X)", "X").function(X=X)).all()
    assert np.isnan(matcalc.hessian("norm2(X)", "X").hvp(np.ones((2, 3)), X=X)).all()
    np.testing.assert_array_equal(matcalc.derive("norm2(X)", "X").function(X=np.zeros((2, 3))), 0.0)


@pytest.mark.parametrize("expr,value,grad", [
    ("log(alpha)", -np.inf, np.inf),
    ("1/alpha", np.inf, -np.inf),
    ("(alpha - 1)/(alpha*alpha)", -np.inf, np.inf),
    ("beta/alpha**2", np.inf, -np.inf),
])
def test_numbers_divided_by_zero_give_numpy_s_values(expr, value, grad):
    # a function of scalars alone divided Python floats: ZeroDivisionError at alpha = 0 (exit 3
    # in the CLI), where NumPy's arrays and the frameworks give inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v, g = matcalc.value_and_grad(expr, ["alpha"]).function(alpha=0.0, **({"beta": 1.0} if "beta" in expr else {}))
        got = matcalc.derive(expr, "alpha").function(alpha=0, **({"beta": 1.0} if "beta" in expr else {}))
    np.testing.assert_equal([float(v), float(g["alpha"]), float(got)], [value, grad, grad])


def test_the_cli_evaluates_a_gradient_at_a_pole():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "matcalc", "derive", "log(alpha)", "--wrt", "alpha",
                          "--at", "alpha=0"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split()[-1] == "inf", out.stdout + out.stderr
