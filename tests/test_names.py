"""Names that never clash: dimension names avoid the symbols' names, automatic definition
names avoid the user's."""
import numpy as np
import pytest

import matcalc

EXPRS = [
    ("G:(X@W + b.T)", "b", None),
    ("x.T@a + c:c", "x", None),
    ("sum(exp(A@b@c.T@d))", "A", None),
    ("sum(W1@h + c)", "W0", {"h": "relu(W0@x+b)"}),
]


@pytest.mark.parametrize("expr,wrt,defs", EXPRS, ids=[e[0] for e in EXPRS])
def test_dimension_names_avoid_symbol_names(expr, wrt, defs):
    d = matcalc.derive(expr, wrt=wrt, definitions=defs)
    dims = {x for shape in d.user_shapes.values() for x in shape if isinstance(x, str)}
    taken = set(d.user_shapes) | set(defs or {})
    assert dims and not dims & taken, (dims, taken)
    assert d.check().ok


def test_bias_b_and_its_shape():
    d = matcalc.derive("G:(X@W + b.T)", wrt="b")
    assert d.shape != ("b",)
    assert "(b,)" not in d.shape_text


def test_automatic_names_avoid_the_users():
    d = matcalc.derive("sum(W1@h + c)", wrt="W0", definitions={"h": "relu(W0@x+b)"})
    auto = d.definitions
    assert list(auto).count("h") == 1 and auto["h"].startswith("relu(")
    step_names = [k for k, v in auto.items() if v.startswith("step(")]
    assert step_names and step_names[0] != "h"
    # and with h a symbol of the expression
    d = matcalc.derive("h.T@relu(W@x + c)", wrt="W")
    names = d.definitions
    assert "h" not in names and all(k not in d.user_shapes for k in names)


def test_declared_dimension_names_are_kept():
    d = matcalc.derive("G:(X@W)", wrt="W", shapes={"X": ("n", "d"), "W": ("d", "m")})
    assert d.shape == ("d", "m")


def test_latex_of_greek_subscripts_and_a_trailing_underscore():
    from matcalc.printing import tex_name

    assert tex_name("x_λ") == tex_name("x_lambda") == "x_{\\lambda}"  # was x_{lambda}
    assert tex_name("alpha_beta") == "\\alpha_{\\beta}"
    assert tex_name("x_") != tex_name("x")  # both typeset as x
    d = matcalc.derive("x_:x_ + x:x", "x_")
    assert "x\\_" in d.latex


def test_the_objective_is_l_in_text_where_a_symbol_is_named_lambda():
    # ∂λ/∂w = λ*1 + … read as the objective's own name, and so did ∂λ/∂w = 2*lambda*w (a ridge penalty)
    d = matcalc.derive("λ*sum(w) + w:w", "w")
    assert str(d).startswith("∂ℓ/∂w = ") and d.derivation_lines()[0].startswith("ℓ = ")
    assert str(matcalc.derive("lambda*w:w", "w")).startswith("∂ℓ/∂w = ")
    assert str(matcalc.derive("lam*w:w", "w", shapes={"lam": ()})).startswith("∂λ/∂w = ")
    d = matcalc.derive("ℓ*w:w + lambda*sum(w)", "w", shapes={"ℓ": ()})  # ℓ taken too: L
    assert str(d).startswith("∂L/∂w = ") and "\\mathcal{L}" in d._repr_markdown_()


def test_unicode_dimension_names():
    # shapes={"W": ("λ", "μ")} was refused as a bad dimension; as symbol names, any letters
    import subprocess
    import sys

    import numpy as np

    shapes = {"W": ("λ", "μ"), "x": ("μ",)}
    d = matcalc.derive("sum(exp(W@x))", wrt="W", shapes=shapes)
    assert d.shape == ("λ", "μ") and str(d).startswith("∂ℓ/∂W")  # the dimension λ is not the objective
    rng = np.random.default_rng(5)
    W, x = rng.standard_normal((2, 3)), rng.standard_normal(3)
    np.testing.assert_allclose(d.function(W=W, x=x), np.outer(np.exp(W @ x), x), rtol=1e-12)
    h = matcalc.hessian("sum(exp(W@x))", "W", shapes=shapes)
    z = np.exp(W @ x)
    np.testing.assert_allclose(h.matrix(W=W, x=x), np.kron(np.outer(x, x), np.diag(z)), rtol=1e-12)
    m = matcalc.derive("sum(mean(W, 0))", wrt="W", shapes={"W": ("λ", "μ")})
    np.testing.assert_allclose(m.function(W=W), np.full((2, 3), 0.5))
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "sum(mean(W, 0))", "--wrt", "W",
                        "--shape", "W=λ,μ"], capture_output=True, text=True, encoding="utf-8")
    assert r.returncode == 0 and "(λ, μ)" in r.stdout, r.stderr
    for bad in ("2n", "n-1", "a b"):
        with pytest.raises(matcalc.ShapeError, match="bad dimension"):
            matcalc.derive("sum(W)", wrt="W", shapes={"W": (bad, "m")})


def test_the_sigmoid_is_written_out_in_latex_beside_a_symbol_sigma():
    # σ(Wx) beside a symbol σ read as σ times (Wx); the steps and definitions too
    d = matcalc.derive("sum(sigma*sigmoid(W@x))", "W")
    assert "\\operatorname{sigmoid}" in d.latex and "\\sigma\\left(" not in d.steps_latex
    assert "s &= \\operatorname{sigmoid}\\left(z\\right)" in d.steps_latex
    h = matcalc.hessian("sum(sigma*sigmoid(W@x))", "W")
    assert "\\sigma\\left(" not in h.latex + h.kron_latex + h.steps_latex
    d = matcalc.derive("sum(sigmoid(W@x))", "W", definitions={"sigma": "W@x"})  # a definition named σ
    assert "\\sigma\\left(" not in d.latex + d.steps_latex
    plain = matcalc.derive("sum(alpha*sigmoid(W@x))", "W")  # no symbol σ: the usual σ(Wx)
    assert "\\sigma\\left(W x\\right)" in plain.latex and "sigmoid" not in plain.latex


def test_latex_of_greek_strings_and_letters_beyond_ascii():
    from matcalc.printing import tex_name

    assert tex_name("αβ") == "\\alpha\\beta"  # was \mathrm{alphabeta}
    assert tex_name("xé") == "\\text{xé}" and tex_name("é") == "\\text{é}"  # é has no glyph in math mode
    assert tex_name("W1") == "W_{1}" and tex_name("ab") == "\\mathrm{ab}"


def test_a_defined_sum_met_by_other_terms_keeps_its_name():
    # Euler steps x2 = x1 + h*tanh(W@x1 + b): simplify flattened x2 into x2 - y, and the result
    # wrote x + h*tanh(W@x + b) + h*tanh(W@x1 + b) - y three times (236 characters)
    defs = {"x1": "x + h*tanh(W@x + b)", "x2": "x1 + h*tanh(W@x1 + b)"}
    d = matcalc.derive("norm2(x2 - y)**2", "W", definitions=defs, shapes={"h": ()})
    assert d.text.count("x2 - y") == 2 and len(d.text) <= 130
    assert d.steps[-1].written == "the definitions by their names"
    assert d.steps[-1].identity_latex == "\\text{the definitions by their names}"  # (not a tab and "ext")
    rng = np.random.default_rng(0)
    W, (x, b, y), h = rng.standard_normal((3, 3)), rng.standard_normal((3, 3)), 0.3

    def lam(W):
        x1 = x + h * np.tanh(W @ x + b)
        return np.sum((x1 + h * np.tanh(W @ x1 + b) - y) ** 2)

    fd = np.array([(lam(W + 1e-6 * E) - lam(W - 1e-6 * E)) / 2e-6 for E in np.eye(9).reshape(9, 3, 3)])
    np.testing.assert_allclose(d.function(W=W, x=x, b=b, y=y, h=h), fd.reshape(3, 3), atol=1e-8)
    # an MLP's output o = W2@h + b2 in o - y
    assert matcalc.derive("norm2(o - y)**2", "W1", definitions={"h": "tanh(W1@x + b1)", "o": "W2@h + b2"}).text \
        == "2*((W2.T@(o - y))*(1 - h**2))@x.T"


def _fd(f, X, h=1e-6):
    """Central differences of f (array -> array) in every entry of X: (size f, size X), column-major."""
    cols = []
    for k in range(X.size):
        E = np.zeros(X.size)
        E[k] = h
        E = E.reshape(X.shape, order="F")
        cols.append(((np.asarray(f(X + E)) - np.asarray(f(X - E))) / (2 * h)).ravel(order="F"))
    return np.array(cols).T


MLP = {"h": "tanh(W1@x + b1)", "o": "W2@h + b2"}


def test_a_defined_sum_met_times_a_number_keeps_its_name():
    # 2*(o - y) was written 2*W2@h + 2*b2 - 2*y; u = x + y in 2*x + 2*y - 1
    d = matcalc.derive("norm2(o - y)**2 + sum(log(1 + exp(o - y)))", "W2", definitions=MLP)
    assert d.text == "(2*o + sigmoid(o - y) - 2*y)@h.T"
    assert matcalc.derive("sum(u*u) - sum(u)", "x", definitions={"u": "x + y"}).text == "2*u - 1"
    rng = np.random.default_rng(3)
    W1, W2 = rng.standard_normal((4, 3)), rng.standard_normal((5, 4))
    x, b1, b2, y = rng.standard_normal(3), rng.standard_normal(4), rng.standard_normal(5), rng.standard_normal(5)

    def lam(W2):
        o = W2 @ np.tanh(W1 @ x + b1) + b2
        return np.sum((o - y) ** 2) + np.sum(np.log1p(np.exp(o - y)))

    np.testing.assert_allclose(d.function(W1=W1, W2=W2, x=x, b1=b1, b2=b2, y=y),
                               _fd(lam, W2).reshape(W2.shape, order="F"), atol=1e-7)


def test_hessians_and_jacobians_write_defined_sums_by_their_names():
    H = matcalc.hessian("sum(log(1 + exp(o - y)))", "b2", definitions=MLP)
    assert H.text == "sigmoid(o - y)*(1 - sigmoid(o - y))*db2"  # (was sigmoid(W2@h + b2 - y) twice)
    assert H.kron == "Diag(sigmoid(o - y)*(1 - sigmoid(o - y)))"
    assert H.steps[-1].identity == "the definitions by their names"
    defs = {"x1": "x + h*tanh(W@x + b)", "x2": "x1 + h*tanh(W@x1 + b)"}
    J = matcalc.jacobian("tanh(x2 - y)", "b", definitions=defs, shapes={"h": ()})
    assert "tanh(x2 - y)" in J.text and "x + h*tanh" not in J.text
    rng = np.random.default_rng(4)
    W1, W2 = rng.standard_normal((4, 3)), rng.standard_normal((5, 4))
    x, b1, b2, y = rng.standard_normal(3), rng.standard_normal(4), rng.standard_normal(5), rng.standard_normal(5)
    grad = lambda b2: 1 / (1 + np.exp(-(W2 @ np.tanh(W1 @ x + b1) + b2 - y)))  # noqa: E731  (∂λ/∂b2)
    np.testing.assert_allclose(H.matrix(W1=W1, W2=W2, x=x, b1=b1, b2=b2, y=y), _fd(grad, b2), atol=1e-8)
    W, (x, b, y), h = rng.standard_normal((3, 3)), rng.standard_normal((3, 3)), 0.3

    def F(b):
        x1 = x + h * np.tanh(W @ x + b)
        return np.tanh(x1 + h * np.tanh(W @ x1 + b) - y)

    np.testing.assert_allclose(J.matrix(W=W, x=x, b=b, y=y, h=h), _fd(F, b), atol=1e-8)


def test_a_defined_product_met_inside_a_longer_product_keeps_its_name():
    # g = Z.T@(y - X@b) in the GMM objective g.T@g: the gradient wrote -2*X.T@Z@Z.T@(y - X@b)
    rng = np.random.default_rng(6)
    Z, X, y, b = rng.standard_normal((7, 4)), rng.standard_normal((7, 3)), rng.standard_normal(7), rng.standard_normal(3)
    d = matcalc.derive("g.T@g", "b", definitions={"g": "Z.T@(y - X@b)"})
    assert d.text == "-2*X.T@Z@g" and d.steps[-1].identity == "the definitions by their names"
    np.testing.assert_allclose(d.function(Z=Z, X=X, y=y, b=b), -2 * X.T @ Z @ Z.T @ (y - X @ b), rtol=1e-12)
    # and its transpose: (y - X@b).T@Z is g.T
    W = rng.standard_normal((4, 4))
    d = matcalc.derive("g.T@W@g", "W", definitions={"g": "Z.T@(y - X@b)"})
    assert d.text == "g@g.T"
    g = Z.T @ (y - X @ b)
    np.testing.assert_allclose(d.function(Z=Z, X=X, y=y, b=b, W=W), np.outer(g, g), rtol=1e-12)
    # a projection Pz = Z inv(ZᵀZ) Zᵀ inside inv(X.T@Pz@X), twice
    d = matcalc.derive("c.T@inv(X.T@Pz@X)@c", "X", definitions={"Pz": "Z@inv(Z.T@Z)@Z.T"})
    assert d.text == "-2*Pz@X@inv(X.T@Pz@X)@c@c.T@inv(X.T@Pz@X)"
    c = rng.standard_normal(3)
    P = Z @ np.linalg.inv(Z.T @ Z) @ Z.T
    M = np.linalg.inv(X.T @ P @ X)
    np.testing.assert_allclose(d.function(Z=Z, X=X, c=c), -2 * P @ X @ M @ np.outer(c, c) @ M, rtol=1e-10)


def test_a_scaled_defined_product_is_named_where_its_number_is_there_to_take():
    # Bayesian evidence, m = beta*inv(A)@X.T@y: y - beta*X@inv(A)@X.T@y is y - X@m (154 → 138 characters)
    defs = {"A": "alpha*I + beta*X.T@X", "m": "beta*inv(A)@X.T@y"}
    expr = "0.5*beta*norm2(y - X@m)**2 + 0.5*alpha*m.T@m + 0.5*logdet(A) - 0.5*size(X, 1)*log(alpha)"
    d = matcalc.derive(expr, "alpha", definitions=defs)
    assert "y - X@m" in d.text and "beta*X@inv(A)" not in d.text and len(d.text) <= 140, d.text
    rng = np.random.default_rng(9)
    X, y, al, be = rng.standard_normal((6, 3)), rng.standard_normal(6), 0.7, 1.3

    def lam(al):
        A = al * np.eye(3) + be * X.T @ X
        m = be * np.linalg.solve(A, X.T @ y)
        return 0.5 * be * np.sum((y - X @ m) ** 2) + 0.5 * al * m @ m + 0.5 * np.linalg.slogdet(A)[1] - 1.5 * np.log(al)

    np.testing.assert_allclose(d.function(X=X, y=y, alpha=al, beta=be), (lam(al + 1e-6) - lam(al - 1e-6)) / 2e-6,
                               rtol=1e-7)
