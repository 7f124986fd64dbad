"""The standalone NumPy source converts its arguments on entry: integer arrays, lists and
ints give the same gradient as float arrays (in-place updates never hit an int array)."""
import numpy as np
import pytest

import matcalc
from matcalc.codegen import compile_function
from support.fd import central_fd_grad

CASES = [
    ("alpha*(exp(W@x+c)-W@x-c+m*m-1):1", "W"),
    ("sum(exp(tanh(X@W)))", "W"),
    ("logdet(X) + x.T@inv(X)@x", "X"),
    ("sum(relu(W0@x + b) ** 2) + beta*norm2(x)", "x"),
]


@pytest.mark.parametrize("expr,wrt", CASES, ids=[c[0] for c in CASES])
def test_int_arrays_and_lists(expr, wrt):
    d = matcalc.derive(expr, wrt=wrt)
    f = compile_function(d.numpy_source, d.function.name)
    rng = np.random.default_rng(2)
    dims = {}
    ints = {}
    for name, shape in d.user_shapes.items():
        sh = tuple(dims.setdefault(s, 2 + len(dims)) for s in shape)
        if name == "X" and "logdet" in expr:
            v = 3 * np.eye(sh[0], dtype=int) + rng.integers(-1, 2, sh)
        else:
            v = rng.integers(-3, 4, sh) if sh else int(rng.integers(1, 4))
        ints[name] = v
    floats = {k: np.asarray(v, dtype=float) if np.ndim(v) else float(v) for k, v in ints.items()}
    params = d.function.params
    want = f(**{params[k]: v for k, v in floats.items()})
    got_int = f(**{params[k]: v for k, v in ints.items()})
    got_list = f(**{params[k]: (v.tolist() if np.ndim(v) else v) for k, v in ints.items()})
    assert np.allclose(got_int, want) and np.allclose(got_list, want)
    assert np.asarray(got_int).dtype == np.float64
    # the arguments themselves are not modified
    assert all(np.array_equal(ints[k], floats[k]) for k in ints)


def test_the_source_says_so():
    src = matcalc.derive("sum(exp(X@W))", wrt="W").numpy_source
    assert "X = np.asarray(X, float)" in src


# A declared size-1 dimension: the standalone source takes the argument in its declared shape
# or squeezed, and gives the gradient the shape its argument was given in.
UNIT = [
    # (expression, wrt, shapes, NumPy λ of the declared-shape arrays)
    ("sum(exp(X@W))", "W", {"X": ("a", "b"), "W": ("b", 1)}, lambda X, W: np.sum(np.exp(X @ W))),
    ("G:(X/r)", "r", {"X": ("a", "b"), "r": (1, "b"), "G": ("a", "b")}, lambda X, r, G: np.sum(G * X / r)),
    ("sum(tanh(X + r))", "r", {"X": ("a", "b"), "r": (1, "b")}, lambda X, r: np.sum(np.tanh(X + r))),
    ("x.T@A@x", "x", {"x": (1,), "A": (1, 1)}, lambda x, A: float(x @ A @ x)),
    ("x.T@A@x", "A", {"x": (1,), "A": (1, 1)}, lambda x, A: float(x @ A @ x)),
    ("c.T@M@c", "c", {"c": ("b", 1), "M": ("b", "b")}, lambda c, M: float((c.T @ M @ c)[0, 0])),
    # matrix_power, vec of a 1×1 matrix: its number's power and itself
    ("tr(matrix_power(B, 3))", "B", {"B": (1, 1)}, lambda B: float(np.trace(np.linalg.matrix_power(B, 3)))),
    ("tr(matrix_power(B, -2))", "B", {"B": (1, 1)}, lambda B: float(np.trace(np.linalg.matrix_power(B, -2)))),
    ("sum(vec(B)*x)", "B", {"B": (1, 1), "x": (1,)}, lambda B, x: float(np.sum(B.reshape(-1) * x))),
]


def _unit_inputs(shapes, rng):
    size = {"a": 3, "b": 4}
    return {k: rng.uniform(0.5, 1.5, tuple(size.get(d, d) for d in sh)) for k, sh in shapes.items()}


@pytest.mark.parametrize("expr,wrt,shapes,lam", UNIT, ids=[f"{c[0]} wrt {c[1]}" for c in UNIT])
def test_declared_size_one_dimensions_in_the_standalone_source(expr, wrt, shapes, lam):
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    f = compile_function(d.numpy_source, d.function.name)
    inputs = _unit_inputs(shapes, np.random.default_rng(4))
    want = central_fd_grad(lam, inputs, wrt)
    got = f(**inputs)
    assert np.shape(got) == inputs[wrt].shape
    np.testing.assert_allclose(got, want, rtol=1e-6)
    squeezed = {k: v.reshape(-1) if v.ndim == 2 and 1 in v.shape and v.size > 1 else v for k, v in inputs.items()}
    got = f(**squeezed)  # NumPy's 1-D vectors for the rows and columns work too
    assert np.shape(got) == squeezed[wrt].shape
    np.testing.assert_allclose(np.reshape(got, want.shape), want, rtol=1e-6)
    np.testing.assert_allclose(d.function(**inputs), want, rtol=1e-6)
    value, grads = matcalc.value_and_grad(expr, wrt=[wrt], shapes=shapes).function(**inputs)
    assert np.isclose(value, lam(**inputs))
    np.testing.assert_allclose(grads[wrt], want, rtol=1e-6)


def test_value_and_grad_keeps_the_shapes_of_size_one_arguments():
    shapes = {"X": ("a", "b"), "W": ("b", 1), "r": (1, "a")}
    lam = lambda X, W, r: float((r @ np.exp(X @ W))[0, 0])  # noqa: E731
    vg = matcalc.value_and_grad("r@exp(X@W)", wrt=["W", "r", "X"], shapes=shapes)
    inputs = _unit_inputs(shapes, np.random.default_rng(5))
    for f in (vg.function, compile_function(vg.numpy_source, "value_and_grad")):
        value, grads = f(**inputs)
        assert np.isclose(value, lam(**inputs))
        for k in ("W", "r", "X"):
            assert grads[k].shape == inputs[k].shape, k
            np.testing.assert_allclose(grads[k], central_fd_grad(lam, inputs, k), rtol=1e-6, err_msg=k)


def test_hessian_source_takes_a_declared_column():
    """sum(exp(X@W)) with W a column (b, 1): H = Xᵀ Diag(exp(XW)) X, from the standalone
    module with W given as declared or squeezed."""
    shapes = {"X": ("a", "b"), "W": ("b", 1)}
    h = matcalc.hessian("sum(exp(X@W))", wrt="W", shapes=shapes)
    inputs = _unit_inputs(shapes, np.random.default_rng(6))
    X, W = inputs["X"], inputs["W"]
    want = X.T @ np.diag(np.exp(X @ W)[:, 0]) @ X
    f = compile_function(h.numpy_source, "hessian_W")
    for w in (W, W.reshape(-1)):
        np.testing.assert_allclose(f(X=X, W=w), want, rtol=1e-12)


def test_hvp_and_vjp_take_the_shape_their_variable_was_given_in():
    shapes = {"X": ("a", "b"), "W": ("b", 1)}
    inputs = _unit_inputs(shapes, np.random.default_rng(8))
    X, W = inputs["X"], inputs["W"]
    V = np.random.default_rng(9).standard_normal((4, 1))
    h = matcalc.hessian("sum(exp(X@W))", wrt="W", shapes=shapes)
    want = X.T @ (np.exp(X @ W) * (X @ V))  # H[V] = Xᵀ (exp(XW) ∘ XV), (b, 1)
    np.testing.assert_allclose(h.hvp(V, X=X, W=W), want, rtol=1e-12)  # a column, as W
    np.testing.assert_allclose(h.hvp(V.ravel(), X=X, W=W.ravel()), want.ravel(), rtol=1e-12)
    j = matcalc.jacobian("exp(X@W)", wrt="W", shapes=shapes)
    G = np.arange(1.0, 4.0)
    want = X.T @ (G[:, None] * np.exp(X @ W))  # Jᵀ[G] = Xᵀ (G ∘ exp(XW)), (b, 1)
    np.testing.assert_allclose(j.vjp(G, X=X, W=W), want, rtol=1e-12)
    np.testing.assert_allclose(j.vjp(G, X=X, W=W.ravel()), want.ravel(), rtol=1e-12)


# a gradient that is an argument, or a transpose or diagonal of one: a new array
ALIASING = [
    ("x:y", "x", {"x": ("n",), "y": ("n",)}, lambda v: v["y"]),
    ("A:X.T", "X", {"X": ("n", "m"), "A": ("m", "n")}, lambda v: v["A"].T),
    ("diag(X):y", "y", {"X": ("n", "n"), "y": ("n",)}, lambda v: np.diag(v["X"])),
    ("vec(X):z", "z", {"X": ("n", "m"), "z": ("n*m",)}, lambda v: v["X"].reshape(-1, order="F")),
]


def _values(shapes, rng):
    sizes = {"n": 3, "m": 4, "n*m": 12}
    return {k: rng.standard_normal(tuple(sizes[d] for d in s)) for k, s in shapes.items()}


@pytest.mark.parametrize("expr,wrt,shapes,want", ALIASING, ids=[c[0] for c in ALIASING])
def test_a_gradient_never_shares_memory_with_an_argument(expr, wrt, shapes, want):
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    vg = matcalc.value_and_grad(expr, wrt=[wrt], shapes=shapes)
    values = _values(shapes, np.random.default_rng(3))
    standalone = compile_function(d.numpy_source, d.function.name)
    for g in (d.function(**values), standalone(**values), vg.function(**values)[1][wrt]):
        assert np.allclose(g, want(values))
        assert g.flags.writeable and not any(np.shares_memory(g, v) for v in values.values())
        g[...] = 0.0  # the user's arrays keep their values
        assert np.allclose(want(values), want(_values(shapes, np.random.default_rng(3))))


def test_two_gradients_are_two_arrays():
    # ∂/∂x and ∂/∂y of sum(exp(x + y)) are the same values: one array computed, two returned
    vg = matcalc.value_and_grad("sum(exp(x+y))", wrt=["x", "y"], shapes={"x": ("n",), "y": ("n",)})
    x, y = np.array([0.1, -0.2, 0.3]), np.array([0.5, 0.0, -1.0])
    _, g = vg.function(x=x, y=y)
    assert np.allclose(g["x"], np.exp(x + y)) and np.allclose(g["y"], np.exp(x + y))
    assert not np.shares_memory(g["x"], g["y"])


def test_second_order_products_never_return_the_tangent():
    V = np.arange(3.0)
    h = matcalc.hessian("x:x/2", wrt="x", shapes={"x": ("n",)})  # H = I: H[V] = V
    r = h.hvp(V, x=np.ones(3))
    assert np.allclose(r, V) and not np.shares_memory(r, V)
    j = matcalc.jacobian("X.T", wrt="X", shapes={"X": ("n", "m")})  # J[V] = Vᵀ, Jᵀ[G] = Gᵀ
    G, X = np.ones((4, 3)), np.zeros((3, 4))
    r = j.vjp(G, X=X)
    assert np.allclose(r, G.T) and not np.shares_memory(r, G)


def test_the_gradient_of_a_vector_given_as_a_column_or_row_has_its_shape():
    # as x.grad has x's shape in torch; it came back 1-D
    d = matcalc.derive("sum(exp(A@x))", wrt="x")
    rng = np.random.default_rng(0)
    A, x = rng.standard_normal((2, 3)), rng.standard_normal(3)
    want = A.T @ np.exp(A @ x)
    for given in (x, x[:, None], x[None, :]):
        g = d.function(A=A, x=given)
        assert g.shape == given.shape
        np.testing.assert_allclose(g.reshape(-1), want, rtol=1e-12)
