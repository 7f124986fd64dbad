"""One LU factorisation per matrix for its inv / solve / logdet / det in emitted code.

The emitted helpers call LAPACK (getrf, getrs, getri) inside NumPy's own OpenBLAS when it
can be found, and numpy.linalg otherwise; both paths are checked here against
numpy.linalg, on non-symmetric matrices whose factorisation needs row swaps."""
import numpy as np
import pytest

import matcalc
from matcalc.codegen import HELPERS, helper_closure
from support.fd import central_fd_grad, rel_error


def _helpers(lapack: bool) -> dict:
    ns = {"np": np}
    for h in helper_closure(["_lu"]):
        exec(compile(HELPERS[h], "<helpers>", "exec"), ns)  # noqa: S102 - matcalc's own text
    if not lapack:
        ns["_LAPACK"] = False  # as when no LAPACK was found
    return ns


def _matrix(n, rng, det_sign=1.0):
    A = rng.standard_normal((n, n)) + 0.5 * np.eye(n)
    A[[0, -1]] = A[[-1, 0]]  # a row swap: pivoting is needed
    if np.sign(np.linalg.det(A)) != det_sign:
        A[0] *= -1
    return A


@pytest.mark.parametrize("lapack", [True, False], ids=["lapack", "numpy"])
@pytest.mark.parametrize("n", [2, 3, 17, 64])
@pytest.mark.parametrize("layout", ["C", "F", "T"])
def test_helpers_agree_with_numpy_linalg(lapack, n, layout):
    h = _helpers(lapack)
    rng = np.random.default_rng(n)
    for sign in (1.0, -1.0):
        A = _matrix(n, rng, sign)
        A = np.asfortranarray(A) if layout == "F" else (np.ascontiguousarray(A.T).T if layout == "T" else A)
        B = rng.standard_normal((5, n)).T  # a non-contiguous right-hand side
        b = rng.standard_normal(n)
        lu = h["_lu"](A)
        assert np.allclose(h["_lu_inv"](lu), np.linalg.inv(A), rtol=1e-10, atol=1e-12)
        assert np.allclose(h["_lu_solve"](lu, B), np.linalg.solve(A, B), rtol=1e-10, atol=1e-12)
        assert np.allclose(h["_lu_solve"](lu, b, True), np.linalg.solve(A.T, b), rtol=1e-10, atol=1e-12)
        ld, (s_ref, ld_ref) = h["_lu_logdet"](lu), np.linalg.slogdet(A)
        assert abs(ld - ld_ref) < 1e-10 * max(1.0, abs(ld_ref)) and s_ref == sign
        det = h["_lu_det"](lu)
        assert np.sign(det) == sign and np.isclose(det, np.linalg.det(A), rtol=1e-10)
        assert np.allclose(h["_inv"](A), np.linalg.inv(A), rtol=1e-10, atol=1e-12)
        assert np.array_equal(A, np.asarray(A))  # the input is not overwritten


@pytest.mark.parametrize("form", [0, 1])
@pytest.mark.parametrize("n", [2, 17, 64, 257])
def test_each_inverse_form_agrees_and_keeps_its_input(form, n):
    """The forms the emitter times against each other: numpy.linalg.inv or getrf + getri (for
    inv alone), getri or a solve against I (from shared factors).  Forced here one by one."""
    h = _helpers(True)
    rng = np.random.default_rng(n)
    A = _matrix(n, rng, -1.0)
    A0 = A.copy()
    h["_PICKED"].update({("inv", n): (np.linalg.inv, h["_inv_lu"])[form],
                         ("getri", n): (h["_lu_getri"], h["_lu_solve_eye"])[form]})
    ref = np.linalg.inv(A)
    lu = h["_lu"](A)
    f0 = lu[1].copy()
    assert np.allclose(h["_lu_inv"](lu), ref, rtol=1e-10, atol=1e-12)
    assert np.array_equal(lu[1], f0)  # the factors are kept for the next use
    assert np.allclose(h["_lu_inv"](lu, overwrite=True), ref, rtol=1e-10, atol=1e-12)
    assert np.allclose(h["_inv"](A), ref, rtol=1e-10, atol=1e-12)
    assert np.array_equal(A, A0)


def test_lapack_is_found_with_numpys_openblas():
    """The wheels NumPy ships on Linux, macOS and Windows carry an ILP64 OpenBLAS."""
    cfg = np.show_config(mode="dicts")["Build Dependencies"]["lapack"]
    if "openblas" not in cfg.get("name", "").lower():
        pytest.skip(f"NumPy is built against {cfg.get('name')}: the numpy.linalg path is used")
    h = _helpers(True)
    assert h["_LAPACK"] is None  # looked up on first use, not when the module loads
    assert h["_lapack"]() is not None and h["_LAPACK"]


@pytest.mark.parametrize("lapack", [True, False], ids=["lapack", "numpy"])
def test_singular_matrix(lapack):
    h = _helpers(lapack)
    A = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 5.0]])
    lu = h["_lu"](A)
    for f in (lambda: h["_lu_inv"](lu), lambda: h["_lu_solve"](lu, np.ones(3)), lambda: h["_inv"](A)):
        with pytest.raises(np.linalg.LinAlgError):
            f()
    assert h["_lu_logdet"](lu) == -np.inf
    assert h["_lu_det"](lu) == 0.0


NLL = "0.5*logdet(S) + 0.5*(x-mu).T@inv(S)@(x-mu)"


@pytest.mark.parametrize("expr,names,uses", [
    (NLL, ["S", "x", "mu"], ["_lu_inv(", "_lu_logdet("]),
    ("logdet(S) + x.T@inv(S)@x", ["S", "x"], ["_lu_inv(", "_lu_logdet("]),
    ("det(S) + sum(inv(S))", ["S"], ["_lu_inv(", "_lu_det("]),
    ("logdet(S.T) + tr(inv(S.T)@B)", ["S", "B"], ["_lu_inv(", "_lu_logdet("]),
])
@pytest.mark.parametrize("lapack", [True, False], ids=["lapack", "numpy"])
def test_one_factorisation_serves_value_and_gradient(expr, names, uses, lapack):
    shapes = {"S": ("n", "n"), "x": ("n",), "mu": ("n",), "B": ("n", "n")}
    vg = matcalc.value_and_grad(expr, wrt=names, shapes=shapes)
    body = vg.numpy_source.split("def value_and_grad")[1]
    assert body.count("_lu(") == 1, body
    for u in uses:
        assert u in body, body
    assert "np.linalg" not in body, body
    f = vg.function.emitted
    if not lapack:
        f.__globals__["_LAPACK"] = False
    try:
        rng = np.random.default_rng(4)
        n = 6
        inputs = {"S": _matrix(n, rng, 1.0), "x": rng.standard_normal(n), "mu": rng.standard_normal(n),
                  "B": rng.standard_normal((n, n))}
        inputs = {k: v for k, v in inputs.items() if k in vg.function.params}
        value, grads = f(**inputs)
        value_fn = matcalc.derive(expr, wrt="S", shapes=shapes).value_function
        assert abs(value - value_fn(**inputs)) < 1e-10 * max(1.0, abs(value))
        for name in names:
            fd = central_fd_grad(value_fn, inputs, name)
            assert rel_error(grads[name], fd) < 1e-6, name
    finally:
        f.__globals__["_LAPACK"] = None


def test_value_function_shares_the_factorisation_of_logdet_and_solve():
    d = matcalc.derive(NLL, wrt="x")
    src = d.value_function.source
    body = src.split('"""')[-1]
    assert body.count("_lu(") == 1 and "_lu_solve(" in body and "_lu_logdet(" in body, src
