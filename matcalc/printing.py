"""Printing: matcalc text (re-parseable) and LaTeX, two visitors over the IR."""
from __future__ import annotations

import math
import re

from . import ir
from .ir import SCALAR, Expr
from .naming import DiffName
from .ops import REGISTRY

# precedence: 1 add, 2 frob, 3 mul/div/matmul, 4 unary minus, 5 pow, 6 postfix, 7 atom
ADD, FROB, PROD, NEG, POW, POST, ATOM = 1, 2, 3, 4, 5, 6, 7


def fmt_number(v: float) -> str:
    if v != v or v in (float("inf"), float("-inf")):
        return repr(v)  # only an overflow while folding makes one; it does not re-parse
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    s = repr(v)
    if len(s) > 15:  # 0.1*0.1 = 0.010000000000000002: the number meant, a bit or two away, is 0.01
        short = float(f"{v:.12g}")
        if abs(short - v) <= 4e-16 * abs(v):
            return repr(short) if short != int(short) else str(int(short))
    return s


def number_form(v: float, pi=True):
    """A number that rounding made long, as it was meant: (p, q) for p/q with q ≤ 100
    (0.3333333333333333 is 1/3, 0.016666666666666666 1/60), ("log", k) for log k with k ≤ 20 (0.6931471805599453 is
    log 2), (p, q, c, e) for p/q·cᵉ with c one of π, 2π, 2 and e = ±1, ±½ (±2 for π) (1.1283791670955126
    is 2/√π, erf's; 0.3989422804014327 is 1/√(2π)), each only where it is that float up to
    the last bits; else None (0.5 and 0.1 stay).  pi false (a bool, or a function asked when a
    form has π): no forms with π (pi names a symbol)."""
    if v == 0.0 or len(repr(abs(v))) <= 8 or not math.isfinite(v) or not 1e-250 < abs(v) < 1e250:
        return None  # (near the ends of the floats a quotient by π² or a product overflows)
    if len(fmt_number(abs(v))) <= 8:  # 0.1 + 0.2 is 0.3 (fmt_number), not 3/10
        return None
    from fractions import Fraction  # (only for such a number: the import takes 4 ms)

    f = Fraction(v).limit_denominator(100)
    if f.denominator > 1 and abs(float(f) - v) <= 4e-16 * abs(v):  # (1/3 - 1 rounds off -2/3 by one bit)
        return abs(f.numerator), f.denominator
    for k in range(2, 21):
        if abs(v) == math.log(k):
            return "log", k
    found = []
    for c, e in _CONSTANT_POWERS:
        f = Fraction(abs(v) / c ** e).limit_denominator(12)
        if f and f.numerator <= 12 and abs(float(f) * c ** e - abs(v)) <= 4e-16 * abs(v):
            found.append((f.numerator + f.denominator, (f.numerator, f.denominator, c, e)))
    if found and any(form[2] in _WITH_PI for _, form in found) and not (pi() if callable(pi) else pi):
        found = [t for t in found if t[1][2] not in _WITH_PI]  # (pi asked only where a form has π: it may walk)
    return min(found, key=lambda t: t[0])[1] if found else None  # (4√2, not 8/√2)


# (c, e) for the numbers p/q·cᵉ: π, 1/π, π², 1/π², √π, 1/√π, √(2π), 1/√(2π), 1/√2, √2 (those
# of 2 after those of π), √3, 1/√3, …; of two forms of one number the one with the smaller p + q is taken
_ROOTS = (3.0, 5.0, 6.0, 7.0, 10.0)  # √3, √5, …, 1/√5 (attention's 1/√d at the sizes one writes)
_CONSTANT_POWERS = ((math.pi, 1), (math.pi, -1), (math.pi, 2), (math.pi, -2), (math.pi, 0.5), (math.pi, -0.5),
                    (2 * math.pi, 0.5), (2 * math.pi, -0.5), (2.0, -0.5), (2.0, 0.5)) + tuple(
    (c, e) for c in _ROOTS for e in (-0.5, 0.5))
_LOGS = (math.log(2.0), math.log(2 * math.pi), math.log(math.pi))  # a Gaussian's log 2π/2, log 2 p/2, …
_CONSTANT_POWERS += tuple((c, 1) for c in _LOGS)
_CONSTANT_NAMES = {math.pi: ("pi", "\\pi"), 2 * math.pi: ("2*pi", "2\\pi"), 2.0: ("2", "2"),
                   **{c: (str(int(c)), str(int(c))) for c in _ROOTS},
                   _LOGS[0]: ("log(2)", "\\log(2)"), _LOGS[1]: ("log(2*pi)", "\\log(2\\pi)"),
                   _LOGS[2]: ("log(pi)", "\\log(\\pi)")}
_WITH_PI = (math.pi, 2 * math.pi, _LOGS[1], _LOGS[2])  # (forms not taken where pi names a symbol)


def _constant_parts(form, tex: bool, pow_op: str = "**"):
    """(numerator, denominator) texts of p/q·cᵉ; "" where there is nothing but 1."""
    p, q, c, e = form
    name = _CONSTANT_NAMES[c][tex]
    power = name if abs(e) == 1 else ("\\sqrt{%s}" % name if tex else f"sqrt({name})") if abs(e) == 0.5 \
        else (f"{name}^{{2}}" if tex else f"{name}{pow_op}2")
    top = [str(p)] if p != 1 else []
    bottom = [str(q)] if q != 1 else []
    (top if e > 0 else bottom).append(power)
    return ("" if tex else "*").join(top) or "1", ("" if tex else "*").join(bottom)


def number_text(v: float, pi=True, pow_op: str = "**") -> tuple:
    """(text, precedence) of a number: 1/3, -log(2), 2.5, 2/sqrt(pi); pow_op writes pi**2."""
    form = number_form(v, pi)
    if form is None:
        return fmt_number(v), (ATOM if v >= 0 else NEG)
    if len(form) == 4:
        top, bottom = _constant_parts(form, False, pow_op)
        if bottom and re.search(r"\*(?![^(]*\))", bottom):  # (a * outside brackets: 2*sqrt(pi))
            bottom = f"({bottom})"
        s = f"{top}/{bottom}" if bottom else top
        prec = ATOM if re.fullmatch(r"\w+|sqrt\(\w+\)|sqrt\(2\*pi\)", s) else PROD
        return ("-" + s, NEG) if v < 0 else (s, prec)
    s = f"log({form[1]})" if form[0] == "log" else f"{form[0]}/{form[1]}"
    return ("-" + s, NEG) if v < 0 else (s, ATOM if form[0] == "log" else PROD)


def number_tex(v: float, pi=True) -> str:
    """A number in LaTeX: \\tfrac{1}{3}, -\\log(2), 2.5, \\tfrac{2}{\\sqrt{\\pi}}."""
    form = number_form(v, pi)
    if form is None:
        return fmt_number(v)
    sign = "-" if v < 0 else ""
    if len(form) == 4:
        top, bottom = _constant_parts(form, True)
        return sign + (f"\\tfrac{{{top}}}{{{bottom}}}" if bottom else top)
    return sign + (f"\\log({form[1]})" if form[0] == "log" else f"\\tfrac{{{form[0]}}}{{{form[1]}}}")


def exponent_text(v: float, pi=True, pow_op: str = "**") -> str:
    """A constant exponent after **: -2, 0.5, (-2/3)."""
    s, prec = number_text(v, pi, pow_op)
    return s if prec == ATOM or s == fmt_number(v) else f"({s})"


_neg_split = ir.negative_term


class TextPrinter:
    """Expr -> matcalc syntax."""

    def __init__(self, names: dict | None = None, dims: dict | None = None):
        self.names = names or {}   # node -> short name (definitions)
        self.dims = dims or {}     # dimension -> (a symbol with it, the axis): size(x, 0)
        self.memo: dict = {}
        self.signs: dict = {}      # node -> ir.negative_term(node, names)

    _root = None  # the expression being printed (_pi_allowed looks in it)
    _pi = None    # whether numbers may print with pi, once looked for
    pow_op = "**"  # the power in numbers such as pi**2

    def __call__(self, e: Expr) -> str:
        self._root, self._pi = e, None
        try:
            return self.p(e)[0]
        except RecursionError:  # a deep expression: fill the memo bottom-up, then print
            self.fill(e)
            return self.p(e)[0]

    def _pi_allowed(self) -> bool:
        """Numbers may print with pi (2/sqrt(pi)): no symbol or name of the expression is pi
        (looked for once per expression, and only when a number has a form with π)."""
        if self._pi is None:
            self._pi = "pi" not in {str(v) for v in self.names.values()} and not any(
                n.op == "sym" and n.attr == "pi" for n in (ir.walk(self._root) if self._root is not None else ()))
        return self._pi

    def fill(self, e: Expr):
        """Visit every node children first (never entering a named node), so printing a
        node never recurses deeper than one level."""
        stack = [(e, False)]
        while stack:
            node, done = stack.pop()
            if node in self.memo:
                continue
            if done or node in self.names:
                self.memo[node] = self.visit(node)
                continue
            stack.append((node, True))
            stack.extend((a, False) for a in reversed(node.args) if a not in self.memo)

    def wrap(self, e: Expr, limit: int, strict: bool = False) -> str:
        s, prec = self.p(e)
        return f"({s})" if (prec <= limit if strict else prec < limit) else s

    def p(self, e: Expr):
        hit = self.memo.get(e)
        if hit is None:
            hit = self.memo[e] = self.visit(e)
        return hit

    def terms(self, e: Expr) -> str:
        """a + b - c: a term with a negative coefficient prints after a minus sign."""
        parts = []
        for i, t in enumerate(e.args):
            negative, pos = _neg_split(t, self.names, self.signs)
            s = self.wrap(pos, ADD, strict=True)
            if i == 0 and negative and pos.op != "const" and _ones_first(pos) and not s.startswith("("):
                s = f"({s})"
            if negative and s.startswith("-"):
                s = f"({s})"  # a - (-b), never a - -b
            elif i > 0 and s.startswith("-"):  # a + (-b)∘c reads a - b*c
                negative, s = True, s[1:]
            parts.append(s if i == 0 and not negative else (("-" if i == 0 else " - ") + s if negative else " + " + s))
        return "".join(parts)

    def visit(self, e: Expr):
        if e in self.names:
            name = self.names[e]
            return str(name), ATOM
        op = e.op
        if op == "sym":
            return e.attr, ATOM
        if op == "delta":
            return "d" + e.attr, ATOM
        if op == "const":
            if e.shape[0] == 1 and e.shape[1] != 1:  # a row of ones reads 1.T
                return fmt_number(e.attr) + ".T", (POST if e.attr >= 0 else NEG)
            return number_text(e.attr, self._pi_allowed, self.pow_op)
        if op == "eye":
            return "I", ATOM
        if op == "add":
            return self.terms(e), ADD
        if op == "mul":
            negative, pos = _neg_split(e, self.names, self.signs)
            fs = pos.args if pos.op == "mul" else (pos,)
            if sum(f.op == "dim" for f in fs) > 1:
                fs = self.whole_sizes(fs)
                if len(fs) == 1 and not negative:
                    return self.visit(fs[0])
            if len(fs) == 2 and fs[0].op == "const" and fs[1].op == "div" and fs[1].args[0].op == "const" \
                    and fs[1].args[0].attr == 1.0 and fs[1].args[0] not in self.names:  # c*(1/x) prints as c/x
                s = f"{self.wrap(fs[0], PROD)}/{self.wrap(fs[1].args[1], PROD, strict=True)}"
                return (_minus(s) if negative else s), PROD
            out = []
            for i, f in enumerate(fs):
                scalars_before = all(g.shape == SCALAR for g in fs[:i])
                if i == 0 and not (f.op == "matmul" and len(fs) > 1):
                    out.append(self.wrap(f, PROD))
                elif f.op in ("matmul", "div") and scalars_before and i == len(fs) - 1 \
                        and not _ones_first(f, True, self.names):  # 0.1*(1.T@A): a bare 1.T takes its size from @
                    out.append(self.wrap(f, PROD))
                else:
                    out.append(self.wrap(f, PROD, strict=True))
            s = "*".join(out)
            if negative:
                f = fs[0].args[0] if len(fs) == 1 and fs[0].op == "div" else fs[0]
                if len(fs) == 1 and (f.op == "matmul" or f is fs[0]) and _ones_first(f, False, self.names):
                    s = f"({s})"  # -(1.T@A), -(1@r/n): a bare -1 would be a number before @ sizes it
                return _minus(s), (NEG if len(fs) == 1 else PROD)
            return s, PROD
        if op == "matmul":
            a, b = e.args
            if _ones_matrix(b, self) and not _ones_matrix(a, self):  # A@J = (A@1)@1.T
                s = f"{self.wrap(a, PROD)}@1@1.T"
                return (s if b.attr == 1.0 else f"{self.wrap(ir.const(b.attr), PROD)}*({s})"), PROD
            if _ones_matrix(a, self) and not _ones_matrix(b, self):  # J@B = 1@(1.T@B)
                s = f"1@(1.T@{self.wrap(b, PROD, strict=True)})"
                return (s if a.attr == 1.0 else f"{self.wrap(ir.const(a.attr), PROD)}*{s}"), PROD
            left = self.wrap(a, PROD, strict=a.op == "mul" and a.args[-1].shape != SCALAR
                             and sum(f.shape != SCALAR for f in a.args) > 1)
            return f"{left}@{self.wrap(b, PROD, strict=True)}", PROD
        if op == "div":
            return f"{self.wrap(e.args[0], PROD)}/{self.wrap(e.args[1], PROD, strict=True)}", PROD
        if op == "frob":
            a = _ones_side(e.args[0], self, "*1")
            return f"{a or self.wrap(e.args[0], FROB)}:{self.wrap(e.args[1], FROB, strict=True)}", FROB
        if op == "pow":
            k = e.args[1]
            a = e.args[0]
            if a.op == "dim" and k.op == "const" and k.attr == 2.0 and a not in self.names \
                    and ("size", a.attr, a.attr) in self.dims:  # n² of a square X: size(X)
                return self.visit(Expr("dim", (), f"{a.attr}*{a.attr}", SCALAR))
            ks = exponent_text(k.attr, self._pi_allowed, self.pow_op) if k.op == "const" else self.wrap(k, ATOM)
            return f"{self.wrap(e.args[0], POST)}**{ks}", POW
        if op == "T":
            return f"{self.wrap(e.args[0], POST)}.T", POST
        if op == "dim":
            t = self.dim(e.attr)
            return (f"({t})" if "/" in t or "*" in t else t), ATOM
        spec = REGISTRY[op]
        if spec.text is not None:  # (text, or (text, precedence))
            out = spec.text(self, e)
            return out if isinstance(out, tuple) else (out, ATOM)
        args = [self.arg(a) for a in e.args]
        if e.attr is not None and not isinstance(e.attr, tuple):
            args.append(str(e.attr))
        return f"{op}({', '.join(args)})", ATOM

    def arg(self, e: Expr) -> str:
        """A function's argument: an array of one number as c*ones(rows, cols), and the identity
        as Diag(ones(n)), since nothing beside them would give a bare 1 or I its shape
        (kron(ones(2, 3), B), not kron(1, B))."""
        if e.op == "eye" and e not in self.names:
            return f"Diag(ones({self.dim(e.shape[0])}))"
        arrays = [f for f in e.args if f.shape != SCALAR] if e.op == "mul" else [e]
        if e.shape == SCALAR or e in self.names or len(arrays) != 1 or arrays[0].op != "const" \
                or arrays[0] in self.names:
            return self.p(e)[0]
        r, c = e.shape  # (alpha*1 too: a number times an array of ones)
        ones = f"ones({self.dim(r)})" if c == 1 else f"ones({self.dim(r)}, {self.dim(c)})"
        scale = [f for f in e.args if f.shape == SCALAR] if e.op == "mul" else []
        if arrays[0].attr != 1.0 or not scale:
            scale.append(ir.const(arrays[0].attr))
        k = scale[0] if len(scale) == 1 else ir.mul(*scale)
        return ones if k.op == "const" and k.attr == 1.0 else f"{self.wrap(k, PROD)}*{ones}"

    def whole_sizes(self, fs) -> tuple:
        """The factors of a product with the two sizes of a matrix X side by side as one, which
        prints as size(X)."""
        fs = list(fs)
        for i, f in enumerate(fs):
            for j, g in enumerate(fs):
                if f.op == g.op == "dim" and i != j and ("size", f.attr, g.attr) in self.dims \
                        and f not in self.names and g not in self.names:
                    fs[i] = Expr("dim", (), f"{f.attr}*{g.attr}", SCALAR)
                    del fs[j]
                    return self.whole_sizes(fs)
        return tuple(fs)

    def dim(self, d) -> str:
        """A dimension's size as matcalc text: size(x, 0) of a symbol that has it, a number,
        or a product of them (the length of vec(X)), size(X) where they are X's two sizes."""
        whole = self.dims.get(("size",) + tuple(ir.dim_factors(d))) if isinstance(d, str) else None
        if whole is not None:
            return f"size({whole[0]})"
        text = ir.size_expr(d, {k: f"size({name}, {axis})" for k, (name, axis) in self.dims.items()
                                if isinstance(k, str)},
                            lambda a, b: f"{a}/({b})" if "*" in b else f"{a}/{b}",
                            lambda parts: "*".join(f"({p})" if "/" in p else p for p in parts))
        return f"size({d})" if text is None else text


def _minus(s: str) -> str:
    """-s, bracketed when s itself starts with a minus: -(-y*x), never --y*x."""
    return f"-({s})" if s.startswith("-") else "-" + s


def _ones_matrix(e: Expr, printer) -> bool:
    """An m×n array of one number (m, n > 1) as an operand of @: a bare 1 there would read
    as a vector of ones (X@1 the row sums), so it prints as a column of ones times a row."""
    return (e.op == "const" and e.shape[0] != 1 and e.shape[1] != 1 and e not in printer.names)


def _ones_first(e: Expr, quotient: bool = False, names=()) -> bool:
    """Whether a product chain (or with ``quotient``, a quotient) starts with an all-ones
    array: 1.T@A, 1@r/n (one with a name that gives its size, 1_n, does not count)."""
    while (e.op == "matmul" or quotient and e.op == "div") and e not in names:
        e = e.args[0]
    return e.op == "const" and e.shape != SCALAR and e not in names


def _ones_side(e: Expr, printer, ones: str):
    """c 1 for an array of c's on the left of ':' (½1:dp, not ½:dp, which reads as a scalar)."""
    if e.op == "const" and e.shape != SCALAR and e.attr not in (1.0, 0.0) and e not in printer.names:
        c, _ = printer.p(ir.const(e.attr))
        if e.shape[0] == 1:
            ones += ".T" if "mathbf" not in ones else "^{\\top}"
        return c + ones
    return None


def dim_sources(symbols: dict) -> dict:
    """dimension -> (symbol name, axis) for the symbols of an expression (name -> sym node),
    and ("size", rows, cols) -> (a matrix of that shape, None): the product of its sizes
    prints as size(X)."""
    out: dict = {}
    for name, node in symbols.items():
        for axis, d in enumerate(node.shape):
            if isinstance(d, str):
                out.setdefault(d, (name, axis))
        if all(isinstance(d, str) and "*" not in d for d in node.shape):
            out.setdefault(("size",) + node.shape, (name, None))
    return out


def to_text(e: Expr, names: dict | None = None, dims: dict | None = None) -> str:
    return TextPrinter(names, dims)(e)


# ---------------------------------------------------------------- LaTeX

GREEK_TEX = {g: "\\" + g for g in ["alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta",
                                     "eta", "theta", "vartheta", "iota", "kappa", "varkappa", "lambda", "mu", "nu",
                                     "xi", "pi", "varpi", "rho", "varrho", "sigma", "varsigma", "tau",
                                     "upsilon", "phi", "varphi", "chi", "psi", "omega", "digamma"]}
GREEK_TEX.update({g.capitalize(): "\\" + g.capitalize() for g in
                  ["gamma", "delta", "theta", "lambda", "xi", "pi", "sigma", "upsilon", "phi", "psi", "omega"]})
GREEK_TEX["omicron"] = "o"
_UNICODE_GREEK = dict(zip("αβγδεζηθικλμνξπρστυφχψωΓΔΘΛΞΠΣΥΦΨΩ",
                          ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
                           "kappa", "lambda", "mu", "nu", "xi", "pi", "rho", "sigma", "tau", "upsilon",
                           "phi", "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi",
                           "Sigma", "Upsilon", "Phi", "Psi", "Omega"]))
_UNICODE_GREEK.update(zip("ϐϑϕϖϰϱϵςϝ", ["beta", "vartheta", "phi", "varpi", "varkappa", "varrho", "epsilon",
                                         "varsigma", "digamma"]))


class RawTex(str):
    """A name already written in LaTeX: printed as it is."""


def tex_name(name: str) -> str:
    if len(name) > 1 and all(ch in _UNICODE_GREEK for ch in name):  # αβ: \alpha\beta, not \mathrm{alphabeta}
        return "".join(GREEK_TEX[_UNICODE_GREEK[ch]] for ch in name)
    name = "".join(_UNICODE_GREEK.get(ch, ch) for ch in name)
    m = re.match(r"^([A-Za-z]+?)_?(\d+|_[A-Za-z0-9_]+)?$", name)
    if not m:
        base, sub = name, None
    else:
        base, sub = m.group(1), m.group(2)
    if base in GREEK_TEX:
        base_tex = GREEK_TEX[base]
    elif len(base) == 1 and base.isascii():
        base_tex = base
    elif re.fullmatch(r"[A-Za-z]+", base):
        base_tex = "\\mathrm{" + base + "}"
    else:  # (letters beyond ASCII, é, as text: math mode has no glyphs for them)
        escaped = re.sub(r"([_{}$#%&^\\])", lambda mm: "\\" + mm.group(1) if mm.group(1) != "\\" else "", base)
        base_tex = ("\\mathrm{" if base.isascii() else "\\text{") + escaped + "}"
    if sub and not sub.strip("_"):  # x__: underscores only
        return base_tex + "\\_" * (len(name) - len(m.group(1)))
    if sub:
        sub = sub.lstrip("_")
        sub = GREEK_TEX.get(sub) or sub.replace("_", "\\_")  # x_lambda: x_λ
        return f"{base_tex}_{{{sub}}}"
    if m and name.endswith("_"):  # x_ is not x
        return base_tex + "\\_"
    return base_tex


def objective_tex(names) -> str:
    """The LaTeX of the objective: λ, or ℓ where a symbol or dimension of the question
    typesets as λ itself (a ridge penalty named lambda): ∂λ/∂w beside a λ w term would read
    as one quantity."""
    texs = {tex_name(n) for n in names}
    if "\\lambda" not in texs:
        return "\\lambda"
    return "\\ell" if not {"\\ell", "\\text{ℓ}"} & texs else "\\mathcal{L}"  # (ℓ a symbol too)


def dim_names(user_shapes: dict) -> set:
    """The names of the dimensions in the shapes of a question (a product a*b gives a and b)."""
    return {f for shape in user_shapes.values() for d in shape if isinstance(d, str) for f in d.split("*")}


class LatexPrinter(TextPrinter):
    """Expr -> LaTeX (juxtaposition for products, ∘ for Hadamard, ^\\top for transpose)."""

    def __init__(self, names: dict | None = None, dims: dict | None = None, taken=frozenset()):
        super().__init__(names, dims)
        self.taken = taken  # the names the question's symbols typeset as

    def dim(self, d) -> str:
        """A dimension's size as LaTeX: its name (a product, its factors side by side)."""
        return " ".join(tex_name(str(f)) for f in ir.dim_factors(d))

    def __call__(self, e: Expr) -> str:
        # a function whose LaTeX a symbol typesets as too (σ, the sigmoid, beside a symbol
        # sigma) is written out: sigmoid(x)
        self.symbol_tex = set(self.taken) | {tex_name(n.attr) for n in ir.walk(e) if n.op in ("sym", "delta")}
        return super().__call__(e)

    def wrap(self, e: Expr, limit: int, strict: bool = False) -> str:
        s, prec = self.p(e)
        return f"\\left({s}\\right)" if (prec <= limit if strict else prec < limit) else s

    def visit(self, e: Expr):
        if e in self.names:
            name = self.names[e]
            if isinstance(name, DiffName):
                return "\\mathrm{d}" + tex_name(name.base), ATOM
            if isinstance(name, RawTex):
                return str(name), ATOM
            return tex_name(name), ATOM
        op = e.op
        if op == "sym":
            return tex_name(e.attr), ATOM
        if op == "delta":
            return "\\mathrm{d}" + tex_name(e.attr), ATOM
        if op == "const":
            s = number_tex(abs(e.attr), self._pi_allowed) if abs(e.attr) != 0.5 else "\\tfrac{1}{2}"  # ½ and 1/3, as on paper
            prec = ATOM
            if e.shape != SCALAR and e.attr != 0.0:  # an array of c's: c times ones of its shape
                ones = ("\\mathbf{1}^{\\top}" if e.shape[0] == 1 else "\\mathbf{1}" if e.shape[1] == 1
                        else "\\mathbf{1}\\mathbf{1}^{\\top}")  # (a matrix: 1 1ᵀ, not a vector 1)
                prec = ATOM if e.shape[1] == 1 else POST  # (ending in ^⊤: bracketed before another ^)
                if abs(e.attr) != 1.0:
                    s, prec = f"{s}\\,{ones}", PROD
                else:
                    s = ones
            return ("-" + s if e.attr < 0 else s), (prec if e.attr >= 0 else NEG)
        if op == "eye":
            return "I", ATOM
        if op == "add":
            return self.terms(e), ADD
        if op == "mul":
            negative, pos = _neg_split(e, self.names, self.signs)
            fs = pos.args if pos.op == "mul" else (pos,)
            out = ""
            arrays = sum(f.shape != SCALAR for f in fs)
            for i, f in enumerate(fs):
                # juxtaposition binds tighter than ∘: (W^T(p - 1)) ∘ h needs its brackets, and a
                # number made by a product, (x^T A x) x, too
                tight = (f.op in ("matmul", "div") and arrays > 1 and f.shape != SCALAR
                         or f.op == "matmul" and f.shape == SCALAR and len(fs) > 1)
                s = self.wrap(f, PROD, strict=tight) if i == 0 else \
                    self.wrap(f, PROD, strict=tight or f.op not in ("matmul",))
                if i == 0:
                    out = s
                elif f.shape == SCALAR or fs[i - 1].shape == SCALAR:
                    out += " " + s
                else:
                    out += " \\circ " + s
            if negative:
                return _minus(out), (NEG if len(fs) == 1 else PROD)
            return out, PROD
        if op == "matmul":
            a, b = e.args
            return f"{self.wrap(a, PROD, strict=_hadamard(a))} {self.wrap(b, PROD, strict=True)}", PROD
        if op == "div":
            a, b = e.args
            if e.shape == SCALAR:
                return f"\\frac{{{self.p(a)[0]}}}{{{self.p(b)[0]}}}", ATOM
            return f"{self.wrap(a, PROD)} \\oslash {self.wrap(b, PROD, strict=True)}", PROD
        if op == "frob":
            a = _ones_side(e.args[0], self, " \\mathbf{1}")
            return f"{a or self.wrap(e.args[0], FROB)} : {self.wrap(e.args[1], FROB, strict=True)}", FROB
        if op == "pow":  # of an array: entrywise, A^{∘k} (A^{-1} and A^{2} would read as matrix powers)
            k = e.args[1]
            ks = number_tex(k.attr, self._pi_allowed) if k.op == "const" else self.p(k)[0]
            circ = "\\circ " if e.args[0].shape != SCALAR else ""
            return f"{{{self.wrap(e.args[0], ATOM)}}}^{{{circ}{ks}}}", POW
        if op == "T":
            a = e.args[0]
            if a.op == "inv":
                return f"{self.wrap(a.args[0], ATOM)}^{{-\\top}}", POST
            return f"{self.wrap(a, ATOM)}^{{\\top}}", POST
        if op == "dim":
            return self.dim(e.attr), ATOM
        spec = REGISTRY[op]
        if callable(spec.latex):
            return spec.latex(self, e)
        name = spec.latex or "\\operatorname{" + op.replace("_", "\\_") + "}"
        if name in self.symbol_tex:  # σ(x) beside a symbol σ: sigmoid(x)
            name = "\\operatorname{" + op.replace("_", "\\_") + "}"
        args = [self.p(a)[0] for a in e.args]
        if e.attr is not None and not isinstance(e.attr, tuple):
            args.append(str(e.attr))
        return f"{name}\\left({', '.join(args)}\\right)", ATOM


def _hadamard(e: Expr) -> bool:
    """A product with two or more array factors (printed with ∘)."""
    return (e.op == "mul" and sum(f.shape != SCALAR for f in e.args) > 1) or \
        (e.op == "div" and e.shape != SCALAR)


def to_latex(e: Expr, names: dict | None = None, dims: dict | None = None, taken=frozenset()) -> str:
    """The LaTeX of e; ``taken``: what the question's symbols typeset as (\\sigma for sigma)."""
    return LatexPrinter(names, dims, taken)(e)
