"""The optimize stage is an explicit list of passes; each alone is an identity on values."""
import numpy as np
import pytest

import matcalc
from matcalc.codegen import compile_function, function_source, module_source
from matcalc.optimize import PASSES, optimize

EXPRS = [
    ("alpha*(exp(W@x+c)-W@x-c+m*m-1):1", "W"),
    ("sum(log(1 + exp(-y*(X@w))))", "w"),
    ("logdet(S) - tr(inv(S)@A) + x.T@inv(S)@x", "S"),
    ("norm2(A@x - y)**2 + sum(log(2 + exp(A@x)))", "x"),
    ("tr(A@X.T@B@X@C)", "X"),
    ("sum(expm1(W@x)) + sum(exp(W@x) - 1)", "W"),
    ("sum(X@W) + 2*sum(A@W@B)", "W"),
    ("norm2(Diag(s)@X@W - Y)**2", "s"),
    ("G:(Diag(v)@X) + x.T@Diag(v)@x", "v"),
]


def _run(d, passes, inputs):
    G = d._leaves(d.gradient)
    src, params = function_source("g", optimize([G], passes), list(d.user_shapes), d.symbols, optimized=True)
    f = compile_function(module_source([src]), "g")
    return f(**{params[k]: v for k, v in inputs.items()})


@pytest.mark.parametrize("expr,wrt", EXPRS)
def test_every_pass_alone_keeps_the_values(expr, wrt):
    d = matcalc.derive(expr, wrt=wrt)
    rng = np.random.default_rng(4)
    from matcalc.check import choose_sizes, infer_domains, random_inputs

    dims = sorted({x for s in d.user_shapes.values() for x in s if isinstance(x, str)})
    inputs = random_inputs(d.user_shapes, infer_domains(d.lam, d.symbols), choose_sizes(dims), rng)
    plain = _run(d, (), inputs)
    for p in PASSES:
        np.testing.assert_allclose(_run(d, (p,), inputs), plain, rtol=1e-9, atol=1e-12, err_msg=p.__name__)
    np.testing.assert_allclose(d.function(**inputs), plain, rtol=1e-9, atol=1e-12)


def test_the_passes_change_what_runs():
    d = matcalc.derive("x.T@inv(S)@y + sum(log(1 + exp(A@x)))", wrt="x")
    G = d._leaves(d.gradient)
    ops = lambda e: {n.op for n in __import__("matcalc").ir.walk(e)}  # noqa: E731
    assert "solve" not in ops(G) and "solve" in ops(optimize([G])[0])


def test_a_matrix_of_ones_in_a_product_is_a_column_times_a_row():
    """∂ sum(XW)/∂W = Xᵀ 1 1ᵀ = (Xᵀ1) 1ᵀ: an outer product of two vectors, never an n×m
    array of ones multiplied by Xᵀ (n·d·m multiplications instead of n·d + d·m)."""
    shapes = {"X": ("n", "d"), "W": ("d", "m"), "A": ("k", "d"), "B": ("m", "p")}
    d = matcalc.derive("sum(X@W) + 2*sum(A@W@B)", wrt="W", shapes=shapes)
    assert "np.full((dim_n, dim_m)" not in d.numpy_source and "np.full((dim_k, dim_p)" not in d.numpy_source
    rng = np.random.default_rng(7)
    n, dd, m, k, p = 5, 3, 4, 6, 2
    X, W = rng.standard_normal((n, dd)), rng.standard_normal((dd, m))
    A, B = rng.standard_normal((k, dd)), rng.standard_normal((m, p))
    closed = np.outer(X.sum(0), np.ones(m)) + 2 * np.outer(A.sum(0), B.sum(1))
    np.testing.assert_allclose(d.function(X=X, W=W, A=A, B=B), closed, rtol=1e-12)


@pytest.mark.parametrize("expr, wrt, closed", [
    ("G:(Diag(v)@X)", "v", lambda G, X, x, Y, W, s, v: (G * X).sum(1)),
    ("x.T@Diag(v)@x", "v", lambda G, X, x, Y, W, s, v: x * x),
    ("norm2(Diag(s)@X@W - Y)**2", "s", lambda G, X, x, Y, W, s, v: 2 * ((s[:, None] * (X @ W) - Y) * (X @ W)).sum(1)),
])
def test_the_diagonal_of_a_product_is_not_the_whole_product(expr, wrt, closed):
    """diag(GXᵀ) (a weight per row: Diag(v)X) is taken as the row sums of G∘X: n·k work, not
    the n×n product GXᵀ (n = 50,000 rows would need 20 GB); X@W, which the residual has
    too, is computed once."""
    d = matcalc.derive(expr, wrt=wrt, shapes={"G": ("n", "k"), "X": ("n", "k"), "W": ("k", "m")})
    assert "np.diag" not in d.numpy_source  # (xᵀDiag(v)x reads x**2: diag(x xᵀ) = x∘x)
    assert d.numpy_source.count(".dot(") <= 1  # (X.dot(W) once; no n×n product)
    rng = np.random.default_rng(8)
    n, k, m = 7, 3, 4
    vals = dict(G=rng.standard_normal((n, k)), X=rng.standard_normal((n, k)), x=rng.standard_normal(n),
                Y=rng.standard_normal((n, m)), W=rng.standard_normal((k, m)), s=rng.standard_normal(n),
                v=rng.standard_normal(n))
    got = d.function(**{p: vals[p] for p in d.function.params})
    np.testing.assert_allclose(got, closed(**vals), rtol=1e-12)


def test_a_sum_of_given_matrices_times_a_vector_is_two_products():
    # (S.T + S)@w wrote the n×n sum first: 3-5x the time of w.dot(S) + S.dot(w) at 400-1500
    d = matcalc.derive("b.T@w - 0.5*gamma*w.T@S@w", "w")
    assert d.text == "b - 0.5*gamma*(S.T + S)@w"
    body = d.numpy_source.split("def grad_w")[1]
    assert "S.T + S" not in body and "S + S.T" not in body and body.count(".dot(") == 2, body
    rng = np.random.default_rng(8)
    S, w, b = rng.standard_normal((5, 5)), rng.standard_normal(5), rng.standard_normal(5)
    np.testing.assert_allclose(d.function(S=S, w=w, b=b, gamma=0.4), b - 0.2 * (S + S.T) @ w, rtol=1e-14)
    # a number in the sum stays in it (it has no product with the vector): (sigma - Q - W0)@z
    d = matcalc.derive("sum(sigmoid((sigma - Q - W0)@z))", "z", shapes={"Q": (3, 4), "W0": (3, 4), "sigma": ()})
    Q, W0, z = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), rng.standard_normal(4)
    M = 0.7 - Q - W0
    p = 1 / (1 + np.exp(-M @ z))
    np.testing.assert_allclose(d.function(Q=Q, W0=W0, z=z, sigma=0.7), M.T @ (p * (1 - p)), rtol=1e-13)


def _flops_of_order(shapes, left_first):
    (p, q), (_, r), (_, s) = shapes
    return p * q * r + p * r * s if left_first else q * r * s + p * q * s


@pytest.mark.parametrize("V", [3, 400])
def test_a_chain_whose_best_order_depends_on_the_sizes_is_ordered_when_called(V):
    # an embedding H@E@W: (HE)W for a large vocabulary V, H(EW) for a small one; with symbolic
    # shapes the emitted code orders it for the shapes of the call
    from matcalc import runtime

    rng = np.random.default_rng(V)
    n, d, c = 5, 7, 60
    H, E, W = np.eye(V)[rng.integers(0, V, n)], rng.standard_normal((V, d)), rng.standard_normal((d, c)) / 3
    Y = np.eye(c)[rng.integers(0, c, n)]
    dd = matcalc.derive("-sum(Y*log(softmax(H@E@W, 1)))", "E")
    assert "_chain(" in dd.numpy_source
    Z = H @ E @ W
    P = np.exp(Z - Z.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    np.testing.assert_allclose(dd.function(Y=Y, H=H, E=E, W=W), H.T @ (P - Y) @ W.T, rtol=1e-10, atol=1e-12)
    # the order taken is the one with fewer multiplications
    calls = []

    class Spy(np.ndarray):
        def dot(self, other):
            calls.append((self.shape, np.shape(other)))
            return np.asarray(self).dot(np.asarray(other))

    runtime._chain(H.view(Spy), E.view(Spy), W.view(Spy))
    left = _flops_of_order([H.shape, E.shape, W.shape], True) <= _flops_of_order([H.shape, E.shape, W.shape], False)
    assert calls[0] == ((n, V), (V, d)) if left else calls[0] == ((V, d), (d, c))
    # declared sizes: the order is fixed when the code is written
    fixed = matcalc.derive("-sum(Y*log(softmax(H@E@W, 1)))", "E", shapes={"H": (n, V), "W": (d, c)})
    assert "_chain(" not in fixed.numpy_source


def test_a_chain_is_ordered_when_called_only_where_its_best_order_depends_on_sizes():
    from matcalc import ir
    from matcalc.optimize import _order_depends_on_sizes

    A, B, C = (ir.sym(k, s) for k, s in (("A", ("n", "p")), ("B", ("p", "q")), ("C", ("q", "m"))))
    x = ir.sym("x", ("m", 1))
    assert _order_depends_on_sizes([A, B, C])
    assert not _order_depends_on_sizes([A, B, C, x])  # a matrix-vector chain: from the vector, always
    S = ir.sym("S", ("n", "n"))
    assert not _order_depends_on_sizes([S, S, S])  # one dimension: every order costs the same


def test_a_transposed_product_in_a_gradient_is_ordered_with_the_rest_of_its_chain():
    # ∂ G:(ABC)/∂C = (AB)ᵀG was A.dot(B).T.dot(G): 64·64·4000 + 4000·64·16 multiplications where
    # Bᵀ(AᵀG) takes 64·64·16 + 4000·64·16
    d = matcalc.derive("G:(A@B@C)", "C")
    assert "_chain(B.T, A.T, G)" in d.numpy_source
    rng = np.random.default_rng(3)
    A, B, C, G = (rng.standard_normal(s) for s in ((6, 5), (5, 40), (40, 3), (6, 3)))
    np.testing.assert_allclose(d.function(A=A, B=B, C=C, G=G), (A @ B).T @ G, rtol=1e-12)


def test_a_function_whose_products_are_chains_picks_its_blas_threads_too():
    # _chain's products are BLAS calls: without the wrapper they ran on every core of a busy machine (23x)
    d = matcalc.derive("sum(exp(A@X@B))", "X")
    assert "_chain(" in d.numpy_source and ".dot(" not in d.numpy_source.split("def grad_X")[1]
    assert "grad_X = _blas_threads(grad_X" in d.numpy_source
