"""Soundness: matcalc's gradients agree with finite differences of an
independent λ on random well-typed expressions (SPEC §5).

The expressions and their NumPy evaluation come from tests/exprgen.py, which
knows nothing about matcalc; finite differences are taken of that
independent evaluation, never of matcalc's.  Hypothesis shrinks a failure to
a small expression.

    MATCALC_SOUNDNESS_EXAMPLES=2000 pytest tests/test_soundness.py

For long runs outside pytest see benchmarks/soundness_long.py.
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings, strategies as st

matcalc = pytest.importorskip("matcalc")

from support.exprgen import expressions  # noqa: E402
from support.fd import check_gradient  # noqa: E402

EXAMPLES = int(os.environ.get("MATCALC_SOUNDNESS_EXAMPLES", "200"))

SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,          # reproducible in CI
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)


def _check_case(case, seed, shapes):
    inputs = case.draw_inputs(np.random.default_rng(seed))
    note(f"expr   = {case.expr}")
    note(f"numpy  = {case.numpy_src}")
    note(f"shapes = {shapes}")
    problems = []
    for w in case.wrt:
        try:
            d = matcalc.derive(case.expr, wrt=w, shapes=shapes)
        except matcalc.MatcalcError as e:
            problems.append(f"wrt={w}: refused a well-typed expression:\n{e}")
            continue
        got = d.function(**{k: np.copy(v) if isinstance(v, np.ndarray) else v
                            for k, v in inputs.items()})
        res = check_gradient(got, case.f, inputs, w)
        if not res.ok:
            problems.append(
                f"wrt={w}: {res.describe()}\n"
                f"  matcalc gradient: {getattr(d, 'text', '?')}\n"
                f"  got shape {np.shape(got)}, expected {np.shape(res.fd)}\n"
                f"  got = {np.array2string(np.asarray(got), precision=6)}\n"
                f"  fd  = {np.array2string(np.asarray(res.fd), precision=6)}")
    assert not problems, (f"\nλ = {case.expr}\nshapes = {shapes}\n"
                          f"domains = {case.domains}\n" + "\n".join(problems))


@SETTINGS
@given(case=expressions(), seed=st.integers(0, 2**32 - 1))
def test_gradient_matches_finite_differences(case, seed):
    _check_case(case, seed, case.shapes)


@settings(SETTINGS, max_examples=max(1, EXAMPLES // 4))
@given(case=expressions(), seed=st.integers(0, 2**32 - 1))
def test_gradient_with_default_kinds(case, seed):
    """Declare only the symbols whose kind differs from the default of their
    name (SPEC §2); everything else, dims included, is inferred."""
    _check_case(case, seed, case.declared)
