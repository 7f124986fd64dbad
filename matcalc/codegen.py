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
from .ops import REGISTRY

def _helper_blocks() -> tuple[dict, dict]:
    """name -> source, and name -> the helpers it calls, from the blocks of runtime.py
    (read as text: emitting code does not import NumPy)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent / "runtime.py").read_text(encoding="utf-8")
    sources, needs = {}, {}
    for part in re.split(r"^# helper: ", text, flags=re.M)[1:]:
        head, _, body = part.partition("\n")
        name, _, deps = head.partition(", needs:")
        sources[name.strip()] = body.strip("\n") + "\n"
        needs[name.strip()] = tuple(deps.split())
    return sources, needs


HELPERS, HELPER_NEEDS = _helper_blocks()


def helper_closure(names) -> list:
    """The helpers names call, with those they need in turn, sorted."""
    todo, out = list(names), set()
    while todo:
        h = todo.pop()
        if h not in out:
            out.add(h)
            todo.extend(HELPER_NEEDS.get(h, ()))
    return sorted(out)


FACTOR_OPS = ("inv", "solve", "logdet", "det")
BLAS_CALLS = (".dot(", "_chain(", "np.vdot(", "_outer(", "_inv(", "_lu(", "np.linalg.")


def factor_base(n: Expr) -> tuple:
    """The matrix B whose LU factors serve n (inv, solve, logdet or det of B or Bᵀ), and
    whether n uses Bᵀ."""
    m = n.args[0]
    return (m.args[0], True) if m.op == "T" else (m, False)


# np.<ufunc>(x, out=x) on a fresh matrix
IN_PLACE = tuple(op.name for op in REGISTRY.values() if op.in_place)
ARITH = ("add", "mul", "div")  # np.add(t, b, out=t) when t is a new matrix read nowhere else
FRESH_OPS = ("matmul", "chain", "add", "mul", "div", "pow") + IN_PLACE  # their code makes a new array

# (the modules the emitted code of any backend names: a variable called torch would hide torch)
RESERVED = set(keyword.kwlist) | set(keyword.softkwlist) | set(dir(builtins)) | {
    "np", "numpy", "torch", "jax", "jnp", "scipy", "math"}
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
        # one safe name per dimension, made together: np and np_ would both be np_ alone
        self.dim_py = sanitize(sorted({f for d in dim_source if isinstance(d, str)
                                       for f in ir.dim_factors(d) if isinstance(f, str)} | {
                                       d for d in dim_source if isinstance(d, str)}))
        self.lines: list[str] = []
        self.helpers: set = set()
        self.dims_needed: dict = {}
        self.reads = {k: f"{p}.shape[{axis}]" for k, (p, axis) in dim_source.items()}  # (size_code's)
        self.counter = 0
        self.temps: set = set()
        self.owned: set = set()  # temporaries holding a new array that this function made
        self.ones_of: dict = {}  # a size -> the temporary holding that many ones

    def new_temp(self) -> str:
        self.counter += 1
        return f"t{self.counter - 1}"

    def dim(self, d) -> str:
        if isinstance(d, int):
            return str(d)
        if d in self.dims_needed:
            return self.dims_needed[d][0]
        if "*" in d and d not in self.dim_source:  # a product: of its factors' sizes, or read whole
            if all(isinstance(f, int) or ir.size_expr(f, self.reads) is not None for f in ir.dim_factors(d)):
                return "(" + " * ".join(self.dim(f) for f in ir.dim_factors(d)) + ")"
            return size_code(d, self.reads)
        # (n only in C's n*p rows: C's rows // p)
        self.dims_needed[d] = (f"dim_{self.dim_py[d]}", size_code(d, self.reads))
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
        for n in reversed(order):  # Diag(h) is never built where it scales: each use reads h
            if n.op == "Diag":
                uses[n.args[0]] += uses.get(n, 0) - 1
        code: dict = {}
        depth: dict = {}
        self.code = code
        self.uses = uses
        # a step(z) whose every use is a factor of an array product may stay a boolean mask
        parents: dict = {}
        for n in order:
            for x in n.args:
                parents.setdefault(x, []).append(n)
        def float_partner(p, n):
            return any(f is not n and f.op not in ("step", "const") and f.shape == n.shape for f in p.args)

        # matrices with several of inv / solve / logdet / det: factorised once
        self.lu_users: dict = {}
        for n in order:
            if n.op in FACTOR_OPS:
                self.lu_users.setdefault(factor_base(n)[0], set()).add(n)
        self.lu_names: dict = {}
        self.spread = self.broadcasts(order, parents, outputs)
        self.bool_ok = {n: n.op == "step" and n not in outputs and all(
            p.op == "mul" and p.shape == n.shape and float_partner(p, n) for p in parents.get(n, []))
            for n in order}
        for n in order:
            if n.op == "outputs":
                continue
            s = self.node(n, [code[a] for a in n.args])
            d = 1 + max((depth[a] for a in n.args), default=0)
            if n.args and (uses.get(n, 0) > 1 or d > 12) and not s.isidentifier() and n.op != "Diag":
                self.temps.add(n)
                name = self.new_temp()
                self.lines.append(f"{name} = {s}")
                s, d = name, 0
            code[n], depth[n] = s, 0 if s.isidentifier() else d
        return [code[o] for o in outputs]

    @staticmethod
    def broadcasts(order, parents: dict, outputs) -> dict:
        """The vectors repeated into a matrix (v 1ᵀ, 1 vᵀ: optimize.broadcast_of) whose every
        use is a +, ∘ or ⊘ with a whole matrix, which the array module broadcasts: such a v 1ᵀ
        is never built (node -> side: 0, each column v; 1, each row vᵀ)."""
        from .optimize import broadcast_of

        spread = {}
        for n in order:
            b = broadcast_of(n)
            if b is not None and n not in outputs and all(
                    p.op in ("add", "mul", "div") and p.shape == n.shape for p in parents.get(n, [])):
                spread[n] = b[2]
        changed = True
        while changed:  # a use needs a whole matrix among its operands, or both sides spread
            changed = False
            for n in list(spread):
                for p in parents[n]:
                    whole = [a for a in p.args if a.shape == p.shape and a not in spread]
                    if not whole and len({spread[a] for a in p.args if a in spread}) < 2:
                        del spread[n]
                        changed = True
                        break
        return spread

    def negated(self, t: Expr):
        """The code of -t if t is a negated term (so a + (-1*b) prints as a - b), else None."""
        if t.op == "const" and t.shape == SCALAR and t.attr < 0:
            return num(-t.attr)
        if t.op == "mul" and t.args[0].op == "const" and t.args[0].attr < 0 and t not in self.temps:
            c = -t.args[0].attr
            rest = [self.code[f] for f in t.args[1:]]
            if c != 1.0:
                rest.insert(0, num(c))
            return rest[0] if len(rest) == 1 else "(" + " * ".join(rest) + ")"
        return None

    def single_factor(self, n: Expr, a: list):
        """inv of a matrix with no other factorised use: getri after getrf (or numpy.linalg.inv,
        as timed); None: the plain template."""
        if n.op != "inv":
            return None
        self.helpers.add("_lu")
        return f"_inv({a[0]})"

    def factored(self, n: Expr, a: list):
        """Code of inv / solve / logdet / det of a matrix, through one shared LU
        factorisation when the matrix has several such uses; None: the plain template."""
        base, transposed = factor_base(n)
        if len(self.lu_users[base]) < 2:
            return self.single_factor(n, a)
        if base not in self.lu_names:
            self.helpers.add("_lu")
            name = self.new_temp()
            self.lines.append(f"{name} = _lu({self.code[base]})")
            self.lu_names[base] = name
        lu = self.lu_names[base]
        if n.op == "inv":
            return f"_lu_inv({lu})" + (".T" if transposed else "")
        if n.op == "solve":
            return f"_lu_solve({lu}, {a[1]}" + (", True)" if transposed else ")")
        return f"_lu_logdet({lu})" if n.op == "logdet" else f"_lu_det({lu})"

    def node(self, n: Expr, a: list) -> str:
        op = n.op
        if op in FACTOR_OPS:
            s = self.factored(n, a)
            if s is not None:
                return s
        if op == "sym":
            return self.params[n.attr]
        if op == "const":
            v = num(float(n.attr))
            if n.shape == SCALAR:
                return v
            return f"np.full({self.shape_src(n.shape)}, {v})"
        if op == "eye":
            return f"np.eye({self.dim(n.shape[0])})"
        if op == "dim":
            return self.dim(n.attr)
        if op in ARITH and len(np_shape(n.shape)) == 2:
            s = self.in_place(n, a)
            if s is not None:
                return s
        if op in ("add", "mul", "div"):
            return self.arithmetic(n, a)
        if op == "pow":
            k = n.args[1]
            if k.op == "const":
                if k.attr == 2.0:
                    return f"np.square({a[0]})"
                if k.attr == 0.5:
                    return f"np.sqrt({a[0]})"
                if k.attr == -1.0:
                    return self.quotient(ir.const(1.0), n.args[0], "1.0", a[0])
                power = {3.0: "_cube", 4.0: "_fourth", -2.0: "_inv_square", -0.5: "_inv_sqrt"}.get(k.attr)
                if power is not None:  # (np.power takes 4-8 times as long)
                    self.helpers.add("_cube")  # (the block of the four)
                    return f"{power}({a[0]})"
            return f"np.power({a[0]}, {a[1]})"
        if op == "matmul":
            return self.matmul(n, a)
        if op == "T":
            return f"{a[0]}.T" if len(np_shape(n.shape)) == 2 else a[0]
        if op == "frob":
            x, y = n.args
            if y.op == "const" and x.op == "const":  # c1:d1 = c d (number of entries)
                dims = [self.dim(d) for d in np_shape(x.shape)]
                return "(" + " * ".join([num(float(x.attr * y.attr))] + dims) + ")"
            if y.op == "const" or x.op == "const":  # A:c1 = c sum(A)
                c, other = (y.attr, a[0]) if y.op == "const" else (x.attr, a[1])
                total = self.total(other, x.shape)
                return total if c == 1.0 else f"({c!r} * {total})"
            if x.shape == SCALAR:
                return f"({a[0]} * {a[1]})"
            if len(np_shape(x.shape)) == 1:  # the method is quicker than np.dot
                return f"{a[0]}.dot({a[1]})"
            return f"np.vdot({a[0]}, {a[1]})"
        if op in ("sum", "tr", "mean") and n.args[0].shape == SCALAR:
            return a[0]
        if op == "step" and self.bool_ok.get(n):
            return f"({a[0]} > 0.0)"  # a factor of a product: the boolean mask is enough
        if op in IN_PLACE and self.fresh_matrix(n.args[0], a[0]):
            # the argument is a new matrix used nowhere else: overwrite it, and spare an
            # allocation (for large arrays each new one costs page faults)
            name = self.own(a[0])
            self.lines.append(f"np.{REGISTRY[op].ufunc}({name}, out={name})")
            return name
        spec = REGISTRY[op]
        self.helpers.update(spec.helpers)
        if callable(spec.numpy):
            return spec.numpy(self, n, a)
        return spec.numpy.format(*a)

    np_shape = staticmethod(lambda shape: np_shape(shape))

    def full_shape(self, shape) -> str:
        """The IR shape as a 2-tuple of code, 1s included (for a reshape to 2-D)."""
        return f"({self.dim(shape[0])}, {self.dim(shape[1])})"

    mod = "np"  # the array module of the emitted code

    def as_2d(self, code: str, shape) -> str:
        return code if len(np_shape(shape)) == 2 else f"{self.mod}.reshape({code}, {self.full_shape(shape)})"

    def from_2d(self, code: str, shape) -> str:
        """A 2-D result back in the NumPy form of ``shape`` (1-D for a vector, a number for 1×1)."""
        k = len(np_shape(shape))
        return code if k == 2 else (f"{code}.reshape(-1)" if k == 1 else self.item0(code))

    def item0(self, code: str) -> str:
        """The one entry of a 1×1 (or length-1) array as a number."""
        return f"float({code}.reshape(-1)[0])"

    def count_src(self, shape) -> str:
        """The number of entries of an array of ``shape``, as code."""
        dims = [self.dim(d) for d in np_shape(shape)]
        return ("(" + " * ".join(dims) + ")" if len(dims) > 1 else dims[0]) if dims else "1"

    def matmul(self, n: Expr, a: list) -> str:
        """A product: a scaling, an outer product, a Diag product, or a matrix product (Aᵀv
        as vA: no transposed operand)."""
        x, y = n.args
        if n in self.spread:  # a repeated vector that the operation it meets broadcasts
            return f"{a[0]}[:, None]" if self.spread[n] == 0 else f"{a[1]}[None, :]"
        if x.shape[1] == 1:  # inner size 1: a scaling or an outer product
            if x.shape == SCALAR or y.shape == SCALAR:
                return f"({a[0]} * {a[1]})"
            return self.outer_code(a[0], a[1])
        scaled = self.diag_product(n, a)
        if scaled is not None:
            return scaled
        if x.op == "T" and len(np_shape(y.shape)) == 1 and (
                x not in self.temps or self.code[x.args[0]].isidentifier()):
            return self.product_code(a[1], self.code[x.args[0]])
        return self.product_code(a[0], a[1])

    def outer_code(self, u: str, v: str) -> str:
        self.helpers.add("_outer")
        return f"_outer({u}, {v})"

    def product_code(self, x: str, y: str) -> str:
        # the method: the same BLAS call as @, with a third of its overhead on small arrays
        return f"{x}.dot({y})"

    def diag_product(self, n: Expr, a: list):
        """Diag(h)@A scales rows, A@Diag(h) scales columns: Diag(h) is never built (None:
        no Diag factor)."""
        x, y = n.args
        if x.op == "Diag" and len(np_shape(y.shape)) == 2:
            return f"({self.code[x.args[0]]}[:, None] * {a[1]})"
        if y.op == "Diag" and len(np_shape(x.shape)) >= 1:
            return f"({a[0]} * {self.code[y.args[0]]})"
        if x.op == "Diag" and len(np_shape(y.shape)) == 1:
            return f"({self.code[x.args[0]]} * {a[1]})"
        return None

    def arithmetic(self, n: Expr, a: list) -> str:
        """+, ∘ and ⊘: the same code in every backend (Python's operators on arrays)."""
        op = n.op
        if op == "add":
            pairs = list(zip(n.args, a))
            first = next((i for i, (t, _) in enumerate(pairs) if self.negated(t) is None), 0)
            pairs.insert(0, pairs.pop(first))  # start with a positive term: b - a, not (-a) + b
            out = pairs[0][1]
            for t, code in pairs[1:]:
                neg = self.negated(t)
                out += f" - {neg}" if neg is not None else f" + {code}"
            return "(" + out + ")"
        if op == "mul":
            if n.args[0].op == "const" and n.args[0].attr == -1.0:
                rest = a[1:]
                return "(-" + (rest[0] if len(rest) == 1 else "(" + " * ".join(rest) + ")") + ")"
            return "(" + " * ".join(a) + ")"
        if op == "div":
            den = n.args[1]
            if den.op == "norm2":
                self.helpers.add("_over_norm")
                return f"_over_norm({a[0]}, {a[1]})"
            if den.op == "mul" and any(f.op == "norm2" for f in den.args):
                # a / (‖x‖ r) = (a / r) / ‖x‖, and 0 where ‖x‖ = 0 (as for a / ‖x‖)
                k = next(i for i, f in enumerate(den.args) if f.op == "norm2")
                rest = [self.code[f] for i, f in enumerate(den.args) if i != k]
                self.helpers.add("_over_norm")
                return f"_over_norm(({a[0]} / {' / '.join(rest)}), {self.code[den.args[k]]})"
            return self.quotient(n.args[0], den, a[0], a[1])

    safe_quotient = True  # Python numbers divide through _div (the frameworks' scalars are arrays)

    def quotient(self, num: Expr, den: Expr, a: str, b: str) -> str:
        """The code of a / b: of two Python numbers through _div, which gives NumPy's inf or
        nan where b is 0 (Python raises ZeroDivisionError)."""
        if self.safe_quotient and python_number(num) and python_number(den):
            self.helpers.add("_div")
            return f"_div({a}, {b})"
        return f"({a} / {b})"

    def total(self, code: str, shape) -> str:
        """The sum of an array's entries, as dot products with ones."""
        dims = [self.dim(d) for d in np_shape(shape)]
        if not dims:
            return code
        self.helpers.add("_ones")
        if len(dims) == 1:
            return f"{code}.dot({self.ones(dims[0])})"
        return f"{self.ones(dims[0])}.dot({code}).dot({self.ones(dims[1])})"

    def ones(self, d: str) -> str:
        """A temporary holding _ones(d), assigned where first needed (a function may sum
        several arrays of one size: λ's terms in value_and_grad)."""
        name = self.ones_of.get(d)
        if name is None:
            name = self.ones_of[d] = self.new_temp()
            self.lines.append(f"{name} = _ones({d})")
        return name

    def fresh_matrix(self, arg: Expr, code: str) -> bool:
        """arg is computed here into a new float matrix that nothing else reads."""
        if len(np_shape(arg.shape)) != 2 or self.uses.get(arg, 0) != 1 or arg in self.spread:
            return False
        return code in self.owned or (not code.isidentifier() and arg.op in FRESH_OPS)

    def own(self, code: str) -> str:
        """A temporary holding the new array code makes (code itself if it is one)."""
        if code in self.owned:
            return code
        name = self.new_temp()
        self.lines.append(f"{name} = {code}")
        self.owned.add(name)
        return name

    def in_place(self, n: Expr, a: list):
        """A matrix sum, product or quotient computed into the new matrix one of its first two
        operands is, when nothing else reads that one: ``np.add(t, b, out=t)``.  The operations
        and their order are those of the plain form ``(t + b + …)``, so are the numbers; an
        allocation (and, for a large array, its page faults) is spared.  None: no such operand."""
        ops = []  # (ufunc, code, IR node whose array the code is, or None)
        if n.op == "add":
            pairs = list(zip(n.args, a))
            first = next((i for i, (t, _) in enumerate(pairs) if self.negated(t) is None), 0)
            pairs.insert(0, pairs.pop(first))  # as the plain form: a positive term first
            for t, code in pairs:
                neg = self.negated(t)
                if neg is None:
                    ops.append(("add", code, t))
                elif (t.op == "mul" and len(t.args) == 2 and t.args[0].attr == -1.0
                      and self.uses.get(t, 0) == 1):
                    ops.append(("subtract", neg, t.args[1]))  # - X: X's own array
                else:
                    ops.append(("subtract", neg, None))
        elif n.op == "mul":
            if n.args[0].op == "const" and n.args[0].attr == -1.0 or any(f.op == "norm2" for f in n.args):
                return None  # (a norm in a denominator is divided out of the factors' own code)
            ops = [("multiply", code, t) for t, code in zip(n.args, a)]
        else:  # div
            if n.args[1].op == "norm2" or (n.args[1].op == "mul" and any(f.op == "norm2" for f in n.args[1].args)):
                return None
            ops = [("divide", a[0], n.args[0]), ("divide", a[1], n.args[1])]
        if ops[0][0] == "subtract":
            return None
        shape = np_shape(n.shape)
        k = next((i for i in (0, 1) if ops[i][2] is not None and np_shape(ops[i][2].shape) == shape
                  and self.fresh_matrix(ops[i][2], ops[i][1])), None)
        if k is None:
            return None
        self.temps.add(n)  # its code is a name now: a - (c∘X) reads it, not X's (changed) array
        name = self.own(ops[k][1])
        first = [ops[0][1], ops[1][1]]
        first[k] = name
        self.lines.append(f"np.{ops[1][0]}({first[0]}, {first[1]}, out={name})")
        for ufunc, code, _ in ops[2:]:
            self.lines.append(f"np.{ufunc}({name}, {code}, out={name})")
        return name


def function_source(fname: str, outputs: list[Expr], param_names: list[str], syms: dict,
                    doc: str = "", returns=None, optimized: bool = False, declared: dict | None = None,
                    shaped_like: list | None = None, positional: str | None = None) -> tuple[str, dict]:
    """Source of ``def fname(*, <params>)`` returning the outputs (a tuple if several).

    ``syms`` maps user names to their sym nodes; returns (source, user name -> python name).
    ``optimized``: the outputs already went through ``optimize`` (api runs its passes itself).
    ``declared``: the declared shapes (user name -> () / (n,) / (m, n)); an argument declared
    with a size-1 dimension is then taken in its declared shape or squeezed, and
    ``shaped_like[i]`` (a user name or None) gives output i that argument's shape as given.
    ``positional``: a parameter the caller passes by position (a tangent), which the choice
    of BLAS threads never reads."""
    params = sanitize(param_names)
    dim_source = {}
    for name in param_names:
        shape = np_shape(syms[name].shape)
        for axis, d in enumerate(shape):
            if isinstance(d, str):
                dim_source.setdefault(d, (params[name], axis))
    from .optimize import optimize

    em = Emitter(params, dim_source)
    outputs = list(outputs) if optimized else optimize(list(outputs))
    results = em.emit(outputs)
    results = [f"np.array({r})" if copy else f"float({r})" if host_number(o) and o.op != "const" else r
               for r, o, copy in zip(results, outputs, shared(outputs, em.code))]
    head = [f"def {fname}(*, {', '.join(params[p] for p in param_names)}):"]
    if doc:
        safe = not any(ch in doc for ch in "\\\"'\n")
        head.append('    """' + doc + '"""' if safe else "    " + repr(doc))
    body = ["    " + line for line in em.lines]
    unit, given = unit_params(param_names, declared, shaped_like)
    if given:  # each such gradient takes its argument's shape as given
        results = [f"np.reshape({r}, _shape_{params[n]})" if n in given else r
                   for r, n in zip(results, shaped_like)]
    ret = results[0] if len(results) == 1 else "(" + ", ".join(results) + ")"
    if returns is not None:
        ret = returns(results)
    body.append(f"    return {ret}")
    text = "\n".join(body)
    dims = dim_lines(em, text)
    used = text + "\n".join(dims)
    head.extend(f"    _shape_{params[n]} = np.shape({params[n]})" for n in given)
    head.extend(entry_conversions([p for p in param_names if re.search(rf"\b{params[p]}\b", used)],
                                  params, syms, unit))
    head.extend(dims)
    wrap = ""
    if any(call in text for call in BLAS_CALLS):  # BLAS on one thread or all, as measured
        covered, keys = set(), []
        for name in param_names:
            named = {d for d in np_shape(syms[name].shape) if isinstance(d, str)}
            if named - covered and name != positional:
                covered |= named
                keys.append(params[name])
        if keys:
            em.helpers.add("_blas_threads")
            wrap = f"\n\n\n{fname} = _blas_threads({fname}, ({', '.join(map(repr, keys))},))\n"
    helpers = "".join(HELPERS[h] + "\n\n" for h in helper_closure(em.helpers))
    return helpers + "\n".join(head + body) + "\n" + wrap, params


def dim_lines(em, text: str) -> list:
    """The lines reading the sizes that ``text`` uses (a size nothing uses is never read: a
    summed array of ones is never built)."""
    return [f"    {dname} = {read}" for dname, read in em.dims_needed.values() if re.search(rf"\b{dname}\b", text)]


def size_code(d, reads: dict) -> str:
    """The code reading the size d from the arguments' shapes (ir.size_expr), or a refusal."""
    code = ir.size_expr(d, reads)
    if code is None:
        from .errors import DeriveError

        raise DeriveError(f"the size {d} cannot be read from the arguments' shapes (only products that hold it "
                          "can): declare the shapes with it (shapes= or --shape)")
    return code


def host_number(n: Expr) -> bool:
    """n's code is a Python number: a constant, a dimension (an int read from a shape), or
    sums, products, quotients and powers of those."""
    if n.shape != SCALAR:
        return False
    if n.op in ("const", "dim"):
        return True
    return n.op in ("add", "mul", "div", "pow") and all(host_number(a) for a in n.args)


def python_number(n: Expr) -> bool:
    """n's NumPy code may be a Python number at run time (a float or an int, not NumPy's
    float64): host_number's, a scalar argument (read with float()), and their sums,
    products, quotients and reciprocals."""
    if n.shape != SCALAR:
        return False
    if n.op in ("const", "dim", "sym"):
        return True
    if n.op == "pow":
        k = n.args[1]
        return k.op == "const" and k.attr == -1.0 and python_number(n.args[0])
    return n.op in ("add", "mul", "div", "frob", "sum", "tr", "mean", "T") and all(
        python_number(a) for a in n.args)


def shared(outputs: list, code: dict, scalars: bool = False) -> list:
    """For each output, whether its value may be an argument or a view of one (x itself, Aᵀ,
    diag(X)), or an array an earlier output also is or views (a temporary, named in
    ``code``, the emitter's code of each node): such a result is returned as a copy, so
    that changing a gradient in place changes neither an input nor another result.
    ``scalars``: a scalar is an array too (torch's 0-d tensors; NumPy's code gives floats)."""
    seen, out = set(), []
    for o in outputs:
        base = o
        while REGISTRY[base.op].view:
            base = base.args[0]
        out.append((o.shape != SCALAR or scalars and not host_number(o))
                   and (base.op == "sym" or base in seen and code[base].isidentifier()))
        seen.add(base)
    return out


def num(v: float) -> str:
    """A float as Python source; an overflow folded to ±inf is np.inf (inf is no name)."""
    if v != v:
        return "np.nan"
    if v in (float("inf"), float("-inf")):
        return "np.inf" if v > 0 else "(-np.inf)"
    return repr(v)


def unit_params(param_names, declared: dict | None, shaped_like) -> tuple:
    """(the parameters declared with a size-1 dimension, those of them whose shape as given
    an output takes): see ``function_source``."""
    unit = {n for n in param_names if declared and 1 in declared.get(n, ())}
    return unit, [n for n in dict.fromkeys(shaped_like or ()) if n in unit]


def entry_conversions(param_names, params: dict, syms: dict, unit=()) -> list[str]:
    """The first lines of an emitted function: every argument as float64, so integer arrays,
    lists and ints work too (the in-place updates and BLAS calls need floats).  An argument
    declared with a size-1 dimension (in ``unit``) is squeezed as the code computes it:
    a column (n, 1) or row (1, n) to a 1-D array, a (1,) or (1, 1) to a float."""
    lines = []
    for name in param_names:
        p = params[name]
        if syms[name].shape == (1, 1):
            lines.append(f"    {p} = float(np.reshape({p}, ()))" if name in unit else f"    {p} = float({p})")
        elif name in unit:
            lines.append(f"    {p} = np.asarray({p}, float).reshape(-1)")
        else:
            lines.append(f"    {p} = np.asarray({p}, float)")
    return lines


def module_source(functions: list[str]) -> str:
    """A complete importable module with the given function sources."""
    seen, parts = set(), []
    for src in functions:
        for block in src.split("\n\n\n"):
            if block.strip() and block not in seen:
                seen.add(block)
                parts.append(block.strip("\n"))
    return "import numpy as np\n\n\n" + "\n\n\n".join(parts) + "\n"


def compile_function(source: str, fname: str, fixed_forms: bool = False):
    """Compile emitted source (generated by matcalc, never user text) into a function.
    ``fixed_forms``: every operation that picks among equal forms by timing (_pick) takes its
    first, untimed, so the results are the same to the last bit on every run (the check; and
    every function where the environment variable MATCALC_FIXED_FORMS is set, not to 0)."""
    import os

    fixed_forms = fixed_forms or os.environ.get("MATCALC_FIXED_FORMS", "").strip().lower() not in (
        "", "0", "false", "no", "off")
    namespace: dict = {}
    import numpy as np

    namespace["np"] = np
    code = compile(source, f"<matcalc:{fname}>", "exec")
    exec(code, namespace)  # noqa: S102 - the source is matcalc's own output
    if fixed_forms and "_TIMED_SHAPES" in namespace:
        namespace["_TIMED_SHAPES"] = 0
    return namespace[fname]
