"""Every public corpus case through the API and through the CLI."""
import json
import subprocess
import sys

import numpy as np
import pytest

import matcalc
from conftest import case_inputs, load_corpus, np_eval, concrete, SIZES
from support.fd import central_fd_grad, rel_error

CASES = load_corpus()
IDS = [c["id"] for c in CASES]


def _user_shape(case):
    return tuple(case["shapes"][case["wrt"]])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_api_matches_reference_and_finite_differences(case):
    d = matcalc.derive(case["expr"], wrt=case["wrt"], shapes=case["shapes"])
    assert d.shape == _user_shape(case)
    for seed in (0, 1):
        inputs = case_inputs(case, seed)
        got = d.function(**inputs)
        want = np_eval(case["reference"], inputs)
        assert np.shape(got) == concrete(case["shapes"][case["wrt"]])
        assert rel_error(got, want) < 1e-9, (d.text, case["reference"])
        fd = central_fd_grad(lambda **a: np_eval(case["f"], a), inputs, case["wrt"])
        assert rel_error(got, fd) < 1e-6


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_api_check_passes(case):
    d = matcalc.derive(case["expr"], wrt=case["wrt"], shapes=case["shapes"])
    report = d.check()
    assert report.ok, str(report)
    assert report.max_rel_error < 1e-6
    assert report.entries_checked > 0


@pytest.mark.parametrize("case", [c for c in CASES if "fixed_inputs" in c], ids=lambda c: c["id"])
def test_fixed_inputs_reproduce_printed_numbers(case):
    d = matcalc.derive(case["expr"], wrt=case["wrt"], shapes=case["shapes"])
    inputs = {k: np.array(v, dtype=float) for k, v in case["fixed_inputs"].items()}
    got = d.function(**inputs)
    np.testing.assert_allclose(got, np.array(case["expected"]), rtol=case["expected_rtol"])


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "matcalc", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cli_json(case):
    shape_args = []
    for name, shape in case["shapes"].items():
        shape_args += ["--shape", f"{name}=" + (",".join(map(str, shape)) if shape else "scalar")]
    r = _cli("derive", case["expr"], "--wrt", case["wrt"], *shape_args, "--json", "--check")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1
    out = json.loads(lines[0])
    for key in ("wrt", "gradient", "latex", "shape", "numpy_source", "check"):
        assert key in out
    assert out["wrt"] == case["wrt"]
    assert tuple(out["shape"]) == _user_shape(case)
    assert out["check"]["ok"] is True
    # the emitted source is a standalone module computing the reference gradient
    namespace = {}
    exec(compile(out["numpy_source"], "<emitted>", "exec"), namespace)  # noqa: S102 - our own output
    fn = [v for k, v in namespace.items() if k.startswith("grad_")][0]
    inputs = case_inputs(case, seed=3)
    assert rel_error(fn(**inputs), np_eval(case["reference"], inputs)) < 1e-9


def test_cli_multiple_wrt_prints_one_object_each():
    r = _cli("derive", "G:(X@W)", "--wrt", "X", "--wrt", "W", "--json")
    assert r.returncode == 0, r.stderr
    objs = [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]
    assert [o["wrt"] for o in objs] == ["X", "W"]
    assert objs[0]["gradient"] == "G@W.T"
    assert objs[1]["gradient"] == "X.T@G"
