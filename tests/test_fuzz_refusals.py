"""Never a traceback: malformed and ill-typed input is refused, never crashes or hangs.

Issue "Never a wrong gradient, never a traceback", SPEC §2/§4: every refusal raises a
subclass of ``matcalc.MatcalcError`` (API) or exits with status 2 and a one-line message
with a caret under the column (CLI); never a Traceback, a RecursionError or a hang.

The API property (``attempt``): ``matcalc.derive(text, wrt=..., shapes=...)`` either

* raises a ``MatcalcError`` whose message is one line, or one line plus the source line
  and a caret line whose caret sits under the reported column; or
* succeeds, and then every output (``text``, ``latex``, ``numpy_source``, ``function``,
  ``derivation_lines()``, ``to_dict()``, ``check()``) returns without raising;

and the whole call returns within ``TIME_LIMIT`` seconds (enforced with a SIGALRM timer
where available, so that a hang fails the test instead of stalling CI).

Random input comes from Hypothesis (derandomized, so CI is reproducible): random text
over the language's characters, token soup, one to three character/token mutations of
the public corpus, random ``wrt`` values and random (often bad) shape declarations.

The "hazard" variants and the explicit cases below (BUGS, HANGS) are the inputs that once
crashed or hung matcalc; they stay as regression tests.
"""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import unicodedata
import time
import traceback
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import matcalc
from matcalc import MatcalcError

from conftest import load_corpus

TIME_LIMIT = 4.0      # seconds for one API call and all its outputs (normal inputs: < 0.5 s)
HANG_LIMIT = 2.0      # for inputs known to take 9 s .. minutes: fail fast, keep CI short
EXAMPLES = 300        # random inputs per fuzz test

FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
# the hazard fuzz tests stop at their first failure: no shrinking, so they stay cheap
FUZZ_NO_SHRINK = settings(FUZZ, phases=[Phase.explicit, Phase.generate])


# --------------------------------------------------------------------------------------
# the property


class Hang(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` swallows it."""


@contextmanager
def time_limit(seconds: float):
    """Interrupt the body after ``seconds`` (SIGALRM, main thread only; elsewhere the
    caller's elapsed-time assertion still applies)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise Hang(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# str.splitlines() also splits at these; a message "one line long" must not contain them
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def check_message(err: MatcalcError, expr) -> None:
    """A refusal reads as one line, or one line + the source + a caret under the column."""
    msg = str(err)
    assert msg.strip(), f"empty message from {type(err).__name__}"
    assert "Traceback" not in msg
    lines = msg.splitlines()
    if err.start is None or err.source is None:
        assert len(lines) == 1, f"the message is not one line: {msg!r}"
        return
    assert len(lines) == 3, f"message, source line and caret line expected, got {msg!r}"
    head, shown, caret = lines
    assert err.column is not None and 1 <= err.column <= len(err.source) + 1, (err.column, msg)
    assert f"column {err.column}" in head, msg
    assert caret.strip() and set(caret.strip()) == {"^"}, f"no caret line: {msg!r}"
    col = caret.index("^")
    # the message shows every character that does not print (line breaks, tabs, NUL) as a space
    src = "".join(ch if ch.isprintable() else " " for ch in err.source)
    # the character at the caret's terminal column (wide characters take two, marks none)
    at, width = len(shown), 0
    for i, ch in enumerate(shown):
        w = 0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        if width + w > col:
            at = i
            break
        width += w
    if err.start < len(src):
        # the caret sits under the offending character (also in the window of long input); a
        # combining mark has no column of its own: under the character it sits on
        end = at + 1
        while end < len(shown) and unicodedata.combining(shown[end]):
            end += 1
        under = shown[at:end]
        assert src[err.start] in under, f"caret under {shown[at:at + 1]!r}, expected {src[err.start]!r}: {msg!r}"
    else:  # "ends too early": the caret is just past the end of the input
        assert at >= len(shown.rstrip()), msg


def _use(d) -> None:
    """Every output of a Derivation; each must return."""
    assert isinstance(d.text, str) and d.text
    assert isinstance(d.latex, str)
    assert isinstance(d.shape, tuple)
    d.shape_text
    d.steps
    d.derivation_lines()
    compile(d.numpy_source, "<emitted>", "exec")
    assert callable(d.function)
    d.to_dict()
    report = d.check()
    assert isinstance(report.ok, bool)


def attempt(expr, wrt, shapes=None, *, limit=TIME_LIMIT, must_refuse=False):
    """Call the API with anything; return ("ok", result) or ("refused", error).

    Fails the test on any exception other than MatcalcError (RecursionError, TypeError,
    OverflowError, a NumPy error from the emitted code, ...) and on a hang."""
    where = f"derive({_short(expr)}, wrt={_short(wrt)}, shapes={_short(shapes)})"
    stage = "derive"
    problem = None
    start = time.perf_counter()
    try:
        with time_limit(limit):
            try:
                result = matcalc.derive(expr, wrt=wrt, shapes=shapes)
            except MatcalcError as err:
                outcome = ("refused", err)
            else:
                stage = "the outputs of the derivation"
                for d in _derivations(result):
                    _use(d)
                outcome = ("ok", result)
    except Hang:
        problem = f"hang: {where} ({stage}) was still running after {limit} s"
    except Exception as exc:  # noqa: BLE001 - the point of the test
        # the last frames only (a RecursionError has a thousand), outside the except block so
        # that the report stays short
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3))
        problem = f"{type(exc).__name__} (not a MatcalcError) in {stage} of {where}:\n{tb[-3000:]}"
    if problem:
        pytest.fail(problem, pytrace=False)
    elapsed = time.perf_counter() - start
    assert elapsed < limit, f"{where} took {elapsed:.1f} s"
    if outcome[0] == "refused":
        check_message(outcome[1], expr)
    elif must_refuse:
        pytest.fail(f"{where} was accepted: {[_short(d.text) for d in _derivations(outcome[1])]}",
                    pytrace=False)
    return outcome


def _derivations(result):
    return list(result.values()) if isinstance(result, dict) else [result]


def _short(v, n=80):
    r = repr(v)
    return r if len(r) <= n else r[:n] + f"...<{len(r)} chars>"


# --------------------------------------------------------------------------------------
# material for the strategies

CORPUS = sorted({c["expr"] for c in load_corpus()})
MORE_VALID = [  # SPEC §1 examples and the other operators, so mutations reach everything
    "G:exp(X@W)", "(X@W - Y):(X@W - Y)", "tr(A@X.T@B@X@C)", "logdet(X) - tr(inv(X)@S)",
    "sum(log(1 + exp(-y*(X@w))))", "x.T@A@x", "norm2(A@x - y)**2", "sum(softmax(z)*y)",
    "logsumexp(z) + norm1(x)", "det(X)", "sum(Diag(x)@W) + sum(diag(X))", "W^T:W + x'@y",
    "(A∘B)⊙C:D", "x⊘y:1", "sum(sigmoid(x)^2 + sqrt(abs(x)) - sign(x)*step(x))",
    "sum(tanh(W@x) + sin(x) - cos(x) + relu(x) + softplus(x))", "xᵀ@(I + eye)@x",
    "alpha*x:1 − beta*x:x", "trace(X) + sum(ln(p))",
]
VALID = CORPUS + MORE_VALID
NAME_RE = re.compile(r"[^\W\d\u1d40][^\W\u1d40]*")
FUNCTIONS = ["exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu", "step", "abs",
             "sign", "softplus", "sum", "tr", "det", "logdet", "inv", "diag", "Diag", "norm2",
             "norm1", "logsumexp", "softmax", "trace", "ln"]

# characters of the language, some junk and some unicode; without the exotic line breaks
# of _LINE_BREAKS other than \n (see test_line_breaking_whitespace_in_a_message)
ALPHABET = ("abcxyzpqWXSABGIeT" "0123456789" "+-*/@:∘⊙⊘ᵀ'^().,_" "   \t\n"
            "αβλμΣ−" "[]{}=$#;!?\"\\`~&|<>" "é中😀\u200b\u00a0\x00")

TOKENS = (["x", "y", "z", "W", "X", "S", "A", "G", "alpha", "lambda", "mu", "Σ", "α", "I", "eye",
           "np", "def", "_x", "t0", "None", "foo", "Exp", "W1", "b0"]
          + [f + "(" for f in FUNCTIONS] + ["foo(", "exp ("]
          + ["1", "2", "0.5", ".5", "3.", "1e-3", "1E2", "0", "1e400", "1e-400", "1e308",
             "99999999999999999999999"]
          + ["+", "-", "−", "*", "/", "@", ":", "∘", "⊙", "⊘", "**", "^", ".T", "'", "ᵀ", "^T",
             "(", ")", ",", " ", "=", "[", "]"])

DIMENSIONS = ["a", "b", "n", "m", "k", 1, 2, 3, 4, 0, -1, "1x2", "", None, 1.5, True, "n m",
              "3", "lambda", "np", "t0", "³", 10 ** 30]
BAD_SPECS = ["scalar", "n,m", "n, m", "(n, m)", "1x2", "", "()", None, 3, 1, 0, -2, "a",
             ["n"], "n,", 2.5, {"n": 1}, object()]


# Patterns of inputs that hit an open matcalc bug, which the plain fuzz tests leave out (the
# "hazard" variants keep them in).  Every bug found so far is fixed, so the list is empty.
KNOWN_TRIGGERS: list = []


def clean(text: str) -> bool:
    return not any(p.search(text) for p in KNOWN_TRIGGERS)


def _names(expr: str) -> list:
    return sorted(set(NAME_RE.findall(expr)) - set(FUNCTIONS) - {"I", "eye"}) or ["x"]


@st.composite
def mutated(draw, pool=VALID, steps=3):
    """A valid expression with one to ``steps`` characters or tokens inserted/deleted/replaced."""
    s = draw(st.sampled_from(pool))
    for _ in range(draw(st.integers(1, steps))):
        i = draw(st.integers(0, len(s)))
        piece = draw(st.one_of(st.sampled_from(ALPHABET), st.sampled_from(TOKENS)))
        how = draw(st.sampled_from(["insert", "delete", "replace", "swap"]))
        if how == "insert":
            s = s[:i] + piece + s[i:]
        elif how == "delete":
            s = s[:i] + s[i + 1:]
        elif how == "replace":
            s = s[:i] + piece + s[i + 1:]
        elif i + 1 < len(s):
            s = s[:i] + s[i + 1] + s[i] + s[i + 2:]
    return s


def wrt_for(expr: str):
    names = _names(expr)
    one = st.one_of(st.sampled_from(names), st.sampled_from(["Q", "w", "", " x", "x y", "1", "I",
                                                             "exp", "λ", "W\n"]))
    return st.one_of(one, one, st.lists(one, min_size=1, max_size=3),
                     st.sampled_from([None, 3, [], ["x", "x"], ("x",), b"x", {"x"}, [None]]))


def shape_spec(hazards: bool):
    if hazards:
        return st.one_of(st.lists(st.sampled_from(DIMENSIONS), max_size=3).map(tuple),
                         st.sampled_from(BAD_SPECS))
    # without size-1 dimensions and scalar declarations (det(X) with X declared scalar)
    dims = [d for d in DIMENSIONS if d not in (1, "³", 10 ** 30)]
    specs = [s for s in BAD_SPECS if s not in (1, "scalar", "()", "", None)]
    return st.one_of(st.lists(st.sampled_from(dims), min_size=1, max_size=3).map(tuple),
                     st.sampled_from(specs))


def shapes_for(expr: str, hazards: bool):
    keys = st.one_of(st.sampled_from(_names(expr)), st.sampled_from(["Q", "I", "exp", "", "x y"]))
    return st.one_of(st.none(), st.dictionaries(keys, shape_spec(hazards), max_size=3))


# --------------------------------------------------------------------------------------
# random text


@FUZZ
@given(st.text(alphabet=ALPHABET, max_size=60).filter(clean))
def test_random_text_over_the_language_alphabet(text):
    wrt = (_names(text) + ["x"])[0]
    attempt(text, wrt)


@FUZZ
@given(st.text(max_size=40))
def test_random_unicode_text(text):
    """Any unicode at all: the exception type and the time only (the message shape is
    checked with the alphabet above)."""
    problem = None
    start = time.perf_counter()
    try:
        with time_limit(TIME_LIMIT):
            try:
                d = matcalc.derive(text, wrt=(_names(text) + ["x"])[0])
            except MatcalcError:
                d = {}
            for dd in _derivations(d):
                _use(dd)
    except Hang:
        problem = f"hang on {text!r}"
    except Exception as exc:  # noqa: BLE001
        problem = f"{type(exc).__name__} on {text!r}: {exc}"
    if problem:
        pytest.fail(problem, pytrace=False)
    assert time.perf_counter() - start < TIME_LIMIT


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=25).map("".join).filter(clean))
def test_token_soup(text):
    attempt(text, (_names(text) + ["x"])[0])


# --------------------------------------------------------------------------------------
# random expressions that parse (mostly), well-typed or not

SAFE_NUMBERS = ["1", "2", "0.5", "3", ".25", "1e-3", "2.5E1"]
HAZARD_NUMBERS = ["0", "1e400", "1e308", "1e-400", "99999999999999999999999"]
BINOPS = ["+", "-", "*", "/", "@", ":", "∘", "⊙", "⊘", "**", "^", " + ", " @ ", " − "]
POSTFIX = [".T", "'", "ᵀ", "^T"]
LEAVES = ["x", "y", "W", "X", "S", "A", "alpha", "lambda", "mu", "I", "eye", "np", "def", "t0",
          "α", "Σ", "z1", "None"]
# functions the plain fuzz test would leave out while they had an open bug (none now)
SCALAR_HAZARDS: set = set()


def well_formed(hazards: bool):
    funcs = FUNCTIONS if hazards else [f for f in FUNCTIONS if f not in SCALAR_HAZARDS]
    leaves = LEAVES + SAFE_NUMBERS + (HAZARD_NUMBERS if hazards else [])

    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(BINOPS), inner).map("".join),
            st.tuples(st.sampled_from(funcs), inner).map(lambda t: f"{t[0]}({t[1]})"),
            inner.map(lambda s: f"({s})"),
            st.tuples(inner, st.sampled_from(POSTFIX)).map("".join),
            inner.map(lambda s: "-" + s))

    body = st.recursive(st.sampled_from(leaves), extend, max_leaves=10)
    text = st.tuples(st.sampled_from(["{}", "sum({})", "{}:1", "tr({})", "norm2({})", "1:{}"]),
                     body).map(lambda t: t[0].format(t[1]))
    return text if hazards else text.filter(clean)


@FUZZ
@given(well_formed(hazards=False), st.randoms(use_true_random=False))
def test_random_expressions(text, rnd):
    """Random expressions over the language (most parse, about half are well-typed), without
    the known-bug triggers (KNOWN_TRIGGERS, det/logdet/inv/diag) of the test below."""
    attempt(text, rnd.choice(_names(text)))


@FUZZ_NO_SHRINK
@given(well_formed(hazards=True), st.randoms(use_true_random=False))
def test_random_expressions_with_extreme_numbers_and_scalar_matrix_functions(text, rnd):
    attempt(text, rnd.choice(_names(text)))


# --------------------------------------------------------------------------------------
# mutations of valid expressions


@FUZZ
@given(st.data())
def test_mutations_of_valid_expressions(data):
    """One to three edits (insert/delete/replace a character or token, swap two characters)
    of a valid expression: the corpus and the SPEC examples."""
    text = data.draw(mutated(pool=VALID, steps=3).filter(clean))
    attempt(text, data.draw(st.sampled_from(_names(text))))


# --------------------------------------------------------------------------------------
# random wrt and random (bad) shape declarations on valid expressions


@FUZZ
@given(st.data())
def test_random_wrt_and_declarations(data):
    """Valid expressions with random wrt and random declarations, without the known-bug
    triggers of the test below (declared size-1 dimensions, scalar declarations, '³', 10**30)."""
    expr = data.draw(st.sampled_from(VALID))
    attempt(expr, data.draw(wrt_for(expr)), data.draw(shapes_for(expr, hazards=False)))


@FUZZ_NO_SHRINK
@given(st.data())
def test_random_wrt_and_declarations_with_size_one_and_scalar_declarations(data):
    expr = data.draw(st.sampled_from(VALID))
    attempt(expr, data.draw(wrt_for(expr)), data.draw(shapes_for(expr, hazards=True)))


# --------------------------------------------------------------------------------------
# explicit cases

ACCEPTED = [  # (expr, wrt, shapes): must be derived, every output usable
    ("X" * 9998 + ":1", "X" * 9998, None),         # a 9998-character name: 10 000 characters
    ("sum(exp(x))" + " " * 9989, "x", None),        # 10 000 characters, mostly blanks
    ("sum(x" + "+x" * 100 + ")", "x", None),
    ("1e-400*x:1", "x", None),
    ("99999999999999999999999*x:1", "x", None),
    ("W:W", ["W", "W"], None),
    ("lambda*x:1", "lambda", None),
    ("def:1", "def", None),
    ("np:np", "np", None),
    ("sum:1", "sum", None),
    ("exp(exp):1", "exp", None),
    ("sum(sum)", "sum", None),
    ("_x:t0", "_x", None),
    ("t0:_x", "t0", None),
    ("None:1", "None", None),
    ("x:1", "x", {"x": "n"}),
    ("(" * 199 + "x:1" + ")" * 199, "x", None),
]

REFUSED = [  # (expr, wrt, shapes): must be refused with a MatcalcError
    ("x" * 10000, "x", None),                       # one long name: a vector, not a scalar
    ("(" * 500 + "x" + ")" * 500, "x", None),       # nesting 500 deep
    ("sum(" + "exp(" * 500 + "x" + ")" * 501, "x", None),
    ("x" + "+x" * 5000, "x", None),                 # a vector λ
    ("x" * 20001 + ":1", "x", None),                # longer than the limit
    ("sum(x" + "+x" * 12000 + ")", "x", None),      # 24 006 characters
    ("1e-400", "x", None),                          # no x
    ("", "x", None),
    ("   ", "x", None),
    ("\t\n", "x", None),
    ("x\0:1", "x", None),
    ("x:1\0", "x", None),
    (None, "x", None),
    (3, "x", None),
    (b"x:1", "x", None),
    (["x:1"], "x", None),
    ("x:1", None, None),
    ("x:1", 3, None),
    ("x:1", [], None),
    ("x:1", [None], None),
    ("x:1", "y", None),                             # wrt not in the expression
    ("x:1", "", None),
    ("x:1", "X", None),
    ("exp(x):1", "exp", None),
    ("sum(I@x)", "I", None),
    ("(W@x", "W", None), ("W@x)", "W", None), ("((x:1)", "x", None), ("x:1))", "x", None),
    (")(", "x", None), ("foo(x):1", "x", None), ("Exp(x):1", "x", None), ("exp x:1", "x", None),
    ("exp(x, x):1", "x", None), ("exp():1", "x", None), ("sum(,)", "x", None),
    ("W@x", "W", None), ("W", "W", None), ("x", "x", None), ("softmax(x)", "x", None),  # non-scalar λ
    ("W + x:1", "W", None), ("A@B:1", "A", {"A": ("n", "m"), "B": ("k", "n")}),
    ("x.T@W@y", "W", {"W": ("a", "b"), "x": ("c",), "y": ("b",)}),   # declarations contradict usage
    ("A:B", "A", {"A": ("n", 3), "B": ("n", 4)}),
    ("x:1", "x", {"x": ("a", "b", "c")}),           # 3-D
    ("x:1", "x", {"x": (-1,)}),                     # negative
    ("x:1", "x", {"x": (0,)}),
    ("x:1", "x", {"x": "1x2"}),
    ("x:1", "x", {"x": ("1x2",)}),
    ("x:1", "x", {"x": None}),
    ("x:1", "x", {"x": ("a", None)}),
    ("x:1", "x", {"x": 1.5}),
    ("x:1", "x", {"x": (True,)}),
    ("x:1", "x", {"x": ("n m",)}),
    ("alpha*x:1", "alpha", {"alpha": ("n", "n"), "x": ("m",)}),   # a column broadcasts only over n rows
    ("det(x)", "x", None), ("inv(W):1", "W", {"W": ("n", "m")}), ("sum(Diag(W))", "W", None),
    ("2**W", "W", None), ("tr(I)", "I", None), ("x = y", "x", None), ("W[0]", "W", None),
]

# (expr, wrt, shapes, what happens today); each must be refused or derived cleanly
BUGS = [
    ("1e400*x:1", "x", None, "OverflowError in d.text (printing.py: int(inf))"),
    ("x:1 + 1e400", "x", None, "OverflowError in d.numpy_source"),
    ("alpha*1e308*10", "alpha", None, "constant folding overflows: OverflowError in d.text"),
    ("0*1e400*alpha", "alpha", None, "ValueError: cannot convert float NaN to integer"),
    ("alpha/0", "alpha", None, "ZeroDivisionError in the emitted value function (check)"),
    ("alpha*0**-1", "alpha", None, "ZeroDivisionError in the emitted value function (check)"),
    ("alpha*(-1)**0.5", "alpha", None, "TypeError in derive: float(complex) in ir.py"),
    ("det(alpha)", "alpha", None, "accepted; LinAlgError in the emitted code (check)"),
    ("logdet(alpha)", "alpha", None, "accepted; LinAlgError in the emitted code"),
    ("inv(alpha)*alpha", "alpha", None, "accepted; LinAlgError in the emitted code"),
    ("sum(diag(alpha))", "alpha", None, "accepted; ValueError in np.diag"),
    ("det(x.T@x)", "x", None, "accepted; LinAlgError in the emitted code"),
    ("x:1", "x", {"x": ("³",)}, "ValueError in parse_declaration: '³'.isdigit() but int('³') fails"),
    ("x:1", "x", [("x", ("a",))], "AttributeError: shapes given as a list"),
    ("x:1", "x", "x=a", "AttributeError: shapes given as a string"),
    ("x:1", "x", {"x": (10 ** 30,)}, "accepted; ValueError from NumPy in check()"),
    ("x@x", "x", {"x": (1,)}, "accepted; TypeError in check() (a size-1 vector is a scalar in the IR)"),
    ("sum(x*x)", "x", {"x": (1,)}, "accepted; TypeError in check()"),
    ("tr(S)", "S", {"S": (1, 1)}, "accepted; TypeError in check()"),
    ("det(X)", "X", {"X": ()}, "a matrix declared scalar: det of a scalar, LinAlgError in check()"),
    ("sum(x@1ᵀ)", "x", None, "1ᵀ gets a dimension no symbol has: KeyError 'b' in codegen"),
    ("alpha*(exp(W@x+c)-W@x-c+m*m-1):1", "W", {"W": ("b", 1), "c": (3,)},
     "accepted; ValueError (matmul) in the emitted value function"),
    ("sum(" + "-" * 1000 + "x)", "x", None, "RecursionError in printing (numpy_source)"),
    ("alpha" + "'" * 1000, "alpha", None, "RecursionError in printing"),
    ("sum(x" + "*x" * 300 + ")", "x", None, "RecursionError in derivation_lines (1 205 characters)"),
    ("tr(W" + "@W" * 300 + ")", "W", None, "RecursionError in derivation_lines"),
    ("sum(x" + "+x" * 1000 + ")", "x", None, "RecursionError in derivation_lines"),
    ("alpha" + "/alpha" * 300, "alpha", None, "RecursionError"),
    ("alpha" + "**alpha" * 300, "alpha", None, "RecursionError"),
    ("sum(" + "+-" * 1000 + "x)", "x", None, "RecursionError in printing"),
]

HANGS = [  # (expr, wrt, what once happened): must return within HANG_LIMIT seconds
    ("logdet(" + "inv(" * 90 + "S" + ")" * 91, "S", "numpy_source takes ~24 s (150 deep: ~4 min)"),
    ("sum(" + "softmax(" * 19 + "x" + ")" * 20, "x",
     "the text of the gradient grows exponentially: latex takes ~10 s, depth 20 ~270 MB of text"),
]


def _ids(rows):
    return [_short(r[0], 30) + f"|wrt={_short(r[1], 12)}" + (f"|{_short(r[2], 20)}" if r[2] else "")
            for r in rows]


@pytest.mark.parametrize("expr,wrt,shapes", ACCEPTED, ids=_ids(ACCEPTED))
def test_explicit_input_is_derived(expr, wrt, shapes):
    kind, res = attempt(expr, wrt, shapes)
    assert kind == "ok", f"refused: {res}"


@pytest.mark.parametrize("expr,wrt,shapes", REFUSED, ids=_ids(REFUSED))
def test_explicit_input_is_refused(expr, wrt, shapes):
    attempt(expr, wrt, shapes, must_refuse=True)


@pytest.mark.parametrize("expr,wrt,shapes", [
    pytest.param(e, w, s)
    for e, w, s, why in BUGS], ids=_ids(BUGS))
def test_explicit_input_known_bug(expr, wrt, shapes):
    attempt(expr, wrt, shapes)


@pytest.mark.parametrize("expr,wrt", [
    pytest.param(e, w)
    for e, w, why in HANGS], ids=[_short(h[0], 30) for h in HANGS])
def test_small_input_does_not_hang(expr, wrt):
    attempt(expr, wrt, limit=HANG_LIMIT)


def test_the_refusal_of_a_10000_character_input_shows_a_window_with_the_caret():
    expr = "sum(" + "x+" * 3000 + "kron(x, x)" + "+x" * 2000 + ")"    # 10 015 characters
    kind, err = attempt(expr, "x", must_refuse=True)
    assert isinstance(err, matcalc.ShapeError)
    assert len(str(err)) < 1000, "the whole 10 000-character input was echoed"


@pytest.mark.parametrize("ws", ["\r", "\x0b", "\x0c", "\x85", "\u2028"])
def test_line_breaking_whitespace_in_a_message(ws):
    attempt(f"sum(x{ws}+ kron(x, x))", "x", must_refuse=True)


@pytest.mark.parametrize("shapes", [{"x": (1,)}, {"x": (1, 1)}, {"x": ("n", 1)}],
                         ids=["(1,)", "(1,1)", "(n,1)"])
def test_a_declared_size_one_dimension_keeps_the_gradient_shape(shapes):
    import numpy as np

    d = matcalc.derive("x:1", wrt="x", shapes=shapes)
    shape = tuple(2 if s == "n" else s for s in shapes["x"])
    g = d.function(x=np.zeros(shape))
    assert np.shape(g) == shape
    assert d.check().ok


# --------------------------------------------------------------------------------------
# the command line (each run costs ~0.15 s: a few representative refusals)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "matcalc", "derive", *args],
                          capture_output=True, text=True, timeout=60, encoding="utf-8")


CLI_REFUSED = [  # (args, caret expected)
    (["W +", "--wrt", "W"], True),
    (["((W@x):1", "--wrt", "W"], True),
    (["W@x):1", "--wrt", "W"], True),
    (["foo(x):1", "--wrt", "x"], True),
    (["sum(x + kron(x, x))", "--wrt", "x"], True),
    (["W@x", "--wrt", "W"], True),                                   # non-scalar λ
    (["x.T@W@y", "--wrt", "W", "--shape", "W=a,b", "--shape", "x=c"], True),  # contradicting
    (["(" * 500 + "x" + ")" * 500, "--wrt", "x"], True),
    (["x" + "+x" * 5000, "--wrt", "x"], True),                    # 10 001 characters, a vector λ
    (["x" * 20001 + ":1", "--wrt", "x"], True),                   # longer than the limit
    (["x $ y", "--wrt", "x"], True),
    (["sum(αλ@x)", "--wrt", "x"], True),
    (["x:1", "--wrt", "Q"], False),                                  # wrt not in the expression
    (["x:1", "--wrt", "x", "--shape", "x=a,b,c"], False),           # 3-D declaration
    (["x:1", "--wrt", "x", "--shape", "x=-1"], False),
]


@pytest.mark.parametrize("args,caret", CLI_REFUSED, ids=[_short(a[0], 25) for a, _ in CLI_REFUSED])
def test_cli_refusal(args, caret):
    r = _cli(*args)
    assert r.returncode == 2, (r.returncode, r.stdout[-300:], r.stderr[-500:])
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert not r.stdout.strip()
    lines = r.stderr.rstrip("\n").split("\n")
    assert lines[0].startswith("matcalc: ") and len(lines[0]) > len("matcalc: ") + 5, r.stderr
    if caret:
        assert len(lines) == 3, r.stderr
        assert set(lines[2].strip()) == {"^"}, r.stderr
        m = re.search(r"\(column (\d+)\)$", lines[0])
        assert m, r.stderr
        col = lines[2].index("^")
        expr = args[0]
        start = int(m.group(1)) - 1
        if start < len(expr):
            assert lines[1][col] == expr[start], r.stderr
    else:
        assert len(lines) == 1, r.stderr


def test_cli_huge_number_is_not_an_internal_error():
    r = _cli("1e400*x:1", "--wrt", "x")
    assert r.returncode in (0, 2), (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


@pytest.mark.parametrize("expr", ["1.7976931348623157e308*(x:y)", "3.14e307*(x:y)", "sum(x/2.2250738585072014e-308)",
                                  "sum(gelu(-1e308*x))", "sum(logerfc(1e308*x))", "norm2(x)**-1e308+sum(x)"])
def test_numbers_at_the_ends_of_the_floats_are_no_internal_error(expr):
    # an OverflowError printing 1.797e308 (a form p/q·cᵉ), squaring 1e308 in simplify, and
    # rounding the half of an exponent of 1e308: exit 3 on the command line
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = matcalc.derive(expr, "x")
        assert d.text and d.latex and d.to_dict()["gradient"] == d.text
        matcalc.hessian(expr, "x").text
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", expr, "--wrt", "x"], capture_output=True, text=True)
    assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr


def test_a_symbol_named_self_is_an_argument_like_any_other():
    # Hessian.check() and Jacobian.matrix(self=...) raised "got multiple values for argument 'self'"
    import numpy as np

    h = matcalc.hessian("sum(exp(W@self))", "W")
    assert h.check().ok
    j = matcalc.jacobian("exp(W@self)", "W")
    W, s = np.full((2, 3), 0.1), np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(j.matrix(W=W, self=s), np.kron(s[None, :], np.diag(np.exp(W @ s))), rtol=1e-12)
