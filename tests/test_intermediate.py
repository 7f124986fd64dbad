"""wrt may name a definition: ∂λ/∂y with y's inputs held fixed (dL/dy), from a function of
the leaves; a wrt only in an unused definition and errors inside a definition are refused."""
import json

import numpy as np
import pytest

import matcalc
from matcalc import DeriveError, ParseError, cli

rng = np.random.default_rng(3)
W, x, b = rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal(4)


def test_gradient_wrt_a_definition_takes_the_leaves():
    d = matcalc.derive("sum(exp(y)) + y:y + sum(W)", wrt="y", definitions={"y": "W@x+b"})
    assert d.shape == d.user_shapes["W"][:1]
    assert set(d.function.params) == {"W", "x", "b"}
    y = W @ x + b
    assert np.allclose(d.function(W=W, x=x, b=b), np.exp(y) + 2 * y)  # sum(W) is held fixed: no term
    assert "y" in d.text and d.check().ok


def test_a_copy_of_the_value_written_out_is_not_the_definition():
    # ∂λ/∂z holds z's inputs fixed: W@h written out elsewhere in λ is not z (two equal
    # spellings of λ gave different gradients: exp(z) + 1 and exp(z))
    h = rng.standard_normal(3)
    z = W @ h
    for expr in ("sum(exp(z)) + sum(W@h)", "sum(exp(z)) + sum(h.T@W.T)"):
        d = matcalc.derive(expr, wrt="z", definitions={"z": "W@h"})
        np.testing.assert_allclose(d.function(W=W, h=h), np.exp(z), rtol=1e-12, err_msg=expr)
        assert d.check().ok
    d = matcalc.derive("z:z + z:(W@h)", wrt="z", definitions={"z": "W@h"})
    np.testing.assert_allclose(d.function(W=W, h=h), 3 * z, rtol=1e-12)  # 2z + Wh
    d = matcalc.derive("z:x", wrt="z", definitions={"z": "x"})
    np.testing.assert_allclose(d.function(x=x), x)
    assert d.text == "x"
    # a definition that uses z takes z's symbol too: d(z∘z²)/dz = 3z²
    d = matcalc.derive("sum(z*q)", wrt="z", definitions={"z": "W@x", "q": "z**2"})
    np.testing.assert_allclose(d.function(W=W, x=x), 3 * (W @ x) ** 2, rtol=1e-12)


def test_cross_entropy_dl_dz():
    ds = matcalc.derive("-t.T@log(softmax(z))", wrt=["z", "W"], definitions={"z": "W@h+b"})
    t = rng.uniform(0, 1, 4)
    z = W @ x + b
    s = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    gz = ds["z"].function(W=W, h=x, b=b, t=t)
    assert np.allclose(gz, t.sum() * s - t)
    assert np.allclose(ds["W"].function(W=W, h=x, b=b, t=t), np.outer(gz, x))  # chain rule agrees
    assert ds["z"].check().ok


def test_value_and_grad_with_a_definition():
    vg = matcalc.value_and_grad("sum(exp(y))", wrt=["y", "W"], definitions={"y": "W@x+b"})
    value, grads = vg.function(W=W, x=x, b=b)
    y = W @ x + b
    assert np.isclose(value, np.exp(y).sum())
    assert np.allclose(grads["y"], np.exp(y)) and np.allclose(grads["W"], np.outer(np.exp(y), x))


def test_matrix_definition():
    X = rng.standard_normal((5, 3))
    d = matcalc.derive("sum(tanh(Z))", wrt="Z", definitions={"Z": "X@W.T"})
    assert np.allclose(d.function(X=X, W=W), 1 - np.tanh(X @ W.T) ** 2)
    assert d.function(X=X, W=W).shape == (5, 4)


def test_cli_wrt_a_let(capsys):
    code = cli.run(["derive", "sum(exp(y)) + y:y", "--let", "y=W@x+b", "--wrt", "y", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["gradient"] == "2*y + exp(y)"


def test_wrt_only_in_an_unused_definition_is_refused(capsys):
    with pytest.raises(DeriveError) as info:
        matcalc.derive("sum(exp(x))", wrt="W", definitions={"l": "W@x"})
    assert "definition of l" in str(info.value) and "does not use" in str(info.value)
    code = cli.run(["derive", "sum(exp(x))", "--let", "l=W@x", "--wrt", "W"])
    out, err = capsys.readouterr()
    assert code == 2 and not out and "l" in err


def test_parse_error_in_a_definition_names_it(capsys):
    with pytest.raises(ParseError) as info:
        matcalc.derive("sum(exp(l))", wrt="W", definitions={"l": "W@x+"})
    assert "definition of l" in str(info.value)
    assert info.value.column == 5 and info.value.source == "W@x+"
    code = cli.run(["derive", "sum(exp(l))", "--let", "l=W@(x", "--wrt", "W"])
    _, err = capsys.readouterr()
    assert code == 2 and "definition of l" in err and "^" in err.splitlines()[-1]


@pytest.mark.parametrize("order", [("l", "p"), ("p", "l")])
def test_definitions_in_any_order(order):
    """p = exp(l) given before l = W@x: p still uses the definition of l (not a free vector l)."""
    defs = {"l": "W@x", "p": "exp(l)"}
    d = matcalc.derive("sum(p) + sum(l)", "W", definitions={k: defs[k] for k in order})
    assert set(d.user_shapes) == {"W", "x"}
    want = np.outer(np.exp(W @ x) + 1, x)  # ∂/∂W Σ(exp(Wx) + Wx)
    np.testing.assert_allclose(d.function(W=W, x=x), want, rtol=1e-12)
    vg = matcalc.value_and_grad("sum(p) + sum(l)", ["W"], definitions={k: defs[k] for k in order})
    value, grads = vg.function(W=W, x=x)
    assert np.isclose(value, np.sum(np.exp(W @ x) + W @ x))
    np.testing.assert_allclose(grads["W"], want, rtol=1e-12)


@pytest.mark.parametrize("defs,words", [
    ({"p": "exp(l)", "l": "W@p"}, "circle: p → l → p"),
    ({"p": "exp(p)"}, "p is defined in terms of itself"),
])
def test_circular_definitions_are_refused(defs, words):
    with pytest.raises(matcalc.ShapeError, match=words):
        matcalc.derive("sum(p)", "W", definitions=defs)


def test_symbols_only_in_an_unused_definition_take_no_argument():
    # the function asked for Y and beta, which only a definition the expression never uses has
    d = matcalc.derive("logdet(X.T@X + 3*I)", "X", definitions={"q0": "sum(Y)*beta"})
    assert set(d.function.params) == {"X"} and d.user_shapes == {"X": ("a", "b")}
    X = rng.standard_normal((5, 4))
    np.testing.assert_allclose(d.function(X=X), 2 * X @ np.linalg.inv(X.T @ X + 3 * np.eye(4)), rtol=1e-12)
    h = matcalc.hessian("logdet(X.T@X + 3*I)", "X", definitions={"q0": "sum(Y)*beta"})
    assert h.matrix(X=X).shape == (20, 20)
    with pytest.raises(DeriveError, match="occurs only in the definition of q0"):
        matcalc.derive("logdet(X.T@X + 3*I)", "Y", definitions={"q0": "sum(Y)*beta"})


@pytest.mark.parametrize("expr, wrt, shapes, defs, must", [
    ("v.T@s", "x", None, {"s": "sqrt(x*x + 1)"}, "v*x/s"),  # was v*x/sqrt(x**2 + 1)
    ("v.T@inv(K)@v", "ell", {"ell": ()}, {"K": "exp(-D/(2*ell**2)) + I"}, "inv(K)"),
])
def test_a_definition_is_found_in_the_form_simplify_writes_it(expr, wrt, shapes, defs, must):
    # the result holds sqrt(x**2 + 1) for s = sqrt(x*x + 1), exp(-0.5*D/ell**2) + I for K: the
    # names were not used
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = matcalc.derive(expr, wrt, shapes=shapes, definitions=defs)
    assert must in d.text, d.text
    rng = np.random.default_rng(6)
    vals = {"x": rng.standard_normal(3), "v": rng.standard_normal(3), "ell": 0.7,
            "D": np.abs(rng.standard_normal((3, 3)))}
    args = {k: vals[k] for k in d.function.params}
    back = matcalc.derive(f"({d.text}):Z", "Z", shapes={**(shapes or {}), "Z": ()} if wrt == "ell" else None,
                          definitions=defs)
    np.testing.assert_allclose(back.function(**{**args, "Z": np.ones_like(np.asarray(d.function(**args)))}),
                               d.function(**args), rtol=1e-12)


def test_a_definition_that_simplifies_to_a_symbol_does_not_rename_it():
    # y2 = 1*x simplifies to x: every x in the result printed as y2 (W.T@exp(W@y2))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = matcalc.derive("sum(exp(W@x)) + y2:y2", "x", definitions={"y2": "1*x"})
    assert d.text == "2*x + W.T@exp(W@x)"
