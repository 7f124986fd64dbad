"""Self-checks of the soundness oracle (tests/exprgen.py, tests/fd.py).

None of these use matcalc: they make sure that the generated expressions are
well-formed, that their independent NumPy evaluation means what the text
says, and that finite differences can resolve their gradients.
"""

import collections
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from support import exprgen as eg
from support.exprgen import (SCALAR, add, call, col, div, eval_text, frob, frob_ones,
                     had, identity, make_case, mat, matmul, matmul_ones, neg,
                     number, power, sub, sym, transpose)
from support.fd import (central_fd_grad, check_gradient, rel_error,
                richardson_fd_grad)

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True,
                    database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


def occurs(name, text):
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])",
                     text) is not None


# --------------------------------------------------------------------------
# properties of generated cases

@SETTINGS
@given(case=eg.expressions(), seed=st.integers(0, 2**32 - 1))
def test_generated_cases_are_well_formed(case, seed):
    assert case.expr.strip()
    assert case.wrt
    for w in case.wrt:
        assert occurs(w, case.expr), (w, case.expr)
    assert set(case.shapes) == set(case.domains)
    for name, shape in case.shapes.items():
        assert occurs(name, case.expr)
        assert len(shape) <= 2 and all(d in eg.DIMS for d in shape)
        assert case.domains[name] in ("normal", "positive", "spd", "invertible")
        if case.domains[name] in ("spd", "invertible"):
            assert len(shape) == 2 and shape[0] == shape[1]

    inputs = case.draw_inputs(np.random.default_rng(seed))
    assert set(inputs) == set(case.shapes)
    for name, shape in case.shapes.items():
        assert np.shape(inputs[name]) == tuple(eg.DEFAULT_SIZES[d] for d in shape)
        if shape == ():
            assert isinstance(inputs[name], float)

    value = case.f(**inputs)
    assert isinstance(value, float)
    assert np.isfinite(value), case
    # the text, read by an independent interpreter, means the same thing
    assert eval_text(case.expr, inputs) == pytest.approx(value, rel=1e-9, abs=1e-9)


@settings(SETTINGS, max_examples=60)
@given(case=eg.expressions(), seed=st.integers(0, 2**32 - 1))
def test_generated_gradients_are_resolvable_by_fd(case, seed):
    """A correct gradient would pass check_gradient.

    Stand-in for the true gradient: the Richardson FD with a small step,
    when it agrees with the one with a larger step (otherwise the two are
    dominated by rounding noise -- then the gradient is numerically zero and
    check_gradient's zero tolerance applies, or the stencil met a kink).
    """
    inputs = case.draw_inputs(np.random.default_rng(seed))
    for w in case.wrt:
        r1 = richardson_fd_grad(case.f, inputs, w, 1e-3)
        r2 = richardson_fd_grad(case.f, inputs, w, 2e-4)
        if rel_error(r1, r2) > 1e-7:
            continue
        res = check_gradient(r2, case.f, inputs, w)
        assert res.ok, (w, res.describe(), case)


def test_random_case_is_reproducible():
    a = [eg.random_case(np.random.default_rng(7)).expr for _ in range(3)]
    assert a[0] == a[1] == a[2]


def test_coverage_of_the_language():
    rng = np.random.default_rng(2024)
    seen = collections.Counter()
    declared = set()
    for _ in range(1500):
        case = eg.random_case(rng)
        seen.update(case.features)
        declared.update(case.declared)
    wanted = (
        set(eg.ELEMENTWISE) | set(eg.REDUCTIONS)
        | {"+", "-", ":", "*", "/", "@", "neg", "**", "T", "broadcast",
           "*∘", "*⊙", "/⊘", "T.T", "T'", "Tᵀ", "T^T",
           "@mm", "@mv", "@vm", "@dot", "@vecvec", "@outer", "ones:", "ones@",
           ":col", ":row", ":mat", "**int", "**real", "**sym", "number",
           "I", "eye", "row",
           "sym:normal", "sym:positive", "sym:spd", "sym:invertible"})
    missing = wanted - set(seen)
    assert not missing, missing
    # symbols whose declared shape overrides the default kind of their name
    assert {"mu", "k", "r", "s", "t"} <= declared


def test_exclude_removes_features():
    rng = np.random.default_rng(3)
    banned = {"det", "logdet", "inv", "unicode", "softmax"}
    for _ in range(300):
        case = eg.random_case(rng, exclude=banned)
        assert not (case.features & banned), case
        assert not re.search("[∘⊙⊘ᵀ]", case.expr)


def test_draw_inputs_domains():
    shapes = {"S": ("n", "n"), "V": ("m", "m"), "p": ("a",), "beta": (),
              "W": ("a", "b")}
    domains = {"S": "spd", "V": "invertible", "p": "positive",
               "beta": "positive", "W": "normal"}
    for seed in range(20):
        x = eg.draw_inputs(shapes, domains, np.random.default_rng(seed))
        assert x["W"].shape == (2, 3) and x["S"].shape == (5, 5)
        assert np.allclose(x["S"], x["S"].T)
        assert np.linalg.eigvalsh(x["S"]).min() >= 1 - 1e-12
        assert np.linalg.det(x["V"]) > 0
        assert np.all((x["p"] >= 0.2) & (x["p"] <= 2.0))
        assert isinstance(x["beta"], float) and 0.2 <= x["beta"] <= 2.0
    x = eg.draw_inputs(shapes, domains, np.random.default_rng(0),
                       sizes={"a": 3, "b": 4, "n": 6, "m": 2})
    assert x["W"].shape == (3, 4) and x["V"].shape == (2, 2)


# --------------------------------------------------------------------------
# hand-written cases: text, the NumPy oracle and the text interpreter all
# agree with hand-written NumPy

RNG = np.random.default_rng(12345)


def check(node, expected_text, hand):
    case = make_case(node)
    assert case.expr == expected_text
    inputs = case.draw_inputs(RNG)
    want = hand(**inputs)
    assert case.f(**inputs) == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert eval_text(case.expr, inputs) == pytest.approx(want, rel=1e-9, abs=1e-12)
    return case


def test_hand_vae_kl():
    alpha = sym("alpha", SCALAR, "positive")
    W, x = sym("W", mat("a", "b")), sym("x", col("b"))
    c, u = sym("c", col("a")), sym("u", col("a"))
    Wx = matmul(W, x)
    body = sub(add(sub(sub(call("exp", add(Wx, c)), Wx), c), had(u, u)), number(1))
    case = check(frob_ones(had(alpha, body)),
                 "alpha*(exp(W@x + c) - W@x - c + u*u - 1):1",
                 lambda alpha, W, x, c, u:
                     alpha * np.sum(np.exp(W @ x + c) - W @ x - c + u * u - 1))
    assert case.shapes == {"alpha": (), "W": ("a", "b"), "x": ("b",),
                           "c": ("a",), "u": ("a",)}
    assert case.domains["alpha"] == "positive"
    assert case.wrt == ["W", "alpha", "c", "u", "x"]


def test_hand_quadratic_form_and_outer_product():
    A, x = sym("A", mat("n", "n")), sym("x", col("n"))
    check(matmul(matmul(transpose(x), A), x), "x.T@A@x",
          lambda A, x: x @ A @ x)
    B, y, z = sym("B", mat("a", "b")), sym("y", col("a")), sym("z", col("b"))
    check(frob(B, matmul(y, transpose(z))), "B:y@z.T",
          lambda B, y, z: np.sum(B * np.outer(y, z)))
    # x@y of two column vectors is their inner product
    check(matmul(y, had(y, y)), "y@(y*y)", lambda y: np.sum(y ** 3))


def test_hand_logdet_inverse_and_norm():
    S, A = sym("S", mat("n", "n"), "spd"), sym("A", mat("n", "n"))
    check(sub(call("logdet", S), call("tr", matmul(call("inv", S), A))),
          "logdet(S) - tr(inv(S)@A)",
          lambda S, A: np.log(np.linalg.det(S)) - np.trace(np.linalg.solve(S, A)))
    M, x, y = sym("M", mat("a", "b")), sym("x", col("b")), sym("y", col("a"))
    check(power(call("norm2", sub(matmul(M, x), y)), number(2)),
          "norm2(M@x - y)**2", lambda M, x, y: np.sum((M @ x - y) ** 2))


def test_hand_logistic_loss():
    X, w, y = sym("X", mat("n", "a")), sym("w", col("a")), sym("y", col("n"))
    check(call("sum", call("log", add(number(1), call("exp", had(neg(y), matmul(X, w)))))),
          "sum(log(1 + exp(-y*(X@w))))",
          lambda X, w, y: np.sum(np.log1p(np.exp(-y * (X @ w)))))


def test_hand_unary_minus_and_associativity():
    x, y, z = sym("x", col("a")), sym("y", col("a")), sym("z", col("a"))
    check(frob_ones(neg(power(x, number(2)))), "-x**2:1",
          lambda x: -np.sum(x ** 2))
    check(frob_ones(power(neg(x), number(3))), "(-x)**3:1",
          lambda x: np.sum((-x) ** 3))
    check(frob_ones(sub(x, sub(y, z))), "(x - (y - z)):1",
          lambda x, y, z: np.sum(x - y + z))
    check(frob(sub(x, neg(y)), z), "(x - (-y)):z",
          lambda x, y, z: np.sum((x + y) * z))
    check(frob(div(x, had(y, y)), z), "x/(y*y):z",
          lambda x, y, z: np.sum(x / (y * y) * z))
    check(add(frob(x, y), frob(y, z)), "x:y + y:z",
          lambda x, y, z: x @ y + y @ z)


def test_hand_transposes_and_unicode():
    A, B, C = sym("A", mat("a", "b")), sym("B", mat("b", "n")), sym("C", mat("n", "a"))
    x, y, z = sym("x", col("m")), sym("y", col("m")), sym("z", col("m"))
    p = sym("p", col("m"), "positive")
    node = add(frob(transpose(matmul(A, B), "ᵀ"), C),
               matmul(transpose(x, "'"), div(had(y, z, "∘"), p, "⊘")))
    check(node, "(A@B)ᵀ:C + x'@(y∘z⊘p)",
          lambda A, B, C, x, y, z, p: np.sum((A @ B).T * C) + x @ (y * z / p))
    node = frob(transpose(transpose(A, "^T"), ".T"), had(A, A, "⊙"))
    check(node, "A^T.T:A⊙A", lambda A: np.sum(A ** 3))
    # x.T@A is a row vector; (x.T@A).T a column
    D = sym("D", mat("m", "b"))
    w = sym("w", col("b"))
    check(frob(transpose(matmul(transpose(x), D)), w), "(x.T@D).T:w",
          lambda x, D, w: (x @ D) @ w)


def test_hand_identity_and_ones():
    A, W, v = sym("A", mat("n", "n")), sym("W", mat("a", "b")), sym("v", col("a"))
    node = add(add(call("tr", add(A, identity("n"))), frob(matmul_ones(W), v)),
               frob_ones(W, ones_left=True))
    check(node, "tr(A + I) + W@1:v + 1:W",
          lambda A, W, v: np.trace(A) + A.shape[0] + np.sum(W, axis=1) @ v + np.sum(W))
    S, beta = sym("S", mat("b", "b"), "spd"), sym("beta", SCALAR, "positive")
    check(call("logdet", add(S, had(beta, identity("b", "eye")))),
          "logdet(S + beta*eye)",
          lambda S, beta: np.linalg.slogdet(S + beta * np.eye(len(S)))[1])
    check(call("sum", had(identity("n"), A)), "sum(I*A)", lambda A: np.trace(A))
    x = sym("x", col("n"))
    check(matmul_ones(transpose(x)), "x.T@1", lambda x: np.sum(x))


def test_hand_reductions():
    x, y = sym("x", col("n")), sym("y", col("n"))
    A = sym("A", mat("n", "n"))
    S = sym("S", mat("a", "a"), "spd")
    p = sym("p", col("n"), "positive")

    def hand(x, y, A, S, p):
        sm = np.exp(x) / np.sum(np.exp(x))
        return (np.log(np.sum(np.exp(x))) + sm @ y + np.sum(np.abs(np.diag(A)))
                + np.linalg.det(S) + np.sum(np.diag(p) @ y) + np.linalg.norm(A))

    node = add(add(add(add(add(call("logsumexp", x),
                               matmul(transpose(call("softmax", x)), y)),
                           call("norm1", call("diag", A))),
                       call("det", S)),
                   call("sum", matmul(call("Diag", p), y))),
               call("norm2", A))
    check(node, "logsumexp(x) + softmax(x).T@y + norm1(diag(A)) + det(S)"
                " + sum(Diag(p)@y) + norm2(A)", hand)


def test_hand_elementwise_zoo():
    x, p = sym("x", col("b")), sym("p", col("b"), "positive")
    names = ["sqrt", "log", "exp", "sin", "cos", "tanh", "sigmoid", "relu",
             "step", "abs", "sign", "softplus"]
    node = None
    for f in names:
        term = call(f, p if f in ("sqrt", "log") else x)
        node = term if node is None else add(node, term)
    text = " + ".join(f"{f}({'p' if f in ('sqrt', 'log') else 'x'})" for f in names)

    def hand(x, p):
        return np.sum(np.sqrt(p) + np.log(p) + np.exp(x) + np.sin(x) + np.cos(x)
                      + np.tanh(x) + 1 / (1 + np.exp(-x)) + np.where(x > 0, x, 0)
                      + (x > 0) + np.abs(x) + np.sign(x) + np.log(1 + np.exp(x)))

    check(frob_ones(node), f"({text}):1", hand)


def test_hand_powers_and_broadcast():
    p, q = sym("p", col("a"), "positive"), sym("q", col("a"), "positive")
    beta = sym("beta", SCALAR, "positive")
    node = add(add(frob_ones(power(p, beta)), frob_ones(power(q, number(-0.5)))),
               frob_ones(power(p, number(1.5))))
    check(node, "p**beta:1 + q**(-0.5):1 + p**1.5:1",
          lambda p, q, beta: np.sum(p ** beta) + np.sum(q ** -0.5) + np.sum(p ** 1.5))
    X, x = sym("X", mat("m", "n")), sym("x", col("n"))
    alpha = sym("alpha", SCALAR)
    node = add(call("sum", sub(X, number(1))), frob(add(x, alpha), x))
    check(node, "sum(X - 1) + (x + alpha):x",
          lambda X, x, alpha: np.sum(X - 1) + (x + alpha) @ x)


def test_builders_refuse_ill_typed_trees():
    W, x = sym("W", mat("a", "b")), sym("x", col("a"))
    with pytest.raises(TypeError):
        add(W, x)
    with pytest.raises(TypeError):
        matmul(W, x)
    with pytest.raises(TypeError):
        call("log", x)                 # not known to be positive
    with pytest.raises(TypeError):
        call("logdet", sym("A", mat("a", "a")))   # det > 0 not guaranteed
    with pytest.raises(TypeError):
        make_case(x)                   # not a scalar


# --------------------------------------------------------------------------
# finite differences

def test_central_fd_grad_matrix_vector_scalar():
    rng = np.random.default_rng(0)
    W, x, alpha = rng.standard_normal((2, 3)), rng.standard_normal(3), 0.7

    def f(W, x, alpha):
        return float(alpha * np.sum(np.exp(W @ x)))

    inputs = {"W": W, "x": x, "alpha": alpha}
    before = {k: np.copy(v) for k, v in inputs.items()}
    gW = central_fd_grad(f, inputs, "W")
    gx = central_fd_grad(f, inputs, "x")
    ga = central_fd_grad(f, inputs, "alpha")
    p = np.exp(W @ x)
    assert rel_error(gW, alpha * np.outer(p, x)) < 1e-8
    assert rel_error(gx, alpha * W.T @ p) < 1e-8
    assert isinstance(ga, float) and abs(ga - np.sum(p)) < 1e-7
    for k in inputs:                      # inputs are left untouched
        assert np.array_equal(inputs[k], before[k])
    assert rel_error(richardson_fd_grad(f, inputs, "W"), alpha * np.outer(p, x)) < 1e-9


def test_rel_error():
    assert rel_error(np.zeros(3), np.zeros(3)) == 0.0
    assert rel_error([1.0, 2.0], [1.0, 2.0 + 2e-6]) == pytest.approx(1e-6, rel=1e-5)
    assert rel_error(np.ones(3), np.ones((3, 1))) == float("inf")
    assert rel_error(1.0, [1.0]) == float("inf")
    assert rel_error([np.nan], [1.0]) == float("inf")
    assert rel_error(2.0, 2.0) == 0.0


def test_check_gradient_catches_a_missing_transpose():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((3, 3))
    x = rng.standard_normal(3)

    def f(A, x):
        return float(x @ A @ x)

    inputs = {"A": A, "x": x}
    assert check_gradient(np.outer(x, x), f, inputs, "A").ok
    assert check_gradient((A + A.T) @ x, f, inputs, "x").ok
    assert not check_gradient(2 * A @ x, f, inputs, "x").ok
    assert not check_gradient(((A + A.T) @ x)[:, None], f, inputs, "x").ok
    # a gradient that is zero in exact arithmetic: sum(softmax(x)) = 1
    g = lambda x: float(np.sum(np.exp(x) / np.sum(np.exp(x))))
    assert check_gradient(np.zeros(3), g, {"x": 10 * x}, "x").ok
