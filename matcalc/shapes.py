"""Shapes: naming defaults, declarations, unification of symbolic dimensions, and
the typed IR built from the syntax tree.

Every value is (rows, cols): a scalar is (1, 1), a vector (n, 1), its transpose
(1, n).  Dimensions are ints, names the user declared, or variables that
unification binds; variables left free are named a, b, c, … in order of first
appearance.  A dimension that belongs to a symbol never becomes 1: a vector is
never silently a scalar.
"""
from __future__ import annotations

import difflib
import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Callable

from . import ir, ops
from .errors import DeriveError, ParseError, ShapeError
from .parse import SPELLED as _SPELLED, Node

GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta",
         "vartheta", "iota", "kappa", "varkappa", "lambda", "mu", "nu", "xi", "omicron", "pi", "varpi", "rho",
         "varrho", "sigma", "varsigma", "tau", "upsilon", "phi", "varphi", "chi", "psi", "omega", "digamma"}
GREEK_SYMBOLS = "ϐϑϕϖϰϱϵϝ"  # the lower-case letters' other glyphs (ϵ is LaTeX's \epsilon)


# Greek names that stand for a number added to an array (var + ε, a margin α), never
# noted there; mu, beta, theta, … may be meant as vectors (x - mu)
CONSTANT_NAMES = {"epsilon", "varepsilon", "ε", "ϵ", "delta", "δ", "tau", "τ", "eta", "η", "alpha", "α",
                  "lambda", "λ", "kappa", "κ"}


def _stem(name: str) -> str:
    """A name without its trailing digits and underscores (epsilon_1, alpha2: epsilon, alpha)."""
    return re.sub(r"[\d_]+$", "", name) or name


def greek(name: str) -> bool:
    """A Greek name: alpha, lambda2, sigma_1, α, ϵ (a number by SPEC §2)."""
    first = name[0]
    return (re.sub(r"[\d_]+$", "", name) or name) in GREEK or "\u03b1" <= first <= "\u03c9" \
        or first in GREEK_SYMBOLS

_USER = ops.user_functions()
FUNCTIONS = set(_USER)
ALIASES = {alias: op.name for alias, op in _USER.items() if alias != op.name}
IDENTITY_NAMES = ("I", "eye")
PI_NAMES = ("pi", "π")  # the number unless declared or defined
SIZED = {"ones": 0, "eye": 0, "unvec": 1}  # calls whose arguments from this one on are sizes

def _is_name(s: str) -> bool:
    """A name as the grammar reads one (n, d_in, λ; not ³, ① or xᵀ): dimensions and definitions."""
    return s.isidentifier() and not any(c in "ᵀ¹²³" or "\u2070" <= c <= "\u209f" for c in s)


MAX_DIM = 10 ** 6


def default_kind(name: str) -> int:
    """0 scalar, 1 vector, 2 matrix, from the spelling of a name (SPEC §2)."""
    if greek(name):
        return 0
    return 2 if name[0].isupper() else 1


class Var:
    """A dimension variable, bound by unification."""

    __slots__ = ("name", "serial")

    def __init__(self, name, serial):
        self.name, self.serial = name, serial

    def __repr__(self):
        return self.name


class Prod:
    """A product of dimensions (the size of vec(X) or kron(A, B)) with unknown factors."""

    __slots__ = ("factors",)

    def __init__(self, factors):
        self.factors = tuple(factors)

    def __repr__(self):
        return "*".join(str(f) for f in self.factors)


def _letters():
    import itertools
    import string

    for n in itertools.count(1):
        for t in itertools.product(string.ascii_lowercase, repeat=n):
            yield "".join(t)


def parse_declaration(name: str, spec) -> tuple:
    """A declared shape: (), ("n",), ("m", "n"), ints allowed; "scalar" means ()."""
    if not isinstance(name, str):
        raise ShapeError(f"shapes are declared by symbol name (a str), got the key {name!r}")
    if isinstance(spec, str):
        s = spec.strip()
        if s.lower() in ("", "scalar", "()"):
            return ()
        spec = [p.strip() for p in s.strip("()").split(",") if p.strip()]
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):  # (NumPy's integers too)
        spec = (spec,)
    if hasattr(spec, "shape") and hasattr(spec, "dtype") and (len(spec.shape) != 1 or spec.dtype.kind not in "iuUS"):
        # (the array itself, not its shape; an array of sizes or names is one)
        example = "('n', 'm')" if len(spec.shape) == 2 else "('n',)" if len(spec.shape) == 1 else "()"
        raise ShapeError(f"the shape of {name} is given as an array of numbers: give its shape ({name}.shape) or "
                         f"dimension names, shapes={{'{name}': {example}}}")
    try:
        spec = tuple(spec)
    except TypeError:
        raise ShapeError(f"the shape of {name} must be a tuple of dimensions, got {spec!r}") from None
    if len(spec) == 1 and isinstance(spec[0], str) and spec[0].strip().lower() == "scalar":  # ("scalar",)
        return ()
    if len(spec) == 1 and isinstance(spec[0], str) and spec[0].strip().lower() in KINDS:
        raise ShapeError(f"the shape of {name} is given as {spec[0].strip()!r}: give its dimensions, names or sizes "
                         f"(like {name}=n,m on the command line, shapes={{'{name}': ('n', 'm')}} in Python; a vector "
                         f"{name}=n, a scalar {name}=scalar)")
    if len(spec) > 2:
        raise ShapeError(f"{name} is declared with {len(spec)} dimensions; matcalc handles scalars, "
                         "vectors and matrices (at most 2)")
    dims = []
    for d in spec:
        if isinstance(d, bool):
            raise ShapeError(f"bad dimension {d!r} in the shape of {name}")
        if isinstance(d, numbers.Integral) or (isinstance(d, str) and re.fullmatch(r"[-+]?[0-9]+", d.strip())):
            d = int(d)
            if d < 1 or d > MAX_DIM:
                raise ShapeError(f"dimension {d} in the shape of {name} must be between 1 and {MAX_DIM}")
            dims.append(d)
        elif isinstance(d, str) and _is_name(d.strip()):
            dims.append(d.strip())
        elif isinstance(d, str) and "*" in d and all(_is_name(f.strip()) or f.strip().isascii() and f.strip().isdigit()
                                                     for f in d.split("*")):
            out = 1  # a product of dimensions, as vec and kron make: "a*b"
            for f in d.split("*"):
                out = ir.dim_mul(out, f.strip() if _is_name(f.strip()) else int(f))
            dims.append(out)
        else:
            raise ShapeError(f"bad dimension {d!r} in the shape of {name}: use a name like n or an int")
    return tuple(dims)


KINDS = ("matrix", "vector", "column", "row", "array")  # what a shape is, where its dimensions were meant


def _walk(node: Node):
    """node and every node under it (iteratively)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


@dataclass
class Typed:
    """The result of typing an expression."""

    expr: ir.Expr                 # the typed IR of the whole expression
    symbols: dict                 # name -> ir.Expr (sym node) in order of appearance
    user_shapes: dict             # name -> () / (n,) / (m, n) in the user's dims
    source: str
    definitions: dict = None      # defined name -> ir.Expr of its value
    notes: list = None            # NotationWarnings: accepted, but probably not what was meant
    # name -> (expr, definitions, y): the IR again with the definition of name as a symbol y of
    # its shape where the text writes name (a literal copy of its value stays the value)
    with_symbol: Callable = field(default=None, repr=False, compare=False)
    unused: list = field(default_factory=list)  # symbols only in definitions the expression does not use
    spread: dict = field(default_factory=dict)  # name -> (note on NumPy's broadcast, start, end): column_note
    sizes: tuple = ()             # names read as the sizes their declared dimensions have (typecheck's sizes)
    held: tuple = ()              # defined names made symbols of their own, their inputs held fixed
    numbers: dict = field(default_factory=dict)  # undeclared name -> why it is a number (its Greek name)


# names that usually stand for a number (a step size, a tolerance), vectors by their spelling:
# a note says how to declare them numbers
COUNT_NAMES = frozenset({"n", "m", "k", "d", "N_", "num", "count", "batch", "bs"})  # a divisor by these is a
# count more often than a vector (g/n, sqrt(d)): noted there
NUMBER_LIKE_NAMES = frozenset({"eps", "lr", "reg", "lam", "lmbda", "tol", "temp", "temperature", "wd",
                               "decay", "momentum", "margin", "scale", "coef", "const", "rate", "step_size",
                               "ell", "ℓ", "ls", "lengthscale", "length_scale", "bandwidth", "sf2", "sn2",
                               "noise", "variance", "amplitude", "dk", "d_k", "d_model"})


class _Typer:
    allow_one = False  # may unification make a dimension 1 (only in A:B, see frob)
    power_notes_due = True  # X**k of a matrix is noted as entrywise (not where the syntax spells it .^)

    def __init__(self, source: str, declared: dict):
        self.source = source
        self.parent: dict = {}
        self.serial = 0
        self.declared = {k: parse_declaration(k, v) for k, v in (declared or {}).items()}
        self.user_dim_names = {f for s in self.declared.values() for d in s if isinstance(d, str)
                               for f in ir.dim_factors(d) if isinstance(f, str)}
        self._names = (n for n in _letters() if n not in self.user_dim_names)
        self.sym_shape: dict = {}     # name -> (r, c) terms
        self.sym_kind: dict = {}
        self.eyes: list = []          # (node, var) to check they got a size
        self.identity_noted: set = set()  # I, eye with a declared shape (noted once)
        self.eye_home: dict = {}      # id(node) of an identity in a definition -> (its root, text, name)
        self.shape: dict = {}         # id(ast node) -> (r, c)
        self.special: dict = {}       # id(ast node) -> 'inner' | 'vecmat' | 'ones'
        self.greek_noted: set = set()  # Greek names already noted as numbers added to arrays
        self.diag_args: set = set()   # names that are Diag's argument (Diag(psi)): vectors, even Greek
        self.diag_name = "Diag"       # (MATLAB's diag of a vector)
        self.power_noted: set = set()  # X**k (as typed) noted as entrywise inside a trace or a det
        self.quotient_noted: dict = {}  # id(a/b) -> its note, where a/b@c is (a/b)@c
        self.renamed: dict = {}       # id(call) -> the function it is: norm(x, 1) is norm1(x)
        self.size_names: set = set()  # id(name) of a declared dimension as a size: ones(n), eye(n)
        self.value_dims: set = set()  # declared dimensions' names read as their sizes (typecheck's sizes)
        self.sized: list = []         # those of them met
        self.spread: dict = {}  # an undeclared vector spread over a matrix's columns -> what NumPy does
        self.attrs: dict = {}         # id(call node) -> its integer parameter (an axis, a power)
        self.pending: list = []       # product dimensions still to be decided
        self.current = None           # the node being typed (for deferred refusals)
        self.notes: list = []         # NotationWarning: accepted, but probably not what was meant
        self.noted: dict = {}         # id(ast node) -> its note
        self.outer: set = set()       # id(ast node) of a column met by a row: x - x.T, every pair
        self.bcast: dict = {}         # id(ast node) -> ("rows", n) | ("cols", m): broadcast operand
        self.def_ast: dict = {}       # a definition's name -> its parse tree, once typed
        self.def_ir: dict = {}        # a definition's name -> its IR, once built
        self.opaque: dict = {}        # a definition's name -> the symbol that stands for it (build)

    # ---- union-find over dimensions
    def fresh(self):
        self.serial += 1
        return Var(next(self._names), self.serial)

    def find(self, d):
        while isinstance(d, Var) and d in self.parent:
            d = self.parent[d]
        if isinstance(d, Prod):
            return self.product(d.factors)
        return d

    def product(self, factors):
        """The product of dimensions: a final dimension once every factor is known."""
        known, unknown = 1, []
        for f in factors:
            f = self.find(f)
            if isinstance(f, Prod):
                unknown.extend(f.factors)
            elif isinstance(f, Var):
                unknown.append(f)
            else:
                known = ir.dim_mul(known, f)
        if not unknown:
            return known
        return Prod(([known] if known != 1 else []) + unknown)

    def unify(self, a, b) -> bool:
        a, b = self.find(a), self.find(b)
        if a is b or (not isinstance(a, (Var, Prod)) and not isinstance(b, (Var, Prod)) and a == b):
            return True
        if isinstance(a, Prod) or isinstance(b, Prod):
            return self.unify_product(a, b)
        if isinstance(a, Var) and isinstance(b, Var):
            if b.serial < a.serial:
                a, b = b, a
            self.parent[b] = a
            return True
        if isinstance(b, Var):
            a, b = b, a
        if isinstance(a, Var):
            if b == 1 and not self.allow_one:
                return False  # a symbol's dimension never collapses to 1
            self.parent[a] = b
            return True
        return False  # two different declared names, or different ints

    def unify_product(self, a, b) -> bool:
        if isinstance(b, Prod) and not isinstance(a, Prod):
            a, b = b, a
        if isinstance(b, Var):  # a dimension variable takes the product
            if any(f is b for f in a.factors):
                return False
            self.parent[b] = a
            return True
        if b == 1:
            return False
        if isinstance(b, Prod) and sorted(map(id, a.factors)) == sorted(map(id, b.factors)):
            return True
        if isinstance(b, str) and "*" in b:  # a known product: cancel the known factors
            rest = ir.dim_factors(b)
            unknown = []
            for f in a.factors:
                if isinstance(f, Var):
                    unknown.append(f)
                elif f in rest:
                    rest.remove(f)
                else:
                    unknown = None
                    break
            if unknown is not None and len(unknown) == 1 and rest:
                value = 1
                for f in rest:
                    value = ir.dim_mul(value, f)
                self.parent[unknown[0]] = value
                return True
        if isinstance(b, int):  # one unknown factor of a known total: solve it
            unknown = [f for f in a.factors if isinstance(f, Var)]
            known = 1
            for f in a.factors:
                if isinstance(f, int):
                    known *= f
            if len(unknown) == 1 and len(unknown) + sum(isinstance(f, int) for f in a.factors) == len(a.factors):
                if b % known or b // known == 1:
                    return False
                self.parent[unknown[0]] = b // known
                return True
        self.pending.append((a, b, self.current))  # decided once more is known
        return True

    def check_pending(self):
        for a, b, node in self.pending:
            a, b = self.find(a), self.find(b)
            if isinstance(a, Prod) or isinstance(b, Prod):
                self.fail(node, f"cannot tell the sizes in {self.text(node)}: {a} must equal {b}, and "
                                "nothing determines their factors; declare the shapes (shapes= or --shape)")
            if not self.unify(a, b):
                self.fail(node, f"the sizes in {self.text(node)} do not match: {a} and {b}")
        self.pending = []

    def unify_all(self, *pairs) -> bool:
        """Unify every pair or none (so a failure leaves the shapes as they were)."""
        saved = dict(self.parent)
        if all(self.unify(a, b) for a, b in pairs):
            return True
        self.parent = saved
        return False

    def show(self, shape) -> str:
        r, c = (self.find(d) for d in shape)
        return ir.fmt_shape((r, c))

    def describe(self, shape) -> str:
        r, c = (self.find(d) for d in shape)
        return ir.describe((r, c))

    def text(self, node: Node) -> str:
        """The source of a sub-expression, shortened for messages."""
        t = self.source[node.start:node.end]
        return t if len(t) <= 60 else t[:28] + " … " + t[-28:]

    def fail(self, node: Node, message: str):
        raise ShapeError(message, self.source, node.start, node.end)

    spelled = _SPELLED  # unknown function -> how to write it (in this syntax)

    # ---- typing
    def kind_of(self, name: str) -> int:
        return default_kind(name)

    def why_number(self, name: str) -> str:
        """Why an undeclared name is a number (kind_of's reason, for messages)."""
        return "by its Greek name"

    def symbol(self, node: Node):
        name = node.value
        if name not in self.sym_shape:
            if name in self.declared:
                spec = self.declared[name]
                kind = len(spec)
            else:
                kind = self.kind_of(name)
                if kind == 0 and name in self.diag_args:  # Diag(psi): the diagonal of entries psi
                    kind = 1
                    self.note(node, f"{name} is read as a vector, the diagonal of {self.diag_name}({name}) (undeclared "
                                    f"it is a number elsewhere, {self.why_number(name)}); for a number on the "
                                    f"diagonal write {name}*I")
                spec = tuple(self.fresh() for _ in range(kind))
                if kind == 1 and name.lower() in NUMBER_LIKE_NAMES:
                    self.note(node, f"{name} is a vector by the spelling of its name (lower case, not Greek); "
                                    f"if it is a number, declare it: shapes={{'{name}': ()}}, --shape {name}=scalar")
            shape = self.declared_shape(spec)
            self.sym_shape[name] = shape
            self.sym_kind[name] = kind
        return self.sym_shape[name]

    def is_pi(self, name) -> bool:
        """pi is the number π (NumPy's np.pi, MATLAB's pi) unless declared or defined: a
        policy π as a vector is then declared, shapes={"pi": ("n",)}."""
        return name in PI_NAMES and name not in self.declared and name not in self.def_ast

    @staticmethod
    def declared_shape(spec):
        """The typer's shape of a declared one: a number (1, 1), a vector a column."""
        return {0: (1, 1), 1: (spec[0], 1) if spec else None, 2: tuple(spec)}[len(spec)]

    def type(self, root: Node, definition: str | None = None):
        """The shape of root, each node's in self.shape.  definition: root is the value of
        that definition (the size of an identity in it is checked with the expression's)."""
        # iterative post-order so deep input cannot overflow the stack
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            if not done:
                stack.append((node, True))
                for c in reversed(node.children):
                    stack.append((c, False))
                continue
            self.current = node
            self.shape[id(node)] = self.rule(node)
        self.check_pending()
        if definition is not None:  # its identities may take their size where it is used
            self.eye_home.update({id(node): (root, self.source, definition) for node, _ in self.eyes
                                  if id(node) not in self.eye_home})
            return self.shape[id(root)]
        eyes = {id(node) for node, _ in self.eyes}
        carried = None
        used = self.names_used(root) if self.eye_home else set()
        for node, v in self.eyes:
            if id(node) in self.eye_home and self.eye_home[id(node)][2] not in used:
                continue  # an identity in a definition nothing uses: no size needed
            if isinstance(self.find(v), str) and node.value in self.identity_noted:  # sized by a declaration:
                if carried is None:                                   # by a dimension some symbol has?
                    carried = {self.find(d) for shape in self.sym_shape.values() for d in shape}
                if self.find(v) not in carried:
                    source = self.eye_home.get(id(node), (root, self.source, None))[1]
                    raise ShapeError(f"cannot tell the size of {node.value}: its declared size {self.find(v)} is "
                                     f"not the size of any symbol (give a number, shapes={{'{node.value}': (3, 3)}})",
                                     source, node.start, node.end)
            if isinstance(self.find(v), Var) and self.find(v) not in self._bound_vars():
                home, source, name = self.eye_home.get(id(node), (root, self.source, None))
                if self._beside_numbers(home, node, eyes):  # logdet(I + X@X.T), X declared (1, d)
                    self.parent[self.find(v)] = 1
                    continue
                where = "" if name is None else _in_definition(name, source)
                raise ShapeError(f"{where}cannot tell the size of {source[node.start:node.end]} from its context: "
                                 "nothing else in the expression has that dimension", source, node.start, node.end)
        return self.shape[id(root)]

    def names_used(self, root: Node) -> set:
        """The names the expression at root uses, those in the definitions it uses too."""
        used, todo = set(), [root]
        while todo:
            for n in _walk(todo.pop()):
                if n.kind == "name" and n.value not in used:
                    used.add(n.value)
                    if n.value in self.def_ast:
                        todo.append(self.def_ast[n.value])
        return used

    def _beside_numbers(self, root: Node, eye: Node, eyes: set) -> bool:
        """eye is a term of a sum (alone, negated or times a number) whose other terms are 1×1,
        at least one of them a matrix product (x.T@x, X@X.T for X declared 1×d); identities
        among them count as eye does."""
        def is_eye(c):
            if c.kind == "neg":
                return is_eye(c.children[0])
            if c.kind == "mul" and c.value == "@":  # I@I
                return all(is_eye(k) for k in c.children)
            if c.kind == "mul" and c.value == "/":  # I/2
                return is_eye(c.children[0]) and not is_eye(c.children[1]) and self.is_scalar(
                    self.shape[id(c.children[1])])
            if c.kind == "mul" and c.value == "*":
                rest = [k for k in c.children if id(k) in eyes or not self.is_scalar(self.shape[id(k)])]
                # a product of numbers, or of two arrays, is not a scaled identity
                return len(rest) == 1 and is_eye(rest[0])
            return id(c) in eyes

        def has_product(c):
            return any(k.kind == "mul" and k.value == "@" for k in _walk(c))

        stack = [root]
        while stack:
            n = stack.pop()
            if n.kind == "add" and any(is_eye(c) and any(k is eye for k in _walk(c)) for c in n.children):
                others = [c for c in n.children if not is_eye(c)]
                return (all(self.find(d) == 1 for c in others for d in self.shape[id(c)])
                        and any(has_product(c) for c in others))
            stack.extend(n.children)
        return False

    def eye_one(self, a, b) -> bool:
        """An identity's size that nothing else has takes 1 from a product: (I + X@X.T)@X with
        X declared 1×d (a symbol's own dimension never collapses to 1)."""
        a, b = self.find(a), self.find(b)
        if b != 1:
            a, b = b, a
        eye_vars = {self.find(v) for _, v in self.eyes}
        if b == 1 and isinstance(a, Var) and a in eye_vars and a not in self._bound_vars():
            self.parent[a] = 1
            return True
        return False

    def _bound_vars(self):
        roots = set()
        for shape in self.sym_shape.values():
            for d in shape:
                roots.add(self.find(d))
        return roots

    def rule(self, n: Node):
        k = n.kind
        kid = [self.shape[id(c)] for c in n.children]
        if k == "num":
            return (1, 1)
        if k == "name":
            if id(n) in self.size_names:  # ones(n), eye(n) of a declared dimension n: a size, no symbol
                return (1, 1)
            if n.value in self.value_dims:  # sum(x**2)/n of a declared dimension n: its size
                if n.value not in self.sized:
                    self.sized.append(n.value)
                    owner = next(k for k, spec in self.declared.items() if isinstance(spec, (tuple, list))
                                 and n.value in spec)
                    self.note(n, f"{n.value} is read as the size {n.value} in {owner}'s declared shape: as a "
                                 f"symbol it would not make the question well typed; for a symbol of its own "
                                 f"declare {n.value}'s shape")
                return (1, 1)
            if n.value in IDENTITY_NAMES:
                v = self.fresh()
                self.eyes.append((n, v))
                spec = self.declared.get(n.value)
                if spec is not None:  # a declared shape sizes the identity; it never makes a symbol
                    if len(spec) != 2 or not (self.unify(v, spec[0]) and self.unify(v, spec[1])):
                        self.fail(n, f"{n.value} is the identity matrix, but it is declared to be "
                                     f"{self.describe(self.declared_shape(spec))}; a matrix of your own "
                                     f"needs another name than I or eye")
                    if n.value not in self.identity_noted:
                        self.identity_noted.add(n.value)
                        self.note(n, f"{n.value} is the identity matrix (its declared shape sizes it); a matrix "
                                     f"of your own needs another name than I or eye")
                return (v, v)
            if n.value in self.def_ast:
                return self.shape[id(self.def_ast[n.value])]
            if self.is_pi(n.value):
                return (1, 1)
            return self.symbol(n)
        if k == "neg":
            return kid[0]
        if k == "T":
            if self.source[n.children[0].end:n.end].strip() == "^T" and ("T" in self.declared or re.search(
                    r"(?<![\w.^])T(?![\w(])", self.source.replace("^T", "  "))):  # alpha^T + T
                self.note(n, f"{self.text(n)} is read as a transpose (^T); for a power of the symbol T "
                             f"write {self.text(n.children[0])}**T")
            return (kid[0][1], kid[0][0])
        if k == "add":
            return self.broadcast(n, n.children, kid, "add")
        if k == "mul":
            op = n.value
            if op == "@":
                return self.matmul(n, kid)
            if op == "/" and n.children[1].kind == "num" and n.children[1].value == 0.0:
                raise DeriveError(f"division by zero in {self.text(n)}", self.source,
                                  n.children[1].start, n.children[1].end)
            if op == "*":
                return self.hadamard(n, kid)
            return self.broadcast(n, n.children, kid, "multiply" if op == "*" else "divide")
        if k == "frob":
            return self.frob(n, kid)
        if k == "pow":
            base, ex = n.children
            if base.kind == "num" and base.value == 0.0 and ex.kind == "neg":
                raise DeriveError(f"division by zero in {self.text(n)}", self.source, n.start, n.end)
            if kid[1] != (1, 1):
                hint = ""
                if base.kind == "name" and base.value == "e" and "e" not in self.declared:
                    hint = f" (for the exponential write exp({self.text(ex)}))"
                elif base.kind == "num" and base.value > 0 or base.kind == "name" and self.is_scalar(kid[0]):  # 2**x,
                    ex_text = self.text(ex)  # (alpha**x: NumPy's power of each entry)
                    ex_text = ex_text if ex.kind in ("name", "call", "num") or _wrapped(ex_text) else f"({ex_text})"
                    hint = (f" (for {self.text(base)} to the power of each entry write exp({ex_text}*log({self.text(base)}))"
                            + ("" if base.kind == "num" else f", for a positive {self.text(base)}") + ")")
                self.fail(n.children[1], f"the exponent {self.text(n.children[1])} must be a scalar, "
                                         f"it is {self.describe(kid[1])}{hint}")
            self.power_notes(n, kid)
            return kid[0]
        if k == "call":
            return self.call(n, kid)
        raise ShapeError(f"unsupported construct {k}", self.source, n.start, n.end)  # pragma: no cover

    def entrywise_hint(self, n, row) -> str:
        """For a row met by a column: how to pair their entries one by one, as NumPy does with
        two 1-D arrays (where its .T changes nothing and sum(X, 0) is 1-D too)."""
        if row is None:
            return ""
        text = self.text(row)
        if row.kind == "T":
            col = self.text(row.children[0])
        elif row.kind == "mul" and row.value in ("*", "/") and row.children[-1].kind == "T" and text.endswith(".T"):
            col = text[:-2]  # 2*x.T: 2*x
        else:
            col = f"{text}.T" if row.kind in ("name", "call") or _wrapped(text) else f"({text}).T"
        other = n.children[0] if n.children[0] is not row else n.children[-1]
        if self.text(other) == col:
            return ""  # x - x.T: x - x is 0, every pair is meant
        a, b = self.find(self.shape[id(row)][1]), self.find(self.shape[id(other)][0])
        if a != b and not (isinstance(a, Var) or isinstance(b, Var)):
            return ""  # (lengths declared apart, x (n) and y (m): 1-D arrays could not pair)
        return (f"; NumPy's 1-D arrays pair entry by entry (.T of one changes nothing): for that write "
                f"{col} in place of {self.text(row)}")

    def note(self, node: Node, message: str):
        from .errors import NotationWarning

        self.notes.append(NotationWarning(message, self.source, node.start, node.end))

    def is_matrix(self, shape):
        return self.find(shape[0]) != 1 and self.find(shape[1]) != 1

    def _could_matmul(self, sa, sb):
        """Whether a@b would type-check as well (without unifying anything)."""
        ca, rb = self.find(sa[1]), self.find(sb[0])
        if ca == rb:
            return True
        if isinstance(ca, Var) and isinstance(rb, Var):
            return True
        return (isinstance(ca, Var) and rb != 1) or (isinstance(rb, Var) and ca != 1)

    def _entrywise_value(self, node) -> bool:
        """A call of an entrywise function or softmax (Y*log(softmax(Z)), exp(X@W)*G), a sum
        with one (1 - z), or a definition whose value is one (a GRU's gate z = σ(…) in z*h):
        its value is meant entry by entry, never a factor of a matrix product."""
        if node.kind == "name" and node.value in self.def_ast:
            return self._entrywise_value(self.def_ast[node.value])
        if node.kind == "mul" and node.value == "@" and any(
                (o := c.children[0] if c.kind == "T" else c).kind == "num" and o.value == 1 for c in node.children):
            return True  # 1@r, u@1.T: a vector spread over a matrix (as gradients print one), to meet it entrywise
        if id(node) in self.outer:  # x - x.T: every pair of entries, to meet entrywise (weights of a graph)
            return True
        if node.kind == "add":  # (X@W + b.T: a bias spread over a matrix, a layer's value, entry by entry)
            return any(self._entrywise_value(c) or id(c) in self.bcast for c in node.children)
        if node.kind == "pow":  # (A - B)**2: an entrywise power of a residual, W*(x@1.T - 1@x.T)**2
            base = node.children[0]  # (X**2*A keeps its note: MATLAB's A*X^2)
            return base.kind == "add" or id(base) in self.outer
        if node.kind != "call":
            return False
        op = _USER.get(ALIASES.get(node.value, node.value))
        return op is not None and (op.elementwise or op.name == "softmax")

    def _declared_column(self, node) -> bool:
        """Whether a symbol in node is declared a 2-D column (n, 1): its axis -1 is NumPy's axis
        1 of length 1, as of the (n, 1) array it is given as."""
        return any(c.kind == "name" and len(self.declared.get(c.value, ())) == 2 for c in _walk(node))

    def _declared_mask(self, mask, other) -> bool:
        """A declared matrix times a sum (M*(Y - U@V.T), a mask or weights on a residual), or a
        declared vector times anything (a layer norm's gain gamma*X, gamma 1×p): its shape was
        given, so the product meets the other entry by entry as written."""
        if mask.kind != "name" or mask.value not in self.declared:
            return False
        shape = self.declared[mask.value]  # (a declared row or column: spread over the other, as meant)
        return other.kind == "add" or len(shape) == 1 or 1 in shape

    def _mask_on_product(self, mask, other) -> bool:
        """A name met nowhere else times a matrix product (a dropout mask M*(X@W), one-hot
        labels Y*(X@W)): its shape is the product's, entry by entry, as such masks are written."""
        return mask.kind == "name" and other.kind == "mul" and other.value == "@" and len(
            re.findall(rf"(?<![\w.]){re.escape(mask.value)}(?![\w])", self.source)) == 1

    def hadamard(self, n, kid):
        """a * b: entry by entry.  Where the two are a matrix and a matrix (or vector) whose
        shapes only agree because this product makes them agree, and a@b would type-check
        too, the product is probably meant as a matrix product: say so (or, refused, hint)."""
        (a, b), (sa, sb) = n.children, kid
        spelled = self.source[a.end:b.start].strip()
        suspicious = (spelled == "*" and not self.is_scalar(sa) and not self.is_scalar(sb)
                      and (self.is_matrix(sa) or self.is_matrix(sb)) and self._could_matmul(sa, sb)
                      and not (self._entrywise_value(a) or self._entrywise_value(b)))
        noting = suspicious and not any(self._declared_mask(m, o) or self._mask_on_product(m, o)
                                        for m, o in ((a, b), (b, a)))
        before, said = dict(self.parent), len(self.notes)
        try:
            out = self.broadcast(n, n.children, kid, "multiply")
        except ShapeError as e:
            if suspicious:
                raise ShapeError(e.message + " (* is the entrywise product; for a matrix product use @)",
                                 e.source, e.start, e.end) from None
            raise
        if noting and self.parent != before:
            chain = [a, b]
            if id(a) in self.noted:  # A*B*C: one note for the whole chain
                prev, operands = self.noted.pop(id(a))
                self.notes.remove(prev)
                chain = operands + [b]
            names = " and ".join([", ".join(self.text(c) for c in chain[:-1]), self.text(chain[-1])])
            vector, kind = next(((c, self.vector_kind(sc)) for c, sc in ((a, sa), (b, sb))
                                 if self.vector_kind(sc) in ("col", "row")), (None, None))
            if vector is not None and len(chain) == 2:  # X*u: u spread over X's columns, not X's shape
                matrix = b if vector is a else a
                line, side = ("row", "rows") if kind == "col" else ("column", "columns")
                numpy = ""
                if len(self.notes) > said and vector.kind == "name" and vector.value in self.spread:
                    self.notes.pop()  # (u's spread, said in this note)
                    numpy = (f"; NumPy multiplies column j by entry j of a 1-D {vector.value}: for that write "
                             f"{self.text(matrix)}*{vector.value}.T")
                self.note(n, f"{self.text(n)} is an entrywise (Hadamard) product: it multiplies {line} i of "
                             f"{self.text(matrix)} by entry i of {self.text(vector)}, which it only does by giving "
                             f"{self.text(vector)} as many entries as {self.text(matrix)} has {side}{numpy}; for a "
                             f"matrix product write {'@'.join(self.text(c) for c in chain)}")
            else:
                self.note(n, f"{self.text(n)} is an entrywise (Hadamard) product: it only type-checks by "
                             f"giving {names} the same shape ({self.show(out)}); for a matrix product "
                             f"write {'@'.join(self.text(c) for c in chain)}")
            self.noted[id(n)] = (self.notes[-1], chain)
        return out

    def quotient_note(self, n):
        """x.T@A@x/x.T@B@x is ((x.T@A@x)/x.T)@B@x, as in Python: said once, on the whole chain
        after the quotient (a longer chain replaces the note of its start)."""
        d, after = n.children[0], [n.children[1]]
        while d.kind == "mul" and d.value == "@" and not _wrapped(self.text(d)):
            d, after = d.children[0], [d.children[1]] + after
        if not (d.kind == "mul" and d.value == "/" and not _wrapped(self.text(d))):
            return
        den = self.shape[id(d.children[1])]
        if not (self.vector_kind(den) == "row" and self.vector_kind(self.shape[id(after[-1])]) == "col"):
            return  # (x.T@x after 1/: a number was meant; a matrix or column divisor reads as written)
        num, den = (self.text(c) for c in d.children)
        num = num if d.children[0].kind in ("name", "num", "call", "T") or _wrapped(num) else f"({num})"
        rest = "".join("@" + self.text(c) for c in after)
        said = self.quotient_noted.get(id(d))
        if said is not None:
            self.notes.remove(said)
        self.note(n, f"/ and @ bind equally, left to right: {self.text(n)} is ({self.text(d)}){rest}; for a "
                     f"quotient write {num}/({den}{rest})")
        self.quotient_noted[id(d)] = self.notes[-1]

    def same_size(self, a, b) -> bool:
        """Whether two dimensions are known to be equal (one variable, or equal sizes or names)."""
        a, b = self.find(a), self.find(b)
        return a is b or not isinstance(a, (Var, Prod)) and not isinstance(b, (Var, Prod)) and a == b

    def known_apart(self, a, b) -> bool:
        """Whether two dimensions are known to differ (declared 5 and 3, or n and m)."""
        a, b = self.find(a), self.find(b)
        return not isinstance(a, (Var, Prod)) and not isinstance(b, (Var, Prod)) and a != b

    def matrix_power_note(self, *nodes):
        """For X**k (k = 2, 3, …) of a square matrix X in tr, det, logdet or inv, where paper
        notation means the matrix power: say it is entrywise (not in a product: W**2@v carries
        a layer's variances), once per spelling."""
        for p in nodes:
            if p.kind != "pow" or self.text(p) in self.power_noted or not self.power_notes_due:
                continue
            base, ex = p.children
            shape = self.shape.get(id(base))
            k = ex.value if ex.kind == "num" else None
            if shape is None or not self.is_matrix(shape) or not self.same_size(*shape) or k is None or k != int(k) or not 2 <= k <= 4 or p.value == "m^":
                continue  # (a square matrix only, as far as typing knows it here; MATLAB's X^2 is the matrix power)
            self.power_noted.add(self.text(p))
            b = self.text(base)
            b = b if base.kind in ("name", "call", "T") or _wrapped(b) else f"({b})"
            self.note(p, f"{self.text(p)} raises every entry of {b} to the power {int(k)}; for the "
                         f"matrix power write {'@'.join([b] * int(k))}")

    def power_notes(self, n, kid):
        base, ex = n.children
        k = -ex.children[0].value if ex.kind == "neg" and ex.children[0].kind == "num" else \
            (ex.value if ex.kind == "num" else None)
        if k is not None and k < 0 and self.is_matrix(kid[0]) and not self.known_apart(*kid[0]) \
                and self.power_notes_due:
            self.note(n, f"{self.text(n)} raises every entry of {self.text(base)} to the power {k:g}; "
                         f"for the matrix inverse write inv({self.text(base)})"
                         + (f"@inv({self.text(base)})" * (int(-k) - 1) if k == int(k) and -k <= 3 else ""))
        if base.kind == "name" and base.value == "e" and "e" not in self.declared:
            self.note(n, f"{self.text(n)} is a power of the symbol e; for the exponential write "
                         f"exp({self.text(ex)})")

    def is_scalar(self, shape):
        return self.find(shape[0]) == 1 and self.find(shape[1]) == 1

    def vector_kind(self, shape):
        """'row' for 1×m, 'col' for n×1, None for a matrix (or a scalar)."""
        r, c = self.find(shape[0]), self.find(shape[1])
        if r == 1 and c != 1:
            return "row"
        if c == 1 and r != 1:
            return "col"
        return None

    def spelled_kind(self, kind: int, *nodes):
        """The first of nodes that is a name of ``kind`` (0 number, 1 vector) only by its
        spelling: undeclared, not defined, not I."""
        return next((c for c in nodes if c.kind == "name" and c.value not in self.declared
                     and c.value not in self.def_ast and c.value not in IDENTITY_NAMES
                     and self.kind_of(c.value) == kind), None)

    def default_vector_hint(self, *nodes) -> str:
        """For a name that is a vector only by its spelling (eps, lr: lower-case, not Greek), how
        to make it a number: the likely intent where it fails to combine."""
        c = self.spelled_kind(1, *nodes)
        return (f" ({c.value} is a vector by the spelling of its name; to make it a number declare "
                f"it: shapes={{'{c.value}': ()}}, --shape {c.value}=scalar)") if c else ""

    def default_scalar_hint(self, *nodes) -> str:
        """For a name that is a number only by its spelling (theta, beta, mu: Greek), how to make
        it a vector: the likely intent where it fails to combine as a number."""
        c = self.spelled_kind(0, *nodes)
        return (f" ({c.value} is a number {self.why_number(c.value)}; to make it a vector declare it: "
                f"shapes={{'{c.value}': ('n',)}}, --shape {c.value}=n)") if c else ""

    def scalar_diag_hint(self, *operands) -> str:
        """For Diag(s) or diag(s) of a number s among (node, shape) operands, which is s itself
        (1×1, as np.diag and MATLAB's diag make it): how to write s on a diagonal."""
        for c, s in operands:
            if c.kind == "call" and c.value in ("Diag", "diag") and len(c.children) == 1 and self.is_scalar(s):
                arg = self.text(c.children[0])
                arg = f"({arg})" if c.children[0].kind in ("add", "frob") else arg
                return (f" ({self.text(c)} of a number is that number, 1×1: for {arg} on the diagonal write "
                        f"{arg}*I; for a diagonal of entries, a vector)")
        return ""

    def broadcast(self, n, children, shapes, verb):
        """Elementwise operands: equal shapes, a scalar, or (as NumPy does with (1, m) and
        (n, 1) arrays) a row vector over the rows / a column vector over the columns of a
        matrix; the vector's length unifies with the matrix's side."""
        arrays = [(c, s) for c, s in zip(children, shapes) if not self.is_scalar(s)]
        if not arrays:
            return (1, 1)
        if verb == "divide":  # g/n, Q@K.T/sqrt(d): a count spelled as a vector
            c = children[1] if children[1].kind == "name" else _lone_call_arg(children[1])
            if c is not None and c.value in COUNT_NAMES and self.spelled_kind(1, c) is not None \
                    and not self.is_scalar(shapes[0]) and c.value not in self.greek_noted:
                self.greek_noted.add(c.value)
                self.note(children[1], f"{self.text(n)} divides entry by entry by the vector {c.value} (a vector by the "
                                       f"spelling of its name); for a count or a size declare it a number: "
                                       f"shapes={{'{c.value}': ()}}, --shape {c.value}=scalar")
        hint = self.scalar_diag_hint(*zip(children, shapes))
        if hint:  # W@W.T + Diag(s): s on every entry, never what is meant
            c = next(c for c in children if self.scalar_diag_hint((c, (1, 1))))
            self.fail(c, f"cannot {verb} {self.text(c)} (a number) and {self.text(arrays[0][0])} "
                         f"({self.show(arrays[0][1])}) entry by entry in {self.text(n)}{hint}")
        if verb == "add":  # x - mu: a Greek name is a number unless declared; say so where it broadcasts
            for c in children:
                base = c.children[0] if c.kind == "pow" and c.children[0].kind == "name" and not any(
                    re.search(rf"(?<![\w.]){re.escape(c.children[0].value)}(?![\w(])", self.text(o))
                    for o in children if o is not c) else c  # (1 + logv - mu**2; not x**2 - 2*mu*x + mu**2)
                hint = self.default_scalar_hint(base) if base.kind == "name" and base.value not in self.greek_noted \
                    and _stem(base.value) not in CONSTANT_NAMES and not self.is_pi(base.value) else ""
                if hint:
                    self.greek_noted.add(base.value)
                    self.note(c, f"{self.text(n)} adds the number {self.text(c)} to every entry{hint}")
        first_node, first = arrays[0]
        out = first
        outer = False  # a column met a row (noted as such: no note on the column's spread too)
        for c, s in arrays[1:]:
            if self.unify_all((out[0], s[0]), (out[1], s[1])):
                continue
            ko, ks = self.vector_kind(out), self.vector_kind(s)
            if ko is None and not self.is_scalar(out) and ks is not None:
                if self.unify(out[1], s[1]) if ks == "row" else self.unify(out[0], s[0]):
                    continue
            if ks is None and ko is not None:
                if self.unify(s[1], out[1]) if ko == "row" else self.unify(s[0], out[0]):
                    out = s
                    continue
            if {ko, ks} == {"row", "col"}:  # a column and a row: every pair, n×m, as NumPy's (n, 1) - (1, m)
                out = (out[0], s[1]) if ko == "col" else (s[0], out[1])
                outer = True
                self.outer.add(id(n))
                self.note(n, f"{self.text(n)} combines a column and a row: every pair of their entries, "
                             f"a matrix {self.show(out)}, as NumPy does with an (n, 1) and a (1, m) array"
                          + self.entrywise_hint(n, c if ks == "row" else first_node if len(arrays) == 2 else None))
                continue
            hint = self.default_vector_hint(first_node, c)
            if not hint and (ko is None) != (ks is None):
                vec, vs, ms = (c, s, out) if ko is None else (first_node, out, s)
                hint = (" (a 1×m row vector broadcasts over the rows of a matrix with m columns, an "
                        "n×1 column vector over the columns of a matrix with n rows"
                        + (f"; to add {self.text(vec)} to every row, as NumPy does with a 1-D array, write "
                           f"{self.text(vec)}.T" if self.vector_kind(vs) == "col" and vec.kind == "name"
                           and self.find(vs[0]) == self.find(ms[1]) else "") + ")")
            self.fail(n, f"cannot {verb} {self.text(first_node)} ({self.show(first)}) and "
                         f"{self.text(c)} ({self.show(s)}) in {self.text(n)}: the shapes differ{hint}")
        for c, s in arrays:
            k = self.vector_kind(s)
            if k == "row" and self.find(out[0]) != 1:
                self.bcast[id(c)] = ("rows", out[0])
            elif k == "col" and self.find(out[1]) != 1:
                self.bcast[id(c)] = ("cols", out[1])
                if not outer:
                    self.column_note(n, c, out)
        return out

    numpy_rows = True  # a 1-D array broadcasts over the rows in this syntax's model (NumPy)

    def column_note(self, n, c, out):
        """Where an undeclared vector (a column by its lower-case name) is spread over a
        matrix's columns, a note on what NumPy does instead with the 1-D array the function
        takes (it spreads it over the rows: the bias of X@W + b, silently so where the matrix
        is square), on the first such vector only; api says more if the vector's gradient is 0
        everywhere.  A declared vector means the column."""
        if not self.numpy_rows or c.kind != "name" or c.value in self.declared or c.value in self.spread \
                or c.value in self.def_ast:  # (a defined vector is a column by its definition: mean(X, 1))
            return
        b = c.value
        message = (f"{b} is a column (as lower-case names are): {self.text(n)} pairs {b}[i] with row i; NumPy "
                   f"pairs a 1-D {b} with every row ({b}[j] with column j): for that write {b}.T")
        if not self.spread:  # (one note: a GRU's three gates would make three)
            self.note(n, message + f"; declared (shapes={{'{b}': ('n',)}}, --shape {b}=n), {b} stays a column "
                                   f"without this note, as do other vectors spread so here; for a number declare "
                                   f"{b} one: shapes={{'{b}': ()}}, --shape {b}=scalar")
        self.spread[b] = (message, c.start, c.end)

    def expand(self, node: Node, e: ir.Expr) -> ir.Expr:
        """A broadcast operand as an array of the full shape: 1@r (every row r) or c@1ᵀ."""
        b = self.bcast.get(id(node))
        if b is None:
            return e
        how, d = b
        d = self.resolve(d)
        if how == "rows":
            return ir.matmul(ir.const(1.0, (d, 1)), e)
        return ir.matmul(e, ir.const(1.0, (1, d)))

    def frob(self, n, kid):
        (a, b), (sa, sb) = n.children, kid
        if a.kind == "num" and not self.is_scalar(sb):
            self.special[id(a)] = sb
            return (1, 1)
        if b.kind == "num" and not self.is_scalar(sa):
            self.special[id(b)] = sa
            return (1, 1)
        for side, s_other in ((a, sb), (b, sa)):
            one = self.scaled_one(side)
            if one is not None and not self.is_scalar(s_other):  # alpha*1:dp, 1/n:dW
                self.special[id(one)] = s_other
                return (1, 1)
        one_a, one_b = self.ones_operand(a), self.ones_operand(b)
        if one_b is not None and one_b is not b and not self.is_scalar(sa):  # x.T:1.T
            self.set_ones(b, one_b, sa)
            return (1, 1)
        if one_a is not None and one_a is not a and not self.is_scalar(sb):
            self.set_ones(a, one_a, sb)
            return (1, 1)
        if not self.unify_all((sa[0], sb[0]), (sa[1], sb[1])):
            # a declared row (X: 1×d) makes G in G:(X@W) a row too; never a vector a scalar
            saved = dict(self.parent)
            self.allow_one = True
            ok = self.unify_all((sa[0], sb[0]), (sa[1], sb[1]))
            self.allow_one = False
            if ok and (self.is_scalar(sa) or self.is_scalar(sb)):
                ok, self.parent = False, saved
            if not ok:
                greek = [c for side, s in ((a, sa), (b, sb)) if self.is_scalar(s) and side.kind == "mul"
                         and side.value == "@" for c in _walk(side) if c.kind == "name"]  # (1@mu.T:X)
                self.fail(n, f"the Frobenius product {self.text(n)} needs equal shapes, but "
                             f"{self.text(a)} is {self.describe(sa)} and {self.text(b)} is {self.describe(sb)}"
                             f"{self.default_scalar_hint(*greek)}")
        return (1, 1)

    def scaled_one(self, node):
        """The literal 1 of a number-valued product c*1, c*1/n or -1/n (every other factor a
        number) on a side of ':', else None: it is the all-ones array of the other side's
        shape, as a bare 1 is there, so (γ1):B reads back as written."""
        if node.kind == "neg":
            c = node.children[0]
            return c if c.kind == "num" and c.value == 1.0 else self.scaled_one(c)
        if node.kind != "mul" or node.value not in ("*", "/") or not self.is_scalar(self.shape[id(node)]):
            return None
        parts = node.children if node.value == "*" else node.children[:1]
        for c in parts:
            if c.kind == "num" and c.value == 1.0:
                return c
            found = self.scaled_one(c)
            if found is not None:
                return found
        return None

    def ones_operand(self, node):
        """The AST node of a literal 1 (or 1ᵀ) used as an operand of @, else None."""
        if node.kind == "T" and node.children[0].kind == "num" and node.children[0].value == 1.0:
            return node.children[0]
        return node if node.kind == "num" and node.value == 1.0 else None

    def set_ones(self, operand, one, shape):
        """Give the literal 1 of an @ operand (maybe transposed) the all-ones shape it needs."""
        self.shape[id(operand)] = shape
        self.special[id(one)] = shape if one is operand else (shape[1], shape[0])
        if one is not operand:
            self.shape[id(one)] = (shape[1], shape[0])

    def number_product_note(self, n, c, says: str):
        """Once per name: the product n by c, a name that is a number by its spelling (w@mu, or 1@mu.T,
        which is that number, never the outer product a vector would make), ``says`` what it is
        ({} for the name), with how to make the name a vector."""
        if c is not None and c.value not in self.greek_noted:
            self.greek_noted.add(c.value)
            self.note(n, f"{self.text(n)} {says.format(c.value)}{self.default_scalar_hint(c)}")

    def scaled_ones_path(self, node):
        """The nodes from node down to a literal 1 or 1ᵀ that node is, or a number times (2*1.T,
        -1.T, alpha*1/n): the ones an @ sizes, as it does a bare one; else None."""
        if self.ones_operand(node) is not None:
            return [node]
        rest = None
        if node.kind in ("neg", "T"):  # -1.T, (2*1).T
            rest = self.scaled_ones_path(node.children[0])
        elif node.kind == "mul" and node.value in ("*", "/") and self.is_scalar(self.shape[id(node)]):
            parts = node.children if node.value == "*" else node.children[:1]
            rest = next((p for p in map(self.scaled_ones_path, parts) if p), None)
        return [node] + rest if rest else None

    def set_scaled_ones(self, path, one, shape):
        """set_ones for the 1 at the end of path, and its shape for the products above it (a
        transpose on the way turns it)."""
        for node in path[:-1]:
            self.shape[id(node)] = shape
            if node.kind == "T":
                shape = (shape[1], shape[0])
        self.set_ones(path[-1], one, shape)

    def matmul(self, n, kid):
        (a, b), (sa, sb) = n.children, kid
        if n.value == "@":
            self.quotient_note(n)
        path_a, path_b = self.scaled_ones_path(a) or [a], self.scaled_ones_path(b) or [b]
        one_a, one_b = self.ones_operand(path_a[-1]), self.ones_operand(path_b[-1])
        if (one_a is None) != (one_b is None) and self.is_scalar(sa) and self.is_scalar(sb):
            other = b if one_a is not None else a
            self.number_product_note(n, self.spelled_kind(0, other.children[0] if other.kind == "T" else other),
                                     "is the number {}, not an outer product")
        if one_a is not None and not self.is_scalar(sb):
            if one_a is path_a[-1] and self.find(sb[0]) == 1:
                sa = (self.fresh(), 1)  # 1@r of a row r: a column of ones, r on every row
                self.eyes.append((path_a[-1], sa[0]))
            else:
                sa = (1, sb[0])  # 1@X or 1ᵀ@X: a row of ones, the column sums of X
            self.set_scaled_ones(path_a, one_a, sa)
        elif one_b is not None and not self.is_scalar(sa):
            if one_b is not path_b[-1] and self.find(sa[1]) == 1:
                sb = (1, self.fresh())  # v@1ᵀ: an outer product with a row of ones
                self.eyes.append((path_b[-1], sb[1]))
            else:
                sb = (sa[1], 1)  # X@1: a column of ones, the row sums of X
            self.set_scaled_ones(path_b, one_b, sb)
        elif one_b is not None and one_b is not b:  # s@1ᵀ of a number s, or 1@1ᵀ (as results print a
            sb = (1, self.fresh())  # matrix of ones): a row of ones, sized by what it meets
            self.eyes.append((b, sb[1]))
            self.set_ones(b, one_b, sb)
            if one_a is a:
                sa = (self.fresh(), 1)
                self.eyes.append((a, sa[0]))
                self.set_ones(a, one_a, sa)
        ra, ca = (self.find(d) for d in sa)
        rb, cb = (self.find(d) for d in sb)
        if ca == 1 and ra != 1 and cb == 1 and rb != 1:
            # x@y of two column vectors: the inner product x.T@y, as NumPy does
            if not self.unify(ra, rb):
                self.fail(n, f"cannot take the inner product {self.text(n)}: {self.text(a)} is "
                             f"{self.describe(sa)} and {self.text(b)} is {self.describe(sb)}")
            self.special[id(n)] = "inner"
            return (1, 1)
        if not self.unify(ca, rb) and not self.eye_one(ca, rb):
            if ca == 1 and ra != 1 and cb != 1 and n.value == "@" and self.unify(ra, rb):
                self.special[id(n)] = "vecmat"  # x@A of a vector x: xᵀA as a vector (NumPy's 1-D x@A), Aᵀx
                return (sb[1], 1)
            hint = self.scalar_diag_hint((a, sa), (b, sb))
            if not hint and (self.is_scalar(sa) or self.is_scalar(sb)):
                left = [a.children[0]] if a.kind == "T" else [a] if self.vector_kind(sb) == "col" else []
                greek = self.default_scalar_hint(b, *left)  # (X@theta: a column fits; mu.T@w: a column's
                # transpose too; mu@w the inner product; theta@X:Y would not fit as a vector either)
                hint = f" (to scale by a scalar use *{'; ' + greek[2:-1] if greek else ''})"
            self.fail(n, f"cannot multiply {self.text(a)} ({self.show(sa)}) @ {self.text(b)} "
                         f"({self.show(sb)}): inner dimensions {ca} and {rb} differ{hint}")
        if self.is_scalar(sa) != self.is_scalar(sb):  # w@mu: a product by a number (NumPy refuses a 0-d @)
            self.number_product_note(n, self.spelled_kind(0, a, b), "multiplies by the number {}")
        return (sa[0], sb[1])

    def call(self, n, kid):
        if n.value in IDENTITY_NAMES and 1 <= len(n.children) <= 2:  # eye(3), np.eye(n): I of that size
            sizes = [self.dimension(c) for c in n.children]
            v = self.fresh()
            if not all(self.unify(v, d) for d in sizes):
                self.fail(n, f"{self.text(n)} is not square: matcalc's identity is a square matrix")
            self.eyes.append((n, v))
            return (v, v)
        name = ALIASES.get(n.value, n.value)
        op = _USER.get(name)
        if op is None:
            close = [name.lower()] if name.lower() in FUNCTIONS else difflib.get_close_matches(name, sorted(FUNCTIONS), n=1)
            spelled = self.spelled.get(name)
            if name in ("max", "min") and len(n.children) == 1:  # max(x): a reduction, not relu
                spelled = _SPELLED["amax"]
            hint = f" ({spelled})" if spelled else f" (did you mean {close[0]}?)" if close else ""
            if not hint and (name in self.declared or self.source.count(name) > 1 and re.search(
                    rf"(?<![\w.]){re.escape(name)}(?!\s*\()", self.source)):  # W(1, 1) of a matrix W
                hint = f" ({name} is a variable: matcalc has no indexing, it works with whole arrays)"
            raise ParseError(f"unknown function {n.value}{hint}", self.source, n.start,
                             n.start + len(n.value))
        if name in ("maximum", "minimum") and len(n.children) == 2:  # NumPy's broadcast, as + and * have it:
            out = self.broadcast(n, n.children, kid, "compare")      # a row over a matrix's rows, …
            kid = [k if self.is_scalar(k) else out for k in kid]
        if not op.elementwise and n.value not in SIZED and any(c.kind == "name" and c.value in self.value_dims
                                                               for c in n.children):
            self.fail(n, f"{n.value} of a size")  # (a size is a count: sqrt(n), log(n), not Diag(n) or inv(n))
        given = len(n.children)
        least = op.nargs + (0 if op.params_optional else len(op.params))
        order = n.children[1].value if given == 2 and n.children[1].kind == "num" else None
        if n.value == "norm" and order in (1, 2) and self.vector_kind(kid[0]) is not None:
            name = self.renamed[id(n)] = "norm1" if order == 1 else "norm2"  # np.linalg.norm(x, 1) of a vector
            op, given = _USER[name], 1
        if n.value in self.spelled and given != least:  # norm(x, 1): the spelling it takes
            self.fail(n, f"{n.value} takes one argument here ({self.spelled[n.value]})")
        if not least <= given <= op.arity:
            words = {1: "one argument", 2: "two arguments", 3: "three arguments"}
            want = words.get(op.nargs, f"{op.nargs} arguments")
            if not op.nargs:  # ones(rows, cols)
                want = f"{op.params[0]} and optionally {' and '.join(op.params[1:])}"
            elif op.params:
                want += (f" and optionally {' and '.join(op.params)}" if op.params_optional
                         else f" and {' and '.join(op.params)}")
            self.fail(n, f"{n.value} takes {want}, got {words.get(given, f'{given} arguments')}")
        attr = None
        if op.shape_attr:  # sizes (unvec's rows, ones'): as written, a list
            attr = [self.dimension(arg) for arg in n.children[op.nargs:]]
        else:
            for p, arg in zip(op.params, n.children[op.nargs:]):
                attr = self.integer(arg, f"the {p} of {n.value}")
            if attr == -1 and "axis" in op.params and self.vector_kind(kid[0]) == "col" \
                    and not self._declared_column(n.children[0]):
                attr = 0  # a vector's last axis, as NumPy's of a 1-D array: its only one, down the column
        self.attrs[id(n)] = attr
        out = op.shape(_CallUnifier(self, n, name, kid), kid[:op.nargs], attr)
        if name in ("tr", "det", "logdet", "inv"):  # (after the rule: it makes the argument square)
            self.matrix_power_note(*n.children)
        return out

    def dimension(self, node: Node):
        """A size parameter (unvec(v, rows), ones(rows, cols)): a whole number, size(X, axis), or
        products and quotients of them."""
        if node.kind == "num" and float(node.value).is_integer() and 0 < node.value <= 10 ** 6:
            return int(node.value)
        if id(node) in self.size_names:
            return node.value
        if node.kind == "call" and node.value == "size" and len(node.children) == 2:
            axis = self.attrs.get(id(node))
            return self.shape[id(node.children[0])][axis % 2]
        if node.kind == "call" and node.value == "size" and len(node.children) == 1:  # its entries
            return self.product(list(self.shape[id(node.children[0])]))
        if node.kind == "mul" and node.value == "*":
            return self.product([self.dimension(c) for c in node.children])
        if node.kind == "mul" and node.value == "/":  # size(C, 0)/size(B, 0): C's rows in blocks of B's
            a, b = (self.find(self.dimension(c)) for c in node.children)
            q = None if isinstance(a, (Var, Prod)) or isinstance(b, (Var, Prod)) else ir.dim_div(a, b)
            if q is not None:
                return q
        hint = (f" ({node.value} is a size where it names a dimension of a declared shape: "
                f"shapes={{'x': ('{node.value}',)}}, --shape x={node.value})" if node.kind == "name" else "")
        self.fail(node, f"a size must be a whole number, size(X, axis), or products and "
                        f"quotients of them, got {self.text(node)}{hint}")

    def integer(self, node: Node, what: str) -> int:
        """An integer literal argument (an axis, a power), possibly negative."""
        sign, inner = 1, node
        if node.kind == "neg":
            sign, inner = -1, node.children[0]
        if inner.kind != "num" or not float(inner.value).is_integer():
            self.fail(node, f"{what} must be an integer written as a number, got {self.text(node)}")
        if abs(inner.value) > 10 ** 6:
            self.fail(node, f"{what} must be an integer of at most 10^6 in size, got {self.text(node)}")
        return sign * int(inner.value)

    # ---- naming and IR
    def finish(self, order=None):
        """(user shapes, sym nodes) of the symbols, their dimensions named in ``order``."""
        final: dict = {}
        names = (n for n in _letters() if n not in self.user_dim_names)

        def resolve(d):
            d = self.find(d)
            if isinstance(d, Var):
                if d not in final:
                    final[d] = next(names)
                return final[d]
            if isinstance(d, Prod):
                out = 1
                for f in d.factors:
                    out = ir.dim_mul(out, resolve(f))
                return out
            return d

        self.resolve = resolve
        user_shapes, syms = {}, {}
        for name in order or self.sym_shape:
            shape = self.sym_shape[name]
            r, c = resolve(shape[0]), resolve(shape[1])
            kind = self.sym_kind[name]
            user_shapes[name] = {0: (), 1: (r,), 2: (r, c)}[kind]
            syms[name] = ir.sym(name, (r, c))
        self.syms = syms
        return user_shapes, syms

    def build(self, root: Node) -> ir.Expr:
        out: dict = {}
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            if not done:
                stack.append((node, True))
                for c in reversed(node.children):
                    stack.append((c, False))
                continue
            try:
                out[id(node)] = self.make(node, [self.expand(c, out[id(c)]) for c in node.children])
            except ir.ShapeMismatch as e:  # (sum(x.T@x + I, 0): I is 1×1 there, the sum a number)
                self.fail(node, f"the shapes in {self.text(node)} do not fit: {e}")
        return out[id(root)]

    def make(self, n: Node, args):
        k = n.kind
        rs = tuple(self.resolve(d) for d in self.shape[id(n)])
        if k == "num":
            sp = self.special.get(id(n))
            if sp is not None:
                return ir.const(n.value, tuple(self.resolve(d) for d in sp))
            return ir.const(n.value)
        if k == "name":
            if id(n) in self.size_names:
                return ir.const(1.0)  # (read by the call as a size, never built into the IR)
            if n.value in self.value_dims:
                return ir.dim(n.value)
            if n.value in IDENTITY_NAMES:
                return ir.eye(rs[0])
            if n.value in self.opaque:
                return self.opaque[n.value]
            if n.value in self.def_ir:
                return self.def_ir[n.value]
            if self.is_pi(n.value):
                return ir.const(math.pi)
            return self.syms[n.value]
        if k == "neg":
            return ir.neg(args[0])
        if k == "T":
            return ir.T(args[0])
        if k == "add":
            return ir.add(*[a if s > 0 else ir.neg(a) for a, s in zip(args, n.value)])
        if k == "mul":
            a, b = args
            if n.value == "*":
                return ir.mul(a, b)
            if n.value == "/":
                return ir.div(a, b)
            if self.special.get(id(n)) == "inner":
                return ir.matmul(ir.T(a), b)
            if self.special.get(id(n)) == "vecmat":
                return ir.matmul(ir.T(b), a)
            return ir.matmul(a, b)
        if k == "frob":
            return ir.frob(*args)
        if k == "pow":
            return ir.power(*args)
        if k == "call" and n.value in IDENTITY_NAMES:
            return ir.eye(rs[0])
        if k == "call":
            name = self.renamed.get(id(n)) or ALIASES.get(n.value, n.value)
            op, attr = _USER[name], self.attrs.get(id(n))
            if name == "size":  # size(X) entries, size(X, axis) one dimension: a number here
                shape = args[0].shape
                return ops.count(shape) if attr is None else ir.dim(shape[attr % 2])
            if op.shape_attr:  # unvec(v, rows), kron_sum(C, A): the IR holds the shape worked out
                shape = tuple(self.resolve(d) for d in self.shape[id(n)])
                return ir.const(1.0, shape) if name == "ones" else ir.func(name, *args[:op.nargs], attr=shape)
            if name in ("sum", "mean", "logsumexp") and attr is not None and args[0].shape[attr % 2] == 1:
                return args[0]  # along an axis of length 1 (sum(c, 1) of a column c): each entry alone
            return ir.func(op.name, *args[:op.nargs], attr=None if attr is None else
                           (attr % 2 if "axis" in op.params else attr))
        raise AssertionError(k)  # pragma: no cover


class _CallUnifier:
    """The interface the registry's shape rules use, while typing a call of the user's."""

    def __init__(self, typer, node, name, kid):
        self.t, self.node, self.name, self.kid = typer, node, name, kid

    def same(self, a, b):
        return self.t.unify(a, b)

    def one(self, d):
        return self.t.find(d) == 1

    def mul(self, a, b):
        return self.t.product([a, b])

    def div(self, a, b):
        """q with b·q = a, now where both are known, else once more is known; None where b
        does not divide a."""
        fa, fb = self.t.find(a), self.t.find(b)
        if not isinstance(fa, (Var, Prod)) and not isinstance(fb, (Var, Prod)):
            return ir.dim_div(fa, fb)
        q = self.t.fresh()
        return q if self.t.unify(a, self.t.product([b, q])) else None

    def fail(self, message):
        self.t.fail(self.node, message)

    def fail_param(self, message):
        """Refuse the call's integer parameter (an axis, a power): the caret under it."""
        self.t.fail(self.node.children[-1], message)

    def what(self, i):
        return f"{self.t.text(self.node.children[i])} is {self.t.describe(self.kid[i])}"


def _in_use_order(definitions: dict, parse) -> list:
    """[(name, text, its parse tree or None where it does not parse)], every definition after
    the definitions its value uses, whatever order they were given in ({"p": "exp(l)",
    "l": "W@x"} is l, then p); a cycle is refused."""
    uses, trees = {}, {}
    for name, text in definitions.items():
        try:
            trees[name] = parse(text)
        except Exception:  # (typing the definition reports it, with its name)
            trees[name], uses[name] = None, set()
            continue
        stack, names = [trees[name]], set()
        while stack:
            n = stack.pop()
            if n.kind == "name":
                names.add(n.value)
            stack.extend(c for c in n.children if isinstance(c, Node))
        uses[name] = {u for u in names if u in definitions}
    order, state = [], {}

    def visit(name, path):
        if state.get(name) == "done":
            return
        if state.get(name) == "open":
            cycle = path[path.index(name):] + [name]
            if len(cycle) == 2:
                raise ShapeError(f"{name} is defined in terms of itself ({name} = {definitions[name]})")
            raise ShapeError(f"the definitions refer to each other in a circle: {' → '.join(cycle)}")
        state[name] = "open"
        for u in sorted(uses[name], key=list(definitions).index):
            visit(u, path + [name])
        state[name] = "done"
        order.append(name)

    for name in definitions:
        visit(name, [])
    return [(name, definitions[name], trees[name]) for name in order]



def _in_definition(name: str, text: str) -> str:
    """The head of an error in a definition: its text quoted (an unclosed bracket in it would
    seem to close a parenthesis around it)."""
    return f'in the definition of {name} ("{name} = {text[:60]}"): '

def _wrapped(text: str) -> bool:
    """Whether text is one parenthesised group: (a/b), not (a)/(b)."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and i < len(text) - 1:
            return False
    return True


def _lone_call_arg(node: Node):
    """The name in sqrt(d) or log(n) (an entrywise call of one name), else None."""
    if node.kind == "call" and len(node.children) == 1 and node.children[0].kind == "name":
        return node.children[0]
    return None


def _diag_args(trees, name: str) -> set:
    """The names that are the one argument of a call of name (Diag(psi)) in the trees."""
    return {n.children[0].value for t in trees for n in _walk(t)
            if n.kind == "call" and n.value == name and len(n.children) == 1 and n.children[0].kind == "name"}


def _parsed_or_none(parse, text):
    try:
        return parse(text) if isinstance(text, str) else None
    except Exception:  # (its error is raised, named, where the definition is typed)
        return None


def typecheck(ast: Node, source: str, declared: dict | None = None,
              definitions: dict | None = None, syntax: str = "matcalc", symmetric=(), sizes: bool = False) -> Typed:
    """Type ``ast``; ``definitions`` maps names to the text of their values, each may use
    the others, in any order (``{"p": "exp(l)", "l": "W@x+c"}``).  ``syntax="matlab"``: the tree
    and the definitions are in matrixcalculus.org's language.  ``sizes``: a name that is no
    symbol's or definition's but a dimension of a declared symbol the question uses is that
    dimension's size (n in sum(x**2)/n, x declared (n,)), noted; Typed.sizes lists them."""
    from .parse import parse as _parse

    def parse(text):
        return _parse(text, syntax=syntax)

    if declared is not None and not isinstance(declared, dict):
        raise ShapeError(f"shapes must be a dict name -> dimensions, got {type(declared).__name__}")
    if syntax == "matlab":
        from .matlab import MatlabTyper

        t = MatlabTyper(source, declared or {})
    else:
        t = _Typer(source, declared or {})
    # dimension names never read like a symbol (a bias b and a dimension b): skip the names used
    texts = [source] + [v for v in (definitions or {}).values() if isinstance(v, str)]
    used = {w for text in texts for w in re.findall(r"[^\W\d]\w*", text)}
    used |= {k for k in (definitions or {}) if isinstance(k, str)} | set(declared or {})
    t.user_dim_names = t.user_dim_names | used
    t.diag_name = "diag" if syntax == "matlab" else "Diag"
    dims = {f for spec in (declared or {}).values() if isinstance(spec, (tuple, list)) for d in spec
            if isinstance(d, str) for f in (d, *ir.dim_factors(d))
            if isinstance(f, str)} - set(declared or {}) - set(definitions or {})  # (t*k: t and k too)
    trees = [ast] + [d for d in (_parsed_or_none(parse, v) for v in (definitions or {}).values()) if d is not None]
    t.size_names = {id(c) for tree in trees for n in _walk(tree) if n.kind == "call" and n.value in SIZED
                    for c in n.children[SIZED[n.value]:] if c.kind == "name" and c.value in dims}
    t.diag_args = _diag_args(trees, t.diag_name)
    if sizes:
        names = {n.value for tree in trees for n in _walk(tree) if n.kind == "name"}
        t.value_dims = {d for k, spec in (declared or {}).items() if k in names and isinstance(spec, (tuple, list))
                        for d in spec if d in dims and d in names}
    t._names = (n for n in _letters() if n not in t.user_dim_names)
    parsed = []
    for name, text, tree in _in_use_order(definitions or {}, parse):
        if not isinstance(name, str) or not _is_name(name) or name in IDENTITY_NAMES:
            raise ShapeError(f"cannot define {name!r}: a definition needs a plain name (not I or eye)")
        if name in FUNCTIONS:
            raise ShapeError(f"cannot define {name!r}: it is a function name")
        if name in (declared or {}):
            raise ShapeError(f"{name} is both declared as a symbol and defined as {text!r}")
        from .errors import MatcalcError

        try:
            if not isinstance(text, str):
                raise ParseError(f"expected its value as a string, got {type(text).__name__}")
            d_ast = tree if tree is not None else parse(text)  # (parse again: its error, named)
            t.source = text
            t.type(d_ast, name)  # its own text, for carets in its errors
        except MatcalcError as e:  # say which definition the error is in
            raise type(e)(_in_definition(name, str(text)) + e.message,
                          e.source, e.start, e.end) from None
        t.def_ast[name] = d_ast
        parsed.append((name, d_ast, text))
    t.source = source
    t.type(ast)
    unused = [k for k in (declared or {}) if k not in t.sym_shape and k not in (definitions or {})
              and k not in t.identity_noted]
    undeclared = [k for k in t.sym_shape if k not in (declared or {})]
    if unused and undeclared:  # a typo (w for W) would otherwise leave a shape silently undeclared
        # (with every symbol declared, nothing was meant: one dict of shapes for many questions)
        from .errors import NotationWarning

        for name in unused:
            close = ([s for s in undeclared if s.lower() == name.lower()]
                     or difflib.get_close_matches(name, sorted(undeclared), n=1))
            t.notes.append(NotationWarning(
                f"a shape is declared for {name}, which the expression does not use"
                + (f" (did you mean {close[0]}?)" if close else f"; its symbols without a declared shape are "
                                                                f"{', '.join(undeclared)}")))
    for name in symmetric or ():  # a symmetric matrix is square
        if name in t.def_ast and name not in t.sym_shape and id(t.def_ast[name]) in t.shape:
            shape = t.shape[id(t.def_ast[name])]  # a defined matrix (a kernel K = s*A + v*I), symmetric as a wrt
            if t.is_matrix(shape) and t.unify(shape[0], shape[1]):
                continue
            raise ShapeError(f"{name} is declared symmetric, but its definition is {t.describe(shape)}, not a "
                             "square matrix")
        if name not in t.sym_shape:
            raise DeriveError(f"symmetric names {name!r}, which is not a symbol of the expression; its "
                              f"symbols are {', '.join(t.sym_shape)}")
        shape = t.sym_shape[name]
        if t.sym_kind[name] != 2 or not t.unify(shape[0], shape[1]):
            raise ShapeError(f"{name} is declared symmetric, but it is {t.describe(shape)}, not a square matrix")
    # the symbols the question uses: those of the expression and of the definitions it uses
    # (one only in a definition nothing uses takes no argument: its name is kept apart)
    in_use = t.names_used(ast)
    for name in definitions or ():  # a definition nothing uses, beside a symbol of its name in another case: a typo
        close = [] if name in in_use else [s for s in in_use if s in t.sym_shape and s not in (declared or {})
                                           and s.lower() == name.lower()]
        if close:
            from .errors import NotationWarning

            t.notes.append(NotationWarning(f"the definition of {name} is not used by the expression (did you mean "
                                           f"{close[0]}, which is a symbol there?)"))
    apart = [k for k in t.sym_shape if k not in in_use]
    user_shapes, syms = t.finish([k for k in t.sym_shape if k in in_use] + apart)
    for name, d_ast, text in parsed:
        t.source = text
        t.def_ir[name] = t.build(d_ast)
    t.source = source
    expr = t.build(ast)
    built = dict(t.def_ir)

    def with_symbol(name):
        y = ir.sym(name, built[name].shape)
        t.opaque, t.def_ir = {name: y}, {}
        try:
            for n, d_ast, text in parsed:  # (in use order: a definition after those it uses)
                t.source = text
                t.def_ir[n] = built[n] if n == name else t.build(d_ast)
            t.source = source
            return t.build(ast), dict(t.def_ir), y
        finally:
            t.opaque, t.def_ir, t.source = {}, dict(built), source

    for k in apart:
        del syms[k], user_shapes[k]
    numbers = {k: t.why_number(k) for k in syms if k not in t.declared and k not in built and k not in t.sized
               and k not in IDENTITY_NAMES and user_shapes[k] == () and t.kind_of(k) == 0}
    return Typed(expr, syms, user_shapes, source, built, list(t.notes), with_symbol, apart, dict(t.spread),
                 tuple(t.sized), numbers=numbers)
