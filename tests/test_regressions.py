"""Failures the random soundness runs found, each kept as a named test."""
import subprocess
import sys

import numpy as np
import pytest

import matcalc
from support.fd import central_fd_grad, rel_error
from support.exprgen import eval_text  # the generator's own independent evaluator of matcalc text

CASES = [
    # ᵀ right after .T or ^T was read as part of a name
    ("transpose_then_unicode_transpose", "x.Tᵀ:y", {}, "x"),
    ("caret_T_then_unicode_transpose", "sum(x^Tᵀ)", {}, "x"),
    # u.T - u.T cancelled and took the broadcast shape of τ with it
    ("cancellation_keeps_broadcast", "(tau + u.T - u.T)@p", {}, "p"),
    ("cancellation_inside_a_function", "sin(mu.T - tau - mu.T - sum(W1))@sigmoid(Y@(w*w))", {"mu": ("n",)}, "tau"),
    # step(w) emitted as a boolean mask was then negated
    ("negated_step_mask", "-(step(w):w)", {}, "w"),
    # A@u + vᵀ@u (a vector plus a broadcast scalar) was factored as (A + vᵀ)@u
    ("common_factor_of_a_broadcast_term", "(A@u + v.T@u):w", {}, "u"),
    ("common_factor_of_a_broadcast_term_wrt_A", "(A@u + v.T@u):w", {}, "A"),
    ("common_factor_inside_a_function", "sin(B@c + c.T@c):y", {}, "c"),
    # h of a Diag(h) used three times was written out three times, and sin(t, out=t) in it
    # then ran three times on the same t
    ("in_place_function_under_a_shared_diag", "diag(X.T*W@relu(X)).T@(sin(Y/exp(C.T)@W0)@y^T.T)",
     {"C": ("n", "a"), "W": ("a", "m"), "W0": ("n", "a"), "X": ("m", "a"), "Y": ("a", "n"), "y": ("a",)}, "X"),
]


@pytest.mark.parametrize("name,expr,shapes,wrt", CASES, ids=[c[0] for c in CASES])
def test_regression(name, expr, shapes, wrt):
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    sizes = {}
    rng = np.random.default_rng(0)
    dims = iter(range(3, 30))
    inputs = {}
    for sym, shape in d.user_shapes.items():
        conc = tuple(sizes.setdefault(dim, next(dims)) for dim in shape)
        inputs[sym] = float(rng.standard_normal()) if conc == () else rng.standard_normal(conc)
    got = d.function(**inputs)
    fd = central_fd_grad(lambda **a: float(eval_text(expr, a)), inputs, wrt)
    assert np.shape(got) == np.shape(inputs[wrt])
    assert rel_error(got, fd) < 1e-6
    assert d.check().ok


def test_norm2_at_zero_takes_the_least_norm_subgradient():
    """norm2(relu(-q)) is flat where every q > 0: the gradient there is 0, not 0/0."""
    d = matcalc.derive("norm2(relu(-q.T)) - sin(det(U))", wrt="q")
    q = np.array([1.0, 2.0, 3.0])
    U = np.array([[1.0, 0.2], [0.1, 1.0]])
    g = d.function(q=q, U=U)
    assert np.all(g == 0.0)
    fd = central_fd_grad(lambda **a: float(eval_text("norm2(relu(-q.T)) - sin(det(U))", a)), {"q": q, "U": U}, "q")
    assert np.all(fd == 0.0)
    assert np.all(matcalc.derive("norm2(x)", wrt="x").function(x=np.zeros(4)) == 0.0)


@pytest.mark.parametrize("expr", ["norm2(log(1 + x*x))", "norm2(log(1 + step(tau)*(A@x)*(A@x)))"])
def test_norm2_inside_a_product_denominator_at_zero(expr):
    """d‖y‖ = y/‖y‖ : dy simplifies to a quotient whose denominator is ‖y‖·(1 + …): at
    y = 0 that is the least-norm subgradient 0 as well, not 0/0 (long run, seed 44)."""
    d = matcalc.derive(expr, wrt="x")
    rng = np.random.default_rng(2)
    A = rng.standard_normal((4, 3))
    zero_inputs = {"x": np.zeros(3), "A": A, "tau": -1.0}
    zero_inputs = {k: v for k, v in zero_inputs.items() if k in d.user_shapes}
    assert np.all(d.function(**zero_inputs) == 0.0)
    inputs = {**zero_inputs, "x": rng.standard_normal(3)}
    if "tau" in inputs:
        inputs["tau"] = 0.5
    fd = central_fd_grad(lambda **a: float(eval_text(expr, a)), inputs, "x")
    assert rel_error(d.function(**inputs), fd) < 1e-6


def test_a_chain_of_definitions_emits_code_linear_in_its_length():
    # the docstring once wrote λ out as a tree: 3× longer per definition (52 MB of source at 15)
    defs = {"l0": "exp(x)"}
    for i in range(1, 30):
        defs[f"l{i}"] = f"exp(l{i - 1}) + sin(l{i - 1})*l{i - 1}"
    d = matcalc.derive("sum(l29)", wrt="x", definitions=defs)
    assert len(d.numpy_source) < 20000
    assert len(d.value_function.source) < 20000
    assert "l29" in d.numpy_source.split('"""')[1]  # λ named as the user named it


def test_second_order_results_of_a_chain_of_definitions_stay_small():
    # Hessian steps and texts once wrote the gradient out as a tree (a MemoryError at 11 definitions)
    defs = {"l0": "exp(x)"}
    for i in range(1, 30):
        defs[f"l{i}"] = f"exp(l{i - 1}) + sin(l{i - 1})*l{i - 1}"
    h = matcalc.hessian("sum(l29)", wrt="x", definitions=defs)
    j = matcalc.jacobian("l29", wrt="x", definitions=defs)
    for r in (h, j):
        assert len(r.text) < 50000 and len(r.steps_latex) < 200000 and len(r.numpy_source) < 100000


def test_numpy_integers_declare_sizes():
    # X.shape of a NumPy array, or sizes computed with NumPy, are np.int64: as good as ints
    import numpy as np

    A = np.arange(6.0).reshape(2, 3)
    d = matcalc.derive("A:W", wrt="W", shapes={"W": A.shape, "A": (np.int64(2), np.int32(3))})
    assert d.user_shapes["W"] == (2, 3) and all(type(n) is int for n in d.user_shapes["A"])
    assert np.array_equal(d.function(A=A, W=np.zeros((2, 3))), A)
    assert matcalc.derive("x:x", wrt="x", shapes={"x": np.int64(4)}).user_shapes["x"] == (4,)


def test_matrix_power_zero_is_the_identity_with_no_differential():
    # dF printed "()*1" and --json ended with IndexError (exit 3): the sum of no terms
    j = matcalc.jacobian("matrix_power(C, 0)", "C")
    assert j.text == "0"
    C = np.random.default_rng(0).standard_normal((3, 3))
    assert np.allclose(j.matrix(C=C), 0)
    assert matcalc.derive("C:matrix_power(C, 0)", wrt="C").text == "I"
    r = subprocess.run([sys.executable, "-m", "matcalc", "hessian", "C:matrix_power(C, 0)", "--wrt", "C", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_logdet_of_a_matrix_power_is_k_times_logdet():
    # through inv(matrix_power(A, 64)) the gradient was [[10.81, 4.43], ...]: 64 A⁻ᵀ is exact
    A = np.array([[3.0, 1.0], [1.0, 1.0]])
    d = matcalc.derive("logdet(matrix_power(A, 64))", wrt="A")
    assert np.allclose(d.function(A=A), 64 * np.linalg.inv(A).T)
    d = matcalc.derive("det(matrix_power(A, 3))", wrt="A")
    assert np.allclose(d.function(A=A), 3 * np.linalg.det(A) ** 3 * np.linalg.inv(A).T)


def test_stable_forms_do_not_spread_products_over_every_nested_sum():
    # the Hessian of a chain of definitions whose sums nest in products: optimize spread each
    # product over each sum, recursively, to look for log(x) beside xᵏ (exponential: the emitted
    # code of 8 definitions did not finish in a minute, of 6 with a log in took over a minute)
    import time

    for body in ("exp(l{p}) + sin(l{p})*l{p}", "log(1 + l{p}**2) + sin(l{p})*l{p}"):
        n = 8 if body.startswith("exp") else 5
        defs = {"l0": "exp(x)"}
        for i in range(1, n):
            defs[f"l{i}"] = body.format(p=i - 1)
        t = time.perf_counter()
        h = matcalc.hessian(f"sum(l{n - 1})", wrt="x", definitions=defs)
        assert "def " in h.numpy_source and time.perf_counter() - t < 20
