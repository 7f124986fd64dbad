"""symmetric=["S"] / --sym S: the gradient along symmetric dS is sym(G) = (G + Gᵀ)/2, checked
against finite differences along symmetric directions; results use Sᵀ = S."""
import json
import subprocess
import sys

import numpy as np
import pytest

import matcalc
from matcalc import DeriveError, ShapeError, cli
from matcalc.check import finite_difference_check

rng = np.random.default_rng(11)
n = 4
R = rng.standard_normal((n, n))
S = R @ R.T + n * np.eye(n)          # symmetric positive definite
A = rng.standard_normal((n, n))
x, y = rng.standard_normal(n), rng.standard_normal(n)


def directional(f, S, V, h=1e-6):
    return (f(S + h * V) - f(S - h * V)) / (2 * h)


def sym_dir():
    V = rng.standard_normal((n, n))
    return (V + V.T) / 2


CASES = [
    ("logdet(S)", lambda S: np.log(np.linalg.det(S)), lambda: np.linalg.inv(S), {}),
    ("x.T@S@y", lambda S: x @ S @ y, lambda: (np.outer(x, y) + np.outer(y, x)) / 2, {"x": x, "y": y}),
    ("tr(A@S)", lambda S: np.trace(A @ S), lambda: (A + A.T) / 2, {"A": A}),
    ("x.T@inv(S)@x", lambda S: x @ np.linalg.solve(S, x),
     lambda: -np.linalg.inv(S) @ np.outer(x, x) @ np.linalg.inv(S), {"x": x}),
]


@pytest.mark.parametrize("expr,lam,closed,extra", CASES, ids=[c[0] for c in CASES])
def test_symmetric_gradient(expr, lam, closed, extra):
    d = matcalc.derive(expr, wrt="S", symmetric=["S"])
    G = d.function(S=S, **extra)
    assert np.allclose(G, G.T)                       # symmetric
    assert np.allclose(G, closed())                  # the closed form sym(G)
    for _ in range(3):                               # and λ's change along symmetric directions
        V = sym_dir()
        assert np.isclose(directional(lam, S, V), np.sum(G * V), rtol=1e-6, atol=1e-8)
    assert d.check().ok


def test_results_use_the_symmetry():
    d = matcalc.derive("logdet(S)", wrt="S", symmetric=["S"])
    assert d.text == "inv(S)"
    d = matcalc.derive("tr(inv(S)@A)", wrt="A", symmetric=["S"])
    assert d.text == "inv(S)"
    plain = matcalc.derive("logdet(S)", wrt="S")
    assert plain.text == "inv(S).T"


def test_not_the_cookbook_formula():
    d = matcalc.derive("tr(A@S)", wrt="S", symmetric=["S"])
    G = A.T
    cookbook = G + G.T - G * np.eye(n)
    assert not np.allclose(d.function(A=A, S=S), cookbook)


def test_output_says_so():
    d = matcalc.derive("tr(A@S)", wrt="S", symmetric=["S"])
    text = "\n".join(d.derivation_lines())
    assert "sym(G) = (G + Gᵀ)/2" in text and "1911.06491" in text
    assert any("symmetric" in s.identity for s in d.steps)


def test_symmetric_check_catches_an_unsymmetrised_gradient():
    # G = Aᵀ passes G:V for symmetric V, but is not the (symmetric) gradient
    val = matcalc.derive("tr(A@S)", wrt="S").value_function
    err, _, _ = finite_difference_check(val, lambda **kw: kw["A"].T, {"A": A, "S": S}, "S", rng,
                                        symmetric=True)
    assert err > 1e-3
    good = matcalc.derive("tr(A@S)", wrt="S", symmetric=["S"]).function
    err, _, _ = finite_difference_check(val, good, {"A": A, "S": S}, "S", rng, symmetric=True)
    assert err < 1e-6


def test_other_variables_with_a_symmetric_matrix_check():
    d = matcalc.derive("x.T@inv(S)@x", wrt="x", symmetric=["S"])
    assert d.text == "2*inv(S)@x"
    assert np.allclose(d.function(S=S, x=x), 2 * np.linalg.solve(S, x))
    assert d.check().ok


@pytest.mark.parametrize("sym,shapes,exc", [
    (["Q"], None, DeriveError), (["x"], None, ShapeError), (["S"], {"S": (3, 4)}, ShapeError),
    ([3], None, DeriveError)])
def test_refusals(sym, shapes, exc):
    with pytest.raises(exc):
        matcalc.derive("x.T@S@x", wrt="S", symmetric=sym, shapes=shapes)


def test_cli(capsys):
    code = cli.run(["derive", "logdet(S) - tr(inv(S)@A)", "--wrt", "S", "--sym", "S"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "sym(G)" in out and "inv(S).T" not in out
    code = cli.run(["derive", "logdet(S)", "--wrt", "S", "--sym", "S", "--json", "--check"])
    out, _ = capsys.readouterr()
    j = json.loads(out)
    assert code == 0 and j["gradient"] == "inv(S)" and j["symmetric"] == ["S"] and j["check"]["ok"]


def test_a_power_of_a_symmetric_form_is_symmetric():
    # (XᵀX)⁻² equals its transpose: tr(inv(X.T@X)) read -X@(P + P.T), P = matrix_power(X.T@X, -2)
    d = matcalc.derive("tr(inv(X.T@X))", "X")
    assert d.text == "-2*X@matrix_power(X.T@X, -2)"
    X = np.random.default_rng(4).standard_normal((5, 3))
    P = np.linalg.inv(X.T @ X)
    np.testing.assert_allclose(d.function(X=X), -2 * X @ P @ P, rtol=1e-10)


def test_softmax_over_all_entries_of_a_symmetric_form_is_symmetric():
    # softmax over every entry commutes with the transpose: logsumexp(AᵀA) read A@(S + Sᵀ),
    # and logsumexp(AAᵀ − (AAᵀ)ᵀ), a constant log(n²), had a gradient (E − Eᵀ)ᵀ + E − Eᵀ
    d = matcalc.derive("logsumexp(A.T@A)", "A")
    assert d.text == "2*A@exp(A.T@A - logsumexp(A.T@A))"
    Av = np.random.default_rng(6).standard_normal((5, 3)) / 2
    E = np.exp(Av.T @ Av)
    np.testing.assert_allclose(d.function(A=Av), 2 * Av @ (E / E.sum()), rtol=1e-12)
    z = matcalc.derive("logsumexp(A@A.T - (A@A.T).T)", "A")
    assert z.text == "0"
    np.testing.assert_array_equal(z.function(A=Av), np.zeros((5, 3)))


def test_the_symmetric_terms_of_the_gradient_stay_as_they_are():
    # sym(S⁻¹ + Aᵀ) = S⁻¹ + (A + Aᵀ)/2: it read 0.5*(A.T + inv(S) + (A.T + inv(S)).T)
    d = matcalc.derive("logdet(S) + tr(A@S)", "S", symmetric=["S"])
    assert d.text == "inv(S) + 0.5*(A.T + A)"
    np.testing.assert_allclose(d.function(S=S, A=A), np.linalg.inv(S) + (A + A.T) / 2, rtol=1e-12)
    assert d.check().ok


def test_the_exact_check_draws_symmetric_matrices_and_checks_sym_g():
    # --exact compared sym(G) with the plain partial derivative at a non-symmetric S: a
    # correct gradient FAILED (exit 1)
    for expr, wrt in (("x.T@S@x", "x"), ("logdet(S)", "S"), ("tr(S@A)", "S"), ("logdet(S) - tr(S@A)", "S")):
        d = matcalc.derive(expr, wrt=wrt, symmetric=["S"])
        assert d.check(exact=True).ok, expr
    # and it still fails a gradient that is not the symmetric one
    plain = matcalc.derive("tr(S@A)", wrt="S", shapes={"S": ("n", "n")})  # Aᵀ
    plain.symmetric = ("S",)
    assert not plain.check(exact=True).ok
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "x.T@S@x", "--wrt", "x", "--sym", "S", "--exact"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_hessian_in_a_symmetric_matrix():
    # hessian(..., symmetric=) was a TypeError (and --sym a usage error): along symmetric dS,
    # H[dS] = S⁻¹ dS S⁻¹ for -logdet(S); the dense matrix is P (S⁻¹ ⊗ S⁻¹) P, P = (I + K)/2
    h = matcalc.hessian("-logdet(S)", "S", symmetric=["S"])
    Si = np.linalg.inv(S)
    K = np.eye(n * n)[[n * (k % n) + k // n for k in range(n * n)]]
    P = (np.eye(n * n) + K) / 2
    np.testing.assert_allclose(h.matrix(S=S), P @ np.kron(Si, Si) @ P, rtol=1e-10, atol=1e-14)
    assert h.kron == "0.5*kron(inv(S), inv(S)) + 0.5*kron(inv(S), inv(S))@K_aa"  # Sᵀ = S: no inv(S).T
    np.testing.assert_allclose(0.5 * np.kron(Si, Si) @ (np.eye(n * n) + K), h.matrix(S=S), rtol=1e-10, atol=1e-14)
    V = rng.standard_normal((n, n))
    V = V + V.T
    np.testing.assert_allclose(h.hvp(V, S=S), Si @ V @ Si, rtol=1e-10)
    assert h.check().ok
    for expr, wrt in (("x.T@S@x + tr(S@S@A)", "S"), ("logdet(S) - tr(S@A) + x.T@inv(S)@x", "S"),
                      ("x.T@inv(S)@x", "x")):
        assert matcalc.hessian(expr, wrt, symmetric=["S"]).check().ok, expr
    # the check fails the Hessian that ignores the symmetry
    plain = matcalc.hessian("tr(S@S@A)", "S", shapes={"S": ("n", "n")})
    plain.symmetric = ("S",)
    assert not plain.check().ok
    r = subprocess.run([sys.executable, "-m", "matcalc", "hessian", "-logdet(S)", "--wrt", "S", "--sym", "S",
                        "--json", "--check"], capture_output=True, text=True)
    out = json.loads(r.stdout.splitlines()[0])
    assert r.returncode == 0 and out["symmetric"] == ["S"] and out["check"]["ok"], r.stderr


def test_the_jacobian_in_a_symmetric_matrix():
    # jacobian had no symmetric= (a TypeError; --sym a usage error): along symmetric dS the
    # Jacobian of S⁻¹x is dS ↦ -S⁻¹ dS S⁻¹x, and its dense matrix is J P, P = (I + K)/2
    x = rng.standard_normal(n)
    J = matcalc.jacobian("inv(S)@x", "S", symmetric=["S"])
    Si = np.linalg.inv(S)
    V = rng.standard_normal((n, n))
    V = V + V.T
    h = 1e-6
    fd = (np.linalg.inv(S + h * V) @ x - np.linalg.inv(S - h * V) @ x) / (2 * h)
    np.testing.assert_allclose(J.jvp(V, S=S, x=x), fd, rtol=1e-6)
    K = np.eye(n * n)[[n * (k % n) + k // n for k in range(n * n)]]
    P = (np.eye(n * n) + K) / 2
    np.testing.assert_allclose(J.matrix(S=S, x=x), -np.kron(x @ Si.T, Si) @ P, rtol=1e-10, atol=1e-14)
    assert J.check().ok
    # the Jacobian that ignores the symmetry is not the one along symmetric dS: its check fails there
    plain = matcalc.jacobian("S@S@A", "S", shapes={"S": ("n", "n"), "A": ("n", "n")})
    plain.symmetric = ("S",)
    assert not plain.check().ok
    assert matcalc.jacobian("S@S@A", "S", symmetric=["S"]).check().ok
    r = subprocess.run([sys.executable, "-m", "matcalc", "jacobian", "inv(S)@x", "--wrt", "S", "--sym", "S",
                        "--json", "--check"], capture_output=True, text=True)
    out = json.loads(r.stdout.splitlines()[0])
    assert r.returncode == 0 and out["symmetric"] == ["S"] and out["check"]["ok"], r.stderr


def test_the_symmetric_note_names_the_matrix():
    # it said "only symmetric dS exist" whatever the matrix was called
    d = matcalc.derive("logdet(K) - tr(K@A)", "K", symmetric=["K"])
    assert "only symmetric dK exist" in d.symmetric_note and "dS" not in d.symmetric_note


@pytest.mark.parametrize("expr, text, closed", [
    # sym(G) term by term with Sᵀ = S: was S + (S - A).T - A
    ("norm2(S - A)**2", "2*S - A - A.T", lambda S, A, C: 2 * S - A - A.T),
    # was 0.5*(inv(S)@(C.T@inv(S) + I) + (inv(S)@(C.T@inv(S) + I)).T)
    ("logdet(S) - tr(inv(S)@C)", "0.5*inv(S)@(C.T + C)@inv(S) + inv(S)",
     lambda S, A, C: np.linalg.inv(S) + np.linalg.inv(S) @ (C + C.T) @ np.linalg.inv(S) / 2),
])
def test_a_symmetric_gradient_is_transposed_term_by_term(expr, text, closed):
    d = matcalc.derive(expr, "S", symmetric=["S"])
    assert d.text == text
    rng = np.random.default_rng(16)
    B = rng.standard_normal((4, 4))
    S, A, C = B @ B.T + 4 * np.eye(4), rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    vals = {k: v for k, v in {"S": S, "A": A, "C": C}.items() if k in d.function.params}
    np.testing.assert_allclose(d.function(**vals), closed(S, A, C), rtol=1e-10)


def test_a_defined_matrix_can_be_declared_symmetric_as_the_wrt():
    # a GP's kernel K = s*A + v*I as a definition: symmetric=["K"] was refused ("not a symbol")
    defs, shapes = {"K": "s*A + v*I"}, {"s": (), "v": ()}
    expr = "0.5*y.T@inv(K)@y + 0.5*logdet(K)"
    d = matcalc.derive(expr, "K", definitions=defs, symmetric=["K"], shapes=shapes)
    rng = np.random.default_rng(0)
    B, y, s, v = rng.standard_normal((4, 4)), rng.standard_normal(4), 0.7, 0.3
    A = B @ B.T
    Ki = np.linalg.inv(s * A + v * np.eye(4))
    np.testing.assert_allclose(d.function(A=A, y=y, s=s, v=v), 0.5 * (Ki - Ki @ np.outer(y, y) @ Ki), atol=1e-13)
    assert "K is symmetric" in d.symmetric_note
    with pytest.raises(matcalc.ShapeError, match="K is declared symmetric, but its definition is"):
        matcalc.derive("sum(K)", "K", definitions={"K": "x + c"}, symmetric=["K"])  # (a vector)


def test_a_value_that_is_not_symmetric_for_a_symmetric_matrix_is_refused():
    # the results use Sᵀ = S: at K = [[1, 2], [3, 4]] the "Hessian" printed was not even symmetric
    expr = "0.5*y.T@inv(K)@y + 0.5*logdet(K)"
    K, y = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, 2.0])
    H = matcalc.hessian(expr, "K", symmetric=["K"])
    d = matcalc.derive(expr, "K", symmetric=["K"])
    vg = matcalc.value_and_grad(expr, ["K"], symmetric=["K"])
    for call in (lambda: H.matrix(K=K, y=y), lambda: H.hvp(np.eye(2), K=K, y=y), lambda: d.function(K=K, y=y),
                 lambda: vg.function(K=K, y=y)):
        with pytest.raises(ValueError, match=r"K is declared symmetric, but its value is not \(max \|K - Kᵀ\| = 1\)"):
            call()
    S = (K + K.T) / 2 + 3 * np.eye(2)  # symmetric: the gradient is (K⁻¹ - K⁻¹yyᵀK⁻¹)/2, symmetric itself
    Si = np.linalg.inv(S)
    np.testing.assert_allclose(d.function(K=S, y=y), 0.5 * (Si - Si @ np.outer(y, y) @ Si), rtol=1e-12)
    r = subprocess.run([sys.executable, "-m", "matcalc", "hessian", expr, "--wrt", "K", "--sym", "K",
                        "--at", "K=[[1,2],[3,4]]", "--at", "y=[1,2]"], capture_output=True, text=True)
    assert r.returncode == 2 and "K is declared symmetric, but its value is not" in r.stderr


def test_a_gradient_symmetric_once_its_products_are_multiplied_out_is_not_symmetrised_again():
    # a Kalman filter's likelihood in P: Hᵀ S⁻¹(I − vvᵀS⁻¹) H is symmetric; it printed as 0.25*(M + M.T)
    # with M written out twice (148 characters)
    shapes = {"P": ("n", "n"), "H": ("m", "n"), "R": ("m", "m"), "y": ("m",), "x": ("n",)}
    d = matcalc.derive("0.5*logdet(S) + 0.5*v.T@inv(S)@v", "P", shapes=shapes, symmetric=["P", "R"],
                       definitions={"S": "H@P@H.T + R", "v": "y - H@x"})
    assert d.text == "0.5*H.T@inv(S)@(I - v@v.T@inv(S))@H"
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((3, 3)), rng.standard_normal((4, 4))
    P, R, H = A @ A.T + np.eye(3), B @ B.T + np.eye(4), rng.standard_normal((4, 3))
    y, x = rng.standard_normal(4), rng.standard_normal(3)
    Si, v = np.linalg.inv(H @ P @ H.T + R), y - H @ x
    np.testing.assert_allclose(d.function(P=P, H=H, R=R, y=y, x=x), 0.5 * H.T @ (Si - Si @ np.outer(v, v) @ Si) @ H,
                               rtol=1e-10)


def test_the_symmetry_key_of_a_deep_shared_expression_grows_with_its_nodes_not_its_paths():
    # each layer uses the one below twice: 2**24 paths, 3 nodes a layer (a transformer's residual
    # stream, used by attention and by the next layer, made the derivation take minutes)
    from matcalc import ir
    from matcalc.symmetric import _KEYS, symmetric_form

    X = ir.sym("X", ("n", "n"))
    e = X
    for _ in range(24):
        e = ir.add(ir.matmul(e, ir.T(e)), e)
    before = len(_KEYS)
    assert not symmetric_form(e)
    assert symmetric_form(ir.matmul(e, ir.T(e)))
    assert len(_KEYS) - before < 400


def test_the_key_numbers_start_again_between_comparisons_only(monkeypatch):
    # with room for 5 keys the table is cleared before every comparison, never inside one
    import matcalc.symmetric as symmetric
    from matcalc import ir

    monkeypatch.setattr(symmetric, "_MOST_KEYS", 5)
    X, A = ir.sym("X", ("n", "n")), ir.sym("A", ("n", "m"))
    for _ in range(3):
        assert symmetric.symmetric_form(ir.matmul(X, ir.T(X)))
        assert not symmetric.symmetric_form(ir.matmul(X, X))
        assert symmetric.symmetric_form(ir.matmul(ir.matmul(A, ir.T(A)), ir.matmul(A, ir.T(A))))
