"""Bad input: matcalc's own exception (API) or exit status 2 (CLI), a message that names the
sub-expression and the shapes, a caret under the column, never a traceback."""
import re
import subprocess
import sys

import numpy as np
import pytest

import matcalc
from matcalc import DeriveError, MatcalcError, ParseError, ShapeError

# (expression, wrt, exception class, words the message must contain, column of the caret)
REFUSED = [
    ("W +", "W", ParseError, ["ends too early"], 4),
    ("(W@x", "W", ParseError, ["ends too early"], 5),
    ("W@x)", "W", ParseError, ["')'", "unbalanced"], 4),
    ("foo(x)", "x", ParseError, ["unknown function foo"], 1),
    ("exq(x):1", "x", ParseError, ["did you mean exp"], 1),
    ("W[0]", "W", ParseError, ["'['"], 2),
    ("x = y", "x", ParseError, ["'='", "equation"], 3),
    ("W x", "W", ParseError, ["operator is missing"], 3),
    ("matrix_power(X, 100000000):1", "X", ShapeError, ["at most 10^6", "100000000"], 17),
    ("matrix_power(X, -1000):1", "X", ShapeError, ["between -64 and 64", "-1000"], 17),
    ("sum(X, 2):y", "X", ShapeError, ["axis", "not 2"], 8),
    ("x $ y", "x", ParseError, ["'$'"], 3),
    ("", "x", ParseError, ["empty"], 1),
    ("sum(x + kron(x, x))", "x", ShapeError, ["x + kron(x, x)", "length-a vector", "length-a*a vector"], 5),
    ("sum(W + x)", "W", None, [], None),  # fine: x (a column) broadcasts over W's columns, as in NumPy
    ("sum(A@B)", "A", None, [], None),  # fine: A@B is a matrix, summed
    ("x:y.T", "x", ShapeError, ["x:y.T", "length-a vector", "1×b row vector"], 1),
    ("det(x)", "x", ShapeError, ["det needs a square matrix", "x is a length-a vector"], 1),
    ("W@x", "W", ShapeError, ["must be a scalar", "length-a vector"], 1),
    ("x.T@W@y + sum(W@y.T)", "W", ShapeError, ["W@y.T", "inner dimensions"], 15),
    ("2**W", "W", ShapeError, ["exponent W", "a×b"], 4),
    ("exp(W, x):1", "W", ShapeError, ["one argument"], 1),
    ("sum(alpha@W)", "W", ShapeError, ["alpha@W", "scalar", "use *"], 5),
    ("tr(I)", "I", ShapeError, ["size of I"], 4),
    ("sum(diag(x))", "x", ShapeError, ["diag needs a square matrix", "Diag(v)"], 5),
    ("sum(Diag(X))", "X", ShapeError, ["Diag needs a column vector"], 5),
    ("A:B", "Q", DeriveError, ["'Q' does not occur", "A, B"], None),
    ("A:B", "a", DeriveError, ["does not occur", "did you mean A"], None),
    ("alpha*sum(x)", "α", DeriveError, ["does not occur", "did you mean alpha?"], None),
    ("σ*sum(x)", "sigma", DeriveError, ["does not occur", "did you mean σ?"], None),
    ("2", "x", DeriveError, ["'x' does not occur", "no symbols", "constant"], None),
    ("size(X)", "X", DeriveError, ["X occurs only where its values do not matter", "would be 0"], 1),
    ("sum(X) + size(X, 2)", "X", ShapeError, ["size takes axis 0", "not 2"], 18),
    ("sum(X) + size(X, -3)", "X", ShapeError, ["size takes axis 0", "not -3"], 18),
    ("sum(X) + size(X, -1)", "X", None, [], None),  # fine: the last axis, as NumPy's
    # NumPy spellings with no matcalc function of their name: what to write, not "drop np."
    ("sum(np.where(x > 0, x, 0))", "x", ParseError, ["np.where", "step(x)"], 7),
    ("sum(np.logaddexp(0, x))", "x", ParseError, ["np.logaddexp", "softplus(x)"], 7),
    ("sum(np.square(x))", "x", ParseError, ["np.square: write x**2"], 7),
    ("sum(np.foo(x))", "x", ParseError, ["np.foo has no matcalc counterpart"], 7),
    ("np.pi*sum(x)", "x", ParseError, ["write pi without the np. prefix"], 3),
    ("sum(np.multiply(x, y))", "x", ParseError, ["np.multiply: write x*y"], 7),
    ("np.max(x)", "x", ParseError, ["no largest or smallest entry", "logsumexp"], 3),
    ("max(x)", "x", ParseError, ["no largest or smallest entry"], 1),
    ("sum(np.ravel(X))", "X", ParseError, ["vec(X)"], 7),
    ("sum(expit(x))", "x", ParseError, ["sigmoid(z)"], 5),
    ("len(x)*sum(x)", "x", ParseError, ["size(x, 0)"], 1),
    ("sum(2**x)", "x", ShapeError, ["exp(x*log(2))"], 8),
    ("sum(x[:, None]*y)", "x", ParseError, ["a vector is a column already", "x[None, :] is x.T"], 6),
    ("sum(ones((5, 3)))", "x", ParseError, ["a tuple", "ones(5, 3)"], 12),
    ("sum(X, (0, 1))", "X", ParseError, ["a tuple", "sum(X) sums every entry"], 10),
]


@pytest.mark.parametrize("expr,wrt,exc,words,col", REFUSED, ids=[r[0] or "<empty>" for r in REFUSED])
def test_api_refusal(expr, wrt, exc, words, col):
    if exc is None:
        assert matcalc.derive(expr, wrt=wrt).check().ok
        return
    with pytest.raises(exc) as info:
        matcalc.derive(expr, wrt=wrt)
    err = info.value
    assert isinstance(err, MatcalcError)
    msg = str(err)
    for w in words:
        assert w in msg, msg
    if col is not None:
        assert err.column == col
        lines = msg.splitlines()
        assert lines[-1].index("^") == 2 + col - 1, msg  # the caret sits under the column


def test_declared_shapes_that_contradict_usage():
    with pytest.raises(ShapeError) as info:
        matcalc.derive("x.T@W@y", wrt="W", shapes={"W": ("a", "b"), "x": ("c",), "y": ("b",)})
    assert "x.T@W" in str(info.value) and "inner dimensions" in str(info.value)
    with pytest.raises(ShapeError):
        matcalc.derive("A:B", wrt="A", shapes={"A": ("n", 3), "B": ("n", 4)})
    with pytest.raises(ShapeError):
        matcalc.derive("A:B", wrt="A", shapes={"A": ("n", "m", "k")})
    with pytest.raises(ShapeError):
        matcalc.derive("A:B", wrt="A", shapes={"A": ("n", 0)})


def test_a_wrt_defined_but_unused_is_said_so():
    # it was "z occurs only where its values do not matter (its size)", the caret under sum(x)
    with pytest.raises(DeriveError, match="z is defined but the expression does not use it"):
        matcalc.derive("sum(x)", wrt="z", definitions={"z": "2*x"})


def test_wrt_must_be_given():
    with pytest.raises(DeriveError):
        matcalc.derive("A:B", wrt=[])
    with pytest.raises(DeriveError):
        matcalc.derive("A:B", wrt=3)


def test_function_rejects_inputs_of_the_wrong_shape():
    d = matcalc.derive("G:(X@W)", wrt="X")
    import numpy as np

    with pytest.raises(ShapeError):
        d.function(G=np.ones((2, 4)), X=np.ones((2, 3)), W=np.ones((5, 4)))
    with pytest.raises(TypeError):
        d.function(G=np.ones((2, 4)), X=np.ones((2, 3)))
    with pytest.raises(ShapeError, match=r"X has shape \(4, 3\), but its declared shape is \(3, 3\)"):
        matcalc.derive("sum(X@W)", "W", shapes={"X": (3, 3), "W": (3, 2)}).function(
            X=np.ones((4, 3)), W=np.ones((3, 2)))
    with pytest.raises(ShapeError, match=r"the shape of W is given as an array of numbers: give its shape "
                                         r"\(W.shape\)"):
        matcalc.derive("sum(W@x)", "W", shapes={"W": np.ones((2, 3))})
    assert matcalc.derive("sum(W@x)", "W", shapes={"W": np.array([2, 3])}).shape == (2, 3)  # (an array of sizes)
    with pytest.raises(TypeError, match="X is complex"):  # not its real part, silently
        d.function(G=np.ones((2, 4)), X=np.ones((2, 3)) * (1 + 1j), W=np.ones((3, 4)))
    for bad in (None, "1.0"):  # None gave an array of nan, silently
        with pytest.raises(TypeError, match="W is (NoneType|str)"):
            d.function(G=np.ones((2, 4)), X=np.ones((2, 3)), W=bad)
    # strings in an array, a dict, ragged lists: NumPy's message named no argument
    for bad, error in (({"W": 1}, TypeError), ([[1.0], [2.0, 3.0]], ValueError)):
        with pytest.raises(error, match="^W is not an array of numbers"):
            d.function(G=np.ones((2, 4)), X=np.ones((2, 3)), W=bad)
    for bad, what in ((np.array([["1", "2", "3"]] * 3), "text"), ([[1.0, None, 2.0]] * 3, "None")):  # ('1' read as 1.0,
        with pytest.raises(TypeError, match=f"^W holds {what}"):  # None as nan, silently)
            d.function(G=np.ones((2, 4)), X=np.ones((2, 3)), W=bad)
    hess = matcalc.hessian("sum(exp(x))", "x")
    with pytest.raises(ValueError, match="^the direction V is not an array of numbers"):
        hess.hvp([[1.0], [2.0, 3.0]], x=[1.0])
    for bad, what in ((["a"], "holds text"), ("1.5", "is str"), (None, "is NoneType")):  # (read as 1.5 and nan)
        with pytest.raises(TypeError, match=f"^the direction V {what}"):
            hess.hvp(bad, x=[1.0])
    with pytest.raises(TypeError, match="^the direction V is complex"):  # (its imaginary part was dropped)
        hess.hvp([1j], x=[1.0])
    h = matcalc.hessian("sum(exp(A@x))", "x")
    with pytest.raises(TypeError, match=r"hvp_x\(\) is missing the argument\(s\) x"):
        h.hvp(np.ones(3), A=np.ones((2, 3)))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "matcalc", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [
    ["derive", "W + x", "--wrt", "W"],
    ["derive", "W +", "--wrt", "W"],
    ["derive", "foo(x)", "--wrt", "x"],
    ["derive", "A:B", "--wrt", "Q"],
    ["derive", "A:B", "--wrt", "A", "--shape", "A"],
    ["derive", "A:B", "--wrt", "A", "--shape", "A=n,m,k"],
    ["derive", "A:B"],
    ["derive", "(" * 600 + "x" + ")" * 600 + ":1", "--wrt", "x"],
    ["derive", "x" + "+x" * 3000 + ":1", "--wrt", "x"],
    ["derive", "sum(W)", "--wrt", "W", "--shape", "W=n,,d"],             # an empty dimension
    ["derive", "sum(z)", "--wrt", "W", "--let", "z=W@x", "--let", "z=2*W@x"],  # defined twice
])
def test_cli_refusal_exits_2_without_traceback(args):
    r = _cli(*args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stderr.strip()


def test_cli_caret_under_the_column():
    r = _cli("derive", "sum(W + x)", "--wrt", "W", "--shape", "W=3,4", "--shape", "x=5")
    assert r.returncode == 2
    lines = r.stderr.rstrip("\n").splitlines()
    assert "W + x" in lines[0] and "column 5" in lines[0]
    assert lines[-2].strip() == "sum(W + x)"
    assert lines[-1].index("^") == lines[-2].index("W")


@pytest.mark.parametrize("expr,column,caret_at", [
    ("全*W:1 + x@@y", 11, 13),  # 全 takes two terminal columns: the second @ is the 12th shown
    ("ｘ*W:1 + x@@y", 11, 13),  # a fullwidth x too
    ("W:1 + x@@y", 9, 10),
    ("W*x̂:1", 4, 4),  # the hat (refused) is a combining mark: the caret goes under its x
])
def test_caret_under_wide_and_combining_characters(expr, column, caret_at):
    with pytest.raises(matcalc.MatcalcError) as e:
        matcalc.derive(expr, wrt="W")
    assert e.value.column == column
    assert str(e.value).splitlines()[-1].index("^") == caret_at  # (after the 2-space indent)


def test_cli_help_and_version():
    r = _cli("--help")
    assert r.returncode == 0 and "derive" in r.stdout
    r = _cli("derive", "--help")
    assert r.returncode == 0 and "--wrt" in r.stdout and "--check" in r.stdout
    r = _cli("--version")
    assert r.returncode == 0 and matcalc.__version__ in r.stdout


@pytest.mark.parametrize("expr,wrt,words", [
    ("eps*w.T@w", "w", ["eps is a vector by the spelling of its name", "shapes={'eps': ()}", "--shape eps=scalar"]),
    ("x.dot(y)", "x", ["x.dot is a method (NumPy's or torch's)", "x.T@y"]),
    ("X.t@y", "y", ["the transpose is .T"]),
    ("solve(K, y):y", "y", ["unknown function solve", "inv(A)@B"]),
    ("sum(log_softmax(z))", "z", ["log(softmax(z))"]),
    # as NumPy, PyTorch and textbook users write it
    ("lam*norm2(w)**2 + norm2(X@w-y)**2", "w", ["lam is a vector by the spelling", "shapes={'lam': ()}"]),
    ("x.T@A@x + b.T@x + c", "x", ["c is a vector by the spelling", "--shape c=scalar"]),
    ("x' * A * x", "x", ["write @ for the matrix product", "--syntax matlab"]),
    ("norm2(X@theta - y)**2", "theta", ["theta is a number by its Greek name", "shapes={'theta': ('n',)}"]),
    ("softmax(X@W, temperature=2):C", "W", ["temperature= is a keyword argument matcalc does not take",
                                            "sum(X, axis=0)"]),
    ("np.linalg.det(X)", "X", ["write det(...) without the np.linalg. prefix"]),
    # every module call of the text in one message, each with its matcalc spelling
    ("a@np.diag(x)@torch.diagonal(X)", "x", ["np.diag: of a vector v (the diagonal matrix) write Diag(v)",
                                            "torch.diagonal: write diag(X)"]),
    ("np.linalg.slogdet(X)[1]", "X", ["np.linalg.slogdet(X)[1] is logdet(X)"]),
    ("sum(normpdf(y - X@b))", "b", ["exp(-z**2/2)/sqrt(2*pi)"]),
    ("sum(huber(r))", "r", ["0.5*minimum(abs(r), c)**2 + c*relu(abs(r) - c)"]),
    ("pinv(X)", "X", ["no pseudo-inverse", "inv(X.T@X)@X.T"]),
    ("G:gelu(X@W, approximate='tanh')", "W", ["0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x**3)))"]),
    ("tr(X \\otimes X)", "X", ["kron(A, B)"]),
    ("tr(A X B)", "X", ["A@X is the matrix product"]),
    ("log det(X)", "X", ["logdet(X)"]),
    ("X.inverse()", "X", ["X.inverse is a method", "inv(A)"]),
    ("TR(X)", "X", ["did you mean tr?"]),
    ("sum(psi(x))", "x", ["SciPy's psi(x) is digamma(x)"]),
    ("1@mu.T:X", "X", ["mu is a number by its Greek name; to make it a vector declare it"]),
    ("sum(polygamma(7, x))", "x", ["polygamma(k, x) takes a whole order k from 0 to 6"]),
    ("sum(beta(x, y))", "x", ["exp(gammaln(a) + gammaln(b) - gammaln(a + b))"]),
    ("sum(jax.scipy.special.gammaln(x))", "x", ["write gammaln(...) without the jax.scipy.special. prefix"]),
    ("np.linalg.norm(A@x-b)**2", "x", ["norm(x) and norm(X, 'fro') are norm2"]),
    ("sum(max(W@x, 0))", "W", ["max(0, z) is relu(z)", "maximum(x, y)"]),
    ("sum(where(W@x > 0, W@x, 0))", "W", ["no comparisons", "step(z)*a + (1 - step(z))*b"]),
    ("sum(clip(W@x, 0, 6))", "W", ["minimum(maximum(x, lo), hi)"]),
    ("sum(relu6(W@x))", "W", ["minimum(relu(z), 6)"]),
    ("sum(softmax(W@x, 1))", "W", ["takes each entry alone", "every entry would be 1", "softmax(·, 0)"]),
    ("||A@x-b||**2", "x", ["norm2(x)"]),
    ("tr(A@X^{-1})", "X", ["X^{-1} is inv(X)"]),
    ("X⁻¹:A", "X", ["inv(X) for X⁻¹"]),
    ("sum(x²)", "x", ["x**2"]),  # x² was a name: ∂λ/∂x² = 1
    ("(x**2).sum()", "x", ["(...).sum is a method", "sum(x)"]),
    ("sum(X.mT@Y)", "X", ["X.mT is a method", "the transpose is .T"]),
    ("sum(x)/x.shape[0]", "x", ["size(X, 0) is X's number of rows"]),
    ("x[0]", "x", ["no indexing"]),
    # typeset mathematics, and MATLAB's indexing and eye(n)
    ("sum(kron(A, B) + A⊗B)", "A", ["kron(A, B)"]),
    ("x×y:1", "x", ["* for the entrywise product", "@ for the matrix product"]),
    ("x·y", "x", ["x.T@y or x:y"]),
    ("sum(X⊤)", "X", ["X.T"]),
    ("sum(√x)", "x", ["sqrt(x)"]),
    ("∑x", "x", ["sum(x)"]),
    ("sum(x – y)", "x", ["write - for a minus sign"]),
    ("sum（x）", "x", ["ASCII parentheses"]),
    ("eye(3, 3, 3):W", "W", ["the identity is I, eye or eye(n)"]),
    ("norm(W, 'fro')**2", "W", ["matcalc takes no strings: norm(X, 'fro') is norm2(X)"]),
    ("sum(alpha**W)", "W", ["for alpha to the power of each entry write exp(W*log(alpha)), for a positive alpha"]),
    ("sum(2**(W + 1))", "W", ["write exp((W + 1)*log(2))"]),
    ('norm(W, "fro")**2', "W", ["matcalc takes no strings"]),
    ("x - y : 1", "x", [": binds tighter than + and -", "(x - y):1"]),  # not "declare x a number"
    ("e^(x:x)", "x", ["e is a symbol here", "exp(...)"]),
    ("sum(W(1, 1)) + sum(W)", "W", ["W is a variable", "no indexing"]),
])
def test_refusals_say_how_matcalc_writes_it(expr, wrt, words):
    with pytest.raises(MatcalcError) as e:
        matcalc.derive(expr, wrt=wrt)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_hessian_of_a_non_scalar_says_how_it_may_be_a_scalar():
    with pytest.raises(ShapeError) as e:
        matcalc.hessian("x'*A*x", "x")
    assert "write @ for the matrix product" in str(e.value) and "--syntax matlab" in str(e.value)


def test_a_greek_name_added_to_a_vector_is_noted():
    with pytest.warns(matcalc.NotationWarning, match="adds the number mu to every entry"):
        d = matcalc.derive("norm2(x - mu)**2", wrt="mu")
    assert d.shape == ()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # declared a vector: no note, a vector gradient
        assert matcalc.derive("norm2(x - mu)**2", wrt="mu", shapes={"mu": ("n",)}).shape == ("n",)


def test_a_shape_declared_for_a_name_not_in_the_expression_is_noted():
    with pytest.warns(matcalc.NotationWarning, match="declared for w, which the expression does not use "
                                                     r"\(did you mean W\?\)"):
        matcalc.derive("W@x:y", wrt="W", shapes={"w": ("m", "n")})
    r = _cli("derive", "W@x:y", "--wrt", "W", "--shape", "Z=3,4")
    assert r.returncode == 0 and "declared for Z" in r.stderr
    # one dict of shapes for several questions: with every symbol declared, nothing was meant
    import warnings
    shapes = {"W": ("m", "d"), "x": ("d",), "y": ("m",), "X": ("d", "n"), "G": ("m", "n")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        matcalc.derive("W@x:y", wrt="W", shapes=shapes)


def test_no_matrix_product_note_for_an_entrywise_function_times_a_matrix():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        matcalc.derive("-sum(Y*log(softmax(W@X, 0)))", wrt="W")  # the README's cross-entropy
        matcalc.derive("sum(exp(X@W)*G)", wrt="W")
    with pytest.warns(matcalc.NotationWarning, match="entrywise"):
        matcalc.derive("sum(A*B)", wrt="A")


def test_hints_never_point_at_the_wrt_or_at_a_fix_that_fails():
    with pytest.raises(ShapeError) as e:
        matcalc.derive("alpha*x", wrt="x")  # declaring x, the variable asked about, a number: no
    assert "x is a vector by the spelling" not in str(e.value)
    with pytest.raises(ShapeError) as e:
        matcalc.derive("theta@X:Y", wrt="X")  # a column theta would still not fit on the left of @
    assert "Greek name" not in str(e.value) and "use *" in str(e.value)


def test_the_caret_under_size_and_a_long_name_shortened():
    with pytest.raises(DeriveError) as e:
        matcalc.derive("tr(W) + size(X)", wrt="X")
    assert e.value.column == 9 and e.value.end == 15
    with pytest.raises(MatcalcError) as e:
        matcalc.derive("tr(W)" + "x" * 10000, wrt="W")
    assert len(str(e.value).splitlines()[0]) < 700


def test_a_shapes_key_that_is_not_a_name_and_a_negative_size_are_refused_clearly():
    # a key 3 raised AttributeError ('int' object has no attribute 'lower'); "-1" was called
    # a bad dimension name, "use a name like n or an int"
    with pytest.raises(ShapeError, match="by symbol name .* the key 3"):
        matcalc.derive("x:x", "x", shapes={3: ("a",)})
    with pytest.raises(ShapeError, match="dimension -1 in the shape of x must be between 1 and"):
        matcalc.derive("x:x", "x", shapes={"x": "-1"})


def test_a_wrt_list_in_one_string_and_a_look_alike_name_get_a_hint():
    with pytest.raises(DeriveError, match=r"give each its own: --wrt X --wrt W"):
        matcalc.derive("X:W", "X,W")
    with pytest.raises(DeriveError, match="look-alike characters"):
        matcalc.derive("ｘ:ｘ", "x")  # full-width x


def test_an_identity_made_1_by_1_under_an_axis_reduction():
    # I beside x.T@x is 1×1, and summing a 1×1 along an axis leaves its one entry (as NumPy's
    # sum of a (1, 1) array along axis 0); it was an internal error (exit 3), then a refusal
    import numpy as np

    x = np.random.default_rng(15).standard_normal(3)
    np.testing.assert_allclose(matcalc.derive("sum(x.T@x + I, 0)", "x").function(x=x), 2 * x)
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "sum(sum(I + X@X.T, 1))", "--wrt", "X",
                        "--shape", "X=1,d"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "2*X" in r.stdout, r.stderr


def test_a_shape_error_at_call_time_names_both_arguments_that_disagree():
    # G given transposed blamed X alone ("X has shape (2, 3), but dimension a is 4 elsewhere")
    import numpy as np

    d = matcalc.derive("G:(X@W)", wrt="X")
    G, X, W = np.ones((4, 2)), np.ones((2, 3)), np.ones((3, 4))
    want = r"makes a = \d, but \w has shape \((4, 2|2, 3)\), which makes a = \d \(G is \(a, b\) and X is \(a, c\)\)"
    with pytest.raises(ShapeError, match=want):
        d.function(G=G, X=X, W=W)
    with pytest.raises(ShapeError, match=want):
        matcalc.hessian("G:(X@W)", "X").hvp(X, G=G, X=X, W=W)
    with pytest.raises(ShapeError, match=r"S has shape \(3, 4\), but its dimensions named n must be equal"):
        matcalc.derive("tr(S)", wrt="S", shapes={"S": ("n", "n")}).function(S=np.ones((3, 4)))


@pytest.mark.parametrize("expr, wrt, shapes, args, want", [
    ("y:vec(X)", "X", None, {"y": (3,), "X": (4, 5)},
     r"y has shape \(3,\), which makes a\*b = 3, but a = 4 and b = 5 \(X has shape \(4, 5\)\) make a\*b = 20"),
    ("K:kron(A, B)", "B", None, {"K": (5, 6), "A": (2, 3), "B": (3, 2)},
     r"K has shape \(5, 6\), which makes a\*b = 5, but a = 2 \(A has shape \(2, 3\)\) and b = 3 \(B has shape "
     r"\(3, 2\)\) make a\*b = 6 \(K is \(a\*b, c\*d\), A is \(a, c\) and B is \(b, d\)\)"),
    ("sum(unvec(y, 3))", "y", None, {"y": (7,)}, r"makes 3\*a = 7, but 7 is not a multiple of 3 \(y is \(3\*a,\)\)$"),
])
def test_a_product_of_dimensions_that_disagrees_with_its_factors_is_a_shape_error(expr, wrt, shapes, args, want):
    # the sizes of vec(X) or kron(A, B) were never compared with X's, A's and B's: NumPy's
    # "cannot reshape array of size 3 into shape (4,5)" came out of the emitted code
    import numpy as np

    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    with pytest.raises(ShapeError, match=want):
        d.function(**{k: np.ones(v) for k, v in args.items()})
    good = {k: np.ones(v) for k, v in args.items()}
    good[next(iter(args))] = np.ones({"y:vec(X)": (20,), "K:kron(A, B)": (6, 6)}.get(expr, (9,)))
    assert d.function(**good).shape == good[wrt].shape
    at = [a for k, v in args.items() for a in ("--at", f"{k}={np.ones(v).tolist()}")]
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", expr, "--wrt", wrt, *at],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and re.search(want.rstrip("$"), r.stderr), r.stderr


def test_arguments_by_position_or_under_a_wrong_name_say_what_to_give():
    import inspect

    import numpy as np

    d = matcalc.derive("lambda*sum(x*x)", wrt="x")
    assert list(inspect.signature(d.function).parameters) == ["lambda_", "x"]
    # lambda_, the name the signature and the emitted source give, is taken as lambda
    np.testing.assert_allclose(d.function(lambda_=0.5, x=np.arange(3.0)), np.arange(3.0))
    np.testing.assert_allclose(matcalc.hessian("lambda*sum(x*x*x)", "x").hvp(
        np.ones(3), lambda_=0.5, x=np.arange(3.0)), 3 * np.arange(3.0))
    with pytest.raises(TypeError, match=r"by name, not position \(2 given\): grad_x\(lambda_=…, x=…\)"):
        d.function(0.5, np.ones(3))
    with pytest.raises(TypeError, match=r"unexpected argument\(s\) X \(did you mean x for X\?\) and is missing "
                                        r"the argument\(s\) x"):
        d.function(lambda_=0.5, X=np.ones(3))


def test_the_signatures_names_are_taken_when_a_symbol_has_another_symbols_python_name():
    # lambda and lambda_ both symbols: the signature reads (lambda_, x, lambda__), and those
    # names were refused ("unexpected lambda__ … missing lambda_")
    import numpy as np

    d = matcalc.derive("lambda*x:x + lambda_*sum(x)", wrt="x")
    x = np.arange(3.0)
    want = 2 * 2.0 * x + 3.0
    np.testing.assert_allclose(d.function(lambda_=2.0, x=x, lambda__=3.0), want)
    np.testing.assert_allclose(d.function(**{"lambda": 2.0, "x": x, "lambda_": 3.0}), want)
    H = matcalc.hessian("lambda*sum(exp(A@x))", "x")
    with pytest.raises(TypeError, match=r"hvp_x\(\) takes its arguments by name"):
        H.hvp(x, 2.0, np.eye(3), x)
    with pytest.raises(TypeError, match=r"hessian_x\(\) takes its arguments by name"):
        H.matrix(2.0, np.eye(3), x)


def test_a_star_meant_as_the_matrix_product_is_named_alone():
    # every * was written @: (x*y).T*(x*y) became (x@y).T@(x@y), 2*x.T*A*x became 2@x.T@A@x
    for expr, meant in [("(x*y).T*(x*y)", "(x*y).T@(x*y)"), ("2*x.T*A*x", "2*x.T@A@x"),
                        ("sum(x*y)*x.T*y", "sum(x*y)*x.T@y"), ("(w*x).T*y", "(w*x).T@y")]:
        with pytest.raises(ShapeError, match=re.escape(f"for the matrix product write {meant})")):
            matcalc.derive(expr, "x")


def test_a_shape_given_as_a_kind_and_a_sympy_matrix_of_numbers_are_refused():
    import sympy

    with pytest.raises(ShapeError, match=r"the shape of X is given as 'matrix': give its dimensions"):
        matcalc.derive("sum(X)", "X", shapes={"X": "matrix"})  # (it made X a vector of length "matrix")
    X = sympy.MatrixSymbol("X", 2, 2)
    with pytest.raises(DeriveError, match="has no matcalc equivalent"):  # (an AttributeError traceback)
        matcalc.derive(sympy.Trace(X.T * sympy.Matrix([[1, 2], [3, 4]])), wrt=X)


def test_a_number_given_for_a_vector_by_its_name_says_how_to_declare_it():
    # d in softmax(Q@K.T/sqrt(d), 1) is a vector by its spelling; given 2.0 the message said
    # only "d must be a vector (1-D array) of shape ('a',), got shape ()"
    import numpy as np

    d = matcalc.derive("O:(softmax(Q@K.T/sqrt(d), 1)@V)", "Q")
    args = dict(O=np.ones((2, 3)), Q=np.ones((2, 4)), K=np.ones((5, 4)), V=np.ones((5, 3)), d=2.0)
    with pytest.raises(ShapeError, match=r"if d is a number, derive again with it declared one: shapes=\{'d': \(\)\}"):
        d.function(**args)
    args["d"] = np.array(2.0)
    with pytest.raises(ShapeError, match=r"if d is a number"):
        d.function(**args)


def test_a_product_of_dimensions_with_an_empty_factor_is_checked_without_dividing_by_zero():
    from matcalc.function import Sizes

    sizes = Sizes()
    sizes.take("a", 0, "x", (0,), ("a",))
    sizes.take("a*b", 3, "y", (3,), ("a*b",))
    with pytest.raises(ShapeError, match=r"y has shape \(3,\), which makes a\*b = 3, but a = 0"):
        sizes.check_products()
    sizes = Sizes()
    sizes.take("a", 0, "x", (0,), ("a",))
    sizes.take("a*b", 0, "y", (0,), ("a*b",))
    sizes.check_products()  # 0 entries: as many as a = 0 makes


@pytest.mark.parametrize("expr, wrt, kw, words", [
    ("tr(AX)", "X", {}, "AX is one name; the product of A and X is A@X"),
    ("sum(A@X)", "A@X", {}, "--let Z='A@X' --wrt Z"),
    ("sum(A@X)", "X.T", {}, "the gradient in X.T is that in X, transposed: --wrt X"),
    # MATLAB's sum(X) of a matrix: its column sums, the total in that syntax
    ("sum(X)*x", "X", {"syntax": "matlab"}, "MATLAB's sum(X), the row of its columns' sums, is sum(X, 1)"),
    # a count and the variable, both vectors by their names' spelling
    ("n/2*log(s2) + norm2(y - X@b)**2/(2*s2)", "s2", {}, "--shape n=scalar --shape s2=scalar"),
])
def test_refusals_name_the_way_the_question_was_probably_meant(expr, wrt, kw, words):
    with pytest.raises(MatcalcError) as e:
        matcalc.derive(expr, wrt, **kw)
    assert words in str(e.value), str(e.value)


def test_a_number_by_its_spelling_given_an_array_says_how_to_declare_it_a_vector():
    d = matcalc.derive("(x - mu).T@P@(x - mu)", "x")
    with pytest.raises(ShapeError, match=re.escape("mu is a number by its Greek name; to make it a vector declare "
                                                   "it: shapes={'mu': ('n',)}, --shape mu=n")):
        d.function(x=np.ones(2), mu=np.ones(2), P=np.eye(2))
    h = matcalc.hessian("norm2(A*x - b)^2", "x", syntax="matlab")
    with pytest.raises(ShapeError, match="b is a number by the MATLAB syntax's naming"):
        h.matrix(A=np.ones((3, 2)), x=np.ones(2), b=np.ones(3))
