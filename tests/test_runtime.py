"""matcalc.runtime: the helpers of emitted code as an importable module.  The emitted text of
each helper is that module's text; forms chosen by timing give the same numbers whichever
is chosen, and never write into their arguments."""
import ast
import inspect
import time

import numpy as np
import pytest

import matcalc
from matcalc import codegen, runtime

SIZES = (1, 3, 64, 250, 256, 257, 500, 511, 512, 724, 1000, 1023, 1024)


def test_helpers_are_the_text_of_the_runtime_module():
    text = inspect.getsource(runtime)
    for name, src in codegen.HELPERS.items():
        assert src in text, name
        tree = ast.parse(src)
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert name in defined, name
        for f in defined:  # each function is the module's own, byte for byte
            assert inspect.getsource(getattr(runtime, f)).strip("\n") in src


def test_every_runtime_function_is_in_some_helper_block():
    funcs = {n for n, v in vars(runtime).items() if inspect.isfunction(v) and v.__module__ == runtime.__name__}
    emitted = set()
    for src in codegen.HELPERS.values():
        emitted |= {n.name for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)}
    assert funcs == emitted


def test_helpers_name_every_helper_they_call():
    """A block that calls another helper lists it (``needs:``), so the emitted module has it."""
    names = {}
    for h, src in codegen.HELPERS.items():
        for n in ast.parse(src).body:
            names[n.name if isinstance(n, ast.FunctionDef) else n.targets[0].id] = h
    for h, src in codegen.HELPERS.items():
        called = {n.id for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name) and n.id in names}
        needed = {names[c] for c in called} - {h}
        assert needed <= set(codegen.helper_closure([h])), (h, needed)


def test_emitted_outer_product_module_runs_standalone():
    d = matcalc.derive("a:(W@x)", wrt="W", shapes={"W": ("m", "n"), "a": ("m",), "x": ("n",)})
    src = d.numpy_source
    assert "def _pick(" in src and "def _outer(" in src
    ns = {}
    exec(compile(src, "<emitted>", "exec"), ns)  # noqa: S102 - matcalc's own output
    a, x = np.arange(3.0), np.arange(4.0) - 1.5
    assert np.array_equal(ns["grad_W"](a=a, x=x, W=np.zeros((3, 4))), np.outer(a, x))


def _fresh(names):
    """A private copy of runtime's helpers (their own _PICKED cache)."""
    ns = {"np": np}
    for h in codegen.helper_closure(names):
        exec(compile(codegen.HELPERS[h], "<helpers>", "exec"), ns)  # noqa: S102
    return ns


def test_pick_keeps_the_default_unless_another_form_is_clearly_faster():
    ns = _fresh(["_pick"])
    calls = []

    def slow(x):
        calls.append("slow")
        time.sleep(0.002)
        return x + 1.0

    def fast(x):
        calls.append("fast")
        return x + 1.0

    x = np.arange(3.0)
    assert np.array_equal(ns["_pick"]("k1", (slow, fast), x), x + 1.0)
    assert ns["_PICKED"]["k1"] is fast
    assert "slow" in calls and "fast" in calls
    calls.clear()
    ns["_pick"]("k1", (slow, fast), x)
    assert calls == ["fast"]  # cached: one call of the chosen form
    ns["_pick"]("k2", (fast, slow), x)
    assert ns["_PICKED"]["k2"] is fast  # the default was faster
    # equal forms: the default stays (another must be 10% faster)
    ns["_pick"]("k3", (slow, slow), x)
    assert ns["_PICKED"]["k3"] is slow


def test_pick_times_a_slow_operation_once_after_its_warm_up():
    ns = _fresh(["_pick"])
    calls = []

    def form(tag, seconds):
        def f():
            calls.append(tag)
            time.sleep(seconds)
            return 1.0
        return f

    forms = (form("a", 0.03), form("b", 0.01))
    assert ns["_pick"]("slow", forms) == 1.0
    assert calls == ["a", "b", "a", "b"] and ns["_PICKED"]["slow"] is forms[1]


def _timed_forms(cost):
    """Two forms a and b whose run time is cost[name] seconds (changed by the test), each
    logging its calls."""
    calls = []

    def form(tag):
        def f(x):
            calls.append(tag)
            time.sleep(cost[tag])
            return x + 1.0
        return f

    return (form("a"), form("b")), calls


def test_a_choice_made_under_passing_load_is_undone_at_a_later_check():
    ns = _fresh(["_pick"])
    cost = {"a": 0.002, "b": 0.0}  # a is slow now (as if other processes held the CPU)
    forms, calls = _timed_forms(cost)
    x = np.arange(3.0)
    ns["_pick"]("k", forms, x)
    assert ns["_PICKED"]["k"] is forms[1]
    cost.update(a=0.0, b=0.002)  # the load moved: now b is the slow one
    for n in range(20 * ns["_EVERY"]):
        calls.clear()
        assert np.array_equal(ns["_pick"]("k", forms, x), x + 1.0)
        assert len(calls) == 1  # every later call runs exactly one form
        if ns["_PICKED"]["k"] is forms[0]:
            break
    assert ns["_PICKED"]["k"] is forms[0]
    assert n < 16 * ns["_EVERY"]  # by the third check


def test_a_much_slower_form_is_timed_every_fourth_check_only():
    ns = _fresh(["_pick"])
    forms, calls = _timed_forms({"a": 0.0, "b": 0.004})  # b: more than 4x slower
    x = np.arange(3.0)
    ns["_pick"]("k", forms, x)
    calls.clear()
    every, n = ns["_EVERY"], 0
    for spacing in (1, 2, 4, 8):  # checks after E, 2E, 4E and 8E more calls (E = _EVERY)
        n += spacing * every
    for _ in range(n + 1):
        ns["_pick"]("k", forms, x)
    assert calls.count("b") == 1  # at the fourth check


def test_checks_get_rarer_while_the_choice_stands():
    ns = _fresh(["_pick"])
    cost = {"a": 0.0, "b": 0.003}
    forms, calls = _timed_forms(cost)
    x = np.arange(3.0)
    ns["_pick"]("k", forms, x)
    calls.clear()
    n = 40 * ns["_EVERY"]
    for _ in range(n):
        ns["_pick"]("k", forms, x)
    assert ns["_PICKED"]["k"] is forms[0]
    # checks after E, 2E, 4E, 8E, 16E more calls (+ the checks' own calls): b ran 5 times
    assert calls.count("b") <= 6 and len(calls) == n


def test_calls_from_several_threads_share_the_choices_safely():
    """Checks run in whichever thread's call is due; no thread ever finds the state half
    written (each call still returns its own correct result)."""
    from concurrent.futures import ThreadPoolExecutor

    ns = _fresh(["_outer"])
    ns["_EVERY"] = 1  # a check on almost every call: the most interleaving
    rng = np.random.default_rng(11)
    pairs = [(rng.standard_normal(m), rng.standard_normal(n)) for m, n in ((3, 5), (40, 7), (64, 64))]

    def work(i):
        u, v = pairs[i % len(pairs)]
        for _ in range(200):
            if not np.array_equal(ns["_outer"](u, v), np.outer(u, v)):
                return False
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(12)))


def test_a_shape_that_keeps_changing_gets_the_plain_form_untimed():
    ns = _fresh(["_pick"])
    forms, calls = _timed_forms({"a": 0.0, "b": 0.0})
    cap = ns["_TIMED_SHAPES"]
    for n in range(1, cap + 15):
        calls.clear()
        ns["_pick"](("op", n), forms, np.zeros(n))
        if n > cap:
            assert calls == ["a"]  # one call of forms[0]
        else:
            assert len(calls) >= 4  # warmed up and timed
    assert ns["_PICKED"][("op", cap + 14)] is forms[0] and ("op", cap + 14) not in ns["_DUE"]
    assert len(ns["_DUE"]) == cap  # the first shapes were timed
    calls.clear()
    ns["_pick"](("other", 5), forms, np.zeros(5))  # another operation is timed as usual
    assert len(calls) >= 4


def test_a_fixed_choice_is_never_checked():
    ns = _fresh(["_pick"])
    forms, calls = _timed_forms({"a": 0.0, "b": 0.0})
    ns["_PICKED"]["k"] = forms[1]
    for _ in range(5 * ns["_EVERY"]):
        ns["_pick"]("k", forms, 1.0)
    assert set(calls) == {"b"}


@pytest.mark.parametrize("form", [0, 1, 2, 3], ids=["broadcast", "einsum", "blas", "threads"])
def test_every_outer_form_equals_numpy_outer_bit_for_bit(form):
    ns = _fresh(["_outer"])
    rng = np.random.default_rng(3)
    for m in SIZES:
        n = SIZES[(SIZES.index(m) + 3) % len(SIZES)]  # another size, so a transpose shows
        u, v = rng.standard_normal(m), rng.standard_normal(n)
        u0, v0 = u.copy(), v.copy()
        ns["_PICKED"][("outer", m, n)] = ns["_OUTER_FORMS"][form]
        got = ns["_outer"](u, v)
        assert got.shape == (m, n)
        assert np.array_equal(got, np.outer(u, v)), (m, n)
        assert np.array_equal(u, u0) and np.array_equal(v, v0)  # arguments never overwritten


def test_outer_product_timed_once_per_shape_and_then_cached():
    ns = _fresh(["_outer"])
    u, v = np.ones(7), np.arange(5.0)
    for _ in range(3):
        assert np.array_equal(ns["_outer"](u, v), np.outer(u, v))
    assert set(ns["_PICKED"]) == {("outer", 7, 5)}
    ns["_outer"](v, u)
    assert set(ns["_PICKED"]) == {("outer", 7, 5), ("outer", 5, 7)}


def test_threaded_outer_product_on_one_cpu_and_with_short_vectors():
    ns = _fresh(["_outer"])
    rng = np.random.default_rng(5)
    for m, n in ((1, 4), (2, 3), (5, 1), (300, 7)):
        u, v = rng.standard_normal(m), rng.standard_normal(n)
        assert np.array_equal(ns["_outer_split"](u, v), np.outer(u, v))
    ns["_POOL"] = False  # as on a single CPU
    u, v = rng.standard_normal(9), rng.standard_normal(4)
    assert np.array_equal(ns["_outer_split"](u, v), np.outer(u, v))


def test_threaded_outer_product_does_not_wait_for_a_pool_thread_that_never_started():
    """A busy CPU keeps the pool thread from starting (here: it is held by another job): the
    calling thread computes every block and returns; the late thread finds nothing to do."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    ns = _fresh(["_outer"])
    release = threading.Event()
    pool = ThreadPoolExecutor(1)
    ns["_POOL"] = (pool, 1)
    held = pool.submit(release.wait)  # the only pool thread, busy until released
    rng = np.random.default_rng(12)
    u, v = rng.standard_normal(301), rng.standard_normal(7)
    result = {}
    caller = threading.Thread(target=lambda: result.update(out=ns["_outer_split"](u, v)))
    caller.start()
    caller.join(timeout=30)
    finished = not caller.is_alive()
    release.set()  # (lets a waiting caller finish, should it have waited)
    caller.join()
    held.result()
    assert finished, "the call waited for a pool thread that had not started"
    assert np.array_equal(result["out"], np.outer(u, v))
    out = result["out"].copy()
    pool.shutdown(wait=True)  # the late job ran now, and wrote nothing
    assert np.array_equal(result["out"], out)


def _blas_ns():
    ns = _fresh(["_blas_threads"])
    if ns["_thread_setter"]() is None:
        pytest.skip("NumPy's BLAS has no openblas_set_num_threads_local (OpenBLAS < 0.3.27 or not OpenBLAS)")
    return ns


def test_one_blas_thread_form_agrees_and_restores_the_thread_setting():
    ns = _blas_ns()
    setter = ns["_thread_setter"]()
    rng = np.random.default_rng(6)
    A, x = rng.standard_normal((300, 200)), rng.standard_normal(200)

    def grad(*, A, x):
        return A.T.dot(A.dot(x))

    wrapped = ns["_blas_threads"](grad, ("A",))
    assert wrapped.__wrapped__ is grad and wrapped.__name__ == "grad"
    ref = grad(A=A, x=x)
    np.testing.assert_allclose(wrapped(A=A, x=x), ref, rtol=1e-12)
    key = next(k for k in ns["_PICKED"] if k[0] is wrapped)
    assert set(key[1:]) == {(300, 200)}  # the shapes of the arguments named
    before = setter(0)
    setter(before)
    ns["_pick"] = lambda key, forms, *a, **kw: forms[1](*a, **kw)  # the one-thread form
    ns["_PICKED"].clear()
    ns["_DUE"].clear()
    np.testing.assert_allclose(wrapped(A=A, x=x), ref, rtol=1e-12)
    assert setter(before) == before  # the calling thread's setting is back


def test_blas_threads_without_the_setter_is_the_function_itself():
    ns = _fresh(["_blas_threads"])
    ns["_THREADS"] = False  # as with a BLAS other than OpenBLAS >= 0.3.27

    def f(*, A):
        return A

    assert ns["_blas_threads"](f, ("A",)) is f


def test_emitted_functions_with_products_choose_their_blas_threads():
    d = matcalc.derive("G:exp(X@W)", wrt="X", shapes={"G": ("n", "m"), "X": ("n", "d"), "W": ("d", "m")})
    src = d.numpy_source
    assert src.rstrip().endswith("grad_X = _blas_threads(grad_X, ('G', 'X',))"), src[-200:]
    rng = np.random.default_rng(8)
    G, X, W = rng.standard_normal((5, 3)), rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    np.testing.assert_allclose(d.function(G=G, X=X, W=W), (G * np.exp(X @ W)) @ W.T, rtol=1e-13)
    # no product, no wrapper
    assert "_blas_threads" not in matcalc.derive("sum(exp(x)*y)", wrt="y").numpy_source.split("def grad_y")[1]


def test_the_check_runs_fixed_forms():
    # the check's figures are the same on every run: its functions never pick a form by
    # timing (max_rel_error differed in its 7th digit between runs under load)
    d = matcalc.derive("0.5*(tr(S) + mu.T@mu - logdet(S))", wrt="S", shapes={"mu": ("n",)})
    rng = np.random.default_rng(1)
    R = rng.standard_normal((4, 4))
    S, mu = R @ R.T + 4 * np.eye(4), rng.standard_normal(4)
    for f in (d._check_function, d.value_function):
        f(S=S, mu=mu)
        ns = f.emitted.__globals__
        assert ns["_TIMED_SHAPES"] == 0 and ns["_PICKED"] and not ns["_DUE"]  # (no _DUE: fixed, untimed)
    assert d.check().to_dict() == d.check().to_dict()
    d.function(S=S, mu=mu)  # the user's function still picks by timing
    assert d.function.emitted.__globals__["_TIMED_SHAPES"] > 0
    h = matcalc.hessian("0.5*(tr(S) + mu.T@mu - logdet(S))", "S", shapes={"mu": ("n",)})
    fixed = h.with_fixed_forms()
    assert fixed._gf.emitted.__globals__["_TIMED_SHAPES"] == 0 and fixed.gradient_function.emitted.__globals__[
        "_TIMED_SHAPES"] == 0
    assert h._gf.emitted.__globals__["_TIMED_SHAPES"] > 0  # the user's functions are untouched
    assert h.check().to_dict() == h.check().to_dict() and h.check().ok


def test_fixed_forms_give_the_same_bits_on_every_call():
    # the forms picked by timing agree to rounding only: 196 of 200 calls of this gradient at
    # n = 300 differed from the first in the last bits; MATCALC_FIXED_FORMS=1 keeps one form
    import subprocess
    import sys

    code = """if True:
        import numpy as np, matcalc
        rng = np.random.default_rng(0)
        n = 300
        X, S = rng.normal(size=(n, n)) + n ** 0.5 * np.eye(n), rng.normal(size=(n, n))
        f = matcalc.derive("logdet(X) - tr(inv(X)@S)", wrt="X").function
        first = f(X=X, S=S)
        print(sum(not np.array_equal(f(X=X, S=S), first) for _ in range(60)))
        """
    import os

    env = dict(os.environ, MATCALC_FIXED_FORMS="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stdout + r.stderr


@pytest.mark.parametrize("expr, numpy", [("sum(x**4)/4", lambda x: np.power(x, 3.0)),
                                          ("sum(x**5)/5", lambda x: np.power(x, 4.0)),
                                          ("-sum(x**-1)", lambda x: np.power(x, -2.0)),
                                          ("2*sum(x**0.5)", lambda x: np.power(x, -0.5))])
def test_whole_and_half_powers_without_np_power_agree_with_it(expr, numpy):
    # x**3, x**4, x**-2, x**-0.5 are emitted as products and quotients (np.power took 4-8 times as long)
    x = np.array([0.0, 1e-150, 3.0, 0.7, 1e100, np.inf, np.nan, 2.5])
    X = np.abs(np.random.default_rng(1).standard_normal((5, 7))) + 0.1
    d = matcalc.derive(expr, "x")
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(d.function(x=x), numpy(x), rtol=1e-15)
        np.testing.assert_allclose(matcalc.derive(expr.replace("x", "X"), "X").function(X=X), numpy(X), rtol=1e-15)
    assert "np.power(" not in d.numpy_source


@pytest.mark.parametrize("helper, k", [("_cube", 3.0), ("_fourth", 4.0), ("_inv_square", -2.0), ("_inv_sqrt", -0.5)])
def test_power_helpers_give_np_powers_values_at_the_ends_of_the_floats(helper, k):
    """Zeros of both signs, subnormal results (1.3e155**-2), overflow, inf, nan, negatives:
    the value np.power gives (to 2 ulp), for an array, a 0-d array and a Python float."""
    f = getattr(runtime, helper)
    x = np.array([0.0, -0.0, 1e-150, 1e-160, 1.3e155, 1e100, 3.7, -2.5, 0.5, np.inf, -np.inf, np.nan])
    if k == -0.5:  # (C's pow(-inf, -0.5) is 0, sqrt(-inf) nan, as at every other negative; at -0.0 the
        x = x[(x != -np.inf) & ~((x == 0) & np.signbit(x))]  # helper gives -inf, np.power inf: README, Limits)
    with np.errstate(all="ignore"):
        want = np.power(x, k)
        got = f(x.copy())
        np.testing.assert_allclose(got, want, rtol=5e-16, atol=0)
        assert np.array_equal(np.signbit(got[want == want]), np.signbit(want[want == want]))  # (inf, not -inf)
        for v in x:
            np.testing.assert_allclose(f(float(v)), np.power(v, k), rtol=5e-16, atol=0)
            np.testing.assert_allclose(f(np.array(v)), np.power(v, k), rtol=5e-16, atol=0)


def test_sigmoid_is_scipy_s_expit_and_the_same_without_scipy(monkeypatch):
    import sys

    from matcalc import runtime

    z = np.array([-745.0, -700.0, -40.0, -1.0, 0.0, 2.0, 40.0, 700.0])
    exact = np.array([0.0, np.exp(-700.0), np.exp(-40.0) / (1 + np.exp(-40.0)), 1 / (1 + np.e), 0.5,
                      1 / (1 + np.exp(-2.0)), 1.0, 1.0])
    monkeypatch.setattr(runtime, "_EXPIT", [None])
    with_scipy = runtime._sigmoid(z)
    monkeypatch.setattr(runtime, "_EXPIT", [None])
    monkeypatch.setitem(sys.modules, "scipy.special", None)  # (import scipy.special raises ImportError)
    without = runtime._sigmoid(z)
    for got in (with_scipy, without):
        np.testing.assert_allclose(got[1:], exact[1:], rtol=4e-16, atol=0)
        assert 0.0 <= got[0] < 1e-320


def test_a_chain_is_multiplied_in_its_cheapest_order():
    # _chain against the optimum of the classic dynamic programme, counting multiplications
    import itertools

    flops = [0]

    class Spy(np.ndarray):
        def dot(self, other):
            a, b = np.asarray(self), np.asarray(other)
            m = a.shape[0] if a.ndim == 2 else 1
            n = b.shape[1] if b.ndim == 2 else 1
            flops[0] += m * a.shape[-1] * n
            return a.dot(b).view(Spy)

    def best(p):
        n = len(p) - 1
        cost = {(i, i): 0 for i in range(n)}
        for length in range(2, n + 1):
            for i in range(n - length + 1):
                j = i + length - 1
                cost[i, j] = min(cost[i, k] + cost[k + 1, j] + p[i] * p[k + 1] * p[j + 1] for k in range(i, j))
        return cost[0, n - 1]

    rng = np.random.default_rng(7)
    for p in itertools.chain(itertools.product([1, 3, 40], [2, 40], [5, 30], [1, 20]),
                             itertools.product([1, 9], [2, 40], [50, 3], [4, 60], [1, 6])):
        fs = [rng.standard_normal((p[i], p[i + 1])) for i in range(len(p) - 1)]
        if p[0] == 1:
            fs[0] = fs[0][0]
        if p[-1] == 1:
            fs[-1] = fs[-1][:, 0]
        flops[0] = 0
        got = runtime._chain(*[f.view(Spy) for f in fs])
        want = fs[0]
        for f in fs[1:]:
            want = want @ f
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
        if len(fs) <= 4:  # (longer chains are np.linalg.multi_dot's)
            assert flops[0] == best(list(p)), p
