"""--at NAME=VALUE: the gradient evaluated at numbers typed on the command line."""
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from matcalc import cli

X = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
W = [[0.1, -0.2, 0.3, 0.0], [0.4, 0.5, -0.6, 0.2]]
G = [[1.0, 0.5, -1.0, 2.0], [0.0, 1.0, 1.0, 1.0], [2.0, -1.0, 0.5, 0.0]]


def run(capsys, *argv):
    code = cli.run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_torch_backward_example_prints_x_grad(capsys):
    # Y = exp(X@W); Y.backward(G) leaves X.grad = (G ∘ exp(XW)) Wᵀ
    want = (np.array(G) * np.exp(np.array(X) @ np.array(W))) @ np.array(W).T
    code, out, err = run(capsys, "derive", "G:exp(X@W)", "--wrt", "X", "--at", f"X={json.dumps(X)}",
                         "--at", f"W={json.dumps(W)}", "--at", f"G={json.dumps(G)}", "--json")
    assert code == 0, err
    got = np.array(json.loads(out)["value"])
    assert got.shape == (3, 2) and np.allclose(got, want)
    code, out, err = run(capsys, "derive", "G:exp(X@W)", "--wrt", "X", "--at", f"X={json.dumps(X)}",
                         "--at", f"W={json.dumps(W)}", "--at", f"G={json.dumps(G)}")
    assert code == 0
    assert f"{want[0, 0]:.6f}"[:6] in out


def test_integers_scalars_and_vectors(capsys):
    code, out, err = run(capsys, "derive", "alpha*x:x", "--wrt", "x", "--wrt", "alpha",
                         "--at", "alpha=3", "--at", "x=[1, 2, -1]", "--json")
    assert code == 0, err
    first, second = [json.loads(line) for line in out.splitlines()]
    assert first["value"] == [6.0, 12.0, -6.0] and second["value"] == 6.0


@pytest.mark.parametrize("ats,words", [
    (["X=[[1,2],[3,4],[5,6]]", "W=[[1,2,3,4],[1,2,3,4]]"], ["no value for G"]),
    (["X=[[1,2],[3,4],[5,6]]", "W=[[1,2,3,4]]", f"G={json.dumps(G)}"], ["W has shape (1, 4)"]),
    (["X=__import__('os')"], ["not a number"]),
    (["X=[1, [2]]"], ["not an array"]),
    (["X=[[1,2],[3]]"], ["not an array", "differ in length"]),
    (["X=true"], ["not a number"]),
    (["Q=1"], ["Q", "not a symbol"]),
    (["X"], ["NAME=VALUE"]),
])
def test_refusals(capsys, ats, words):
    argv = ["derive", "G:exp(X@W)", "--wrt", "X"]
    for a in ats:
        argv += ["--at", a]
    code, out, err = run(capsys, *argv)
    assert code == 2 and not out.strip()
    assert "Traceback" not in err
    for w in words:
        assert w in err, err


def test_a_singular_matrix_at_the_values_is_named_so(capsys):
    code, out, err = run(capsys, "derive", "logdet(X)", "--wrt", "X", "--at", "X=[[1,2],[2,4]]")
    assert code == 2 and not out.strip()
    assert "singular" in err and "logdet(X)" in err and "shape error" not in err


@pytest.mark.parametrize("depth", [3, 100, 5000])
def test_at_values_nested_deeper_than_a_matrix_are_refused(depth):
    # 500 levels ended in RecursionError (exit 3); 100 said "its rows differ in length"
    value = "[" * depth + "1" + "]" * depth
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "sum(W)", "--wrt", "W", "--at", f"W={value}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"nests lists {depth} deep" in r.stderr and "Traceback" not in r.stderr


def test_at_values_of_nested_objects_are_refused_too():
    value = '{"":' * 3000 + "1" + "}" * 3000  # (RecursionError in JSON, exit 3)
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "sum(x)", "--wrt", "x", "--at", f"x={value}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_a_value_for_a_symmetric_matrix_that_is_not_symmetric_is_refused(capsys):
    # inv(S) at a non-symmetric S is not the gradient of a symmetric S (it was printed with a note)
    assert cli.run(["derive", "logdet(S)", "--wrt", "S", "--sym", "S", "--at", "S=[[2,1],[0,3]]"]) == 2
    out, err = capsys.readouterr()
    assert "S is declared symmetric, but its value is not (max |S - Sᵀ| = 1)" in err and not out
    assert cli.run(["derive", "logdet(S)", "--wrt", "S", "--sym", "S", "--at", "S=[[2,1],[1,3]]"]) == 0
    assert "not symmetric" not in capsys.readouterr().err
    assert cli.run(["derive", "x.T@S@x", "--wrt", "x", "--sym", "S", "--at", "S=[[2,NaN],[NaN,2]]",
                    "--at", "x=[1,2]"]) == 0
    assert "not symmetric" not in capsys.readouterr().err  # NaN = NaN here


def test_a_negative_zero_prints_as_0(capsys):
    assert cli.run(["derive", "-(x:y)", "--wrt", "x", "--at", "y=[0,1]", "--at", "x=[1,1]"]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"-0\.(?!\d)", out) and "-1." in out  # [-0. -1.]
    assert cli.run(["derive", "-x.T@x", "--wrt", "x", "--json", "--at", "x=[0,0]"]) == 0
    assert "-0.0" not in capsys.readouterr().out  # in --json too


def test_hessian_and_jacobian_at_given_values(capsys):
    # the dense matrix at numbers typed on the command line, as derive --at gives the gradient
    A = [[1.0, 2.0], [3.0, 4.0], [0.0, 1.0]]
    assert cli.run(["hessian", "x.T@B@x", "--wrt", "x", "--at", "x=[1,2]", "--at", "B=[[1,2],[3,4]]"]) == 0
    out = capsys.readouterr().out
    assert "the dense Hessian, 2×2" in out and "[[2. 5.]\n [5. 8.]]" in out  # B + Bᵀ
    assert cli.run(["jacobian", "exp(A@x)", "--wrt", "x", "--at", "x=[1,2]", "--at", f"A={A}", "--json"]) == 0
    got = np.array(json.loads(capsys.readouterr().out)["value"])
    z = np.array(A) @ np.array([1.0, 2.0])
    np.testing.assert_allclose(got, np.exp(z)[:, None] * np.array(A), rtol=1e-12)  # Diag(e^z) A
    assert cli.run(["hessian", "x.T@B@x", "--wrt", "x", "--at", "x=[1,2]"]) == 2
    assert "--at gives no value for B" in capsys.readouterr().err


def test_a_singular_matrix_in_the_api_says_what_met_it():
    # NumPy's bare "Singular matrix" named neither the function nor what it inverts
    import matcalc

    X = np.diag([1.0, 2.0, 0.0])
    calls = {"grad_X": lambda: matcalc.derive("logdet(X)", "X").function(X=X),
             "hvp_X": lambda: matcalc.hessian("logdet(X)", "X").hvp(np.eye(3), X=X),
             "vjp_X": lambda: matcalc.jacobian("inv(X)", "X").vjp(np.eye(3), X=X)}
    for name, call in calls.items():
        with pytest.raises(np.linalg.LinAlgError, match=f"^{name}: a matrix it inverts or factorises"):
            call()


def test_values_from_npy_and_csv_files(capsys, tmp_path):
    # NumPy's .npy and a table of numbers in .csv/.txt, as --at X=X.npy
    np.save(tmp_path / "X.npy", np.array(X))
    np.savetxt(tmp_path / "W.csv", np.array(W), delimiter=",")
    np.savetxt(tmp_path / "G.txt", np.array(G))
    want = (np.array(G) * np.exp(np.array(X) @ np.array(W))) @ np.array(W).T
    code, out, err = run(capsys, "derive", "G:exp(X@W)", "--wrt", "X", "--at", f"X={tmp_path / 'X.npy'}",
                         "--at", f"W={tmp_path / 'W.csv'}", "--at", f"G={tmp_path / 'G.txt'}", "--json")
    assert code == 0, err
    np.testing.assert_allclose(json.loads(out)["value"], want, rtol=1e-12)
    np.save(tmp_path / "c.npy", np.array([1 + 1j]))
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "text.npy").write_text("not numbers")
    for value, words in ((tmp_path / "nope.npy", "cannot read"), (tmp_path / "c.npy", "complex128"),
                         (tmp_path / "empty.csv", "holds no numbers"), (tmp_path / "text.npy", "not a NumPy")):
        code, out, err = run(capsys, "derive", "sum(x**2)", "--wrt", "x", "--at", f"x={value}")
        assert code == 2 and words in err and "Traceback" not in err


def test_a_table_of_one_row_is_a_matrix_of_one_row(capsys, tmp_path):
    # a 1×3 .csv for a matrix W was read as a vector and refused
    np.savetxt(tmp_path / "W.csv", [[1.0, 2.0, 3.0]], delimiter=",")
    code, out, err = run(capsys, "derive", "sum(exp(W@x))", "--wrt", "W", "--at", f"W={tmp_path / 'W.csv'}",
                         "--at", "x=[0.1, 0.2, 0.3]", "--json")
    assert code == 0, err
    np.testing.assert_allclose(json.loads(out)["value"], [np.exp(1.4) * np.array([0.1, 0.2, 0.3])], rtol=1e-12)
