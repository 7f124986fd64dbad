"""An honest check: inv/det/logdet arguments drawn well-conditioned and NOT symmetric (a
dropped transpose fails), det < 0 on some draws where only log|det| is taken (never under
log(det(·))), SPD only where symmetric= needs it; unknown domains refused."""
import re
import subprocess
import sys

import numpy as np
import pytest

import matcalc
import matcalc.check as mcheck
from matcalc import DeriveError
from matcalc.check import draw, finite_difference_check, infer_domains


def recorded_draws(monkeypatch, expr, wrt, **kw):
    seen = []
    real = mcheck.random_inputs

    def spy(*a, **k):
        out = real(*a, **k)
        seen.append(out)
        return out

    monkeypatch.setattr(mcheck, "random_inputs", spy)
    report = matcalc.derive(expr, wrt=wrt, **kw).check(draws=4)
    return report, seen


def test_invertible_draws_are_not_symmetric(monkeypatch):
    report, seen = recorded_draws(monkeypatch, "x.T@inv(X)@y", "X")
    assert report.ok
    for inputs in seen:
        X = inputs["X"]
        assert not np.allclose(X, X.T)
        assert np.linalg.cond(X) < 50


def test_logdet_alone_sees_negative_determinants(monkeypatch):
    report, seen = recorded_draws(monkeypatch, "logdet(X) + x.T@X@x", "X")
    assert report.ok
    signs = {np.sign(np.linalg.det(inputs["X"])) for inputs in seen}
    assert signs == {-1.0, 1.0}


@pytest.mark.parametrize("expr", ["log(det(X))", "sqrt(det(X)) + logdet(X)"])
def test_never_a_negative_determinant_under_log_det(monkeypatch, expr):
    report, seen = recorded_draws(monkeypatch, expr, "X")
    assert report.ok
    assert all(np.linalg.det(inputs["X"]) > 0 for inputs in seen)


def test_symmetric_matrices_are_drawn_spd_where_needed(monkeypatch):
    report, seen = recorded_draws(monkeypatch, "logdet(S) + x.T@S@x", "S", symmetric=["S"])
    assert report.ok and report.domains["S"] == "spd"
    for inputs in seen:
        S = inputs["S"]
        assert np.allclose(S, S.T) and np.all(np.linalg.eigvalsh(S) > 0)


def test_a_dropped_transpose_fails_the_check():
    d = matcalc.derive("logdet(X) + x.T@inv(X)@y", wrt="X")
    domains = infer_domains(d.lam, d.symbols)
    rng = np.random.default_rng(0)
    inputs = {"x": draw((3,), "normal", rng), "y": draw((3,), "normal", rng),
              "X": draw((3, 3), domains["X"], rng)}

    def wrong(X, x, y):  # the gradient with every transpose dropped
        Xi = np.linalg.inv(X)
        return Xi - Xi @ np.outer(x, y) @ Xi

    err, _, _ = finite_difference_check(d.value_function, wrong, inputs, "X", rng)
    assert err > 1e-3
    err, _, _ = finite_difference_check(d.value_function, d.function, inputs, "X", rng)
    assert err < 1e-6


def test_an_objective_that_cancels_to_zero_is_checked_at_its_rounding():
    # tr(AX)² − (A:Xᵀ)² is 0 for every X, but each term is about 10³: its finite differences are
    # rounding noise of the terms (about 1e-8), which check() took for an error of a 0 gradient
    # (a FAIL); they measure nothing, and the check says it cannot be made
    expr, shapes = "tr(A@X)*tr(X.T@A.T) - (A.T:X)**2", {"A": ("n", "m"), "X": ("m", "n")}
    d = matcalc.derive(expr, "X", shapes=shapes)
    report = d.check()
    assert d.text == "0" and str(report).startswith("check cannot be made") and "rounding noise" in str(report)
    # and the measured noise excuses nothing larger: gradients off by 1e-2 fail
    rng = np.random.default_rng(3)
    A, X = rng.standard_normal((4, 3)), rng.standard_normal((3, 4))
    for wrong in (lambda A, X: np.full(X.shape, 1e-2), lambda A, X: 1e-2 * A.T):
        err, _, _ = finite_difference_check(d.value_function, wrong, {"A": A, "X": X}, "X", rng)
        assert err > 1e-3
    # an objective of the same terms that does not cancel is still held to eps·|λ|
    d2 = matcalc.derive("tr(A@X)*tr(X.T@A.T) - 0.999*(A.T:X)**2", "X", shapes=shapes)
    err, _, _ = finite_difference_check(d2.value_function, lambda A, X: 1.001 * d2.function(A=A, X=X),
                                        {"A": A, "X": X}, "X", rng)
    assert err > 1e-4


@pytest.mark.parametrize("domain,words", [
    ({"X": "sdp"}, ["unknown domain 'sdp'", "spd"]),
    ({"Q": "spd"}, ["'Q'", "not a symbol"]),
    ({"x": "spd"}, ["square matrix"]),
    ("spd", ["dict"]),
])
def test_bad_domains_are_refused(domain, words):
    d = matcalc.derive("logdet(X) + x:x", wrt="X")
    with pytest.raises(DeriveError) as info:
        d.check(domain=domain)
    for w in words:
        assert w in str(info.value)


def test_explicit_domains_still_work():
    d = matcalc.derive("logdet(X) + x:x", wrt="X")
    assert d.check(domain={"X": "spd"}).domains["X"] == "spd"
    assert d.check(domain={"X": "invertible_signed"}).ok


def test_a_check_with_more_dimensions_than_the_listed_sizes():
    # 15 vectors of 15 inferred lengths: the lists of sizes ran out (StopIteration, exit 3)
    expr = "+".join(f"sum(x{i}*x{i})" for i in range(15))
    d = matcalc.derive(expr, wrt="x0")
    report = d.check()
    assert report.ok and len(set(report.sizes.values())) == 15


def test_a_check_that_runs_out_of_memory_is_a_refusal(monkeypatch):
    d = matcalc.derive("sum(exp(kron(X, X)))", wrt="X")

    def no_memory(*a, **k):
        raise MemoryError

    monkeypatch.setattr(mcheck, "_gradient_check_at", no_memory)
    with pytest.raises(matcalc.OutOfMemory, match="ran out of memory at sizes a=3, b=4"):
        d.check()


@pytest.mark.parametrize("expr, wrt", [
    ("norm2(y - X@inv(X.T@X)@X.T@y)**2", "X"),  # raised LinAlgError (exit 3) at X 3×4
    ("tr(inv(W.T@W)@W.T@S@W)", "W"), ("det(X.T@X)", "X"),  # det(XᵀX) ≡ 0 at X 3×4: a false FAIL
])
def test_products_singular_at_the_first_sizes_are_checked_at_the_others(expr, wrt):
    report = matcalc.derive(expr, wrt=wrt).check()
    assert report.ok and report.max_rel_error < 1e-6
    # (where XᵀX is singular, λ is its rounding noise or the differences fail)
    assert re.search(r"a=3, b=4 (it failed|the finite differences were λ's rounding noise|the gradient and the "
                     r"finite differences were zero|the gradient met a singular matrix)", report.message)
    assert report.sizes == {"b": 3, "a": 4}


@pytest.mark.parametrize("expr", ["logdet(X.T@X)", "tr(inv(X.T@X))", "det(X.T@X)", "logdet(X.T@A@X)"])
def test_sizes_change_hands_when_the_names_fix_their_order(expr):
    # m is one of the 'large' names, so every order of the names drew X 3×9: XᵀX singular on
    # every draw (logdet: a false FAIL; det: zero everywhere, a pass that tested nothing)
    d = matcalc.derive(expr, wrt="X", shapes={"X": ("d", "m")})
    report = d.check()
    assert report.ok and report.sizes["d"] > report.sizes["m"] and "zero on every draw" not in report.message
    exact = d.check(exact=True)  # SymPy: XᵀX of a wide X is singular for every value
    assert exact.ok and exact.sizes["d"] > exact.sizes["m"], exact.message


@pytest.mark.parametrize("expr, wrt, shapes, measurable", [
    ("det(X.T@X)", "X", {"X": ("a", 3)}, True),  # passed at a = 2, where det(XᵀX) ≡ 0 compares nothing
    ("det(A@X@B)", "X", None, True),             # passed at sizes where AXB is singular
    ("det(X@Y@Z)", "Y", None, True),
    # λ's rounding (terms of 10¹⁰) hides the gradient Bᵀ: wrong ones passed, the right one FAILED
    # (measured with a step of 1e-2, where λ's rounding over the step is a thousandth of Bᵀ)
    ("tr(1e5*A@X)**2 - (1e5*A:X.T)**2 + tr(B@X)", "X", None, True),
    ("tr(1e7*A@X)**2 - (1e7*A:X.T)**2 + tr(B@X)", "X", None, False),
    # eps·1e10/h is 10⁻² at h = 1e-6: any gradient passed; at h = 1e-2 it is 10⁻⁸
    ("1e10 + w.T@x", "x", None, True),
    ("1e14 + w.T@x", "x", None, False),
    # the floor 1e-4·max(1, |λ|) hid small gradients: det(0.01X) at 6×6 (about 1e-10), 1e-8·XᵀX
    ("det(0.01*X)", "X", None, True),
    ("1e-8*sum(X*X)", "X", None, True),
])
@pytest.mark.parametrize("wrong", [lambda g: -g, lambda g: 1.01 * g, lambda g: np.zeros_like(g)])
def test_a_wrong_gradient_never_passes_where_the_differences_measure_nothing(expr, wrt, shapes, measurable, wrong):
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    real = d._check_function
    d.__dict__["_check_function"] = lambda **kw: wrong(np.asarray(real(**kw)))
    assert not d.check().ok
    d.__dict__["_check_function"] = real
    report = d.check()
    assert report.ok if measurable else str(report).startswith("check cannot be made"), str(report)


def test_rounding_that_no_small_step_shows_fails_no_true_gradient():
    # logsumexp(X) − logsumexp(Xᵀ) is 0 up to its rounding, which steps of a few units in the last
    # place do not move: the true gradient (1e-6 everywhere) FAILED at 1.3e-4
    d = matcalc.derive("logsumexp(X) - logsumexp(X.T) + 1e-6*sum(X)", wrt="X")
    report = d.check()
    assert report.ok and "λ's rounding let this check see" in report.message
    real = d._check_function
    for wrong in (lambda g: 1.01 * g, lambda g: -g):
        d.__dict__["_check_function"] = lambda **kw: wrong(np.asarray(real(**kw)))
        assert not d.check().ok


def test_a_check_coarser_than_its_tolerance_says_so():
    # terms of 10⁵ cancel: λ's rounding lets the differences see about 0.1% of Bᵀ, not 1e-5
    d = matcalc.derive("tr(300*A@X)**2 - (300*A:X.T)**2 + tr(B@X)", wrt="X")
    report = d.check()
    assert report.ok and "λ's rounding let this check see relative errors above" in report.message
    real = d._check_function
    d.__dict__["_check_function"] = lambda **kw: 1.01 * np.asarray(real(**kw))
    assert not d.check().ok


@pytest.mark.parametrize("expr", ["logdet(X.T@X)", "tr(inv(X.T@X))"])
def test_the_numerical_check_tries_other_values_of_one_free_size(expr):
    # with d fixed at 3 there is no other order, and XᵀX is singular for every m > 3: it FAILED
    # (logdet) or could not be made (inv)
    d = matcalc.derive(expr, wrt="X", shapes={"X": ("d", "m")})
    report = d.check(sizes={"d": 3})
    assert report.ok and report.sizes["d"] == 3 and report.sizes["m"] < 3 and report.max_rel_error < 1e-6


def test_the_exact_check_tries_other_values_of_one_free_size():
    # with m fixed there is no other order: d = 2 made X wide, XᵀX singular for every value
    d = matcalc.derive("logdet(X.T@X)", wrt="X", shapes={"X": ("d", "m")})
    exact = d.check(sizes={"m": 3}, exact=True)
    assert exact.ok and exact.sizes["d"] > 3


def test_a_pass_at_exchanged_sizes_must_test_something():
    # AXB singular at the first sizes; the exchange found a draw where everything was 0 and passed
    d = matcalc.derive("det(A@X@B)", wrt="X", shapes={"A": ("n", "p"), "X": ("p", "m"), "B": ("m", "n")})
    report = d.check()
    assert report.ok and "zero on every draw" not in report.message
    assert report.sizes["n"] < min(report.sizes["p"], report.sizes["m"])


def test_a_product_singular_in_both_orders_of_the_sizes_is_checked_at_a_third():
    # A n×p, X p×m, B m×n: AXB has rank min(n, p, m), so it is singular unless n is the
    # smallest size; the declared sizes draw p smallest, and so does their reverse
    d = matcalc.derive("logdet(A@X@B)", wrt="X", shapes={"A": ("n", "p"), "X": ("p", "m"), "B": ("m", "n")})
    report = d.check()
    assert report.ok and report.sizes["n"] < min(report.sizes["p"], report.sizes["m"])
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "logdet(A@X@B)", "--wrt", "X", "--shape",
                        "A=n,p", "--shape", "X=p,m", "--shape", "B=m,n", "--check"], capture_output=True, text=True)
    assert r.returncode == 0 and "check ok" in r.stdout


def test_a_wrong_gradient_fails_at_both_sizes(monkeypatch):
    # a gradient off by a factor everywhere is reported as the failure at the first sizes
    d = matcalc.derive("det(X.T@X)", wrt="X")
    real = d._check_function
    monkeypatch.setattr(d, "_check_function", lambda **kw: 1.5 * real(**kw))
    report = d.check()
    assert not report.ok
    # where det(XᵀX) ≡ 0 (X 3×4) its differences are zero, and the failure is measured at 4×3
    assert report.sizes == {"a": 3, "b": 4} or re.search("a=3, b=4 the (finite differences were λ's rounding|"
                                                         "gradient and the finite differences were zero)",
                                                         report.message)


def test_a_gradient_wrong_only_at_the_first_sizes_fails_where_nothing_is_inverted():
    # no inverse or determinant in λ: a failure at the first sizes is a failure (the retry at
    # swapped sizes is for products such as XᵀX that are singular at some sizes)
    d = matcalc.derive("sum(X)", wrt="X", shapes={"X": ("a", "b")})
    d.__dict__["_check_function"] = lambda X: np.ones_like(X) + 5 * np.ones_like(X) @ (
        np.eye(X.shape[1]) - np.linalg.pinv(X) @ X)  # wrong only where X is wide
    report = d.check()
    assert not report.ok
    # where det(XᵀX) ≡ 0 (X 3×4) its differences are rounding noise, and the failure is measured at 4×3
    assert report.sizes == {"a": 3, "b": 4} or "a=3, b=4 the finite differences were λ's rounding" in report.message


def test_a_gradient_that_meets_a_singular_matrix_on_every_draw_says_so():
    d = matcalc.derive("sum(X)", wrt="X")

    def singular(**kw):
        raise np.linalg.LinAlgError("Singular matrix")

    d.__dict__["_check_function"] = singular
    report = d.check()
    assert not report.ok and "singular matrix on every draw" in report.message


@pytest.mark.parametrize("expr, wrt", [("det(matrix_power(A@B, 5))", "A"), ("logdet(A@sign(B))", "A"),
                                       ("tr(inv(A@sign(B)))", "A")])
def test_factors_of_a_product_under_an_inverse_are_drawn_gaussian(expr, wrt):
    # all-positive factors make A@B nearly rank one: a false FAIL, or no finite draw at all
    report = matcalc.derive(expr, wrt=wrt).check()
    assert report.ok, str(report)


def test_a_check_that_compares_nothing_says_it_cannot_be_made():
    report = matcalc.derive("det(x@x.T)", wrt="x").check()  # det(xxᵀ) is 0 for every x
    assert not report.ok and str(report).startswith("check cannot be made")


@pytest.mark.parametrize("expr, wrt, kind", [
    ("1000 + 0*sum(X)", "X", "derive"),            # λ's rounding over h = 1e-6 is 7e-10: above 1e-12
    ("tr(A) + 1e6*tr(B) + 0*sum(X)", "X", "derive"),
    ("1e3*tr(A@X)", "X", "hessian"),               # a constant gradient of 10³: its Hessian is 0
])
def test_a_zero_derivative_of_a_large_constant_is_zero(expr, wrt, kind):
    # zero differences of a large λ say nothing at small steps (1e15 + wᵀx has them too); over a
    # step long enough for λ's rounding over it to be 1e-12 a constant still does not change
    report = getattr(matcalc, kind)(expr, wrt).check()
    assert report.ok and report.max_rel_error == 0.0, str(report)


def test_zero_differences_of_a_changing_lambda_are_not_zero():
    # 1e15 + wᵀx: wᵀx's changes over small steps are below λ's rounding, so its differences are 0
    # and a zero gradient matched them ("zero on every draw"); a λ that reads w may change with it
    for expr in ("1e15 + w.T@x", "1e15 + 1e-3*w.T@x", "1e15 + 0.1*tanh(w.T@x)", "1e16 + sum(abs(x))",
                 "1e12 + logdet(X)", "(1e14 + x:x)**2"):
        wrt = "X" if "X" in expr else "x"
        d = matcalc.derive(expr, wrt=wrt)
        d.__dict__["_check_function"] = lambda **kw: np.zeros(np.shape(kw[wrt]))
        assert not d.check().ok, expr
    m = matcalc.hessian("1e15*sum(x) + sum(x*x*x)", "x")  # the gradient's rounding hides 6·x
    m.__dict__["matrix"] = lambda **kw: np.zeros((len(kw["x"]),) * 2)
    m.__dict__["hvp"] = lambda V, **kw: np.zeros(np.shape(V))
    assert not m.check().ok


def test_longer_steps_never_fail_a_true_gradient():
    # differences over long steps can agree with each other far from the derivative of a λ that
    # oscillates faster than the step: the true gradient of 1e12 + sin(500α) FAILED at 2e-2
    # (and sin(1e8·b) FAILED at 4e-3, sin(1e15·b) at 1: differences over 1e-6 that do not settle
    # as the step shrinks measure nothing)
    for expr in ("1e12 + sin(500*alpha)", "1e12 + sin(314*alpha)", "1e10 + sum(relu(x))",
                 "sum(sin(1e8*x))", "sum(sin(1e10*x))", "sum(sin(1e15*x))", "sum(cos(1e300*x))"):
        report = matcalc.derive(expr, "x" if "x)" in expr else "alpha").check()
        assert report.ok or str(report).startswith("check cannot be made"), (expr, str(report))


def test_products_against_the_dense_map_are_held_to_its_scale():
    # the products take no differences: a product 2% off passed where f's rounding was large
    # and a zero map's products to the rounding of f (about 2 for the gradient 1e16 + x): +1e6 passed
    for kind, expr, wrt, product, off in [("hessian", "1e12*sum(x) + sum(exp(x))", "x", "hvp", 0.0),
                                          ("jacobian", "1e12 + exp(X)", "X", "jvp", 0.0),
                                          ("jacobian", "1e12 + exp(X)", "X", "vjp", 0.0),
                                          ("hessian", "1e16*sum(w) + w.T@x", "w", "hvp", 1e3)]:
        m = getattr(matcalc, kind)(expr, wrt)
        right = getattr(m, product)
        m.__dict__[product] = lambda V, _r=right, _off=off, **kw: 1.02 * np.asarray(_r(V, **kw)) + _off
        assert not m.check().ok, (expr, product)


def test_a_longer_steps_truncation_and_aliasing_count_from_the_start():
    # over a step of 1e-2 the differences of 1/p at p near 0.08 are 1% off, and a gradient
    # 1.5% off passed; a sine whose period is the step is invisible to it and to twice it
    d = matcalc.derive("1e12 + logdet(Diag(p))", "p")
    real = d._check_function
    d.__dict__["_check_function"] = lambda **kw: 1.015 * np.asarray(real(**kw))
    assert not any(d.check(seed=seed).ok for seed in range(12))
    d = matcalc.derive("1e10 + 5e-4*sin(628.318*alpha) + alpha", "alpha")
    d.__dict__["_check_function"] = lambda **kw: 1.0  # (the sine's derivative left out)
    assert not d.check().ok


def test_the_cli_takes_the_domains_the_check_needs():
    # a log barrier is not finite on normal draws: --domain says where to draw, as check(domain=)
    def cli(*argv):
        return subprocess.run([sys.executable, "-m", "matcalc", *argv], capture_output=True, text=True)

    barrier = ["-sum(log(b - A@x))", "--wrt", "x", "--check"]
    where = ["--domain", "b=positive", "--domain", "x=small", "--domain", "A=small"]
    for command in ("derive", "hessian"):
        r = cli(command, *barrier)
        assert r.returncode == 2 and "--domain NAME=KIND" in r.stdout + r.stderr
        r = cli(command, *barrier, *where)
        assert r.returncode == 0 and "check ok" in r.stdout
    r = cli("jacobian", "log(b - A@x)", "--wrt", "x", "--check", *where)
    assert r.returncode == 0 and "check ok" in r.stdout
    r = cli("derive", "sum(log(x))", "--wrt", "x", "--check", "--domain", "x=postive")
    assert r.returncode == 2 and "unknown domain 'postive' for x" in r.stderr
    r = cli("derive", "sum(log(x))", "--wrt", "x", "--check", "--domain", "x")
    assert r.returncode == 2 and "--domain takes NAME=KIND" in r.stderr
