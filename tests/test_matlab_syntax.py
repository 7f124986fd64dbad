"""matrixcalculus.org's language (syntax="matlab"): its documented examples against closed
forms, its naming convention, results printed back in it, and its refusals."""
import json
import subprocess
import sys

import numpy as np
import pytest

import matcalc
from matcalc import DeriveError, ParseError, ShapeError, cli
from matcalc.check import choose_sizes


def inputs_for(d, seed=0, spd=()):
    dims = []
    for shape in d.user_shapes.values():
        dims += [x for x in shape if isinstance(x, str) and x not in dims]
    sizes = choose_sizes(dims)
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in d.user_shapes.items():
        sh = tuple(sizes.get(x, x) for x in shape)
        v = rng.standard_normal(sh) if sh else float(rng.standard_normal())
        if name in spd:
            v = v @ v.T + sh[0] * np.eye(sh[0])
        out[name] = v
    return out


def sig(z):
    return 1 / (1 + np.exp(-z))


CASES = [
    ("0.5*x'*A*x", "x", lambda A, x: 0.5 * (A + A.T) @ x, ()),
    ("norm2(A*x-y)^2", "x", lambda A, x, y: 2 * A.T @ (A @ x - y), ()),
    ("sum(log(exp(-y.*(X*w)) + vector(1)))", "w",
     lambda X, w, y: -X.T @ (y * sig(-y * (X @ w))), ()),
    ("tr(A*X'*B*X*C)", "X", lambda A, B, C, X: B.T @ X @ A.T @ C.T + B @ X @ C @ A, ()),
    ("log(det(inv(X)))", "X", lambda X: -np.linalg.inv(X).T, ("X",)),
]


@pytest.mark.parametrize("expr,wrt,closed,spd", CASES, ids=[c[0] for c in CASES])
def test_documented_examples(expr, wrt, closed, spd):
    d = matcalc.derive(expr, wrt=wrt, syntax="matlab")
    vals = inputs_for(d, spd=spd)
    import inspect
    want = closed(**{k: vals[k] for k in inspect.signature(closed).parameters})
    got = d.function(**vals)
    assert got.shape == np.shape(vals[wrt])
    assert np.allclose(got, want, rtol=1e-9, atol=1e-9)
    assert d.check().ok


def test_shapes_of_the_tr_example_are_rectangular():
    d = matcalc.derive("tr(A*X'*B*X*C)", wrt="X", syntax="matlab")
    assert d.user_shapes["A"][0] != d.user_shapes["A"][1]  # nothing forced square
    assert d.user_shapes["X"][0] != d.user_shapes["X"][1]


def test_naming_convention():
    d = matcalc.derive("a*h'*A*z + alpha*beta2*xi + g", wrt="A", syntax="matlab")
    kinds = {k: len(v) for k, v in d.user_shapes.items()}
    assert kinds == {"a": 0, "h": 1, "A": 2, "z": 1, "alpha": 0, "beta2": 0, "xi": 0, "g": 0}


def test_results_print_in_matlab_and_reparse():
    for expr, wrt, _, spd in CASES + [("x'*A^-1*x", "A", None, ("A",)), ("x'*A^2*x", "A", None, ()),
                                      ("sum(sum(A.*B./C))", "C", None, ()), ("c*h'*diag(X)", "X", None, ())]:
        d = matcalc.derive(expr, wrt=wrt, syntax="matlab")
        assert "@" not in d.text and ".T" not in d.text and "**" not in d.text
        # the printed gradient, read back in MATLAB syntax, has the same values
        probe = {0: "b9*({})", 1: "zz'*({})", 2: "sum(sum(ZZ.*({})))"}[len(d.shape)]
        wname = {0: "b9", 1: "zz", 2: "ZZ"}[len(d.shape)]
        back = matcalc.derive(probe.format(d.text), wrt=wname, syntax="matlab",
                              shapes={**d.user_shapes, wname: d.shape})
        vals = inputs_for(d, spd=spd)
        probe_vals = dict(vals)
        probe_vals[wname] = np.ones(np.shape(vals[wrt])) if d.shape else 1.0
        probe_vals = {k: v for k, v in probe_vals.items() if k in back.function.params}
        assert np.allclose(back.function(**probe_vals), d.function(**vals)), (expr, d.text)


def test_matrix_powers():
    d = matcalc.derive("x'*A^-1*x", wrt="A", syntax="matlab")
    vals = inputs_for(d, spd=("A",))
    Ai = np.linalg.inv(vals["A"])
    x = vals["x"]
    assert np.allclose(d.function(**vals), -Ai.T @ np.outer(x, x) @ Ai.T)
    d2 = matcalc.derive("x'*A^2*x", wrt="A", syntax="matlab")
    A = vals["A"]
    assert np.allclose(d2.function(A=A, x=x), np.outer(x, x) @ A.T + A.T @ np.outer(x, x))


def test_a_scalar_star_scales_and_diag_follows_matlab():
    d = matcalc.derive("c*h'*diag(X)", wrt="X", syntax="matlab")  # diag of a matrix: its diagonal
    vals = inputs_for(d)
    assert np.allclose(d.function(**vals), vals["c"] * np.diag(vals["h"]))
    d = matcalc.derive("sum(sum(diag(h)*A))", wrt="h", syntax="matlab")  # diag of a vector: Diag
    vals = inputs_for(d)
    assert np.allclose(d.function(**vals), vals["A"].sum(axis=1))


@pytest.mark.parametrize("expr,exc,words", [
    ("sum(sum(A^0.5))", ShapeError, ["integer", ".^"]),
    ("sum(x^2)", ShapeError, [".^"]),
    ("sum(sum(A/B))", ShapeError, ["./", "inv(B)"]),
    ("sum(vector(2))", ParseError, ["vector(1)"]),
    ("sum(x*y)", ShapeError, ["x'*y", ".*"]),
    ("x'*A*y + sum(sum(A@B))", ParseError, ["'@'"]),
])
def test_refusals(expr, exc, words):
    with pytest.raises(exc) as info:
        matcalc.derive(expr, wrt="A" if "A" in expr else "x", syntax="matlab")
    msg = str(info.value)
    for w in words:
        assert w in msg, msg
    assert "^" in msg.splitlines()[-1]


def test_mismatched_matrix_product_hints_entrywise():
    with pytest.raises(ShapeError) as info:
        matcalc.derive("sum(sum(A*B))", wrt="A", syntax="matlab", shapes={"A": (3, 4), "B": (3, 4)})
    assert "A (3×4) * B (3×4)" in str(info.value) and ".*" in str(info.value)


def test_unknown_syntax_refused():
    with pytest.raises(DeriveError):
        matcalc.derive("x:x", wrt="x", syntax="maple")


def test_definitions_in_matlab_syntax():
    d = matcalc.derive("sum(exp(l))", wrt="W", syntax="matlab", definitions={"l": "W*x + b9*vector(1)"})
    vals = inputs_for(d)
    l = vals["W"] @ vals["x"] + vals["b9"]
    assert np.allclose(d.function(**vals), np.outer(np.exp(l), vals["x"]))


def test_cli(capsys):
    code = cli.run(["derive", "--syntax", "matlab", "norm2(A*x-y)^2", "--wrt", "x", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["gradient"] == "2*A'*(A*x - y)"
    code = cli.run(["derive", "--syntax", "matlab", "sum(sum(A/B))", "--wrt", "A"])
    _, err = capsys.readouterr()
    assert code == 2 and "./" in err


def test_matlab_dimensions_count_from_one():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = matcalc.derive("sum(exp(X), 1)*u", wrt="X", syntax="matlab")  # column sums (NumPy axis 0)
    X, u = np.random.default_rng(0).random((3, 4)), np.random.default_rng(1).random(4)
    np.testing.assert_allclose(d.function(X=X, u=u), np.exp(X) * u[None, :])
    assert d.check().ok
    with pytest.raises(matcalc.MatcalcError, match="MATLAB dimension"):
        matcalc.derive("sum(X, 3)*u", wrt="X", syntax="matlab")
    v = np.random.default_rng(2).random(3)
    g = matcalc.derive("u'*sum(exp(X), 2)", wrt="X", syntax="matlab")  # row sums (NumPy axis 1)
    np.testing.assert_allclose(g.function(X=X, u=v), v[:, None] * np.exp(X))


def test_hessian_and_jacobian_read_matlab_syntax():
    rng = np.random.default_rng(2)
    A, x = rng.standard_normal((4, 4)), rng.standard_normal(4)
    h = matcalc.hessian("x'*A*x", "x", syntax="matlab")
    assert np.allclose(h.matrix(A=A, x=x), A + A.T)  # the Hessian of xᵀAx
    W = rng.standard_normal((3, 4))
    j = matcalc.jacobian("exp(W*x)", "x", syntax="matlab")
    assert np.allclose(j.matrix(W=W, x=x), np.exp(W @ x)[:, None] * W)
    r = subprocess.run([sys.executable, "-m", "matcalc", "hessian", "x'*A*x", "--wrt", "x", "--syntax", "matlab"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "H[dx] = (A.T + A)@dx" in r.stdout


@pytest.mark.parametrize("expr", ["trace(X^1000)", "trace(X^1e308)", "trace(X^-65)"])
def test_a_matrix_power_in_matlab_syntax_has_matrix_powers_limit(expr):
    # X^1000 ended in RecursionError (exit 3) after 8 s; X^1e308 grew past 4 GB
    with pytest.raises(ShapeError, match="between -64 and 64"):
        matcalc.derive(expr, wrt="X", syntax="matlab")


def test_a_name_that_is_a_number_by_the_matlab_naming_is_not_called_greek():
    with pytest.warns(matcalc.NotationWarning) as caught:
        matcalc.derive("-y'*log(softmax(W*x + b))", wrt="W", syntax="matlab")
    text = " ".join(str(w.message) for w in caught)
    assert "b is a number by the MATLAB syntax's naming, where a–g are numbers" in text and "Greek" not in text


@pytest.mark.parametrize("expr, text, count", [
    ("sum(alpha + x)", "size(x, 1)", lambda x, X: len(x)),
    ("sum(sum(alpha + X))", "size(X, 1)*size(X, 2)", lambda x, X: X.size),
    ("sum(sum(alpha*X)) + sum(alpha + x)", "size(x, 1) + sum(X)", lambda x, X: X.sum() + len(x)),
])
def test_a_count_prints_as_the_size_of_a_symbol_in_matlab(expr, text, count):
    # it printed size(a), a dimension's name that reads back as a number variable a
    d = matcalc.derive(expr, wrt="alpha", syntax="matlab")
    assert d.text == text
    x, X = np.arange(1.0, 5.0), np.arange(15.0).reshape(3, 5)
    back = matcalc.derive(f"({text})*beta", wrt="beta", syntax="matlab")
    vals = {k: v for k, v in dict(x=x, X=X).items() if k in back.function.params}
    assert back.function(beta=1.0, **vals) == pytest.approx(count(x, X))


@pytest.mark.parametrize("expr, wrt, grad", [
    # ᵀ was read as a letter of the name: Xᵀ a second matrix, and the gradient Xᵀ'
    ("trace(Xᵀ*X)", "X", lambda X, Y: 2 * X),
    ("trace(X'*X)", "X", lambda X, Y: 2 * X),
    ("sum(sum(Xᵀ ∘ Y))", "X", lambda X, Y: Y.T),   # ∘ ⊙ ⊘ are .* and ./, as in matcalc's syntax
    ("sum(sum(X ⊘ Yᵀ))", "X", lambda X, Y: 1 / Y.T),
    ("sum(sum(X⊙X))", "X", lambda X, Y: 2 * X),
])
def test_unicode_operators_in_matlab_syntax(expr, wrt, grad):
    shapes = {"X": ("a", "b"), "Y": ("b", "a")} if "Y" in expr else None
    d = matcalc.derive(expr, wrt, syntax="matlab", shapes=shapes)
    assert set(d.user_shapes) <= {"X", "Y"}
    rng = np.random.default_rng(3)
    X, Y = rng.standard_normal((3, 4)), rng.uniform(1, 2, (4, 3))
    if "Y" not in expr:
        X = rng.standard_normal((3, 4)) if "trace" not in expr else X
    args = {k: v for k, v in {"X": X, "Y": Y}.items() if k in d.function.params}
    np.testing.assert_allclose(d.function(**args), grad(X, Y), rtol=1e-12)


def test_matcalc_s_operators_in_the_matlab_syntax_say_what_matlab_writes():
    # a bare "unexpected character '@'" where the question mixed the two syntaxes
    with pytest.raises(matcalc.ParseError, match=r"@ is the matrix product in matcalc's syntax; in the MATLAB "
                                                 r"syntax it is \*"):
        matcalc.derive("norm2(M.*(Y - U@V'))^2", "U", syntax="matlab")
    with pytest.raises(matcalc.ParseError, match=r"\.T is the transpose in matcalc's syntax; in the MATLAB syntax "
                                                 r"it is X'"):
        matcalc.derive("norm2(M.*(Y - U*V.T))^2", "U", syntax="matlab")
    with pytest.raises(matcalc.ShapeError, match=r"declare b a vector \(--shape b=m; shapes=\{'b': \('m',\)\}\) "
                                                 r"to make λ a scalar"):
        matcalc.derive("x'*A*x + b'*x", "x", syntax="matlab")


def test_sum_of_a_matrix_says_matlab_would_sum_its_columns_unless_summed_again():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = matcalc.derive("sum(sum((X - mean(X)).^2))", "X", syntax="matlab")
    notes = [str(w.message) for w in caught if issubclass(w.category, matcalc.NotationWarning)]
    assert len(notes) == 1 and "MATLAB's mean(X) is the row of each column's mean: mean(X, 1)" in notes[0]
    X = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(d.function(X=X), 2 * (X - X.mean()))  # the total's mean, as matrixcalculus.org
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        matcalc.derive("sum(sum(X.*Y))", "X", syntax="matlab")  # the total in MATLAB too: no note
        matcalc.derive("sum(x.^2)", "x", syntax="matlab")


def test_backslash_is_matlabs_solve():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((4, 4)) + 4 * np.eye(4)
    x = rng.standard_normal(4)
    d = matcalc.derive("x'*(A\\x)", "x", syntax="matlab")
    Ai = np.linalg.inv(A)
    np.testing.assert_allclose(d.function(A=A, x=x), (Ai + Ai.T) @ x, rtol=1e-12)
    d = matcalc.derive("y'*(X\\y)", "X", syntax="matlab")  # d(yᵀX⁻¹y) = -X⁻ᵀyyᵀX⁻ᵀ
    np.testing.assert_allclose(d.function(X=A, y=x), -Ai.T @ np.outer(x, x) @ Ai.T, rtol=1e-12)
    np.testing.assert_allclose(matcalc.derive("sum(c\\x)", "x", syntax="matlab").function(c=2.0, x=x), 0.5 * np.ones(4))
    with pytest.raises(matcalc.ShapeError, match="needs a square matrix"):
        matcalc.derive("sum(X\\Y)", "X", syntax="matlab", shapes={"X": (3, 4)})


@pytest.mark.parametrize("expr", ["x^\\top A x", "\\operatorname{tr}(A X)", "\\|A x - b\\|^2"])
def test_latex_gets_the_latex_hint_and_a_solve_the_solve_hint(expr):
    with pytest.raises(matcalc.ParseError, match="LaTeX is not read"):
        matcalc.derive(expr, "x")
    with pytest.raises(matcalc.ParseError, match="MATLAB's solve"):
        matcalc.derive("x.T@(A\\x)", "x")


def test_matlab_matrix_power_gets_no_entrywise_note():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = matcalc.derive("trace(X^2)", "X", syntax="matlab")  # X^2 is X*X there
    X = np.arange(4.0).reshape(2, 2)
    np.testing.assert_allclose(d.function(X=X), 2 * X.T)
    with warnings.catch_warnings():  # .^ is entrywise as written: no note saying so, nor one in matcalc's syntax
        warnings.simplefilter("error")
        d = matcalc.derive("trace(X.^2) + trace(X.^-1)", "X", syntax="matlab")
    X = X + 1.0
    np.testing.assert_allclose(d.function(X=X), np.diag(2 * np.diag(X) - np.diag(X) ** -2.0))
    with pytest.raises(matcalc.ParseError, match=r"X\^3 is the matrix power, X\.\^3 entry by entry"):
        matcalc.derive("trace(X**3)", "X", syntax="matlab")


def test_a_colon_in_the_matlab_syntax_says_how_to_write_the_frobenius_product():
    with pytest.raises(matcalc.ParseError, match=r"in the MATLAB syntax write trace\(A'\*B\)"):
        matcalc.derive("(A'*P):(A'*P)", "P", syntax="matlab")
