"""matcalc.op: the derived VJP as the backward of a torch / jax operation, checked with
torch.autograd.gradcheck and against jax's own derivatives of the plain expression."""
import numpy as np
import pytest

import matcalc

try:  # the jax tests run in float64, as NumPy does
    import jax

    jax.config.update("jax_enable_x64", True)
except ImportError:
    pass

RNG = np.random.default_rng(7)
# (expr, shapes, plain forward in the array module xp, inputs) with a different size per dimension
n, d, m = 3, 4, 5
S0 = RNG.standard_normal((n, n))
CASES = [
    ("tanh(W@X + b@1.T)", {"W": ("n", "d"), "X": ("d", "m"), "b": ("n",)},
     lambda xp, W, X, b: xp.tanh(W @ X + b[:, None]),
     dict(W=RNG.standard_normal((n, d)), X=RNG.standard_normal((d, m)), b=RNG.standard_normal(n))),
    ("softmax(W@x)", {"W": ("n", "d"), "x": ("d",)},
     lambda xp, W, x: xp.exp(W @ x) / xp.sum(xp.exp(W @ x)),
     dict(W=RNG.standard_normal((n, d)), x=RNG.standard_normal(d))),
    ("G:exp(X@W)", {"G": ("n", "m"), "X": ("n", "d"), "W": ("d", "m")},
     lambda xp, G, X, W: xp.sum(G * xp.exp(X @ W)),
     dict(G=RNG.standard_normal((n, m)), X=RNG.standard_normal((n, d)), W=0.5 * RNG.standard_normal((d, m)))),
    ("alpha*logdet(S) + x.T@inv(S)@x", {"S": ("n", "n"), "x": ("n",), "alpha": ()},
     None,
     dict(S=S0 @ S0.T + n * np.eye(n), x=RNG.standard_normal(n), alpha=0.7)),
    ("exp(X@W)", {"X": ("n", "d"), "W": ("d", "m")},
     lambda xp, X, W: xp.exp(X @ W),
     dict(X=RNG.standard_normal((n, d)), W=0.5 * RNG.standard_normal((d, m)))),
]
IDS = [c[0] for c in CASES]


def _plain_logdet(xp, S, x, alpha):
    if xp.__name__.startswith("jax"):
        return alpha * xp.linalg.slogdet(S)[1] + x @ xp.linalg.solve(S, x)
    return alpha * xp.linalg.slogdet(S)[1] + x @ xp.linalg.solve(S, x)


@pytest.mark.parametrize("expr,shapes,plain,inputs", CASES, ids=IDS)
def test_torch_gradcheck(expr, shapes, plain, inputs):
    torch = pytest.importorskip("torch")
    f = matcalc.op(expr, backend="torch", shapes=shapes)
    names = list(inputs)
    args = tuple(torch.tensor(inputs[k], dtype=torch.float64, requires_grad=True) for k in names)
    assert torch.autograd.gradcheck(lambda *a: f(**dict(zip(names, a))), args)
    # and the same value as torch's own expression, with the same gradients as its autograd
    plain = plain or _plain_logdet
    want = plain(torch, **dict(zip(names, args)))
    got = f(**dict(zip(names, args)))
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    G = torch.randn(got.shape, dtype=torch.float64)
    g1 = torch.autograd.grad(got, args, G)
    g2 = torch.autograd.grad(want, args, G)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-11)


def test_torch_float_scalar_argument_has_no_gradient():
    torch = pytest.importorskip("torch")
    f = matcalc.op("alpha*sum(exp(W@x))", backend="torch")
    W = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, dtype=torch.float64)
    y = f(W=W, x=x, alpha=0.5)
    y.backward()
    assert torch.allclose(W.grad, 0.5 * torch.outer(torch.exp(W @ x), x))
    assert x.grad is None


@pytest.mark.parametrize("expr,shapes,plain,inputs", CASES, ids=IDS)
def test_jax_agrees_with_jax_derivatives(expr, shapes, plain, inputs):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    f = matcalc.op(expr, backend="jax", shapes=shapes)
    names = list(inputs)
    args = tuple(jnp.asarray(inputs[k]) for k in names)
    plain = plain or _plain_logdet
    ours = lambda *a: f(**dict(zip(names, a)))  # noqa: E731
    theirs = lambda *a: plain(jnp, **dict(zip(names, a)))  # noqa: E731
    np.testing.assert_allclose(ours(*args), theirs(*args), rtol=1e-10, atol=1e-12)
    argnums = tuple(range(len(args)))
    scalar = np.ndim(theirs(*args)) == 0
    diff = jax.grad if scalar else jax.jacrev
    for transform in (lambda g: g, jax.jit):
        J1 = transform(diff(ours, argnums=argnums))(*args)
        J2 = diff(theirs, argnums=argnums)(*args)
        for a, b in zip(J1, J2):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def test_op_refusals():
    with pytest.raises(matcalc.MatcalcError, match="unknown backend"):
        matcalc.op("exp(X)", backend="tensorflow")
    with pytest.raises(matcalc.ShapeError):
        pytest.importorskip("torch")
        matcalc.op("W@x + X", backend="torch", shapes={"W": ("a", "b"), "x": ("b",), "X": ("c", "c")})


def test_cotangent_name_cannot_clash():
    pytest.importorskip("torch")
    import torch

    f = matcalc.op("G_cot*exp(G_cot_)", backend="torch", shapes={"G_cot": ("n",), "G_cot_": ("n",)})
    assert f.cotangent not in ("G_cot", "G_cot_")
    a = torch.randn(3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: f(G_cot=a, G_cot_=b), (a, b))


def test_op_of_a_sympy_expression():
    torch = pytest.importorskip("torch")
    import sympy as sp

    n, k = sp.symbols("n k", integer=True, positive=True)
    A, X = sp.MatrixSymbol("A", n, k), sp.MatrixSymbol("X", k, n)
    f = matcalc.op(sp.Trace(A * X) + sp.log(sp.Determinant(A * X)), backend="torch")
    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    want = torch.trace(a @ x) + torch.linalg.slogdet(a @ x)[1]
    assert torch.allclose(f(A=a, X=x), want)
    assert torch.autograd.gradcheck(lambda a, x: f(A=a, X=x), (a, x))


def test_torch_second_derivatives_through_the_op():
    """The backward is made of torch operations, so torch differentiates it again."""
    torch = pytest.importorskip("torch")
    f = matcalc.op("log((X@W)*(X@W) + 1) + sin(X@W)*cos(X@W) + tanh(X@W) + sqrt(exp(X@W))", backend="torch")
    X = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    W = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda X, W: f(X=X, W=W), (X, W))
    g = matcalc.op("cos(X@W)", backend="torch")  # its VJP takes sin of a new matrix
    assert "sin(" in g.source.split("def vjp")[1]
    assert torch.autograd.gradgradcheck(lambda X, W: g(X=X, W=W), (X, W))


@pytest.mark.parametrize("expr", ["sum(relu(x))", "sum(relu(x)*exp(x))", "mean(relu(x)) + sum(step(x)*x**2)"])
def test_torch_second_derivatives_through_relu_and_step(expr):
    # their derivative is a step, which torch.heaviside computed: it has no derivative of its own
    torch = pytest.importorskip("torch")
    f = matcalc.op(expr, backend="torch")
    x = torch.tensor([0.7, -1.3, 0.4, -0.2, 1.9], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x: f(x=x), (x,))
    g, = torch.autograd.grad(f(x=x), x, create_graph=True)
    (g * x).sum().backward()  # (what failed)
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_jax_reverse_over_reverse_through_the_op():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    f = matcalc.op("sum(cos(X@W)) + logdet(X@X.T)", backend="jax", shapes={"X": ("n", "k"), "W": ("k", "m")})
    jit = jax.jit
    X = jnp.asarray(RNG.standard_normal((3, 4)))
    W = jnp.asarray(RNG.standard_normal((4, 5)))
    H1 = jit(jax.jacrev(jax.grad(lambda X: f(X=X, W=W))))(X)
    H2 = jit(jax.hessian(lambda X: jnp.sum(jnp.cos(X @ W)) + jnp.linalg.slogdet(X @ X.T)[1]))(X)
    np.testing.assert_allclose(H1, H2, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_inputs_declared_with_a_size_one_dimension(backend):
    # c declared (b, 1) may come as a column or 1-D, r declared (1, b) as a row: each gradient
    # comes back in the shape its input came in, equal to the framework's own
    pytest.importorskip(backend)
    shapes = {"W": ("a", "b"), "c": ("b", 1), "r": (1, "a")}
    expr = "r@tanh(W@c)"
    rng = np.random.default_rng(6)
    W, c, r = rng.standard_normal((3, 4)), rng.standard_normal((4, 1)), rng.standard_normal((1, 3))
    f = matcalc.op(expr, backend=backend, shapes=shapes)
    for cc in (c, c[:, 0]):
        if backend == "torch":
            import torch

            args = [torch.tensor(v, requires_grad=True) for v in (W, cc, r)]
            f(W=args[0], c=args[1], r=args[2]).sum().backward()
            got = [a.grad.numpy() for a in args]
            want_args = [torch.tensor(v, requires_grad=True) for v in (W, cc, r)]
            (want_args[2] @ torch.tanh(want_args[0] @ want_args[1].reshape(4, 1))).sum().backward()
            want = [a.grad.numpy() for a in want_args]
        else:
            import jax
            import jax.numpy as jnp

            jax.config.update("jax_enable_x64", True)
            got = jax.grad(lambda W, c, r: jnp.sum(f(W=W, c=c, r=r)), argnums=(0, 1, 2))(W, cc, r)
            want = jax.grad(lambda W, c, r: jnp.sum(r @ jnp.tanh(W @ c.reshape(4, 1))), argnums=(0, 1, 2))(W, cc, r)
        for g, w, given in zip(got, want, (W, cc, r)):
            assert np.shape(g) == np.shape(given)
            assert np.allclose(np.asarray(g), np.asarray(w))


def test_torch_func_transforms_over_an_op():
    # an autograd.Function needs setup_context (and a vmap rule) for torch.func
    torch = pytest.importorskip("torch")

    torch.manual_seed(0)
    op = matcalc.op("tanh(W@x)", backend="torch")
    W, x = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    xs = torch.randn(5, 4, dtype=torch.float64)
    ref = lambda x: torch.tanh(W @ x)  # noqa: E731
    mine = lambda x: op(W=W, x=x)  # noqa: E731
    assert torch.allclose(torch.func.grad(lambda x: mine(x).sum())(x), torch.func.grad(lambda x: ref(x).sum())(x))
    assert torch.allclose(torch.func.vmap(mine)(xs), torch.tanh(xs @ W.T))
    assert torch.allclose(torch.func.jacrev(mine)(x), torch.func.jacrev(ref)(x))
    assert torch.allclose(torch.func.jacrev(torch.func.grad(lambda x: mine(x).sum()))(x),
                          torch.func.hessian(lambda x: ref(x).sum())(x))


@pytest.mark.parametrize("expr, shapes, plain", [
    ("softmax(Q@K.T/sqrt(5), 1)@V", {"Q": (3, 5), "K": (4, 5), "V": (4, 2)},
     lambda Q, K, V: __import__("torch").softmax(Q @ K.T / 5 ** 0.5, 1) @ V),
    ("sum(exp(W@x))", {"W": (3, 4), "x": (4,)}, lambda W, x: __import__("torch").exp(W @ x).sum()),
])
def test_torch_forward_mode_over_an_op(expr, shapes, plain):
    # torch.func.jvp, jacfwd and torch.func.hessian (forward over reverse) raised "You must
    # implement the jvp function for custom autograd.Function"
    torch = pytest.importorskip("torch")

    gen = torch.Generator().manual_seed(4)
    vals = {k: torch.randn(*v, generator=gen, dtype=torch.float64) for k, v in shapes.items()}
    op = matcalc.op(expr, backend="torch")
    first = next(iter(shapes))
    mine = lambda a: op(**{**vals, first: a})  # noqa: E731
    ref = lambda a: plain(**{**vals, first: a})  # noqa: E731
    t = torch.randn(*shapes[first], generator=gen, dtype=torch.float64)
    (o1, j1), (o2, j2) = torch.func.jvp(mine, (vals[first],), (t,)), torch.func.jvp(ref, (vals[first],), (t,))
    assert torch.allclose(o1, o2) and torch.allclose(j1, j2, rtol=1e-10, atol=1e-12)
    assert torch.allclose(torch.func.jacfwd(mine)(vals[first]), torch.func.jacfwd(ref)(vals[first]))
    square = lambda f: lambda a: (f(a) ** 2).sum()  # noqa: E731
    assert torch.allclose(torch.func.hessian(square(mine))(vals[first]), torch.func.hessian(square(ref))(vals[first]))
    # forward inside forward: torch hands a Function's jvp its inputs without the outer tangents
    # (the second derivative came out 0, silently): refused
    with pytest.raises(NotImplementedError, match="forward mode inside forward mode"):
        torch.func.jacfwd(torch.func.jacfwd(square(mine)))(vals[first])


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_an_op_names_the_argument_whose_shape_does_not_fit(backend):
    pytest.importorskip(backend)
    op = matcalc.op("W@x + b", backend=backend)
    W, x, b = np.ones((3, 4)), np.ones(5), np.ones(3)
    if backend == "torch":
        import torch
        W, x, b = (torch.tensor(v) for v in (W, x, b))
    with pytest.raises(matcalc.ShapeError,
                       match=r"x has shape \(5,\), which makes \w+ = 5, but W has shape \(3, 4\), which makes \w+ = 4"):
        op(W=W, x=x, b=b)
    with pytest.raises(matcalc.ShapeError, match="b must be a vector"):
        op(W=W, x=x[:4], b=W)
    assert tuple(op(W=W, x=x[:4], b=b).shape) == (3,)
    col = matcalc.op("W@x", backend=backend, shapes={"W": ("m", "n"), "x": ("n", 1)})
    # x given as the column it is declared: W@x is a column, as NumPy's (3, 4) @ (4, 1); squeezed, 1-D
    assert tuple(col(W=W, x=x[:4].reshape(4, 1)).shape) == (3, 1)
    assert tuple(col(W=W, x=x[:4]).shape) == (3,)


def test_an_input_read_only_for_its_size_has_a_zero_backward():
    # matcalc's own gradient of logdet(kron(A, X)): A's values never matter, and op refused it
    torch = pytest.importorskip("torch")
    f = matcalc.op("size(A, 0)*inv(X).T", backend="torch", shapes={"A": ("m", "m"), "X": ("n", "n")})
    A = torch.tensor(RNG.standard_normal((2, 2)), requires_grad=True)
    X = torch.tensor(2 * np.eye(3) + 0.3 * RNG.standard_normal((3, 3)), requires_grad=True)
    G = torch.tensor(RNG.standard_normal((3, 3)))
    f(A=A, X=X).backward(G)
    Xi = np.linalg.inv(X.detach().numpy())
    # G:(2X⁻ᵀ) = 2Gᵀ:X⁻¹, whose gradient in X is -2X⁻ᵀGᵀX⁻ᵀ
    np.testing.assert_allclose(X.grad.numpy(), -2 * Xi.T @ G.numpy().T @ Xi.T, rtol=1e-10)
    assert A.grad is not None and not A.grad.numpy().any()


def test_torch_takes_lists_numpy_arrays_and_mixed_floats_as_the_callables_do():
    # lists and NumPy arrays raised AttributeError ('list' object has no attribute
    # 'is_floating_point'), float32 beside float64 torch's "must have the same dtype"
    torch = pytest.importorskip("torch")
    W, x = [[1.0, 2.0, 0.5], [3.0, 4.0, -1.0]], [1.0, -2.0, 3.0]
    want = np.array(W) @ np.array(x)
    op = matcalc.op("W@x", backend="torch")
    for args in (dict(W=W, x=x), dict(W=np.array(W), x=np.array(x))):
        np.testing.assert_allclose(op(**args).numpy(), want)
    Wt = torch.tensor(W, dtype=torch.float32, requires_grad=True)
    y = op(W=Wt, x=torch.tensor(x, dtype=torch.float64))
    assert y.dtype == torch.float64
    y.sum().backward()
    assert Wt.grad.dtype == torch.float32
    np.testing.assert_allclose(Wt.grad.numpy(), np.tile(x, (2, 1)))
    d = matcalc.derive("sum(exp(W@x))", wrt="W")
    np.testing.assert_allclose(d.callable("torch")(W=W, x=x).numpy(), np.outer(np.exp(want), x))
    with pytest.raises(TypeError, match="W is a torch tensor that requires grad"):
        d.function(W=Wt, x=np.array(x))
