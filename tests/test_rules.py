"""Each operator's differential and adjoint rule, against central finite differences of an
independent NumPy λ, with a distinct size per dimension (a=3, b=4, c=5, n=9)."""
import numpy as np
import pytest

import matcalc
from support.fd import central_fd_grad, rel_error

sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731


def spd(n, rng):
    R = rng.standard_normal((n, n))
    return R @ R.T / n + np.eye(n)


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


# (expression, shapes, domains (positive/spd), independent NumPy λ)
CASES = [
    ("(A + B):C", {"A": ("a", "b"), "B": ("a", "b"), "C": ("a", "b")}, {}, lambda A, B, C: np.sum((A + B) * C)),
    ("(A - 2*B):C - 3", {"A": ("a", "b"), "B": ("a", "b"), "C": ("a", "b")}, {}, lambda A, B, C: np.sum((A - 2 * B) * C) - 3),
    ("(p - 1):q", {"p": ("a",), "q": ("a",)}, {}, lambda p, q: (p - 1) @ q),
    ("A:B", {"A": ("a", "b"), "B": ("a", "b")}, {}, lambda A, B: np.sum(A * B)),
    ("A:1", {"A": ("a", "b")}, {}, lambda A: np.sum(A)),
    ("1:A", {"A": ("a", "b")}, {}, lambda A: np.sum(A)),
    ("(A*B):C", {"A": ("a", "b"), "B": ("a", "b"), "C": ("a", "b")}, {}, lambda A, B, C: np.sum(A * B * C)),
    ("(A∘B):C", {"A": ("a", "b"), "B": ("a", "b"), "C": ("a", "b")}, {}, lambda A, B, C: np.sum(A * B * C)),
    ("(A⊙B):C", {"A": ("a", "b"), "B": ("a", "b"), "C": ("a", "b")}, {}, lambda A, B, C: np.sum(A * B * C)),
    ("(A/B):C", {"A": ("a", "b"), "B": ("a", "b"), "C": ("a", "b")}, {"B": "positive"}, lambda A, B, C: np.sum(A / B * C)),
    ("(A⊘B):C", {"A": ("a", "b"), "B": ("a", "b"), "C": ("a", "b")}, {"B": "positive"}, lambda A, B, C: np.sum(A / B * C)),
    ("alpha*A:B", {"A": ("a", "b"), "B": ("a", "b"), "alpha": ()}, {}, lambda A, B, alpha: alpha * np.sum(A * B)),
    ("(alpha/beta)*sum(x)", {"x": ("a",), "alpha": (), "beta": ()}, {"beta": "positive"}, lambda x, alpha, beta: alpha / beta * np.sum(x)),
    ("(A@B):C", {"A": ("a", "b"), "B": ("b", "c"), "C": ("a", "c")}, {}, lambda A, B, C: np.sum((A @ B) * C)),
    ("x.T@A@y", {"x": ("a",), "A": ("a", "b"), "y": ("b",)}, {}, lambda x, A, y: x @ A @ y),
    ("x@y", {"x": ("a",), "y": ("a",)}, {}, lambda x, y: x @ y),
    ("u:(x@y.T@v)", {"x": ("a",), "y": ("b",), "v": ("b",), "u": ("a",)}, {}, lambda x, y, v, u: u @ np.outer(x, y) @ v),
    ("(A@x):y", {"A": ("a", "b"), "x": ("b",), "y": ("a",)}, {}, lambda A, x, y: (A @ x) @ y),
    ("-A:B", {"A": ("a", "b"), "B": ("a", "b")}, {}, lambda A, B: -np.sum(A * B)),
    ("sum(A**3)", {"A": ("a", "b")}, {}, lambda A: np.sum(A ** 3)),
    ("sum(x**0.5)", {"x": ("a",)}, {"x": "positive"}, lambda x: np.sum(x ** 0.5)),
    ("sum(x**alpha)", {"x": ("a",), "alpha": ()}, {"x": "positive", "alpha": "positive"}, lambda x, alpha: np.sum(x ** alpha)),
    ("sum(x^2)", {"x": ("a",)}, {}, lambda x: np.sum(x ** 2)),
    ("A.T:B", {"A": ("a", "b"), "B": ("b", "a")}, {}, lambda A, B: np.sum(A.T * B)),
    ("A':B", {"A": ("a", "b"), "B": ("b", "a")}, {}, lambda A, B: np.sum(A.T * B)),
    ("Aᵀ:B", {"A": ("a", "b"), "B": ("b", "a")}, {}, lambda A, B: np.sum(A.T * B)),
    ("A^T:B", {"A": ("a", "b"), "B": ("b", "a")}, {}, lambda A, B: np.sum(A.T * B)),
    ("sum(exp(A))", {"A": ("a", "b")}, {}, lambda A: np.sum(np.exp(A))),
    ("sum(log(A))", {"A": ("a", "b")}, {"A": "positive"}, lambda A: np.sum(np.log(A))),
    ("sum(sqrt(A))", {"A": ("a", "b")}, {"A": "positive"}, lambda A: np.sum(np.sqrt(A))),
    ("x:sin(y)", {"x": ("a",), "y": ("a",)}, {}, lambda x, y: x @ np.sin(y)),
    ("x:cos(y)", {"x": ("a",), "y": ("a",)}, {}, lambda x, y: x @ np.cos(y)),
    ("x:tanh(A@y)", {"x": ("a",), "A": ("a", "b"), "y": ("b",)}, {}, lambda x, A, y: x @ np.tanh(A @ y)),
    ("x:sigmoid(y)", {"x": ("a",), "y": ("a",)}, {}, lambda x, y: x @ sig(y)),
    ("x:relu(y)", {"x": ("a",), "y": ("a",)}, {}, lambda x, y: x @ np.maximum(y, 0)),
    ("x:(step(y)*y)", {"x": ("a",), "y": ("a",)}, {}, lambda x, y: x @ (np.heaviside(y, 0) * y)),
    ("x:abs(y)", {"x": ("a",), "y": ("a",)}, {}, lambda x, y: x @ np.abs(y)),
    ("x:(sign(y)*y)", {"x": ("a",), "y": ("a",)}, {}, lambda x, y: x @ (np.sign(y) * y)),
    ("x:softplus(y)", {"x": ("a",), "y": ("a",)}, {}, lambda x, y: x @ np.logaddexp(0, y)),
    ("sum(A@B)", {"A": ("a", "b"), "B": ("b", "c")}, {}, lambda A, B: np.sum(A @ B)),
    ("tr(A@B)", {"A": ("a", "b"), "B": ("b", "a")}, {}, lambda A, B: np.trace(A @ B)),
    ("tr(A@X.T@B@X@C)", {"A": ("a", "b"), "X": ("c", "b"), "B": ("c", "c"), "C": ("b", "a")}, {}, lambda A, X, B, C: np.trace(A @ X.T @ B @ X @ C)),
    ("det(X)", {"X": ("a", "a")}, {"X": "spd"}, lambda X: np.linalg.det(X)),
    ("logdet(X)", {"X": ("a", "a")}, {"X": "spd"}, lambda X: np.linalg.slogdet(X)[1]),
    ("tr(inv(X)@A)", {"X": ("a", "a"), "A": ("a", "a")}, {"X": "spd"}, lambda X, A: np.trace(np.linalg.inv(X) @ A)),
    ("y.T@inv(X)@y", {"X": ("a", "a"), "y": ("a",)}, {"X": "spd"}, lambda X, y: y @ np.linalg.inv(X) @ y),
    ("x:diag(A)", {"x": ("a",), "A": ("a", "a")}, {}, lambda x, A: x @ np.diag(A)),
    ("A:Diag(x)", {"x": ("a",), "A": ("a", "a")}, {}, lambda x, A: np.sum(A * np.diag(x))),
    ("y.T@Diag(h)@v", {"y": ("a",), "h": ("a",), "v": ("a",)}, {}, lambda y, h, v: y @ np.diag(h) @ v),
    ("norm2(A@x - y)", {"A": ("a", "b"), "x": ("b",), "y": ("a",)}, {}, lambda A, x, y: np.linalg.norm(A @ x - y)),
    ("norm2(A@x - y)**2", {"A": ("a", "b"), "x": ("b",), "y": ("a",)}, {}, lambda A, x, y: np.linalg.norm(A @ x - y) ** 2),
    ("norm2(X)", {"X": ("a", "b")}, {}, lambda X: np.linalg.norm(X)),
    ("norm1(x)", {"x": ("a",)}, {}, lambda x: np.sum(np.abs(x))),
    ("logsumexp(A@x)", {"A": ("a", "b"), "x": ("b",)}, {}, lambda A, x: np.log(np.sum(np.exp(A @ x)))),
    ("y:softmax(A@x)", {"A": ("a", "b"), "x": ("b",), "y": ("a",)}, {}, lambda A, x, y: y @ softmax(A @ x)),
    ("y:log(softmax(x))", {"x": ("a",), "y": ("a",)}, {}, lambda x, y: y @ np.log(softmax(x))),
    ("sum(log(1 + exp(-y*(X@w))))", {"X": ("n", "a"), "w": ("a",), "y": ("n",)}, {}, lambda X, w, y: np.sum(np.log1p(np.exp(-y * (X @ w))))),
    ("(X + I):A", {"X": ("a", "a"), "A": ("a", "a")}, {}, lambda X, A: np.sum((X + np.eye(X.shape[0])) * A)),
    ("(X@eye):A", {"X": ("a", "a"), "A": ("a", "a")}, {}, lambda X, A: np.sum(X * A)),
    ("x.T@(A@1)", {"x": ("a",), "A": ("a", "b")}, {}, lambda x, A: x @ A.sum(axis=1)),
    ("x.T@x*alpha", {"x": ("a",), "alpha": ()}, {}, lambda x, alpha: x @ x * alpha),
    ("sum(x*alpha + beta)", {"x": ("a",), "alpha": (), "beta": ()}, {}, lambda x, alpha, beta: np.sum(x * alpha + beta)),
    ("(W@x):(W@x) + tr(W.T@W)", {"W": ("a", "b"), "x": ("b",)}, {}, lambda W, x: (W @ x) @ (W @ x) + np.trace(W.T @ W)),
    ("0.5*logdet(S) + 0.5*(x-mu).T@inv(S)@(x-mu)", {"S": ("a", "a"), "x": ("a",), "mu": ("a",)}, {"S": "spd"},
     lambda S, x, mu: 0.5 * np.linalg.slogdet(S)[1] + 0.5 * (x - mu) @ np.linalg.inv(S) @ (x - mu)),
    ("sum(exp(X)) + x:(X@x)", {"X": ("a", "a"), "x": ("a",)}, {}, lambda X, x: np.sum(np.exp(X)) + x @ X @ x),
    ("(Diag(x)@A):B", {"x": ("a",), "A": ("a", "b"), "B": ("a", "b")}, {}, lambda x, A, B: np.sum((np.diag(x) @ A) * B)),
    ("norm2(X@W.T - Y)**2", {"X": ("n", "a"), "W": ("b", "a"), "Y": ("n", "b")}, {}, lambda X, W, Y: np.linalg.norm(X @ W.T - Y) ** 2),
]

SIZES = {"a": 3, "b": 4, "c": 5, "n": 9}


def _inputs(shapes, domains, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        dims = tuple(SIZES[d] for d in shape)
        dom = domains.get(name, "normal")
        if dom == "spd":
            out[name] = spd(dims[0], rng)
        elif dom == "positive":
            out[name] = rng.uniform(0.3, 2.0, size=dims)
        else:
            out[name] = rng.standard_normal(dims)
        if dims == ():
            out[name] = float(out[name])
    return out


@pytest.mark.parametrize("expr,shapes,domains,f", CASES, ids=[c[0] for c in CASES])
def test_rule_against_finite_differences(expr, shapes, domains, f):
    ds = matcalc.derive(expr, wrt=list(shapes), shapes=shapes)
    inputs = _inputs(shapes, domains, seed=1)
    for w, d in ds.items():
        got = d.function(**inputs)
        assert d.shape == tuple(shapes[w])
        fd = central_fd_grad(lambda **a: f(**a), inputs, w)
        assert rel_error(got, fd) < 1e-6, (w, d.text)


@pytest.mark.parametrize("expr,shapes,domains,f", CASES[:20], ids=[c[0] for c in CASES[:20]])
def test_default_shapes_also_work(expr, shapes, domains, f):
    """Without declarations the kinds come from the names and dims from unification."""
    kinds = {name: len(s) for name, s in shapes.items()}
    ds = matcalc.derive(expr, wrt=list(shapes))
    for w, d in ds.items():
        assert len(d.shape) == kinds[w]
        assert d.check().ok
