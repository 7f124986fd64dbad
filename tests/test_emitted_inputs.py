"""The standalone NumPy source converts its arguments on entry: integer arrays, lists and
ints give the same gradient as float arrays (in-place updates never hit an int array)."""
import numpy as np
import pytest

import matcalc
from matcalc.codegen import compile_function

CASES = [
    ("alpha*(exp(W@x+c)-W@x-c+m*m-1):1", "W"),
    ("sum(exp(tanh(X@W)))", "W"),
    ("logdet(X) + x.T@inv(X)@x", "X"),
    ("sum(relu(W0@x + b) ** 2) + beta*norm2(x)", "x"),
]


@pytest.mark.parametrize("expr,wrt", CASES, ids=[c[0] for c in CASES])
def test_int_arrays_and_lists(expr, wrt):
    d = matcalc.derive(expr, wrt=wrt)
    f = compile_function(d.numpy_source, d.function.name)
    rng = np.random.default_rng(2)
    dims = {}
    ints = {}
    for name, shape in d.user_shapes.items():
        sh = tuple(dims.setdefault(s, 2 + len(dims)) for s in shape)
        if name == "X" and "logdet" in expr:
            v = 3 * np.eye(sh[0], dtype=int) + rng.integers(-1, 2, sh)
        else:
            v = rng.integers(-3, 4, sh) if sh else int(rng.integers(1, 4))
        ints[name] = v
    floats = {k: np.asarray(v, dtype=float) if np.ndim(v) else float(v) for k, v in ints.items()}
    params = d.function.params
    want = f(**{params[k]: v for k, v in floats.items()})
    got_int = f(**{params[k]: v for k, v in ints.items()})
    got_list = f(**{params[k]: (v.tolist() if np.ndim(v) else v) for k, v in ints.items()})
    assert np.allclose(got_int, want) and np.allclose(got_list, want)
    assert np.asarray(got_int).dtype == np.float64
    # the arguments themselves are not modified
    assert all(np.array_equal(ints[k], floats[k]) for k in ints)


def test_the_source_says_so():
    src = matcalc.derive("sum(exp(X@W))", wrt="W").numpy_source
    assert "X = np.asarray(X, float)" in src
