"""Benchmark workloads for matcalc (issue 4).

Each workload has a matcalc expression, the symbol it is differentiated wrt,
symbolic shapes for every symbol, concrete sizes, an input generator, a
hand-written forward lambda and a hand-written FLOP-optimal NumPy gradient.

The forward ``lam(xp, **inputs)`` is written against an array module ``xp``
(numpy, jax.numpy or torch) so the same code serves the finite-difference
tests and the optional jax/torch autodiff comparisons. Gradients follow
matcalc's convention: dλ = G : dW with G unsymmetrised (d logdet S = S⁻ᵀ : dS).
"""
from dataclasses import dataclass, field
from typing import Callable, Dict, List

import numpy as np


@dataclass
class Workload:
    name: str
    expr: str                 # matcalc syntax
    wrt: str
    shapes: Dict[str, tuple]  # symbol -> symbolic dims
    sizes: Dict[str, dict]    # size label -> {dim: int}
    make: Callable            # make(rng, **dims) -> inputs
    lam: Callable             # lam(xp, **inputs) -> scalar
    grad: Callable            # grad(**inputs) -> ndarray shaped like inputs[wrt]
    vg_wrt: List[str] = field(default_factory=list)  # wrt list for value_and_grad
    target: bool = True       # derive() ≤ 20 ms applies
    vg: Callable = None       # vg(**inputs) -> (λ, {wrt: gradient}) for vg_wrt, hand-written

    def expr_at(self, size):
        return self.expr

    def shapes_at(self, size):
        return self.shapes

    def inputs(self, size, rng):
        return self.make(rng, **self.sizes[size])


# The vector size n of every workload but the MLPs: powers of two, their neighbours and odd
# sizes (a BLAS kernel or the cache can behave differently at a power of two).
SIZES = (64, 250, 256, 257, 500, 511, 512, 724, 1000, 1023, 1024)


def _sizes(tiny, dims, large=()):
    """{"tiny": tiny, "64": dims(64), …, "1024": dims(1024), then the large sizes}."""
    out = {"tiny": tiny}
    for n in SIZES + tuple(large):
        out[str(n)] = dims(n)
    return out


def _randn(rng, *shape, scale=1.0):
    return scale * rng.standard_normal(shape)


def _softplus(xp, t):
    """log(1 + exp(t)) without overflow, for numpy / jax.numpy / torch."""
    a = xp.abs(t)
    return 0.5 * (t + a) + xp.log1p(xp.exp(-a))


def _sigmoid(t):
    return np.exp(-np.logaddexp(0.0, -t))


# 1. VAE KL term wrt W ---------------------------------------------------------

def _vae_make(rng, a, b):
    return {"W": _randn(rng, a, b, scale=b ** -0.5), "x": _randn(rng, b),
            "c": _randn(rng, a, scale=0.1), "m": _randn(rng, a, scale=0.1),
            "alpha": 0.5}


def _vae_lam(xp, W, x, c, m, alpha):
    z = W @ x + c
    return alpha * xp.sum(xp.exp(z) - z + m * m - 1)


def _vae_grad(W, x, c, m, alpha):
    return np.outer(alpha * (np.exp(W @ x + c) - 1), x)  # scale the vector, not the matrix


def _vae_vg(W, x, c, m, alpha):
    z = W @ x + c
    e = np.expm1(z)
    s = np.sum(e - z) + m @ m
    g = alpha * e
    return alpha * s, {"W": np.outer(g, x), "c": g, "m": (2 * alpha) * m, "alpha": s}


VAE = Workload(
    "vae_kl", "alpha*(exp(W@x+c)-W@x-c+m*m-1):1", "W",
    {"W": ("a", "b"), "x": ("b",), "c": ("a",), "m": ("a",), "alpha": ()},
    _sizes(dict(a=4, b=3), lambda n: dict(a=n, b=n), large=(2048, 4096)),
    _vae_make, _vae_lam, _vae_grad, vg_wrt=["W", "c", "m", "alpha"], vg=_vae_vg)


# 2. two-layer ReLU KL wrt W0 ---------------------------------------------------

def _relu2_make(rng, d, h, o):
    return {"W0": _randn(rng, h, d, scale=d ** -0.5), "x": _randn(rng, d),
            "b0": _randn(rng, h, scale=0.1), "W1": _randn(rng, o, h, scale=h ** -0.5),
            "b1": _randn(rng, o, scale=0.1), "m": _randn(rng, o, scale=0.1)}


def _relu2_lam(xp, W0, x, b0, W1, b1, m):
    z0 = W0 @ x + b0
    z1 = W1 @ (z0 * (z0 > 0)) + b1
    return 0.5 * xp.sum(xp.exp(z1) - z1 + m * m - 1)


def _relu2_grad(W0, x, b0, W1, b1, m):
    z0 = W0 @ x + b0
    z1 = W1 @ np.maximum(z0, 0) + b1
    g = (0.5 * (np.exp(z1) - 1)) @ W1
    return np.outer(g * (z0 > 0), x)


def _relu2_vg(W0, x, b0, W1, b1, m):
    z0 = W0 @ x + b0
    z1 = W1 @ np.maximum(z0, 0) + b1
    e = np.expm1(z1)
    g1 = 0.5 * e
    g0 = (g1 @ W1) * (z0 > 0)
    return 0.5 * (np.sum(e - z1) + m @ m), {"W0": np.outer(g0, x), "b0": g0, "b1": g1, "m": m}


RELU2 = Workload(
    "relu2_kl", "0.5*(exp(W1@relu(W0@x+b0)+b1) - (W1@relu(W0@x+b0)+b1) + m*m - 1):1", "W0",
    {"W0": ("h", "d"), "x": ("d",), "b0": ("h",), "W1": ("o", "h"), "b1": ("o",), "m": ("o",)},
    _sizes(dict(d=3, h=4, o=5), lambda n: dict(d=n, h=n, o=n), large=(2048, 4096)),
    _relu2_make, _relu2_lam, _relu2_grad, vg_wrt=["W0", "b0", "b1", "m"], vg=_relu2_vg)


# 3. G:exp(X@W) wrt X (torch's Y.backward(G)) ----------------------------------

def _gexp_make(rng, n, d, m):
    return {"G": _randn(rng, n, m), "X": _randn(rng, n, d), "W": _randn(rng, d, m, scale=d ** -0.5)}


def _gexp_lam(xp, G, X, W):
    return xp.sum(G * xp.exp(X @ W))


def _gexp_grad(G, X, W):
    return (G * np.exp(X @ W)) @ W.T


def _gexp_vg(G, X, W):
    E = np.exp(X @ W)
    GE = G * E
    return np.sum(GE), {"X": GE @ W.T, "G": E}


GEXP = Workload(
    "g_exp_xw", "G:exp(X@W)", "X", {"G": ("n", "m"), "X": ("n", "d"), "W": ("d", "m")},
    _sizes(dict(n=3, d=4, m=5), lambda n: dict(n=n, d=n, m=n), large=(2048,)),
    _gexp_make, _gexp_lam, _gexp_grad, vg_wrt=["X", "G"], vg=_gexp_vg)


# 4. least squares and logistic loss wrt w -------------------------------------

_REG_SIZES = _sizes(dict(n=5, d=3), lambda n: dict(n=n, d=n), large=(2048, 4096))
_REG_SHAPES = {"X": ("n", "d"), "w": ("d",), "y": ("n",)}


def _lstsq_make(rng, n, d):
    return {"X": _randn(rng, n, d, scale=d ** -0.5), "w": _randn(rng, d), "y": _randn(rng, n)}


def _lstsq_lam(xp, X, w, y):
    r = X @ w - y
    return xp.sum(r * r)


def _lstsq_grad(X, w, y):
    return 2 * ((X @ w - y) @ X)


def _logistic_make(rng, n, d):
    return {"X": _randn(rng, n, d), "w": _randn(rng, d, scale=d ** -0.5),
            "y": rng.choice([-1.0, 1.0], size=n)}


def _logistic_lam(xp, X, w, y):
    return xp.sum(_softplus(xp, -y * (X @ w)))


def _logistic_grad(X, w, y):
    return -((y * _sigmoid(-y * (X @ w))) @ X)


def _lstsq_vg(X, w, y):
    r = X @ w - y
    return r @ r, {"w": 2 * (r @ X), "y": -2 * r}


def _logistic_vg(X, w, y):
    u = X @ w
    t = -y * u
    s = _sigmoid(t)
    return np.sum(_softplus(np, t)), {"w": -((y * s) @ X), "y": -(s * u)}


LSTSQ = Workload("least_squares", "(X@w-y):(X@w-y)", "w", _REG_SHAPES, _REG_SIZES,
                 _lstsq_make, _lstsq_lam, _lstsq_grad, vg_wrt=["w", "y"], vg=_lstsq_vg)
LOGISTIC = Workload("logistic", "sum(log(1+exp(-y*(X@w))))", "w", _REG_SHAPES, _REG_SIZES,
                    _logistic_make, _logistic_lam, _logistic_grad, vg_wrt=["w", "y"],
                    vg=_logistic_vg)


# 5. deep tanh MLP with MSE head wrt the first layer's weight ------------------

def mlp_expr(L, batch=False):
    """(h_L - y):(h_L - y) with h_k = tanh(W_k @ h_{k-1}), h_0 = x, nested as text."""
    h = "X" if batch else "x"
    for k in range(1, L + 1):
        h = f"tanh(W{k}@{h})"
    y = "Y" if batch else "y"
    return f"({h} - {y}):({h} - {y})"


def mlp_shapes(L, batch=False):
    shapes = {f"W{k}": ("h", "h") for k in range(2, L + 1)}
    shapes["W1"] = ("h", "d")
    if batch:
        shapes.update(X=("d", "B"), Y=("h", "B"))
    else:
        shapes.update(x=("d",), y=("h",))
    return shapes


def _mlp_make(rng, L, d, h, B=None):
    inp = {f"W{k}": _randn(rng, h, d if k == 1 else h, scale=(d if k == 1 else h) ** -0.5)
           for k in range(1, L + 1)}
    if B is None:
        inp.update(x=_randn(rng, d), y=np.tanh(_randn(rng, h)))
    else:
        inp.update(X=_randn(rng, d, B), Y=np.tanh(_randn(rng, h, B)))
    return inp


def _mlp_split(inp):
    Ws = [inp[f"W{k}"] for k in range(1, sum(k.startswith("W") for k in inp) + 1)]
    x = inp["x"] if "x" in inp else inp["X"]
    y = inp["y"] if "y" in inp else inp["Y"]
    return Ws, x, y


def _mlp_lam(xp, **inp):
    Ws, h, y = _mlp_split(inp)
    for W in Ws:
        h = xp.tanh(W @ h)
    r = h - y
    return xp.sum(r * r)


def _mlp_back(inp):
    """(h_L - y, the gradient wrt W1)."""
    Ws, x, y = _mlp_split(inp)
    hs = [x]
    for W in Ws:
        hs.append(np.tanh(W @ hs[-1]))
    r = hs[-1] - y
    g = 2 * r
    for k in range(len(Ws) - 1, 0, -1):       # back through layers L .. 2
        g = Ws[k].T @ (g * (1 - hs[k + 1] ** 2))
    g = g * (1 - hs[1] ** 2)
    return r, np.outer(g, x) if g.ndim == 1 else g @ x.T


def _mlp_grad(**inp):
    return _mlp_back(inp)[1]


def _mlp_vg(**inp):
    r, g = _mlp_back(inp)
    return np.sum(r * r), {"W1": g, "Y" if r.ndim == 2 else "y": -2 * r}


class MLPWorkload(Workload):
    """Expression and shapes depend on the depth L of the size."""

    def __init__(self, name, batch, sizes):
        super().__init__(name, mlp_expr(2, batch), "W1", mlp_shapes(2, batch), sizes,
                         _mlp_make, _mlp_lam, _mlp_grad,
                         vg_wrt=["W1", "Y" if batch else "y"], target=False, vg=_mlp_vg)
        self.batch = batch

    def expr_at(self, size):
        return mlp_expr(self.sizes[size]["L"], self.batch)

    def shapes_at(self, size):
        return mlp_shapes(self.sizes[size]["L"], self.batch)


# width 256 throughout; the depth L and the batch B vary (B: powers of two and odd sizes)
MLP_VEC = MLPWorkload("mlp_tanh_b1", False, {
    "tiny": dict(L=3, d=3, h=4), **{f"L{L}": dict(L=L, d=256, h=256) for L in (2, 4, 8, 16, 32)}})
MLP_BATCH = MLPWorkload("mlp_tanh_batch", True, {
    "tiny": dict(L=3, d=3, h=4, B=5),
    **{f"L{L}xB256": dict(L=L, d=256, h=256, B=256) for L in (2, 8, 32)},
    **{f"L8xB{B}": dict(L=8, d=256, h=256, B=B) for B in (64, 250, 257, 500, 512, 1000, 1024)}})


# 6. Gaussian NLL wrt S ----------------------------------------------------------

def _nll_make(rng, n):
    A = _randn(rng, n, n)
    return {"S": A @ A.T / n + np.eye(n), "x": _randn(rng, n), "mu": _randn(rng, n)}


def _nll_lam(xp, S, x, mu):
    r = x - mu
    return 0.5 * xp.linalg.slogdet(S)[1] + 0.5 * (r @ xp.linalg.solve(S, r))


def _nll_grad(S, x, mu):
    Si = np.linalg.inv(S)
    r = x - mu
    return 0.5 * (Si.T - np.outer(r @ Si, Si @ r))


def _nll_vg(S, x, mu):
    Si = np.linalg.inv(S)
    r = x - mu
    Sr, rS = Si @ r, r @ Si
    gx = 0.5 * (Sr + rS)
    return (0.5 * (np.linalg.slogdet(S)[1] + r @ Sr),
            {"S": 0.5 * (Si.T - np.outer(rS, Sr)), "x": gx, "mu": -gx})


NLL = Workload(
    "gaussian_nll", "0.5*logdet(S) + 0.5*(x-mu).T@inv(S)@(x-mu)", "S",
    {"S": ("n", "n"), "x": ("n",), "mu": ("n",)},
    _sizes(dict(n=4), lambda n: dict(n=n), large=(2048,)),
    _nll_make, _nll_lam, _nll_grad, vg_wrt=["S", "x", "mu"], vg=_nll_vg)


WORKLOADS = [VAE, RELU2, GEXP, LSTSQ, LOGISTIC, MLP_VEC, MLP_BATCH, NLL]
BY_NAME = {w.name: w for w in WORKLOADS}
