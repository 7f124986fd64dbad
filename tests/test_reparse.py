"""Every printed text re-parses to the same expression: the gradient (d.text, and d.short_text
with its definitions substituted back), λ, and the numerator layout, for the random
expressions of tests/exprgen.py, compared by value at random inputs."""
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings, strategies as st

import matcalc
from matcalc.codegen import compile_function, function_source, module_source
from matcalc.parse import parse
from matcalc.printing import to_text
from matcalc.shapes import typecheck

from support.exprgen import expressions  # noqa: E402

EXAMPLES = int(os.environ.get("MATCALC_REPARSE_EXAMPLES", "60"))

# a count of a symbolic dimension (Σ of n ones) prints as sum(1) or 1@1, which cannot say n
# on its own (README: Limits); those texts are left out, everything else must read back
DIMENSION_COUNT = re.compile(r"sum\(-?\d*\.?\d*\*?1(\.T)?\)|\b1(\.T)?@1\b")


def evaluate(text, d, inputs, definitions=None, shape=None):
    """The value of ``text`` read back as matcalc syntax (shapes as d has them).  ``shape``
    (a user shape): the text is read as ``(text) + 0*Zctx`` with Zctx of that shape, the
    context an all-ones ``1`` or an ``I`` takes its size from (as in any expression)."""
    shapes = dict(d.user_shapes)
    if shape:
        text = f"({text}) + 0*Zctx"
        shapes["Zctx"] = shape
        inputs = dict(inputs, Zctx=np.zeros(_numeric(shape, d, inputs)))
    typed = typecheck(parse(text), text, shapes, definitions)
    params = [k for k in shapes if k in typed.symbols]
    if not params:  # a constant
        from matcalc.simplify import simplify

        e = simplify(typed.expr)
        assert e.op == "const", text
        return e.shape, e.attr
    src, names = function_source("f", [typed.expr], params, typed.symbols)
    f = compile_function(module_source([src]), "f")
    return typed.expr.shape, f(**{names[k]: inputs[k] for k in params})


def _numeric(shape, d, inputs):
    sizes = {}
    for k, sh in d.user_shapes.items():
        for dim, n in zip(sh, np.shape(inputs[k])):
            sizes[dim] = n
    return tuple(sizes.get(x, x) for x in shape)


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(case=expressions(), seed=st.integers(0, 2**32 - 1))
def test_printed_text_reparses(case, seed):
    inputs = case.draw_inputs(np.random.default_rng(seed))
    note(f"expr = {case.expr}")
    for w in case.wrt[:2]:
        d = matcalc.derive(case.expr, wrt=w, shapes=case.shapes)
        assume(not any(DIMENSION_COUNT.search(t) for t in (d.text, d.short_text, *d.definitions.values())))
        inputs_f = {k: v for k, v in inputs.items() if k in d.user_shapes}
        with np.errstate(all="ignore"):
            want = np.asarray(d.function(**inputs_f))
            G = d.gradient
            # the gradient as printed
            got_shape, got = evaluate(d.text, d, inputs_f, shape=d.shape)
            assert got_shape == G.shape, (d.text, got_shape, G.shape)
            assert np.allclose(np.broadcast_to(got, want.shape), want, rtol=1e-8, atol=1e-10, equal_nan=True), \
                (case.expr, d.text)
            # the short form, with its automatic definitions
            if d.short_text != d.text:
                got_shape, got = evaluate(d.short_text, d, inputs_f, d.definitions, shape=d.shape)
                assert np.allclose(np.broadcast_to(got, want.shape), want, rtol=1e-8, atol=1e-10, equal_nan=True), \
                    (d.short_text, d.definitions)
            # λ as printed
            lam_text = to_text(d.lam)
            _, lam = evaluate(lam_text, d, inputs_f)
            assert np.allclose(lam, d.value_function(**inputs_f), rtol=1e-8, atol=1e-10, equal_nan=True), lam_text
            # the numerator layout
            text, nshape = d.layout("numerator")
            got_shape, got = evaluate(text, d, inputs_f, shape=nshape)
            assert got_shape == G.shape[::-1], (text, got_shape)
            wantT = want.T if want.ndim == 2 else want
            assert np.allclose(np.ravel(np.broadcast_to(got, np.shape(np.asarray(got)) if np.size(got) > 1
                                                        else wantT.shape)), np.ravel(wantT),
                               rtol=1e-8, atol=1e-10, equal_nan=True), text


@pytest.mark.parametrize("expr,wrt,shapes", [
    ("sum(2*W@X)", "X", None),            # printed 2*W.T@1: a scalar times a product with ones
    ("sum(exp(1@b.T + X@W))", "b", None),  # a column of ones times a row
    ("G:(X@W + b.T)", "b", None),
    ("sum(W + x)", "x", None),            # b ones summed: the size of W's columns, size(W, 1)
    ("x.T@A@x", "x", None),
    ("tanh(0.1*((A@x + x**2):1)) + 2", "A", None),   # 0.1*(1.T@A): the ones keep their context
    ("sum(inv(X))", "X", None),              # inv(X).T@1@1.T@inv(X).T: a matrix of ones in a product
    ("sum(Diag(x)@Diag(x))", "x", None),     # Diag(x)@1@1.T + 1@(1.T@Diag(x))
    ("3*sum(inv(X)) + sum(A@X@B)", "X", {"A": ("m", "n"), "B": ("n", "p")}),
    # a constant array reduced: its count (sum(1/size(x, 0)) read back as 1/n, not 1)
    ("mean(x + alpha)", "alpha", None),
    ("tr(A + alpha)", "alpha", {"A": ("n", "n")}),              # sum(I) = n
    ("alpha*logsumexp(X - X)", "alpha", None),                  # logsumexp(0) = log(size)
    ("sum(logsumexp(W - W, 1)*y**2)", "y", {"W": ("a", "b"), "y": ("a",)}),
    ("alpha*sum(softmax(X - X, 1))", "alpha", None),
    ("mean(diag(A))", "A", {"A": ("n", "n")}),                  # Diag(1/n) is I/n
    ("(sum(x + A, 1)@(2*y**2)) - alpha", "x", None),  # sum(y**2@1.T, 1): an outer product summed
    ("sum(mean(X, 0)**2)", "X", None),  # 2*(1@mean(X, 0)/n): 2*1@… read 2*1 as the number 2
    ("-sum(mean(X, 0)**3)", "X", None),
])
def test_known_forms_reparse(expr, wrt, shapes):
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    rng = np.random.default_rng(0)
    dims = {}
    inputs = {}
    for k, sh in d.user_shapes.items():
        s = tuple(dims.setdefault(x, 3 + len(dims)) if isinstance(x, str) else x for x in sh)
        inputs[k] = rng.standard_normal(s) if s else 0.7
    want = np.asarray(d.function(**inputs))
    got_shape, got = evaluate(d.text, d, inputs, shape=d.shape)
    assert got_shape == d.gradient.shape, (d.text, got_shape, d.gradient.shape)
    assert np.allclose(np.broadcast_to(got, want.shape), want), d.text


def test_every_step_of_the_vae_derivation_reads_back_as_the_same_number():
    # a step's text, read with the definitions and the differentials as symbols, is dλ
    # ((alpha*1):dp is the all-ones array scaled, as 1:dp is: the line reads as written)
    d = matcalc.derive("alpha*(exp(W@x+c)-W@x-c+m*m-1):1", "W")
    rng = np.random.default_rng(5)
    W, x, c, m, dW = (rng.standard_normal(s) for s in ((4, 3), 3, 4, 4, (4, 3)))
    alpha = 0.7
    z = W @ x + c
    p = np.exp(z)
    dz = dW @ x
    values = {"W": W, "x": x, "c": c, "m": m, "alpha": alpha, "z": z, "p": p, "dz": dz, "dp": p * dz, "dW": dW}
    shapes = {"W": ("a", "b"), "x": ("b",), "c": ("a",), "m": ("a",), "alpha": (), "z": ("a",), "p": ("a",),
              "dz": ("a",), "dp": ("a",), "dW": ("a", "b")}
    want = alpha * (p - 1) @ dz  # dλ
    steps = [line.split("    [")[0].split("= ", 1)[1] for line in d.derivation_lines()
             if line.lstrip().startswith(("dλ =", "="))]
    assert len(steps) >= 6
    for text in steps:
        used = [s for s in shapes if re.search(rf"\b{s}\b", text)]
        f = matcalc.derive(text, wrt=used[0], shapes={s: shapes[s] for s in used}).value_function
        assert np.isclose(f(**{s: values[s] for s in used}), want), text


@pytest.mark.parametrize("text, scale", [("-1/alpha:X", -1 / 0.5), ("X:-1/2", -0.5), ("-1:X", -1.0),
                                         ("-alpha*1:X", -0.5)])
def test_a_negated_scaled_one_beside_a_colon_is_the_all_ones_array(text, scale):
    # as -sum(X)/alpha's derivation prints its step: -1/alpha:dX
    X = np.arange(12.0).reshape(3, 4)
    d = matcalc.derive(text, wrt="X", shapes={"X": ("a", "b"), "alpha": ()})
    args = {"X": X, "alpha": 0.5} if "alpha" in d.function.params else {"X": X}
    assert np.isclose(d.value_function(**args), scale * X.sum())


def test_a_negated_quotient_led_by_ones_reads_back():
    # diag(-1@s/n) read back as the number -1 times s: a row, which diag refused
    import numpy as np

    d = matcalc.derive("sum(exp(-mean(Diag(c), 0)))", wrt="c", shapes={"c": ("m",)})
    assert "-(1@" in d.text
    back = matcalc.jacobian(d.text + " + 0*c", "c", shapes={"c": ("m",)})
    c = np.random.default_rng(12).standard_normal(4)
    np.testing.assert_allclose(back.value_function(c=c), d.function(c=c), rtol=1e-12)


def test_a_named_differential_keeps_its_name_through_the_signs():
    # dλ = sum(-ds1*q - s1*dq) printed dq written out, s1*(s2*dz1), its signs taken outside
    d = matcalc.derive("sum(sigmoid(W@x)*log(sigmoid(W@x)))", "W")
    line = next(l for l in d.derivation_lines() if l.startswith("dλ = "))
    assert line.startswith("dλ = sum(-ds1*q - s1*dq)"), line


def _sized_inputs(d, sizes, rng):
    """Inputs of d's user shapes, a product dimension ('a*c') the product of its factors' sizes."""
    def size(x):
        return x if isinstance(x, int) else int(np.prod([sizes[f] for f in x.split("*")]))
    return {k: rng.standard_normal(tuple(size(x) for x in sh)) if sh else 0.7 for k, sh in d.user_shapes.items()}


@pytest.mark.parametrize("expr,wrt,shapes", [
    # the adjoints of kron print as kron_sum / kron_blocks, which read back
    ("tr(kron(A, B)@C)", "A", {"A": ("a", "b"), "B": ("c", "d")}),
    ("tr(kron(A, B)@C)", "B", {"A": ("a", "b"), "B": ("c", "d")}),
    ("sum(sin(kron_sum(C, A)))", "A", {"C": ("a*c", "b*d"), "A": ("a", "b")}),
    ("sum(sin(kron_blocks(C, B)))", "C", {"C": ("a*c", "b*d"), "B": ("c", "d")}),
    # unvec prints with its rows: a size read from a symbol, a number, or a quotient of sizes
    ("sum(exp(kron(A, B)@x))", "A", {"A": ("a", "b"), "B": ("c", "d")}),
    ("y.T@kron(A, B)@x", "B", {"A": (2, 3), "B": (4, 5)}),
    ("sum(exp(unvec(v, size(X, 0))))", "v", {"v": ("a*b",), "X": ("a", "b")}),
    ("sum(tanh(unvec(v, size(C, 0)/size(B, 0))))", "v", {"v": ("a*b",), "C": ("a*c", "b*d"), "B": ("c", "d")}),
    ("sum(unvec(v, 3)@B)", "v", {"v": (12,), "B": (4, 2)}),
])
def test_vec_and_kron_texts_reparse(expr, wrt, shapes):
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    inputs = _sized_inputs(d, {"a": 3, "b": 4, "c": 2, "d": 5}, np.random.default_rng(1))
    want = np.asarray(d.function(**inputs))
    got_shape, got = evaluate(d.text, d, inputs, shape=d.shape)
    assert got_shape == d.gradient.shape, (d.text, got_shape)
    assert np.allclose(np.broadcast_to(got, want.shape), want), d.text
