"""Hessians and Jacobians: every public second-order case through the API and the CLI
(dense matrix against the reference and against finite differences of the case's own
NumPy ``f``), the vec forms the textbooks write, matrix-free products against the dense
matrix, symmetry, refusals and notes."""
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import matcalc
from conftest import SIZES, case_inputs, load_corpus, np_eval

HERE = Path(__file__).resolve().parent


def second_order_corpus():
    shared = HERE.parent.parent / "shared" / "corpus" / "second_order_public.json"
    path = shared if shared.exists() else HERE / "data" / "second_order_public.json"
    return json.loads(path.read_text(encoding="utf-8"))


CASES = second_order_corpus()
IDS = [c["id"] for c in CASES]


# ---------------------------------------------------------------- independent differences

def vec(a):
    return np.reshape(np.asarray(a, dtype=float), -1, order="F")


def rel_err(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape, (a.shape, b.shape)
    scale = max(np.max(np.abs(a), initial=0.0), np.max(np.abs(b), initial=0.0), 1e-12)
    return float(np.max(np.abs(a - b), initial=0.0) / scale)


def unvec(v, shape):
    return v.reshape(shape, order="F") if shape else float(v[0])


def fd_jacobian(F, inputs, wrt, h=1e-6):
    """Central differences of F (any NumPy callable of the inputs), column-major vec."""
    x0 = np.asarray(inputs[wrt], dtype=float)
    flat = vec(x0)
    cols = []
    for j in range(flat.size):
        step = h * max(1.0, abs(flat[j]))
        up, dn = flat.copy(), flat.copy()
        up[j] += step
        dn[j] -= step
        fp = F(dict(inputs, **{wrt: unvec(up, x0.shape)}))
        fm = F(dict(inputs, **{wrt: unvec(dn, x0.shape)}))
        cols.append((vec(fp) - vec(fm)) / (2 * step))
    return np.stack(cols, axis=1)


def fd_hessian(f, inputs, wrt_i, wrt_j=None, h=1e-4):
    """Second central differences of the scalar f: entry (a, b) of the block (Wi, Wj)."""
    wrt_j = wrt_j or wrt_i
    xi0, xj0 = np.asarray(inputs[wrt_i], float), np.asarray(inputs[wrt_j], float)
    fi, fj = vec(xi0), vec(xj0)
    H = np.empty((fi.size, fj.size))

    def at(da, db):
        args = dict(inputs)
        if wrt_i == wrt_j:
            args[wrt_i] = unvec(fi + da + db, xi0.shape)
        else:
            args[wrt_i] = unvec(fi + da, xi0.shape)
            args[wrt_j] = unvec(fj + db, xj0.shape)
        return f(args)

    for a in range(fi.size):
        for b in range(fj.size):
            ea, eb = np.zeros(fi.size), np.zeros(fj.size)
            ea[a], eb[b] = h, h
            H[a, b] = (at(ea, eb) - at(ea, -eb) - at(-ea, eb) + at(-ea, -eb)) / (4 * h * h)
    return H


def _fn(case):
    return lambda a: np_eval(case["f"], a)


def _api(case):
    fn = matcalc.hessian if case["kind"] == "hessian" else matcalc.jacobian
    return fn(case["expr"], wrt=case["wrt"], shapes=case["shapes"])


# ---------------------------------------------------------------- the public corpus

@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_api_dense_matches_reference_and_finite_differences(case):
    r = _api(case)
    w = case["wrt"]
    for seed in (0, 1):
        inputs = case_inputs(case, seed)
        M = r.matrix(**inputs)
        want = np.asarray(np_eval(case["reference"], inputs), dtype=float)
        assert M.shape == want.shape
        assert rel_err(M, want) < 1e-9, (r.text, r.kron, case["reference"])
        if case["kind"] == "hessian":
            fd = fd_hessian(_fn(case), inputs, w)
            assert rel_err(M, fd) < 1e-5
            assert rel_err(M, M.T) < 1e-12
        else:
            fd = fd_jacobian(_fn(case), inputs, w)
            assert rel_err(M, fd) < 1e-6


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_api_products_and_check(case):
    r = _api(case)
    inputs = case_inputs(case, 2)
    M = np.asarray(np_eval(case["reference"], inputs), dtype=float)
    rng = np.random.default_rng(5)
    wshape = np.shape(inputs[case["wrt"]])
    V = rng.standard_normal(M.shape[1])
    if case["kind"] == "hessian":
        got = r.hvp(unvec(V, wshape), **inputs)
        assert np.shape(got) == wshape
        assert rel_err(vec(got), M @ V) < 1e-10
    else:
        got = r.jvp(unvec(V, wshape), **inputs)
        Fshape = np.shape(np_eval(case["f"], inputs))
        assert np.shape(got) == Fshape
        assert rel_err(vec(got), M @ V) < 1e-10
        G = rng.standard_normal(M.shape[0])
        back = r.vjp(unvec(G, Fshape), **inputs)
        assert np.shape(back) == wshape
        assert rel_err(vec(back), M.T @ G) < 1e-10
    report = r.check()
    assert report.ok, str(report)
    assert report.entries_checked > 0


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "matcalc", *args], capture_output=True, text=True,
                          timeout=120)


def _shape_args(shapes):
    out = []
    for name, shape in shapes.items():
        out += ["--shape", f"{name}=" + (",".join(map(str, shape)) if shape else "scalar")]
    return out


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cli_json(case):
    r = _cli(case["kind"], case["expr"], "--wrt", case["wrt"], *_shape_args(case["shapes"]),
             "--json", "--check", "--kron")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1
    out = json.loads(lines[0])
    for key in ("wrt", case["kind"], "latex", "shape", "matrix_shape", "kron", "numpy_source", "steps", "check"):
        assert key in out, key
    assert "gradient" not in out
    assert out["wrt"] == case["wrt"]
    assert tuple(out["shape"]) == tuple(case["shapes"][case["wrt"]])
    assert out["check"]["ok"] is True
    # the module is standalone: its dense function computes the reference
    namespace = {}
    exec(compile(out["numpy_source"], "<emitted>", "exec"), namespace)  # noqa: S102 - our own output
    fn = namespace[f"{case['kind']}_{case['wrt']}"]
    inputs = case_inputs(case, seed=3)
    want = np.asarray(np_eval(case["reference"], inputs), dtype=float)
    assert rel_err(fn(**inputs), want) < 1e-9
    rows, cols = out["matrix_shape"]
    sizes = dict(SIZES)
    as_int = lambda s: int(np.prod([sizes[d] for d in str(s).split("*")])) if isinstance(s, str) else s  # noqa: E731
    assert (as_int(rows), as_int(cols)) == want.shape


# ---------------------------------------------------------------- the textbook forms

def test_vec_forms_of_the_classic_questions():
    assert matcalc.hessian("x.T@A@x", "x").kron == "A + A.T"
    ls = matcalc.hessian("norm2(X@W - Y)**2", "W", shapes={"X": ("n", "d"), "W": ("d", "m")})
    assert ls.kron == "kron(I_m, 2*X.T@X)"
    assert ls.text == "2*X.T@X@dW"
    ld = matcalc.hessian("logdet(X)", "X", shapes={"X": ("n", "n")})
    assert ld.kron == "-K_nn@kron(inv(X).T, inv(X))"
    axb = matcalc.jacobian("A@X@B", "X", shapes={"A": ("m", "n"), "X": ("n", "q"), "B": ("q", "p")})
    assert axb.kron == "kron(B.T, A)" and axb.text == "A@dX@B"
    logistic = matcalc.hessian("sum(softplus(X@w)) - y.T@X@w", "w")
    assert logistic.kron == "X.T@Diag(sigmoid(X@w)*(1 - sigmoid(X@w)))@X"
    sm = matcalc.jacobian("softmax(x)", "x")
    assert sm.kron == "Diag(softmax(x)) - softmax(x)@softmax(x).T"
    # the sizes on K and I never clash with a user's K or I
    k = matcalc.hessian("logdet(K)", "K", shapes={"K": ("q", "q")})
    assert k.kron == "-K_qq@kron(inv(K).T, inv(K))"
    # no vec form: None, and the dense matrix still comes (from the matrix-free product)
    d = matcalc.jacobian("diag(X)", "X", shapes={"X": ("n", "n")})
    assert d.kron is None and d.kron_latex is None
    X = np.arange(9.0).reshape(3, 3)
    want = np.zeros((3, 9))
    for i in range(3):
        want[i, i + 3 * i] = 1.0
    assert np.array_equal(d.matrix(X=X), want)


def test_vec_forms_match_their_dense_matrices_at_distinct_sizes():
    """Evaluate the printed .kron text with NumPy (kron, vec, K, I written out) and compare."""
    rng = np.random.default_rng(0)
    n, q, m, p = 4, 3, 5, 2

    def K(r, c):  # vec(Xᵀ) = K vec(X) for an r×c X
        P = np.zeros((r * c, r * c))
        for i in range(r):
            for j in range(c):
                P[j + c * i, i + r * j] = 1.0
        return P

    cases = [
        ("A@X@B", "X", {"A": ("m", "n"), "X": ("n", "q"), "B": ("q", "p")}, "jacobian"),
        ("X.T", "X", {"X": ("n", "q")}, "jacobian"),
        ("exp(W@x)", "W", {"W": ("m", "n"), "x": ("n",)}, "jacobian"),
        ("logdet(X)", "X", {"X": ("n", "n")}, "hessian"),
        ("tr(X.T@A@X)", "X", {"X": ("n", "q"), "A": ("n", "n")}, "hessian"),
    ]
    for expr, w, shapes, kind in cases:
        r = getattr(matcalc, kind)(expr, w, shapes=shapes)
        sizes = {"n": n, "q": q, "m": m, "p": p}
        inputs = {k: rng.standard_normal(tuple(sizes[d] for d in s)) for k, s in shapes.items()}
        if "logdet" in expr:
            inputs["X"] = 2 * np.eye(n) + rng.standard_normal((n, n)) / 3
        env = {"np": np, "kron": np.kron, "inv": np.linalg.inv, "exp": np.exp,
               "Diag": lambda v: np.diag(np.reshape(v, -1, order="F")),
               "vec": lambda a: np.reshape(a, (-1, 1), order="F"),
               "I_n": np.eye(n), "I_q": np.eye(q), "I_m": np.eye(m), "I_p": np.eye(p),
               "K_nq": K(n, q), "K_nn": K(n, n), **inputs}
        text = r.kron.replace(".T", ".T")
        got = eval(text, env)  # noqa: S307 - our own output, evaluated as the reader would
        np.testing.assert_allclose(got, r.matrix(**inputs), rtol=1e-10, atol=1e-12, err_msg=text)


@pytest.mark.parametrize("expr, wrt, shapes, kron, dense", [
    # Diag(l) times a column (or a row times Diag(l)) is an entrywise product: .kron was None
    ("Diag(x)@A@x", "x", {"x": ("n",), "A": ("n", "n")}, "Diag(A@x) + Diag(x)@A",
     lambda x, A, **_: np.diag(A @ x) + np.diag(x) @ A),
    ("x.T@A@Diag(x)", "x", {"x": ("n",), "A": ("n", "n")}, "Diag(x)@A.T + Diag(A.T@x)",
     lambda x, A, **_: np.diag(x) @ A.T + np.diag(A.T @ x)),
    ("Diag(W@x)@b", "x", {"W": ("n", "m"), "x": ("m",), "b": ("n",)}, "Diag(b)@W", lambda W, b, **_: np.diag(b) @ W),
])
def test_a_diagonal_matrix_of_the_variable_times_a_vector_has_a_vec_form(expr, wrt, shapes, kron, dense):
    J = matcalc.jacobian(expr, wrt, shapes=shapes)
    assert J.kron == kron
    rng = np.random.default_rng(17)
    sizes = {"n": 4, "m": 3}
    vals = {k: rng.standard_normal(tuple(sizes[d] for d in v)) for k, v in shapes.items()}
    np.testing.assert_allclose(J.matrix(**vals), dense(**vals), rtol=1e-12)


@pytest.mark.parametrize("kind, expr, kron, dense", [
    # vec(·) of a linear map is the same map (.kron was None)
    ("jacobian", "vec(A@X@B)", "kron(B.T, A)", lambda A, X, B: np.kron(B.T, A)),
    ("jacobian", "vec(X.T)", "K_nq", None),
    ("hessian", "vec(X).T@S@vec(X)", "S + S.T", lambda S, X: S + S.T),
])
def test_vec_forms_through_vec(kind, expr, kron, dense):
    shapes = {"A": ("m", "n"), "X": ("n", "q"), "B": ("q", "p"), "S": ("n*q", "n*q")}
    r = getattr(matcalc, kind)(expr, "X", shapes={k: v for k, v in shapes.items() if k in expr})
    assert r.kron == kron
    rng = np.random.default_rng(16)
    sizes = {"m": 5, "n": 4, "q": 3, "p": 2}
    size = lambda d: int(np.prod([sizes[f] for f in d.split("*")]))  # noqa: E731
    vals = {k: rng.standard_normal(tuple(size(d) for d in v)) for k, v in shapes.items() if k in expr}
    M = r.matrix(**vals)
    if dense is not None:
        np.testing.assert_allclose(M, dense(**vals), rtol=1e-12)
    else:  # K vec(X) = vec(Xᵀ)
        X = vals["X"]
        np.testing.assert_array_equal(M @ X.reshape(-1, order="F"), X.T.reshape(-1, order="F"))


@pytest.mark.parametrize("expr", ["sum(mean(X, 1)**2)", "sum(mean(X, 0)**2)", "sum(sum(X, 1)**2)"])
def test_vec_forms_with_matrices_of_ones_evaluate_to_the_dense_matrix(expr):
    # kron(2/size(X, 1)**2, I_n) lost its matrix of ones: it is kron(2*(1_q@1_q.T)/q**2, I_n)
    import re

    h = matcalc.hessian(expr, "X", shapes={"X": ("n", "q")})
    n, q = 4, 3
    X = np.random.default_rng(2).standard_normal((n, q))
    text = re.sub(r"1_([nq])", lambda m: f"np.ones(({ {'n': n, 'q': q}[m.group(1)] }, 1))", h.kron)
    env = {"np": np, "kron": np.kron, "I_n": np.eye(n), "I_q": np.eye(q), "size": lambda a, k: a.shape[k], "X": X}
    got = eval(text, env)  # noqa: S307 - our own output, evaluated as the reader would
    np.testing.assert_allclose(got, h.matrix(X=X), rtol=1e-12, err_msg=h.kron)


def test_texts_reparse_with_the_differential_as_a_symbol():
    """dF's text, read back with dW declared like W, is the same linear map: the gradient of
    G:L[dW] wrt dW is the VJP."""
    shapes = {"A": ("m", "n"), "X": ("n", "q"), "B": ("q", "p")}
    for expr in ("A@X@B", "exp(A@X)@B", "inv(X.T@X)"):
        sh = dict(shapes) if expr != "inv(X.T@X)" else {"X": ("n", "q")}
        j = matcalc.jacobian(expr, "X", shapes=sh)
        out_shape = {"A@X@B": ("m", "p"), "exp(A@X)@B": ("m", "p"), "inv(X.T@X)": ("q", "q")}[expr]
        d = matcalc.derive(f"G:({j.text})", wrt="dX", shapes={**sh, "dX": ("n", "q"), "G": out_shape})
        rng = np.random.default_rng(1)
        sizes = {"m": 5, "n": 4, "q": 3, "p": 2}
        inputs = {k: rng.standard_normal(tuple(sizes[x] for x in s)) for k, s in sh.items()}
        G = rng.standard_normal(tuple(sizes[x] for x in out_shape))
        dX = rng.standard_normal((4, 3))
        want = j.vjp(G, **inputs)
        args = {k: v for k, v in {**inputs, "G": G, "dX": dX}.items() if k in d.user_shapes}
        assert rel_err(d.function(**args), want) < 1e-10


# ---------------------------------------------------------------- products, symmetry, blocks

def test_hvp_vjp_and_symmetry_at_distinct_sizes():
    rng = np.random.default_rng(3)
    n, d = 7, 4
    h = matcalc.hessian("sum(softplus(X@w)) - y.T@X@w + 0.5*mu*w.T@w", "w",
                        shapes={"X": ("n", "d"), "mu": ()})
    X, w, y = rng.standard_normal((n, d)), rng.standard_normal(d), rng.integers(0, 2, n).astype(float)
    H = h.matrix(X=X, w=w, y=y, mu=0.3)
    s = 1 / (1 + np.exp(-X @ w))
    want = X.T @ np.diag(s * (1 - s)) @ X + 0.3 * np.eye(d)  # the closed form
    assert rel_err(H, want) < 1e-12
    U, V = rng.standard_normal(d), rng.standard_normal(d)
    hv, hu = h.hvp(V, X=X, w=w, y=y, mu=0.3), h.hvp(U, X=X, w=w, y=y, mu=0.3)
    assert abs(U @ hv - hu @ V) < 1e-12 * np.abs(H).max() * 10
    # the Jacobian's VJP is the gradient of G:F (torch's Y.backward(G))
    j = matcalc.jacobian("exp(X@W)", "X", shapes={"X": ("n", "d"), "W": ("d", "m")})
    g = matcalc.derive("G:exp(X@W)", "X", shapes={"X": ("n", "d"), "W": ("d", "m")})
    X, W, G = rng.standard_normal((n, d)), rng.standard_normal((d, 5)), rng.standard_normal((n, 5))
    assert rel_err(j.vjp(G, X=X, W=W), g.function(X=X, W=W, G=G)) < 1e-12


def test_tangent_and_cotangent_are_positional_so_V_and_G_are_free_names():
    rng = np.random.default_rng(4)
    h = matcalc.hessian("V:(W@W)", "W", shapes={"W": ("n", "n")})
    V, W, T = rng.standard_normal((4, 4)), rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    # λ = V:(W W): H[dW] = Vᵀ... check against the closed form dW:H[T] = V:(dW T + T dW)
    got = h.hvp(T, V=V, W=W)
    assert rel_err(got, V @ T.T + T.T @ V) < 1e-12
    j = matcalc.jacobian("G@x", "x")
    G, x, c = rng.standard_normal((3, 5)), rng.standard_normal(5), rng.standard_normal(3)
    assert rel_err(j.vjp(c, G=G, x=x), G.T @ c) < 1e-12
    assert rel_err(j.jvp(x, G=G, x=x), G @ x) < 1e-12


def test_scalar_variable_gives_a_1x1_matrix_and_a_float():
    h = matcalc.hessian("exp(alpha)*x:x", "alpha")
    x = np.array([1.0, 2.0, 3.0])
    M = h.matrix(alpha=0.5, x=x)
    assert M.shape == (1, 1) and abs(M[0, 0] - np.exp(0.5) * 14) < 1e-12
    v = h.hvp(2.0, alpha=0.5, x=x)
    assert isinstance(v, float) and abs(v - 2 * np.exp(0.5) * 14) < 1e-12


def test_blocks_of_a_list_of_variables():
    shapes = {"X": ("n", "d"), "W": ("d", "m"), "Y": ("n", "m")}
    blocks = matcalc.hessian("norm2(X@W - Y)**2", ["X", "W"], shapes=shapes)
    assert set(blocks) == {("X", "X"), ("X", "W"), ("W", "X"), ("W", "W")}
    rng = np.random.default_rng(6)
    inputs = {"X": rng.standard_normal((5, 3)), "W": rng.standard_normal((3, 4)),
              "Y": rng.standard_normal((5, 4))}
    f = lambda a: float(np.sum((a["X"] @ a["W"] - a["Y"]) ** 2))  # noqa: E731
    for (wi, wj), b in blocks.items():
        M = b.matrix(**inputs)
        assert M.shape == (inputs[wi].size, inputs[wj].size)
        assert rel_err(M, fd_hessian(f, inputs, wi, wj)) < 1e-5, (wi, wj, b.text)
    assert rel_err(blocks["X", "W"].matrix(**inputs), blocks["W", "X"].matrix(**inputs).T) < 1e-12


# ---------------------------------------------------------------- refusals and notes

def test_hessian_of_an_array_is_refused_pointing_to_jacobian():
    with pytest.raises(matcalc.ShapeError) as e:
        matcalc.hessian("exp(W@x)", "W")
    assert "jacobian" in str(e.value) and "^" in str(e.value)
    r = _cli("hessian", "exp(W@x)", "--wrt", "W")
    assert r.returncode == 2 and "jacobian" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(matcalc.DeriveError):
        matcalc.hessian("x:x", "y")
    with pytest.raises(matcalc.DeriveError, match="reserved"):
        matcalc.jacobian("dx*x", "x")
    # derive takes a symbol dW: its gradient never prints a differential, and its steps write
    # W's as d(W) (dλ = tr(dW@dW) was ambiguous)
    d = matcalc.derive("tr(W@dW)", "W", shapes={"dW": ("b", "a")})
    assert d.text == "dW.T" and any("tr(d(W)@dW)" in line for line in d.derivation_lines())
    r = _cli("derive", "tr(W@dW)", "--wrt", "W", "--shape", "dW=b,a", "--steps")
    assert r.returncode == 0 and "d(W)" in r.stdout and "Traceback" not in r.stderr
    r = _cli("jacobian", "A@x", "--wrt", "X")
    assert r.returncode == 2 and "did you mean x" in r.stderr


def test_jacobian_of_a_scalar_is_the_gradient_transposed_with_a_note():
    with pytest.warns(matcalc.NotationWarning, match="transpose of the"):
        j = matcalc.jacobian("x.T@A@x", "x")
    rng = np.random.default_rng(7)
    A, x = rng.standard_normal((4, 4)), rng.standard_normal(4)
    M = j.matrix(A=A, x=x)
    assert M.shape == (1, 4)
    assert rel_err(M[0], (A + A.T) @ x) < 1e-12
    assert j.shape_reason.startswith("J is 1×a: F is a scalar, one row;")  # was "one row per entry of F scalar"
    r = _cli("jacobian", "x.T@A@x", "--wrt", "x")
    assert r.returncode == 0 and "transpose" in r.stderr
    assert r.stderr.count("note:") == 1, r.stderr  # "matcalc: note: the expression …", once
    r = _cli("jacobian", "x.T@A@x", "--wrt", "x", "--json")
    assert json.loads(r.stdout)["notes"][0].startswith("the expression is a scalar")


def test_emitted_products_never_build_kron_or_K():
    for expr, w, kind in [("logdet(X)", "X", "hessian"), ("A@X@B", "X", "jacobian"),
                          ("X.T", "X", "jacobian"), ("norm2(X@W-Y)**2", "W", "hessian")]:
        r = getattr(matcalc, kind)(expr, w)
        src = r.numpy_source
        body = src[src.index(f"def {'hvp' if kind == 'hessian' else 'jvp'}_"):]
        body = body[:body.index("\n\n\n")]
        assert "kron" not in body and "_comm" not in body and "np.eye" not in body, body


def test_cli_text_steps_kron_latex_code():
    r = _cli("hessian", "norm2(X@W - Y)**2", "--wrt", "W", "--shape", "X=n,d", "--shape", "W=d,m",
             "--kron", "--steps", "--latex", "--code")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "H[dW] = 2*X.T@X@dW" in out
    assert "kron(I_m, 2*X.T@X)" in out
    assert "d²λ = " in out and "dW:2*X.T@X@dW" in out
    assert "def hvp_W(dW, /, *, X, W, Y):" in out and "def hessian_W(" in out
    r = _cli("jacobian", "softmax(x)", "--wrt", "x", "--kron")
    assert r.returncode == 0 and "Diag(softmax(x)) - softmax(x)@softmax(x).T" in r.stdout
    r = _cli("hessian", "G:(X@W)", "--wrt", "X", "--wrt", "W", "--json")
    objs = [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]
    assert [o["wrt"] for o in objs] == [["X", "X"], ["X", "W"], ["W", "X"], ["W", "W"]]  # (README: the pair)
    assert objs[0]["hessian"] == "0" and objs[1]["hessian"] == "G@dW.T"


def test_jupyter_display_and_steps():
    h = matcalc.hessian("logdet(X)", "X")
    md = h._repr_markdown_()
    assert md.startswith("$$H[") and "\\otimes" in md and "<details>" in md and "\\begin{aligned}" in md
    assert h._repr_latex_().startswith("$") and h._repr_latex_().endswith("$")
    lines = h.derivation_lines()
    assert lines[1].startswith("dλ = inv(X).T:dX")
    assert lines[2].startswith("d²λ = d(inv(X).T):dX")
    assert any("self-adjoint" in ln for ln in lines)
    j = matcalc.jacobian("A@X@B", "X")
    assert "\\otimes" in j._repr_markdown_() and j._repr_latex_().startswith("$\\mathrm{d}F")


def test_latex_of_hessians_and_jacobians_renders():
    """Results, vec forms, derivations and the Jupyter forms render in KaTeX (strict)."""
    from test_presentation import _katex

    found = _katex()
    if found is None:
        import os
        if os.environ.get("CI"):
            pytest.fail("KaTeX is not installed: .ci/run installs it with npm")
        pytest.skip("node with the katex package is not available (npm install katex)")
    node, script, env = found
    results = [matcalc.hessian("x.T@A@x", "x"), matcalc.hessian("logdet(X)", "X"),
               matcalc.hessian("norm2(X@W - Y)**2", "W"), matcalc.hessian("sum(softplus(X@w)) - y.T@X@w", "w"),
               matcalc.hessian("sum(X)*sum(X) + tr(X@X)", "X"), matcalc.jacobian("softmax(x)", "x"),
               matcalc.jacobian("A@X@B", "X"), matcalc.jacobian("X.T", "X"), matcalc.jacobian("exp(W@x)", "W"),
               matcalc.jacobian("diag(X)", "X"), matcalc.jacobian("sum(X)*X", "X"),
               *matcalc.hessian("norm2(X@W - Y)**2", ["X", "W"]).values()]
    texts = []
    for r in results:
        texts += [r.latex, r.steps_latex, r._repr_latex_().strip("$")]
        if r.kron_latex is not None:
            texts.append(r.kron_latex)
        texts += [part.split("$$")[0] for part in r._repr_markdown_().split("$$")[1::2]]
    r = subprocess.run([node, str(script)], input=json.dumps(texts), capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    errors = [(t, e) for t, e in zip(texts, json.loads(r.stdout)) if e]
    assert not errors, errors[:3]


def test_second_order_benchmark_runs_quick():
    """The benchmark script runs (tiny sizes, no frameworks); it reports timings, never tests them."""
    script = HERE.parent / "benchmarks" / "second_order.py"
    r = subprocess.run([sys.executable, str(script), "--quick", "--no-frameworks"], capture_output=True,
                       text=True, timeout=300, cwd=script.parent)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "## HVP / gradient" in r.stdout and "## Dense Hessians" in r.stdout and "`A + A.T`" in r.stdout


def test_closed_forms_with_scaled_identities_and_outer_products():
    rng = np.random.default_rng(8)
    x = rng.standard_normal(5)
    r = np.linalg.norm(x)
    h = matcalc.hessian("norm2(x)", "x")
    assert rel_err(h.matrix(x=x), np.eye(5) / r - np.outer(x, x) / r ** 3) < 1e-12
    h = matcalc.hessian("mu*x:x + sum(x)**2", "x", shapes={"mu": ()})
    assert rel_err(h.matrix(x=x, mu=0.7), 1.4 * np.eye(5) + 2 * np.ones((5, 5))) < 1e-12
    X = rng.standard_normal((4, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        j = matcalc.jacobian("sum(X)*X", "X")
    assert rel_err(j.matrix(X=X), X.sum() * np.eye(12) + np.outer(vec(X), np.ones(12))) < 1e-12
    j = matcalc.jacobian("alpha*X", "alpha")
    assert rel_err(j.matrix(alpha=2.0, X=X), vec(X)[:, None]) < 1e-12


def test_double_commutation_is_the_identity_of_its_size():
    """(dAᵀ)ᵀ-like terms: K_qp K_pq = I keeps its size (found by the soundness run)."""
    h = matcalc.hessian("norm2(A.T + A)", "A", shapes={"A": ("n", "n")})
    rng = np.random.default_rng(9)
    A = rng.standard_normal((4, 4))
    f = lambda a: float(np.linalg.norm(a["A"].T + a["A"]))  # noqa: E731
    assert rel_err(h.matrix(A=A), fd_hessian(f, {"A": A}, "A")) < 1e-5


GRADIENT_CASES = load_corpus()


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=[c["id"] for c in GRADIENT_CASES])
def test_hessian_of_every_gradient_case_is_the_derivative_of_its_reference_gradient(case):
    """The gradient corpus gives a second oracle: differences of each case's reference
    gradient (NumPy source) are the Hessian's columns."""
    h = matcalc.hessian(case["expr"], case["wrt"], shapes=case["shapes"])
    inputs = case_inputs(case, 1)
    H = h.matrix(**inputs)
    fd = fd_jacobian(lambda a: np_eval(case["reference"], a), inputs, case["wrt"])
    assert rel_err(H, fd) < 1e-5, (h.text, h.kron)
    assert np.max(np.abs(H - H.T), initial=0.0) <= 1e-9 * max(np.max(np.abs(H), initial=0.0), 1e-300)


def test_jacobian_of_a_vec_output():
    """vec(A@X) = (I ⊗ A) vec(X): the dense matrix, and vjp(G) = Aᵀ unvec(G), whose cotangent
    G has the product size a·c (it once reached the BLAS-thread choice as a keyword)."""
    rng = np.random.default_rng(21)
    A, X = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    G = rng.standard_normal(15)
    j = matcalc.jacobian("vec(A@X)", "X")
    assert rel_err(j.matrix(A=A, X=X), np.kron(np.eye(5), A)) < 1e-12
    assert rel_err(j.vjp(G, A=A, X=X), A.T @ G.reshape(3, 5, order="F")) < 1e-12
    assert j.check().ok
    r = _cli("jacobian", "vec(X@B)", "--wrt", "X", "--check")
    assert r.returncode == 0, r.stderr


def test_check_draws_a_tall_matrix_where_a_wide_one_makes_XtX_singular():
    """log det(XᵀX): X drawn 3×4 first (XᵀX singular: not finite), then 4×3; the gradient
    2X(XᵀX)⁻¹ and its Hessian are checked there, never a crash (the CLI exits 0)."""
    for result in (matcalc.derive("log(det(X.T@X))", "X"), matcalc.hessian("log(det(X.T@X))", "X"),
                   matcalc.derive("log(det(X'*X))", "X", syntax="matlab")):
        report = result.check()
        assert report.ok, str(report)
        assert report.sizes["a"] > report.sizes["b"]  # X is a×b, tall
    rng = np.random.default_rng(4)
    X = rng.standard_normal((5, 3))
    np.testing.assert_allclose(matcalc.derive("log(det(X.T@X))", "X").function(X=X),
                               2 * X @ np.linalg.inv(X.T @ X), rtol=1e-10)
    r = _cli("hessian", "log(det(X.T@X))", "--wrt", "X", "--check")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("expr,wrt,want", [
    # ‖Xᵀ1‖²: H = I_b ⊗ 2·11ᵀ (a matrix of twos printed as such, not as the number 2)
    ("sum(X@X.T)", "X", "kron(I_b, 2*1_a@1_a.T)"),
    ("sum(x)**2", "x", "(2*1_a@1_a.T)"),
    # Σ x_i² exp(α x_i) = xᵀ(exp(αx)∘x): the Hadamard product after @ in parentheses
    ("sum(exp(alpha*x))", "alpha", "x.T@(exp(alpha*x)*x)"),
    ("mean(X**2)", "X", "2/size(X)*I_ab"),
])
def test_vec_form_texts(expr, wrt, want):
    assert matcalc.hessian(expr, wrt).kron == want


def test_second_order_text_sizes_read_back():
    """mean(X**2): H[dX] = 2 dX/(ab), its sizes written size(X), as derive writes them."""
    h = matcalc.hessian("mean(X**2)", "X")
    assert "size(X)" in h.text and "size(a)" not in h.text
    rng = np.random.default_rng(5)
    X, V = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    d = matcalc.derive(f"({h.text}):Z", "Z", shapes={"X": ("a", "b"), "dX": ("a", "b"), "Z": ("a", "b")})
    np.testing.assert_allclose(d.function(X=X, dX=V, Z=V), 2 * V / 12, rtol=1e-12)


def test_a_map_too_large_to_write_out_defines_its_names():
    # over MAX_TREE nodes written out: the text names shared parts u1, u2, … and defines them;
    # read back with those definitions it gives the same H[V]
    import re
    import warnings

    expr = "det(3*I + 0.3*tanh(X@X/(2 + cos(X/(2 + cos(X))))))"
    h = matcalc.hessian(expr, "X", shapes={"X": ("n", "n")})
    used = set(re.findall(r"\bu\d+\b", h.text + " ".join(h.definitions.values())))
    assert used and used <= set(h.definitions)
    assert h.to_dict()["definitions"] == h.definitions
    steps = "\n".join(h.derivation_lines())
    defined = {line.split(" = ")[0] for line in h.derivation_lines() if re.match(r"u\d+ = ", line)}
    assert set(re.findall(r"\bu\d+\b", steps)) <= defined
    rng = np.random.default_rng(0)
    X, V = 0.3 * rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", matcalc.NotationWarning)
        back = matcalc.jacobian(h.text, "dX", shapes={"X": ("n", "n"), "dX": ("n", "n")},
                                definitions=h.definitions)
    assert np.allclose(back.value_function(X=X, dX=V), h.hvp(V, X=X), rtol=1e-12, atol=1e-12)


def test_a_deep_nest_has_no_vec_form_and_its_hessian_is_right():
    # sum(σ(A@σ(A@…σ(A@x)))) with A in every layer: the map is too large to write out, so it has
    # no Kronecker form (collecting one took about L⁴: 10 s at 20 layers); the matrix is still
    # the derivative of the gradient, taken here by central differences of a NumPy backprop
    layers = 12
    expr = "x"
    for _ in range(layers):
        expr = f"sigmoid(A@{expr})"
    h = matcalc.hessian(f"sum({expr})", "A", shapes={"A": ("n", "n"), "x": ("n",)})
    assert h.kron is None and h.kron_latex is None and h.to_dict()["kron"] is None

    def grad(A, x):
        zs = [x]
        for _ in range(layers):
            zs.append(1 / (1 + np.exp(-A @ zs[-1])))
        g, G = np.ones_like(x), np.zeros_like(A)
        for k in range(layers, 0, -1):
            g = g * zs[k] * (1 - zs[k])
            G += np.outer(g, zs[k - 1])
            g = A.T @ g
        return G

    rng = np.random.default_rng(3)
    A, x = rng.standard_normal((3, 3)), rng.standard_normal(3)
    eps, cols = 1e-6, []
    for j in range(9):
        E = np.zeros(9)
        E[j] = eps
        E = E.reshape((3, 3), order="F")
        cols.append(((grad(A + E, x) - grad(A - E, x)) / (2 * eps)).reshape(-1, order="F"))
    np.testing.assert_allclose(h.matrix(A=A, x=x), np.array(cols).T, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("expr", ["log(1 + sum(x)**2)", "1/(1 + sum(x)**2)", "exp(-sum(x))/(1 + sum(x))"])
def test_a_multiple_of_a_matrix_of_ones_keeps_its_ones_in_the_text(expr):
    # H = c 1 1ᵀ: the text said c@dx (a scalar times dx, refused on reading) for c*(1@(1.T@dx))
    import warnings

    h = matcalc.hessian(expr, "x", shapes={"x": ("n",)})
    rng = np.random.default_rng(2)
    x, V = 0.3 * rng.standard_normal(4), rng.standard_normal(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", matcalc.NotationWarning)
        back = matcalc.jacobian(h.text, "dx", shapes={"x": ("n",), "dx": ("n",)})
    got = back.value_function(x=x, dx=V)
    s = np.sum(x)
    f = {"log(1 + sum(x)**2)": lambda t: np.log(1 + t ** 2), "1/(1 + sum(x)**2)": lambda t: 1 / (1 + t ** 2),
         "exp(-sum(x))/(1 + sum(x))": lambda t: np.exp(-t) / (1 + t)}[expr]
    eps = 1e-4  # H[V] = f''(sum x) sum(V) 1, f'' by central differences
    f2 = (f(s + eps) - 2 * f(s) + f(s - eps)) / eps ** 2
    assert np.allclose(got, f2 * np.sum(V) * np.ones(4), rtol=1e-5)


@pytest.mark.parametrize("fn,expr", [(matcalc.hessian, "sum(exp(z))"), (matcalc.jacobian, "exp(z)")])
def test_wrt_a_definition_takes_its_value(fn, expr):
    m = fn(expr, wrt="z", definitions={"z": "W@x"})  # (its inputs held fixed: the functions take z)
    z = np.array([0.3, -1.0, 2.0])
    np.testing.assert_allclose(m.matrix(z=z), np.diag(np.exp(z)), rtol=1e-14)
    with pytest.raises(TypeError, match="W"):
        m.matrix(z=z, W=np.eye(3), x=z)


def test_the_dense_hessian_of_a_long_product_compiles():
    # tr(X⁶⁰): 3600 Kronecker terms, summed in one expression that Python's compiler refused
    # (RecursionError); H[V] = Σ_{i+j+l=58} … checked against the directional second difference
    e = "tr(" + "@".join(["X"] * 60) + ")"
    h = matcalc.hessian(e, "X", shapes={"X": ("n", "n")})
    rng = np.random.default_rng(3)
    X, V = 0.25 * rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    M = h.matrix(X=X)
    f = lambda t: np.trace(np.linalg.matrix_power(X + t * V, 60))  # noqa: E731
    eps = 1e-3
    second = (f(eps) - 2 * f(0.0) + f(-eps)) / eps ** 2
    v = V.reshape(-1, order="F")
    assert np.isclose(v @ M @ v, second, rtol=1e-4)
    assert np.allclose(M @ v, h.hvp(V, X=X).reshape(-1, order="F"))


def test_products_take_rows_squeezed_and_one_by_one_arguments_as_given():
    # a row (1, m) given 1-D raised KeyError: 'm'; a (1, 1) given as such came back a float
    h = matcalc.hessian("x:x", "x", shapes={"x": (1, "m")})
    assert np.array_equal(h.hvp(np.ones(3), x=np.ones(3)), 2 * np.ones(3))
    assert np.array_equal(h.hvp(np.ones((1, 3)), x=np.ones((1, 3))), 2 * np.ones((1, 3)))
    h = matcalc.hessian("sum(X)**2", "X", shapes={"X": (1, 1)})  # H = 2
    got = h.hvp(np.full((1, 1), 1.5), X=np.full((1, 1), 2.0))
    assert isinstance(got, np.ndarray) and got.shape == (1, 1) and got[0, 0] == 3.0
    assert h.hvp(1.5, X=2.0) == 3.0


def test_a_hessian_check_needs_lambda_finite_too():
    # log(-exp(x)) is NaN everywhere, its gradient 1 is finite: the check said ok
    report = matcalc.hessian("sum(log(-exp(x)))", "x").check()
    assert not report.ok and report.entries_checked == 0


def test_the_hessians_scalar_hint_skips_the_wrt():
    with pytest.raises(matcalc.ShapeError) as e:
        matcalc.hessian("alpha*x", "x")
    assert "x is a vector by the spelling" not in str(e.value)


def test_diagonal_terms_merge():
    # Diag(x) - Diag(y) reads Diag(x - y), and M Diag(h) 1 = M h: was sum(((Diag(x) - Diag(y))@A).T, 1),
    # then sum(A.T@Diag(x - y), 1)
    d = matcalc.derive("sum((Diag(x) - Diag(y))@A@z)", "z")
    assert d.text == "A.T@(x - y)"
    rng = np.random.default_rng(14)
    x, y, z, A = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal(3), rng.standard_normal((4, 3))
    np.testing.assert_allclose(d.function(x=x, y=y, z=z, A=A), A.T @ (x - y), rtol=1e-12)


def test_vec_forms_at_declared_numeric_sizes():
    # the identity folds against 12 = 4·3 (it read (S + S.T)@I_43); numbers print as fractions
    h = matcalc.hessian("vec(X).T@S@vec(X)", "X", shapes={"X": (4, 3), "S": (12, 12)})
    assert h.kron == "S + S.T"
    j = matcalc.jacobian("X - mean(X,1)", "X", shapes={"X": (4, 3)})
    assert j.kron == "I_(12) + kron(-1/3*1_3@1_3.T, I_4)"  # was I_43 + kron(-0.3333333333333333*…)
    np.testing.assert_allclose(j.matrix(X=np.zeros((4, 3))), np.eye(12) + np.kron(-np.ones((3, 3)) / 3, np.eye(4)))


def test_a_vector_F_takes_the_orientation_of_arguments_declared_as_columns():
    # x declared (n, 1): A@x is (m, 1) and xᵀA is (1, m), as NumPy computes them from (n, 1)
    # arrays; the value, J[V] and Jᵀ[G] agree (the value and J[V] came back 1-D)
    rng = np.random.default_rng(8)
    A, x, V = rng.standard_normal((3, 4)), rng.standard_normal((4, 1)), rng.standard_normal((4, 1))
    shapes = {"A": ("m", "n"), "x": ("n", 1)}
    j = matcalc.jacobian("exp(A@x)", "x", shapes=shapes)
    E = np.exp(A @ x)
    F, JV = j.value_function(A=A, x=x), j.jvp(V, A=A, x=x)
    assert F.shape == JV.shape == (3, 1)
    np.testing.assert_allclose(F, E)
    np.testing.assert_allclose(JV, E * (A @ V))
    G = rng.standard_normal((3, 1))
    back = j.vjp(G, A=A, x=x)
    assert back.shape == (4, 1)
    np.testing.assert_allclose(back, A.T @ (E * G))
    # given as 1-D arrays, returned as 1-D arrays
    assert j.value_function(A=A, x=x[:, 0]).shape == j.jvp(V[:, 0], A=A, x=x[:, 0]).shape == (3,)
    row = matcalc.jacobian("x.T@B", "x", shapes={"B": ("n", "m"), "x": ("n", 1)})
    B = rng.standard_normal((4, 3))
    assert row.value_function(B=B, x=x).shape == row.jvp(V, B=B, x=x).shape == (1, 3)
    np.testing.assert_allclose(row.jvp(V, B=B, x=x), V.T @ B)


def test_a_row_through_a_commutation_keeps_it_where_the_row_is_a_vec():
    # vec(C)ᵀK = vec(Cᵀ)ᵀ only for C of K's output shape: for C = vec(Aᵀ)vec(Aᵀ)ᵀ's row the K
    # was dropped, and the dense matrices permuted (rel. error 0.3)
    A = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]) / 4
    vecF = lambda M: M.reshape(-1, order="F")  # noqa: E731
    K = np.stack([vecF(E.reshape(3, 2, order="F").T) for E in np.eye(6)], 1)  # K vec(A) = vec(Aᵀ)
    assert np.allclose(K @ vecF(A), vecF(A.T))
    s = np.exp(K @ vecF(A)) / np.exp(K @ vecF(A)).sum()
    j = matcalc.jacobian("softmax(vec(A.T))", "A")
    np.testing.assert_allclose(j.matrix(A=A), (np.diag(s) - np.outer(s, s)) @ K, rtol=1e-12, atol=1e-15)
    n, v = np.linalg.norm(A), vecF(A)
    h = matcalc.hessian("norm2(vec(A.T))", "A")  # ‖A‖: I/n − vec(A)vec(A)ᵀ/n³
    np.testing.assert_allclose(h.matrix(A=A), np.eye(6) / n - np.outer(v, v) / n ** 3, rtol=1e-12, atol=1e-15)
    assert h.kron.endswith("@K_ab")


def test_the_dense_hessian_in_a_scalar_over_matrix_expressions():
    # a row times a column folds to their 1×1 block, vec(C)ᵀvec(c) = C:c; written Cᵀc for
    # matrices it was a 4×4 product, and .matrix raised (cannot reshape 16 into (1, 1))
    rng = np.random.default_rng(21)
    A, r = rng.standard_normal((3, 4)), rng.standard_normal((1, 5))
    X = 2 * np.eye(3) + rng.standard_normal((3, 3)) / 3
    s = 0.4
    cases = [("sum(exp(sigma*A))", None, dict(A=A), np.sum(A ** 2 * np.exp(s * A))),
             ("logdet(X + sigma*I)", None, dict(X=X),
              -np.trace(np.linalg.matrix_power(np.linalg.inv(X + s * np.eye(3)), 2))),
             ("sum(exp(sigma*r))", {"r": (1, "n")}, dict(r=r), np.sum(r ** 2 * np.exp(s * r)))]
    for expr, shapes, vals, want in cases:
        h = matcalc.hessian(expr, "sigma", shapes=shapes)
        np.testing.assert_allclose(h.matrix(sigma=s, **vals), [[want]], rtol=1e-10)
        np.testing.assert_allclose(h.hvp(1.0, sigma=s, **vals), want, rtol=1e-10)


def test_a_minus_over_a_sum_of_negative_terms_is_taken_in():
    # -(dσ∘(−P − Q)):B reads dσ∘(P + Q):B; d²/dσ² tr(M⁻¹) = 2 tr(M⁻¹BM⁻¹BM⁻¹), M = A + σB
    h = matcalc.hessian("tr(inv(A + sigma*B))", "sigma", shapes={"A": ("n", "n"), "B": ("n", "n")})
    assert "-" not in h.text.replace("-2", ""), h.text
    rng = np.random.default_rng(22)
    A, B = 3 * np.eye(4) + rng.standard_normal((4, 4)) / 3, rng.standard_normal((4, 4))
    Mi = np.linalg.inv(A + 0.3 * B)
    np.testing.assert_allclose(h.matrix(sigma=0.3, A=A, B=B), [[2 * np.trace(Mi @ B @ Mi @ B @ Mi)]], rtol=1e-10)


def test_a_hessian_text_with_shared_parts_reads_back_with_its_definitions():
    # W five times through tanh: the text names its shared parts u1, u2, … (.definitions)
    h = matcalc.hessian("t:tanh(W@tanh(W@tanh(W@tanh(W@tanh(W@x)))))", "W", shapes={"W": ("a", "a")})
    assert h.definitions
    defs = {k: v.replace("dW", "DD") for k, v in h.definitions.items()}
    back = matcalc.derive("CC:(" + h.text.replace("dW", "DD") + ")", "CC", definitions=defs,
                          shapes={"W": ("a", "a"), "DD": ("a", "a"), "CC": ("a", "a")})
    rng = np.random.default_rng(12)
    W, x, t, V = 0.5 * rng.standard_normal((3, 3)), rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal((3, 3))

    def lam(W):
        h = x
        for _ in range(5):
            h = np.tanh(W @ h)
        return t @ h

    HV = back.function(W=W, x=x, t=t, DD=V, CC=V)
    eps = 1e-4  # V:H[V] by a second difference of λ, an independent oracle
    second = (lam(W + eps * V) - 2 * lam(W) + lam(W - eps * V)) / eps ** 2
    assert np.sum(V * HV) == pytest.approx(second, rel=1e-5, abs=1e-7)
    np.testing.assert_allclose(HV, h.hvp(V, W=W, x=x, t=t), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("kind, expr, wrt, measurable", [
    # the floor 1e-4·max(1, |f|) let a 1% error of a small map pass, and any map of 1e10 + W@x
    ("hessian", "1e-8*sum(X*X)", "X", True),
    ("jacobian", "1e-8*softmax(W@x)", "W", True),
    # eps·1e10/h is 10⁻² at h = 1e-6, where the differences see nothing finer; at 1e-4, 1e-4
    ("jacobian", "1e10 + W@x", "W", True),
    ("hessian", "1e8*tr(A@X) + sum(X*X)", "X", True),
])
def test_a_wrong_second_order_map_never_passes(kind, expr, wrt, measurable):
    import numpy as np

    m = getattr(matcalc, kind)(expr, wrt)
    report = m.check()
    assert report.ok if measurable else str(report).startswith("check cannot be made"), str(report)
    for k in (1.01, -1.0):
        wrong = getattr(matcalc, kind)(expr, wrt)
        right = wrong.matrix
        wrong.__dict__["matrix"] = lambda _k=k, **kw: _k * np.asarray(right(**kw))
        assert not wrong.check().ok


@pytest.mark.parametrize("kind, expr, wrt", [
    ("hessian", "tr(A@X)", "X"),                     # λ linear in X: H = 0 ("cannot be made" for a moment)
    ("hessian", "norm1(softmax(y))", "y"),           # λ ≡ 1: products of rounding 1e-17 (FAILED at 5e282)
    ("jacobian", "exp(Y) + 0*X", "X"),
])
def test_a_zero_map_passes_and_a_nonzero_product_of_it_fails(kind, expr, wrt):
    import numpy as np

    m = getattr(matcalc, kind)(expr, wrt)
    assert m.check().ok, str(m.check())
    wrong = getattr(matcalc, kind)(expr, wrt)
    product = "hvp" if kind == "hessian" else "jvp"
    right = getattr(wrong, product)
    wrong.__dict__[product] = lambda V, **kw: np.asarray(right(V, **kw)) + 1e-3
    assert not wrong.check().ok


def test_a_check_report_holds_plain_python_values():
    # a Hessian that is 0 by cancellation checked with NumPy scalars in its report: --json stopped
    # with "internal error (TypeError: Object of type bool is not JSON serializable)"
    import json
    import subprocess
    import sys

    expr = "sum(softmax(alpha*z)) - sum(X + k + W1)"  # (0 by cancellation: softmax sums to 1)
    report = matcalc.hessian(expr, "alpha").check()
    assert type(report.ok) is bool and type(report.max_rel_error) is float
    r = subprocess.run([sys.executable, "-m", "matcalc", "hessian", expr, "--wrt", "alpha", "--check", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout.splitlines()[0])["check"]["ok"] is True, r.stderr


def test_a_map_zero_by_cancellation_is_held_to_the_rounding_of_its_terms():
    # the Hessian of |α|·‖z‖·n in α is 0 by cancellation of terms of about ‖z‖²/|α|: its products
    # were held to 1e-10 and the check could not be made (it passed before that rule)
    for seed in range(3):
        report = matcalc.hessian("sum(norm2(alpha*z.T) - (X + k + W1))", "alpha").check(seed=seed)
        assert report.ok, str(report)


def test_a_side_of_the_dense_matrix_that_is_a_product_is_bracketed():
    # "J is a×a*b" read as (a×a)*b
    j = matcalc.jacobian("exp(W@x)", "W")
    assert j.derivation_lines()[-1].startswith("J is a×(a*b): ") and "matrix a×(a*b)" in repr(j)
    assert "(a*b)×(a*b)" in matcalc.hessian("sum(exp(W@x))", "W").derivation_lines()[-1]


def test_a_hessians_gradient_function_keeps_a_column_and_function_points_at_the_maps_functions():
    h = matcalc.hessian("sum(log(1 + exp(X@w)))", "w")
    rng = np.random.default_rng(2)
    X, w = rng.standard_normal((5, 3)), rng.standard_normal(3)
    g = X.T @ (1 / (1 + np.exp(-X @ w)))
    assert h.gradient_function(X=X, w=w[:, None]).shape == (3, 1)  # (as derive's function; was (3,))
    np.testing.assert_allclose(h.gradient_function(X=X, w=w), g, rtol=1e-13)
    with pytest.raises(AttributeError, match=r"a Hessian has no \.function .*\.hvp\(V, \*\*values\)"):
        h.function
    with pytest.raises(AttributeError, match=r"a Jacobian has no \.function .*\.jvp\(V, \*\*values\)"):
        matcalc.jacobian("exp(x)", "x").function


def test_a_direction_given_by_keyword_is_refused_with_how_to_give_it():
    # it was Python's bare "missing 1 required positional argument: 'V'"
    h = matcalc.hessian("sum(exp(x))", "x")
    J = matcalc.jacobian("exp(x)", "x")
    for call, words in [(lambda: h.hvp(V=np.ones(3), x=np.ones(3)), ".hvp(V, **values)"),
                        (lambda: J.jvp(x=np.ones(3)), ".jvp(V, **values)"),
                        (lambda: J.vjp(G=np.ones(3), x=np.ones(3)), ".vjp(G, **values)")]:
        with pytest.raises(TypeError, match=re.escape(words)):
            call()


def test_values_at_for_the_inputs_of_a_definition_say_the_hessian_takes_the_definition_s_value():
    # "--at names W, x, which is not a symbol of the expression; its symbols are z"
    r = _cli("hessian", "l*l", "--wrt", "z", "--let", "z=W@x", "--let", "l=logsumexp(z)", "--shape", "W=3,2",
             "--at", "W=[[1,0],[0,1],[1,1]]", "--at", "x=[0.5,-1]")
    assert r.returncode == 2 and "W, x, which are not symbols" in r.stderr
    assert "the Hessian in z, a definition, takes its value: --at z=..." in r.stderr
    # a symbol whose name holds the definition's (zeta beside z) does not hide it
    r = _cli("hessian", "zeta*l*l", "--wrt", "z", "--let", "z=W@x", "--let", "l=logsumexp(z)", "--shape", "W=3,2",
             "--at", "W=[[1,0],[0,1],[1,1]]", "--at", "x=[0.5,-1]", "--at", "zeta=2")
    assert r.returncode == 2 and "the Hessian in z, a definition, takes its value: --at z=..." in r.stderr
    # a wrt that is a symbol of the text gets no such hint
    r = _cli("hessian", "sum(exp(z))", "--wrt", "z", "--at", "q=1", "--at", "z=[1,2]")
    assert r.returncode == 2 and "a definition" not in r.stderr


def test_attention_with_one_key_declared_by_name_has_zero_query_gradient():
    # a key count declared 1 is refused (softmax over an axis of length 1); declared by name, k = 1
    # at the call gives softmax = 1: the gradient in Q is 0 and in V the column sums of G
    shapes = {"Q": ("n", "e"), "K": ("k", "e"), "V": ("k", "h"), "G": ("n", "h")}
    rng = np.random.default_rng(0)
    Q, K, V, G = (rng.standard_normal(s) for s in [(4, 3), (1, 3), (1, 2), (4, 2)])
    expr = "G:(softmax(Q@K.T/sqrt(2), 1)@V)"
    np.testing.assert_allclose(matcalc.derive(expr, "Q", shapes=shapes).function(Q=Q, K=K, V=V, G=G), 0.0, atol=1e-15)
    np.testing.assert_allclose(matcalc.derive(expr, "V", shapes=shapes).function(Q=Q, K=K, V=V, G=G),
                               G.sum(0, keepdims=True), rtol=1e-13)


def test_a_sum_of_negative_terms_takes_its_sign_outside():
    # mixed blocks printed -dalpha*(-A - B) and -tr(-A - B)
    h = matcalc.hessian("u.T@inv(X + alpha*I)@v", ["X", "alpha"])
    assert not any("(-" in h[k].text for k in h), [h[k].text for k in h]
    rng = np.random.default_rng(4)
    X, u, v, alpha = 3 * np.eye(3) + rng.standard_normal((3, 3)), rng.standard_normal(3), rng.standard_normal(3), 0.4
    g = matcalc.derive("u.T@inv(X + alpha*I)@v", "X").function
    step = 1e-6  # d/dalpha of the gradient in X, against the (X, alpha) block applied to dalpha = 1
    fd = (g(X=X, u=u, v=v, alpha=alpha + step) - g(X=X, u=u, v=v, alpha=alpha - step)) / (2 * step)
    np.testing.assert_allclose(h["X", "alpha"].hvp(1.0, X=X, u=u, v=v, alpha=alpha), fd, rtol=1e-6, atol=1e-9)


def test_gates_that_are_never_both_1_make_0():
    # step(u)*(1 - step(u)) and step(u)*step(-u) are 0 (step(0) = 0): the Hessian of
    # sum(maximum(A@x, B@x)**2) was 177 characters of such products
    h = matcalc.hessian("sum(maximum(A@x, B@x)**2)", "x")
    assert h.text == "2*(B.T@Diag(1 - step((A - B)@x))@B + A.T@Diag(step((A - B)@x))@A)@dx"
    rng = np.random.default_rng(0)
    A, B, x = rng.standard_normal((4, 3)), rng.standard_normal((4, 3)), rng.standard_normal(3)
    s = (A @ x > B @ x) * 1.0
    np.testing.assert_allclose(h.matrix(A=A, B=B, x=x), 2 * (B.T @ np.diag(1 - s) @ B + A.T @ np.diag(s) @ A),
                               rtol=1e-13)
