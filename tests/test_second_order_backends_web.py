"""Torch and jax modules of Hessians and Jacobians as the web page and the CLI ask for them:
products against matcalc's NumPy ones and against the corpus' closed forms; framework
operations only. The numerical tests skip without the framework; writing the source needs neither."""
import json
import subprocess
import sys

import numpy as np
import pytest

import matcalc
from conftest import HERE, case_inputs, np_eval
from matcalc.backends import compile_function, host_calls

CASES = json.loads((HERE / "data" / "second_order_public.json").read_text(encoding="utf-8"))
MORE = [  # (kind, expr, wrt, shapes): matrices, logdet's K, softmax, a scalar variable
    ("hessian", "logdet(X)", "X", {"X": ["n", "n"]}),
    ("hessian", "norm2(X@W - Y)**2", "W", {"X": ["n", "d"], "W": ["d", "m"]}),
    ("hessian", "sum(log(1 + exp(X@w)))", "w", {"X": ["n", "d"]}),
    ("hessian", "alpha**2*(x:x)", "alpha", {}),
    ("jacobian", "softmax(W@x)", "W", {"W": ["m", "d"]}),
    ("jacobian", "tanh(A@X@B)", "X", {"A": ["m", "n"], "X": ["n", "d"], "B": ["d", "k"]}),
]
PARAMS = [(c["kind"], c["expr"], c["wrt"], c["shapes"]) for c in CASES] + MORE
IDS = [c["id"] for c in CASES] + [f"{k}-{e}" for k, e, _, _ in MORE]
SIZES = {"n": 5, "m": 4, "d": 3, "k": 6, "a": 5, "b": 4, "c": 3}


def _framework(backend):
    if backend == "torch":
        torch = pytest.importorskip("torch")
        return lambda a: torch.as_tensor(np.asarray(a, dtype=float)), lambda t: t.detach().numpy()
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    return lambda a: jnp.asarray(np.asarray(a, dtype=float)), np.asarray


def _values(m, rng):
    sizes, out = dict(SIZES), {}
    for name, shape in m.user_shapes.items():
        dims = tuple(sizes.setdefault(d, 4) if isinstance(d, str) else d for d in shape)
        out[name] = rng.normal(size=dims) + (3 * np.eye(dims[0]) if len(dims) == 2 and dims[0] == dims[1] else 0)
    return out


@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("kind,expr,wrt,shapes", PARAMS, ids=IDS)
def test_products_agree_with_numpy(backend, kind, expr, wrt, shapes):
    to, back = _framework(backend)
    m = getattr(matcalc, kind)(expr, wrt, shapes=shapes)
    src = m.source(backend)
    assert host_calls(src) == []
    rng = np.random.default_rng(7)
    values = _values(m, rng)
    fw = {k: to(v) for k, v in values.items()}
    V = rng.normal(size=np.shape(values[wrt]))
    suffix = wrt
    if kind == "hessian":
        got = back(compile_function(backend, src, f"hvp_{suffix}")(to(V), **fw))
        want = m.hvp(V, **values)
    else:
        got = back(compile_function(backend, src, f"jvp_{suffix}")(to(V), **fw))
        want = m.jvp(V, **values)
        G = rng.normal(size=np.shape(want))
        got_v = back(compile_function(backend, src, f"vjp_{suffix}")(to(G), **fw))
        np.testing.assert_allclose(got_v, m.vjp(G, **values), rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(back(compile_function(backend, src, "value")(**fw)),
                                   m.value_function(**values), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_products_against_the_closed_forms(backend, case):
    """Each basis direction through the framework's product, against the corpus' matrix."""
    to, back = _framework(backend)
    m = getattr(matcalc, case["kind"])(case["expr"], case["wrt"], shapes=case["shapes"])
    inputs = case_inputs(case)
    want = np_eval(case["reference"], inputs)
    f = compile_function(backend, m.source(backend), f"{'hvp' if case['kind'] == 'hessian' else 'jvp'}_{case['wrt']}")
    W = np.asarray(inputs[case["wrt"]], dtype=float)
    cols = []
    for j in range(W.size):
        e = np.zeros(W.size)
        e[j] = 1.0
        out = back(f(to(e.reshape(W.shape, order="F")), **{k: to(v) for k, v in inputs.items()}))
        cols.append(np.reshape(out, -1, order="F"))
    np.testing.assert_allclose(np.stack(cols, axis=1), want, rtol=1e-9, atol=1e-9)


def test_sources_are_written_without_the_frameworks():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['jax'] = None\n"
            "import matcalc\n"
            "h = matcalc.hessian('logdet(X)', 'X')\n"
            "j = matcalc.jacobian('softmax(W@x)', 'W')\n"
            "print(h.source('torch')); print(j.source('jax'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "def hvp_X(dX, /, *, X):" in r.stdout and "torch.linalg" in r.stdout
    assert "def vjp_W(G, /, *, W, x):" in r.stdout and "jax.nn.softmax" in r.stdout
    assert "def hessian_X" in r.stdout  # the dense matrix too, in the framework


def test_cli_code_backend_and_refusals():
    r = subprocess.run([sys.executable, "-m", "matcalc", "jacobian", "A@X@B", "--wrt", "X", "--code",
                        "--backend", "torch"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "import torch" in r.stdout and "def vjp_X(G, /, *, A, X, B):" in r.stdout
    r = subprocess.run([sys.executable, "-m", "matcalc", "hessian", "x:x", "--wrt", "x", "--backend", "mxnet",
                        "--code"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown backend 'mxnet'" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "matcalc", "hessian", "x:x", "--wrt", "x", "--backend", "jax"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "add --code" in r.stderr
