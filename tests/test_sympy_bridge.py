"""SymPy in and out: to_sympy evaluates to the NumPy gradient's numbers, derive() takes
SymPy matrix expressions, check(exact=True) verifies entry by entry and names a wrong one."""
import os
import subprocess
import sys

import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import matcalc
from conftest import case_inputs, load_corpus
from support.exprgen import expressions

CASES = load_corpus()
SIZES = {"a": 3, "b": 4, "c": 2, "d": 5, "e": 6, "n": 3, "m": 4, "k": 2, "p": 5}


def substitute(expr, inputs, user_shapes):
    """The SymPy expression with dimensions and symbols replaced by concrete values."""
    dims = {sp.Symbol(d, integer=True, positive=True): sp.Integer(SIZES[d])
            for shape in user_shapes.values() for d in shape if isinstance(d, str)}
    expr = expr.xreplace(dims)
    subs = {}
    for name, v in inputs.items():
        shape = user_shapes[name]
        if not shape:
            subs[sp.Symbol(name, real=True)] = sp.Float(v, 30)
            continue
        conc = np.asarray(v).reshape(len(v), -1) if len(shape) == 1 else np.asarray(v)
        r, c = conc.shape
        subs[sp.MatrixSymbol(name, r, c)] = sp.ImmutableMatrix(conc.tolist())
    out = expr.xreplace(subs).doit()
    if getattr(out, "is_Matrix", False):
        out = out.as_explicit() if hasattr(out, "as_explicit") else out
        return np.array(sp.N(sp.Matrix(out)).tolist(), dtype=float)
    return float(sp.N(out))


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_to_sympy_evaluates_to_the_same_numbers(case):
    d = matcalc.derive(case["expr"], wrt=case["wrt"], shapes=case["shapes"])
    g = d.to_sympy()
    inputs = case_inputs(case, 0, SIZES)
    want = np.asarray(d.function(**inputs), dtype=float)
    got = substitute(g, inputs, d.user_shapes)
    np.testing.assert_allclose(np.reshape(got, want.shape), want, rtol=1e-9, atol=1e-12)


def test_to_sympy_uses_sympy_matrix_nodes():
    g = matcalc.derive("G:exp(X@W)", wrt="X").to_sympy()
    assert g.has(sp.HadamardProduct)
    from sympy.matrices.expressions.applyfunc import ElementwiseApplyFunction
    assert g.has(ElementwiseApplyFunction)
    g = matcalc.derive("logdet(S) + tr(inv(S)@A)", wrt="S").to_sympy()
    assert g.has(sp.Inverse) and g.has(sp.Transpose)
    n = sp.Symbol("a", integer=True, positive=True)
    assert sp.MatrixSymbol("S", n, n) in g.free_symbols


def test_derive_from_sympy_trace():
    n, m = sp.symbols("n m", integer=True, positive=True)
    A, X, B = sp.MatrixSymbol("A", m, m), sp.MatrixSymbol("X", n, m), sp.MatrixSymbol("B", n, n)
    for wrt in (X, "X"):
        d = matcalc.derive(sp.Trace(A * X.T * B * X * A), wrt=wrt)
        assert d.shape == ("n", "m")
        assert d.check().ok
        rng = np.random.default_rng(1)
        a, x, b = rng.standard_normal((4, 4)), rng.standard_normal((3, 4)), rng.standard_normal((3, 3))
        # closed form: d tr(A Xᵀ B X A) = tr(A Aᵀ... ): ∂/∂X = B X A A + Bᵀ X Aᵀ Aᵀ
        want = b @ x @ a @ a + b.T @ x @ a.T @ a.T
        np.testing.assert_allclose(d.function(A=a, X=x, B=b), want, rtol=1e-10)


def test_derive_from_sympy_logdet_where_sympy_says_zero():
    n = sp.Symbol("n", integer=True, positive=True)
    X = sp.MatrixSymbol("X", n, n)
    expr = sp.log(sp.Determinant(X))
    d = matcalc.derive(expr, wrt=X)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 4)) + 4 * np.eye(4)
    np.testing.assert_allclose(d.function(X=x), np.linalg.inv(x).T, rtol=1e-10)
    assert d.check(exact=True).ok


def test_derive_from_sympy_vectors_scalars_and_elementwise():
    n, m = sp.symbols("n m", integer=True, positive=True)
    W, x, y = sp.MatrixSymbol("W", m, n), sp.MatrixSymbol("x", n, 1), sp.MatrixSymbol("y", m, 1)
    a = sp.Symbol("a")
    r = W * x - y
    expr = a * sp.Trace(r.T * r) + sp.Trace(sp.OneMatrix(1, m) * (W * x).applyfunc(sp.tanh))
    d = matcalc.derive(expr, wrt=[x, W, "a"])
    assert d["x"].shape == ("n",) and d["a"].shape == () and d["W"].shape == ("m", "n")
    rng = np.random.default_rng(3)
    w, xv, yv = rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal(4)
    z = w @ xv
    want_x = 2 * 0.5 * (z - yv) @ w + (1 - np.tanh(z) ** 2) @ w
    np.testing.assert_allclose(d["x"].function(W=w, x=xv, y=yv, a=0.5), want_x, rtol=1e-10)
    assert d["a"].function(W=w, x=xv, y=yv, a=0.5) == pytest.approx(np.sum((z - yv) ** 2))
    for v in d.values():
        assert v.check(exact=True).ok


def test_an_elementwise_lambda_of_any_body_and_to_sympy_read_back():
    # Lambda(t, tanh(t)**2), Lambda(t, a*t*exp(-t**2)): not one named function; and to_sympy's
    # own output, whose Lambdas nest (Lambda(_d, exp(tanh(_d)))), was refused
    n, m = sp.symbols("n m", integer=True, positive=True)
    X, w, y = sp.MatrixSymbol("X", n, m), sp.MatrixSymbol("w", m, 1), sp.MatrixSymbol("y", n, 1)
    a = sp.Symbol("a")
    rng = np.random.default_rng(9)
    Xv, wv, yv = rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal(4)
    z = Xv @ wv
    for body, dbody in [(lambda t: sp.tanh(t) ** 2, lambda z: 2 * np.tanh(z) * (1 - np.tanh(z) ** 2)),
                        (lambda t: a * t * sp.exp(-t ** 2), lambda z: 0.7 * (1 - 2 * z ** 2) * np.exp(-z ** 2)),
                        (lambda t: sp.log(1 + t ** 2), lambda z: 2 * z / (1 + z ** 2)),
                        # sqrt, Max and Heaviside of something other than t itself were read as
                        # sqrt(t), relu(t), step(t)
                        (lambda t: sp.sqrt(1 + t ** 2), lambda z: z / np.sqrt(1 + z ** 2)),
                        (lambda t: sp.Max(2 * t, 0), lambda z: 2.0 * (z > 0)),
                        (lambda t: sp.Max(t ** 2 - 0.1, 0), lambda z: 2 * z * (z ** 2 > 0.1)),
                        # Max and Min of other arguments, through relu (they were refused)
                        (lambda t: sp.Max(1, t), lambda z: 1.0 * (z > 1)),
                        (lambda t: sp.Min(0, t), lambda z: 1.0 * (z < 0)),
                        (lambda t: sp.Max(0, t, 1 - t), lambda z: np.where(z > 0.5, 1.0, -1.0)),
                        (lambda t: sp.Min(2 * t, t ** 2), lambda z: np.where(z ** 2 < 2 * z, 2 * z, 2.0))]:
        d = matcalc.derive(y.T * (X * w).applyfunc(body), wrt=w)
        vals = dict(X=Xv, w=wv, y=yv, **({"a": 0.7} if "a" in d.function.params else {}))
        np.testing.assert_allclose(d.function(**vals), Xv.T @ (yv * dbody(z)), rtol=1e-10)
    g = matcalc.derive("sum(exp(tanh(X@w)))", wrt="w", shapes={"X": ("n", "m"), "w": ("m",)}).to_sympy()
    back = matcalc.derive(w.T * g, wrt=w)  # λ = wᵀ Xᵀ (e^t ∘ (1 − t²)), t = tanh(Xw)

    def lam(wv):
        t = np.tanh(Xv @ wv)
        return wv @ Xv.T @ (np.exp(t) * (1 - t ** 2))

    h = 1e-6
    fd = [(lam(wv + h * e) - lam(wv - h * e)) / (2 * h) for e in np.eye(3)]
    np.testing.assert_allclose(back.function(X=Xv, w=wv), fd, rtol=1e-6)


def test_sympy_nodes_matcalc_cannot_represent_are_named():
    n = sp.Symbol("n", integer=True, positive=True)
    S = sp.MatrixSymbol("S", n, n)
    for expr, name in [(sp.Trace(sp.HadamardProduct(S, S).applyfunc(sp.Function("f"))), "f"),
                       (sp.Trace(S ** sp.Rational(1, 2)), "MatPow"),
                       (sp.Trace(S.applyfunc(sp.gamma)), "gamma")]:
        with pytest.raises(matcalc.MatcalcError, match=name):
            matcalc.derive(expr, wrt=S)
    d = matcalc.derive(sp.Trace(S.applyfunc(sp.atan)), wrt=S)  # a registry function: arctan
    assert d.text == "I/(S**2 + 1)" and d.check().ok  # tr: only the diagonal
    with pytest.raises(matcalc.MatcalcError):
        matcalc.derive(sp.Trace(S), wrt=3.5)


@pytest.mark.parametrize("case", [c for c in CASES if len({d for s in c["shapes"].values() for d in s}) <= 4][:12],
                         ids=lambda c: c["id"])
def test_exact_check_passes_on_the_corpus(case):
    d = matcalc.derive(case["expr"], wrt=case["wrt"], shapes=case["shapes"])
    report = d.check(exact=True)
    assert report.ok, str(report)
    assert all(v <= 4 for v in report.sizes.values())
    assert report.entries_checked == int(np.prod([report.sizes.get(x, x) for x in d.shape] or [1]))


def test_exact_check_names_the_wrong_entry():
    from matcalc import ir

    shapes = {"A": ("m", "n"), "X": ("n", "k"), "B": ("k", "m")}
    d = matcalc.derive("tr(A@X@B)", wrt="X", shapes=shapes)
    assert d.check(exact=True).ok
    X = d.symbols["X"]
    for wrong in (ir.add(d.gradient, ir.mul(X, X)),             # wrong everywhere
                  ir.mul(ir.const(1.5), d.gradient)):             # off by a factor
        bad = matcalc.derive("tr(A@X@B)", wrt="X", shapes=shapes)
        bad.gradient = wrong
        report = bad.check(exact=True)
        assert not report.ok and not report
        assert "X[0, 0]" in str(report) and "gradient gives" in str(report)
        assert report.details[0]["entry"] == "X[0, 0]"


def test_importing_matcalc_and_the_cli_imports_no_sympy_torch_or_jax():
    code = ("import sys, matcalc, matcalc.cli; matcalc.derive('G:exp(X@W)', wrt='X').function; "
            "print([m for m in ('sympy', 'torch', 'jax') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "matcalc", "derive", "G:exp(X@W)",
                          "--wrt", "X", "--code"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert out.returncode == 0
    imported = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line}
    assert not imported & {"sympy", "torch", "jax"}


def test_cli_exact_check():
    out = subprocess.run([sys.executable, "-m", "matcalc", "derive", "tr(A@X.T@B@X@A)", "--wrt", "X", "--exact"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert out.returncode == 0, out.stderr
    assert "exact check ok: 6 entries" in out.stdout  # X is b×a with a = 2, b = 3: six entries


def test_exact_check_sees_a_tiny_error_in_a_transcendental_entry():
    from matcalc import ir

    d = matcalc.derive("sum(exp(W@x)*sin(W@x))", wrt="W")
    assert d.check(exact=True).ok
    d.gradient = ir.mul(ir.const(1.0 + 1e-12), d.gradient)  # finite differences cannot see this
    report = d.check(exact=True)
    assert not report.ok and "W[0, 0]" in report.message


NO_SYMPY_FORM = ("kron", "vec", "unvec", "matrix_power")


@settings(max_examples=30, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(case=expressions(max_depth=3), seed=st.integers(0, 2**32 - 1))
def test_to_sympy_of_random_expressions_evaluates_to_the_numpy_numbers(case, seed):
    from matcalc.sympy_bridge import evaluate

    inputs = case.draw_inputs(np.random.default_rng(seed))
    w = case.wrt[0]
    d = matcalc.derive(case.expr, wrt=w, shapes=case.shapes)
    with np.errstate(all="ignore"):
        want = np.asarray(d.function(**inputs), dtype=float)
    if not np.all(np.isfinite(want)):
        return
    try:
        sym = d.to_sympy()
    except matcalc.MatcalcError as e:  # kron, vec, matrix_power
        assert "has no SymPy form" in str(e) and any(op in str(e) for op in NO_SYMPY_FORM), str(e)
        return
    got = evaluate(sym, inputs, d.user_shapes)
    np.testing.assert_allclose(np.reshape(got, want.shape), want, rtol=1e-7,
                               atol=1e-9 * max(1.0, float(np.max(np.abs(want), initial=0.0))))


def test_exact_check_of_a_float_constant_that_stands_for_a_fraction():
    d = matcalc.derive("sum(W)/(abs(2) + 1)", wrt="W")  # G holds 0.333…, λ divides by 3
    assert d.check(exact=True).ok


def test_exact_check_where_sympy_leaves_derivatives_of_sign_abs_and_max_unevaluated():
    for expr in ("sign(logdet(W@W.T + I))", "abs(logdet(W@W.T + I)) + relu(logdet(W@W.T + I) - 1)"):
        d = matcalc.derive(expr, wrt="W")
        report = d.check(exact=True)
        assert report.ok, str(report)


@pytest.mark.parametrize("expr,wrt", [
    ("Y:softmax(X, 0)", "X"), ("Y:softmax(X, 1)", "X"),
    ("logsumexp(X, 1).T@y", "X"), ("logsumexp(X, 0)@z", "X"), ("logsumexp(X)", "X"),
])
def test_softmax_and_logsumexp_along_an_axis_in_sympy(expr, wrt):
    # the axis was dropped: softmax over every entry, logsumexp of everything (a scalar)
    shapes = {"X": ("a", "b"), "Y": ("a", "b"), "y": ("a",), "z": ("b",)}
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    rng = np.random.default_rng(8)
    inputs = {k: rng.standard_normal({"a": 3, "b": 4}[v[0]] if len(v) == 1 else (3, 4))
              for k, v in d.user_shapes.items()}
    from matcalc.sympy_bridge import evaluate

    want = np.asarray(d.function(**inputs), dtype=float)
    got = evaluate(d.to_sympy(), inputs, d.user_shapes)
    np.testing.assert_allclose(np.reshape(got, want.shape), want, rtol=1e-9)
    assert d.check(exact=True).ok


def test_a_sympy_matrix_of_ones_keeps_its_shape():
    # OneMatrix(m, n) was written as a bare 1: refused, or silently a scalar 1
    n, m = sp.symbols("n m", integer=True, positive=True)
    X, A = sp.MatrixSymbol("X", n, m), sp.MatrixSymbol("A", m, n)
    rng = np.random.default_rng(9)
    Xv, Av = rng.standard_normal((3, 4)), rng.standard_normal((4, 3))
    for expr, want in ((sp.Trace(sp.OneMatrix(m, n) * X), np.ones((3, 4))),       # tr(J X) = sum(X)
                       (sp.Trace(A * sp.OneMatrix(n, n) * X), np.outer(np.ones(3), Av.sum(1))),
                       (sp.Trace(X * A * sp.OneMatrix(n, n)), np.outer(np.ones(3), Av.sum(1)))):
        d = matcalc.derive(expr, wrt=X)
        assert np.allclose(d.function(X=Xv, A=Av) if "A" in d.user_shapes else d.function(X=Xv), want)
    with pytest.raises(matcalc.DeriveError, match=r"OneMatrix\(3, 3\).*outside a matrix product"):
        matcalc.derive(sp.Symbol("alpha") * sp.Trace(sp.OneMatrix(3, 3)), wrt="alpha")


@pytest.mark.parametrize("expr,wrt", [
    ("sum(erf(x))", "x"), ("sum(gelu(x))", "x"),        # 2/√π and 1/√(2π) as floats: known constants
    ("tr(matrix_power(X, 3))", "X"), ("tr(matrix_power(X, -2))", "X"),
    ("sum(exp(kron(X, A)))", "X"), ("sum(kron(A, X)**2)", "X"),   # kron_blocks, kron_sum
    ("vec(X).T@y", "X"), ("vec(X).T@y", "y"),               # unvec, a product dimension
    ("tr(inv(X + A))", "X"),                                # decided at points, not by expanding
])
def test_exact_check_of_more_operators(expr, wrt):
    shapes = {"X": ("a", "a") if "matrix_power" in expr or "inv" in expr else ("a", "b"),
              "A": ("a", "a") if "inv" in expr else ("c", "d")}
    d = matcalc.derive(expr, wrt=wrt, shapes={k: v for k, v in shapes.items() if k in expr})
    report = d.check(exact=True)
    assert report.ok, str(report)


def test_exact_check_still_fails_a_wrong_gradient_of_erf():
    d = matcalc.derive("sum(erf(x))", wrt="x")
    wrong = matcalc.derive("sum(erf(x))*1.0000001", wrt="x")
    d.gradient = wrong.gradient
    assert not d.check(exact=True).ok


def test_cli_exact_check_that_cannot_be_made_is_a_refusal(monkeypatch, capsys):
    from matcalc import cli, sympy_bridge

    def refuse(*a, **k):
        raise matcalc.DeriveError("the operation 'x' has no SymPy form")

    monkeypatch.setattr(sympy_bridge, "exact_check", refuse)
    assert cli.run(["derive", "sum(exp(x))", "--wrt", "x", "--exact"]) == 2
    assert "the check cannot be made" in capsys.readouterr().err


def test_an_entry_of_a_1_by_1_product_as_an_index_sum():
    # (x.T*S.I*x)[0, 0] is a Sum over indices in SymPy: read back as the matrix product (it was
    # refused); at numeric sizes SymPy writes it entry by entry, and the refusal says what to do
    n = sp.Symbol("n", integer=True, positive=True)
    S, x, m = sp.MatrixSymbol("S", n, n), sp.MatrixSymbol("x", n, 1), sp.MatrixSymbol("m", n, 1)
    d = matcalc.derive(sp.log(sp.Determinant(S)) + ((x - m).T * S.I * (x - m))[0, 0], wrt=x)
    rng = np.random.default_rng(17)
    R = rng.standard_normal((3, 3))
    Sv, xv, mv = R @ R.T + 3 * np.eye(3), rng.standard_normal(3), rng.standard_normal(3)
    Si = np.linalg.inv(Sv)
    np.testing.assert_allclose(d.function(S=Sv, x=xv, m=mv), (Si + Si.T) @ (xv - mv), rtol=1e-10)
    S3, x3 = sp.MatrixSymbol("S", 3, 3), sp.MatrixSymbol("x", 3, 1)
    with pytest.raises(matcalc.DeriveError, match="give the sizes as symbols"):
        matcalc.derive((x3.T * S3 * x3)[0, 0], wrt=x3)
