"""Soundness of Hessians and Jacobians on random expressions (tests/exprgen.py, which knows
nothing about matcalc): dense matrices against differences of the generator's own NumPy
evaluation, the matrix-free products against the dense matrices, and symmetry of every
Hessian.

    MATCALC_SOUNDNESS_EXAMPLES=2000 pytest tests/test_second_order_soundness.py
"""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings, strategies as st

matcalc = pytest.importorskip("matcalc")

try:  # the generator's home: tests/support/ (tests/ in older layouts)
    from support import exprgen  # noqa: E402
except ImportError:
    import exprgen  # noqa: E402
expressions = exprgen.expressions

EXAMPLES = max(1, int(os.environ.get("MATCALC_SOUNDNESS_EXAMPLES", "200")) // 5)

SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def vec(a):
    return np.reshape(np.asarray(a, dtype=float), -1, order="F")


def unvec(v, shape):
    return v.reshape(shape, order="F") if shape else float(v[0])


def rel(a, b, floor=0.0):
    a, b = np.asarray(a, float), np.asarray(b, float)
    scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)), floor, 1e-12)
    return float(np.max(np.abs(a - b), initial=0.0)) / scale


def second_difference(f, inputs, w, U, V, h):
    """Uᵀ H V from four values of f (central, O(h²))."""
    x = vec(inputs[w])
    shape = np.shape(inputs[w])

    def at(d):
        return f(**dict(inputs, **{w: unvec(x + d, shape)}))

    return (at(h * (U + V)) - at(h * (U - V)) - at(h * (V - U)) + at(-h * (U + V))) / (4 * h * h)


def _arrays_ok(*arrays):
    return all(np.all(np.isfinite(np.asarray(a, float))) for a in arrays)


@SETTINGS
@given(case=expressions(max_depth=4), seed=st.integers(0, 2**32 - 1))
def test_hessians_match_second_differences_and_are_symmetric(case, seed):
    note(f"expr = {case.expr}\nnumpy = {case.numpy_src}\nshapes = {case.shapes}")
    rng = np.random.default_rng(seed)
    inputs = case.draw_inputs(rng)
    f0 = case.f(**inputs)
    if not np.isfinite(f0):
        return
    for w in case.wrt:
        h = matcalc.hessian(case.expr, w, shapes=case.shapes)
        note(f"wrt {w}: H[d{w}] = {h.text}; vec form {h.kron}")
        with np.errstate(all="ignore"):
            H = h.matrix(**inputs)
        n = vec(inputs[w]).size
        assert H.shape == (n, n)
        if not _arrays_ok(H):
            continue  # a pole of a derivative the generator did not guard (1/x at x≈0)
        scale = max(float(np.max(np.abs(H))), 1e-8 * max(1.0, abs(f0)))
        assert float(np.max(np.abs(H - H.T))) <= 1e-8 * scale, "the dense Hessian is not symmetric"
        # the matrix-free product against the dense matrix, and ⟨U, H[V]⟩ = ⟨H[U], V⟩
        U, V = rng.standard_normal(n), rng.standard_normal(n)
        hv = vec(h.hvp(unvec(V, np.shape(inputs[w])), **inputs))
        hu = vec(h.hvp(unvec(U, np.shape(inputs[w])), **inputs))
        tiny = 1e-10 * max(1.0, abs(f0)) * np.abs(V).sum()
        assert np.max(np.abs(hv - H @ V)) <= 1e-9 * scale * np.abs(V).sum() + tiny
        assert abs(U @ hv - hu @ V) <= (1e-9 * scale + 1e-10 * max(1.0, abs(f0))) * np.abs(U).sum() * np.abs(V).sum()
        # the dense matrix against second differences of the generator's own λ
        for _ in range(3):
            U, V = rng.standard_normal(n), rng.standard_normal(n)
            U, V = U / np.linalg.norm(U), V / np.linalg.norm(V)
            want = U @ H @ V
            ok = False
            for step in (1e-4, 1e-3, 3e-3):
                fd = second_difference(case.f, inputs, w, U, V, step)
                noise = 4e-16 * max(1.0, abs(f0)) / step ** 2
                if abs(fd - want) <= 1e-4 * max(abs(fd), abs(want), scale) + 10 * noise:
                    ok = True
                    break
            assert ok, f"wrt {w}: Uᵀ H V = {want}, second differences {fd}"


@st.composite
def array_cases(draw):
    """A vector- or matrix-valued expression from the generator, with its NumPy value."""
    g = exprgen._Gen(exprgen._DrawChooser(draw), max_depth=3)
    if draw(st.booleans()):
        ty = exprgen.col(g.dim())
    else:
        ty = exprgen.mat(g.dim(), g.dim())
    node = g.composite(ty, 2)
    if not node.syms:
        node = exprgen.add(node, g.symbol(ty))
    shapes, domains = {}, {}
    for name, shape, domain in sorted(node.decls):
        shapes[name], domains[name] = shape, domain
    return node, shapes, domains


def _evaluate(src, shapes, inputs):
    env = dict(exprgen._HELPERS)
    env["_n"] = exprgen._dim_sizes(shapes, inputs)
    env.update(inputs)
    with np.errstate(all="ignore"):
        return np.asarray(eval(src, env), dtype=float)  # noqa: S307 - the generator's NumPy source


@settings(SETTINGS, max_examples=max(1, EXAMPLES))
@given(case=array_cases(), seed=st.integers(0, 2**32 - 1))
def test_jacobians_match_differences_and_products(case, seed):
    node, shapes, domains = case
    note(f"F = {node.text}\nnumpy = {node.src}\nshapes = {shapes}")
    rng = np.random.default_rng(seed)
    inputs = exprgen.draw_inputs(shapes, domains, rng)
    F0 = _evaluate(node.src, shapes, inputs)
    if not _arrays_ok(F0):
        return
    for w in sorted(shapes):
        j = matcalc.jacobian(node.text, w, shapes=shapes)
        note(f"wrt {w}: dF = {j.text}; vec form {j.kron}")
        with np.errstate(all="ignore"):
            J = j.matrix(**inputs)
        n = vec(inputs[w]).size
        assert J.shape == (F0.size, n)
        if not _arrays_ok(J):
            continue
        x = vec(inputs[w])
        shape = np.shape(inputs[w])
        cols = []
        for k in range(n):
            e = np.zeros(n)
            e[k] = 1e-6 * max(1.0, abs(x[k]))
            up = _evaluate(node.src, shapes, dict(inputs, **{w: unvec(x + e, shape)}))
            dn = _evaluate(node.src, shapes, dict(inputs, **{w: unvec(x - e, shape)}))
            cols.append((vec(up) - vec(dn)) / (2 * e[k]))
        fd = np.stack(cols, axis=1)
        floor = 1e-4 * max(1.0, float(np.max(np.abs(F0))))  # differences resolve eps·|F|/h at best
        assert rel(J, fd, floor=floor) < 1e-5, "the dense Jacobian disagrees with central differences"
        V = rng.standard_normal(n)
        G = rng.standard_normal(F0.size)
        jv = vec(j.jvp(unvec(V, shape), **inputs))
        jg = vec(j.vjp(unvec(G, F0.shape), **inputs))
        # a zero Jacobian computed two ways differs by rounding of the size of eps·|F|
        scale = float(np.max(np.abs(J), initial=0.0)) + 1e-6 * max(1.0, float(np.max(np.abs(F0))))
        assert np.max(np.abs(jv - J @ V)) <= 1e-9 * scale * np.abs(V).sum()
        assert np.max(np.abs(jg - J.T @ G)) <= 1e-9 * scale * np.abs(G).sum()
