"""Text → syntax tree. The grammar lives in ``grammar/matcalc.lark``; this module turns
lark's parse tree into a small AST that keeps the source span of every node."""
from __future__ import annotations

import math
import re
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import ParseError
from .ops import MAX_POLYGAMMA, polygamma_name

MAX_DEPTH = 200  # nesting deeper than this is refused, never a RecursionError
MAX_LENGTH = 20000


@dataclass(frozen=True)
class Node:
    """AST node. kind: num, name, call, add, mul, frob, neg, pow, T.
    For ``add`` value holds the signs (+1/-1) of the terms; for ``mul`` the operator
    ('*', '/', '@'); for ``call`` the function name; for ``name`` the name."""

    kind: str
    children: tuple
    start: int
    end: int
    value: object = None


@lru_cache(maxsize=None)
def grammar_parser(name: str = "matcalc"):
    """The LALR parser of ``grammar/<name>.lark``.  lark's analysis of the grammar is kept in
    the user's cache directory ($MATCALC_CACHE_DIR, else $XDG_CACHE_HOME/matcalc or
    ~/.cache/matcalc), so a new process loads it instead of building it again (lark checks
    that the grammar is the same); where that directory cannot be written, it is built."""
    import lark

    text = (_grammar_dir() / f"{name}.lark").read_text(encoding="utf-8")
    return lark.Lark(text, parser="lalr", maybe_placeholders=False,
                     cache=_cache_path(f"{name}-grammar-lark{lark.__version__}.cache"))


def _grammar_dir() -> Path:
    """Where the .lark files are: grammar/ beside matcalc/ where it holds them (a clone's root,
    even when another copy of matcalc is installed), else the installed package
    matcalc.grammar."""
    beside = Path(__file__).resolve().parent.parent / "grammar"
    if (beside / "matcalc.lark").is_file():
        return beside
    from . import grammar

    return Path(grammar.__file__).parent


def _cache_path(name: str):
    base = os.environ.get("MATCALC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "matcalc")
    try:
        os.makedirs(base, exist_ok=True)
    except OSError:
        return False
    return os.path.join(base, name) if os.access(base, os.W_OK) else False


def _parser():
    return grammar_parser("matcalc")


_MULOPS = {"*": "*", "∘": "*", "⊙": "*", "/": "/", "⊘": "/", "@": "@"}


def _describe_token(tok) -> str:
    names = {"RPAR": "')'", "LPAR": "'('", "NUMBER": "a number", "NAME": "a name",
             "MULOP": "an operator", "PLUS": "'+'", "MINUS": "'-'", "COLON": "':'",
             "POWOP": "'**'", "TRANSPOSE": "a transpose", "COMMA": "','", "$END": "the end of input"}
    if getattr(tok, "type", None) == "$END":
        return "the end of input"
    return f"'{tok}'" if str(tok) else names.get(tok.type, tok.type)


def parse(source: str, syntax: str = "matcalc") -> Node:
    """Parse an expression; raise ParseError with a caret on failure.  ``syntax="matlab"``
    reads matrixcalculus.org's language (``matcalc.matlab``) into the same syntax tree."""
    import lark

    if syntax not in ("matcalc", "matlab"):
        from .errors import DeriveError

        raise DeriveError(f"syntax must be 'matcalc' or 'matlab', not {syntax!r}")

    if not isinstance(source, str):
        raise ParseError(f"expected the expression as a string, got {type(source).__name__}")
    if not source.strip():
        raise ParseError("the expression is empty", source, 0, 1)
    if len(source) > MAX_LENGTH:
        raise ParseError(f"the expression is {len(source)} characters long; the limit is {MAX_LENGTH}",
                         source, MAX_LENGTH, MAX_LENGTH + 1)
    depth = 0
    for i, ch in enumerate(source):
        depth += ch == "("
        depth -= ch == ")"
        if depth > MAX_DEPTH:
            raise ParseError(f"parentheses nested more than {MAX_DEPTH} deep", source, i, i + 1)
    try:
        if syntax == "matlab":
            from .matlab import parser as matlab_parser

            tree = matlab_parser().parse(source)
        else:
            tree = _parser().parse(source)
    except lark.exceptions.UnexpectedCharacters as e:
        ch = source[e.pos_in_stream] if e.pos_in_stream < len(source) else ""
        hint = _character_hint(source, e.pos_in_stream, ch)
        if syntax == "matlab" and ch == "@":
            hint = (" (@ is the matrix product in matcalc's syntax; in the MATLAB syntax it is *, and .* is the "
                    "entrywise product)")
        elif syntax == "matlab" and re.match(r"\.T(?![\w(])", source[e.pos_in_stream:]):
            hint = " (.T is the transpose in matcalc's syntax; in the MATLAB syntax it is X')"
        raise ParseError(f"unexpected character {ch!r}{hint}", source, e.pos_in_stream,
                         e.pos_in_stream + 1) from None
    except lark.exceptions.UnexpectedToken as e:
        tok = e.token
        pos = getattr(tok, "start_pos", None)
        if tok.type == "$END" or pos is None:
            pos = len(source.rstrip())
            raise ParseError("the expression ends too early (an operand or ')' is missing)",
                             source, pos, pos + 1) from None
        msg = f"unexpected {_describe_token(tok)}"
        if str(tok) == ":" and source[:pos].rstrip().endswith("(") and source[pos + 1:].lstrip().startswith(")"):
            msg += " (X(:), every entry of X in one column, is vec(X); matcalc has no indexing)"
        elif str(tok) == "," and re.search(r"(\w\s*\(|,)\s*\([^()]*$", source[:pos]):  # ones((5, 3))
            msg += (" (a tuple: matcalc takes sizes and an axis as plain arguments, ones(5, 3), sum(X, 0); "
                    "sum(X) sums every entry)")
        elif syntax == "matlab" and str(tok) == "*" and source[:pos].endswith("*"):
            msg += " (** is Python's power; in the MATLAB syntax X^3 is the matrix power, X.^3 entry by entry)"
        elif tok.type == "RPAR":
            msg += " (unbalanced parentheses, or an operand is missing)"
        elif tok.type == "EQUALS":
            msg += " (matcalc takes an expression, not an equation; axis= or dim= names an axis: sum(X, axis=0))"
        elif source[pos] in "'\"" and _character_hint(source, pos, source[pos]):  # norm(X, 'fro'): no strings
            msg += _character_hint(source, pos, source[pos])
        elif tok.type in ("NAME", "NUMBER", "LPAR"):
            msg += _missing_operator_hint(source, pos, str(tok), syntax)
        raise ParseError(msg, source, pos, pos + max(1, len(str(tok)))) from None
    except lark.exceptions.UnexpectedInput as e:  # pragma: no cover - other lark failures
        pos = getattr(e, "pos_in_stream", 0) or 0
        raise ParseError("could not parse the expression", source, pos, pos + 1) from None
    ast = _convert(tree, source, syntax)
    _check_depth(ast, source)
    return ast


def _missing_operator_hint(source: str, pos: int, tok: str, syntax: str) -> str:
    """Two operands side by side: log det(X) is logdet(X); else the products, the matrix product
    first where a matrix meets a matrix (tr(A X B) is A@X@B, not A*X*B)."""
    before = re.search(r"(\w+)\s*$", source[:pos])
    word = before.group(1) if before else ""
    if word == "log" and tok == "det":
        return " (log det X is logdet(X))"
    if syntax == "matlab":
        return " (an operator is missing: write products with * (matrix) or .* (entry by entry))"
    if word[:1].isupper() and tok[:1].isupper():  # A X: two matrices by their names
        return f" (an operator is missing: {word}@{tok} is the matrix product, {word}*{tok} the entrywise one)"
    return " (an operator is missing: write @ for a matrix product, * or ∘ for an entrywise one)"


def _check_depth(ast: Node, source: str) -> None:
    """Refuse expressions nested deeper than MAX_DEPTH operators (iteratively measured)."""
    stack = [(ast, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ParseError(f"the expression nests more than {MAX_DEPTH} operations deep",
                             source, node.start, node.end)
        stack.extend((c, depth + 1) for c in node.children)


def _span(items):
    starts, ends = [], []
    for it in items:
        if isinstance(it, Node):
            starts.append(it.start)
            ends.append(it.end)
        else:
            starts.append(it.start_pos)
            ends.append(it.end_pos)
    return min(starts), max(ends)


def _convert(tree, source: str, syntax: str = "matcalc") -> Node:
    """Post-order conversion with an explicit stack (no recursion on deep input)."""
    import lark

    build = _build
    if syntax == "matlab":
        from .matlab import build as matlab_build

        def build(kind, kids, source):
            return matlab_build(kind, kids, source) or _build(kind, kids, source)

    out: dict[int, Node] = {}
    stack = [(tree, False)]
    while stack:
        t, done = stack.pop()
        if not done:
            stack.append((t, True))
            for c in t.children:
                if isinstance(c, lark.Tree):
                    stack.append((c, False))
            continue
        kids = [out.pop(id(c)) if isinstance(c, lark.Tree) else c for c in t.children]
        out[id(t)] = build(t.data, kids, source)
    return out[id(tree)]


def _build(kind: str, kids: list, source: str) -> Node:
    s, e = _span(kids)
    if kind == "number":
        value = float(kids[0])
        if not math.isfinite(value):
            raise ParseError(f"the number {str(kids[0])[:30]} is too large for float64", source, s, e)
        return Node("num", (), s, e, value)
    if kind == "name":
        return Node("name", (), s, e, str(kids[0]))
    if kind == "paren":
        inner = kids[1]
        return Node(inner.kind, inner.children, s, e, inner.value)
    if kind == "args":
        return Node("args", tuple(k for k in kids if isinstance(k, Node)), s, e)
    if kind == "kwarg":  # sum(X, axis=0), softmax(Z, dim=-1): the axis as NumPy and torch name it
        return Node("kwarg", (kids[2],), s, e, str(kids[0]))
    if kind == "call":
        name, args = str(kids[0]), _keywords(kids[2].children, source)
        if len(args) == 2 and (name in ("maximum", "minimum")
                               or name in ("max", "min") and _number(args[0]) is not None):  # max(0, z): the hinge
            return _extremum(name in ("maximum", "max"), *args, s, e)
        if name == "polygamma":  # SciPy's polygamma(k, x)
            order = _number(args[0]) if len(args) == 2 else None
            if order is None or order != int(order) or not 0 <= order <= MAX_POLYGAMMA:
                raise ParseError(f"polygamma(k, x) takes a whole order k from 0 to {MAX_POLYGAMMA} as written "
                                 f"(a number), then x", source, s, e)
            return Node("call", args[1:], s, e, polygamma_name(int(order)))
        return Node("call", args, s, e, name)
    if kind in ("add", "sub"):
        left, right = kids[0], kids[2]
        sign = 1 if kind == "add" else -1
        if left.kind == "add" and left.start == s and not _parenthesised(left, source):
            return Node("add", left.children + (right,), s, e, left.value + (sign,))
        return Node("add", (left, right), s, e, (1, sign))
    if kind == "frob":
        return Node("frob", (kids[0], kids[2]), s, e)
    if kind == "binop":
        return Node("mul", (kids[0], kids[2]), s, e, _MULOPS[str(kids[1])])
    if kind == "neg":
        return Node("neg", (kids[1],), s, e)
    if kind == "pos":
        inner = kids[1]
        return Node(inner.kind, inner.children, s, e, inner.value)
    if kind == "pow":
        return Node("pow", (kids[0], kids[2]), s, e)
    if kind == "transpose":
        return Node("T", (kids[0],), s, e)
    raise ParseError(f"unsupported construct {kind}", source, s, e)  # pragma: no cover


def _number(n: Node):
    """n's value where it is a number as written (2, -0.5), else None."""
    if n.kind == "num":
        return n.value
    return -n.children[0].value if n.kind == "neg" and n.children[0].kind == "num" else None


def _extremum(larger: bool, a: Node, b: Node, s: int, e: int) -> Node:
    """max(0, z) and min(c, z) (a number first, the hinge as papers write it) as maximum and
    minimum, NumPy's entrywise comparisons; with the number 0 as relu, which it is exactly
    (maximum(z, 0) = relu(z), minimum(z, 0) = -relu(-z)); the nodes made span the call."""
    zero = b if _number(a) is None and _number(b) == 0.0 else a if _number(a) == 0.0 else None
    if zero is None:
        return Node("call", (a, b), s, e, "maximum" if larger else "minimum")
    other = b if zero is a else a
    if larger:
        return Node("call", (other,), s, e, "relu")
    return Node("neg", (Node("call", (Node("neg", (other,), s, e),), s, e, "relu"),), s, e)


_AXIS_KEYWORDS = ("axis", "dim")


def _keywords(args: tuple, source: str) -> tuple:
    """A call's arguments with axis= (NumPy's) or dim= (torch's) read as the axis, matcalc's
    second argument, and keepdims= dropped (an axis-wise result keeps its axis here: a row or a
    column); any other keyword is refused."""
    out, seen = [], False
    for a in args:
        if a.kind != "kwarg":
            if seen:
                raise ParseError("a plain argument after a keyword argument", source, a.start, a.end)
            out.append(a)
            continue
        seen = True
        if a.value == "keepdims":
            continue
        if a.value not in _AXIS_KEYWORDS:
            raise ParseError(f"{a.value}= is a keyword argument matcalc does not take (axis= or dim= gives "
                             f"the axis: sum(X, axis=0), or sum(X, 0))", source, a.start, a.end)
        if len(out) != 1:
            raise ParseError(f"{a.value}= goes with one array: sum(X, axis=0)", source, a.start, a.end)
        out.append(a.children[0])
    return tuple(out)


def _parenthesised(node: Node, source: str) -> bool:
    return source[node.start] == "(" and source[node.end - 1] == ")"


_DOT_OPS = {"*": "MATLAB's entrywise product: in matcalc, * is already entrywise (@ is the matrix product)",
            "/": "MATLAB's entrywise division: in matcalc write /",
            "^": "MATLAB's entrywise power: in matcalc write ** (or ^)"}
_LATEX = {"top", "intercal", "operatorname", "mathrm", "mathbf", "frac", "left", "right", "cdot", "times", "circ",
          "odot", "sqrt", "log", "exp", "det", "tr", "sum", "Vert", "lVert", "rVert", "|", "{", "text", "mathsf",
          "otimes", "oslash", "ln", "partial", "nabla", "mathbb", "boldsymbol", "bm", "hat", "bar", "tilde", "quad",
          "cdots", "ldots", "big", "Big"}


def _character_hint(source: str, pos: int, ch: str) -> str:
    """What a character matcalc does not read was probably meant to say, and how to write it."""
    before = source[:pos].rstrip()
    if ch == "{" and before.endswith("^"):
        return " (X^{-1} is inv(X), X^{T} is X.T, x^{2} is x**2)"
    if ch == ":" and before.endswith("(") and source[pos + 1:].lstrip().startswith(")"):
        return " (X(:), every entry of X in one column, is vec(X); matcalc has no indexing)"
    if ch == ":":  # (only the MATLAB syntax has no ':')
        return " (: is matcalc's Frobenius product; in the MATLAB syntax write trace(A'*B) or sum(sum(A.*B)))"
    if ch in "\"'" and re.search(r"approximate\s*=\s*$", before):  # torch's gelu(x, approximate='tanh')
        return (" (gelu is the exact GELU, x*Φ(x); torch's approximate='tanh' is "
                "0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x**3))))")
    if ch in "\"'" and re.match(r"['\"]\w*['\"]", source[pos:]):
        return " (matcalc takes no strings: norm(X, 'fro') is norm2(X), sum(X, 'all') is sum(X))"
    if ch == "[":
        if re.match(r"\[\s*(:\s*,\s*None|None\s*,\s*:)\s*\]", source[pos:]):  # x[:, None], x[None, :]
            return " (matcalc has no indexing: a vector is a column already, and x[None, :] is x.T)"
        return " (matcalc has no indexing: it works with whole arrays; use parentheses for grouping)"
    if ch in "]{}":
        return " (use parentheses for grouping)"
    if ch == "=":
        word = re.search(r"(\w+)\s*$", before)
        if word and before.count("(") > before.count(")"):
            return (f" ({word.group(1)}= is a keyword argument: matcalc takes the axis as a plain second "
                    "argument: softmax(X, 1), sum(X, 0))")
        return " (matcalc takes an expression, not an equation)"
    if ch == ".":
        return _dot_hint(source, pos)
    if ch in "<>≤≥!":
        return (" (matcalc has no comparisons: step(z) is 1 where z > 0 and 0 elsewhere, so where(z > 0, a, b) is "
                "step(z)*a + (1 - step(z))*b; maximum(z, 0) is relu(z))")
    command = re.match(r"\\([A-Za-z]+|[|{])", source[pos:])
    if ch == "\\" and command and command.group(1) == "otimes":
        return " (A \\otimes B, the Kronecker product, is kron(A, B); LaTeX is not read)"
    if ch == "\\" and command and (command.group(1) in _LATEX or len(command.group(1)) > 1 and not (
            before and (before[-1].isalnum() or before[-1] in ")'_"))):  # \operatorname{tr}, x^\top; not A\b
        return (" (LaTeX is not read: write tr(X) for \\operatorname{tr}, x.T for x^\\top, norm2(x) for \\|x\\|, "
                "inv(X) for X^{-1}, @ for a product)")
    if ch in "|‖":
        return (" (‖x‖ is norm2(x), ‖x‖² is norm2(x)**2 or x:x, ‖x‖₁ is norm1(x), |x| entrywise is abs(x), "
                "log|X| is logdet(X))")
    if ch in _SUPERSCRIPTS:
        return " (write powers with **: x**2 entrywise, inv(X) for X⁻¹, X.T for Xᵀ)"
    return _SYMBOL_HINTS.get(ch, "")


# characters of typeset mathematics, and how matcalc writes them
_SYMBOL_HINTS = {
    "\\": " (A\\b, MATLAB's solve, is inv(A)@b: matcalc computes it as a solve; the MATLAB syntax reads A\\b)",
    "⊗": " (the Kronecker product A⊗B is kron(A, B))",
    "×": " (write * for the entrywise product, @ for the matrix product)",
    "·": " (write * for the entrywise product, @ for the matrix product, x.T@y or x:y for a dot product)",
    "⋅": " (write * for the entrywise product, @ for the matrix product, x.T@y or x:y for a dot product)",
    "⊤": " (the transpose Xᵀ is X.T)", "†": " (the transpose Xᵀ is X.T: matcalc's matrices are real)",
    "√": " (√x is sqrt(x))", "∑": " (a sum ∑ is sum(x); sum(X, 0) along an axis)",
    "÷": " (write / for division)", "–": " (write - for a minus sign)", "—": " (write - for a minus sign)",
    "∞": " (matcalc takes no infinite values)",
    "（": " (write the ASCII parentheses ( ))", "）": " (write the ASCII parentheses ( ))",
}


_SUPERSCRIPTS = "²³¹⁰ⁱ⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿ"
_MODULES = ("np", "numpy", "jnp", "torch", "math", "tf", "sp", "scipy", "F", "jax")
# functions users know by other names, and how matcalc writes them
SPELLED = {"solve": "write inv(A)@B: matcalc computes it as a solve", "log_softmax":
            "write log(softmax(z)), which matcalc computes as z - logsumexp(z)", "logsoftmax":
            "write log(softmax(z)), which matcalc computes as z - logsumexp(z)", "outer": "write x@y.T",
            "dot": "write x.T@y or x:y", "trace": "write tr(A)", "transpose": "write A.T",
            "square": "write x**2",
            "norm": "norm(x), norm(x, 2) and norm(x, 1) of a vector are norm2(x) and norm1(x), norm(X) of a "
                    "matrix Frobenius (np.linalg.norm's default); a matrix's 2-norm (its largest singular "
                    "value) and other orders are not available",
            "max": "max(0, z) is relu(z); entry by entry, max(x, y) is maximum(x, y), as NumPy's np.maximum "
                   "(NumPy's np.max(X, 0) is a largest entry along an axis, which matcalc has not)",
            "min": "min(0, z) is -relu(-z); entry by entry, min(x, y) is minimum(x, y), as NumPy's np.minimum "
                   "(NumPy's np.min(X, 0) is a smallest entry along an axis, which matcalc has not)",
            "pow": "write x**k", "power": "write x**k",
            "inner": "write x.T@y or x:y", "matmul": "write A@B", "var": "write mean((x - mean(x))**2)",
            "σ": "write sigmoid(z)", "cross_entropy": "write -y:log(softmax(z))",
            **dict.fromkeys(("clip", "clamp"), "write minimum(maximum(x, lo), hi); relu(x) clips at 0"),
            "relu6": "write minimum(relu(z), 6)", "hardtanh": "write maximum(minimum(z, 1), -1)",
            "eye": "the identity is I, eye or eye(n): I takes its size from what it meets (I + X@X.T, W@I), eye(n) "
                   "has n rows and columns", "identity": "the identity is I, sized by what it meets",
            "zeros": "write 0 (beside +, - or : it takes the other side's shape), or 0*ones(rows, cols)",
            "expm": "matcalc has no matrix exponential; exp(X) is entry by entry",
            "logm": "matcalc has no matrix logarithm; log(X) is entry by entry (logdet(X) = tr(logm(X)))",
            "sqrtm": "matcalc has no matrix square root; sqrt(X) is entry by entry",
            "log10": "write log(x)/log(10)", "log2": "write log(x)/log(2)",
            "leaky_relu": "write relu(z) - a*relu(-z)",
            "std": "write sqrt(mean((x - mean(x))**2))",
            **dict.fromkeys(("ndtr", "normcdf", "norm_cdf", "Phi", "Φ"), "the normal CDF Φ(z) is 0.5*erfc(-z/sqrt(2)); "
                            "log(0.5*erfc(-z/sqrt(2))) is computed stably, as logerfc"),
            "log_ndtr": "log Φ(z) is log(0.5*erfc(-z/sqrt(2))), computed stably, as logerfc",
            "gamma": "gamma(x) is exp(gammaln(x)) for x > 0, and log(gamma(x)) is gammaln(x)",
            **dict.fromkeys(("betaln", "lbeta"), "write gammaln(a) + gammaln(b) - gammaln(a + b)"),
            "beta": "the beta function B(a, b) is exp(gammaln(a) + gammaln(b) - gammaln(a + b))",
            "psi": "SciPy's psi(x) is digamma(x)",
            "multigammaln": "multigammaln(a, p) is p*(p - 1)/4*log(pi) + gammaln(a) + gammaln(a - 0.5) + … "
                            "(p terms, gammaln(a - j/2) for j = 0 … p - 1): write the terms",
            "polygamma": "polygamma(k, x) takes a whole order k from 0 to 6, then x",
            "numel": "write size(X, 0)*size(X, 1)",
            "length": "write size(x, 0)", "elu": "matcalc has no elu; relu, softplus, gelu and silu are built in",
            "expit": "write sigmoid(z)", "len": "write size(x, 0)", "heaviside": "write step(x)",
            "multiply": "write x*y (entry by entry)", "add": "write x + y", "subtract": "write x - y",
            **dict.fromkeys(("divide", "true_divide"), "write x/y"), "negative": "write -x",
            **dict.fromkeys(("ravel", "flatten", "reshape"), "vec(X) is X's entries in one column (column-major), "
                            "unvec(v, rows) the matrix back"),
            "newaxis": "matcalc has no indexing: a vector is a column already, x.T a row",
            **dict.fromkeys(("array", "asarray"), "write the symbol: the arrays are given when the function is called"),
            "mse_loss": "write mean((y - t)**2)",
            "logaddexp": "logaddexp(0, x) is softplus(x); logaddexp(a, b) is a + softplus(b - a)",
            "where": "matcalc has no where; step(x) is 1 where x > 0, so step(x)*a + (1 - step(x))*b",
            "exp2": "write exp(x*log(2))", "cbrt": "write x**(1/3)", "reciprocal": "write 1/x",
            "absolute": "write abs(x)", "vdot": "write x:y", "ones_like": "write 1 (it takes the other side's shape)",
            "prod": "matcalc has no product of entries; for positive x write exp(sum(log(x)))",
            **dict.fromkeys(("amax", "amin", "nanmax", "argmax"), "matcalc has no largest or smallest entry; "
                            "logsumexp(x) is a smooth maximum"),
            **dict.fromkeys(("einsum", "tensordot"), "matcalc has no einsum: write the products with @, * and "
                            "sum(X, axis)"),
            # names other tools use (cvxpy, MATLAB, torch.nn) whose closest spelling here means something else
            **dict.fromkeys(("atanh", "arctanh"), "write 0.5*log((1 + x)/(1 - x))"),
            **dict.fromkeys(("asinh", "arcsinh"), "write log(x + sqrt(x**2 + 1))"),
            **dict.fromkeys(("acosh", "arccosh"), "write log(x + sqrt(x**2 - 1))"),
            "sech": "write 1/cosh(x)", "coth": "write 1/tanh(x)", "sec": "write 1/cos(x)", "cot": "write 1/tan(x)",
            **dict.fromkeys(("round", "floor", "ceil", "trunc", "fix", "rint"), "matcalc has no rounding: it is "
                            "piecewise constant, its derivative 0 wherever it has one"),
            "pos": "pos(x) is relu(x)", "entr": "entr(x) is -x*log(x)", "swish": "swish(x) is silu(x), x*sigmoid(x)",
            **dict.fromkeys(("sumsq", "sumsqr", "sum_squares", "sqnorm"), "write sum(x**2), or x:x"),
            **dict.fromkeys(("cumsum", "cumprod"), "matcalc has no cumulative sums or products"),
            "softsign": "write x/(1 + abs(x))", "logit": "write log(p/(1 - p))", "mish": "write x*tanh(softplus(x))",
            "quad_form": "quad_form(x, P) is x.T@P@x", "log_det": "write logdet(X)",
            "svd": "matcalc has no singular value decomposition",
            "pinv": "matcalc has no pseudo-inverse; for X of full column rank it is inv(X.T@X)@X.T",
            **dict.fromkeys(("normpdf", "norm_pdf", "phi"), "the normal density φ(z) is exp(-z**2/2)/sqrt(2*pi)"),
            "huber": "Huber's loss of r with threshold c is 0.5*minimum(abs(r), c)**2 + c*relu(abs(r) - c)",
            "diagonal": "write diag(X), X's diagonal as a vector",
            "inverse": "write inv(A)", "mm": "write A@B", "bmm": "write A@B",
            **{name: f"write {name.lower()}(...), in lower case" for name in ("ReLU", "Sigmoid", "Tanh", "Softplus",
                                                                             "Softmax", "Exp", "Log", "GELU", "SiLU")}}

# a module's function names that matcalc spells differently (np.linalg.norm is norm2)
_MODULE_NAMES = {"norm": "norm2", "trace": "tr", "slogdet": "logdet", "expit": "sigmoid", "inverse": "inv",
                 "matmul": "@", "mm": "@", "dot": "@", "transpose": ".T", "log_softmax": "log(softmax(...))"}


def _dot_hint(source: str, pos: int) -> str:
    """A hint for a '.' that matcalc does not read: MATLAB's .* ./ .^ or a module prefix np.exp."""
    nxt = source[pos + 1:pos + 2]
    if nxt in _DOT_OPS:
        return f" (.{nxt} is {_DOT_OPS[nxt]}; whole questions in MATLAB syntax are read with --syntax matlab)"
    j = pos
    while j > 0 and (source[j - 1].isalnum() or source[j - 1] == "_"):
        j -= 1
    k = pos + 1
    while k < len(source) and (source[k].isalnum() or source[k] == "_"):
        k += 1
    if source[j:pos] in _MODULES:
        # every module's call in the text, each once: np.exp(x)*np.linalg.inv(X) in one step
        calls = [(m.group(0), m.end()) for m in re.finditer(rf"(?<![\w.])(?:{'|'.join(_MODULES)})\.[\w.]*", source)]
        own = re.match(r"[\w.]*", source[j:]).group(0)
        first = next((i for i, (_, end) in enumerate(calls) if end >= k), None)
        if first is None:  # (this one not found alone: after another '.')
            calls, first = [(own, j + len(own))], 0
        hints, seen = [], set()
        for chain, end in calls[first:] + calls[:first]:
            if chain not in seen:
                seen.add(chain)
                hints.append(_module_hint(chain, source, end))
        return f" ({'; '.join(hints)})"
    if nxt == "(" and j < pos:  # Julia's broadcast f.(x)
        return (f" ({source[j:pos]}.(...) is Julia's broadcast; here functions act entry by entry already: "
                f"write {source[j:pos]}(...))")
    method = _METHODS.get(source[pos + 1:k])
    while j > 1 and source[j - 1] == "." and (source[j - 2].isalnum() or source[j - 2] == "_"):  # X.T.dot
        j -= 1
        while j > 0 and (source[j - 1].isalnum() or source[j - 1] == "_"):
            j -= 1
    if method and (j < pos or source[:pos].rstrip().endswith(")")):
        return (f" ({(source[j:k] if j < pos else '(...).' + source[pos + 1:k])} is a method (NumPy's or torch's); "
                f"matcalc has functions: {method})")
    return ""


def _module_hint(chain: str, source: str, k: int) -> str:
    """How matcalc writes a module's function (chain: np.linalg.det, ending at k in source)."""
    prefix, _, name = chain.rpartition(".")
    spelled = _MODULE_NAMES.get(name)
    if name == "pi":
        return f"write pi without the {prefix}. prefix"
    if name in ("max", "min", "amax", "amin") and not _two_arguments(source, k):  # np.max(x): a reduction
        return f"{chain}: {SPELLED['amax']}"
    if name in _MODULE_SPELLED:
        return f"{chain}: {_MODULE_SPELLED[name]}"
    if not spelled and name and not _known_function(name):  # np.where: not matcalc's either
        how = SPELLED.get(name)
        return f"{chain}: {how}" if how else f"{chain} has no matcalc counterpart"
    if spelled and not spelled[0].isalpha():
        return f"write {spelled} for {chain}, without the {prefix}. prefix"
    return f"write {spelled or name or 'the function'}(...) without the {prefix}. prefix"


# a module's functions whose matcalc spelling takes more than dropping the prefix
_MODULE_SPELLED = {
    "diag": "of a vector v (the diagonal matrix) write Diag(v), of a matrix X (its diagonal) diag(X)",
    "diagonal": "write diag(X), X's diagonal as a vector", "diag_embed": "write Diag(v)",
    "slogdet": "np.linalg.slogdet(X)[1] is logdet(X) (log|det X|, as slogdet's second value, is logdet of a "
               "matrix with a positive determinant)",
    "outer": "outer(x, y) is x@y.T",
    "norm": "norm(x) and norm(X, 'fro') are norm2 (Euclidean, Frobenius), norm(x, 1) of a vector norm1(x)",
    **{name: SPELLED[name] for name in ("pinv", "normpdf")},
}


def _two_arguments(source: str, k: int) -> bool:
    """Whether the call whose name ends at k has a comma at its own level (max(x, y))."""
    depth = 0
    for ch in source[k:]:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth == 0:
                return False
        elif ch == "," and depth == 1:
            return True
    return False


def _known_function(name: str) -> bool:
    from .ops import user_functions  # (the registry: a hint only, read when one is needed)

    return name in user_functions()


# NumPy spellings after a '.': what matcalc writes instead
_METHODS = {"dot": "x.dot(y) is x.T@y (or x:y), A.dot(B) is A@B", "t": "the transpose is .T",
            "sum": "write sum(x) (sum(X, 0) along an axis)", "mean": "write mean(x)",
            "transpose": "the transpose is .T", "inv": "write inv(A)", "trace": "write tr(A)",
            "log": "write log(x)", "exp": "write exp(x)", "mT": "the transpose is .T",
            **dict.fromkeys(("matmul", "mm", "mv", "bmm"), "A.matmul(B) is A@B"), "pow": "write x**k",
            **dict.fromkeys(("flatten", "ravel", "reshape", "view"), "vec(X) stacks X's columns"),
            "shape": "size(X, 0) is X's number of rows, size(X, 1) of columns",
            **dict.fromkeys(("norm",), "write norm2(x)"), "abs": "write abs(x)", "sqrt": "write sqrt(x)",
            "square": "write x**2", "tanh": "write tanh(x)", "sigmoid": "write sigmoid(x)",
            "mul": "A.mul(B) is A*B, entry by entry", "inverse": "write inv(A)", "det": "write det(A)",
            "logdet": "write logdet(A)", "diag": "write diag(X) for its diagonal, Diag(v) for a diagonal matrix",
            "diagonal": "write diag(X)"}
