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


@pytest.fixture(scope="session")
def corpus():
    return load_corpus()
