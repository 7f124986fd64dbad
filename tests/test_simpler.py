"""Simpler results: inverses cancel through transposes, a transposed symmetric sum reads
A + Aᵀ, no scalar on the left of ':' in the steps, ½ in LaTeX."""
import re

import numpy as np
import pytest

import matcalc


def test_inverses_cancel_through_transposes():
    d = matcalc.derive("log(det(inv(X)))", wrt="X")
    assert d.text == "-inv(X).T"
    X = 2 * np.eye(3) + np.random.default_rng(0).standard_normal((3, 3)) / 3
    assert np.allclose(d.function(X=X), -np.linalg.inv(X).T)
    assert d.check().ok


def test_transposed_sum_of_a_matrix_and_its_transpose():
    d = matcalc.derive("v.T@(A.T + A)@w", wrt="w")
    assert d.text == "(A + A.T)@v"
    rng = np.random.default_rng(1)
    A, v, w = rng.standard_normal((3, 3)), rng.standard_normal(3), rng.standard_normal(3)
    assert np.allclose(d.function(A=A, v=v, w=w), (A + A.T) @ v)


def test_no_scalar_on_the_left_of_a_frobenius_product():
    d = matcalc.derive("0.5*(exp(W1@relu(W0@x+b0)+b1) - (W1@relu(W0@x+b0)+b1) + m*m - 1):1", wrt="W0")
    for line in d.derivation_lines()[2:]:
        body = line.split("    [")[0]
        assert not re.search(r"(^|[ =(+-])-?\d+(\.\d+)?:", body), line
    assert "\\tfrac{1}{2} : " not in d.steps_latex


def test_half_in_latex():
    for expr in ("0.5*x:x + y:x", ".5*x:x + y:x"):
        d = matcalc.derive(expr, wrt="y")
        d2 = matcalc.derive("0.5*(exp(W@x) - W@x):1", wrt="W")
        assert "0.5" not in d2.latex and "\\tfrac{1}{2}" in d2.latex


def test_sizes_cancel_in_a_quotient():
    # mean(A - xᵀ) wrt x: -a/(a b) per entry, which is -1/b
    d = matcalc.derive("mean(A - x.T)", wrt="x", shapes={"A": ("a", "b"), "x": ("b",)})
    assert d.text == "-1/size(A, 1)"
    rng = np.random.default_rng(2)
    g = d.function(A=rng.standard_normal((3, 4)), x=rng.standard_normal(4))
    assert np.allclose(g, -np.ones(4) / 4)
    assert matcalc.derive("mean(x)*size(x, 0)", wrt="x").text == "1"


def test_textbook_forms_of_log_cosh_and_the_squared_hinge():
    rng = np.random.default_rng(4)
    W, x, y = rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal(3)
    d = matcalc.derive("sum(log(cosh(W@x - y)))", wrt="W")
    assert d.text == "tanh(W@x - y)@x.T"  # sinh(u)/cosh(u) is tanh(u)
    assert np.allclose(d.function(W=W, x=x, y=y), np.outer(np.tanh(W @ x - y), x))
    X, w, t = rng.standard_normal((5, 4)), rng.standard_normal(4), np.sign(rng.standard_normal(5))
    d = matcalc.derive("sum(relu(1 - y*(X@w))**2)", wrt="w", shapes={"y": ("n",)})
    assert "step" not in d.text  # relu(u)∘step(u) is relu(u)
    assert np.allclose(d.function(X=X, w=w, y=t), -2 * X.T @ (np.maximum(1 - t * (X @ w), 0) * t))


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))  # accurate in the tails (0.5(1 + tanh(z/2)) cancels at z ≪ 0)


def test_logistic_loss_with_0_1_labels_reads_as_the_textbook():
    # -Σ y log σ(Xw) + (1-y) log(1-σ(Xw)): the textbook gradient is Xᵀ(σ(Xw) − y)
    rng = np.random.default_rng(3)
    X, w = rng.standard_normal((7, 4)), rng.standard_normal(4)
    y = (rng.random(7) > 0.5).astype(float)
    for expr in ("-(y:log(sigmoid(X@w)) + (1-y):log(1-sigmoid(X@w)))",
                 "-sum(y*log(sigmoid(X@w)) + (1-y)*log(1-sigmoid(X@w)))"):
        d = matcalc.derive(expr, wrt="w")
        assert d.text == "X.T@(sigmoid(X@w) - y)"
        assert np.allclose(d.function(X=X, w=w, y=y), X.T @ (_sigmoid(X @ w) - y))


def test_complementary_sigmoids_are_not_expanded_into_a_cubic():
    # d/dz σ(z)σ(-z) = σ(z)σ(-z)(σ(-z) - σ(z)); σ + 2σ³ - 3σ² would cancel to noise at z = 30,
    # and so did (1 - σ(z)) - (1 - σ(-z)) at z = -25
    d = matcalc.derive("sigmoid(z):sigmoid(-z)", wrt="z")
    z = np.array([30.0, -25.0, 0.5])
    s, t = _sigmoid(z), _sigmoid(-z)
    assert np.allclose(d.function(z=z), s * t * (t - s), rtol=1e-9, atol=0)


@pytest.mark.parametrize("expr, wrt, text, closed", [
    ("sum((x-m)**2/(2*s**2))", "s", "-(x - m)**2/s**3",     # was -4*(x - m)**2*s/(4*s**4)
     lambda x, m, s, y: -(x - m) ** 2 / s ** 3),
    ("sum(y/(3*x))", "x", "-y/(3*x**2)", lambda x, m, s, y: -y / (3 * x ** 2)),  # was -3*y/(9*x**2)
    ("sum(6*y/(9*x))", "x", "-2*y/(3*x**2)", lambda x, m, s, y: -2 * y / (3 * x ** 2)),
    ("sum(x**3/x**5)", "x", "-2/x**3", lambda x, m, s, y: -2 / x ** 3),
    # decimals: was 0.001/(0.003*x**2) - 6e-06/(9e-06*x**2), -0.7*y/(0.48999999999999994*x**2)
    ("sum(1e-3*x/(3e-3*x**2))", "x", "-1/(3*x**2)", lambda x, m, s, y: -1 / (3 * x ** 2)),
    ("sum(y/(0.7*x))", "x", "-10*y/(7*x**2)", lambda x, m, s, y: -y / (0.7 * x ** 2)),
    ("sum(1e-9*y/(3*x))", "x", "-1e-09*y/(3*x**2)", lambda x, m, s, y: -1e-9 * y / (3 * x ** 2)),
    ("sum(0.5*y/(1.5*x))", "x", "-y/(3*x**2)", lambda x, m, s, y: -y / (3 * x ** 2)),
])
def test_numbers_and_powers_cancel_in_a_quotient(expr, wrt, text, closed):
    d = matcalc.derive(expr, wrt=wrt)
    assert d.text == text
    rng = np.random.default_rng(1)
    vals = {"x": rng.uniform(1, 2, 4), "m": rng.standard_normal(4), "y": rng.standard_normal(4),
            "s": rng.uniform(1, 2, 4)}
    assert np.allclose(d.function(**{k: vals[k] for k in d.function.params}), closed(**vals))


def test_log_abs_det_and_a_negated_sum_of_negative_terms():
    d = matcalc.derive("log(abs(det(X)))", wrt="X")
    assert d.text == "inv(X).T"  # was sign(det(X))*det(X)*inv(X).T/abs(det(X))
    X = np.random.default_rng(2).standard_normal((4, 4))
    assert np.allclose(d.function(X=X), np.linalg.inv(X).T)
    h = matcalc.hessian("tr(inv(X)@A)", "X")
    assert not h.text.startswith("-(-")  # -(-a - b) reads a + b
    A, V = np.random.default_rng(3).standard_normal((2, 4, 4))
    Xi = np.linalg.inv(X)  # d²tr(X⁻¹A) along V: 2 tr(X⁻¹VX⁻¹VX⁻¹A), so H[V] = (X⁻¹VX⁻¹AX⁻¹ + X⁻¹AX⁻¹VX⁻¹)ᵀ
    want = (Xi @ V @ Xi @ A @ Xi + Xi @ A @ Xi @ V @ Xi).T
    assert np.allclose(h.hvp(V, X=X, A=A), want)


def test_trial_rewrites_of_nested_sums_stay_linear(monkeypatch):
    # each level's trial (opening 2*(c + ...), σ(z) against σ(-z)) redid every level inside it
    import matcalc.simplify as ms

    def calls(depth):
        e = "u"
        for i in range(depth):
            e = f"exp(a{i})*sigmoid(z) + exp(b{i})*exp(d{i})*sigmoid(-z) + 2*(c{i} + {e})"
        count = [0]
        real = ms._s_add

        def counted(terms):
            count[0] += 1
            return real(terms)

        monkeypatch.setattr(ms, "_s_add", counted)
        ms._cache.clear()
        matcalc.derive(f"sum(exp({e}))", wrt="u")
        monkeypatch.setattr(ms, "_s_add", real)
        return count[0]

    assert calls(10) < 3 * calls(5)  # was 16× (637 calls at depth 6, 10,701 at 10)


@pytest.mark.parametrize("expr, text, k", [("tr(X@X@X)", "3*(X@X).T", 3),
                                            ("tr(matrix_power(X, 3))", "3*(X@X).T", 3),
                                            ("tr(X@X@X@X)", "4*(X@X@X).T", 4),
                                            ("tr(X@X@X@X@X)", "5*(X@X@X@X).T", 5)])
def test_transposed_products_collect_as_like_terms(expr, text, k):
    # (X@X).T + 2*X.T@X.T: one term, 3(X²)ᵀ, the textbook gradient of tr(X³); for X⁴ the
    # terms (X³)ᵀ and (X²)ᵀXᵀ are one too, k(Xᵏ⁻¹)ᵀ
    d = matcalc.derive(expr, wrt="X")
    assert d.text == text
    X = np.random.default_rng(5).standard_normal((4, 4))
    assert np.allclose(d.function(X=X), k * np.linalg.matrix_power(X, k - 1).T)


@pytest.mark.parametrize("expr, text, grad", [
    ("x.T@x*x.T@x", "4*(x.T@x)*x", lambda x, y: 4 * (x @ x) * x),     # was 2*(x.T@x + sum(x**2))*x
    ("sum(x*x)*(x:x)", "4*(x.T@x)*x", lambda x, y: 4 * (x @ x) * x),
    ("x.T@y + y.T@x + sum(x*y)", "3*y", lambda x, y: 3 * y),           # x:y in three spellings
])
def test_an_inner_product_in_any_spelling_is_one_term(expr, text, grad):
    d = matcalc.derive(expr, wrt="x")
    assert d.text == text
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal(4), rng.standard_normal(4)
    np.testing.assert_allclose(d.function(**{k: v for k, v in dict(x=x, y=y).items() if k in d.function.params}),
                               grad(x, y), rtol=1e-12)
    assert matcalc.jacobian("x:x", "x").text == "2*(dx:x)"  # dx:x + x:dx


def test_diagonals_of_the_identity_and_of_transposes():
    # tr(Diag(x)) read diag(I); tr(W.T*W) read I*W.T + (I*W).T: only diagonals remain
    assert matcalc.derive("tr(Diag(x))", "x").text == "1"
    d = matcalc.derive("tr(W.T@W*I)", "W")  # (@ then *: I∘(WᵀW))
    W = np.random.default_rng(7).standard_normal((4, 4))
    np.testing.assert_allclose(d.function(W=W), 2 * W, rtol=1e-12)
    d = matcalc.derive("tr(X*X.T)**2", "X")
    assert d.text == "4*tr(X*X.T)*I*X"  # was 2*tr(X*X.T)*((I*X).T + I*X.T)
    np.testing.assert_allclose(d.function(X=W), 4 * np.trace(W * W.T) * np.diag(np.diag(W)), rtol=1e-12)


def test_quotients_over_powers_of_one_sum_share_the_highest():
    # 1/s − u²/s³ = 1/s³ for s = sqrt(u² + 1), since s² = u² + 1: the Hessian of a
    # pseudo-Huber-like loss as the textbook writes it; d/dx x/(1 + x²) = (1 − x²)/(1 + x²)²
    h = matcalc.hessian("sum(sqrt(1 + (A@x - b)**2))", "x")
    assert h.kron == "A.T@Diag(1/sqrt((A@x - b)**2 + 1)**3)@A"
    rng = np.random.default_rng(9)
    A, x, b = rng.standard_normal((5, 3)), rng.standard_normal(3), rng.standard_normal(5)
    u = A @ x - b
    np.testing.assert_allclose(h.matrix(A=A, x=x, b=b), A.T @ np.diag((1 + u ** 2) ** -1.5) @ A, rtol=1e-12)
    d = matcalc.derive("sum(x/(1 + x**2))", "x")
    assert d.text == "(1 - x**2)/(x**2 + 1)**2"
    np.testing.assert_allclose(d.function(x=x), (1 - x ** 2) / (1 + x ** 2) ** 2, rtol=1e-12)
    # a term without the sum in its denominator stays apart
    d = matcalc.derive("sum(x/(1 + x**2)) + sum(exp(x))", "x")
    assert d.text == "exp(x) + (1 - x**2)/(x**2 + 1)**2"


def test_a_frobenius_product_with_the_identity_is_a_trace():
    # the GP evidence in the noise variance read inv(K + s2*I).T@(…):I
    d = matcalc.derive("logdet(K + s2*I) + y.T@inv(K + s2*I)@y", "s2", shapes={"s2": ()})
    assert d.text.startswith("tr(") and ":I" not in d.text
    rng = np.random.default_rng(16)
    R = rng.standard_normal((4, 4))
    K, y = R @ R.T, rng.standard_normal(4)
    Ai = np.linalg.inv(K + 0.3 * np.eye(4))
    assert abs(d.function(K=K, y=y, s2=0.3) - (np.trace(Ai) - y @ Ai @ Ai @ y)) < 1e-12


def test_a_number_and_an_array_of_ones_in_one_sum_fold():
    # sum(x - mean(x)) has gradient 1 - 1: a number and an array of ones that printed apart
    d = matcalc.derive("sum(x - mean(x))", wrt="x")
    assert d.text == "0"
    assert np.allclose(d.function(x=np.arange(4.0)), 0)


@pytest.mark.parametrize("expr, wrt, text, closed", [
    ("sum((x-mean(x))**2)", "x", "2*(x - mean(x))", lambda x: 2 * (x - x.mean())),
    ("mean((x-mean(x))**2)", "x", "2*(x - mean(x))/size(x, 0)", lambda x: 2 * (x - x.mean()) / x.size),
    ("sum((X-mean(X))**2)", "X", "2*(X - mean(X))", lambda x: 2 * (x - x.mean())),
])
def test_the_variance_gradient_reads_as_the_textbook(expr, wrt, text, closed):
    # was 2*(x - mean(x) - sum(x - mean(x))*1/size(x, 0)): sum(x - mean(x)) is 0
    d = matcalc.derive(expr, wrt=wrt)
    assert d.text == text
    v = np.random.default_rng(7).standard_normal((3, 4) if wrt == "X" else 5)
    assert np.allclose(d.function(**{wrt: v}), closed(v))


@pytest.mark.parametrize("expr, wrt, text", [
    ("sum(-3*x/(-9*y))", "x", "1/(3*y)"), ("sum(3*x/(-9*y))", "x", "-1/(3*y)"),  # was -1/(-3*y)
    ("sum(x**-2 + 1/x**2)", "x", "-4/x**3"),  # x**-2 and 1/x**2 are like terms
])
def test_quotient_signs_and_negative_powers(expr, wrt, text):
    d = matcalc.derive(expr, wrt=wrt)
    assert d.text == text and d.check().ok


def test_logdet_through_transposes_inverses_scalars_and_matlab_powers():
    A = np.array([[3.0, 1.0], [1.0, 1.0]])
    want = 64 * np.linalg.inv(A).T  # through (A⁶⁴)⁻¹ every digit was wrong
    for expr, sign in [("logdet(matrix_power(A, 64).T)", 1), ("logdet(2*matrix_power(A, 64))", 1),
                       ("logdet(inv(matrix_power(A, 64)))", -1)]:
        assert np.allclose(matcalc.derive(expr, "A").function(A=A), sign * want)
    d = matcalc.derive("log(det(A^20))", "A", syntax="matlab")
    assert np.allclose(d.function(A=A), 20 * np.linalg.inv(A).T)


def test_n_times_mean_is_sum_only_where_n_is_all_the_entries():
    # X declared (3, n): n·mean(X) is sum(X)/3, not sum(X) (the rule kept only the symbolic n)
    X = np.random.default_rng(0).standard_normal((3, 4))
    d = matcalc.derive("size(X,1)*mean(X)*alpha", wrt="alpha", shapes={"X": (3, "n")})
    assert np.isclose(d.function(X=X, alpha=2.0), X.sum() / 3)
    assert np.isclose(d.value_function(X=X, alpha=2.0), 2 * X.sum() / 3)
    d = matcalc.derive("sum((X - mean(X))**2)", wrt="X", shapes={"X": (3, "n")})
    assert np.allclose(d.function(X=X), 2 * (X - X.mean()))


def _draw(shapes, rng):
    out = {}
    for k, s in shapes.items():
        out[k] = rng.standard_normal(s) if s else float(rng.standard_normal())
    return out


@pytest.mark.parametrize("expr, wrt, shapes, text, closed", [
    # XᵀX and (XᵀX)⁻¹ are symmetric by their form: was X@(inv(X.T@X).T + inv(X.T@X))
    ("logdet(X.T@X)", "X", {"X": (6, 3)}, "2*X@inv(X.T@X)",
     lambda X: 2 * X @ np.linalg.inv(X.T @ X)),
    # a transposed chain is taken apart when that leaves no more transposes: was (A@X.T@B).T@C.T + B@X@C@A
    ("tr(A@X.T@B@X@C)", "X", {"A": (3, 5), "X": (4, 5), "B": (4, 4), "C": (5, 3)}, "B.T@X@A.T@C.T + B@X@C@A",
     lambda A, X, B, C: B.T @ X @ A.T @ C.T + B @ X @ C @ A),
    ("x.T@A.T@A@x", "x", {"x": (4,), "A": (3, 4)}, "2*A.T@A@x",  # was 2*(x.T@A.T@A).T
     lambda x, A: 2 * A.T @ A @ x),
    # products sharing a factor are one product even where another term does not share it
    ("x.T@A@x + b.T@x", "x", {"x": (4,), "A": (4, 4), "b": (4,)}, "b + (A.T + A)@x",
     lambda x, A, b: b + (A.T + A) @ x),
])
def test_textbook_forms_of_products(expr, wrt, shapes, text, closed):
    d = matcalc.derive(expr, wrt=wrt, shapes={k: tuple(f"n{v}" for v in s) for k, s in shapes.items()})
    assert d.text == text
    vals = _draw(shapes, np.random.default_rng(5))
    np.testing.assert_allclose(d.function(**vals), closed(**vals), rtol=1e-10)


def _spd(n, rng):
    R = rng.standard_normal((n, n))
    return R @ R.T / n + np.eye(n)


@pytest.mark.parametrize("expr, text, closed", [
    # the Gaussian process evidence: was 0.5*(inv(K)@(I - y@y.T@inv(K)) + (inv(K)@(I - y@y.T@inv(K))).T)
    ("y.T@inv(K)@y + logdet(K)", "inv(K) - inv(K)@y@y.T@inv(K)",
     lambda K, y: np.linalg.inv(K) - np.linalg.inv(K) @ np.outer(y, y) @ np.linalg.inv(K)),
    ("0.5*(logdet(K) + tr(inv(K)@(y - m)@(y - m).T))", "0.5*(inv(K) - inv(K)@(y - m)@(y - m).T@inv(K))",
     lambda K, y, m: 0.5 * (np.linalg.inv(K) - np.linalg.inv(K) @ np.outer(y - m, y - m) @ np.linalg.inv(K))),
])
def test_a_symmetric_gradient_multiplied_out_is_not_averaged_with_its_transpose(expr, text, closed):
    d = matcalc.derive(expr, wrt="K", symmetric=["K"])
    assert d.text == text
    rng = np.random.default_rng(6)
    vals = {"K": _spd(4, rng), "y": rng.standard_normal(4), "m": rng.standard_normal(4)}
    vals = {k: vals[k] for k in d.function.params}
    np.testing.assert_allclose(d.function(**vals), closed(**vals), rtol=1e-10)
    assert d.check().ok


def test_signs_gather_in_front_of_a_term_and_of_a_sum_times_a_matrix():
    # a step read -y:dz + -sum(y)*-(s:dz); the Gaussian's gradient 0.5*(-inv(S).T - inv(S))@(x - m)
    d = matcalc.derive("-y.T@log(softmax(W@x + b))", wrt="W")
    lines = d.derivation_lines()
    assert any("-y:dz + sum(y)*(s:dz)" in line for line in lines), lines
    assert not any(re.search(r"\+ -|\*-", line.split("    [")[0]) for line in lines), lines
    g = matcalc.derive("-0.5*(x - m).T@inv(S)@(x - m)", wrt="x")
    assert g.text == "-0.5*(inv(S).T + inv(S))@(x - m)"
    rng = np.random.default_rng(9)
    S, x, m = 2 * np.eye(4) + rng.standard_normal((4, 4)) / 4, rng.standard_normal(4), rng.standard_normal(4)
    np.testing.assert_allclose(g.function(S=S, x=x, m=m), -0.5 * (np.linalg.inv(S).T + np.linalg.inv(S)) @ (x - m))


@pytest.mark.parametrize("expr, wrt, text, closed", [
    ("tr(alpha*I + S)", "alpha", "size(S, 0)", lambda S, X, y, w, **_: S.shape[0]),  # was sum(I**2)
    ("sum(alpha + X, 0):y.T", "alpha", "size(X, 0)*sum(y)", lambda S, X, y, w, **_: X.shape[0] * y.sum()),  # sum(1@y.T)
    ("lambda*w.T@w/2", "lambda", "0.5*w.T@w", lambda S, X, y, w, **_: 0.5 * w @ w),  # was 0.5*sum(w.T**2)
])
def test_identity_and_ones_fold_so_the_result_reads_back(expr, wrt, text, closed):
    d = matcalc.derive(expr, wrt=wrt, shapes={"X": ("n", "k"), "y": ("k",), "S": ("m", "m")})
    assert d.text == text
    rng = np.random.default_rng(10)
    vals = dict(S=rng.standard_normal((3, 3)), X=rng.standard_normal((5, 4)), y=rng.standard_normal(4),
                w=rng.standard_normal(6), alpha=0.7, **{"lambda": 0.3})
    np.testing.assert_allclose(d.function(**{p: vals[p] for p in d.function.params}), closed(**vals))
    back = matcalc.derive(f"({text})*{wrt}", wrt=wrt, shapes={"X": ("n", "k"), "y": ("k",), "S": ("m", "m")})
    np.testing.assert_allclose(back.function(**{p: vals[p] for p in back.function.params}), closed(**vals))


@pytest.mark.parametrize("expr, syntax, text, closed", [
    # the |k| terms of d Xᵏ merge: was 2*matrix_power(X, 4).T + matrix_power(X, 3).T@X.T + …
    ("tr(matrix_power(X, 5))", "matcalc", "5*matrix_power(X, 4).T", lambda X: 5 * np.linalg.matrix_power(X, 4).T),
    ("tr(matrix_power(X, -3))", "matcalc", "-3*matrix_power(X, -4).T",
     lambda X: -3 * np.linalg.matrix_power(np.linalg.inv(X), 4).T),
    # MATLAB's X^k is matrix_power(X, k): det(X^-2) was a product of eight inverses
    ("det(X^-2)", "matlab", "-2*det(X)^-2*inv(X)'", lambda X: -2 * np.linalg.det(X) ** -2 * np.linalg.inv(X).T),
    ("trace(X^4)", "matlab", "4*(X^3)'", lambda X: 4 * np.linalg.matrix_power(X, 3).T),
])
def test_powers_of_one_matrix_merge(expr, syntax, text, closed):
    d = matcalc.derive(expr, wrt="X", syntax=syntax)
    assert d.text == text
    X = 2 * np.eye(4) + np.random.default_rng(12).standard_normal((4, 4)) / 3
    np.testing.assert_allclose(d.function(X=X), closed(X), rtol=1e-10)


@pytest.mark.parametrize("expr, wrt, text, closed", [
    # a/d + b/d = (a + b)/d, then the products group: was A.T@x/(x.T@x) + A@x/(x.T@x) - …
    ("x.T@A@x/(x.T@x)", "x", "(A.T + A)@x/(x.T@x) - 2*(x.T@A@x)*x/(x.T@x)**2",
     lambda x, A, S: (A.T + A) @ x / (x @ x) - 2 * (x @ A @ x) * x / (x @ x) ** 2),
    # sqrt(b) is b**0.5 where powers of b cancel: was -0.5*det(S)*inv(S).T/sqrt(det(S))**3
    ("1/sqrt(det(S))", "S", "-0.5*inv(S).T/sqrt(det(S))",
     lambda x, A, S: -0.5 * np.linalg.inv(S).T / np.sqrt(np.linalg.det(S))),
    ("sum(sqrt(x)*x)", "x", "1.5*sqrt(x)", lambda x, A, S: 1.5 * np.sqrt(x)),
])
def test_quotients_over_one_denominator_and_square_roots(expr, wrt, text, closed):
    d = matcalc.derive(expr, wrt=wrt)
    assert d.text == text
    rng = np.random.default_rng(17)
    vals = {"x": rng.uniform(0.5, 2.0, 4), "A": rng.standard_normal((4, 4)),
            "S": 2 * np.eye(4) + rng.standard_normal((4, 4)) / 4}
    np.testing.assert_allclose(d.function(**{p: vals[p] for p in d.function.params}), closed(**vals), rtol=1e-10)


def test_a_row_norm_gradient_pulls_row_constants_out_of_row_sums():
    # layer norm over rows: sum(X - mean(X, 1)@1.T, 1) = 0 and sum(u@1.T∘C, 1) = u∘sum(C, 1)
    # (the gradient was 462 characters, with that zero sum in it)
    d = matcalc.derive("G:((X - mean(X,1))/sqrt(mean((X - mean(X,1))**2,1) + eps))", wrt="X", shapes={"eps": ()})
    assert len(d.text) < 300 and "sum(X - mean(X, 1)@1.T, 1)" not in d.text
    rng = np.random.default_rng(18)
    G, X, eps = rng.standard_normal((3, 5)), rng.standard_normal((3, 5)), 0.1
    m = X.mean(1, keepdims=True)
    s = np.sqrt(((X - m) ** 2).mean(1, keepdims=True) + eps)
    xh = (X - m) / s
    want = (G - G.mean(1, keepdims=True) - xh * (G * xh).mean(1, keepdims=True)) / s  # the textbook form
    np.testing.assert_allclose(d.function(G=G, X=X, eps=eps), want, rtol=1e-10)


def test_a_number_in_a_sum_stays_when_products_in_it_are_grouped():
    # b + Aᵀx + Ax grouped to b + (Aᵀ + A)x dropped a number added to the same sum
    rng = np.random.default_rng(19)
    A, B, x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal(4)
    d = matcalc.derive("sum(exp(A@x + B@x + y + 3))", wrt="y")
    np.testing.assert_allclose(d.function(A=A, B=B, x=x, y=y), np.exp(A @ x + B @ x + y + 3), rtol=1e-12)
    X, C = rng.standard_normal((5, 4)), rng.standard_normal((5, 3))
    d = matcalc.derive("sum(sin(X@A + X@B + C - 1.5))", wrt="C")
    np.testing.assert_allclose(d.function(X=X, A=A, B=B, C=C), np.cos(X @ A + X @ B + C - 1.5), rtol=1e-12)


def test_only_a_sum_spread_over_the_array_makes_a_softmax():
    # sum(exp(Z), 0)@1 is the sum of every entry (a 1×1), not the column sums spread out
    rng = np.random.default_rng(20)
    Y, Z = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    d = matcalc.derive("sum(Y*log(exp(Z)/(sum(exp(Z),0)@1)))", wrt="Z")
    want = Y - Y.sum() * np.exp(Z) / np.exp(Z).sum()
    np.testing.assert_allclose(d.function(Y=Y, Z=Z), want, rtol=1e-10)
    d = matcalc.derive("sum(Y*log(exp(Z)/(1@sum(exp(Z),0))))", wrt="Z")  # the column sums spread: softmax
    assert "softmax(Z, 0)" in d.text
    np.testing.assert_allclose(d.function(Y=Y, Z=Z), Y - Y.sum(0) * np.exp(Z) / np.exp(Z).sum(0), rtol=1e-10)


def test_a_row_sum_of_row_constants_is_the_row_length_times_them():
    # sum(u@1.T/(w@1.T), 1) is size(X, 1)*u/w: the 1.T of the first form has no size to read back
    d = matcalc.derive("sum(u*(X - mean(X,1))/sqrt(mean((X - mean(X,1))**2,1) + 1e-5))", wrt="X")
    assert "size(X, 1)*u/" in d.text
    back = matcalc.derive(f"R:({d.text})", wrt="R", shapes={"R": ("a", "b"), "X": ("a", "b")})
    rng = np.random.default_rng(21)
    u, X, R = rng.standard_normal(4), rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    np.testing.assert_allclose(back.function(R=R, X=X, u=u), d.function(u=u, X=X), rtol=1e-12)


def test_a_number_spread_over_an_array_keeps_its_count_in_the_text():
    # M/s - M/s + 1/s is 1/s spread over M's 4×3 entries: the text read -sum(1 - tanh(…)**2)*…,
    # which re-reads as a scalar and loses the factor 12 (the emitted function had it right)
    d = matcalc.derive("sum(tanh(M/sqrt(v.T@v+1) - M/sqrt(v.T@v+1) + 1/sqrt(v.T@v+1)))", wrt="v",
                       shapes={"M": (4, 3), "v": (5,)})
    assert d.text == "-12*(1 - tanh(1/sqrt(v.T@v + 1))**2)*v/sqrt(v.T@v + 1)**3"
    rng = np.random.default_rng(23)
    v, M = rng.standard_normal(5), rng.standard_normal((4, 3))
    s = np.sqrt(v @ v + 1)
    np.testing.assert_allclose(d.function(v=v, M=M), -12 * (1 - np.tanh(1 / s) ** 2) * v / s ** 3, rtol=1e-12)
    assert matcalc.derive("sum(exp(alpha + 0*X))", "alpha").text == "exp(alpha)*size(X)"


@pytest.mark.parametrize("expr, text, want", [
    # diag(u vᵀ) = u∘v, M Diag(h) 1 = M h, 1ᵀ Diag(h) M = hᵀM: sum(Diag(x)@A@x) is xᵀAx
    ("sum(Diag(x)@A@x)", "(A.T + A)@x", lambda x, y, A: (A.T + A) @ x),
    ("sum(Diag(x)@A@Diag(x))", "(A.T + A)@x", lambda x, y, A: (A.T + A) @ x),
    ("sum(Diag(x)@y)", "y", lambda x, y, A: y),
    ("sum(diag(x@y.T))", "y", lambda x, y, A: y),
    ("sum(Diag(x)@A)", "sum(A, 1)", lambda x, y, A: A.sum(1)),
    ("sum(A@Diag(x))", "sum(A, 0).T", lambda x, y, A: A.sum(0)),
])
def test_diagonals_of_outer_products_and_sums_through_Diag(expr, text, want):
    d = matcalc.derive(expr, "x")
    assert d.text == text  # was e.g. sum(A.T@Diag(x), 1) + diag(1@x.T@A.T)
    rng = np.random.default_rng(12)
    x, y, A = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal((4, 4))
    vals = {k: v for k, v in dict(x=x, y=y, A=A).items() if k in d.function.params}
    np.testing.assert_allclose(d.function(**vals), want(x, y, A), rtol=1e-12)
    if "Diag(x)@A@" in expr:
        assert matcalc.hessian(expr, "x").kron == "A + A.T"  # it was None


@pytest.mark.parametrize("expr, wrt, text, want", [
    # (1 1ᵀ)v = sum(v)1: Diag(1@(1.T@y)) read back as a number; 1@(1.T@x):y did not read back
    ("sum(diag(X)@y.T)", "X", "sum(y)*I", lambda X, x, y: y.sum() * np.eye(4)),
    ("sum(alpha*y@x.T)", "alpha", "sum(x)*sum(y)", lambda X, x, y: x.sum() * y.sum()),
    ("sum(diag(X@X.T)@y.T)", "X", "2*sum(y)*X", lambda X, x, y: 2 * y.sum() * X),
    ("mean(diag(X)@diag(X).T)", "X", "2*sum(diag(X))*I/size(X)",
     lambda X, x, y: 2 * np.trace(X) * np.eye(4) / 16),
])
def test_a_matrix_of_ones_times_a_vector_is_its_sum_spread(expr, wrt, text, want):
    d = matcalc.derive(expr, wrt)
    assert d.text == text
    rng = np.random.default_rng(13)
    X, x, y = rng.standard_normal((4, 4)), rng.standard_normal(3), rng.standard_normal(5)
    vals = {k: v for k, v in dict(X=X, x=x, y=y, alpha=0.3).items() if k in d.function.params}
    np.testing.assert_allclose(d.function(**vals), want(X, x, y), rtol=1e-12)


def test_a_matrix_of_ones_summed_along_an_axis():
    # (1 1ᵀ)B summed along its rows is sum(B)1, and sum(sum(X, 1)) = sum(X): the Hessian of
    # sum(X@1@1.T@X.T) read sum(sum(dX, 1))*1 + sum(1@(1.T@dX), 1)@1.T
    h = matcalc.hessian("sum(X@1@1.T@X.T)", "X")
    assert h.text == "2*sum(dX)*1"
    X, V = np.random.default_rng(3).standard_normal((2, 3, 4))
    np.testing.assert_allclose(h.hvp(V, X=X), np.full((3, 4), 2 * V.sum()), rtol=1e-12)
    np.testing.assert_allclose(h.matrix(X=X), np.full((12, 12), 2.0))


def test_an_outer_product_in_a_chain_summed_along_an_axis():
    # sum(1@dy.T@B@B.T, 0) is the count of 1 times dyᵀBBᵀ: the printed Hessian did not read back
    # (nothing gave the 1 its size)
    h = matcalc.hessian("norm2((x - y.T)@B)**2", "y")
    assert h.text == "2*size(x, 0)*B@B.T@dy"
    rng = np.random.default_rng(5)
    x, y, B = rng.standard_normal(3), rng.standard_normal(4), rng.standard_normal((4, 2))
    np.testing.assert_allclose(h.matrix(x=x, y=y, B=B), 2 * 3 * B @ B.T, rtol=1e-12)


@pytest.mark.parametrize("expr, wrt, shapes, text, want", [
    # a sum of spread numbers is one: 2*((x.T@x)*1 - 1)@A printed a matrix of ones as a bare 1
    ("sum((x.T@x)*(A@A.T) - A@A.T)", "A", {"A": ("a", "b"), "x": ("b",)}, "2*(x.T@x - 1)*(1@(1.T@A))",
     lambda A, x, B, X: 2 * (x @ x - 1) * np.ones((3, 3)) @ A),
    # sum(M@1@1.T) = sum(M@1)·count: -sum(A@A.T@1@1.T)*I did not say the inner size
    ("sum(A@A.T@(B - tr(X)))", "X", {"X": ("b", "b"), "A": ("a", "b"), "B": ("a", "b")},
     "-sum(A@A.T)*size(A, 1)*I", lambda A, x, B, X: -np.sum(A @ A.T) * 4 * np.eye(4)),
])
def test_spread_numbers_and_ones_in_a_chain_print_with_their_sizes(expr, wrt, shapes, text, want):
    d = matcalc.derive(expr, wrt, shapes=shapes)
    assert d.text == text
    rng = np.random.default_rng(17)
    A, x, B, X = rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal((3, 4)), \
        rng.standard_normal((4, 4))
    vals = {k: v for k, v in dict(A=A, x=x, B=B, X=X).items() if k in d.function.params}
    np.testing.assert_allclose(d.function(**vals), want(A, x, B, X), rtol=1e-12)


@pytest.mark.parametrize("kind, expr, wrt, want", [
    # forms a review of this release's rules found worse than before, as they read now
    ("derive", "z:(B.T@B@z + B.T@x)", "B", "(2*B@z + x)@z.T"),
    ("derive", "sum(y*(-x - (z - y)))", "y", "2*y - x - z"),  # was y - (x + z - y)
    ("jacobian", "(x:x)*x - sum(x**2)*x", "x", "0"),  # identically zero
    ("hessian", "2*tr(inv(S))/alpha", "S",
     "2*((inv(S)@dS@matrix_power(S, -2)).T + (matrix_power(S, -2)@dS@inv(S)).T)/alpha"),  # was -2*-(…)
    ("derive", "sum(1/(x**2 + 1)**0.1 - x**2/(x**2 + 1)**1.1)", "x",
     "2.2*(x**2/(x**2 + 1)**2.1 - 1/(x**2 + 1)**1.1)*x"),  # was 2*(8.3e-17*x**2 - 1.1)*x/…
    ("derive", "y.T@tanh(A*I*A.T)@y", "y", "2*tanh(A**2*I)@y"),  # I∘A² is diagonal: symmetric
    ("jacobian", "2*((-w):b + (-w):c)", "w", "-2*(dw:b + dw:c)"),  # (-A):B = -(A:B); was 2*(-dw:b - dw:c)
    ("derive", "log(1 + exp(2*(-w:b - w:c)))", "w", "-2*sigmoid(-2*(w:b + w:c))*(c + b)"),  # w:c - (-w:b)
    ("hessian", "-2*((E - alpha*Y):D + (E - alpha*Y):C)*alpha", "alpha", "4*(C:Y + D:Y)*dalpha"),  # (C + D):Y + D:Y + C:Y
])
def test_forms_that_stay_short(kind, expr, wrt, want):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert getattr(matcalc, kind)(expr, wrt).text == want


@pytest.mark.parametrize("expr, shapes", [
    ("logdet(sigma*(r*S1)) + tanh(0.01*(-W1@Y.T.T:sin(W1:P)/softplus(k)))", {"k": ("m", "n"), "r": ()}),
    ("sigmoid(0.01*(-W1/softplus(Y.T):(B.T - W1 + (Q + s)))) - tr(X)/(abs(2) + 1)", {"s": ()}),
])
def test_taking_a_minus_into_a_sum_never_loops(expr, shapes):
    # c*(-a - b) = -c*(a + b) flipped back and forth where the flipped sum was all negative again
    # (RecursionError, an internal error); found by the long soundness run, seed 78
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert matcalc.derive(expr, "W1", shapes=shapes).check().ok


def test_unvec_of_a_vec_and_the_vec_trick():
    # unvec(vec(X)) stayed as it was (its rule could not be reached), and (B⊗A)vec(X) = vec(AXBᵀ)
    # printed unvec((kron(B, A).T + kron(B, A))@vec(X)), which does not read back
    shapes = {"X": ("p", "q"), "A": ("p", "p"), "B": ("q", "q")}
    d = matcalc.derive("vec(X).T@kron(B, A)@vec(X)", "X", shapes=shapes)
    assert d.text == "A.T@X@B + A@X@B.T"
    rng = np.random.default_rng(18)
    X, A, B = rng.standard_normal((3, 4)), rng.standard_normal((3, 3)), rng.standard_normal((4, 4))
    np.testing.assert_allclose(d.function(X=X, A=A, B=B), A @ X @ B.T + A.T @ X @ B, rtol=1e-12)
    assert matcalc.derive("vec(A).T@vec(A) + mean(A)", "A").text == "1/size(A) + 2*A"


@pytest.mark.parametrize("expr, lam, want", [
    # a sum partly factored kept its other terms; the memo took them as final
    ("norm2(A.T@y) + vec(A@X@A.T).T@vec(A@A.T) + det(inv(A@A.T + alpha*I))",  # was … + A@A.T@A@X.T + A@A.T@A@X
     lambda A: (np.linalg.norm(A.T @ Y19) + np.sum((A @ X19 @ A.T) * (A @ A.T))
                + np.linalg.det(np.linalg.inv(A @ A.T + 0.7 * np.eye(3)))),
     "(A@(X + X.T)@A.T - 2*det(inv(A@A.T + alpha*I))*inv(A@A.T + alpha*I))@A + A@A.T@A@(X.T + X)"
     " + y@y.T@A/norm2(A.T@y)"),
    ("sum(A) + tanh(mean(A/sqrt(softplus(A))))",  # was …**2)*1/(size(A, 0)*…
     lambda A: A.sum() + np.tanh(np.mean(A / np.sqrt(np.logaddexp(0, A)))),
     "(1 - tanh(mean(A/sqrt(softplus(A))))**2)/(size(A)*sqrt(softplus(A))) + 1"
     " - 0.5*(1 - tanh(mean(A/sqrt(softplus(A))))**2)*A*sigmoid(A)/(size(A)*sqrt(softplus(A))**3)"),
])
def test_a_result_is_a_fixed_point_of_the_simplifier(expr, lam, want):
    from matcalc.simplify import simplify_pass
    from support.fd import central_fd_grad

    d = matcalc.derive(expr, "A", shapes={"X": ("b", "b")})
    assert d.text == want
    assert simplify_pass(d.gradient) == d.gradient  # one more pass over the result changes nothing
    A = np.random.default_rng(19).standard_normal((3, 4))
    others = {k: v for k, v in {"X": X19, "y": Y19, "alpha": 0.7}.items() if k in d.function.params}
    np.testing.assert_allclose(d.function(A=A, **others), central_fd_grad(lam, {"A": A}, "A"),
                               rtol=1e-6, atol=1e-7)


X19 = np.random.default_rng(20).standard_normal((4, 4))
Y19 = np.random.default_rng(21).standard_normal(3)


@pytest.mark.parametrize("expr, wrt, text, closed", [
    # (Xᵃ)ᵀ:Xᵇ = tr(Xᵃ⁺ᵇ): was -(matrix_power(B, -2).T:B)*matrix_power(A, -2).T
    ("tr(inv(kron(A, B)))", "A", "-tr(inv(B))*matrix_power(A, -2).T",
     lambda A, B: -np.trace(np.linalg.inv(B)) * np.linalg.matrix_power(np.linalg.inv(A), 2).T),
    ("matrix_power(A, 3).T:A", "A", "4*(A@A@A).T",  # d tr(A⁴) = 4 (A³)ᵀ:dA
     lambda A, B: 4 * np.linalg.matrix_power(A, 3).T),
])
def test_powers_of_one_matrix_meet_in_a_trace(expr, wrt, text, closed):
    d = matcalc.derive(expr, wrt, shapes={"A": ("n", "n"), "B": ("m", "m") if "kron" in expr else ("n", "n")})
    assert d.text == text
    rng = np.random.default_rng(7)
    A = np.eye(3) * 2 + 0.3 * rng.standard_normal((3, 3))
    B = np.eye(4 if "kron" in expr else 3) * 2 + 0.3 * rng.standard_normal((4 if "kron" in expr else 3,) * 2)
    vals = {k: v for k, v in {"A": A, "B": B}.items() if k in d.function.params}
    np.testing.assert_allclose(d.function(**vals), closed(A, B), rtol=1e-10)


@pytest.mark.parametrize("expr, text", [
    ("tr(inv(A)@B)*(inv(A):B.T)", "2*tr(inv(A)@B)*inv(A).T"),  # tr(AB) = Aᵀ:B = A:Bᵀ: one term
    ("tr(A@B)*tr(B@A)", "2*tr(A@B)*A.T"),
    ("tr(A@B)*(A.T:B) - (B:A.T)**2", "0"),
])
def test_a_trace_of_a_product_is_the_inner_product_it_spells(expr, text):
    d = matcalc.derive(expr, "B", shapes={"A": ("n", "n"), "B": ("n", "n")})
    assert d.text == text
    rng = np.random.default_rng(8)
    A, B = np.eye(3) * 2 + 0.3 * rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    t = np.trace(np.linalg.inv(A) @ B) if "inv" in expr else np.trace(A @ B)
    want = 2 * t * (np.linalg.inv(A).T if "inv" in expr else A.T) if text != "0" else np.zeros((3, 3))
    np.testing.assert_allclose(d.function(A=A, B=B), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("expr, wrt, text, closed", [
    # a number inside an inverse comes out: logdet(X/2) read 0.5*inv(0.5*X).T
    ("logdet(X/2)", "X", "inv(X).T", lambda X, x, a: np.linalg.inv(X).T),
    ("tr(inv(2*X))", "X", "-0.5*matrix_power(X, -2).T", lambda X, x, a: -0.5 * np.linalg.matrix_power(np.linalg.inv(X), 2).T),
    ("det(alpha*X)", "X", "det(alpha*X)*inv(X).T", lambda X, x, a: np.linalg.det(a * X) * np.linalg.inv(X).T),
    # (LR):Y = L:(YRᵀ) where YRᵀ = I, then tr(u vᵀ) = vᵀu: was -(inv(alpha*S).T@x@x.T@inv(alpha*S).T:S)
    ("x.T@inv(alpha*X)@x", "alpha", "-x.T@inv(X).T@x/alpha**2", lambda X, x, a: -x @ np.linalg.inv(X) @ x / a ** 2),
    ("tr(A@x@y.T)*alpha", "alpha", "y.T@A@x", None),
])
def test_numbers_leave_inverses_and_traces_of_outer_products_are_inner_products(expr, wrt, text, closed):
    d = matcalc.derive(expr, wrt, shapes={"A": ("n", "n")} if "A" in expr else None)
    assert d.text == text
    rng = np.random.default_rng(9)
    X, x, a = np.eye(3) * 2 + 0.3 * rng.standard_normal((3, 3)), rng.standard_normal(3), 0.7
    if closed is not None:
        vals = {k: v for k, v in {"X": X, "x": x, "alpha": a}.items() if k in d.function.params}
        np.testing.assert_allclose(d.function(**vals), closed(X, x, a), rtol=1e-10)


def _vec(M):
    return M.reshape(-1, order="F")  # column-major, as matcalc's vec


@pytest.mark.parametrize("expr, text, grad", [
    # (Bᵀ⊗A) vec(X) = vec(AXB), and vec is linear: was unvec(2*kron(B.T, A).T@(kron(B.T, A)@vec(X) - vec(C)))
    ("norm2(kron(B.T, A)@vec(X) - vec(C))**2", "2*A.T@(A@X@B - C)@B.T",
     lambda A, X, B, C: 2 * A.T @ (A @ X @ B - C) @ B.T),
    ("vec(C).T@kron(B.T, A)@vec(X)", "A.T@C@B.T", lambda A, X, B, C: A.T @ C @ B.T),
])
def test_a_kronecker_product_times_a_vec_is_the_vec_of_a_matrix_product(expr, text, grad):
    shapes = {"A": ("p", "q"), "X": ("q", "r"), "B": ("r", "s"), "C": ("p", "s")}
    d = matcalc.derive(expr, "X", shapes=shapes)
    assert d.text == text
    rng = np.random.default_rng(10)
    A, X, B, C = (rng.standard_normal(s) for s in ((2, 3), (3, 4), (4, 5), (2, 5)))
    lam = lambda X: (np.sum((np.kron(B.T, A) @ _vec(X) - _vec(C)) ** 2) if "norm2" in expr
                     else _vec(C) @ np.kron(B.T, A) @ _vec(X))
    from support.fd import central_fd_grad
    np.testing.assert_allclose(d.function(A=A, X=X, B=B, C=C), central_fd_grad(lam, {"X": X}, "X"), rtol=1e-7)
    np.testing.assert_allclose(d.function(A=A, X=X, B=B, C=C), grad(A, X, B, C), rtol=1e-12)
    if "norm2" in expr:
        h = matcalc.hessian(expr, "X", shapes=shapes)
        assert h.text == "2*A.T@A@dX@B@B.T"


@pytest.mark.parametrize("expr, text, closed", [
    # (F₁…Fₖ)⁻¹ beside its square end factor: was det(A@X@B)*A.T@inv(A@X@B).T@B.T
    ("det(A@X@B)", "det(A@X@B)*inv(X).T", lambda A, X, B, S: np.linalg.det(A @ X @ B) * np.linalg.inv(X).T),
    ("logdet(A@X@B)", "inv(X).T", lambda A, X, B, S: np.linalg.inv(X).T),
    # through transposes: (XᵀSᵀX)(XᵀSX)⁻ᵀ = I; was S.T@X@inv(X.T@S@X).T@X.T@S.T@X@X.T@S.T@X@inv(X.T@S@X).T + …
    ("tr(S + inv(inv(X.T@S@X)))", "(S.T + S)@X", lambda A, X, B, S: (S.T + S) @ X),
    ("det(inv(X.T@S@X))", "-2*det(inv(X.T@S@X))*inv(X).T",
     lambda A, X, B, S: -2 * np.linalg.det(np.linalg.inv(X.T @ S @ X)) * np.linalg.inv(X).T),
])
def test_an_inverse_of_a_product_cancels_its_end_factor(expr, text, closed):
    shapes = {k: ("n", "n") for k in "AXBS"}
    d = matcalc.derive(expr, "X", shapes={k: v for k, v in shapes.items() if k in expr})
    assert d.text == text
    rng = np.random.default_rng(11)
    A, X, B, S = (np.eye(3) * 2 + 0.4 * rng.standard_normal((3, 3)) for _ in range(4))
    vals = {k: v for k, v in {"A": A, "X": X, "B": B, "S": S}.items() if k in d.function.params}
    np.testing.assert_allclose(d.function(**vals), closed(A, X, B, S), rtol=1e-10)


def test_entrywise_functions_of_a_vec_and_the_adjoint_of_a_kronecker_product():
    # f(vec(X)) = vec(f(X)) and unvec((P⊗Q)ᵀu) = Qᵀunvec(u)P: was unvec(kron(P, Q).T@exp(vec(Q@X@P.T)))
    shapes = {"P": ("m", "n"), "Q": ("p", "q"), "X": ("q", "n")}
    d = matcalc.derive("sum(exp(kron(P, Q)@vec(X)))", "X", shapes=shapes)
    assert d.text == "Q.T@exp(Q@X@P.T)@P"
    rng = np.random.default_rng(13)
    P, Q, X = 0.5 * rng.standard_normal((2, 3)), 0.5 * rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    from support.fd import central_fd_grad
    lam = lambda X: np.sum(np.exp(np.kron(P, Q) @ _vec(X)))
    np.testing.assert_allclose(d.function(P=P, Q=Q, X=X), central_fd_grad(lam, {"X": X}, "X"), rtol=1e-7)


@pytest.mark.parametrize("expr, wrt, text", [
    ("logdet(alpha*X + beta*X)", "X", "inv(X).T"),               # was (beta + alpha)*inv(X).T/(alpha + beta)
    ("tr(inv(A@X).T@C) - tr(inv(X.T@A.T)@C)", "A", "0"),         # (XᵀAᵀ)⁻¹ = ((AX)⁻¹)ᵀ
    ("tr(B@inv(A@X@B)@A@C)", "A", "0"),
    ("tr(inv(A@X@B)@A@X)", "X", "0"),                            # was inv(X@B).T - inv(B.T@X.T)
    ("tr(inv(inv(X).T).T@C)", "X", "C.T"),                       # X⁻ᵀ(XCX)ᵀX⁻ᵀ opens and cancels
])
def test_one_quantity_in_two_spellings_cancels(expr, wrt, text):
    shapes = {k: ("n", "n") for k in "ABCX" if k in expr}
    d = matcalc.derive(expr, wrt, shapes=shapes)
    assert d.text == text
    rng = np.random.default_rng(14)
    vals = {k: np.eye(3) * 2 + 0.4 * rng.standard_normal((3, 3)) for k in shapes}
    vals.update({k: v for k, v in {"alpha": 0.7, "beta": -0.2}.items() if k in expr})
    from support.fd import central_fd_grad
    lam = {"logdet(alpha*X + beta*X)": lambda X, alpha, beta: np.linalg.slogdet((alpha + beta) * X)[1],
           "tr(inv(inv(X).T).T@C)": lambda X, C: np.trace(X @ C)}.get(expr)
    if lam is not None:
        np.testing.assert_allclose(d.function(**{k: v for k, v in vals.items() if k in d.function.params}),
                                   central_fd_grad(lam, vals, wrt), rtol=1e-6)


def test_an_inverse_of_a_matrix_power_is_a_negative_power():
    d = matcalc.derive("tr(inv(matrix_power(X, 2))@C)", "X", shapes={"X": ("n", "n"), "C": ("n", "n")})
    assert "inv(matrix_power" not in d.text
    rng = np.random.default_rng(17)
    X, C = np.eye(3) * 2 + 0.4 * rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    from support.fd import central_fd_grad
    lam = lambda X, C: np.trace(np.linalg.inv(X @ X) @ C)
    np.testing.assert_allclose(d.function(X=X, C=C), central_fd_grad(lam, {"X": X, "C": C}, "X"), rtol=1e-6)


@pytest.mark.parametrize("expr, shapes, text, lam", [
    # vec(A)∘vec(B) = vec(A∘B), vec(X)ᵏ = vec(Xᵏ), numbers beside a vec, unvec(vec(X)/β): no unvec left
    ("vec(Y).T@exp(vec(X))", {"X": ("n", "m"), "Y": ("n", "m")}, "Y*exp(X)",
     lambda X, Y: np.sum(Y * np.exp(X))),
    ("sum(exp(vec(X))*vec(X))", {"X": ("n", "m")}, "(X + 1)*exp(X)", lambda X, Y: np.sum(np.exp(X) * X)),
    ("sqrt(vec(X).T@vec(X))", {"X": ("n", "m")}, "X/sqrt(vec(X).T@vec(X))", lambda X, Y: np.sqrt(np.sum(X * X))),
    # unvec commutes with all entrywise work (1/vec, a vec beside a number, -vec): was unvec(1/vec(Y)),
    # unvec(vec(Y)*sigmoid(-vec(X))), unvec(2*exp(2*vec(X) - vec(Y))), which do not read back
    ("sum(vec(X)/vec(Y))", {"X": ("n", "m"), "Y": ("n", "m")}, "1/Y", lambda X, Y: np.sum(X / Y)),
    ("vec(Y).T@log(sigmoid(vec(X)))", {"X": ("n", "m"), "Y": ("n", "m")}, "Y*sigmoid(-X)",
     lambda X, Y: np.sum(Y * -np.logaddexp(0, -X))),
    ("sum(exp(2*vec(X) - vec(Y)))", {"X": ("n", "m"), "Y": ("n", "m")}, "2*exp(2*X - Y)",
     lambda X, Y: np.sum(np.exp(2 * X - Y))),
    # and vec commutes back: vec(f(unvec(u))) = f(u)
    ("sum(exp(unvec(vec(X)*vec(Y), size(X, 0))))", {"X": ("n", "m"), "Y": ("n", "m")}, "exp(X*Y)*Y",
     lambda X, Y: np.sum(np.exp(X * Y))),
    # a double inverse of a product of non-square factors: was inv(X@Y).T@(X@Y@1@1.T@X@Y).T@inv(X@Y).T@Y.T
    ("sum(inv(inv(X@Y).T))", {"X": ("n", "m"), "Y": ("m", "n")}, "1@(1.T@Y.T)", lambda X, Y: np.sum(X @ Y)),
])
def test_no_unvec_or_double_inverse_is_left(expr, shapes, text, lam):
    d = matcalc.derive(expr, "X", shapes=shapes)
    assert d.text == text
    rng = np.random.default_rng(18)
    X, Y = rng.standard_normal((3, 4)), rng.standard_normal((4, 3) if "inv" in expr else (3, 4))
    from support.fd import central_fd_grad
    vals = {"X": X, "Y": Y}
    np.testing.assert_allclose(d.function(**{k: v for k, v in vals.items() if k in d.function.params}),
                               central_fd_grad(lambda X, Y: lam(X, Y), vals, "X"), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("expr, wrt, text, lam", [
    # (M⁻ᵀ)⁻¹ = Mᵀ, and M⁻¹ meets the factors of M one at a time (X n×m, Y m×n: M = XY is square,
    # its factors are not)
    ("sum(inv(inv(X).T)@Y)", "Y", None, lambda X, Y: np.sum(X.T @ Y)),
    ("tr(inv(inv(X@Y).T)@C)", "X", "C@Y.T", lambda X, Y, C: np.trace((X @ Y).T @ C)),
    ("tr(inv(X@Y)@X@Y@C)", "X", "0", lambda X, Y, C: np.trace(C)),
    ("tr(X@Y@inv(X@Y)@C)", "X", "0", lambda X, Y, C: np.trace(C)),
])
def test_an_inverse_meets_the_factors_of_its_product(expr, wrt, text, lam):
    sq = "inv(inv(X).T)" in expr
    shapes = {"X": ("n", "n"), "Y": ("n", "m")} if sq else {"X": ("n", "m"), "Y": ("m", "n"), "C": ("n", "n")}
    d = matcalc.derive(expr, wrt, shapes=shapes)
    if text is not None:
        assert d.text == text
    else:
        assert "inv" not in d.text
    rng = np.random.default_rng(19)
    if sq:
        vals = {"X": np.eye(3) * 2 + 0.4 * rng.standard_normal((3, 3)), "Y": rng.standard_normal((3, 4))}
    else:  # n < m: XY is invertible
        vals = {"X": rng.standard_normal((3, 4)), "Y": rng.standard_normal((4, 3)), "C": rng.standard_normal((3, 3))}
    from support.fd import central_fd_grad
    got = d.function(**{k: v for k, v in vals.items() if k in d.function.params})
    np.testing.assert_allclose(got, central_fd_grad(lam, vals, wrt), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("expr, text, lam, grad", [
    # a sum written in two orders is one term, one base: was 1/(a + b) - 1/(b + a),
    # 2/(a + b)**2 - 3/(b + a)**2 and 2*exp(a + b)*exp(b + a)
    ("log(a + b) - log(b + a)", "0", lambda a, b: 0.0 * a, lambda a, b: 0.0),
    ("(a + b)**2/(b + a)**3", "-1/(a + b)**2", lambda a, b: 1 / (a + b), lambda a, b: -1 / (a + b) ** 2),
    ("exp(a + b)*exp(b + a)", "2*exp(a + b)**2", lambda a, b: np.exp(2 * (a + b)), lambda a, b: 2 * np.exp(2 * (a + b))),
])
def test_a_sum_in_another_order_is_the_same_term(expr, text, lam, grad):
    d = matcalc.derive(expr, "a", shapes={"a": (), "b": ()})
    assert d.text == text
    a, b, h = 0.3, 0.45, 1e-6
    assert abs(float(d.function(a=a, b=b)) - grad(a, b)) < 1e-9
    assert abs((lam(a + h, b) - lam(a - h, b)) / (2 * h) - grad(a, b)) < 1e-6  # the closed form itself


@pytest.mark.parametrize("expr", [
    "sum(exp(W@x + c) - exp(c + W@x))",
    # entrywise products in another order too, and inside a quotient: were two terms that cancel
    "sum(log(A*W + 1) - log(W*A + 1))",
    "sum(((W + A)**2 + 1)/((A + W)**2 + 1))",
])
def test_a_sum_in_another_order_inside_a_matrix_expression(expr):
    d = matcalc.derive(expr, "W", shapes={"W": ("a", "b")} if "A" in expr else None)
    assert d.text == "0"


def test_the_simplifier_memos_keep_no_expression_alive():
    # a memo entry whose value is its key (x simplified is x) kept that node alive for ever:
    # about 11 nodes per derivation stayed in the hash-consing table (14 with the order-free keys)
    import gc

    from matcalc import ir

    def run(k):
        for i in range(k):
            matcalc.derive(f"sum(log(A@X + {i}.5*C + B)) + tr(X@D)*{i} + log(alpha + beta) - log(beta + alpha)", wrt="X")
        gc.collect()
        return len(ir.Expr._table)

    before = run(5)
    assert run(60) <= before + 20


@pytest.mark.parametrize("expr, wrt, text", [
    ("mean((X@W - Y)**2)", "W", "2*X.T@(X@W - Y)/size(Y)"),   # was /(size(X, 0)*size(W, 1))
    ("mean(X*X)", "X", "2*X/size(X)"),                         # was /(size(X, 0)*size(X, 1))
    ("alpha*x.T@A@x", "alpha", "A@x:x"),                       # was x.T@A.T:x.T
])
def test_shorter_forms_of_counts_and_inner_products_of_rows(expr, wrt, text):
    d = matcalc.derive(expr, wrt)
    assert d.text == text
    assert d.check().ok


def test_numbers_multiplied_to_a_few_roundings_off_a_fraction_are_it_but_a_typed_number_stays():
    # 2·(1/√2)·(1/√2) is 1.0000000000000002: the Hessian of a probit printed "- 1*X@w"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h = matcalc.hessian("-sum(log(0.5*erfc(-(X@w)/sqrt(2))))", "w")
    assert "1*X@w" not in h.text and "X@w" in h.text
    # a number as typed is kept to its last bit: (1.0000000000000002 x − x):y is 2⁻⁵² y, not 0
    d = matcalc.derive("(1.0000000000000002*x - x):y", "x")
    y = np.array([1.0, -2.0, 3.0])
    np.testing.assert_array_equal(d.function(x=np.zeros(3), y=y), 2.0 ** -52 * y)


def test_a_half_power_is_a_root_only_where_the_expression_has_one():
    # det(S)**-0.5 differentiated read -0.5*sqrt(det(S))**-1*inv(S).T; s = sqrt(u² + 1) keeps its root
    assert matcalc.derive("det(S)**(-0.5)", "S").text == "-0.5*det(S)**-0.5*inv(S).T"
    assert matcalc.derive("det(S)**(-1.5)", "S").text == "-1.5*det(S)**-1.5*inv(S).T"
    assert matcalc.hessian("sum(sqrt(x*x + 1))", "x").text == "dx/sqrt(x**2 + 1)**3"


def test_frobenius_products_with_a_common_side_are_one():
    # the KL divergence through a softmax read softmax(a)*(a + log(q):softmax(a) - log(q) - a:softmax(a))
    d = matcalc.derive("sum(softmax(a)*(log(softmax(a)) - log(q)))", "a")
    assert d.text.count(":") == 1
    rng = np.random.default_rng(4)
    a, q = rng.standard_normal(5), rng.dirichlet(np.ones(5))

    def lam(a):
        p = np.exp(a - a.max()) / np.exp(a - a.max()).sum()
        return float(np.sum(p * (np.log(p) - np.log(q))))

    fd = [(lam(a + 1e-6 * e) - lam(a - 1e-6 * e)) / 2e-6 for e in np.eye(5)]
    np.testing.assert_allclose(d.function(a=a, q=q), fd, atol=1e-8)


@pytest.mark.parametrize("expr, text", [
    ("sum(delta**2*(sqrt(1 + (x/delta)**2) - 1))", "dx/sqrt((x/delta)**2 + 1)**3"),
    ("sum(delta**2*(sqrt(1 + x**2/delta**2) - 1))", "dx/sqrt(x**2/delta**2 + 1)**3")])
def test_the_pseudo_huber_hessian_is_one_quotient(expr, text):
    # 1/s - x²/(δ² s³) with s² = x²/δ² + 1 is 1/s³: the δ² beside s³, and (x/δ)² against the
    # derivative's x²/δ², kept the two terms apart
    h = matcalc.hessian(expr, "x", shapes={"x": (3,)})
    assert h.text == text
    x, delta = np.array([0.3, -2.0, 5.0]), 1.7
    np.testing.assert_allclose(h.matrix(x=x, delta=delta), np.diag((1 + (x / delta) ** 2) ** -1.5), rtol=1e-13)


def test_a_spread_vector_summed_across_is_a_matrix_vector_product():
    # sum(C∘(1@xᵀ), 1) = C@x, sum(C∘(x@1ᵀ), 0)ᵀ = Cᵀ@x, and a graph's Σ W_ij (x_i - x_j)² through them
    assert matcalc.derive("y:sum(W*(1@x.T), 1)", "y").text == "W@x"
    assert matcalc.derive("y:sum(W*(x@1.T), 0).T", "y").text == "W.T@x"
    d = matcalc.derive("sum(W*(x - x.T)**2)", "x")
    assert "W@x" in d.text and "W.T@x" in d.text and len(d.text) < 59  # (was 59 characters, every sum(W*(…)))
    rng = np.random.default_rng(7)
    W, x = rng.standard_normal((4, 4)), rng.standard_normal(4)
    np.testing.assert_allclose(d.function(W=W, x=x), 2 * ((W + W.T).sum(1) * x - (W + W.T) @ x), rtol=1e-12)
    H = matcalc.hessian("sum(W*(x - x.T)**2)", "x").matrix(W=W, x=x)
    np.testing.assert_allclose(H, 2 * (np.diag((W + W.T).sum(1)) - W - W.T), rtol=1e-12)


def test_an_outer_product_with_ones_times_a_vector_is_a_sum():
    # (u 1ᵀ) v = sum(v) u: the Hessian of sum(v*(v - u.T), 0)@(u + w) read -du@1.T@v - sum(v)*du
    assert matcalc.hessian("sum(v*(v - u.T), 0)@(u + w)", "u").text == "-2*sum(v)*du"


def test_a_result_whose_text_would_be_huge_is_written_with_names():
    # a tree just under the size that names shared parts printed 5,133 characters (its parts repeat)
    e = "x"
    for i in range(4):
        e = f"sum(W{i}*({e} - ({e}).T), 1)"
    d = matcalc.derive(f"sum(({e})**2)", "x")
    h = matcalc.hessian(f"sum(({e})**2)", "x")
    assert len(d.text) < 100 and d.definitions and len(h.text) < 100 and h.definitions
    rng = np.random.default_rng(2)
    vals = {f"W{i}": rng.standard_normal((4, 4)) for i in range(4)}
    x = rng.standard_normal(4)

    def lam(x):
        v = x
        for i in range(4):
            v = np.sum(vals[f"W{i}"] * (v[:, None] - v[None, :]), 1)
        return np.sum(v ** 2)

    fd = [(lam(x + 1e-6 * u) - lam(x - 1e-6 * u)) / 2e-6 for u in np.eye(4)]
    np.testing.assert_allclose(d.function(x=x, **vals), fd, rtol=1e-6)


def test_the_diagonal_of_a_product_through_a_diagonal_matrix_is_a_hadamard_product():
    # diag(A Diag(v) B) = (A∘Bᵀ) v: the Hessian of tr(Diag(x)@A@Diag(x)@B) was
    # diag(A.T@Diag(dx)@B.T + B.T@Diag(dx)@A.T)
    H = matcalc.hessian("tr(Diag(x)@A@Diag(x)@B)", "x")
    assert H.text == "(A.T*B + B.T*A)@dx"
    rng = np.random.default_rng(5)
    A, B, x = rng.standard_normal((4, 4)), rng.standard_normal((4, 4)), rng.standard_normal(4)
    np.testing.assert_allclose(H.matrix(x=x, A=A, B=B), A * B.T + A.T * B, rtol=1e-14)  # (closed form by hand)
    # with the diagonal first or last, and non-square factors: diag(X Diag(v) Y) for X 3×5, Y 5×3
    X, Y, v, u = rng.standard_normal((3, 5)), rng.standard_normal((5, 3)), rng.standard_normal(5), rng.standard_normal(3)
    d = matcalc.derive("u.T@diag(X@Diag(v)@Y)", "v", shapes={"X": (3, 5), "Y": (5, 3)})
    np.testing.assert_allclose(d.function(X=X, Y=Y, v=v, u=u), (X * Y.T).T @ u, rtol=1e-13)
    d = matcalc.derive("u.T@diag(Diag(u)@X@Y)", "X", shapes={"X": (3, 5), "Y": (5, 3)})
    np.testing.assert_allclose(d.function(X=X, Y=Y, u=u), np.outer(u * u, np.ones(5)) * Y.T, rtol=1e-13)


def test_products_with_one_right_factor_and_one_scalar_factor_collect():
    # Markowitz: mu - 0.5*gamma*S.T@w - 0.5*gamma*S@w (a third term kept the two apart)
    d = matcalc.derive("mu.T@w - 0.5*gamma*w.T@S@w", "w", shapes={"mu": ("n",)})
    assert d.text == "mu - 0.5*gamma*(S.T + S)@w"
    rng = np.random.default_rng(9)
    S, mu, w = rng.standard_normal((4, 4)), rng.standard_normal(4), rng.standard_normal(4)
    np.testing.assert_allclose(d.function(S=S, mu=mu, w=w, gamma=0.7), mu - 0.35 * (S + S.T) @ w, rtol=1e-14)
    d = matcalc.derive("gamma*w.T@S@w + beta*w.T@A@w", "w")  # two scalars: two groups
    assert d.text == "beta*(A.T + A)@w + gamma*(S.T + S)@w"


def test_a_sum_along_an_axis_of_a_product_sums_its_last_factor():
    # sum(A@M, 1) = A@sum(M, 1): a Student-t likelihood's gradient in its mean was 216 characters,
    # 1@((nu + n)/(nu*(…))) twice and X - m@1.T six times
    expr = "0.5*(nu + size(X, 0))*sum(log(1 + sum((X - m)*(inv(S)@(X - m)), 0)/nu))"
    d = matcalc.derive(expr, "m")
    assert len(d.text) <= 120 and d.text.count("X - m@1.T") == 3, d.text
    rng = np.random.default_rng(12)
    X, m, nu = rng.standard_normal((3, 6)), rng.standard_normal(3), 4.5
    R = rng.standard_normal((3, 3))
    S = R @ R.T + 3 * np.eye(3)

    def lam(m):
        D = X - m[:, None]
        return 0.5 * (nu + 3) * np.sum(np.log(1 + np.sum(D * np.linalg.solve(S, D), 0) / nu))

    fd = [(lam(m + 1e-6 * e) - lam(m - 1e-6 * e)) / 2e-6 for e in np.eye(3)]
    np.testing.assert_allclose(d.function(X=X, m=m, nu=nu, S=S), fd, rtol=1e-7)


@pytest.mark.parametrize("expr, wrt, text, grad", [
    ("-sum(log(abs(diag(L))))", "L", "-Diag(1/diag(L))", lambda L: -np.diag(1 / np.diag(L))),
    ("sum(abs(x)**3)", "x", "3*x*abs(x)", lambda x: 3 * x * np.abs(x)),
    ("sum(abs(x)**2)", "x", "2*x", lambda x: 2 * x),
    ("sum(abs(x)**1.5)", "x", "1.5*abs(x)**0.5*sign(x)", lambda x: 1.5 * np.sqrt(np.abs(x)) * np.sign(x)),  # (kept:
    # x∘|x|^-0.5 would be nan at 0)
])
def test_sign_times_abs_is_the_variable(expr, wrt, text, grad):
    d = matcalc.derive(expr, wrt)
    assert d.text == text
    v = np.array([[0.5, -2.0, 0.0], [3.0, 1.5, -0.25], [1.0, 2.0, -4.0]]) if wrt == "L" else np.array([0.5, -2.0, 0.0, 3.0])
    if wrt == "L":
        v = v + 5 * np.eye(3)
    np.testing.assert_allclose(d.function(**{wrt: v}), grad(v), rtol=1e-14)


def test_two_diagonal_factors_in_a_product_are_one():
    # logdet(A Diag(c) Diag(c) Aᵀ) had two equal terms, one with Diag(c**2), one with Diag(c)@Diag(c)
    d = matcalc.derive("logdet(A@Diag(c)@Diag(c)@A.T)", "A")
    assert d.text == "2*inv(A@Diag(c**2)@A.T)@A@Diag(c**2)"
    rng = np.random.default_rng(7)
    A, c = rng.standard_normal((3, 4)), rng.standard_normal(4)
    M = A @ np.diag(c * c) @ A.T
    np.testing.assert_allclose(d.function(A=A, c=c), 2 * np.linalg.inv(M) @ A @ np.diag(c * c), rtol=1e-12)


@pytest.mark.parametrize("k, grad, hess", [(4, "4*x**3", "12*x**2*dx"), (5, "5*x*abs(x)**3", "20*dx*abs(x)**3"),
                                            (6, "6*x**5", "30*x**4*dx")])
def test_powers_of_abs_read_as_by_hand(k, grad, hess):
    # u∘|u|²ᵐ = u²ᵐ⁺¹ and u²∘|u|ᵏ = |u|ᵏ⁺²: the Hessian of Σ|x|⁵ was 5|x|³ + 15x²|x| (two terms)
    d, H = matcalc.derive(f"sum(abs(x)**{k})", "x"), matcalc.hessian(f"sum(abs(x)**{k})", "x")
    assert (d.text, H.text) == (grad, hess)
    x = np.array([0.5, -2.0, 0.0, 3.0])
    np.testing.assert_allclose(d.function(x=x), k * np.abs(x) ** (k - 1) * np.sign(x), rtol=1e-14)
    np.testing.assert_allclose(H.matrix(x=x), np.diag(k * (k - 1) * np.abs(x) ** (k - 2)), rtol=1e-14)


@pytest.mark.parametrize("expr,wrt,shapes,definitions,want,numpy_grad", [
    # (I - K⁻¹yyᵀ)K⁻¹ + K⁻¹(I - yyᵀK⁻¹): the products distributed meet their likes (61 -> 32 characters)
    ("0.5*y.T@inv(K)@y + 0.5*logdet(K)", "A", {"y": ("n",), "A": ("n", "k"), "s2": ()},
     {"K": "A@A.T + s2*I"}, "(inv(K) - inv(K)@y@y.T@inv(K))@A",
     lambda y, A, s2: (lambda Ki: (Ki - Ki @ np.outer(y, y) @ Ki) @ A)(np.linalg.inv(A @ A.T + s2 * np.eye(len(y))))),
    # (W - Wᵀ)ᵀ + W - Wᵀ = 0
    ("x.T@(W - W.T)@x", "x", {"x": ("n",), "W": ("n", "n")}, None, "0", lambda x, W: 0 * x),
    ("(W - W.T):(W - W.T)", "W", {"W": ("n", "n")}, None, "4*(W - W.T)", lambda W: 4 * (W - W.T)),
    # a transposed Hadamard term equal to the other (89 -> 42 characters)
    ("sum(sigmoid(W)*sigmoid(W.T))", "W", {"W": ("n", "n")}, None, "2*sigmoid(W.T)*sigmoid(W)*(1 - sigmoid(W))",
     lambda W: (lambda s: 2 * s.T * s * (1 - s))(1 / (1 + np.exp(-W)))),
])
def test_brackets_open_where_their_terms_meet_their_likes(expr, wrt, shapes, definitions, want, numpy_grad):
    d = matcalc.derive(expr, wrt, shapes=shapes, definitions=definitions)
    assert d.text == want
    rng = np.random.default_rng(9)
    vals = {k: rng.standard_normal(tuple({"n": 4, "k": 3}[s] for s in v)) for k, v in shapes.items()}
    if "s2" in vals:
        vals["s2"] = 0.7
    np.testing.assert_allclose(d.function(**vals), numpy_grad(**vals), rtol=1e-10, atol=1e-12)


def test_the_diagonal_of_an_entrywise_function_is_the_function_of_the_diagonal_where_that_simplifies():
    # graphical lasso off the diagonal: Diag(diag(-lam*sign(Θ - Diag(diag(Θ))))) is 0 (107 -> 54 characters)
    d = matcalc.derive("-logdet(T) + tr(S@T) + lam*sum(abs(T - Diag(diag(T))))", "T", shapes={"lam": ()})
    assert d.text == "lam*sign(T - Diag(diag(T))) + S.T - inv(T).T"
    rng = np.random.default_rng(3)
    A, S = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    T = A @ A.T + 4 * np.eye(4)
    off = T - np.diag(np.diag(T))
    np.testing.assert_allclose(d.function(T=T, S=S, lam=0.3), 0.3 * np.sign(off) + S.T - np.linalg.inv(T).T, rtol=1e-12)


def test_the_inverse_of_a_diagonal_matrix_is_the_diagonal_of_reciprocals():
    # a diagonal Gaussian in its log-variances: 79 characters with inv(Diag(exp(ls))) twice, now the hand form
    d = matcalc.derive("0.5*(x-m).T@inv(Diag(exp(ls)))@(x-m) + 0.5*logdet(Diag(exp(ls)))", "ls")
    assert d.text == "0.5*(1 - (x - m)**2/exp(ls))"
    rng = np.random.default_rng(2)
    x, m, ls = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal(4)
    np.testing.assert_allclose(d.function(x=x, m=m, ls=ls), 0.5 - 0.5 * (x - m) ** 2 * np.exp(-ls), rtol=1e-13)



def test_a_kl_between_softmaxes_loses_the_rows_constants():
    # distillation's KL(P‖Q), P = softmax(X@W, 1): 153 characters of logsumexp terms that cancel
    from scipy.special import log_softmax, softmax

    d = matcalc.derive("sum(P*(log(P) - log(Q)))", "W", definitions={"P": "softmax(X@W, 1)", "Q": "softmax(X@V, 1)"})
    assert "logsumexp" not in d.text and len(d.text) < 70, d.text
    rng = np.random.default_rng(0)
    X, W, V = rng.standard_normal((5, 3)), rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    P, D = softmax(X @ W, 1), X @ W - X @ V
    np.testing.assert_allclose(d.function(X=X, W=W, V=V), X.T @ (P * (D - np.sum(P * D, 1, keepdims=True))),
                               rtol=1e-10, atol=1e-13)
    assert np.isclose(np.sum(P * (log_softmax(X @ W, 1) - log_softmax(X @ V, 1))) >= 0, True)


def test_a_reduction_along_a_vector_s_own_axis_is_over_every_entry():
    # sum(u, -1)*sum(u) gave (sum(u, 0) + sum(u))*1
    assert matcalc.derive("sum(u, -1)*sum(u)", "u").text == "2*sum(u)*1"
    np.testing.assert_allclose(matcalc.derive("logsumexp(u, 0)", "u").function(u=np.zeros(4)), np.full(4, 0.25))


@pytest.mark.parametrize("expr,wrt,shapes,want,numpy_grad", [
    # BPR: Diag(s)@N + Diag(-s)@P, the sign out of Diag, then one product (94 -> 51 characters)
    ("-sum(log(sigmoid(diag(U@P.T) - diag(U@N.T))))", "U", {"U": ("n", "k"), "P": ("n", "k"), "N": ("n", "k")},
     "Diag(sigmoid(-(diag(U@P.T) - diag(U@N.T))))@(N - P)",
     lambda U, P, N: (1 / (1 + np.exp(np.sum(U * P, 1) - np.sum(U * N, 1))))[:, None] * (N - P)),
])
def test_a_negated_diagonal_matrix_takes_its_sign_outside(expr, wrt, shapes, want, numpy_grad):
    d = matcalc.derive(expr, wrt, shapes=shapes)
    assert d.text == want
    rng = np.random.default_rng(7)
    vals = {k: (0.3 if not v else rng.standard_normal(tuple({"n": 5, "k": 3}[s] for s in v))) for k, v in shapes.items()}
    np.testing.assert_allclose(d.function(**vals), numpy_grad(**vals), rtol=1e-12)


def test_a_product_is_opened_over_a_quotient_it_cancels():
    # Poisson regression with exposure t: the rate t∘exp(Xb) cancels y's quotient, X.T@(t*exp(X@b) - y)
    rng = np.random.default_rng(31)
    X, b = rng.standard_normal((5, 3)) / 2, rng.standard_normal(3) / 2
    t, y = rng.uniform(0.5, 2.0, 5), rng.poisson(2.0, 5).astype(float)
    d = matcalc.derive("sum(t*exp(X@b) - y*log(t*exp(X@b)))", wrt="b", shapes={"X": ("n", "d")})
    assert d.text == "X.T@(t*exp(X@b) - y)"
    lam = lambda b: np.sum(t * np.exp(X @ b) - y * np.log(t * np.exp(X @ b)))  # noqa: E731
    fd = np.array([(lam(b + h) - lam(b - h)) / 2e-6 for h in 1e-6 * np.eye(3)])
    np.testing.assert_allclose(d.function(X=X, b=b, t=t, y=y), fd, rtol=1e-6)


def test_a_number_spread_over_a_sum_with_an_array_in_it_is_written_alone():
    # the expanded square's gradient: 2*(x - mu), was 2*(x - mu*1); mu is a number (Greek)
    d = matcalc.derive("sum(x**2 - 2*mu*x + mu**2)", "x")
    assert d.text == "2*(x - mu)"
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(d.function(x=x, mu=0.3), 2 * (x - 0.3), rtol=1e-15)


def test_numbers_that_a_summed_quotient_s_denominator_has_are_taken_inside_the_sum():
    # a Student-t regression's scale: sum(...)/(nu**2*sigma**4*...))*nu*sigma was left as it was
    expr = "(nu + 1)/2*sum(log(1 + (y - X@b)**2/(nu*sigma**2))) + size(y, 0)*log(sigma)"
    d = matcalc.derive(expr, "sigma")
    assert "nu**2" not in d.text and "sigma**4" not in d.text and not d.text.endswith("*nu*sigma")
    rng = np.random.default_rng(41)
    X, b, y = rng.standard_normal((6, 2)), rng.standard_normal(2), rng.standard_normal(6)
    lam = lambda s: 3.5 / 2 * np.sum(np.log(1 + (y - X @ b) ** 2 / (2.5 * s ** 2))) + 6 * np.log(s)  # noqa: E731
    fd = (lam(0.7 + 1e-6) - lam(0.7 - 1e-6)) / 2e-6
    assert d.function(X=X, b=b, y=y, nu=2.5, sigma=0.7) == pytest.approx(fd, rel=1e-7)


def test_sums_over_a_common_denominator_keep_every_term():
    # ∂ sum(w∘F)/∂w = F for random sums F of quotients over θ + e^z, arrays and numbers: the last
    # pass brought y over the denominator and kept it outside as well (−y twice)
    rng = np.random.default_rng(17)
    y, z, theta = np.array([0.0, 2.0, 5.0]), np.array([0.1, -0.3, 0.5]), 1.3
    e = np.exp(z)
    pieces = [("y*exp(z)/(theta + exp(z))", y * e / (theta + e)), ("theta*exp(z)/(theta + exp(z))", theta * e / (theta + e)),
              ("exp(z)/(theta + exp(z))", e / (theta + e)), ("y", y), ("z", z), ("1", 1.0), ("theta", theta),
              ("y*exp(z)", y * e)]
    for _ in range(150):
        k = rng.integers(3, 7)
        chosen = pieces[:2] + [pieces[i] for i in rng.choice(range(2, len(pieces)), k - 2, replace=False)]
        signs = rng.choice([1, -1], k)
        text = " + ".join(f"{'-' if s < 0 else ''}{t}" for (t, _), s in zip(chosen, signs)).replace("+ -", "- ")
        want = sum(s * v for (_, v), s in zip(chosen, signs)) * np.ones(3)
        d = matcalc.derive(f"sum(w*({text}))", "w", shapes={"y": (3,), "z": (3,), "theta": (), "w": (3,)})
        given = {k: v for k, v in dict(w=np.ones(3), y=y, z=z, theta=theta).items() if k in d.function.params}
        np.testing.assert_allclose(d.function(**given), want, rtol=1e-12, atol=1e-12,
                                   err_msg=f"{text} -> {d.text}")


def test_a_number_inside_diag_meets_the_numbers_outside():
    # 2*X@Diag(2*diag(X.T@X)) read as 4*X@Diag(diag(X.T@X))
    d = matcalc.derive("diag(X.T@X).T@diag(X.T@X)", "X")
    assert d.text == "4*X@Diag(diag(X.T@X))"
    X = np.random.default_rng(5).standard_normal((4, 3))
    np.testing.assert_allclose(d.function(X=X), 4 * X * np.sum(X * X, 0), rtol=1e-13)
