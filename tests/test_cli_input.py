"""The command line reads a question as it is typed: an expression may start with '-'."""
import os
import subprocess
import sys

import numpy as np
import pytest

from matcalc import cli


def run(capsys, *argv):
    code = cli.run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv", [
    ["derive", "-t.T@log(softmax(z))", "--wrt", "z", "--json"],
    ["derive", "--wrt", "z", "--json", "-t.T@log(softmax(z))"],
    ["derive", "--wrt", "z", "--json", "--", "-t.T@log(softmax(z))"],
    ["derive", "--backend", "numpy", "--wrt", "z", "--json", "-t.T@log(softmax(z))"],
])
def test_expression_starting_with_minus(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    import json
    d = json.loads(out)
    assert d["expr"] == "-t.T@log(softmax(z))"
    # cross-entropy: ∂λ/∂z = sum(t) softmax(z) - t, checked at numbers
    import matcalc
    f = matcalc.derive(d["expr"], wrt="z").function
    rng = np.random.default_rng(1)
    t, z = rng.uniform(0.1, 1, 4), rng.standard_normal(4)
    s = np.exp(z) / np.exp(z).sum()
    assert np.allclose(f(t=t, z=z), t.sum() * s - t)


@pytest.mark.parametrize("argv", [
    ["derive", "--(W:W)", "--wrt", "W", "--json"],
    ["derive", "--wrt", "W", "--json", "--(W:W)"],
])
def test_expression_starting_with_two_minuses(capsys, argv):
    import json

    code, out, err = run(capsys, *argv)
    assert code == 0, err
    d = json.loads(out)
    assert d["expr"] == "--(W:W)" and d["gradient"] == "2*W"


def test_leading_minus_parse_error_keeps_its_column(capsys):
    code, out, err = run(capsys, "derive", "-t.T@log(softmax(z)", "--wrt", "z")
    assert code == 2
    assert "column 20" in err
    assert err.splitlines()[-1].index("^") == 2 + 19


def test_leading_minus_through_the_console_script():
    p = subprocess.run([sys.executable, "-m", "matcalc", "derive", "-x:x", "--wrt", "x"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "∂λ/∂x = -2*x" in p.stdout


def test_unknown_option_is_still_refused(capsys):
    with pytest.raises(SystemExit) as e:
        cli.run(["derive", "x:x", "--wrt", "x", "--nonsense"])
    assert e.value.code == 2


@pytest.mark.parametrize("command", ["hessian", "jacobian"])
def test_second_order_expression_starting_with_minus(capsys, command):
    """-t.T@log(softmax(z)): H = sum(t)(Diag(s) - s sᵀ); -softmax(z): J = -(Diag(s) - s sᵀ)."""
    import json

    expr = "-t.T@log(softmax(z))" if command == "hessian" else "-softmax(z)"
    code, out, err = run(capsys, command, "--wrt", "z", "--json", expr)
    assert code == 0, err
    assert json.loads(out)["expr"] == expr
    import matcalc

    rng = np.random.default_rng(2)
    t, z = rng.uniform(0.1, 1, 4), rng.standard_normal(4)
    s = np.exp(z) / np.exp(z).sum()
    J = np.diag(s) - np.outer(s, s)
    if command == "hessian":
        np.testing.assert_allclose(matcalc.hessian(expr, "z").matrix(t=t, z=z), t.sum() * J, rtol=1e-12)
    else:
        np.testing.assert_allclose(matcalc.jacobian(expr, "z").matrix(z=z), -J, rtol=1e-12)


def test_python_m_matcalc_from_a_clones_root(tmp_path):
    """In a clone's root, ``python -m matcalc`` imports the source tree's matcalc/ (the current
    directory comes first), whose grammar sits beside it in grammar/, not in the package: as
    after ``pip install .`` (not -e), where no finder maps matcalc.grammar to the tree."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for part in ("matcalc", "grammar"):
        shutil.copytree(root / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path "
            "if 'editable' not in repr(f).lower()]; "
            "sys.argv = ['matcalc', 'derive', 'W:W', '--wrt', 'W']; "
            "runpy.run_module('matcalc', run_name='__main__', alter_sys=True)")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2*W" in r.stdout


def _strict(text):
    import json

    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_json_is_strict_when_a_value_overflows(capsys):
    # exp(1000) is inf in float64: strict JSON has no Infinity, so it is null
    code, out, _ = run(capsys, "derive", "sum(exp(W))", "--wrt", "W", "--at", "W=[[1000, 1]]", "--json")
    assert code == 0
    assert _strict(out)["value"] == [[None, pytest.approx(np.e)]]
    code, out, _ = run(capsys, "hessian", "sum(exp(x))", "--wrt", "x", "--shape", "x=n", "--check", "--json")
    assert code == 0 and _strict(out.splitlines()[0])["wrt"] == "x"


def test_a_check_at_declared_numeric_sizes_says_so(capsys):
    code, out, _ = run(capsys, "derive", "sum(exp(W@x))", "--wrt", "W", "--shape", "W=3,4", "--shape", "x=4",
                       "--check")
    assert code == 0 and out.rstrip().endswith("2 random draws, the declared sizes")


def test_a_reader_that_stops_early_is_no_internal_error():
    # matcalc ... | head -c 10: the write fails with a broken pipe, as for any command
    expr = "X"
    for _ in range(25):
        expr = f"det(X*{expr})"
    p = subprocess.Popen([sys.executable, "-m", "matcalc", "derive", expr, "--wrt", "X", "--steps", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.read(10)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and "internal error" not in err, err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_output_that_cannot_be_written_is_no_internal_error():
    # matcalc ... > /dev/full (a full disk): it said "internal error ... please report it", exit 3
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "x:x", "--wrt", "x"], stdout=full,
                           stderr=subprocess.PIPE, text=True)
    assert r.returncode == 74 and "cannot write the output" in r.stderr and "internal" not in r.stderr, r.stderr


@pytest.mark.skipif(os.name != "posix", reason="closes a file descriptor the POSIX way")
@pytest.mark.parametrize("closed, code", [(1, 74), (2, 2)])
def test_a_closed_stdout_or_stderr_is_no_internal_error(closed, code):
    # matcalc ... >&- said "internal error (AttributeError ...)", exit 3: Python's sys.stdout is None
    argv = ["derive", "x:x", "--wrt", "x"] if closed == 1 else ["derive", "sum(x", "--wrt", "x"]
    r = subprocess.run(["sh", "-c", f'"$0" -m matcalc "$@" {closed}>&-', sys.executable, *argv],
                       capture_output=True, text=True)
    assert r.returncode == code and "internal" not in r.stderr + r.stdout, (r.stdout, r.stderr)
    if closed == 1:
        assert "cannot write the output: standard output is closed" in r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv, code", [
    (["derive", "sum(x", "--wrt", "x"], 2),        # a refusal whose message cannot be written: still 2
    (["derive", "tr(A*X)", "--wrt", "X"], 74),     # an answer whose note is lost: not all of the output
    (["jacobian", "sum(x*x)", "--wrt", "x"], 74),
    (["derive", "x:x", "--wrt", "x"], 0),          # nothing on stderr
])
def test_diagnostics_that_cannot_be_written_keep_the_exit_status(argv, code):
    # stderr on a full disk: every one of these exited 1, which says a check failed
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "matcalc", *argv], stdout=subprocess.PIPE, stderr=full, text=True)
    assert r.returncode == code


def test_numerator_layout_applies_to_the_value_at_a_point(capsys):
    # the value was printed in the gradient's layout under the numerator heading
    at = ["--at", "X=[[1,2,3],[4,5,6]]", "--at", "W=[[1],[2],[3]]", "--at", "G=[[1],[-1]]"]
    code, out, err = run(capsys, "derive", "G:(X@W)", "--wrt", "W", "--layout", "numerator", *at)
    assert code == 0, err
    printed = out.split("in the numerator layout =")[1]
    want = (np.array([[1, 2, 3], [4, 5, 6]]).T @ np.array([[1], [-1]])).T  # (X.T@G).T, 1×3
    assert np.array2string(want + 0.0, precision=8) in printed
    code, out, err = run(capsys, "derive", "x:(A@y)", "--wrt", "y", "--layout", "numerator", "--json",
                         "--at", "x=[1,2]", "--at", "A=[[1,0,2],[0,1,0]]", "--at", "y=[1,1,1]")
    obj = __import__("json").loads(out)
    assert obj["layout"] == "numerator" and obj["value"] == [1.0, 2.0, 2.0]
    assert obj["numerator_value"] == [[1.0, 2.0, 2.0]]  # a row, Aᵀx transposed


@pytest.mark.parametrize("command", ["derive", "hessian"])
def test_a_check_out_of_memory_is_a_refusal(capsys, monkeypatch, command):
    import matcalc.check as mcheck

    def no_memory(*a, **k):
        raise MemoryError

    import matcalc.second_order as so

    monkeypatch.setattr(mcheck, "_gradient_check_at", no_memory)  # (derive's check)
    monkeypatch.setattr(so, "_check_at", no_memory)  # (hessian's)
    code, out, err = run(capsys, command, "sum(exp(kron(X, X)))", "--wrt", "X", "--check")
    assert code == 2 and "ran out of memory" in err and "internal error" not in err, err


def test_a_check_that_cannot_be_made_exits_2():
    # λ is NaN for every x (the square root of a log-sigmoid, which is < 0): nothing to compare
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "norm1(logsigmoid(x)**0.5)", "--wrt", "x",
                        "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "cannot be made" in r.stderr
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "sum(B)*sum(Diag(u)**-2)", "--wrt", "B",
                        "--exact"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not finite for any value" in r.stdout, r.stdout + r.stderr


def test_an_exact_check_that_sympy_does_not_decide_in_time_exits_2(monkeypatch, capsys):
    import time

    from matcalc import cli, sympy_bridge

    def slow(*args, **kwargs):  # (SymPy's speed depends on its cache: a stand-in that takes 30 s)
        time.sleep(30)

    monkeypatch.setattr(cli, "EXACT_SECONDS", 1)
    monkeypatch.setattr(sympy_bridge, "exact_check", slow)
    start = time.perf_counter()
    with pytest.raises(SystemExit) as e:
        cli.main(["derive", "x:x", "--wrt", "x", "--exact"])
    assert e.value.code == 2 and "has not decided in 1 s" in capsys.readouterr().err
    assert time.perf_counter() - start < 10


def test_an_exact_check_through_a_matrix_singular_everywhere_cannot_be_made():
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "det(x@x.T)", "--wrt", "x", "--exact"],
                       capture_output=True, text=True, timeout=120)  # (NonInvertibleMatrixError, exit 3)
    assert r.returncode == 2 and "singular for every value" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("encoding", ["cp1252", "ascii"])
def test_a_console_that_cannot_encode_the_symbols_gets_escapes_not_an_internal_error(encoding):
    # ∂λ/∂x on a cp1252 or ASCII stdout (a redirect on Windows) raised UnicodeEncodeError: exit 3
    import json
    import os

    env = dict(os.environ, PYTHONIOENCODING=encoding)
    run = [sys.executable, "-m", "matcalc"]
    p = subprocess.run(run + ["derive", "x*y:1", "--wrt", "x", "--steps"], capture_output=True, env=env)
    assert p.returncode == 0, p.stderr
    assert b"\\u2202\\u03bb/\\u2202x = y" in p.stdout  # ∂λ/∂x, escaped
    p = subprocess.run(run + ["jacobian", "x*y", "--wrt", "x", "--json", "--steps"], capture_output=True, env=env)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.decode("ascii"))
    assert out["jacobian"] == "dx*y" and "∘" in json.dumps(out, ensure_ascii=False)
    p = subprocess.run(run + ["derive", "det(x)", "--wrt", "x"], capture_output=True, env=env)
    assert p.returncode == 2 and b"internal error" not in p.stderr  # the refusal's message, escaped


def test_a_shape_or_value_given_twice_differently_is_refused(capsys):
    # the last one won, silently
    assert cli.run(["derive", "x:x", "--wrt", "x", "--shape", "x=a", "--shape", "x=b,c"]) == 2
    assert "--shape x is given twice, as a and as b,c" in capsys.readouterr().err
    assert cli.run(["derive", "x:x", "--wrt", "x", "--shape", "x=a", "--shape", "x=a"]) == 0
    assert cli.run(["derive", "x:x", "--wrt", "x", "--at", "x=[1,2]", "--at", "x=[1,3]"]) == 2
    assert "--at x is given twice" in capsys.readouterr().err


def test_the_output_of_code_is_a_module_that_imports(tmp_path):
    # `matcalc derive … --code > grad.py`: the gradient, shape and check lines are comments
    import numpy as np

    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "G:exp(X@W)", "--wrt", "X", "--wrt", "W",
                        "--code", "--check", "--steps"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "# check ok" in r.stdout and "# ── W ──" in r.stdout
    module = {}
    exec(compile(r.stdout, "grad.py", "exec"), module)  # (a file the test wrote itself)
    rng = np.random.default_rng(0)
    X, W, G = rng.standard_normal((2, 3)), rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    P = G * np.exp(X @ W)
    np.testing.assert_allclose(module["grad_X"](X=X, W=W, G=G), P @ W.T, rtol=1e-12)
    np.testing.assert_allclose(module["grad_W"](X=X, W=W, G=G), X.T @ P, rtol=1e-12)
    r = subprocess.run([sys.executable, "-m", "matcalc", "hessian", "x.T@A@x", "--wrt", "x", "--code"],
                       capture_output=True, text=True, timeout=120)
    (tmp_path / "hess.py").write_text(r.stdout)
    module = {}
    exec(compile(r.stdout, str(tmp_path / "hess.py"), "exec"), module)
    A = rng.standard_normal((3, 3))
    np.testing.assert_allclose(module["hessian_x"](x=np.ones(3), A=A), A + A.T, rtol=1e-12)


def test_small_cli_spellings(capsys):
    # --wrt " x" was an unknown symbol; --at alpha=nan refused while alpha=NaN was taken;
    # x.T*y got no hint that @ was meant; the note on a scalar's Jacobian said "W's shape" for x
    code, out, err = run(capsys, "derive", "alpha*sum(x)", "--wrt", " x", "--at", "alpha=inf", "--at", "x=[1, 2]")
    assert code == 0 and "[inf inf]" in out, err
    code, out, err = run(capsys, "derive", "alpha*sum(x)", "--wrt", "x", "--at", "alpha=nan", "--at", "x=[1, 2]")
    assert code == 0 and "[nan nan]" in out, err
    code, out, err = run(capsys, "derive", "x.T*A*x", "--wrt", "x")
    assert code == 2 and "for the matrix product write x.T@A@x" in err
    code, out, err = run(capsys, "jacobian", "x:x", "--wrt", "x")
    assert code == 0 and "the gradient in x's shape" in err


def test_code_with_json_prints_json():
    import json

    for cmd in (["derive", "G:exp(X@W)"], ["hessian", "x.T@A@x"]):
        wrt = "X" if cmd[0] == "derive" else "x"
        r = subprocess.run([sys.executable, "-m", "matcalc", *cmd, "--wrt", wrt, "--code", "--json"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "def " in json.loads(r.stdout.splitlines()[0])["numpy_source"], r.stdout[:200]


def test_an_unknown_option_is_named(capsys):
    # --wrtt x said only "the following arguments are required: --wrt"
    for argv, said in [(["derive", "sum(x)", "--wrtt", "x"], "derive has no option --wrtt (did you mean --wrt?)"),
                       (["hessian", "x:x", "--wrt", "x", "--kronn"], "hessian has no option --kronn (did you mean "
                                                                       "--kron?)"),
                       (["derive", "--x", "--wrt", "x"], "derive has no option --x (an expression that begins with "
                                                         "- goes after --: matcalc derive --wrt x -- '--x')")]:
        with pytest.raises(SystemExit) as e:  # (a usage error: argparse's exit, status 2)
            cli.run(argv)
        assert e.value.code == 2 and said in capsys.readouterr().err
    code, out, err = run(capsys, "derive", "--x:x", "--wrt", "x")  # (an expression, not an option)
    assert code == 0, err


def test_a_shape_with_nothing_after_the_equals_sign_is_refused(capsys):
    # --shape x= (a shell variable that expanded to nothing) made x a scalar, silently
    assert cli.run(["derive", "sum(x)", "--wrt", "x", "--shape", "x="]) == 2
    assert "--shape x=: no dimensions after '='" in capsys.readouterr().err
    assert cli.run(["derive", "alpha*sum(x)", "--wrt", "alpha", "--shape", "alpha=scalar"]) == 0


def test_an_error_in_a_definition_quotes_it(capsys):
    # "(p = exp(W@x): ..." read as if the bracket closed
    assert cli.run(["derive", "sum(p)", "--wrt", "W", "--let", "p=exp(W@x"]) == 2
    assert 'in the definition of p ("p = exp(W@x"): the expression ends too early' in capsys.readouterr().err
