"""Code emission: IR -> the source of a standalone NumPy function.

Vectors are 1-D arrays (a row vector too), matrices 2-D, scalars floats.  Every
node used more than once is computed once into a temporary (the IR is a DAG);
names coming from the user are sanitised so ``lambda``, ``np`` or ``sum`` are
fine symbol names.  The source is deterministic: same input, same bytes.
"""
from __future__ import annotations

import builtins
import keyword
import re
import unicodedata

from . import ir
from .ir import SCALAR, Expr

HELPERS = {
    "_sigmoid": '''def _sigmoid(z):
    return np.exp(-np.logaddexp(0.0, -z))
''',
    "_logsumexp": '''def _logsumexp(z):
    m = np.max(z)
    return m + np.log(np.sum(np.exp(z - m)))
''',
    "_over_norm": '''def _over_norm(a, n):
    # a / ‖x‖, and 0 where ‖x‖ = 0: the least-norm subgradient of ‖x‖ there
    return a / n if n > 0 else 0.0 * a
''',
    "_norm2": '''def _norm2(x):
    n = np.linalg.norm(x)
    if 0.0 < n < np.inf:
        return n
    m = np.max(np.abs(x))  # the sum of squares under- or overflowed: scale first
    return m * np.linalg.norm(x / m) if 0.0 < m < np.inf else n
''',
    "_softmax": '''def _softmax(z):
    e = np.exp(z - np.max(z))
    return e / np.sum(e)
''',
}

# elementwise and reduction templates: op -> format string of one argument
TEMPLATES = {
    "exp": "np.exp({})", "log": "np.log({})", "sqrt": "np.sqrt({})", "sin": "np.sin({})",
    "cos": "np.cos({})", "tanh": "np.tanh({})", "sigmoid": "_sigmoid({})",
    "relu": "np.maximum({}, 0.0)", "step": "np.heaviside({}, 0.0)", "abs": "np.abs({})",
    "sign": "np.sign({})", "softplus": "np.logaddexp(0.0, {})",
    "sum": "np.sum({})", "tr": "np.trace({})", "det": "np.linalg.det({})",
    "logdet": "np.linalg.slogdet({})[1]", "inv": "np.linalg.inv({})", "diag": "np.diag({})",
    "Diag": "np.diag({})", "norm2": "_norm2({})", "norm1": "np.sum(np.abs({}))",
    "logsumexp": "_logsumexp({})", "softmax": "_softmax({})",
}

RESERVED = set(keyword.kwlist) | set(keyword.softkwlist) | set(dir(builtins)) | {"np", "numpy"}
_TEMP = re.compile(r"^(t\d+|_.*|[a-z]*dim_.*)$")


def sanitize(names) -> dict:
    """user name -> a safe, unique Python identifier."""
    out, used = {}, set()
    for name in names:
        s = unicodedata.normalize("NFKC", name)
        if not s.isascii():
            from .printing import _UNICODE_GREEK

            s = "".join(_UNICODE_GREEK.get(ch, ch if ch.isascii() else f"u{ord(ch):x}") for ch in s)
        s = re.sub(r"\W", "_", s)
        if not s or s[0].isdigit():
            s = "v_" + s
        if s in RESERVED or _TEMP.match(s):
            s = s + "_"
        while s in used:
            s = s + "_"
        used.add(s)
        out[name] = s
    return out


def np_shape(shape) -> tuple:
    """The NumPy shape of an IR shape: literal-1 dimensions are squeezed away."""
    return tuple(d for d in shape if d != 1)


class Emitter:
    def __init__(self, params: dict, dim_source: dict):
        self.params = params          # user name -> python name
        self.dim_source = dim_source  # dim name -> (python param name, axis)
        self.lines: list[str] = []
        self.helpers: set = set()
        self.dims_needed: dict = {}
        self.counter = 0
        self.temps: set = set()

    def dim(self, d) -> str:
        if isinstance(d, int):
            return str(d)
        if d not in self.dims_needed:
            pname, axis = self.dim_source[d]
            self.dims_needed[d] = (f"dim_{sanitize([d])[d]}", pname, axis)
        return self.dims_needed[d][0]

    def shape_src(self, shape) -> str:
        dims = [self.dim(d) for d in np_shape(shape)]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"

    def emit(self, outputs: list[Expr]):
        """Lines computing every output; returns the expression strings of the outputs."""
        uses: dict = {}
        order = ir.walk(Expr("outputs", tuple(outputs), None, SCALAR) if len(outputs) > 1 else outputs[0])
        for n in order:
            for a in n.args:
                uses[a] = uses.get(a, 0) + 1
        code: dict = {}
        depth: dict = {}
        self.code = code
        # a step(z) whose every use is a factor of an array product may stay a boolean mask
        parents: dict = {}
        for n in order:
            for x in n.args:
                parents.setdefault(x, []).append(n)
        def float_partner(p, n):
            return any(f is not n and f.op not in ("step", "const") and f.shape == n.shape for f in p.args)

        self.bool_ok = {n: n.op == "step" and n not in outputs and all(
            p.op == "mul" and p.shape == n.shape and float_partner(p, n) for p in parents.get(n, []))
            for n in order}
        for n in order:
            if n.op == "outputs":
                continue
            s = self.node(n, [code[a] for a in n.args])
            d = 1 + max((depth[a] for a in n.args), default=0)
            if n.args and (uses.get(n, 0) > 1 or d > 12) and not s.isidentifier():
                self.temps.add(n)
                name = f"t{self.counter}"
                self.counter += 1
                self.lines.append(f"{name} = {s}")
                s, d = name, 0
            code[n], depth[n] = s, d
        return [code[o] for o in outputs]

    def negated(self, t: Expr):
        """The code of -t if t is a negated term (so a + (-1*b) prints as a - b), else None."""
        if t.op == "const" and t.shape == SCALAR and t.attr < 0:
            return repr(-t.attr)
        if t.op == "mul" and t.args[0].op == "const" and t.args[0].attr < 0 and t not in self.temps:
            c = -t.args[0].attr
            rest = [self.code[f] for f in t.args[1:]]
            if c != 1.0:
                rest.insert(0, repr(c))
            return rest[0] if len(rest) == 1 else "(" + " * ".join(rest) + ")"
        return None

    def node(self, n: Expr, a: list) -> str:
        op = n.op
        if op == "sym":
            return self.params[n.attr]
        if op == "const":
            v = repr(float(n.attr))
            if n.shape == SCALAR:
                return v
            return f"np.full({self.shape_src(n.shape)}, {v})"
        if op == "eye":
            return f"np.eye({self.dim(n.shape[0])})"
        if op == "add":
            out = a[0]
            for t, code in zip(n.args[1:], a[1:]):
                neg = self.negated(t)
                out += f" - {neg}" if neg is not None else f" + {code}"
            return "(" + out + ")"
        if op == "mul":
            if n.args[0].op == "const" and n.args[0].attr == -1.0:
                rest = a[1:]
                return "(-" + (rest[0] if len(rest) == 1 else "(" + " * ".join(rest) + ")") + ")"
            return "(" + " * ".join(a) + ")"
        if op == "solve":
            return f"np.linalg.solve({a[0]}, {a[1]})"
        if op == "div":
            if n.args[1].op == "norm2":
                self.helpers.add("_over_norm")
                return f"_over_norm({a[0]}, {a[1]})"
            return f"({a[0]} / {a[1]})"
        if op == "pow":
            k = n.args[1]
            if k.op == "const":
                if k.attr == 2.0:
                    return f"np.square({a[0]})"
                if k.attr == 0.5:
                    return f"np.sqrt({a[0]})"
                if k.attr == -1.0:
                    return f"(1.0 / {a[0]})"
            return f"np.power({a[0]}, {a[1]})"
        if op == "matmul":
            x, y = n.args
            if x.shape[1] == 1:  # inner size 1: a scaling or an outer product
                if x.shape == SCALAR or y.shape == SCALAR:
                    return f"({a[0]} * {a[1]})"
                return f"np.outer({a[0]}, {a[1]})"
            # Diag(h)@A scales rows, A@Diag(h) scales columns: never build Diag(h)
            if x.op == "Diag" and len(np_shape(y.shape)) == 2:
                return f"({self.code[x.args[0]]}[:, None] * {a[1]})"
            if y.op == "Diag" and len(np_shape(x.shape)) >= 1:
                return f"({a[0]} * {self.code[y.args[0]]})"
            if x.op == "Diag" and len(np_shape(y.shape)) == 1:
                return f"({self.code[x.args[0]]} * {a[1]})"
            return f"({a[0]} @ {a[1]})"
        if op == "T":
            return f"{a[0]}.T" if len(np_shape(n.shape)) == 2 else a[0]
        if op == "frob":
            x, y = n.args
            if y.op == "const" or x.op == "const":  # A:c1 = c sum(A)
                c, other = (y.attr, a[0]) if y.op == "const" else (x.attr, a[1])
                return f"np.sum({other})" if c == 1.0 else f"({c!r} * np.sum({other}))"
            if x.shape == SCALAR:
                return f"({a[0]} * {a[1]})"
            if len(np_shape(x.shape)) == 1:
                return f"({a[0]} @ {a[1]})"
            return f"np.vdot({a[0]}, {a[1]})"
        if op in ("sum", "tr") and n.args[0].shape == SCALAR:
            return a[0]
        if op == "step" and self.bool_ok.get(n):
            return f"({a[0]} > 0.0)"  # a factor of a product: the boolean mask is enough
        tpl = TEMPLATES[op]
        if tpl.startswith("_"):
            self.helpers.add(tpl.split("(")[0])
        return tpl.format(a[0])


def function_source(fname: str, outputs: list[Expr], param_names: list[str], syms: dict,
                    doc: str = "", returns=None) -> tuple[str, dict]:
    """Source of ``def fname(*, <params>)`` returning the outputs (a tuple if several).

    ``syms`` maps user names to their sym nodes; returns (source, user name -> python name)."""
    params = sanitize(param_names)
    dim_source = {}
    for name in param_names:
        shape = np_shape(syms[name].shape)
        for axis, d in enumerate(shape):
            if isinstance(d, str):
                dim_source.setdefault(d, (params[name], axis))
    from .optimize import optimize

    em = Emitter(params, dim_source)
    results = em.emit(optimize(list(outputs)))
    head = [f"def {fname}(*, {', '.join(params[p] for p in param_names)}):"]
    if doc:
        safe = not any(ch in doc for ch in "\\\"'\n")
        head.append('    """' + doc + '"""' if safe else "    " + repr(doc))
    for dname, pname, axis in em.dims_needed.values():
        head.append(f"    {dname} = np.shape({pname})[{axis}]")
    body = ["    " + line for line in em.lines]
    ret = results[0] if len(results) == 1 else "(" + ", ".join(results) + ")"
    if returns is not None:
        ret = returns(results)
    body.append(f"    return {ret}")
    helpers = "".join(HELPERS[h] + "\n\n" for h in sorted(em.helpers))
    return helpers + "\n".join(head + body) + "\n", params


def module_source(functions: list[str]) -> str:
    """A complete importable module with the given function sources."""
    seen, parts = set(), []
    for src in functions:
        for block in src.split("\n\n\n"):
            if block.strip() and block not in seen:
                seen.add(block)
                parts.append(block.strip("\n"))
    return "import numpy as np\n\n\n" + "\n\n\n".join(parts) + "\n"


def compile_function(source: str, fname: str):
    """Compile emitted source (generated by matcalc, never user text) into a function."""
    namespace: dict = {}
    import numpy as np

    namespace["np"] = np
    code = compile(source, f"<matcalc:{fname}>", "exec")
    exec(code, namespace)  # noqa: S102 - the source is matcalc's own output
    return namespace[fname]
