"""Row vectors and NumPy broadcasting: a 1×m row over the rows of an n×m matrix, an n×1
column over its columns, in + - * /; 1@b.T; declared row vectors; 1-D arrays for them."""
import numpy as np
import pytest

import matcalc
from matcalc import ShapeError, cli

rng = np.random.default_rng(7)
n, d, m = 5, 3, 4
X, W, G = rng.standard_normal((n, d)), rng.standard_normal((d, m)), rng.standard_normal((n, m))
b_row, b_col = rng.standard_normal(m), rng.standard_normal(n)


def test_row_vector_over_rows_as_numpy():
    for expr in ("G:(X@W + b.T)", "G:(X@W + 1@b.T)", "G:(b.T + X@W)"):
        ds = matcalc.derive(expr, wrt=["b", "W", "X"])
        assert ds["b"].user_shapes["b"] == (ds["b"].user_shapes["W"][1],)  # length unified with W's columns
        assert np.allclose(ds["b"].function(G=G, X=X, W=W, b=b_row), G.sum(axis=0))
        assert np.allclose(ds["W"].function(G=G, X=X, W=W, b=b_row), X.T @ G)
        assert np.allclose(ds["X"].function(G=G, X=X, W=W, b=b_row), G @ W.T)


def test_column_vector_over_columns_as_numpy():
    Wc, Xc, Gc = rng.standard_normal((n, d)), rng.standard_normal((d, m)), rng.standard_normal((n, m))
    d_b = matcalc.derive("G:(W@X + b)", wrt="b")
    assert np.allclose(d_b.function(G=Gc, W=Wc, X=Xc, b=b_col), Gc.sum(axis=1))


def test_value_is_numpy_broadcasting_and_gradient_checks():
    vg = matcalc.value_and_grad("sum(exp(X@W + b.T))", wrt=["b", "W"])
    value, grads = vg.function(X=X, W=W, b=b_row)
    E = np.exp(X @ W + b_row[None, :])          # NumPy's own broadcast of a (1, m) array
    assert np.isclose(value, E.sum())
    assert np.allclose(grads["b"], E.sum(axis=0))
    assert np.allclose(grads["W"], X.T @ E)


def test_hadamard_and_division_broadcast():
    y = rng.uniform(1, 2, n)
    Xp = rng.uniform(1, 2, (n, m))
    d_b = matcalc.derive("sum(X*b.T/(y + X))", wrt="b")
    want = (Xp / (y[:, None] + Xp)).sum(axis=0)
    assert np.allclose(d_b.function(X=Xp, b=b_row, y=y), want)
    d_y = matcalc.derive("sum(X*b.T/(y + X))", wrt="y")
    want_y = -(Xp * b_row[None, :] / (y[:, None] + Xp) ** 2).sum(axis=1)
    assert np.allclose(d_y.function(X=Xp, b=b_row, y=y), want_y)
    assert d_y.check().ok and d_b.check().ok


def test_subtraction_broadcast_and_check():
    d_ = matcalc.derive("norm2(X - c.T)**2", wrt="c")  # centring the rows of X
    mu = rng.standard_normal(d)
    assert np.allclose(d_.function(X=X, c=mu), -2 * (X - mu[None, :]).sum(axis=0))
    assert d_.check().ok


def test_steps_show_the_sum_over_rows():
    d_ = matcalc.derive("sum(relu(X@W + b.T))", wrt="b")
    text = "\n".join(d_.derivation_lines())
    assert "sum(h, 0)" in text  # the adjoint of the broadcast: the sum over the rows (axis 0)
    assert d_.check().ok


def test_leading_one_is_a_column_of_ones():
    d_ = matcalc.derive("sum(exp(1@b.T + X@W))", wrt="b")
    assert np.allclose(d_.function(X=X, W=W, b=b_row), np.exp(X @ W + b_row).sum(axis=0))


@pytest.mark.parametrize("expr,shapes,words", [
    ("sum(X + b.T)", {"X": (3, 4), "b": (5,)}, ["X + b.T", "3×4", "1×5 row vector", "broadcasts"]),
    ("sum(X + b)", {"X": (3, 4), "b": (4,)}, ["X + b", "length-4 vector", "broadcasts"]),
])
def test_refusals(expr, shapes, words):
    with pytest.raises(ShapeError) as info:
        matcalc.derive(expr, wrt="X" if "X" in expr else "x", shapes=shapes)
    msg = str(info.value)
    for w in words:
        assert w in msg, msg
    assert info.value.column == 5


def test_declared_row_vector_unifies():
    for decl in ((1, 3), (1, "d")):
        ds = matcalc.derive("G:(X@W)", wrt=["X", "W"], shapes={"X": decl})
        assert ds["X"].user_shapes["G"][0] == 1
        x = rng.standard_normal(3)
        W3, g = rng.standard_normal((3, 4)), rng.standard_normal(4)
        # 1-D arrays for the declared row: the gradient comes back 1-D, as given
        gx = ds["X"].function(G=g, X=x, W=W3)
        assert gx.shape == (3,) and np.allclose(gx, W3 @ g)
        # 2-D (1, 3) arrays: back as (1, 3)
        gx2 = ds["X"].function(G=g[None, :], X=x[None, :], W=W3)
        assert gx2.shape == (1, 3) and np.allclose(gx2[0], W3 @ g)
        gw = ds["W"].function(G=g, X=x, W=W3)
        assert gw.shape == (3, 4) and np.allclose(gw, np.outer(x, g))
        assert ds["X"].check().ok and ds["W"].check().ok


def test_declared_row_vector_wrong_length_refused():
    d_ = matcalc.derive("G:(X@W)", wrt="X", shapes={"X": (1, "d")})
    with pytest.raises(ShapeError):
        d_.function(G=np.ones(4), X=np.ones(3), W=np.ones((2, 4)))


def test_a_vector_never_collapses_to_a_scalar():
    with pytest.raises(ShapeError):
        matcalc.derive("x:(X@W)", wrt="x", shapes={"X": (1, 3)})


def test_cli_row_shape(capsys):
    code = cli.run(["derive", "G:(X@W)", "--wrt", "X", "--shape", "X=1,3"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "G@W.T" in out and "(1, 3)" in out


def test_an_identity_beside_a_1_by_1_block_is_1_by_1():
    # X declared (1, d): X@X.T is 1×1, a number, and I + X@X.T is the 1×1 identity plus it
    # (np.eye(1) + X @ X.T); it was refused as an identity of unknown size
    d = matcalc.derive("logdet(I + X@X.T)", wrt="X", shapes={"X": (1, "d")})
    X = rng.standard_normal((1, 5))
    np.testing.assert_allclose(d.function(X=X), 2 * X / (1 + X @ X.T))  # d log(1 + ‖x‖²)
    h = matcalc.hessian("logdet(I - X@X.T)", "X", shapes={"X": (1, "d")})
    X = X * 0.3
    q = 1 - X @ X.T
    want = -2 * np.eye(5) / q[0, 0] - 4 * X.T @ X / q[0, 0] ** 2  # of log(1 - ‖x‖²)
    np.testing.assert_allclose(h.matrix(X=X), want, rtol=1e-10)
    q = (X @ X.T)[0, 0]
    for expr, want in (("logdet(2*I - X@X.T)", -2 * X / (2 - q)), ("logdet(I + X@X.T + I)", 2 * X / (2 + q))):
        g = matcalc.derive(expr, wrt="X", shapes={"X": (1, "d")}).function(X=X)  # a scaled I, two I's
        np.testing.assert_allclose(g, want, rtol=1e-12)
    x = X[0]  # beside a product of vectors too, declared or not: 1 + xᵀx
    g = matcalc.derive("tr(inv(I + x.T@x))", wrt="x").function(x=x)
    np.testing.assert_allclose(g, -2 * x / (1 + x @ x) ** 2, rtol=1e-12)
    # beside numbers only (no product makes the 1×1), an identity nothing sizes is refused; a
    # product of numbers elsewhere in a sum is no scaled identity (it raised StopIteration)
    for expr in ("tr(I + alpha) + sum(x)", "tr(I + alpha) + 2*alpha"):
        with pytest.raises(ShapeError, match="size of I"):
            matcalc.derive(expr, wrt="alpha", shapes={"x": ("n", 1)} if "x" in expr else None)
    assert matcalc.derive("logdet(I + X@X.T) + 2*alpha", wrt="alpha", shapes={"X": (1, "d")}).text == "2"


def test_the_1_by_1_identity_in_other_spellings():
    # I/2, I@I and a product that asks for the identity's size all make it 1×1 beside a 1×1
    # block (each was refused as an identity of unknown size)
    X = rng.standard_normal((1, 5)) * 0.5
    q = (X @ X.T)[0, 0]
    cases = (("logdet(I/2 + X@X.T)", 2 * X / (0.5 + q)), ("logdet(X@X.T + 2*I@I/3)", 2 * X / (2 / 3 + q)),
             ("logdet(I@I - X@X.T)", -2 * X / (1 - q)),
             # d[(1 + q) sum(X)] = 2 sum(X) X + (1 + q) 1ᵀ, in both orders of the product
             ("sum((I + X@X.T)@X)", 2 * X.sum() * X + (1 + q)), ("sum(X.T@(I + X@X.T))", 2 * X.sum() * X + (1 + q)))
    for expr, want in cases:
        g = matcalc.derive(expr, wrt="X", shapes={"X": (1, "d")}).function(X=X)
        np.testing.assert_allclose(g, want, rtol=1e-12, err_msg=expr)
    # an identity a symbol sizes keeps that size: (I + x)@x.T asks a square I to meet a row
    with pytest.raises(ShapeError, match="inner dimensions"):
        matcalc.derive("sum((I + x)@x.T)", wrt="x")
    with pytest.raises(ShapeError, match="size of I"):
        matcalc.derive("tr(I/2 + alpha)", wrt="alpha")


@pytest.mark.parametrize("expr, lam", [
    ("sum(exp(-(x - y.T)**2))", lambda x, y: np.sum(np.exp(-(x[:, None] - y[None, :]) ** 2))),
    ("sum(A*(x*y.T))", lambda x, y: np.sum(np.outer(x, y) * np.outer(np.arange(1.0, 4.0), np.arange(1.0, 5.0)))),
    ("sum(log(1 + (x.T/(y + 3)).T**2))", lambda x, y: np.sum(np.log(1 + (x[None, :] / (y[:, None] + 3)).T ** 2))),
])
def test_a_column_and_a_row_broadcast_to_every_pair(expr, lam):
    # x - y.T is n×m, (xᵢ − yⱼ), as NumPy's x[:, None] - y[None, :]; it was refused
    x, y = rng.standard_normal(3), rng.standard_normal(4)
    vals = dict(x=x, y=y, A=np.outer(np.arange(1.0, 4.0), np.arange(1.0, 5.0)))
    h = 1e-6
    for wrt, v in (("x", x), ("y", y)):
        d = matcalc.derive(expr, wrt)
        got = d.function(**{k: vals[k] for k in d.function.params})

        def at(t):
            return lam(**{**dict(x=x, y=y), wrt: t})

        fd = [(at(v + h * e) - at(v - h * e)) / (2 * h) for e in np.eye(len(v))]
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)
    H = matcalc.hessian(expr, "x").matrix(**{k: vals[k] for k in ("x", "y", "A") if k in expr})
    assert H.shape == (3, 3) and np.allclose(H, H.T)
    with pytest.warns(matcalc.NotationWarning, match="combines a column and a row: every pair"):
        matcalc.derive("sum(x + y.T)", "x")
    d = matcalc.derive("sum(c*r)", "r", shapes={"c": ("n", 1), "r": (1, "m")})
    np.testing.assert_allclose(d.function(c=x[:, None], r=y[None, :]), np.full((1, 4), x.sum()))


@pytest.mark.parametrize("expr,numpy_value", [
    ("sum(u, -1)", lambda u, y: np.sum(u, -1)),
    ("mean(u, -1)", lambda u, y: np.mean(u, -1)),
    ("logsumexp(u, -1)", lambda u, y: np.log(np.sum(np.exp(u), -1))),
    ("softmax(u, -1):y", lambda u, y: np.exp(u) @ y / np.sum(np.exp(u))),
])
def test_the_last_axis_of_a_vector_is_its_only_one_as_in_numpy(expr, numpy_value):
    # a column's axis -1 (its columns, of length 1) gave "λ must be a scalar" or a refusal
    u, y = np.array([0.3, -1.2, 2.0, 0.5]), np.array([1.0, 2.0, 3.0, 4.0])
    args = {"u": u, "y": y} if "y" in expr else {"u": u}
    value, grads = matcalc.value_and_grad(expr, wrt=["u"]).function(**args)
    assert value == pytest.approx(numpy_value(u, y), rel=1e-13)
    h, E = 1e-6, np.eye(4)
    fd = [(numpy_value(u + h * E[i], y) - numpy_value(u - h * E[i], y)) / (2 * h) for i in range(4)]
    np.testing.assert_allclose(grads["u"], fd, atol=1e-8)


def test_the_last_axis_of_a_declared_column_is_numpy_s_axis_1():
    # a symbol declared (n, 1) is given as an (n, 1) array: its axis -1 has length 1 there
    d = matcalc.derive("sum(sum(Z, -1)**2)", "Z", shapes={"Z": ("n", 1)})
    Z = np.array([[1.0], [2.0], [3.0]])
    np.testing.assert_allclose(d.function(Z=Z), 2 * Z)  # λ = Σ z_i², as np.sum(np.sum(Z, -1)**2)
