"""matrixcalculus.org's language (MATLAB-like): ``derive(..., syntax="matlab")``.

``*`` is the matrix product (a scalar on either side scales), ``.*`` ``./`` ``.^`` act entry
by entry, ``'`` transposes, ``^`` is a power of a scalar or an integer power of a square
matrix (``A^-1`` is the inverse, ``A^2`` is matrix_power(A, 2)), ``/`` divides by a scalar, ``vector(1)`` and
``matrix(1)`` are all-ones arrays and ``eye`` the identity.  Names follow that site's
convention: a–g scalars, h–z vectors, A–Z matrices (Greek names are scalars).

The grammar is ``grammar/matlab.lark``; the text becomes the same syntax tree as matcalc's
own language (``parse.Node``) with three marked constructs that only typing can resolve
(``*`` between operands of unknown kind, ``/`` and ``^``), and results print back in this
syntax (``to_matlab``)."""
from __future__ import annotations

from . import ir
from .ops import REGISTRY
from .errors import ParseError
from .ir import SCALAR, Expr
from .parse import Node, grammar_parser
from .printing import ATOM, NEG, POST, POW, PROD, TextPrinter, _minus, _neg_split, exponent_text, fmt_number
from .shapes import _Typer, greek

# the binary operators: MATLAB spelling -> the mul node's value
MULOPS = {".*": "*", "./": "/", "*": "m*", "/": "m/", "\\": "m\\", "∘": "*", "⊙": "*", "⊘": "/"}
ONES = ("vector", "matrix")


def parser():
    return grammar_parser("matlab")


def build(kind: str, kids: list, source: str) -> Node | None:
    """The MATLAB-specific constructs of the syntax tree (None: as in matcalc's language)."""
    from .parse import _span

    if kind == "binop":
        s, e = _span(kids)
        return Node("mul", (kids[0], kids[2]), s, e, MULOPS[str(kids[1])])
    if kind == "pow":
        s, e = _span(kids)
        return Node("pow", (kids[0], kids[2]), s, e, "m^" if str(kids[1]) == "^" else None)
    if kind == "call" and str(kids[0]) in ("max", "min") and len(kids[2].children) == 2:  # MATLAB's max(A, B):
        from .parse import _extremum                                                       # entry by entry

        s, e = _span(kids)
        return _extremum(str(kids[0]) == "max", *kids[2].children, s, e)
    if kind == "call" and str(kids[0]) in ONES:
        s, e = _span(kids)
        args = kids[2].children
        if len(args) != 1 or args[0].kind != "num" or args[0].value != 1.0:
            raise ParseError(f"{kids[0]}(...) takes the argument 1 ({kids[0]}(1) is all ones; scale it "
                             f"with *: 2*{kids[0]}(1))", source, s, e)
        return Node("ones", (), s, e, str(kids[0]))
    return None


def matlab_kind(name: str) -> int:
    """0 scalar, 1 vector, 2 matrix by matrixcalculus.org's convention: a–g scalars,
    h–z vectors, A–Z matrices; Greek names (alpha, lambda, …) scalars."""
    if greek(name):
        return 0
    if name[0].isupper():
        return 2
    if "a" <= name[0] <= "g":
        return 0
    return 1


class MatlabTyper(_Typer):
    """Typing of the MATLAB constructs: decides what each ``*``, ``/`` and ``^`` is."""

    power_notes_due = False  # (X.^2 is entrywise as written; X^2 is the matrix power)

    spelled = {**_Typer.spelled, "dot": "write x'*y", "inner": "write x'*y", "outer": "write x*y'",
               "transpose": "write A'", "matmul": "write A*B", "square": "write x.^2", "pow": "write x.^k",
               "power": "write x.^k", "var": "write mean((x - mean(x)).^2)",
               "cross_entropy": "write -y'*log(softmax(z))", "ones": "vector(1) and matrix(1) are all ones, "
               "sized by what they meet (x - vector(1))", "zeros": "write 0 (it takes the other side's shape)",
               "eye": "the identity is I, eye or eye(n): I takes its size from what it meets (I + X*X'), "
               "eye(n) has n rows and columns", "identity": "the identity is I, sized by what it meets",
               "solve": "write inv(A)*B: matcalc computes it as a solve",
               "numel": "write size(X, 1)*size(X, 2)", "length": "write size(x, 1)",
               "norm": "norm(x), norm(x, 2) and norm(x, 1) of a vector are norm2(x) and norm1(x); for the "
                       "Frobenius norm of a matrix write norm2(X); other orders are not available"}

    numpy_rows = False  # (no NumPy to compare with)

    def __init__(self, source, declared):
        super().__init__(source, declared)
        self.mspecial: dict = {}  # id(ast node) -> how a MATLAB operator was read
        self.total_noted: dict = {}  # id(sum(X)) -> its note that it is the total (taken back in sum(sum(X)))

    def kind_of(self, name):
        return matlab_kind(name)

    def why_number(self, name):
        if greek(name):
            return "by its Greek name"
        return "by the MATLAB syntax's naming, where a–g are numbers, h–z vectors and A–Z matrices"

    def rule(self, n: Node):
        k = n.kind
        if k == "ones":
            v = self.fresh()
            self.eyes.append((n, v))
            if n.value == "vector":
                return (v, 1)
            w = self.fresh()
            self.eyes.append((n, w))
            return (v, w)
        if k == "mul" and n.value in ("m*", "m/", "m\\"):
            kid = [self.shape[id(c)] for c in n.children]
            (a, b), (sa, sb) = n.children, kid
            if n.value == "m\\":  # A\b, MATLAB's solve: inv(A)*b (computed as a solve); a\b of a number is b/a
                if self.is_scalar(sa):
                    self.mspecial[id(n)] = "ldiv"
                    return sb
                if not (self.unify(sa[0], sa[1]) and self.unify(sa[0], sb[0])):
                    self.fail(n, f"{self.text(n)} solves with {self.text(a)} ({self.show(sa)}), which needs a square "
                                 f"matrix with as many rows as {self.text(b)} ({self.show(sb)})")
                self.mspecial[id(n)] = "solve"
                return (sa[1], sb[1])
            if n.value == "m/":
                if not self.is_scalar(sb):
                    self.fail(n, f"{self.text(n)} divides by {self.text(b)}, which is {self.describe(sb)}: "
                                 f"/ divides by a scalar; for the entrywise quotient write ./, for "
                                 f"a matrix 'division' multiply by inv({self.text(b)})")
                self.mspecial[id(n)] = "div"
                return self.broadcast(n, n.children, kid, "divide")
            if self.is_scalar(sa) or self.is_scalar(sb):
                self.mspecial[id(n)] = "scale"
                return self.broadcast(n, n.children, kid, "multiply")
            ca, rb = self.find(sa[1]), self.find(sb[0])
            if ca == 1 and self.find(sa[0]) != 1 and self.find(sb[1]) == 1 and rb != 1:
                self.fail(n, f"cannot multiply {self.text(a)} ({self.show(sa)}) * {self.text(b)} "
                             f"({self.show(sb)}): two column vectors (for the inner product write "
                             f"{self.text(a)}'*{self.text(b)}, for the entrywise product .*)")
            self.mspecial[id(n)] = "matmul"
            try:
                return self.matmul(n, kid)
            except Exception as e:
                msg = getattr(e, "message", None)
                if msg is None:
                    raise
                from .errors import ShapeError

                raise ShapeError(msg.replace(") @ ", ") * ").replace(" (to scale by a scalar use *)", "")
                                 + " (for the entrywise product write .*)", e.source, e.start, e.end) from None
        if k == "pow" and n.value == "m^":
            base, ex = n.children
            sb = self.shape[id(base)]
            if self.is_scalar(sb):
                return super().rule(n)
            kexp = _literal(ex)
            if ex.kind == "name" and ex.value == "T" and "T" not in self.declared:  # X^T of the matcalc syntax
                self.fail(n, f"{self.text(n)}: in the MATLAB syntax the transpose is {self.text(base)}' "
                             f"(^ is the matrix power, and T would be a matrix)")
            what = f"{self.text(base)} is {self.describe(sb)}"
            if not self.is_matrix(sb):
                self.fail(n, f"{self.text(n)}: ^ is a power of a scalar or of a square matrix, but {what} "
                             f"(for the entrywise power write .^)")
            if kexp is None or kexp != int(kexp):
                self.fail(n, f"{self.text(n)}: a matrix to the power ^ needs an integer exponent "
                             f"(A^2 = A*A, A^-1 = inv(A)); for the entrywise power write .^")
            if not self.unify(sb[0], sb[1]):
                self.fail(n, f"{self.text(n)} is a matrix power, which needs a square matrix, but {what} "
                             f"(for the entrywise power write .^)")
            from .ops import MAX_MATRIX_POWER

            if abs(kexp) > MAX_MATRIX_POWER:  # (as matrix_power's: its derivative has |k| terms)
                self.fail(n, f"{self.text(n)}: the power of a matrix must be between -{MAX_MATRIX_POWER} "
                             f"and {MAX_MATRIX_POWER}, got {fmt_number(kexp)}")
            self.mspecial[id(n)] = ("mpow", int(kexp))
            return sb
        if k == "call" and n.value == "norm" and len(n.children) == 1:
            s = self.shape[id(n.children[0])]
            if self.find(s[0]) != 1 and self.find(s[1]) != 1:
                self.fail(n, f"MATLAB's norm of a matrix ({self.text(n.children[0])} is {self.describe(s)}) is its "
                             f"largest singular value, which matcalc does not have; for the Frobenius norm "
                             f"write norm2({self.text(n.children[0])})")
        if k == "call" and n.value in ("sum", "mean") and len(n.children) == 1:
            inner = self.total_noted.pop(id(n.children[0]), None)
            if inner is not None:  # sum(sum(X)): the total in MATLAB too
                self.notes.remove(inner)
            elif self.is_matrix(self.shape[id(n.children[0])]):
                self.note(n, f"{self.text(n)} of a matrix is over every entry here, as on matrixcalculus.org; "
                             f"MATLAB's {n.value}(X) is the row of each column's {n.value}: {n.value}(X, 1)")
                self.total_noted[id(n)] = self.notes[-1]
        if k == "call" and n.value == "diag":
            (s,) = [self.shape[id(c)] for c in n.children[:1]] or [None]
            if len(n.children) == 1 and self.find(s[1]) == 1 and self.find(s[0]) != 1:
                self.mspecial[id(n)] = "Diag"  # MATLAB's diag of a vector: the diagonal matrix
                return (s[0], s[0])
        return super().rule(n)

    def integer(self, node: Node, what: str) -> int:
        """MATLAB counts dimensions from 1: sum(X, 1) sums down the columns (matcalc's axis 0)."""
        k = super().integer(node, what)
        if not what.startswith("the axis"):
            return k
        if k not in (1, 2):
            self.fail(node, f"{what} is a MATLAB dimension: 1 (down the columns) or 2 (along the rows), "
                            f"not {k}")
        return k - 1

    def make(self, n: Node, args):
        how = self.mspecial.get(id(n))
        if n.kind == "ones":
            return ir.const(1.0, tuple(self.resolve(d) for d in self.shape[id(n)]))
        if how is None:
            return super().make(n, args)
        if how == "div":
            return ir.div(*args)
        if how == "ldiv":
            return ir.div(args[1], args[0])
        if how == "solve":
            return ir.matmul(ir.func("inv", args[0]), args[1])
        if how == "scale":
            return ir.mul(*args)
        if how == "matmul":
            return super().make(Node("mul", n.children, n.start, n.end, "@"), args) \
                if self.special.get(id(n)) == "inner" else ir.matmul(*args)
        if how == "Diag":
            return ir.func("Diag", args[0])
        if how[0] == "mpow":
            k, base = how[1], args[0]
            if k == 0:
                return ir.eye(base.shape[0])
            return base if k == 1 else ir.func("inv", base) if k == -1 else ir.func("matrix_power", base, attr=k)
        raise AssertionError(how)  # pragma: no cover


def _literal(node: Node):
    if node.kind == "num":
        return node.value
    if node.kind == "neg" and node.children[0].kind == "num":
        return -node.children[0].value
    return None


# ---------------------------------------------------------------- printing

class MatlabPrinter(TextPrinter):
    """Expr -> matrixcalculus.org / MATLAB syntax (re-parseable with syntax="matlab").
    ``colon=True`` writes Frobenius products as A:B, as the steps of a derivation do."""

    pow_op = "^"

    def __init__(self, names: dict | None = None, colon: bool = False, dims: dict | None = None):
        super().__init__(names, dims)
        self.colon = colon

    def dim(self, d) -> str:
        """A dimension's size as MATLAB text: size(x, 1) for the rows of a symbol x that has it."""
        out = []
        for f in ir.dim_factors(d):
            if f in self.dims:
                name, axis = self.dims[f]
                out.append(f"size({name}, {axis + 1})")
            else:
                out.append(super().dim(f))
        return "*".join(out)

    def visit(self, e: Expr):
        if e in self.names:
            return super().visit(e)
        op = e.op
        if op == "const" and e.shape != SCALAR:
            r, c = e.shape
            ones = "vector(1)'" if r == 1 else ("vector(1)" if c == 1 else "matrix(1)")
            if e.attr == 1.0:
                return ones, POST
            return f"{fmt_number(e.attr)}*{ones}", (PROD if e.attr >= 0 else NEG)
        if op == "eye":
            return "eye", ATOM
        if op == "mul":
            negative, pos = _neg_split(e)
            fs = pos.args if pos.op == "mul" else (pos,)
            if len(fs) == 2 and fs[0].op == "const" and fs[1].op == "div" and fs[1].args[0].op == "const" \
                    and fs[1].args[0].attr == 1.0 and fs[1].args[0] not in self.names:  # c*(1/x) prints as c./x
                d = fs[1].args[1]
                s = f"{self.wrap(fs[0], PROD)}{'/' if d.shape == SCALAR else './'}{self.wrap(d, PROD, strict=True)}"
                return (_minus(s) if negative else s), PROD
            out = ""
            for i, f in enumerate(fs):
                scalars_before = all(g.shape == SCALAR for g in fs[:i])
                s = self.wrap(f, PROD) if i == 0 else self.wrap(f, PROD, strict=True)
                if i == 0 and f.op == "matmul" and len(fs) > 1:
                    s = self.wrap(f, PROD, strict=True)
                elif i and f.op in ("matmul", "div") and scalars_before and i == len(fs) - 1:
                    s = self.wrap(f, PROD)  # 0.5*A*x: the scalar scales the product
                if i:
                    array_pair = f.shape != SCALAR and fs[i - 1].shape != SCALAR and \
                        any(g.shape != SCALAR for g in fs[:i])
                    out += ".*" if array_pair else "*"
                out += s
            if negative:
                return _minus(out), (NEG if len(fs) == 1 else PROD)
            return out, PROD
        if op == "matmul":
            a, b = e.args
            left = self.wrap(a, PROD, strict=a.op in ("mul", "div") and a.shape != SCALAR
                             and any(f.shape != SCALAR for f in a.args[:1] + a.args[1:]) and _entrywise(a))
            return f"{left}*{self.wrap(b, PROD, strict=True)}", PROD
        if op == "div":
            a, b = e.args
            sign = "/" if b.shape == SCALAR else "./"
            return f"{self.wrap(a, PROD)}{sign}{self.wrap(b, PROD, strict=True)}", PROD
        if op == "frob" and not self.colon:
            a, b = e.args
            if a.shape[1] == 1:  # vectors: the inner product a'*b
                return f"{self.wrap(a, POST)}'*{self.wrap(b, PROD, strict=True)}", PROD
            return f"sum(sum({self.wrap(a, PROD)}.*{self.wrap(b, PROD, strict=True)}))", ATOM
        if op == "pow":
            k = e.args[1]
            ks = exponent_text(k.attr, self._pi_allowed, self.pow_op) if k.op == "const" else self.wrap(k, ATOM)
            caret = "^" if e.args[0].shape == SCALAR else ".^"
            return f"{self.wrap(e.args[0], POST)}{caret}{ks}", POW
        if op == "T":
            return f"{self.wrap(e.args[0], POST)}'", POST
        if op == "matrix_power":
            return f"{self.wrap(e.args[0], POST)}^{e.attr}", POW
        if op == "Diag":
            return f"diag({self.p(e.args[0])[0]})", ATOM
        if op == "diag":
            return f"diag({self.p(e.args[0])[0]})", ATOM
        spec = REGISTRY.get(op)
        if spec is not None and "axis" in spec.params and e.attr is not None:  # dimensions count from 1
            return f"{op}({self.p(e.args[0])[0]}, {e.attr + 1})", ATOM
        return super().visit(e)


def _entrywise(e: Expr) -> bool:
    """A product or quotient with two array operands (printed with .* or ./)."""
    arrays = [f for f in e.args if f.shape != SCALAR]
    return len(arrays) > 1


def to_matlab(e: Expr, names: dict | None = None, colon: bool = False, dims: dict | None = None) -> str:
    return MatlabPrinter(names, colon, dims)(e)


__all__ = ["to_matlab", "matlab_kind", "MatlabTyper", "MatlabPrinter", "parser", "build"]
