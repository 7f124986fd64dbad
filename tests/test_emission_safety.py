"""Safety of the emitted NumPy code.

Issue "Never a wrong gradient, never a traceback": no user text reaches eval/exec;
identifiers are validated by the grammar and renamed where they collide with Python
keywords, builtins or the emitter's own names (np, its temporaries t0, t1, …, its helpers
_sigmoid, …, its dimension variables dim_a, …); the emitted source is deterministic (same
input, byte-identical source, whatever PYTHONHASHSEED) and importable as a module.

Every gradient here is compared with an analytic gradient and with central finite
differences (tests/fd.py) of an independent NumPy λ, called with the *user's* names as
keyword arguments.
"""
from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import keyword
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import matcalc
from matcalc.codegen import HELPERS
from support.fd import central_fd_grad, rel_error
from conftest import load_corpus

# names a user may give symbols (the grammar's NAME), chosen to collide with something
NASTY = ["lambda", "def", "class", "import", "None", "True", "async", "match", "type",
         "np", "numpy", "sum", "exp", "log", "tr", "print", "eval", "exec", "open",
         "__import__", "__builtins__", "__name__", "_", "t0", "t1", "t12", "_sigmoid",
         "_softmax", "_logsumexp", "_logdet", "dim_a", "dim_n", "grad_x", "grad_q", "value",
         "e", "m", "z", "α", "Σ", "λ", "ℌ", "xʹ", "é", "中", "ｑ"]

UNSAFE_CALLS = {"eval", "exec", "compile", "__import__", "open", "getattr", "setattr", "globals",
                "locals", "vars", "input", "breakpoint"}


def _rng(seed=0):
    return np.random.default_rng(seed)


def _functions(src_or_tree) -> dict:
    tree = ast.parse(src_or_tree) if isinstance(src_or_tree, str) else src_or_tree
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


# the emitter's fixed helper library: text that no input can change, checked on its own
HELPER_BLOCKS = [b.strip("\n") for h in HELPERS.values() for b in h.split("\n\n\n") if b.strip()]
HELPER_NAMES = {n.name if isinstance(n, ast.FunctionDef) else n.targets[0].id
                for b in HELPER_BLOCKS for n in ast.parse(b).body}


def without_helpers(src: str) -> str:
    for block in HELPER_BLOCKS:
        src = src.replace(block, "")
    return src


def test_helper_library_defines_functions_and_its_module_globals_only():
    for block in HELPER_BLOCKS:
        for node in ast.parse(block).body:
            assert isinstance(node, ast.FunctionDef) or (
                isinstance(node, ast.Assign) and node.targets[0].id in ("_LAPACK", "_ONES", "_PICKED", "_DUE", "_SHAPES", "_EVERY", "_TIMED_SHAPES", "_OUTER_FORMS", "_POOL", "_THREADS", "_EXPIT")), ast.dump(node)
        for n in ast.walk(ast.parse(block)):
            if isinstance(n, ast.Name):
                assert n.id not in UNSAFE_CALLS, n.id



def _entry_conversion(node) -> bool:
    """``p = np.asarray(p, float)`` or ``p = float(p)``: an argument converted on entry."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call) and node.value.args):
        return False
    target, call = node.targets[0].id, node.value
    arg = call.args[0]
    name = ast.unparse(call.func)
    return isinstance(arg, ast.Name) and arg.id == target and name in ("np.asarray", "float")


def assert_safe_source(src: str, fname: str, params: dict):
    """The emitted module, less the fixed helper library: compiles; only an import of numpy
    and function definitions at module level; ``fname`` takes exactly the sanitised
    parameters, keyword-only; those are identifiers that shadow nothing; every name it reads
    is defined; string constants are docstrings or symbol names (dict keys); no call of
    eval/exec/…"""
    compile(src, "<emitted>", "exec")
    src = without_helpers(src)
    tree = ast.parse(src)
    for node in tree.body:
        if isinstance(node, ast.Import):
            assert [(a.name, a.asname) for a in node.names] == [("numpy", "np")], ast.dump(node)
        elif isinstance(node, ast.Assign):  # f = _blas_threads(f, ("W", …)): BLAS threads as measured
            assert isinstance(node.value, ast.Call) and node.value.func.id == "_blas_threads", ast.dump(node)
            fn, keys = node.value.args
            assert [t.id for t in node.targets] == [fn.id] == [fname], ast.dump(node)
            assert all(isinstance(k, ast.Constant) and k.value in params.values() for k in keys.elts)
        else:
            assert isinstance(node, ast.FunctionDef), f"unexpected module-level code: {ast.dump(node)}"
    funcs = _functions(tree)
    assert fname in funcs, (fname, list(funcs))
    f = funcs[fname]
    assert not f.args.args and not f.args.posonlyargs and not f.args.vararg and not f.args.kwarg
    args = [a.arg for a in f.args.kwonlyargs]
    assert sorted(args) == sorted(params.values()), (args, params)
    assert len(set(args)) == len(args), f"two symbols share a parameter: {args}"
    assigned = {t.id for n in ast.walk(f) if isinstance(n, (ast.Assign, ast.AugAssign)) and not _entry_conversion(n)
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Name)}
    used_helpers = {n.id for n in ast.walk(f) if isinstance(n, ast.Name) and (n.id in funcs or n.id in HELPER_NAMES)}
    for a in args:
        assert a.isidentifier() and a.isascii(), a
        assert not keyword.iskeyword(a) and not keyword.issoftkeyword(a), a
        assert a not in dir(builtins) and a not in ("np", "numpy"), f"parameter {a} shadows a builtin or np"
        assert a not in assigned, f"parameter {a} is overwritten by the emitter's local {a}:\n{src}"
        assert a not in used_helpers, f"parameter {a} shadows the helper {a}()"
    for user in params:
        if keyword.iskeyword(user) or user in dir(builtins) or user == "np":
            assert params[user] != user, f"{user!r} was not renamed"
    # every name read is a parameter, a local, np, a helper, or a harmless builtin
    for fn in funcs.values():
        defined = {a.arg for a in fn.args.kwonlyargs + fn.args.args} | {"np"} | set(funcs) | HELPER_NAMES
        defined |= {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign)
                    for t in n.targets if isinstance(t, ast.Name)}
        for n in ast.walk(fn):
            if isinstance(n, ast.Name):
                assert n.id not in UNSAFE_CALLS, f"{n.id} in the emitted code:\n{src}"
                assert n.id in defined or n.id in {"float", "abs", "max", "min", "len"}, \
                    f"{fn.name} reads the undefined name {n.id}:\n{src}"
            if isinstance(n, ast.Attribute):
                assert not n.attr.startswith("__"), f"dunder attribute .{n.attr}:\n{src}"
    # string constants: docstrings, or symbol names (value_and_grad's dict keys)
    docstrings = {id(fn.body[0].value) for fn in funcs.values()
                  if fn.body and isinstance(fn.body[0], ast.Expr)
                  and isinstance(fn.body[0].value, ast.Constant)}
    wrapper_keys = {id(k) for node in tree.body if isinstance(node, ast.Assign) for k in node.value.args[1].elts}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings | wrapper_keys:
            assert n.value in params, f"string constant {n.value!r} in the emitted code"


# ------------------------------------------------------------------ one nasty name at a time


def _accepted(name):
    try:
        matcalc.derive(f"{name}:{name}", wrt=name, shapes={name: ("n",)})
        return True
    except matcalc.ParseError:
        return False


def test_the_grammar_accepts_the_nasty_names_as_symbols():
    """All of NASTY are NAME tokens (so the tests below do test them)."""
    assert [n for n in NASTY if not _accepted(n)] == []


@pytest.mark.parametrize("name", NASTY)
def test_a_nasty_symbol_name(name):
    """λ = sum(exp(N)∘y) + N:N, N named ``name``: gradients right, called with the user's name."""
    expr = f"sum(exp({name})*y) + {name}:{name}"
    shapes = {name: ("n",), "y": ("n",)}
    rng = _rng()
    v, y = rng.standard_normal(4), rng.standard_normal(4)
    inputs = {name: v, "y": y}

    def lam(**kw):  # independent λ
        return float(np.sum(np.exp(kw[name]) * kw["y"]) + kw[name] @ kw[name])

    for wrt, exact in ((name, np.exp(v) * y + 2 * v), ("y", np.exp(v))):
        d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
        assert set(d.function.params) == {name, "y"}
        assert_safe_source(d.numpy_source, d.function.name, d.function.params)
        g = d.function(**inputs)
        assert rel_error(g, exact) < 1e-12, (wrt, g, exact)
        assert rel_error(g, central_fd_grad(lam, inputs, wrt)) < 1e-6
        assert d.check().ok
        # λ itself under the same names
        assert np.isclose(d.value_function(**inputs), lam(**inputs))


@pytest.mark.parametrize("name", ["self"])
def test_a_symbol_named_like_a_parameter_of_the_python_wrapper(name):
    test_a_nasty_symbol_name(name)


def test_all_nasty_names_in_one_expression():
    """Many colliding names at once: λ = Σᵢ sum(exp(vᵢ)∘vᵢ₊₁) (cyclic), all vectors."""
    names = NASTY
    k = len(names)
    expr = " + ".join(f"sum(exp({names[i]})*{names[(i + 1) % k]})" for i in range(k))
    shapes = {n: ("n",) for n in names}
    rng = _rng(1)
    inputs = {n: rng.standard_normal(3) * 0.5 for n in names}

    def lam(**kw):
        return float(sum(np.sum(np.exp(kw[names[i]]) * kw[names[(i + 1) % k]]) for i in range(k)))

    for i in (0, 3, 9, 14, 20, 27, 35, k - 1):
        wrt = names[i]
        d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
        params = d.function.params
        assert set(params) == set(names)
        assert len(set(params.values())) == len(names), "two symbols got one Python name"
        assert_safe_source(d.numpy_source, d.function.name, params)
        exact = np.exp(inputs[wrt]) * inputs[names[(i + 1) % k]] + np.exp(inputs[names[i - 1]])
        g = d.function(**inputs)
        assert rel_error(g, exact) < 1e-12, wrt
        assert rel_error(g, central_fd_grad(lam, inputs, wrt)) < 1e-6, wrt


@pytest.mark.parametrize("group", [
    ["lambda", "lambda_", "λ"],           # λ is spelled lambda in Python too
    ["α", "alpha"],
    ["ｑ", "q", "q_"],                      # NFKC: Python reads ｑ as q
    ["xʹ", "x_"],
    ["t0", "t0_", "t0__"],
    ["np", "np_"],
    ["_", "__"],
    ["é", "ue9"],
], ids=lambda g: "|".join(g))
def test_names_that_sanitise_alike_stay_distinct(group):
    """Two user names that map to one Python spelling must not be merged."""
    expr = " + ".join(f"{c}*sum({n})" for c, n in zip(["1", "2", "3"], group))
    shapes = {n: ("n",) for n in group}
    rng = _rng(2)
    inputs = {n: rng.standard_normal(3) for n in group}
    for i, wrt in enumerate(group):
        d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
        params = d.function.params
        assert len(set(params.values())) == len(group), params
        assert_safe_source(d.numpy_source, d.function.name, params)
        assert np.allclose(d.function(**inputs), float(i + 1)), (wrt, d.text)
        assert np.isclose(d.value_function(**inputs),
                          sum((j + 1) * np.sum(inputs[n]) for j, n in enumerate(group)))


@pytest.mark.parametrize("dims", [("lambda", "np"), ("t0", "dim_a"), ("None", "_x"), ("def", "e")])
def test_nasty_dimension_names(dims):
    r, c = dims
    shapes = {"W": (r, c), "x": (c,), "y": (r,)}
    d = matcalc.derive("y.T@W@x + sum(exp(W))", wrt="W", shapes=shapes)
    assert_safe_source(d.numpy_source, d.function.name, d.function.params)
    rng = _rng(3)
    W, x, y = rng.standard_normal((2, 3)), rng.standard_normal(3), rng.standard_normal(2)
    assert rel_error(d.function(W=W, x=x, y=y), np.outer(y, x) + np.exp(W)) < 1e-12
    assert d.check().ok


def test_value_and_grad_with_nasty_names():
    vg = matcalc.value_and_grad("lambda*sum(exp(def)) + np:print", wrt=["lambda", "def", "np"],
                                shapes={"def": ("n",), "np": ("n",), "print": ("n",)})
    assert_safe_source(vg.numpy_source, "value_and_grad", vg.function.params)
    rng = _rng(4)
    inputs = {"lambda": 0.7, "def": rng.standard_normal(3), "np": rng.standard_normal(3),
              "print": rng.standard_normal(3)}
    value, grads = vg.function(**inputs)
    assert np.isclose(value, 0.7 * np.sum(np.exp(inputs["def"])) + inputs["np"] @ inputs["print"])
    assert set(grads) == {"lambda", "def", "np"}
    assert np.isclose(grads["lambda"], np.sum(np.exp(inputs["def"])))
    assert np.allclose(grads["def"], 0.7 * np.exp(inputs["def"]))
    assert np.allclose(grads["np"], inputs["print"])


@pytest.mark.parametrize("bad", ["1x", "x.y", "x$", "x y", "x'y", "a.b.c", "x[0]", "x{}", "ᵀx", "x\u200by"])
def test_invalid_identifiers_are_refused_by_the_grammar(bad):
    with pytest.raises(matcalc.ParseError):
        matcalc.derive(f"sum({bad})", wrt="x")


# ------------------------------------------------------------------ no user text is executed


INJECTIONS = [
    "__import__('os').system('touch {sentinel}')",
    "x:1; __import__('os').system('touch {sentinel}')",
    "x:1\nimport os",
    "exec(\"open('{sentinel}', 'w')\")",
    "eval('1'):x",
    "x.__class__",
    "x.__class__.__bases__",
    "(lambda: 1)()",
    "x if x else x",
    "[x for x in x]",
    "'abc'",
    "x:1 # comment",
    "sum(x) or open('{sentinel}', 'w')",
    "f\"{{x}}\"",
    "x:1 \\\n + 1",
    "x@@x",
]


@pytest.mark.parametrize("template", INJECTIONS)
def test_python_in_the_expression_is_refused_and_never_run(template, tmp_path):
    sentinel = tmp_path / "pwned"
    expr = template.format(sentinel=sentinel)
    with pytest.raises(matcalc.MatcalcError):
        d = matcalc.derive(expr, wrt="x")
        d.function  # noqa: B018 - (not reached) would compile the emitted code
    assert not sentinel.exists()


def test_python_in_wrt_shapes_and_dimension_names_is_refused(tmp_path):
    sentinel = tmp_path / "pwned"
    payload = f"__import__('os').system('touch {sentinel}')"
    with pytest.raises(matcalc.MatcalcError):
        matcalc.derive("x:1", wrt=payload)
    with pytest.raises(matcalc.MatcalcError):
        matcalc.derive("x:1", wrt="x", shapes={"x": (payload,)})
    with pytest.raises(matcalc.MatcalcError):
        matcalc.derive("x:1", wrt="x", shapes={"x": payload})
    # a declaration for a name that is not in the expression does not reach the code
    try:
        d = matcalc.derive("x:1", wrt="x", shapes={payload: ("n",)})
    except matcalc.MatcalcError:
        pass
    else:
        assert payload not in d.numpy_source
        d.function(x=np.ones(3))
    assert not sentinel.exists()


def test_no_eval_of_user_text(monkeypatch):
    """With builtins.eval raising, derive/text/function/check still work; every compile() is
    of matcalc's own emitted module, never of user text."""
    matcalc.derive("sum(x)", wrt="x").function   # build the parser and imports first
    compiled = []
    real_compile = builtins.compile

    def no_eval(*args, **kwargs):
        raise AssertionError(f"eval called with {args[:1]!r}")

    def recording_compile(source, filename, mode, *args, **kwargs):
        compiled.append((source, filename, mode))
        return real_compile(source, filename, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "eval", no_eval)
    monkeypatch.setattr(builtins, "compile", recording_compile)
    expr = "lambda*sum(exp(__import__@os)) + eval:exec"
    shapes = {"__import__": ("n", "m"), "os": ("m",), "eval": ("n",), "exec": ("n",)}
    d = matcalc.derive(expr, wrt="__import__", shapes=shapes)
    assert d.text
    assert d.latex
    rng = _rng(5)
    inputs = {"lambda": 0.5, "__import__": rng.standard_normal((2, 3)), "os": rng.standard_normal(3),
              "eval": rng.standard_normal(2), "exec": rng.standard_normal(2)}
    g = d.function(**inputs)
    assert rel_error(g, 0.5 * np.outer(np.exp(inputs["__import__"] @ inputs["os"]), inputs["os"])) < 1e-12
    assert d.check().ok
    monkeypatch.undo()
    assert compiled, "the emitted code was expected to be compiled"
    for source, filename, mode in compiled:
        assert isinstance(source, str) and source.startswith("import numpy as np\n"), source
        assert mode == "exec" and str(filename).startswith("<matcalc"), filename
        assert source in (d.numpy_source, d.value_function.source), source
        assert expr not in source.split('"""')[-1]


# ------------------------------------------------------------------ importable, deterministic


def _import(path, modname):
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("expr,wrt,shapes", [
    ("alpha*(exp(W@x+c)-W@x-c+m*m-1):1", "W", None),
    ("logdet(X) - tr(inv(X)@S)", "X", None),
    ("sum(log(1 + exp(-y*(X@w))))", "w", None),
    ("y:softmax(z) + logsumexp(z) + sum(sigmoid(z))", "z", None),
    ("lambda*sum(exp(def)) + np:sum + t0:_sigmoid", "def",
     {"def": ("n",), "np": ("n",), "sum": ("n",), "t0": ("n",), "_sigmoid": ("n",)}),
    ("Σ:(α*Σ) + sum(relu(ℌ@xʹ))", "Σ", {"Σ": ("n", "n"), "ℌ": ("n", "n"), "xʹ": ("n",)}),
])
def test_emitted_source_is_an_importable_module(expr, wrt, shapes, tmp_path):
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    path = tmp_path / "emitted_grad.py"
    path.write_text(d.numpy_source, encoding="utf-8")
    mod = _import(path, "emitted_grad")
    f = getattr(mod, d.function.name)
    rng = _rng(6)
    inputs = {}
    sizes = {}
    for name, shape in d.user_shapes.items():
        dims = tuple(sizes.setdefault(s, 2 + len(sizes)) if isinstance(s, str) else s for s in shape)
        if dims and d.check().domains.get(name) == "spd":
            R = rng.standard_normal((dims[0], dims[0]))
            inputs[name] = R @ R.T / dims[0] + np.eye(dims[0])
        else:
            inputs[name] = float(rng.standard_normal()) if not dims else rng.standard_normal(dims)
    got = f(**{d.function.params[k]: v for k, v in inputs.items()})
    want = d.function(**inputs)
    # (each module times its forms on first use, and the forms agree only to rounding: under
    # load the two may pick inv(X)@S and a solve differently)
    assert np.allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=0)
    # the module is self-contained: it only needs numpy
    assert set(vars(mod)) - {"np"} <= set(_functions(d.numpy_source)) | HELPER_NAMES | {
        "__name__", "__doc__", "__package__", "__loader__", "__spec__", "__file__", "__cached__",
        "__builtins__"}


def test_same_input_gives_byte_identical_source_in_one_process():
    expr = "0.5*(exp(W1@relu(W0@x+b0)+b1) - (W1@relu(W0@x+b0)+b1) + m*m - 1):1"
    first = {w: matcalc.derive(expr, wrt=w).numpy_source for w in ("W0", "b0", "W1", "b1", "m")}
    matcalc.derive("sum(log(1 + exp(-y*(X@w))))", wrt="X").numpy_source  # other work in between
    again = {w: matcalc.derive(expr, wrt=w).numpy_source for w in ("m", "b1", "W1", "b0", "W0")}
    assert first == again


DET_EXPR = ("0.5*(exp(W1@relu(W0@x+b0)+b1) - (W1@relu(W0@x+b0)+b1) + m*m - 1):1"
            " + lambda*sum(np) + tr(inv(S)@A) + sum(softmax(W0@x)) + Σ:(α*Σ)")


def _cli_code(seed):
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    args = [sys.executable, "-m", "matcalc", "derive", DET_EXPR, "--code", "--steps"]
    for w in ("W0", "lambda", "S", "np", "Σ"):
        args += ["--wrt", w]
    r = subprocess.run(args, capture_output=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr.decode("utf-8", "replace")
    return r.stdout


def test_cli_code_is_byte_identical_across_hash_seeds():
    a, b = _cli_code(1), _cli_code(2024)
    assert b"def grad_W0(" in a
    assert a == b


_BATCH = r"""
import json, sys
import matcalc
out = []
for case in json.load(open(sys.argv[1], encoding="utf-8")):
    d = matcalc.derive(case["expr"], wrt=case["wrt"], shapes=case["shapes"])
    out.append(d.numpy_source + d.value_function.source + "\n".join(d.derivation_lines()))
sys.stdout.write(json.dumps(out))
"""


def test_corpus_sources_are_identical_across_hash_seeds(tmp_path):
    cases = [{"expr": c["expr"], "wrt": c["wrt"], "shapes": c["shapes"]} for c in load_corpus()]
    data = tmp_path / "cases.json"
    data.write_text(json.dumps(cases), encoding="utf-8")
    outs = []
    for seed in (0, 77):
        env = dict(os.environ, PYTHONHASHSEED=str(seed))
        r = subprocess.run([sys.executable, "-c", _BATCH, str(data)], capture_output=True, env=env,
                           timeout=300)
        assert r.returncode == 0, r.stderr.decode("utf-8", "replace")
        outs.append(r.stdout)
    assert outs[0] == outs[1]
    assert len(json.loads(outs[0])) == len(cases)


@pytest.mark.parametrize("expr,wrt", [
    ("sum(tanh(W2@tanh(W1@X)))", "W1"),
    ("G:exp(X@W) + sum(log(exp(A) + B*B))", "X"),
    ("sum(sin(A + B) + cos(A))", "A"),
])
def test_in_place_functions_never_touch_the_arguments(expr, wrt):
    """A function of a new matrix overwrites that matrix (np.tanh(t, out=t)); arguments
    and shared temporaries are never overwritten, and the result is unchanged."""
    d = matcalc.derive(expr, wrt=wrt)
    src = d.numpy_source
    assert "out=" in src, src
    for m in re.finditer(r"np\.\w+\((\w+), out=(\w+)\)", src):
        assert m.group(1) == m.group(2) and m.group(1) not in d.function.params.values(), src
    rng = _rng(9)
    sizes: dict = {}
    inputs = {}
    for name, shape in d.user_shapes.items():
        dims = tuple(sizes.setdefault(s, 3 + len(sizes)) for s in shape)
        inputs[name] = 0.5 * rng.standard_normal(dims)
    copies = {k: v.copy() for k, v in inputs.items()}
    got = d.function(**inputs)
    for k in inputs:
        assert np.array_equal(inputs[k], copies[k]), f"{k} was overwritten"
    assert rel_error(got, central_fd_grad(d.value_function, copies, wrt)) < 1e-6
    assert np.array_equal(d.function(**inputs), got)  # and again, from the same arguments


@pytest.mark.parametrize("dims", [("np", "np_"), ("sum", "sum_"), ("def", "def_"), ("t0", "t0_")])
def test_dimension_names_that_sanitise_alike_stay_distinct(dims):
    # both were dim_np_ in the emitted code: the second size overwrote the first
    X = np.arange(12.0).reshape(3, 4)
    assert matcalc.derive("sum(X)", wrt="X", shapes={"X": dims}).function(X=X).shape == (3, 4)
    assert np.allclose(matcalc.derive("mean(X)", wrt="X", shapes={"X": dims}).function(X=X), 1 / 12)
