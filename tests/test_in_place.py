"""Matrix sums, products and quotients computed into a new operand (``np.add(t, b, out=t)``)
give the numbers of the plain form ``(t + b)`` bit for bit, and never write into an argument
or into an array read again.  Checked on random expressions (tests/exprgen.py) against the
emitter with the in-place forms switched off, and on the forms that read a product's factors
directly (a − c∘X, a norm in a denominator)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import matcalc
from matcalc import codegen
from support.exprgen import expressions

SETTINGS = settings(max_examples=120, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def _plain(expr, wrt, shapes):
    """The emitted function without in-place arithmetic."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(codegen, "ARITH", ())
        vg = matcalc.value_and_grad(expr, wrt=wrt, shapes=shapes)
        vg.numpy_source  # emitted now, while the in-place forms are off
        return vg


def _first_form(key, forms, *args, **kw):
    return forms[0](*args, **kw)


def _same(expr, wrt, shapes, inputs):
    fast = matcalc.value_and_grad(expr, wrt=wrt, shapes=shapes)
    plain = _plain(expr, wrt, shapes)
    for vg in (fast, plain):  # forms chosen by timing (inv by getri or numpy) round differently
        vg.function.emitted.__globals__["_pick"] = _first_form
    copies = {k: np.copy(v) for k, v in inputs.items()}
    v1, g1 = fast.function(**inputs)
    for k, v in inputs.items():
        assert np.array_equal(v, copies[k]), f"argument {k} was overwritten"
    v2, g2 = plain.function(**inputs)
    assert v1 == v2 or (np.isnan(v1) and np.isnan(v2))
    for w in wrt:
        assert np.array_equal(g1[w], g2[w], equal_nan=True), (expr, w)
    v3, g3 = fast.function(**inputs)  # a second call: nothing cached was changed
    for w in wrt:
        assert np.array_equal(g1[w], g3[w], equal_nan=True), (expr, w)
    return fast


@SETTINGS
@given(case=expressions(), seed=st.integers(0, 2**32 - 1))
def test_in_place_forms_equal_the_plain_forms_on_random_expressions(case, seed):
    inputs = case.draw_inputs(np.random.default_rng(seed))
    try:
        matcalc.derive(case.expr, wrt=case.wrt[0], shapes=case.shapes)
    except matcalc.MatcalcError:
        return  # refusals are another test's business
    with np.errstate(all="ignore"):
        _same(case.expr, list(case.wrt), case.shapes, inputs)


SHAPES = {"A": ("m", "n"), "B": ("m", "n"), "C": ("n", "p"), "D": ("m", "p"), "x": ("n",),
          "y": ("m",), "alpha": ()}


@pytest.mark.parametrize("expr, wrt, fragment", [
    ("D:exp(A@C) + sum(D*exp(A@C)*(A@C))", ["A"], None),
    ("sum(exp(A@C)*D)", ["A"], "np.multiply("),
    ("D:(A@C - 2*exp(A@C))", ["A", "C"], None),            # a − c∘X: X is changed, c∘X is read
    ("norm2(A@C - D) + D:(A@C)", ["A"], None),            # a norm in a denominator
    ("sum((A@C - D)*(A@C - D)*(A@C))", ["C"], None),
    ("0.5*(A@C):(A@C) - alpha*sum(exp(A@C)/(1 + exp(A@C)))", ["A", "alpha"], None),
    ("tr(C.T@A.T@(B@C - D))", ["A", "B"], None),
    ("sum(tanh(A@C)*tanh(A@C) - D)", ["A"], "np.tanh("),
])
def test_in_place_forms_on_chosen_expressions(expr, wrt, fragment):
    rng = np.random.default_rng(7)
    dims = {"m": 5, "n": 4, "p": 3}
    inputs = {k: rng.standard_normal(tuple(dims[d] for d in s)) if s else 0.7 for k, s in SHAPES.items()}
    vg = _same(expr, wrt, SHAPES, {k: v for k, v in inputs.items()
                                   if k in matcalc.value_and_grad(expr, wrt=wrt, shapes=SHAPES).function.params})
    if fragment:  # the gradient alone (λ may need the operand again)
        src = matcalc.derive(expr, wrt=wrt[0], shapes=SHAPES).numpy_source
        assert fragment in src, src


def test_gaussian_nll_gradient_is_assembled_in_place():
    """0.5(S⁻ᵀ − a bᵀ): the outer product's new array takes the sum and the scaling."""
    d = matcalc.derive("0.5*logdet(S) + 0.5*(x-mu).T@inv(S)@(x-mu)", wrt="S",
                       shapes={"S": ("n", "n"), "x": ("n",), "mu": ("n",)})
    body = d.numpy_source.split('"""')[-1]
    assert "np.add(" in body and "np.multiply(0.5, " in body, body
    rng = np.random.default_rng(2)
    n = 6
    A = rng.standard_normal((n, n))
    S, x, mu = A @ A.T / n + np.eye(n), rng.standard_normal(n), rng.standard_normal(n)
    Si, r = np.linalg.inv(S), x - mu
    np.testing.assert_allclose(d.function(S=S, x=x, mu=mu), 0.5 * (Si.T - np.outer(Si.T @ r, Si @ r)),
                               rtol=1e-12, atol=1e-14)
