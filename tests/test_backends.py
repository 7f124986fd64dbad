"""The torch and jax backends: the same gradients as the NumPy code (itself checked against
finite differences and the corpus references), framework ops only, clear refusals."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import matcalc
from conftest import case_inputs, load_corpus, np_eval
from support.exprgen import expressions
from support.fd import rel_error as rel_err
from matcalc.backends import host_calls

CASES = load_corpus()
IDS = [c["id"] for c in CASES]
EXTRA = [  # the factorisation, stable forms and norms, beyond the corpus
    ("0.5*logdet(S) + 0.5*(x-mu).T@inv(S)@(x-mu) + det(S)", "S",
     {"S": ("n", "n"), "x": ("n",), "mu": ("n",)}, {"S": "spd"}),
    ("logsumexp(W@x) + sum(softmax(W@x)*y) + norm2(W@x) + norm1(W)", "W", {"y": ("a",)}, {}),
    ("sum(log(1+exp(-y*(X@w)))) + sum(sigmoid(X@w)) + sum(relu(X@w)) + sum(abs(X@w))", "w", {}, {}),
    ("tr(inv(A)@B) + sum(diag(A)*v) + sum(Diag(v)@B) + sum(sqrt(A*A + 1))", "A", {"B": ("n", "n")}, {"A": "spd"}),
    ("alpha*sum(exp(W@x)) + alpha**2 + sum(sin(W)**3 + cos(W)/2 + tanh(W)*sign(W))", "alpha", {}, {}),
    ("sum(p - q@softmax(w))", "w", {}, {}),  # the sum of a vector of ones
]


def _frameworks():
    out = []
    for name in ("torch", "jax"):
        try:
            __import__(name)
            out.append(name)
        except ImportError:
            pass
    return out


INSTALLED = _frameworks()
if "jax" in INSTALLED:  # the jax tests run in float64, as NumPy does
    import jax

    jax.config.update("jax_enable_x64", True)


def to_framework(backend, inputs):
    if backend == "torch":
        import torch

        return {k: torch.tensor(v, dtype=torch.float64) if isinstance(v, np.ndarray) else v
                for k, v in inputs.items()}
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    return {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def to_numpy(backend, value):
    if backend == "torch":
        return value.detach().numpy()
    return np.asarray(value)


def extra_inputs(d, domains, seed=0):
    from matcalc.check import draw

    rng = np.random.default_rng(seed)
    sizes = {}
    out = {}
    for name, shape in d.user_shapes.items():
        conc = tuple(sizes.setdefault(x, 3 + len(sizes)) if isinstance(x, str) else x for x in shape)
        out[name] = draw(conc, domains.get(name, "normal"), rng)
    return out


# ---- static: framework ops only (needs neither torch nor jax)

@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_sources_call_no_numpy_and_copy_nothing_to_the_host(backend):
    for case in CASES:
        d = matcalc.derive(case["expr"], wrt=case["wrt"], shapes=case["shapes"])
        src = d.source(backend)
        assert host_calls(src) == [], (case["id"], src)
        assert "import numpy" not in src
    for expr, wrt, shapes, _ in EXTRA:
        src = matcalc.derive(expr, wrt=wrt, shapes=shapes).source(backend)
        assert host_calls(src) == [] and not re.search(r"\bnp\.", src), src


def test_the_static_check_sees_host_calls():
    assert host_calls("    return x.cpu()\n    y = np.exp(x)\n    t = z.item()\n    w = a.numpy()")
    assert len(host_calls("    return x.cpu()\n    y = np.exp(x)\n    t = z.item()\n    w = a.numpy()")) == 4


def test_shared_factorisation_and_stable_forms_in_the_source():
    d = matcalc.derive("logdet(S)*det(S)", wrt="S")  # G = det(S)(logdet(S) + 1) S⁻ᵀ
    t = d.source("torch").split("def grad_S")[1]
    assert t.count("_lu(S)") == 1 and "torch.linalg.inv(" not in t and "torch.linalg.det(" not in t
    assert "torch.linalg.lu_factor" in d.source("torch")
    j = d.source("jax").split("def grad_S")[1]
    assert j.count("_lu(S)") == 1 and "jnp.linalg.inv(" not in j
    assert "jax.scipy.linalg.lu_factor" in d.source("jax")
    soft = matcalc.derive("sum(log(1+exp(X@w)))", wrt="w")  # σ, not exp/(1+exp)
    assert "torch.sigmoid(" in soft.source("torch") and "jax.nn.sigmoid(" in soft.source("jax")
    lse = matcalc.derive("logsumexp(W@x)", wrt="x")  # a shifted softmax
    assert "torch.softmax(" in lse.source("torch") and "jax.nn.softmax(" in lse.source("jax")
    lse = matcalc.derive("logsumexp(W@x) + norm2(x)", wrt="W")
    assert "torch.logsumexp(" in matcalc.derive("exp(logsumexp(X))", wrt="X").source("torch")


def test_every_registry_entry_emits_for_numpy_torch_and_jax():
    from matcalc.backends import JAX_TEMPLATES, TORCH_TEMPLATES
    from matcalc.ops import REGISTRY

    numpy_ops = {name for name, op in REGISTRY.items() if op.numpy is not None and name != "size"}
    assert numpy_ops <= set(TORCH_TEMPLATES)
    assert numpy_ops <= set(JAX_TEMPLATES)
    for tpl in list(TORCH_TEMPLATES.values()) + list(JAX_TEMPLATES.values()):
        if isinstance(tpl, str):
            assert host_calls("    y = " + tpl.format("x", "y")) == []


def test_numpy_backend_is_the_numpy_source():
    d = matcalc.derive("G:exp(X@W)", wrt="X")
    assert d.source() == d.source("numpy") == d.numpy_source
    assert d.callable() is d.function


def test_unknown_backend_is_refused():
    d = matcalc.derive("G:exp(X@W)", wrt="X")
    for bad in ("tensorflow", "Torch", 3):
        with pytest.raises(matcalc.MatcalcError, match="unknown backend"):
            d.source(bad)
        with pytest.raises(matcalc.MatcalcError, match="unknown backend"):
            d.callable(bad)
    with pytest.raises(matcalc.MatcalcError, match="unknown backend"):
        matcalc.op("exp(X)", backend="mxnet")
    with pytest.raises(matcalc.MatcalcError, match="torch.*or.*jax"):
        matcalc.op("exp(X)", backend="numpy")


def test_missing_framework_names_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_frameworks(name, *a, **k):
        if name.split(".")[0] in ("torch", "jax"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_frameworks)
    d = matcalc.derive("G:exp(X@W)", wrt="X")
    assert "torch" in d.source("torch")  # the source needs no framework
    for be in ("torch", "jax"):
        with pytest.raises(matcalc.MatcalcError, match=rf'pip install "matcalc-diff\[{be}\]"'):
            d.callable(be)
        with pytest.raises(matcalc.MatcalcError, match=rf"matcalc-diff\[{be}\]"):
            matcalc.op("exp(X)", backend=be)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "matcalc", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"})


def test_cli_backend():
    r = _cli("derive", "G:exp(X@W)", "--wrt", "X", "--code", "--backend", "jax")
    assert r.returncode == 0 and "def grad_X" in r.stdout and "jnp.exp" in r.stdout and not re.search(r"\bnp\.", r.stdout)
    r = _cli("derive", "G:exp(X@W)", "--wrt", "X", "--code", "--backend", "torch")
    assert r.returncode == 0 and "import torch" in r.stdout
    r = _cli("derive", "G:exp(X@W)", "--wrt", "X", "--code", "--backend", "tf")
    assert r.returncode == 2 and "unknown backend 'tf'" in r.stderr and "Traceback" not in r.stderr
    r = _cli("derive", "G:exp(X@W)", "--wrt", "X", "--backend", "jax")
    assert r.returncode == 2 and "--code" in r.stderr


# ---- numerics: needs the framework

def _backend_params():
    return [pytest.param(b, marks=pytest.mark.skipif(b not in INSTALLED, reason=f"{b} not installed"))
            for b in ("torch", "jax")]


@pytest.mark.parametrize("backend", _backend_params())
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_corpus_gradients_agree_with_the_reference(backend, case):
    d = matcalc.derive(case["expr"], wrt=case["wrt"], shapes=case["shapes"])
    f = d.callable(backend)
    inputs = case_inputs(case, 0)
    got = to_numpy(backend, f(**to_framework(backend, inputs)))
    want = np.asarray(np_eval(case["reference"], inputs), dtype=float)
    assert got.shape == want.shape
    assert rel_err(got, want) < 1e-9, (d.text, f.source)


@pytest.mark.filterwarnings("error::UserWarning")  # e.g. torch's warning on torch.tensor(a tensor)
@pytest.mark.parametrize("backend", _backend_params())
@pytest.mark.parametrize("expr,wrt,shapes,domains", EXTRA)
def test_extra_forms_agree_with_numpy_and_run_under_jit(backend, expr, wrt, shapes, domains):
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    inputs = extra_inputs(d, domains)
    want = d.function(**inputs)
    f = d.callable(backend)
    if backend == "jax":
        import jax

        f = jax.jit(f)
    got = to_numpy(backend, f(**to_framework(backend, inputs)))
    assert rel_err(got, want) < 1e-9, d.source(backend)


@pytest.mark.parametrize("backend", _backend_params())
def test_numpy_arrays_are_accepted(backend):
    d = matcalc.derive("alpha*sum(exp(W@x))", wrt="W")
    rng = np.random.default_rng(4)
    inputs = dict(W=rng.standard_normal((3, 4)), x=rng.standard_normal(4), alpha=np.float64(0.5))
    got = to_numpy(backend, d.callable(backend)(**inputs))
    assert rel_err(got, 0.5 * np.outer(np.exp(inputs["W"] @ inputs["x"]), inputs["x"])) < 1e-12
    with pytest.raises(TypeError, match="missing.*alpha"):
        d.callable(backend)(W=inputs["W"], x=inputs["x"])
    with pytest.raises(TypeError, match="unexpected.*beta"):
        d.callable(backend)(**inputs, beta=1.0)


@pytest.mark.parametrize("backend", _backend_params())
def test_float32_stays_float32(backend):
    d = matcalc.derive("alpha*sum(exp(W@x)) + logdet(S) + sum(inv(S)@x)", wrt="S", shapes={"W": ("n", "n")})
    inputs = extra_inputs(d, {"S": "spd"})
    fw = to_framework(backend, inputs)
    if backend == "torch":
        import torch
        fw = {k: v.float() if torch.is_tensor(v) else v for k, v in fw.items()}
        out = d.callable(backend)(**fw)
        assert out.dtype == torch.float32
    else:
        import jax.numpy as jnp
        fw = {k: v.astype(jnp.float32) if hasattr(v, "astype") else v for k, v in fw.items()}
        out = d.callable(backend)(**fw)
        assert out.dtype == jnp.float32
    assert rel_err(to_numpy(backend, out).astype(float), d.function(**inputs)) < 1e-4


@pytest.mark.parametrize("backend", _backend_params())
@settings(max_examples=20, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])
@given(case=expressions(), seed=st.integers(0, 2**32 - 1))
def test_random_expressions_agree_with_numpy(backend, case, seed):
    inputs = case.draw_inputs(np.random.default_rng(seed))
    for w in case.wrt:
        d = matcalc.derive(case.expr, wrt=w, shapes=case.shapes)
        want = d.function(**inputs)
        src = d.source(backend)
        assert host_calls(src) == [], src
        got = to_numpy(backend, d.callable(backend)(**to_framework(backend, inputs)))
        assert np.shape(got) == np.shape(want)
        assert np.allclose(got, want, rtol=1e-8, atol=1e-10 * max(1.0, float(np.max(np.abs(want))))), \
            (case.expr, w, src)


@pytest.mark.skipif("torch" not in INSTALLED, reason="torch not installed")
def test_torch_functions_run_on_a_device_without_data():
    """On torch's "meta" device tensors have shapes but no data: a host copy (.item(),
    .cpu(), a Python branch on a value) or a new tensor made on the CPU fails there, as it
    would be a transfer (or an error) on a GPU."""
    import torch

    todo = [(c["expr"], c["wrt"], c["shapes"]) for c in CASES] + [e[:3] for e in EXTRA] + [
        ("logdet(S)*det(S) + sum(inv(S)@x)", "S", {}), ("beta**0.5 + exp(2)*beta", "beta", {}),
        ("norm2(W@x) + sum(relu(W@x) + abs(W@x) + step(W@x))", "x", {})]
    for expr, wrt, shapes in todo:
        d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
        sizes: dict = {}
        args = {name: torch.empty(tuple(sizes.setdefault(x, 3 + len(sizes)) if isinstance(x, str) else x
                                        for x in shape), dtype=torch.float64, device="meta")
                for name, shape in d.user_shapes.items()}
        out = d.callable("torch")(**args)
        assert out.device.type == "meta", (expr, d.source("torch"))
        assert out.shape == tuple(args[wrt].shape)


@pytest.mark.skipif("jax" not in INSTALLED, reason="jax not installed")
def test_jax_functions_trace_under_jit_from_shapes_alone():
    """jax.jit traces with abstract values: a host copy or a Python branch on a value fails."""
    import jax

    for case in CASES:
        d = matcalc.derive(case["expr"], wrt=case["wrt"], shapes=case["shapes"])
        sizes: dict = {}
        args = {name: jax.ShapeDtypeStruct(tuple(sizes.setdefault(x, 3 + len(sizes)) if isinstance(x, str) else x
                                                 for x in shape), "float64")
                for name, shape in d.user_shapes.items()}
        out = jax.eval_shape(jax.jit(d.callable("jax")), **args)
        assert out.shape == args[case["wrt"]].shape, case["id"]


@pytest.mark.parametrize("backend", _backend_params())
def test_value_and_grad_for_a_backend(backend):
    vg = matcalc.value_and_grad("alpha*(exp(W@x+c)-W@x-c+m*m-1):1", wrt=["W", "c", "alpha"])
    src = vg.source(backend)
    assert host_calls(src) == []
    rng = np.random.default_rng(5)
    inputs = dict(W=rng.standard_normal((3, 4)), x=rng.standard_normal(4), c=rng.standard_normal(3),
                  m=rng.standard_normal(3), alpha=0.7)
    want_value, want = vg.function(**inputs)
    value, grads = vg.callable(backend)(**to_framework(backend, inputs))
    assert abs(float(to_numpy(backend, value)) - want_value) < 1e-10 * max(1.0, abs(want_value))
    assert set(grads) == {"W", "c", "alpha"}
    for k in grads:
        assert rel_err(to_numpy(backend, grads[k]), want[k]) < 1e-12


def _registry_cases():
    from test_registry import CASES as OPS, ELEMENTWISE

    out = [(f"w:{name}({arg})", {"A": ("a", "b"), "x": ("b",), "w": ("a",)}) for name, (_, (arg, _)) in
           sorted(ELEMENTWISE.items())]
    return out + [(expr, shapes) for expr, shapes, f in OPS if f is not None]


@pytest.mark.parametrize("backend", _backend_params())
@pytest.mark.parametrize("expr,shapes", _registry_cases(), ids=[c[0] for c in _registry_cases()])
def test_every_registry_operator_runs_in_the_framework_as_in_numpy(backend, expr, shapes):
    from test_registry import _inputs

    inputs = _inputs(shapes, np.random.default_rng(11), ("S",) if "S" in shapes else ())
    for w, d in matcalc.derive(expr, wrt=list(shapes), shapes=shapes).items():
        src = d.source(backend)
        assert host_calls(src) == [], src
        f = d.callable(backend)
        if backend == "jax":
            import jax

            f = jax.jit(f)
        got = to_numpy(backend, f(**to_framework(backend, inputs)))
        assert rel_err(np.reshape(got, np.shape(d.function(**inputs))), d.function(**inputs)) < 1e-9, src


@pytest.mark.parametrize("backend", _backend_params())
def test_size_one_dimensions_as_declared_or_squeezed(backend):
    """A column (b, 1), a row (1, a) and a (1,) vector, given in their declared shapes or as
    1-D vectors: the gradients (and value_and_grad's) take the shapes given, and agree with
    the NumPy function (itself checked against finite differences)."""
    shapes = {"X": ("a", "b"), "W": ("b", 1), "r": (1, "a"), "s": (1,)}
    expr = "s.T@(r@exp(X@W))"
    rng = np.random.default_rng(9)
    inputs = {"X": rng.standard_normal((3, 4)), "W": rng.standard_normal((4, 1)),
              "r": rng.standard_normal((1, 3)), "s": rng.standard_normal(1)}
    vg = matcalc.value_and_grad(expr, wrt=["W", "r", "s", "X"], shapes=shapes)
    want_value, want = vg.function(**inputs)
    squeezed = {k: v.reshape(-1) if k in ("W", "r") else v for k, v in inputs.items()}
    for given in (inputs, squeezed):
        value, grads = vg.callable(backend)(**to_framework(backend, given))
        assert abs(float(value) - want_value) < 1e-12 * abs(want_value)
        for k in ("W", "r", "s", "X"):
            got = to_numpy(backend, matcalc.derive(expr, wrt=k, shapes=shapes).callable(backend)(
                **to_framework(backend, given)))
            assert got.shape == given[k].shape and to_numpy(backend, grads[k]).shape == given[k].shape, k
            assert rel_err(got.reshape(want[k].shape), want[k]) < 1e-12, k


@pytest.mark.skipif("torch" not in INSTALLED, reason="torch is not installed")
def test_a_torch_gradient_never_shares_memory_with_an_argument():
    import torch

    X = torch.tensor(np.arange(9.0).reshape(3, 3))
    y = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    for expr, wrt, want in (("x:y", "x", y), ("diag(X):y", "y", torch.diagonal(X))):
        d = matcalc.derive(expr, wrt=wrt, shapes={"x": ("n",), "y": ("n",), "X": ("n", "n")})
        args = {"x": torch.zeros(3, dtype=torch.float64), "y": y, "X": X}
        g = d.callable("torch")(**{k: v for k, v in args.items() if k in d.user_shapes})
        assert torch.equal(g, want)
        g[0] = 100.0
        assert X[0, 0] == 0.0 and y[0] == 1.0
    beta = torch.tensor(2.0, dtype=torch.float64)  # a scalar is a 0-d tensor: also a copy
    g = matcalc.derive("alpha*beta", wrt="alpha").callable("torch")(alpha=torch.tensor(1.0, dtype=torch.float64),
                                                                    beta=beta)
    assert g == 2.0 and g is not beta
    g.mul_(0.0)
    assert beta == 2.0


# numbers computed on the host (a dimension squared, a constant over a norm, a size as the
# gradient): tensors in torch, floats in every backend
HOST_NUMBERS = [
    ("mean(A)", "A", {"A": ("a", "a")}, lambda v: np.full((3, 3), 1 / 9)),
    ("alpha/norm2(x)", "alpha", {"x": ("n",), "alpha": ()}, lambda v: 1 / np.linalg.norm(v["x"])),
    ("size(x, 0)*alpha", "alpha", {"x": ("n",), "alpha": ()}, lambda v: 3.0),
    ("(x - A):1", "x", {"A": (1, "b"), "x": (1,)}, lambda v: np.array([4.0])),  # b = 4
]


@pytest.mark.parametrize("backend", ["numpy"] + INSTALLED)
@pytest.mark.parametrize("expr,wrt,shapes,want", HOST_NUMBERS, ids=[c[0] for c in HOST_NUMBERS])
def test_host_numbers_in_gradients(backend, expr, wrt, shapes, want):
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    rng = np.random.default_rng(4)
    sizes = {"a": 3, "n": 3, "b": 4}
    values = {k: rng.standard_normal(tuple(sizes.get(x, x) for x in s)) if s else 0.7
              for k, s in shapes.items()}
    if backend == "numpy":
        g = d.function(**values)
    else:
        fw = to_framework(backend, values)
        fw = {k: v if k != "alpha" else 0.7 for k, v in fw.items()}  # a Python float, as documented
        g = to_numpy(backend, d.callable(backend)(**fw))
    assert np.asarray(g).dtype == np.float64 and np.shape(g) == np.shape(want(values))
    assert np.allclose(g, want(values))


@pytest.mark.skipif("torch" not in INSTALLED, reason="torch not installed")
def test_torch_integer_tensors_and_a_float_scalar():
    # the scalar took the integer tensor's dtype: 0.5 became 0 and every gradient 0
    import torch

    x = torch.arange(3)
    want = 0.5 * np.exp(np.arange(3.0))
    got = matcalc.derive("alpha*sum(exp(x))", wrt="x").callable("torch")(alpha=0.5, x=x)
    assert np.allclose(got.numpy(), want)
    assert np.allclose(matcalc.op("alpha*x", backend="torch")(alpha=0.5, x=x).numpy(), [0, 0.5, 1])


@pytest.mark.skipif("torch" not in INSTALLED, reason="torch not installed")
def test_torch_in_place_ops_leave_autograd_its_saved_outputs():
    # tanh_(expm1(X)) overwrote the output expm1 saved for its backward
    import torch

    X = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    op = matcalc.op("tanh(expm1(X))", backend="torch")
    g, = torch.autograd.grad(op(X=X).sum(), X, create_graph=True)
    hv, = torch.autograd.grad(g.sum(), X)
    Y = X.detach().clone().requires_grad_(True)
    g2, = torch.autograd.grad(torch.tanh(torch.expm1(Y)).sum(), Y, create_graph=True)
    hv2, = torch.autograd.grad(g2.sum(), Y)
    assert torch.allclose(g, g2) and torch.allclose(hv, hv2)
    x = torch.randn(5, dtype=torch.float64)
    with torch.no_grad():  # and the in-place form still runs where nothing needs a gradient
        got = matcalc.derive("sum(tanh(expm1(x)))", wrt="x").callable("torch")(x=x)
    t = torch.tanh(torch.expm1(x))
    assert torch.allclose(got, (1 - t ** 2) * torch.exp(x))


@pytest.mark.parametrize("backend", _backend_params())
def test_variables_named_like_the_framework_modules(backend):
    lib = {"torch": "torch", "jax": "jnp"}[backend]
    d = matcalc.derive(f"sum(exp({lib}))", wrt=lib)
    v = np.array([0.1, -0.2, 0.3])
    out = d.callable(backend)(**{lib: to_framework(backend, {"v": v})["v"]})
    assert np.allclose(to_numpy(backend, out), np.exp(v))


@pytest.mark.skipif("torch" not in INSTALLED, reason="torch not installed")
def test_torch_hvp_of_numpy_float32_values():
    h = matcalc.hessian("sum(exp(X@W))", "X").callable("torch")
    X, W = np.full((2, 3), .1, np.float32), np.full((3, 4), .2, np.float32)
    out = h.hvp(X, X=X, W=W)  # the direction became float64: a dtype error in the product
    E = np.exp(X.astype(float) @ W.astype(float))
    assert str(out.dtype) == "torch.float32" and np.allclose(out.numpy(), (E * (X @ W)) @ W.T, rtol=1e-5)


@pytest.mark.skipif("jax" not in INSTALLED, reason="jax not installed")
def test_jax_functions_of_python_floats_return_arrays():
    # as jax.grad does (the README: a scalar result is a 0-d array, not a float)
    import jax

    h = matcalc.hessian("alpha*beta**2", "beta").callable("jax")
    v, g = matcalc.value_and_grad("alpha*beta**2", wrt=["beta"]).callable("jax")(alpha=2.0, beta=3.0)
    out = [h.hvp(1.0, alpha=2.0, beta=3.0), v, g["beta"],
           matcalc.derive("alpha*beta**2", "beta").callable("jax")(alpha=2.0, beta=3.0)]
    assert all(isinstance(o, jax.Array) and o.shape == () for o in out)
    assert [float(o) for o in out] == [4.0, 18.0, 12.0, 12.0]


@pytest.mark.parametrize("backend", _backend_params())
def test_a_backend_function_names_the_argument_whose_shape_does_not_fit(backend):
    d = matcalc.derive("sum(exp(W@x))", wrt="W")
    fw = to_framework(backend, {"W": np.ones((3, 4)), "x": np.ones(5)})
    with pytest.raises(matcalc.ShapeError,
                       match=r"x has shape \(5,\), which makes b = 5, but W has shape \(3, 4\), which makes b = 4"):
        d.callable(backend)(**fw)


@pytest.mark.skipif("torch" not in INSTALLED, reason="torch not installed")
def test_torch_scalars_and_new_arrays_take_the_float_dtype_of_the_arguments():
    # an integer tensor first: the scalar became float32 beside float64 x; a constant gradient 0
    import torch

    x, k = torch.tensor([.3, .7, 1.1], dtype=torch.float64), torch.tensor([1, 2, 3])
    g = matcalc.derive("sum(alpha*k*x)", wrt="x").callable("torch")(alpha=0.1, k=k, x=x)
    assert g.dtype == torch.float64 and torch.equal(g, 0.1 * k.double())
    g = matcalc.derive("0.5*sum(x)", wrt="x").callable("torch")(x=torch.arange(3))
    assert g.dtype == torch.float64 and torch.equal(g, torch.full((3,), 0.5, dtype=torch.float64))
    x32 = torch.tensor([.3, .7, 1.1], dtype=torch.float32)  # integers beside float32: float32, as torch promotes
    assert matcalc.derive("sum(k*x)", wrt="x").callable("torch")(k=k, x=x32).dtype == torch.float32


@pytest.mark.skipif("torch" not in INSTALLED, reason="torch not installed")
def test_torch_integer_arrays_beside_float_ones():
    # sum(k*x) is emitted as x@k: torch refuses a dot of float64 and int64 tensors
    import torch

    k, x = torch.tensor([1, 2, 3]), torch.tensor([.3, .7, 1.1], dtype=torch.float64)
    assert torch.isclose(matcalc.derive("sum(alpha*k*x)", "alpha").callable("torch")(alpha=0.1, k=k, x=x),
                         torch.tensor(5.0, dtype=torch.float64))
    assert torch.isclose(matcalc.op("sum(alpha*k*x)")(alpha=0.1, k=k, x=x), torch.tensor(0.5, dtype=torch.float64))


@pytest.mark.skipif("jax" not in INSTALLED, reason="jax not installed")
def test_jax_integer_arrays_are_taken_as_floats():
    # jax.nn.sigmoid refused the int64 arrays NumPy and torch take (class labels, counts)
    import jax.numpy as jnp

    X, w = np.array([[1, -2, 0], [2, 1, -1]]), np.array([1, 0, -1])
    for expr in ("sum(logsigmoid(X@w))", "sum(softplus(X@w))", "sum(silu(X@w))", "sum(relu(X@w))"):
        d = matcalc.derive(expr, wrt="w")
        got = d.callable("jax")(X=jnp.array(X), w=jnp.array(w))
        assert jnp.issubdtype(got.dtype, jnp.floating), (expr, got.dtype)
        np.testing.assert_allclose(np.asarray(got), d.function(X=X, w=w), rtol=1e-6, err_msg=expr)


@pytest.mark.parametrize("backend", [b for b in ("torch", "jax") if b in INSTALLED])
def test_the_gradient_wrt_a_definition_in_a_framework(backend):
    # ∂λ/∂z for z = W@h + b: the torch/jax source raised KeyError: 'z' (the CLI exited 3)
    d = matcalc.derive("-t.T@log(softmax(z))", wrt="z", definitions={"z": "W@h+b"})
    rng = np.random.default_rng(13)
    vals = dict(W=rng.standard_normal((4, 3)), h=rng.standard_normal(3), b=rng.standard_normal(4),
                t=rng.uniform(0.1, 1, 4))
    z = vals["W"] @ vals["h"] + vals["b"]
    s = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    got = to_numpy(backend, d.callable(backend)(**to_framework(backend, vals)))
    np.testing.assert_allclose(got, vals["t"].sum() * s - vals["t"], rtol=1e-10)


@pytest.mark.parametrize("backend", _backend_params())
def test_a_vector_given_as_a_column_or_row_to_a_framework_function(backend):
    # refused ("x must be a vector (1-D)") where the NumPy function takes it; the gradient
    # comes back in the shape given, as d.function returns it
    d = matcalc.derive("sum(exp(A@x))", "x")
    A, x = np.eye(3) / 2 + 0.1, np.arange(3.0)
    want = A.T @ np.exp(A @ x)
    for given in (x[:, None], x[None, :]):
        fw = to_framework(backend, {"A": A, "x": given})
        g = d.callable(backend)(**fw)
        assert tuple(g.shape) == given.shape
        np.testing.assert_allclose(np.asarray(g).ravel(), want, rtol=1e-12)
        _, grads = matcalc.value_and_grad("sum(exp(A@x))", wrt=["x", "A"]).callable(backend)(**fw)
        assert tuple(grads["x"].shape) == given.shape


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_complex_arguments_are_refused_and_integers_are_exact(backend):
    # torch cast a complex tensor to its real part and an int64 one to float32 (2**24 + 1 rounded),
    # jax returned complex "gradients"; NumPy's functions refuse complex and read integers exactly
    lib = pytest.importorskip(backend)
    xp = lib if backend == "torch" else pytest.importorskip("jax.numpy")
    f = matcalc.derive("logsumexp(x)", "x").callable(backend)
    with pytest.raises(TypeError, match="x is complex"):
        f(x=xp.asarray([1 + 2j, 3.0]))
    for bad, what in ((["1", "2"], "x holds text"), ([1.0, None], "x holds None"), ([[1.0], [2.0, 3.0]], "x is not")):
        with pytest.raises((TypeError, ValueError), match=what):  # (torch read '1' as 1.0, None as nan)
            f(x=bad)
    if backend == "torch":
        got = f(x=lib.tensor([16777217, 16777216, 0]))
        np.testing.assert_allclose(np.asarray(got), [1 / (1 + np.exp(-1)), 1 / (1 + np.e), 0.0], atol=1e-7)
