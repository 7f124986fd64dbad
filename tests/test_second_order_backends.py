"""Hessians and Jacobians in torch and jax: one module per map, framework ops only; the dense
matrices equal the corpus references and the NumPy ones, the products equal NumPy's (itself
checked against finite differences in test_second_order), under jax.jit and on torch's data-less
"meta" device; the maps without a vec form (dense matrix by vmap over basis tangents) against
central differences of a hand-written NumPy F."""
import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import matcalc
from conftest import case_inputs, np_eval
from matcalc.backends import host_calls
from test_second_order import CASES, IDS, fd_hessian, fd_jacobian, rel_err, unvec, vec


def _installed(name):
    try:
        __import__(name)
        return True
    except ImportError:
        return False


INSTALLED = [b for b in ("torch", "jax") if _installed(b)]
if "jax" in INSTALLED:  # float64, as NumPy
    import jax

    jax.config.update("jax_enable_x64", True)

# maps without a vec form (their dense matrix comes from the products), mixed blocks, a scalar
# variable; each with its own NumPy F (a Jacobian) or λ (a Hessian) for central differences
EXTRA = [
    ("jacobian", "diag(X)", "X", {"X": ("n", "n")}, {}, "np.diag(X)"),  # fewer cotangents: vjp
    ("jacobian", "diag(X)@diag(X).T", "X", {"X": ("n", "n")}, {}, "np.outer(np.diag(X), np.diag(X))"),
    ("jacobian", "kron(X, A)", "X", {"X": ("a", "b"), "A": ("c", "d")}, {}, "np.kron(X, A)"),
    ("jacobian", "Diag(x)@A", "x", {"x": ("n",), "A": ("n", "m")}, {}, "np.diag(x)@A"),
    ("jacobian", "vec(X)", "X", {"X": ("a", "b")}, {}, "X.reshape(-1, order='F')"),
    ("hessian", "sum(diag(X)**3)", "X", {"X": ("n", "n")}, {}, "np.sum(np.diag(X)**3)"),
    ("hessian", "sum(exp(diag(X)))*alpha", "alpha", {"X": ("n", "n"), "alpha": ()}, {}, "np.sum(np.exp(np.diag(X)))*alpha"),
    ("hessian", "alpha**3*sum(exp(W@x))", "alpha", {"W": ("m", "n"), "alpha": ()}, {"alpha": "positive"},
     "alpha**3*np.sum(np.exp(W@x))"),
    ("hessian", "logdet(X) + tr(X.T@A@X)", "X", {"X": ("n", "n"), "A": ("n", "n")}, {"X": "spd"},
     "np.linalg.slogdet(X)[1] + np.trace(X.T@A@X)"),
    ("jacobian", "softmax(X, 0)", "X", {"X": ("a", "b")}, {},
     "np.exp(X - X.max(0)) / np.exp(X - X.max(0)).sum(0)"),
    ("jacobian", "inv(X)@b", "X", {"X": ("n", "n"), "b": ("n",)}, {"X": "spd"}, "np.linalg.solve(X, b)"),
    # a dimension squared (mean's 1/n²) and a constant over a norm: numbers, not tensors, in torch
    ("hessian", "mean(x)**2", "x", {"x": ("n",)}, {}, "np.mean(x)**2"),
    ("hessian", "mean(X@X)", "X", {"X": ("n", "n")}, {}, "np.mean(X@X)"),
    ("hessian", "norm2(x - c)", "x", {"x": ("n",)}, {}, "np.linalg.norm(x - c)"),  # (the tangents
    ("jacobian", "(x - c)/norm2(x - c)", "x", {"x": ("n",)}, {}, "(x - c)/np.linalg.norm(x - c)"),  # are x)
    ("jacobian", "cosh(mean(X))*X", "X", {"X": ("a", "b")}, {}, "np.cosh(np.mean(X))*X"),
]
EXTRA_IDS = [f"{e[0]}:{e[1]}:{e[2]}" for e in EXTRA]


def _api(kind, expr, wrt, shapes):
    fn = matcalc.hessian if kind == "hessian" else matcalc.jacobian
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", matcalc.NotationWarning)  # a Jacobian of a scalar
        return fn(expr, wrt=wrt, shapes=shapes)


def _case_map(case):
    return _api(case["kind"], case["expr"], case["wrt"], case["shapes"])


def _extra_case(e):
    kind, expr, wrt, shapes, domain, f = e
    return {"kind": kind, "expr": expr, "wrt": wrt, "shapes": shapes, "domain": domain, "f": f}


def to_framework(backend, inputs):
    if backend == "torch":
        import torch

        return {k: torch.tensor(v, dtype=torch.float64) if isinstance(v, np.ndarray) else v
                for k, v in inputs.items()}
    import jax.numpy as jnp

    return {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def one(backend, v):
    return to_framework(backend, {"v": np.asarray(v, dtype=float)})["v"]


def to_numpy(backend, value):
    if backend == "torch":
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _backend_params():
    return [pytest.param(b, marks=pytest.mark.skipif(b not in INSTALLED, reason=f"{b} not installed"))
            for b in ("torch", "jax")]


# ---------------------------------------------------------------- static: needs neither framework

@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_modules_use_framework_ops_only(backend):
    maps = [_case_map(c) for c in CASES] + [_api(*e[:4]) for e in EXTRA]
    maps += list(matcalc.hessian("G:(X@W) + sum(exp(X@W))", ["X", "W"]).values())
    for m in maps:
        src = m.source(backend)
        assert host_calls(src) == [], src
        assert "import numpy" not in src and not re.search(r"\bnp\.", src), src
        names = m._fnames
        first = "def grad_" if m.kind == "hessian" else "def value("
        assert first in src and f"def {names['product']}(" in src and f"def {names['dense']}(*, " in src
        assert (f"def {names['vjp']}(" in src) == (m.kind == "jacobian")
        compile(src, "<test>", "exec")  # a module that parses


def test_the_tangent_is_positional_only_as_in_numpy():
    h = matcalc.hessian("norm2(X@W - Y)**2", "W")
    assert "def hvp_W(dW, /, *, X, W, Y):" in h.source("torch")
    j = matcalc.jacobian("A@X@B", "X")
    assert "def jvp_X(dX, /, *, A, X, B):" in j.source("jax")
    assert "def vjp_X(G, /, *, A, X, B):" in j.source("jax")


def test_without_a_vec_form_the_dense_matrix_is_one_vmap_no_loop():
    j = matcalc.jacobian("diag(X)", "X")
    assert j.kron is None
    t, x = j.source("torch"), j.source("jax")
    assert "torch.func.vmap(" in t and "jax.vmap(" in x
    for src in (t, x):
        assert "range(" not in src  # the NumPy module loops over basis vectors; these do not
    # with a vec form: Kronecker products in the framework, K as a permutation
    k = matcalc.hessian("logdet(X)", "X")
    assert "torch.kron(" in k.source("torch") and "jnp.kron(" in k.source("jax")
    assert "_comm(" in k.source("torch") and "vmap" not in k.source("torch")


def test_numpy_backend_is_the_numpy_module_and_the_map_itself():
    h = matcalc.hessian("x.T@A@x", "x")
    assert h.source() == h.source("numpy") == h.numpy_source
    assert h.callable() is h and h.callable("numpy") is h


def test_unknown_backend_is_refused():
    h = matcalc.hessian("x.T@A@x", "x")
    j = matcalc.jacobian("A@x", "x")
    for bad in ("tensorflow", "Jax", None):
        for m in (h, j):
            with pytest.raises(matcalc.MatcalcError, match="unknown backend"):
                m.source(bad)
            with pytest.raises(matcalc.MatcalcError, match="unknown backend"):
                m.callable(bad)


def test_missing_framework_names_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_frameworks(name, *a, **k):
        if name.split(".")[0] in ("torch", "jax"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_frameworks)
    h = matcalc.hessian("x.T@A@x", "x")
    assert "import torch" in h.source("torch")  # the source needs no framework
    for be in ("torch", "jax"):
        with pytest.raises(matcalc.MatcalcError, match=rf'pip install "matcalc-diff\[{be}\]"'):
            h.callable(be)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "matcalc", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"})


def test_cli_code_and_json_for_a_backend():
    r = _cli("hessian", "norm2(X@W - Y)**2", "--wrt", "W", "--code", "--backend", "jax")
    assert r.returncode == 0, r.stderr
    assert "def hvp_W(dW, /, *, X, W, Y):" in r.stdout and "def hessian_W(" in r.stdout
    assert "import jax.numpy as jnp" in r.stdout and not re.search(r"\bnp\.", r.stdout)
    r = _cli("jacobian", "diag(X)", "--wrt", "X", "--code", "--backend", "torch")
    assert r.returncode == 0 and "import torch" in r.stdout and "def jacobian_X(" in r.stdout
    r = _cli("jacobian", "A@X@B", "--wrt", "X", "--json", "--backend", "torch")
    obj = json.loads(r.stdout)
    assert r.returncode == 0 and "def jvp_X(" in obj["torch_source"] and "def jvp_X(" in obj["numpy_source"]
    assert "import torch" in obj["torch_source"] and "jax_source" not in obj
    r = _cli("hessian", "G:(X@W)", "--wrt", "X", "--wrt", "W", "--json", "--backend", "jax")
    objs = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0 and len(objs) == 4 and all("jax.numpy" in o["jax_source"] for o in objs)


def test_cli_refusals_for_a_backend():
    r = _cli("hessian", "x.T@A@x", "--wrt", "x", "--code", "--backend", "tf")
    assert r.returncode == 2 and "unknown backend 'tf'" in r.stderr and "Traceback" not in r.stderr
    r = _cli("jacobian", "A@x", "--wrt", "x", "--backend", "jax")
    assert r.returncode == 2 and "--code" in r.stderr


# ---------------------------------------------------------------- numerics: needs the framework

def _check_against_numpy(backend, m, inputs, rng, want_dense=None):
    """The framework's dense matrix and products against NumPy's (and a reference)."""
    f = m.callable(backend)
    fw = to_framework(backend, inputs)
    M = m.matrix(**inputs)
    got = to_numpy(backend, f.matrix(**fw))
    assert got.shape == M.shape
    assert rel_err(got, M) < 1e-9, m.source(backend)
    if want_dense is not None:
        assert rel_err(got, want_dense) < 1e-9
    wshape = np.shape(inputs[m.wrt])
    V = unvec(rng.standard_normal(M.shape[1]), wshape)
    if m.kind == "hessian":
        got = to_numpy(backend, f.hvp(one(backend, V), **fw))
        out_shape = np.shape(inputs[m.wrt_i])  # a block (Wi, Wj) maps Wj's shape to Wi's
        assert rel_err(np.reshape(got, out_shape), np.reshape(m.hvp(V, **inputs), out_shape)) < 1e-10
        assert rel_err(vec(got), M @ vec(V)) < 1e-9
        g = to_numpy(backend, f.gradient_function(**fw))
        assert rel_err(g, m.gradient_function(**inputs)) < 1e-10
    else:
        want = m.jvp(V, **inputs)
        got = to_numpy(backend, f.jvp(one(backend, V), **fw))
        assert got.shape == np.shape(want) and rel_err(got, want) < 1e-10
        G = unvec(rng.standard_normal(M.shape[0]), np.shape(want))
        back = to_numpy(backend, f.vjp(one(backend, G), **fw))
        assert rel_err(np.reshape(back, wshape), np.reshape(m.vjp(G, **inputs), wshape)) < 1e-10
        assert rel_err(vec(back), M.T @ vec(G)) < 1e-9
        assert rel_err(to_numpy(backend, f.value_function(**fw)), m.value_function(**inputs)) < 1e-12
    return M


@pytest.mark.parametrize("backend", _backend_params())
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_corpus_dense_and_products_equal_numpy_and_the_reference(backend, case):
    m = _case_map(case)
    for seed in (1,):  # sizes distinct per dimension (tests/conftest.py SIZES)
        inputs = case_inputs(case, seed)
        want = np.asarray(np_eval(case["reference"], inputs), dtype=float)
        _check_against_numpy(backend, m, inputs, np.random.default_rng(seed + 7), want)


@pytest.mark.parametrize("backend", _backend_params())
@pytest.mark.parametrize("e", EXTRA, ids=EXTRA_IDS)
def test_maps_without_vec_forms_blocks_and_scalars_against_differences(backend, e):
    case = _extra_case(e)
    m = _api(case["kind"], case["expr"], case["wrt"], case["shapes"])
    inputs = case_inputs(dict(case, shapes=m.user_shapes), 3)
    M = _check_against_numpy(backend, m, inputs, np.random.default_rng(3))
    F = lambda a: np_eval(case["f"], a)  # noqa: E731
    if case["kind"] == "hessian":
        assert rel_err(M, fd_hessian(F, inputs, case["wrt"])) < 1e-5
    else:
        assert rel_err(M, fd_jacobian(F, inputs, case["wrt"])) < 1e-6


@pytest.mark.parametrize("backend", _backend_params())
def test_mixed_blocks(backend):
    shapes = {"X": ("n", "d"), "W": ("d", "m"), "G": ("n", "m")}
    blocks = matcalc.hessian("sum(exp(X@W)) + G:(X@W)", ["X", "W"], shapes=shapes)
    inputs = case_inputs({"shapes": shapes}, 4)
    lam = lambda a: np.sum(np.exp(a["X"] @ a["W"])) + np.sum(a["G"] * (a["X"] @ a["W"]))  # noqa: E731
    for (wi, wj), h in blocks.items():
        M = _check_against_numpy(backend, h, inputs, np.random.default_rng(5))
        assert M.shape == (np.size(inputs[wi]), np.size(inputs[wj]))
        assert rel_err(M, fd_hessian(lam, inputs, wi, wj)) < 1e-5


@pytest.mark.skipif("jax" not in INSTALLED, reason="jax not installed")
def test_jax_functions_run_under_jit():
    """The dense matrix and the product of every corpus module, and of maps without a vec form
    (jax.vmap inside), traced and run under jax.jit."""
    import jax

    for case in CASES + [_extra_case(e) for e in EXTRA[:3]]:
        m = _case_map(case)
        inputs = case_inputs(case, 0)
        fw = to_framework("jax", inputs)
        f = m.callable("jax")
        dense = np.asarray(jax.jit(f.matrix)(**fw))
        assert rel_err(dense, m.matrix(**inputs)) < 1e-9, case["expr"]
        V = unvec(np.random.default_rng(1).standard_normal(dense.shape[1]), np.shape(inputs[case["wrt"]]))
        prod = f.hvp if m.kind == "hessian" else f.jvp
        got = np.asarray(jax.jit(prod)(one("jax", V), **fw))
        assert rel_err(vec(got), dense @ vec(V)) < 1e-9, case["expr"]


@pytest.mark.skipif("torch" not in INSTALLED, reason="torch not installed")
def test_torch_runs_on_a_device_without_data():
    """On torch's "meta" device tensors have shapes but no data: a host copy or a tensor made on
    the CPU fails there, as it would be a transfer (or an error) on a GPU."""
    import torch

    for case in CASES + [_extra_case(e) for e in EXTRA]:
        m = _case_map(case)
        sizes: dict = {}
        args = {name: torch.empty(tuple(sizes.setdefault(x, 3 + len(sizes)) if isinstance(x, str) else x
                                        for x in shape), dtype=torch.float64, device="meta")
                for name, shape in m.user_shapes.items()}
        f = m.callable("torch")
        n_w = int(np.prod(args[case["wrt"]].shape))
        M = f.matrix(**args)
        assert M.device.type == "meta" and M.shape[1] == n_w, (case["expr"], m.source("torch"))
        V = torch.empty(args[case["wrt"]].shape, dtype=torch.float64, device="meta")
        if m.kind == "hessian":
            out = f.hvp(V, **args)
            assert out.device.type == "meta" and out.shape == V.shape
        else:
            out = f.jvp(V, **args)
            assert out.device.type == "meta" and int(np.prod(out.shape)) == M.shape[0]
            back = f.vjp(torch.empty(out.shape, dtype=torch.float64, device="meta"), **args)
            assert back.device.type == "meta" and back.shape == V.shape


@pytest.mark.parametrize("backend", _backend_params())
def test_float32_stays_float32(backend):
    for m in (matcalc.hessian("logdet(X) + tr(X.T@A@X)", "X"), matcalc.jacobian("diag(X)@diag(X).T", "X")):
        inputs = case_inputs({"shapes": m.user_shapes, "domain": {"X": "spd"}}, 0)
        fw = to_framework(backend, inputs)
        fw = {k: v.float() if backend == "torch" else v.astype("float32") for k, v in fw.items()}
        out = m.callable(backend).matrix(**fw)
        assert str(out.dtype).endswith("float32")
        assert rel_err(to_numpy(backend, out).astype(float), m.matrix(**inputs)) < 1e-4


@pytest.mark.parametrize("backend", _backend_params())
def test_arguments_are_checked(backend):
    h = matcalc.hessian("norm2(X@W - Y)**2", "W", shapes={"X": ("n", "d"), "W": ("d", "m")})
    inputs = case_inputs({"shapes": h.user_shapes}, 0)
    f = h.callable(backend)
    fw = to_framework(backend, inputs)
    with pytest.raises(TypeError, match="missing.*Y"):
        f.matrix(X=fw["X"], W=fw["W"])
    with pytest.raises(TypeError, match="unexpected.*Z"):
        f.matrix(**fw, Z=1.0)
    with pytest.raises(matcalc.MatcalcError, match="must have shape"):
        f.hvp(one(backend, np.ones((3, 3))), **fw)
    assert not hasattr(f, "jvp") and hasattr(f, "hvp")
    j = matcalc.jacobian("A@x", "x", shapes={"A": ("m", "n")})
    g = j.callable(backend)
    assert not hasattr(g, "hvp") and hasattr(g, "vjp")
    x_inputs = case_inputs({"shapes": j.user_shapes}, 0)
    col = one(backend, x_inputs["x"][:, None])  # a column for a vector, as the NumPy side takes
    got = to_numpy(backend, g.jvp(col, **to_framework(backend, x_inputs)))
    assert rel_err(got, x_inputs["A"] @ x_inputs["x"]) < 1e-12
    if backend == "torch":  # NumPy arrays are taken as CPU tensors
        got = to_numpy("torch", f.matrix(**inputs))
        assert rel_err(got, h.matrix(**inputs)) < 1e-12


@pytest.mark.skipif("torch" not in INSTALLED, reason="torch not installed")
def test_torch_kron_of_a_transposed_tensor():
    """torch.kron refuses a non-contiguous operand (X.T); the emitted code makes it contiguous."""
    import torch

    rng = np.random.default_rng(6)
    X, A = rng.standard_normal((3, 2)), rng.standard_normal((4, 5))
    j = matcalc.jacobian("kron(X.T, A)", "A")
    got = j.callable("torch").value_function(X=torch.from_numpy(X), A=torch.from_numpy(A))
    assert rel_err(got.numpy(), np.kron(X.T, A)) < 1e-12
    V = rng.standard_normal((4, 5))
    jv = j.callable("torch").jvp(torch.from_numpy(V), X=torch.from_numpy(X), A=torch.from_numpy(A))
    assert rel_err(jv.numpy(), np.kron(X.T, V)) < 1e-12


@pytest.mark.parametrize("backend", _backend_params())
def test_random_hessians_agree_with_numpy_by_vec_form_and_by_vmap(backend):
    """Random expressions (tests/support/exprgen.py): the framework's dense Hessian, from the vec
    form and from vmap over basis tangents, equals the NumPy one (checked against second
    differences in test_second_order_soundness)."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    from matcalc.second_order_backends import functions, module_source
    from support.exprgen import expressions

    @settings(max_examples=8, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much])
    @given(case=expressions(max_depth=3), seed=st.integers(0, 2**32 - 1))
    def run(case, seed):
        inputs = case.draw_inputs(np.random.default_rng(seed))
        for w in case.wrt:
            h = matcalc.hessian(case.expr, w, shapes=case.shapes)
            with np.errstate(all="ignore"):
                H = h.matrix(**inputs)
            if not np.all(np.isfinite(H)):
                continue
            fw = to_framework(backend, inputs)
            by_vec = to_numpy(backend, h.callable(backend).matrix(**fw))
            src = module_source(h, backend, vmap=True)
            assert host_calls(src) == [] and "vmap(" in src
            by_vmap = to_numpy(backend, functions(h, backend, src).matrix(**fw))
            tol = 1e-9 * max(1.0, float(np.max(np.abs(H), initial=0.0)))
            assert np.allclose(by_vec, H, rtol=1e-8, atol=tol), (case.expr, w, h.source(backend))
            assert np.allclose(by_vmap, H, rtol=1e-8, atol=tol), (case.expr, w, src)

    run()


@pytest.mark.parametrize("backend", _backend_params())
def test_a_column_declared_n_by_1_in_every_function(backend):
    # x declared (n, 1) and given so: the products broadcast (3, 1) against (2,) and came back
    # (2, 3), the gradient function raised; H[V] has x's shape as given, as the NumPy side's
    rng = np.random.default_rng(4)
    shapes = {"W": ("m", "n"), "x": ("n", 1)}
    W, x, V, G = rng.standard_normal((2, 3)), rng.standard_normal((3, 1)), rng.standard_normal((3, 1)), \
        rng.standard_normal(2)
    E = np.exp(W @ x[:, 0])
    want_hvp = (W.T @ (E * (W @ V[:, 0])))[:, None]  # sum(exp(Wx)): H = Wᵀ Diag(e) W
    h = matcalc.hessian("sum(exp(W@x))", "x", shapes=shapes)
    j = matcalc.jacobian("exp(W@x)", "x", shapes=shapes)
    hf, jf = h.callable(backend), j.callable(backend)
    vals = to_framework(backend, {"W": W, "x": x})
    for direction in (V, V[:, 0]):
        out = to_numpy(backend, hf.hvp(one(backend, direction), **vals))
        assert out.shape == (3, 1) and np.allclose(out, want_hvp)
    assert np.allclose(to_numpy(backend, hf.gradient_function(**vals)), (W.T @ E)[:, None])
    assert np.allclose(to_numpy(backend, hf.matrix(**vals)), W.T @ (E[:, None] * W))
    out = to_numpy(backend, jf.jvp(one(backend, V), **vals))
    assert out.shape == (2, 1) and np.allclose(out[:, 0], E * (W @ V[:, 0]))  # F = exp(W@x) is (m, 1)
    assert to_numpy(backend, jf.value_function(**vals)).shape == (2, 1)
    out = to_numpy(backend, jf.vjp(one(backend, G), **vals))
    assert out.shape == (3, 1) and np.allclose(out, (W.T @ (E * G))[:, None])


def test_the_standalone_numpy_module_takes_a_column_as_declared():
    rng = np.random.default_rng(4)
    W, x, V = rng.standard_normal((2, 3)), rng.standard_normal((3, 1)), rng.standard_normal((3, 1))
    h = matcalc.hessian("sum(exp(W@x))", "x", shapes={"W": ("m", "n"), "x": ("n", 1)})
    ns = {}
    exec(compile(h.numpy_source, "<hessian>", "exec"), ns)
    E = np.exp(W @ x[:, 0])
    out = ns["hvp_x"](V, W=W, x=x)
    assert out.shape == (3, 1) and np.allclose(out[:, 0], W.T @ (E * (W @ V[:, 0])))


@pytest.mark.parametrize("backend", ["numpy"] + _backend_params())
def test_the_dense_matrix_of_a_row_declared_1_by_n_without_a_vec_form(backend):
    # the dense matrix read n from A.shape[0], which is 1 for A given as (1, n): [[1.]] for I₄
    A = np.arange(4.0)[None]
    j = matcalc.jacobian("vec(A)", "A", shapes={"A": (1, "n")})
    h = matcalc.hessian("vec(A):vec(A)", "A", shapes={"A": (1, "n")})
    if backend == "numpy":
        M, H = j.matrix(A=A), h.matrix(A=A)
    else:
        a = one(backend, A)
        M, H = to_numpy(backend, j.callable(backend).matrix(A=a)), to_numpy(backend, h.callable(backend).matrix(A=a))
    assert np.allclose(M, np.eye(4)) and np.allclose(H, 2 * np.eye(4))


@pytest.mark.skipif("torch" not in INSTALLED, reason="needs torch")
def test_torch_kron_of_a_transposed_column():
    # Aᵀ of a 1×n A is n×1 with strides torch calls contiguous, and torch.kron raised on it
    import torch

    h = matcalc.hessian("tr(X@A@X@B)", "X", shapes={"X": ("n", "m"), "A": ("m", "n"), "B": ("m", "n")})
    rng = np.random.default_rng(13)
    vals = {"X": rng.standard_normal((3, 1)), "A": rng.standard_normal((1, 3)), "B": rng.standard_normal((1, 3))}
    got = h.callable("torch").matrix(**{k: torch.from_numpy(v) for k, v in vals.items()})
    np.testing.assert_allclose(got.numpy(), h.matrix(**vals), rtol=1e-12)
    d = matcalc.derive("G:kron(A.T, X)", "X", shapes={"A": (1, "n"), "X": ("n", "m"), "G": ("n*n", "m")})
    vals = {"A": rng.standard_normal((1, 3)), "X": rng.standard_normal((3, 2)), "G": rng.standard_normal((9, 2))}
    got = d.callable("torch")(**{k: torch.from_numpy(v) for k, v in vals.items()})
    np.testing.assert_allclose(got.numpy(), d.function(**vals), rtol=1e-12)


def test_jit_of_products_when_a_symbol_is_named_like_the_tangent():
    # hvp(V, /, **values) under jax.jit with a symbol V: jax binds by name, and failed
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(15)
    U, V, M, T = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), rng.standard_normal((3, 4)), \
        rng.standard_normal((3, 2))
    f = matcalc.hessian("0.5*norm2(U@V.T - M)**2", "U").callable("jax")
    np.testing.assert_allclose(jax.jit(f.hvp)(T, U=U, V=V, M=M), T @ V.T @ V, rtol=1e-12)  # H[T] = T VᵀV
    G, X, C = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), rng.standard_normal((3, 5))
    g = matcalc.jacobian("G@X", "X").callable("jax")
    np.testing.assert_allclose(jax.jit(g.vjp)(C, G=G, X=X), G.T @ C, rtol=1e-12)
    j = matcalc.jacobian("V@X", "X", shapes={"V": ("a", "b")}).callable("jax")
    np.testing.assert_allclose(jax.jit(j.jvp)(X, V=G, X=X), G @ X, rtol=1e-12)


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_the_framework_products_take_python_names_and_lists(backend):
    # hvp(x, lambda_=…) raised a bare KeyError: 'lambda_' in torch and jax; lists failed in torch
    pytest.importorskip(backend)
    x, A = np.arange(1.0, 4.0), np.eye(3) / 2
    want = 2.0 * A.T @ np.diag(np.exp(A @ x)) @ A @ x
    H = matcalc.hessian("lambda*sum(exp(A@x))", "x").callable(backend)
    np.testing.assert_allclose(np.asarray(H.hvp(x, lambda_=2.0, A=A, x=x)), want, rtol=1e-12)
    J = matcalc.jacobian("tanh(W@h)", "W").callable(backend)
    W, h = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [0.1, -0.2, 0.3]
    z = np.array(W) @ np.array(h)
    np.testing.assert_allclose(np.asarray(J.jvp(np.ones((2, 3)), W=W, h=h)), (1 - np.tanh(z) ** 2) * sum(h),
                               rtol=1e-12)


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_framework_products_of_a_vector_given_as_a_column(backend):
    # x and V given (3, 1): hvp returned the 3×3 outer product (the column broadcast against
    # the 1-D code); now as the NumPy hvp: the product in x's shape, the same numbers
    pytest.importorskip(backend)
    x, V, A = np.arange(3.0) / 3, np.array([1.0, 2.0, -1.0]), np.eye(3) / 2 + 0.1
    h = matcalc.hessian("sum(exp(x))", "x")
    got = h.callable(backend).hvp(V[:, None], x=x[:, None])
    assert tuple(got.shape) == (3, 1)
    np.testing.assert_allclose(np.asarray(got).ravel(), np.exp(x) * V, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(h.callable(backend).hvp([1.0, 2.0, -1.0], x=x)), np.exp(x) * V, rtol=1e-12)
    J = matcalc.jacobian("exp(A@x)", "x")
    Jb = J.callable(backend)
    np.testing.assert_allclose(np.asarray(Jb.jvp(V, A=A, x=x[:, None])).ravel(), np.exp(A @ x) * (A @ V), rtol=1e-12)
    back = Jb.vjp(V, A=A, x=x[:, None])
    assert tuple(back.shape) == (3, 1)
    np.testing.assert_allclose(np.asarray(back).ravel(), A.T @ (np.exp(A @ x) * V), rtol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_second_order_products_of_a_vector_given_as_a_row(backend):
    # a plain x given (1, 3) was read as a vector of 1: "the direction V must have shape (1,)"
    if backend != "numpy":
        pytest.importorskip(backend)
    x = np.arange(3.0) / 3
    h = matcalc.hessian("sum(exp(x))", "x")
    got = (h if backend == "numpy" else h.callable(backend)).hvp(np.ones((1, 3)), x=x[None, :])
    assert tuple(got.shape) == (1, 3)
    np.testing.assert_allclose(np.asarray(got).ravel(), np.exp(x), rtol=1e-12)
