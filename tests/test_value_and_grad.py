"""value_and_grad: one emitted function for λ and several gradients."""
import numpy as np
import pytest

import matcalc
from conftest import case_inputs, load_corpus, np_eval, rel_err

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
        assert rel_err(grads[name], single) < 1e-12
    assert rel_err(grads[case["wrt"]], np_eval(case["reference"], inputs)) < 1e-9


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
    assert abs(value - v) < 1e-10 and rel_err(grads["S"], gS) < 1e-10 and rel_err(grads["x"], gx) < 1e-10
    assert rel_err(grads["mu"], -gx) < 1e-10
    body = vg.numpy_source.split("def value_and_grad")[1]
    # one LU factorisation of S serves inv(S) and logdet(S)
    assert body.count("_lu(S)") == 1 and body.count("_lu_inv(") == 1, body
    assert "slogdet" not in body and "np.linalg.inv" not in body, body
