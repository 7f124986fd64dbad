"""form="diag" / --form diag: h∘v written Hv with H = Diag(h) named and cited; a user's
H = Diag(...) definition is used."""
import json

import numpy as np
import pytest

import matcalc
from matcalc import DeriveError, cli

EXPR = "alpha*(exp(W1@relu(W0@x+b0)+b1) - (W1@relu(W0@x+b0)+b1) + m*m - 1):1"
rng = np.random.default_rng(5)
W0, W1 = rng.standard_normal((4, 3)), rng.standard_normal((5, 4))
x, b0, b1, m = rng.standard_normal(3), rng.standard_normal(4), rng.standard_normal(5), rng.standard_normal(5)
VALS = dict(alpha=0.7, W0=W0, W1=W1, x=x, b0=b0, b1=b1, m=m)


def closed_form():
    z1 = W0 @ x + b0
    H = np.diag((z1 > 0).astype(float))
    p = np.exp(W1 @ np.maximum(z1, 0) + b1)
    return 0.7 * H @ W1.T @ (p - 1)[:, None] @ x[None, :]


def test_diag_form_of_the_seed_answer():
    d = matcalc.derive(EXPR, wrt="W0", form="diag")
    assert d.short_text == "alpha*H@W1.T@(p - 1)@x.T"
    assert d.definitions["H"] == "Diag(h)" and d.definitions["h"] == "step(z1)"
    assert any("h∘v = Diag(h)v" in s.identity for s in d.steps)
    assert np.allclose(d.function(**VALS), closed_form())
    assert d.check().ok


def test_default_form_unchanged():
    d = matcalc.derive(EXPR, wrt="W0")
    assert "Diag" not in d.text and "*" in d.short_text
    assert np.allclose(d.function(**VALS), closed_form())


def test_a_users_diag_definition_is_used():
    d = matcalc.derive(EXPR, wrt="W0", definitions={"H": "Diag(step(W0@x+b0))"})
    assert d.text.startswith("alpha*H@W1.T@")
    assert np.allclose(d.function(**VALS), closed_form())
    assert d.check().ok


def test_bad_form_refused():
    with pytest.raises(DeriveError):
        matcalc.derive(EXPR, wrt="W0", form="kron")


def test_cli(capsys):
    code = cli.run(["derive", EXPR, "--wrt", "W0", "--form", "diag", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    j = json.loads(out)
    assert j["short_gradient"] == "alpha*H@W1.T@(p - 1)@x.T"
    code = cli.run(["derive", EXPR, "--wrt", "W0", "--let", "H=Diag(step(W0@x+b0))"])
    out, _ = capsys.readouterr()
    assert code == 0 and "alpha*H@W1.T@" in out
