"""value_and_grad: one emitted function for λ and several gradients."""
import numpy as np
import pytest

import matcalc
from conftest import case_inputs, load_corpus, np_eval
from support.fd import rel_error

NLL = "0.5*logdet(S) + 0.5*(x-mu).T@inv(S)@(x-mu)"
NLL_SHAPES = {"S": ("n", "n"), "x": ("n",), "mu": ("n",)}


def _spd(n, rng):
    R = rng.standard_normal((n, n))
    return R @ R.T / n + np.eye(n)


@pytest.mark.parametrize("case", [c for c in load_corpus() if "fixed_inputs" not in c][:12],
                         ids=lambda c: c["id"])
def test_value_and_grad_matches_f_and_every_gradient(case):
    names = list(case["shapes"])
    vg = matcalc.value_and_grad(case["expr"], wrt=names, shapes=case["shapes"])
    inputs = case_inputs(case, seed=5)
    value, grads = vg.function(**inputs)
    assert abs(value - np_eval(case["f"], inputs)) <= 1e-9 * max(1.0, abs(value))
    assert list(grads) == names
    for name in names:
        single = matcalc.derive(case["expr"], wrt=name, shapes=case["shapes"]).function(**inputs)
        assert rel_error(grads[name], single) < 1e-12
    assert rel_error(grads[case["wrt"]], np_eval(case["reference"], inputs)) < 1e-9


def _nll_inputs(n=7, seed=0):
    rng = np.random.default_rng(seed)
    return {"S": _spd(n, rng), "x": rng.standard_normal(n), "mu": rng.standard_normal(n)}


def _nll_reference(S, x, mu):
    r = x - mu
    Si = np.linalg.inv(S)
    value = 0.5 * np.linalg.slogdet(S)[1] + 0.5 * r @ Si @ r
    return value, 0.5 * (Si.T - np.outer(Si.T @ r, Si @ r)), 0.5 * (Si + Si.T) @ r


def test_gaussian_nll_value_and_every_gradient():
    vg = matcalc.value_and_grad(NLL, wrt=["S", "x", "mu"], shapes=NLL_SHAPES)
    inputs = _nll_inputs()
    value, grads = vg.function(**inputs)
    v, gS, gx = _nll_reference(**inputs)
    assert abs(value - v) < 1e-10 and rel_error(grads["S"], gS) < 1e-10 and rel_error(grads["x"], gx) < 1e-10
    assert rel_error(grads["mu"], -gx) < 1e-10
    body = vg.numpy_source.split("def value_and_grad")[1]
    # one LU factorisation of S serves inv(S) and logdet(S)
    assert body.count("_lu(S)") == 1 and body.count("_lu_inv(") == 1, body
    assert "slogdet" not in body and "np.linalg.inv" not in body, body


@pytest.mark.parametrize("expr,shapes,dotted", [
    ("sum(exp(x) + x*x - 1 + alpha)", {"x": ("n",), "alpha": ()}, True),
    ("(x - 1 + 3*y*x):1", {"x": ("n",), "y": ("n",)}, True),
    ("sum(A*A + 2*B*A - 3)", {"A": ("n", "m"), "B": ("n", "m")}, True),
    ("sum(u@v.T - 2)", {"u": ("n",), "v": ("m",)}, False),
    ("sum(exp(A) - alpha*2)", {"A": ("n", "m"), "alpha": ()}, False),
    ("sum(x**2 + 4)", {"x": ("n",)}, True),
])
def test_a_sum_of_terms_is_split_into_cheaper_reductions(expr, shapes, dotted):
    """sum(a + u∘v + k) = sum(a) + u:v + k·#entries; the value is checked against the sum
    of the array that holds every term, on sizes that differ per dimension."""
    rng = np.random.default_rng(11)
    sizes = {"n": 5, "m": 3}
    inputs = {k: (float(rng.standard_normal()) if not s else rng.standard_normal([sizes[d] for d in s]))
              for k, s in shapes.items()}
    x, y, A, B, u, v, alpha = (inputs.get(k) for k in ("x", "y", "A", "B", "u", "v", "alpha"))
    want = {
        "sum(exp(x) + x*x - 1 + alpha)": lambda: np.sum(np.exp(x) + x * x - 1 + alpha),
        "(x - 1 + 3*y*x):1": lambda: np.sum(x - 1 + 3 * y * x),
        "sum(A*A + 2*B*A - 3)": lambda: np.sum(A * A + 2 * B * A - 3),
        "sum(u@v.T - 2)": lambda: np.sum(np.outer(u, v) - 2),
        "sum(exp(A) - alpha*2)": lambda: np.sum(np.exp(A) - alpha * 2),
        "sum(x**2 + 4)": lambda: np.sum(x ** 2 + 4),
    }[expr]()
    vg = matcalc.value_and_grad(expr, wrt=list(shapes), shapes=shapes)
    value, grads = vg.function(**inputs)
    assert abs(value - want) < 1e-12 * max(1.0, abs(want))
    d = matcalc.derive(expr, wrt=list(shapes)[0], shapes=shapes)
    assert abs(d.value_function(**inputs) - want) < 1e-12 * max(1.0, abs(want))
    body = vg.numpy_source.split("def value_and_grad")[1]
    if dotted:  # the summed product became a dot product: no elementwise square or product summed
        assert ".dot(" in body or "np.vdot(" in body, body


def _softplus(t):
    return np.logaddexp(0.0, t)


@pytest.mark.parametrize("scale", [1.0, 1000.0])
def test_logistic_sigmoid_comes_from_the_softplus_of_the_value(scale):
    """σ(z) = exp(z − softplus(z)): one log-add-exp serves λ and the gradient, and the
    gradient stays right where |z| = 1000."""
    expr = "sum(log(1 + exp(-y*(X@w))))"
    vg = matcalc.value_and_grad(expr, wrt=["w", "y"], shapes={"X": ("n", "d"), "w": ("d",), "y": ("n",)})
    body = vg.numpy_source.split("def value_and_grad")[1]
    assert body.count("np.logaddexp(") == 1 and "_sigmoid" not in body, body
    rng = np.random.default_rng(3)
    X, w = rng.standard_normal((7, 4)), rng.standard_normal(4)
    w *= scale / np.max(np.abs(X @ w))
    y = np.sign(rng.standard_normal(7))
    value, grads = vg.function(X=X, w=w, y=y)
    t = -y * (X @ w)
    sig = np.exp(-np.logaddexp(0.0, -t))  # σ(t), stable both ways
    assert abs(value - np.sum(_softplus(t))) <= 1e-12 * max(1.0, abs(value))
    assert rel_error(grads["w"], -X.T @ (sig * y)) < 1e-12
    assert rel_error(grads["y"], -sig * (X @ w)) < 1e-12


def test_a_sum_computed_for_the_gradient_is_reused_by_the_value():
    """λ = alpha*(exp(z) − Wx − c + m∘m − 1):1 with z = Wx + c: the value uses z and
    exp(z) − 1 as computed for the gradient."""
    expr = "alpha*(exp(W@x+c)-W@x-c+m*m-1):1"
    vg = matcalc.value_and_grad(expr, wrt=["W", "c", "m", "alpha"])
    body = vg.numpy_source.split('"""')[-1]
    body = "\n".join(line for line in body.splitlines()
                     if not line.strip().startswith(("c = np.asarray(c", "alpha = float(alpha)")))
    assert body.count(" c)") + body.count("(c ") + body.count(" c ") == 1, body  # c is added once
    assert body.count("np.exp(") + body.count("np.expm1(") == 1 and "np.full" not in body, body
    rng = np.random.default_rng(8)
    W, x, c, m = rng.standard_normal((5, 3)), rng.standard_normal(3), rng.standard_normal(5), rng.standard_normal(5)
    value, grads = vg.function(W=W, x=x, c=c, m=m, alpha=0.7)
    z = W @ x + c
    assert abs(value - 0.7 * np.sum(np.exp(z) - z + m * m - 1)) < 1e-12 * abs(value)
    assert rel_error(grads["W"], np.outer(0.7 * (np.exp(z) - 1), x)) < 1e-12
    assert abs(grads["alpha"] - np.sum(np.exp(z) - z + m * m - 1)) < 1e-12 * abs(value)


def test_gradients_of_vectors_given_as_columns_or_rows_come_back_so():
    vg = matcalc.value_and_grad("sum(exp(A@x)) + c:c", wrt=["x", "A", "c"])
    A, x = np.eye(3) / 2, np.arange(3.0)
    value, grads = vg.function(A=A, x=x[:, None], c=x[None, :])
    assert grads["x"].shape == (3, 1) and grads["c"].shape == (1, 3) and grads["A"].shape == (3, 3)
    np.testing.assert_allclose(grads["x"].ravel(), A.T @ np.exp(A @ x))
    np.testing.assert_allclose(grads["c"].ravel(), 2 * x)
