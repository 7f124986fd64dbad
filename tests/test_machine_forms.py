"""The machine forms the emitter picks for speed: expm1 / log1p, sums as dot products with
cached ones, outer products as BLAS column-row products where they are faster.  Each must give the values of the
plain form (or better ones, where the plain form rounds)."""
import numpy as np

import matcalc
from support.fd import central_fd_grad, rel_error


def test_exp_minus_one_is_expm1_and_exact_near_zero():
    d = matcalc.derive("sum(exp(x) - 1)", wrt="x")
    x = np.array([1e-12, -3e-13, 2e-12, 5e-14])
    value = d.value_function(x=x)
    assert "np.expm1(" in d.value_function.source
    # exp(x) - 1 rounds to a multiple of 2⁻⁵² ≈ 2.2e-16 here; expm1 is exact to 1e-16 relative
    assert abs(value - np.sum(x + x * x / 2)) <= 1e-15 * np.sum(np.abs(x))
    assert rel_error(d.function(x=x), np.exp(x)) < 1e-15


def test_expm1_is_not_used_when_exp_is_needed_anyway():
    """exp(z) used twice: one exp, and the - 1 stays a subtraction (expm1 would be a second
    transcendental pass over the array)."""
    vg = matcalc.value_and_grad("sum(exp(W@x) - 1) + exp(W@x):y", wrt=["W"],
                                shapes={"W": ("a", "b"), "x": ("b",), "y": ("a",)})
    body = vg.numpy_source.split('"""')[-1]
    assert body.count("np.exp(") + body.count("np.expm1(") == 1, body


def test_log_one_plus_is_log1p_and_exact_near_zero():
    d = matcalc.derive("sum(log(1 + x*x))", wrt="x")
    x = np.array([1e-9, 2e-9, -3e-9])
    assert "np.log1p(" in d.value_function.source
    value = d.value_function(x=x)
    # log(1 + 1e-18) rounds to 0; log1p keeps it
    assert abs(value - np.sum(x * x)) <= 1e-12 * np.sum(x * x)
    y = np.array([0.3, -1.7, 2.5])
    assert rel_error(d.function(x=y), central_fd_grad(lambda x: float(np.sum(np.log(1 + x ** 2))),
                                                    {"x": y}, "x")) < 1e-7


def test_sums_of_vectors_and_matrices_agree_with_numpy():
    rng = np.random.default_rng(1)
    for expr, shapes in (("sum(exp(x))", {"x": ("n",)}), ("sum(exp(A))", {"A": ("m", "n")}),
                         ("exp(A):1", {"A": ("m", "n")})):
        d = matcalc.derive(expr, wrt=list(shapes)[0], shapes=shapes)
        rank = len(next(iter(shapes.values())))
        for dims in ((1, 1), (5, 2), (7, 11), (257, 3)):
            arg = rng.standard_normal(dims[:rank])
            value = d.value_function(**{list(shapes)[0]: arg})
            assert abs(value - np.exp(arg).sum()) <= 1e-13 * np.exp(arg).sum()


def test_cached_ones_are_never_handed_out_and_stay_bounded():
    d = matcalc.derive("sum(x*x) + sum(x)", wrt="x")
    f = d.value_function
    for n in range(1, 90):  # more distinct sizes than the cache keeps
        x = np.arange(float(n))
        assert f(x=x) == np.sum(x * x) + np.sum(x)
    ones = f._f.__globals__["_ONES"]
    assert 0 < len(ones) <= 65
    assert all(not v.flags.writeable and np.all(v == 1.0) for v in ones.values())
    g = d.function(x=np.zeros(4))  # ∂/∂x = 2x + 1: a new writable array
    g[:] = 7.0
    assert np.all(d.function(x=np.zeros(4)) == 1.0)


def test_outer_products_small_and_large_are_exact():
    """a:(W@x) wrt W is a xᵀ: a BLAS product or a broadcast multiply, whichever the machine
    runs faster; both are single products, so they equal np.outer bit for bit."""
    d = matcalc.derive("a:(W@x)", wrt="W", shapes={"W": ("m", "n"), "a": ("m",), "x": ("n",)})
    rng = np.random.default_rng(2)
    for m, n in ((3, 5), (700, 749), (800, 700), (512, 512)):
        a, x = rng.standard_normal(m), rng.standard_normal(n)
        got = d.function(a=a, x=x, W=np.zeros((m, n)))
        assert got.shape == (m, n)
        assert np.array_equal(got, np.outer(a, x))
