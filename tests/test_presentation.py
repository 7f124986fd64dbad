"""Derivations people can read: names, steps, shapes, LaTeX that a real renderer accepts,
results no longer than the textbook form, Jupyter display."""
import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import matcalc
from conftest import load_corpus

VAE = "alpha*(exp(W@x+c)-W@x-c+m*m-1):1"
RELU = "0.5*(exp(W1@relu(W0@x+b0)+b1) - (W1@relu(W0@x+b0)+b1) + m*m - 1):1"
CORPUS = load_corpus()


def test_user_definitions_name_the_result_and_the_steps():
    d = matcalc.derive("alpha*(p - l + m*m - 1):1", wrt="W", definitions={"l": "W@x+c", "p": "exp(l)"})
    assert d.text == "alpha*(p - 1)@x.T"
    lines = d.derivation_lines()
    assert lines[2].startswith("dλ = alpha*(dp - dl):1")
    body = "\n".join(lines)
    assert "[dp = p*dl]" in body and "[dl = dW@x]" in body
    assert "alpha*(p - 1):dl" in body
    assert "alpha*(p - 1)@x.T:dW    [A:BC = ACᵀ:B]" in body
    # where= is the same thing, and the full expression written out gives the same names
    e = matcalc.derive(VAE, wrt="W", where={"l": "W@x+c", "p": "exp(l)"})
    assert e.text == "alpha*(p - 1)@x.T"


def test_automatic_names_for_the_vae_and_relu_examples():
    d = matcalc.derive(VAE, wrt="W")
    assert d.text == "alpha*(exp(W@x + c) - 1)@x.T"   # the full answer stays re-parseable alone
    assert d.definitions == {"z": "W@x + c", "p": "exp(z)"}
    assert d.short_text == "alpha*(p - 1)@x.T"
    r = matcalc.derive(RELU, wrt="W0")
    assert r.definitions["h"] == "step(z1)" and r.definitions["z1"] == "W0@x + b0"
    assert r.short_text == "0.5*((W1.T@(p - 1))*h)@x.T"


def test_steps_end_in_the_canonical_form_and_cite_identities():
    d = matcalc.derive("G:exp(X@W)", wrt="X")
    last = d.steps[-1]
    assert last.after.op == "frob" and last.after.args[1].op == "delta"
    assert {s.identity for s in d.steps} >= {"A:(B∘C) = (A∘B):C", "A:BC = ACᵀ:B"}
    for s in d.steps:
        assert s.identity and s.before is not None and s.after is not None


def test_shapes_and_layouts():
    d = matcalc.derive("G:(X@W)", wrt="W", shapes={"X": ("n", "d"), "W": ("d", "m"), "G": ("n", "m")})
    assert d.shape == ("d", "m") and "shape of W" in d.shape_reason
    assert d.layout("denominator") == ("X.T@G", ("d", "m"))
    assert d.layout("numerator") == ("G.T@X", ("m", "d"))
    v = matcalc.derive("x.T@a", wrt="x")
    assert v.layout("numerator")[1] == (1, "b")  # the dimension is not named a: a is a symbol
    with pytest.raises(matcalc.MatcalcError):
        d.layout("sideways")


def _ops(e):
    """Operators in the printed result; transposes are notation, a - b is one operator."""
    if not e.args:
        return 0
    if e.op == "T":
        return _ops(e.args[0])
    if e.op == "add":
        inner = 0
        for t in e.args:
            neg = t.op == "mul" and len(t.args) == 2 and t.args[0].op == "const" and t.args[0].attr == -1
            inner += _ops(t.args[1]) if neg else _ops(t)
        return inner + len(e.args) - 1
    if e.op == "mul":
        return sum(_ops(a) for a in e.args) + len(e.args) - 1
    return sum(_ops(a) for a in e.args) + 1


def _py_ops(src):
    return sum(isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Call)) for n in ast.walk(ast.parse(src, mode="eval")))


@pytest.mark.parametrize("case", CORPUS, ids=[c["id"] for c in CORPUS])
def test_result_is_no_longer_than_the_reference(case):
    d = matcalc.derive(case["expr"], wrt=case["wrt"], shapes=case["shapes"])
    assert _ops(d.gradient) <= _py_ops(case["reference"]), (d.text, case["reference"])
    for bad in ("1*", "*1)", "@I", "Diag(", ".T.T"):
        assert bad not in d.text, d.text
    assert not d.text.endswith("*1")


def test_jupyter_display():
    d = matcalc.derive(VAE, wrt="W")
    md = d._repr_markdown_()
    assert md.startswith("$$") and "<details>" in md and "\\begin{aligned}" in md
    assert d._repr_latex_().startswith("$") and d._repr_latex_().endswith("$")
    assert "\\frac{\\partial \\lambda}{\\partial W}" in d._repr_latex_()


def _katex():
    node = shutil.which("node")
    script = Path(__file__).parent / "js" / "render_katex.js"
    if node is None:
        return None
    env = dict(os.environ)
    extra = os.environ.get("MATCALC_KATEX_DIR")
    if extra:
        env["NODE_PATH"] = str(Path(extra) / "node_modules")
    probe = subprocess.run([node, "-e", "require('katex')"], env=env, capture_output=True)
    return (node, script, env) if probe.returncode == 0 else None


NEW_OPERATORS = [
    ("O:(softmax(Q@K.T, 1)@V)", "K"), ("-sum(Y*log(softmax(W@X, 0)))", "W"), ("tr(matrix_power(X, -2)@A)", "X"),
    ("sum(gelu(W@x) + silu(W@x) + logsigmoid(W@x) + erf(W@x))", "W"), ("C:kron(A, B)", "A"),
    ("C:kron(A, B)", "B"), ("vec(X):y", "X"), ("mean(X, 0)@u + mean(X)", "X"), ("sum(alpha + x)", "alpha"),
    ("logsumexp(X, 1):v", "X"), ("sum(cosh(x) + sinh(x) + tan(x) + arcsin(x) + arccos(x) + arctan(x))", "x"),
    ("sum(log1p(exp(x)) + expm1(x))", "x"), ("sum(X)/size(X, 0)", "X"),
    ("sum(gammaln(x) + digamma(x) + trigamma(x) + polygamma(3, x))", "x"), ("log(2)/2*sum(x**2)", "x"),
]


def test_latex_of_every_corpus_case_renders():
    """Every result, every step and the whole derivation block render in KaTeX (strict)."""
    found = _katex()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("KaTeX is not installed: .ci/run installs it with npm")
        pytest.skip("node with the katex package is not available (npm install katex)")
    node, script, env = found
    texts = []
    for case in CORPUS:
        for d in matcalc.derive(case["expr"], wrt=[case["wrt"]], shapes=case["shapes"]).values():
            texts += [d.latex, d.short_latex, d.steps_latex, d._repr_latex_().strip("$")]
    texts.append(matcalc.derive(RELU, wrt="W0").steps_latex)
    # 83,000 characters, more than KaTeX's default 1000 macro expansions: the page raises maxExpand
    texts.append(matcalc.hessian("norm2(softmax(w/(1 + exp(w))))", "w").steps_latex)
    for expr, wrt in NEW_OPERATORS:  # every registry operator's LaTeX, in results and steps
        d = matcalc.derive(expr, wrt=wrt)
        texts += [d.latex, d.steps_latex]
    r = subprocess.run([node, str(script)], input=json.dumps(texts), capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    errors = [(t, e) for t, e in zip(texts, json.loads(r.stdout)) if e]
    assert not errors, errors[:3]


# LaTeX that said something else than the text: (expression, wrt, the LaTeX of the gradient)
LATEX_READINGS = [
    ("exp(x).T@A@exp(x)", "A", "e^{x} \\left(e^{x}\\right)^{\\top}"),  # was e^{x}^{\top}: a KaTeX error
    ("tr(inv(exp(X))@A)", "A", "\\left(e^{X}\\right)^{-\\top}"),
    ("sum(X@X.T)", "X", "2 \\mathbf{1}\\mathbf{1}^{\\top} X"),  # a matrix of ones, not the vector 1
    ("sum(-3*X)", "X", "-3\\,\\mathbf{1}\\mathbf{1}^{\\top}"),       # an array of -3s, not the number
    ("sum(x**3)", "x", "3 {x}^{\\circ 2}"),                         # entrywise, not a matrix power
    ("D:(kron(A,B)@C)", "D", "\\left(A \\otimes B\\right) C"),
    ("(x.T@A@x)*(y.T@x)", "y", "\\left(x^{\\top} A x\\right) x"),
]


@pytest.mark.parametrize("expr,wrt,tex", LATEX_READINGS, ids=[c[0] for c in LATEX_READINGS])
def test_latex_reads_as_the_text_does(expr, wrt, tex):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", matcalc.NotationWarning)
        d = matcalc.derive(expr, wrt=wrt)
    assert d.latex == tex
    found = _katex()
    if found is not None:  # and it renders
        node, script, env = found
        r = subprocess.run([node, str(script)], input=json.dumps([d.latex, d.steps_latex]), capture_output=True,
                           text=True, env=env, timeout=120)
        assert r.returncode == 0 and not any(json.loads(r.stdout)), r.stdout


def test_vec_forms_with_longer_dimension_names_in_latex():
    h = matcalc.hessian("sum(X@X.T)", "X", shapes={"X": ("n1", "d1")})
    assert h.kron_latex.startswith("I_{d_{1}} \\otimes") and "\\mathrm{I" not in h.kron_latex


def test_cli_let_layout_and_steps():
    run = lambda *a: subprocess.run([sys.executable, "-m", "matcalc", *a], capture_output=True,  # noqa: E731
                                    text=True, timeout=60)
    r = run("derive", "alpha*(p - l + m*m - 1):1", "--wrt", "W", "--let", "l=W@x+c", "--let", "p=exp(l)",
            "--layout", "numerator")
    assert r.returncode == 0, r.stderr
    assert "∂λ/∂W = alpha*(p - 1)@x.T" in r.stdout
    assert "numerator layout" in r.stdout and "(b, a)" in r.stdout
    r = run("derive", VAE, "--wrt", "W", "--steps")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[-2] == "∂λ/∂W = alpha*(p - 1)@x.T"
    assert any(ln.strip().endswith("[A:BC = ACᵀ:B]") and ln.strip().startswith("= alpha*(p - 1)@x.T:dW")
               for ln in lines)
    r = run("derive", "x:1", "--wrt", "x", "--let", "bad")
    assert r.returncode == 2 and "NAME=EXPR" in r.stderr


def test_the_function_shows_its_keywords_and_the_question():
    # what help(d.function), inspect.signature and Jupyter's d.function? show
    import inspect

    d = matcalc.derive("alpha*(exp(W@x+c)-W@x-c+m*m-1):1", wrt="W")
    assert str(inspect.signature(d.function)) == "(*, alpha, W, x, c, m)"
    assert d.function.__doc__ == "∂λ/∂W for λ = alpha*(exp(W@x+c)-W@x-c+m*m-1):1; shape (a, b)."
    vg = matcalc.value_and_grad("x:x + y:x", wrt=["x", "y"])
    assert str(inspect.signature(vg.function)) == "(*, x, y)" and "x:x + y:x" in vg.function.__doc__


@pytest.mark.parametrize("expr, wrt", [
    ("sum(log(1+exp(-y*(X@w))))", "w"),        # λ keeps -y*(X@w) nested, dz flattens it
    ("sum(log(1+exp(-(y*(X@w)))))", "w"),
    ("sum(tanh(-2*x*(A@w)))", "w"),
])
def test_one_quantity_gets_one_name(expr, wrt):
    d = matcalc.derive(expr, wrt=wrt)
    texts = list(d.definitions.values())
    assert len(texts) == len(set(texts)), d.definitions  # no two names for one value
    lines = "\n".join(d.derivation_lines())
    for name in d.definitions:
        assert name in lines.split("where", 1)[1]


def test_the_short_form_lists_only_the_names_it_uses():
    # the logistic loss names z1, q1, q2, s1 in λ's steps; the short gradient uses s2 = sigmoid(z2)
    d = matcalc.derive("-(y:log(sigmoid(X@w)) + (1-y):log(1-sigmoid(X@w)))", wrt="w")
    used = d.short_definitions()
    assert set(used) < set(d.definitions)
    for name in used:  # each listed name is in the short form or in another listed value
        assert name in d.short_text or any(name in v for v in used.values())
    out = subprocess.run([sys.executable, "-m", "matcalc", "derive", d.expr, "--wrt", "w"],
                         capture_output=True, text=True, check=True).stdout
    where = out.split("where", 1)[1].split("\n", 1)[0]
    assert {part.split(" = ")[0].strip() for part in where.split(", ")} == set(used)


@pytest.mark.parametrize("expr, wrt", [
    ("tanh(mean(inv(F) - (F - D)))", "D"), ("sum(logsigmoid(-y*(X@w)))", "w"), ("-(-(x:x))", "x"),
])
def test_no_double_minus(expr, wrt):
    d = matcalc.derive(expr, wrt=wrt)
    text = "\n".join(d.derivation_lines()) + d.steps_latex + d.text
    assert "--" not in text and "- -" not in text


def test_a_definition_is_written_in_its_simplest_form():
    # σ(−z1) of the logsigmoid rule is σ(−(−y∘Xw)): the same quantity as y∘Xw, written so
    d = matcalc.derive("sum(logsigmoid(-y*(X@w)))", wrt="w")
    assert "y*(X@w)" in d.definitions.values() and "-(-y*(X@w))" not in d.definitions.values()


@pytest.mark.parametrize("expr, wrt", [("norm2(softmax(t*t))", "t"), ("tanh(tr(-H)*logsumexp(X@u))", "H")])
def test_no_step_repeats_the_line_before(expr, wrt):
    d = matcalc.derive(expr, wrt=wrt)
    rows = [line.split("    [")[0].split("= ", 1)[1] for line in d.derivation_lines() if line.lstrip().startswith(("dλ =", "="))]
    assert all(a != b for a, b in zip(rows, rows[1:])), rows
    assert [s["after"] for s in d.to_dict()["steps"]] == rows


def test_each_recorded_step_begins_where_the_one_before_ended():
    # a step that writes a name out (dp = p*dz) recorded its before with the name written out
    # already: before and after read the same, and the chain broke
    for case in load_corpus():
        d = matcalc.derive(case["expr"], wrt=case["wrt"], shapes=case["shapes"])
        steps = d.to_dict()["steps"]
        assert steps[0]["before"].startswith("d(")
        for a, b in zip(steps, steps[1:]):
            assert b["before"] == a["after"] != b["after"], (case["id"], a, b)


@pytest.mark.parametrize("expr, wrt, lets", [
    ("v.T@sigmoid(W@softplus(h))", "W", {"h": "(w.T@X.T).T"}),  # q was listed after z = W@q
    ("sum(softplus(W@h))", "W", {"h": "u*alpha"}),              # the short form's where lacked h
    ("sum(log(1+exp(-y*(X@w))))", "w", None),
])
def test_every_definition_comes_after_the_names_it_uses(expr, wrt, lets):
    import re as _re

    d = matcalc.derive(expr, wrt=wrt, definitions=lets)
    for defs in (d.definitions, d.short_definitions()):
        seen = set()
        for name, value in defs.items():
            used = {n for n in _re.findall(r"[A-Za-z_]\w*", value) if n in d.definitions}
            assert used <= seen, (name, value, defs)
            seen.add(name)
    short_used = {n for n in _re.findall(r"[A-Za-z_]\w*", d.short_text) if n in d.definitions}
    assert short_used <= set(d.short_definitions())


def test_the_objective_is_ell_in_latex_where_a_variable_is_lambda():
    d = matcalc.derive("norm2(X@w-y)**2 + lambda*w:w", wrt="w")
    assert "\\partial \\ell" in d._repr_latex_() and d.steps_latex.split("\n")[1].startswith("\\ell &=")
    assert "\\lambda w" in d.latex  # the variable keeps its letter
    assert "\\partial \\lambda" in matcalc.derive("x:x", wrt="x")._repr_latex_()
    h = matcalc.hessian("lambda*w:w", "w")
    assert "\\mathrm{d}^2\\ell" in h.steps_latex


@pytest.mark.parametrize("expr, wrt, text, tex", [
    ("sum(exp(z)/(2 + exp(z)))", "z", "sigmoid(z - log(2))*(1 - sigmoid(z - log(2)))", "\\log(2)"),
    ("sum(X**(1/3))", "X", "1/3*X**(-2/3)", "-\\tfrac{2}{3}"),  # was 0.3333333333333333*X**-0.6666666666666667
])
def test_numbers_that_rounding_made_long_print_as_meant(expr, wrt, text, tex):
    import numpy as np

    d = matcalc.derive(expr, wrt=wrt)
    assert d.text == text and tex in d.latex
    matcalc.derive(f"sum(({text})*{wrt})", wrt=wrt)  # the text reads back
    v = np.random.default_rng(15).uniform(0.5, 2.0, (3, 4) if wrt == "X" else 3)
    text_value = eval(text.replace("sigmoid", "_s").replace("log", "np.log"),  # noqa: S307 - our own output
                      {"np": np, "_s": lambda t: 1 / (1 + np.exp(-t)), wrt: v})
    np.testing.assert_allclose(d.function(**{wrt: v}), text_value, rtol=1e-14)


def test_a_number_one_rounding_away_from_a_short_one_prints_short():
    # 0.1*0.1 printed 0.010000000000000002, 0.1 + 0.2 as 0.30000000000000004
    h = matcalc.hessian("exp(0.1*x.T@A@x)", "x")
    assert "0.01*" in h.text and "0.010000000000000002" not in h.text
    assert matcalc.derive("(0.1 + 0.2)*sum(x)", "x").text == "0.3"


def test_a_check_report_shows_its_sentence_in_jupyter():
    # Jupyter showed CheckReport(ok=True, max_rel_error=…) and _report_class.<locals>.ExactReport(…)
    class Printer:
        def __init__(self):
            self.out = ""

        def text(self, s):
            self.out += s

    d = matcalc.derive("x:x", "x")
    for report in (d.check(), d.check(exact=True)):
        p = Printer()
        report._repr_pretty_(p, False)
        assert p.out == str(report) and "check ok" in p.out
        assert repr(report).startswith(type(report).__name__ + "(") and "<locals>" not in repr(report)


def test_several_results_show_each_in_jupyter():
    # derive, hessian and jacobian with several wrt returned plain dicts: Jupyter showed reprs
    for results in (matcalc.derive("G:exp(X@W)", wrt=["X", "W"]), matcalc.jacobian("X@W", wrt=["X", "W"]),
                    matcalc.hessian("sum(exp(X@W))", wrt=["X", "W"])):
        assert isinstance(results, dict) and len(results) >= 2
        md = results._repr_markdown_()
        for r in results.values():
            assert r._repr_markdown_() in md
    blocks = matcalc.hessian("sum(exp(X@W))", wrt=["X", "W"])
    assert blocks["X", "W"]._repr_latex_().startswith("$H_{X W}[\\mathrm{d}W] =")  # (H[dW] as the W, W block)
    assert blocks["W", "W"]._repr_latex_().startswith("$H[\\mathrm{d}W] =")


def test_value_and_grad_shows_its_gradients():
    # print(vg) and Jupyter showed only <ValueAndGrad of λ = … wrt W, b>
    vg = matcalc.value_and_grad("sum((W@x + b)**2)", wrt=["W", "b"], shapes={"b": ("a",)})
    assert str(vg) == "∂λ/∂W = 2*(W@x + b)@x.T\n∂λ/∂b = 2*(W@x + b)"
    md = vg._repr_markdown_()
    assert md.count("$$\\frac{\\partial \\lambda}") == 2 and md.count("<details>") == 2


def test_square_roots_of_small_numbers_print_as_roots():
    # attention's 1/sqrt(5) printed 0.4472135954999579
    d = matcalc.derive("sum(exp(x/sqrt(5)))", "x")
    assert d.text == "1/sqrt(5)*exp(1/sqrt(5)*x)" and "\\sqrt{5}" in d.latex


def test_a_named_quantity_written_out_in_the_steps_prints_sizes_as_the_result_does():
    # "[dz = dQ@K.T/sqrt(size(c))]": a dimension's name read as a symbol (an LSTM's cell state c)
    d = matcalc.derive("G:(softmax(Q@K.T/sqrt(size(Q,1)), 1)@V)", "Q")
    lines = d.derivation_lines()
    assert any("[dz = dQ@K.T/sqrt(size(Q, 1))]" in line for line in lines), lines
    assert not any("size(c)" in line for line in lines)


def test_multiples_of_logarithms_print_as_such_and_read_back():
    # a Wishart's log(2)/2*size(X, 0) printed as 0.34657359027997264*size(X, 0)
    import math

    import numpy as np

    from matcalc.printing import number_tex, number_text

    for v, text in [(math.log(2) / 2, "log(2)/2"), (0.5 * math.log(2 * math.pi), "log(2*pi)/2"),
                    (-math.log(2) / 4, "-log(2)/4")]:
        assert number_text(v)[0] == text
        d = matcalc.derive(f"{text}*sum(x)", "x")
        np.testing.assert_allclose(d.function(x=np.ones(3)), v, rtol=1e-15)
    assert number_tex(math.log(2) / 2) == "\\tfrac{\\log(2)}{2}"
    assert number_text(0.5 * math.log(2 * math.pi), pi=False)[0] != "log(2*pi)/2"  # (pi a symbol)
