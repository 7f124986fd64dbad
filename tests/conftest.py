import json
import os
from pathlib import Path

import numpy as np
import pytest

from matcalc.check import draw  # inputs in the domains the corpus README describes

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

SIZES = {"a": 3, "b": 4, "c": 5, "d": 2, "e": 6, "n": 9, "m": 7, "k": 8, "p": 10}


def corpus_path() -> Path:
    """The shared public corpus if it sits beside the repository, else the copy in tests/data."""
    env = os.environ.get("MATCALC_CORPUS")
    if env:
        return Path(env)
    shared = ROOT.parent / "shared" / "corpus" / "public.json"
    return shared if shared.exists() else HERE / "data" / "public.json"


def load_corpus():
    return json.loads(corpus_path().read_text(encoding="utf-8"))


def concrete(shape, sizes=SIZES):
    return tuple(sizes[d] if isinstance(d, str) else int(d) for d in shape)


def case_inputs(case, seed=0, sizes=SIZES):
    rng = np.random.default_rng(seed)
    return {name: draw(concrete(shape, sizes), case.get("domain", {}).get(name, "normal"), rng)
            for name, shape in case["shapes"].items()}


def np_eval(src, inputs):
    # corpus reference sources are trusted test data (NumPy expressions)
    return eval(src, {"np": np, **inputs})  # noqa: S307


def central_fd(f, inputs, wrt, h=1e-6):
    x0 = np.asarray(inputs[wrt], dtype=float)
    g = np.zeros(x0.shape)
    flat = x0.reshape(-1)
    for i in range(flat.size):
        step = h * max(1.0, abs(flat[i]))
        up, dn = flat.copy(), flat.copy()
        up[i] += step
        dn[i] -= step
        a = dict(inputs, **{wrt: up.reshape(x0.shape) if x0.shape else float(up[0])})
        b = dict(inputs, **{wrt: dn.reshape(x0.shape) if x0.shape else float(dn[0])})
        g.reshape(-1)[i] = (f(a) - f(b)) / (2 * step)
    return g


def rel_err(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert a.shape == b.shape, (a.shape, b.shape)
    scale = max(np.max(np.abs(a)), np.max(np.abs(b)), 1e-12)
    return float(np.max(np.abs(a - b)) / scale)


@pytest.fixture(scope="session")
def corpus():
    return load_corpus()
