"""The Python API: ``derive(expr, wrt, shapes=...)`` -> Derivation."""
from __future__ import annotations

import re
import warnings
from functools import cached_property

from . import ir
from .adjoint import pullback
from .differential import differential
from .errors import DeriveError, MatcalcError, NotationWarning, ShapeError, not_in_expression
from .function import GradientFunction
from .parse import parse
from .naming import REGROUP_STEP, DiffName, auto_names, definition_names, definitions_in_order, regrouped, shared_names
from .printing import dim_names, dim_sources, objective_tex, tex_name
from .printing import to_latex as _to_latex
from .printing import to_text as _to_text
from .shapes import typecheck
from .simplify import simplify, stabilize
from .optimize import optimize
from .steplog import Step



MAX_TREE = 3000  # results larger than this, written out as a tree, are printed with names
MAX_TEXT = 2000  # and so are smaller trees whose text is longer than this (characters)


def too_long(e, names) -> bool:
    """Whether e written out would be huge: a tree over MAX_TREE, or a text over MAX_TEXT
    (a smaller tree can print that long: its parts repeat; under 100 nodes it cannot)."""
    size = ir.tree_size(e)
    return size > MAX_TREE or size > 100 and len(_to_text(e, names)) > MAX_TEXT


class Derivation:
    """∂λ/∂W for one W: the gradient G with dλ = G : dW, its shape, the steps that led
    there, NumPy code and a numerical check."""

    def __init__(self, source, typed, primal, wrt, G, steps, rules, user_names, names):
        self.expr = source
        self.wrt = wrt
        self.lam = primal
        self.gradient = G
        self.shown = G  # G as printed (a defined product by its name; the code computes G)
        self.steps: list[Step] = steps
        self.rules = rules
        self.user_shapes = typed.user_shapes
        self.symbols = typed.symbols
        self._source_expr = typed.expr  # as written (before stabilize: log(det(X)) needs det > 0)
        self._spread = tuple(typed.spread)  # undeclared vectors spread over a matrix's columns (X@W + b)
        self._numbers = dict(typed.numbers)  # undeclared names that are numbers by their spelling: why
        self.shape = typed.user_shapes[wrt]
        self._user_names = user_names   # node -> name, from definitions=
        self._dims = dim_sources(typed.symbols)  # dimension -> (symbol, axis), for size(x, 0)
        self._backend_cache: dict = {}
        taken = set(typed.symbols) | set(user_names.values())
        extra = auto_names([G], taken | set(names.values()), names, key=simplify)
        self._names = {**names, **extra}  # user and automatic names, and those of their differentials
        if too_long(G, user_names):  # written out it would be huge: name the shared parts
            shared = shared_names([G], taken | set(self._names.values()), self._names)
            self._user_names = {**user_names, **shared}
            self._names.update(shared)

    @property
    def lam_symbol(self) -> str:
        """The objective's name in text: λ, or ℓ where a symbol is itself named λ or lambda
        (∂λ/∂w = 2*(lambda*w + …) read as the objective's own name; in LaTeX both are
        \\lambda, see objective_tex), or L where ℓ is a symbol too."""
        names = self._question_names
        if not {"λ", "lambda"} & names:
            return "λ"
        return next((c for c in ("ℓ", "L", "f") if c not in names), "λ")  # (ℓ a symbol too: L)

    @property
    def _lam_tex(self) -> str:
        return objective_tex(self._question_names)

    @property
    def _question_names(self) -> set:
        """The names of the symbols and dimensions of the question, as the user wrote them."""
        return (set(self.symbols) | {n for n in self._user_names.values() if isinstance(n, str)}
                | dim_names(self.user_shapes))

    def _text(self, e, names=None):
        return _to_text(e, names, self._dims)

    def _latex(self, e, names=None):
        return _to_latex(e, names, self._dims, self._symbol_tex)

    @cached_property
    def _symbol_tex(self) -> frozenset:
        """What the question's symbols and definitions typeset as (a definition named sigma too)."""
        return frozenset(tex_name(n) for n in list(self.symbols) + [v for v in self._user_names.values()
                                                                     if isinstance(v, str)])

    @cached_property
    def lam_text_short(self) -> str:
        """λ for a docstring: as the question wrote it (names of definitions= included; no
        automatic name such as p, which the docstring would not define), at most 200 characters."""
        t = " ".join(self.expr.split())
        return t if len(t) <= 200 else t[:150] + " … " + t[-40:]

    syntax = "matcalc"  # the language of the question; results print in it

    def _print(self, e, names=None, step=False) -> str:
        if self.syntax == "matlab":
            from .matlab import to_matlab

            return to_matlab(e, names, colon=step, dims=self._dims)
        return self._text(e, names)

    # ---- the answer
    @cached_property
    def text(self) -> str:
        """G in matcalc syntax (using the names of ``definitions=``, if any)."""
        return self._print(self.shown, self._user_names)

    @cached_property
    def latex(self) -> str:
        return self._latex(self.shown, self._user_names)

    def _definitions(self, printer):
        """[(name, its value printed with the other names)], each after those it uses."""
        prim = self._prim_names()
        return [(name, printer(node, {k: v for k, v in prim.items() if k is not node}))
                for name, node in definitions_in_order(prim)]

    @property
    def definitions(self) -> dict:
        """The named quantities the short form and the steps use: name -> text."""
        return dict(self._definitions(self._print))

    def short_definitions(self, latex: bool = False) -> dict:
        """The definitions the short form uses, and those their values use: name -> text
        (LaTeX with latex=True, keyed by the LaTeX name)."""
        prim = self._prim_names()
        written = dict(definitions_in_order(prim))  # name -> the node its definition writes
        used, todo = set(), [self.shown]
        while todo:  # the names in G, and those their written values use
            for n in ir.walk(todo.pop()):
                if n in prim and prim[n] not in used:
                    used.add(prim[n])
                    todo.append(written[prim[n]])
        if latex:
            return {tex_name(k): v for k, v in self._definitions(self._latex) if k in used}
        return {k: v for k, v in self._definitions(self._print) if k in used}

    @cached_property
    def short_text(self) -> str:
        """G written with the short names of ``definitions`` (z, p, h, …)."""
        return self._print(self.shown, self._names)

    @cached_property
    def short_latex(self) -> str:
        return self._latex(self.shown, self._names)

    def layout(self, convention: str = "denominator"):
        """(text, shape) of ∂λ/∂W in a layout convention: ``denominator`` (the gradient, W's
        shape, the default) or ``numerator`` (its transpose: a row for a vector W)."""
        if convention == "denominator":
            return self.text, self.shape
        if convention != "numerator":
            raise DeriveError(f"layout must be 'numerator' or 'denominator', not {convention!r}")
        from .simplify import s_T

        GT = s_T(self.shown)
        shape = self.shape[::-1] if len(self.shape) == 2 else ((1,) + self.shape if self.shape else ())
        return self._print(GT, self._user_names), shape

    @property
    def shape_reason(self) -> str:
        L = self.lam_symbol
        if not self.shape:
            return f"{L} and {self.wrt} are scalars, so ∂{L}/∂{self.wrt} is a scalar"
        dw = f"d({self.wrt})" if "d" + self.wrt in self.user_shapes else f"d{self.wrt}"  # (a symbol dW)
        return (f"{L} is a scalar, so ∂{L}/∂{self.wrt} has the shape of {self.wrt}: in "
                f"d{L} = (∂{L}/∂{self.wrt}):{dw} the gradient pairs entry by entry with {dw}")

    @property
    def shape_text(self) -> str:
        return shape_str(self.shape)

    def __repr__(self):
        return f"<Derivation ∂{self.lam_symbol}/∂{self.wrt} = {self.text}, shape {self.shape_text}>"

    def __str__(self):
        return f"∂{self.lam_symbol}/∂{self.wrt} = {self.text}\nshape: {self.shape_text} (the shape of {self.wrt})"

    def _repr_latex_(self):
        return (f"$\\frac{{\\partial {self._lam_tex}}}{{\\partial {tex_name(self.wrt)}}} = {self.latex}"
                f"\\quad \\text{{shape }} {shape_tex(self.shape)}$")

    # ---- the derivation
    def derivation_lines(self) -> list[str]:
        """The derivation as a student writes it, one line per step."""
        L = self.lam_symbol
        lines = [f"{L} = {self._print(self.lam, self._prim_names())}"]
        if self.definitions:
            lines.append("where " + ", ".join(f"{k} = {v}" for k, v in self.definitions.items()))
        for i, (st, text) in enumerate(self._shown_steps):
            prefix = f"d{L} = " if i == 0 else "   = "
            lines.append(f"{prefix}{text}    [{st.identity}]")
        if not self.steps:
            lines.append(f"d{L} = 0    [{L} does not change with {self.wrt}]")
        lines.append(f"∂{L}/∂{self.wrt} = {self.short_text}")
        lines.append(f"shape: {self.shape_text}; {self.shape_reason}")
        if self.symmetric_note:
            lines.append(self.symmetric_note)
        return lines

    symmetric = ()  # the symbols declared symmetric (symmetric=[...])

    @property
    def symmetric_note(self) -> str:
        """What a symmetric wrt means for its gradient ('' unless wrt was declared symmetric)."""
        from .symmetric import NOTE

        return NOTE.format(S=self.wrt) if self.wrt in self.symmetric else ""

    @cached_property
    def _shown_steps(self) -> list:
        """[(step, its text)] without a step that reads as the line before it (a scalar moved
        across ':' in a product that prints the same either way): a line that repeats the
        last one, under an identity's name, only puzzles a reader."""
        shown, last = [], None
        for st in self.steps:
            text = self._print(st.after, self._step_names(st), True)
            if text != last:
                shown.append((st, text))
            last = text
        return shown

    def _step_names(self, step):
        """The names a step is printed with: all but those written out by then."""
        return {k: v for k, v in self._names.items() if k not in step.expanded}

    def _names_before(self, step):
        """The names ``step``'s expression before it is printed with: those of the step before
        (a step that writes dz out has dz in its before, p*dz in its after)."""
        i = next(k for k, st in enumerate(self.steps) if st is step)
        return self._step_names(self.steps[i - 1]) if i else self._names

    def _prim_names(self):
        return {k: v for k, v in self._names.items() if not isinstance(v, DiffName)}

    @cached_property
    def steps_latex(self) -> str:
        """The whole derivation as one LaTeX ``aligned`` block, identities as \\text{}."""
        rows = [f"{self._lam_tex} &= {self._latex(self.lam, self._prim_names())}"]
        for name, tex in self._definitions(self._latex):
            rows.append(f"{tex_name(name)} &= {tex}")
        for i, (st, _) in enumerate(self._shown_steps):
            lhs = f"\\mathrm{{d}}{self._lam_tex} &= " if i == 0 else "&= "
            shown = self._step_names(st)
            note = st.identity_latex or f"\\text{{{_tex_escape(st.identity)}}}"
            rows.append(f"{lhs}{self._latex(st.after, shown)} && {note}")
        rows.append(f"\\frac{{\\partial {self._lam_tex}}}{{\\partial {tex_name(self.wrt)}}} &= {self.short_latex}"
                    f" && \\text{{shape }} {shape_tex(self.shape)}")
        return "\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}"

    def _repr_markdown_(self):
        head = (f"$$\\frac{{\\partial {self._lam_tex}}}{{\\partial {tex_name(self.wrt)}}} = {self.latex}"
                f"\\qquad \\text{{shape }} {shape_tex(self.shape)}$$")
        return (head + "\n\n<details><summary>derivation</summary>\n\n$$" + self.steps_latex
                + "$$\n\n</details>\n")

    # ---- code
    _subst = None  # {symbol of a defined wrt: its value}: the emitted code takes the leaves

    def _leaves(self, e):
        return e if not self._subst else substitute(e, self._subst)

    @cached_property
    def _params(self):
        """The emitted function's arguments: every symbol (a defined wrt is computed inside)."""
        return [k for k in self.user_shapes if not (self._subst and k == self.wrt)]

    @cached_property
    def numpy_source(self) -> str:
        from .codegen import module_source

        return module_source([self._grad_source[0]])

    @cached_property
    def _grad_source(self):
        from .codegen import function_source, sanitize

        fname = "grad_" + sanitize([self.wrt])[self.wrt].strip("_")
        doc = f"∂λ/∂{self.wrt} for λ = {self.lam_text_short}; shape {self.shape_text}."
        symbols = {k: v for k, v in self.symbols.items() if k in self._params}
        outputs = optimize([self._leaves(self.gradient)])  # the optimize stage's passes, in order
        return function_source(fname, outputs, self._params, symbols, doc, optimized=True,
                               declared=self.user_shapes, shaped_like=[self.wrt]) + (fname,)

    @cached_property
    def function(self) -> GradientFunction:
        src, params, fname = self._grad_source
        shapes = {k: self.user_shapes[k] for k in self._params}
        f = GradientFunction(self.numpy_source, fname, params, shapes, self.shape)
        f.wrt = self.wrt if self.wrt in shapes else None
        f.spread, f.symmetric, f.numbers = self._spread, self.symmetric, self._numbers
        return f

    @cached_property
    def _check_function(self) -> GradientFunction:
        """The gradient as a function of every symbol, a defined wrt included (for the check),
        with fixed forms: the check's figures are the same on every run."""
        if not self._subst:
            f = self.function
            fixed = GradientFunction(self.numpy_source, f.name, f.params, f.user_shapes, self.shape, fixed_forms=True)
            fixed.wrt = f.wrt
            return fixed
        from .codegen import function_source, module_source

        src, params = function_source("grad", optimize([self.gradient]), list(self.user_shapes), self.symbols,
                                      "G", optimized=True, declared=self.user_shapes, shaped_like=[self.wrt])
        return GradientFunction(module_source([src]), "grad", params, self.user_shapes, self.shape,
                                fixed_forms=True)

    def source(self, backend: str = "numpy") -> str:
        """The gradient as a standalone module for ``backend``: ``"numpy"`` (the default,
        ``numpy_source``), ``"torch"`` or ``"jax"`` (framework ops only: runs on GPU tensors
        and under ``jax.jit``)."""
        from .backends import check_backend

        if check_backend(backend) == "numpy":
            return self.numpy_source
        return self._backend_source(backend)[0]

    def _backend_source(self, backend):
        if backend not in self._backend_cache:
            from .backends import function_source, module_source

            fname = self._grad_source[2]
            doc = f"∂λ/∂{self.wrt} for λ = {self.lam_text_short}; shape {self.shape_text}."
            src, params = function_source(backend, fname, [self._leaves(self.gradient)], self._params, self.symbols, doc,
                                          declared=self.user_shapes, shaped_like=[self.wrt])
            self._backend_cache[backend] = (module_source(backend, [src]), params, fname)
        return self._backend_cache[backend]

    def callable(self, backend: str = "numpy"):
        """The gradient as a function of keyword arrays: ``function`` for ``"numpy"``; for
        ``"torch"`` / ``"jax"`` a function of the framework's tensors (vectors 1-D)."""
        from .backends import BackendFunction, check_backend, require

        if check_backend(backend) == "numpy":
            return self.function
        require(backend)
        src, params, fname = self._backend_source(backend)
        f = BackendFunction(backend, src, fname, params, self.user_shapes)
        f.wrt = self.wrt
        return f

    def to_sympy(self):
        """The gradient as a SymPy matrix expression (MatrixSymbol, HadamardProduct, Trace,
        Inverse, …; elementwise functions as ElementwiseApplyFunction)."""
        from .sympy_bridge import to_sympy

        return to_sympy(self.gradient, self.symbols)

    @cached_property
    def value_function(self) -> GradientFunction:
        """λ itself as a NumPy function (used by the check: fixed forms, the same figures on
        every run); a defined wrt is an argument."""
        from .codegen import function_source, module_source

        src, params = function_source("value", self._value_ir, list(self.user_shapes),
                                      self.symbols, "λ", optimized=True, declared=self.user_shapes)
        return GradientFunction(module_source([src]), "value", params, self.user_shapes, fixed_forms=True)

    @cached_property
    def _value_ir(self) -> list:
        """λ as value_function computes it."""
        return optimize([simplify(self.lam)])

    def check(self, seed: int = 0, tol: float = 1e-5, draws: int = 2, domain: dict | None = None,
              sizes: dict | None = None, exact: bool = False):
        """Compare ``function`` with central finite differences of λ on random inputs; with
        ``exact=True``, verify G entry by entry with SymPy at small concrete sizes instead."""
        if exact:
            from .sympy_bridge import exact_check

            return exact_check(self, seed=seed, sizes=sizes, domain=domain)
        from .check import gradient_check

        return gradient_check(self.value_function, self._check_function, self.wrt, self.user_shapes,
                              self.symbols, ir.add(self.lam, self._source_expr), self.symmetric,
                              seed=seed, tol=tol, draws=draws, domain=domain, sizes=sizes,
                              reads={n.attr for n in ir.symbols(self._value_ir[0])})

    def to_dict(self, check=None) -> dict:
        out = {"wrt": self.wrt, "expr": self.expr, "gradient": self.text, "latex": self.latex,
               "shape": list(self.shape), "shape_text": self.shape_text,
               "steps": [{"before": self._print(s.before, self._names_before(s), True),
                          "after": text, "identity": s.identity} for s, text in self._shown_steps],
               "numpy_source": self.numpy_source, "short_gradient": self.short_text,
               "definitions": self.definitions, "shape_reason": self.shape_reason,
               "numerator_layout": {"gradient": self.layout("numerator")[0],
                                    "shape": list(self.layout("numerator")[1])}}
        if self.symmetric:
            out["symmetric"] = list(self.symmetric)
            out["symmetric_note"] = self.symmetric_note
        if check is not None:
            out["check"] = check.to_dict()
        return out


def _tex_escape(s: str) -> str:
    return (s.replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("%", "\\%")
             .replace("#", "\\#").replace("&", "\\&").replace("$", "\\$"))


class Results(dict):
    """The results of one question for several variables (derive, hessian and jacobian with a
    list of wrt), by variable (by pair for a Hessian's blocks): a dict, which Jupyter shows as
    each result in turn."""

    def _repr_markdown_(self):
        return "\n\n".join(v._repr_markdown_() for v in self.values())


def shape_str(shape) -> str:
    if len(shape) == 0:
        return "scalar"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def shape_tex(shape) -> str:
    if len(shape) == 0:
        return "\\text{scalar}"
    return " \\times ".join(str(d) for d in shape)


def derive(expr: str, wrt, shapes: dict | None = None, definitions: dict | None = None,
           where: dict | None = None, *, syntax: str = "matcalc", symmetric=None, form=None):
    """Differentiate the scalar ``expr`` with respect to ``wrt`` (a name or a list of names).

    ``expr`` may also be a SymPy expression built from MatrixSymbols (an n×1 one is a
    vector, a 1×1 one a scalar); ``wrt`` is then a name or a MatrixSymbol.

    ``shapes`` declares shapes (``{"W": ("a", "b"), "alpha": ()}``); ``definitions`` (or
    ``where``) names intermediate quantities (``{"l": "W@x+c", "p": "exp(l)"}``), which
    ``expr`` may use and which the result and the steps are written with.
    ``syntax="matlab"`` reads ``expr`` (and the definitions) in matrixcalculus.org's
    language (``*`` the matrix product, ``.*`` entrywise, ``'`` transpose) and prints the
    results in it.
    Returns a Derivation, or a dict name -> Derivation when ``wrt`` is a list."""
    if definitions is not None and where is not None:
        raise DeriveError("give definitions= or where=, not both")
    definitions = definitions if definitions is not None else where
    expr, wrt, shapes = as_text(expr, wrt, shapes)
    symmetric = symmetric_names(symmetric)
    if form not in (None, "diag"):
        raise DeriveError(f"form must be None or 'diag', not {form!r}")
    options = {"syntax": syntax, "symmetric": symmetric, "form": form}
    if isinstance(wrt, (list, tuple)):
        if not wrt:
            raise DeriveError("wrt is empty: name at least one symbol")
        typed = _typed(expr, shapes, definitions, syntax, symmetric, wrt)
        return Results({w: _derive_one(expr, typed, w, **options) for w in wrt})
    return _derive_one(expr, _typed(expr, shapes, definitions, syntax, symmetric, (wrt,)), wrt, **options)


def as_text(expr, wrt, shapes):
    """(expr, wrt, shapes) as matcalc text and names: a SymPy matrix expression becomes text,
    with the shapes of its MatrixSymbols; anything else is returned as it is."""
    if not isinstance(expr, str) and type(expr).__module__.startswith("sympy"):
        from .sympy_bridge import from_sympy

        return from_sympy(expr, wrt, shapes)
    return expr, wrt, shapes


def symmetric_names(symmetric) -> tuple:
    """``symmetric=`` as a tuple of names (None: none; one name: itself)."""
    if symmetric is None:
        return ()
    if isinstance(symmetric, str):
        symmetric = (symmetric,)
    if not isinstance(symmetric, (list, tuple, set, frozenset)) or not all(isinstance(n, str) for n in symmetric):
        raise DeriveError(f"symmetric must be a list of symbol names, got {symmetric!r}")
    return tuple(symmetric)


def _typed_any(expr, shapes, definitions=None, syntax="matcalc", symmetric=(), scalar=False):
    """The typed IR of an expression of any shape (``scalar``: a scalar λ is asked for).
    Where the question is refused as typed (or, for λ, is not a scalar), a name that is a
    declared dimension and no symbol's is read as that size, if the question then is typed
    (for λ, a scalar: sum((X@w - y)**2)/n with X declared (n, d))."""
    if definitions is not None and not isinstance(definitions, dict):
        raise DeriveError("definitions must be a dict name -> expression text")
    if not isinstance(expr, str):
        raise DeriveError(f"the expression must be text, got {type(expr).__name__}")
    ast = parse(expr, syntax=syntax)
    try:
        typed = typecheck(ast, expr, shapes, definitions, syntax=syntax, symmetric=symmetric)
        refused = None
    except ShapeError as e:
        typed, refused = None, e
    if refused is not None or scalar and typed.expr.shape != ir.SCALAR:
        try:
            sized = typecheck(ast, expr, shapes, definitions, syntax=syntax, symmetric=symmetric, sizes=True)
        except MatcalcError:
            sized = None
        if sized is not None and sized.sizes and (not scalar or sized.expr.shape == ir.SCALAR):
            typed, refused = sized, None
    if refused is not None:
        raise refused
    for note in typed.notes or ():
        warnings.warn(note, stacklevel=4)
    return typed


def _typed(expr, shapes, definitions=None, syntax="matcalc", symmetric=(), wrt=()):
    typed = _typed_any(expr, shapes, definitions, syntax, symmetric, scalar=True)
    if typed.expr.shape != ir.SCALAR:
        scalar = "sum(...) or G:(...) make a scalar" if syntax == "matcalc" else \
            "sum(...), x'*y or tr(...) make a scalar"
        scalar += "; jacobian (matcalc jacobian) differentiates an array-valued F"
        raise ShapeError(f"λ must be a scalar, but the expression is {ir.describe(typed.expr.shape)} "
                         f"({scalar}{_scalar_hint(expr, typed, shapes, definitions, syntax, symmetric, wrt)})",
                         expr, 0, len(expr.rstrip()))
    return typed


def _scalar_hint(expr, typed, shapes, definitions, syntax, symmetric, wrt=()) -> str:
    """How the question may have meant a scalar λ: a name that is a vector only by its spelling
    (lam, reg, c; not a wrt) declared a number, or * read as MATLAB's matrix product (x'*A*x).
    Each try types the question again: at most HINT_TRIES of them (a count, not a time: the
    hint is the same on a busy machine)."""
    from .shapes import default_kind

    left = [HINT_TRIES]

    def scalar_with(declared, syn=syntax):
        return _scalar_text(expr, declared, definitions, syn, symmetric)

    def first(tries):
        """The hint of the first (declaration, hint) that makes λ a scalar; "" once the tries
        are spent; None if none does."""
        for declared, hint in tries:
            if left[0] <= 0:
                return ""
            left[0] -= 1
            if scalar_with({**shapes, **declared}):
                return hint
        return None

    shapes = dict(shapes or {}) if isinstance(shapes, dict) else {}
    colon = _colon_reading(expr, syntax)
    if colon is not None and _scalar_text(colon, shapes, definitions, syntax, symmetric):
        return f"; : binds tighter than + and -: for the inner product of the sum write {colon}"
    if syntax == "matcalc" and re.search(r"@\s*1\s*$", expr) and typed.expr.shape[1] == 1:  # x@1 (NumPy: a sum)
        return "; X@1 is the row sums of X, and a column's own entries: for a vector's sum write sum(x) or x.T@1"
    if "e" not in shapes and re.search(r"(?<![\w.])e\s*(\^|\*\*)", expr):
        return "; e is a symbol here: for the exponential write exp(...)"
    if syntax == "matlab":  # sum(X)*x: MATLAB's column sums meant, where the MATLAB syntax sums every entry
        for text, call in _column_sums(expr):
            if left[0] > 0 and _scalar_text(text, shapes, definitions, syntax, symmetric):
                return (f"; {call} of a matrix is over every entry here, as on matrixcalculus.org: MATLAB's "
                        f"{call}, the row of its columns' {call.split('(')[0]}s, is {call[:-1]}, 1)")
            left[0] -= 1
    spelled = [n for n in typed.symbols if n not in shapes and n not in wrt and default_kind(n) == 1]
    hint = first(({name: ()}, f"; {name} is a vector by the spelling of its name: declared a number "
                              f"(shapes={{'{name}': ()}}, --shape {name}=scalar), it makes λ a scalar")
                 for name in spelled[:12])
    def two_numbers(a, b):  # (the declaration of both, its hint)
        return {a: (), b: ()}, (f"; {a} and {b} are vectors by the spelling of their names: declared numbers "
                                f"(shapes={{'{a}': (), '{b}': ()}}, --shape {a}=scalar --shape {b}=scalar), "
                                f"they make λ a scalar")

    if hint is None:  # softplus(-R@w - t)/(n*(1 - beta)): two of them
        hint = first(two_numbers(a, b) for i, a in enumerate(spelled[:8]) for b in spelled[i + 1:8])
    from .shapes import greek

    dim = next(d for d in ("n", "m", "k", "p") if d not in typed.symbols)
    if hint is None:  # mu'*w: mu a vector
        hint = first(({name: (dim,)}, f"; {name} is a number by its Greek name: declared a vector "
                                      f"(shapes={{'{name}': ('{dim}',)}}, --shape {name}={dim}), it makes λ a scalar")
                     for name in [n for n in typed.symbols if n not in shapes and greek(n)][:12])
    if hint is not None:
        return hint
    if syntax == "matlab":  # a'*X*b: a–g are numbers by the MATLAB syntax's naming
        from .matlab import matlab_kind

        numbers = [n for n in typed.symbols if n not in shapes and matlab_kind(n) == 0 and not greek(n)]
        for dims in (["m", "n", "k", "p", "q", "r", "s"], ["n"] * 7):  # (a'*inv(X)*b: one length)
            declared = {name: (d,) for name, d in zip(numbers, dims)}
            if numbers and len(numbers) <= len(dims) and scalar_with({**shapes, **declared}):
                return (f"; in the MATLAB syntax a–g are numbers, as on matrixcalculus.org: declare "
                        f"{', '.join(numbers)} {'a vector' if len(numbers) == 1 else 'vectors'} "
                        f"({' '.join(f'--shape {n}={d[0]}' for n, d in declared.items())}; "
                        f"shapes={{{', '.join(f'{n!r}: {d!r}' for n, d in declared.items())}}}) to make λ a scalar")
    at = _at_for_star(expr, lambda text: _scalar_text(text, shapes, definitions, syntax, symmetric), left) \
        if syntax == "matcalc" and ("'" not in expr or "@" in expr) else None
    if at is not None:  # x.T*A*x: x.T@A@x meant
        return f"; * is the entrywise product here: for the matrix product write {at.strip()}"
    if syntax == "matcalc" and ("*" in expr or "'" in expr) and scalar_with(shapes, "matlab"):
        return ("; * is the entrywise product here: write @ for the matrix product, or read the "
                "question in MATLAB syntax (--syntax matlab, syntax='matlab')")
    hint = first(({name: ()}, f"; {name} is a matrix by the spelling of its name (upper case): declared a number "
                              f"(shapes={{'{name}': ()}}, --shape {name}=scalar), it makes λ a scalar")
                 for name in [n for n in typed.symbols if n not in shapes and n not in wrt and default_kind(n) == 2][:6]
                 )  # (sum(x)/N, -T*logsumexp(-e/T): a number named in upper case)
    if hint is None:  # n/2*log(s2) + ...(2*s2), wrt s2: a count and the wrt, both numbers
        ws = [w for w in typed.symbols if w in wrt and w not in shapes and default_kind(w) == 1]
        hint = first(two_numbers(a, w) for w in ws for a in spelled[:8])
    return hint or ""


def _column_sums(expr: str):
    """(expr with one sum(A) or mean(A) as sum(A, 1), the call as written) for each such call
    with one argument: MATLAB's sums down the columns."""
    for m in re.finditer(r"(?<![\w.])(sum|mean)\s*\(", expr):
        depth, i = 1, m.end()
        while i < len(expr) and depth:
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            if depth == 1 and expr[i] == ",":
                break
            i += 1
        if depth == 0:  # (i is past the closing bracket)
            yield expr[:i - 1] + ", 1" + expr[i - 1:], expr[m.start():i]


HINT_TRIES = 160  # typings of a refused question that a hint may try (about 1-2 ms each)


def _at_for_star(expr: str, scalar, left: list, most: int = 6):
    """The text with the fewest of its entrywise * written @ that makes λ a scalar (x.T*A*x:
    x.T@A@x; 2*x.T*y: 2*x.T@y, the number's * kept), or None; tries subsets of at most
    ``most`` stars, while left[0] tries are left (each spends one)."""
    import itertools

    stars = [m.start() for m in re.finditer(r"(?<![*])\*(?![*])", expr)]
    if not stars or len(stars) > most:
        return None
    for k in range(1, len(stars) + 1):
        for chosen in itertools.combinations(stars, k):
            if left[0] <= 0:
                return None
            left[0] -= 1
            text = "".join("@" if i in chosen else ch for i, ch in enumerate(expr))
            if scalar(text):
                return text
    return None


def _colon_reading(expr: str, syntax: str):
    """The text with the brackets a sum ending in a : product was probably meant to have
    (x - y:1 is x - (y:1); (x - y):1 was meant), or None."""
    if syntax != "matcalc":
        return None
    try:
        root = parse(expr)
    except MatcalcError:
        return None
    if root.kind != "add" or root.children[-1].kind != "frob":
        return None
    left, right = root.children[-1].children
    return f"({expr[root.start:left.end].strip()}):{expr[right.start:right.end].strip()}"


def _scalar_text(text, shapes, definitions, syntax, symmetric) -> bool:
    """Whether text types as a scalar with these declarations (a refusal: no)."""
    try:
        return typecheck(parse(text, syntax=syntax), text, shapes, definitions, syntax=syntax,
                         symmetric=symmetric).expr.shape == ir.SCALAR
    except MatcalcError:
        return False


def differential_free(typed, wrt):
    """Refuse a symbol named d<wrt>: it would read as the differential of wrt in the result."""
    if "d" + wrt in typed.symbols:
        raise DeriveError(f"the symbol d{wrt} would read as the differential of {wrt} in the result "
                          f"(d{wrt} is reserved there): rename it")


def _derive_one(expr, typed, wrt, syntax="matcalc", symmetric=(), form=None) -> Derivation:
    if not isinstance(wrt, str):
        raise DeriveError(f"wrt must be a symbol name, got {wrt!r}")
    subst = None
    if wrt in (typed.definitions or {}) and wrt not in typed.symbols:
        typed, subst = _intermediate(typed, wrt)
    if (wrt in typed.symbols or wrt in typed.unused) and not any(s.attr == wrt for s in ir.symbols(typed.expr)):
        users = [k for k, v in (typed.definitions or {}).items() if any(s.attr == wrt for s in ir.symbols(v))]
        where = (f"occurs only in the definition of {', '.join(users)}, which the expression does not use"
                 if users else "is defined but the expression does not use it" if subst is not None
                 else "occurs only where its values do not matter (its size)")
        at = None if users or subst is not None else re.search(rf"size\(\s*{re.escape(wrt)}\b[^)]*\)", expr)
        raise DeriveError(f"{wrt} {where}: ∂λ/∂{wrt} would be 0", expr, *(at.span() if at else (0, len(expr.rstrip()))))
    if wrt not in typed.symbols:
        raise not_in_expression(wrt, typed.symbols)
    if symmetric:
        from .symmetric import use_symmetry

        typed = _use_symmetry(typed, symmetric)
    primal = stabilize(typed.expr)
    user_names = definition_names(typed.definitions)
    dlam, rules, dmemo = differential(primal, wrt)
    names = dict(user_names)
    roots = [primal] if dlam is None else [primal, dlam]
    names.update(auto_names(roots, set(typed.symbols) | set(user_names.values()), user_names, key=simplify))
    for node, name in list(names.items()):
        dn = dmemo.get(node)
        if dn is not None and dn.op != "delta" and dn not in names:
            names[dn] = DiffName(name)
    dW = ir.delta(wrt, typed.symbols[wrt].shape)
    G, steps = pullback(dlam, dW, names=names, dims=dim_sources(typed.symbols))
    if dlam is not None:
        d_of = ir.differential_of(primal)
        steps.insert(0, Step(d_of, dlam, "differential: " + "; ".join(rules), frozenset(),
                             "\\text{differential}"))
    if symmetric:
        from .adjoint import term
        from .symmetric import symmetrize

        G0, G = G, (symmetrize(G, symmetric) if wrt in symmetric else use_symmetry(G, symmetric))
        if G is not G0 and wrt in symmetric:
            hidden = steps[-1].expanded if steps else frozenset()
            steps.append(Step(term(G0, dW), term(G, dW), f"d{wrt} symmetric: G:d{wrt} = sym(G):d{wrt}, "
                              "sym(G) = (G + Gᵀ)/2", hidden,
                              f"\\text{{d{wrt} symmetric: }} G:\\mathrm{{d}}{wrt} = \\tfrac12(G + G^{{\\top}}):"
                              f"\\mathrm{{d}}{wrt}"))
    if form == "diag" or any(node.op == "Diag" for node in user_names):
        from .adjoint import term
        from .diagform import IDENTITY, IDENTITY_LATEX, diag_form, diag_name

        G0 = G
        G, made = diag_form(G, names, everywhere=form == "diag")
        if G is not G0:
            taken = set(typed.symbols) | set(names.values())
            shown = []
            for D in made:
                if D not in names:
                    names[D] = diag_name(D, names, taken)
                    taken.add(names[D])
                shown.append(f"{names[D]} = Diag({_to_text(D.args[0], names, dim_sources(typed.symbols))})")
            hidden = steps[-1].expanded if steps else frozenset()
            steps.append(Step(term(G0, dW), term(G, dW), f"{IDENTITY}: {', '.join(shown)}", hidden,
                              IDENTITY_LATEX))
    G0, G = G, regrouped(G, user_names, products=False)  # x + h*tanh(W@x + b) - y: x2 - y (the code's too)
    G_shown = regrouped(G, user_names)  # and -2*X.T@Z@g for g = Z.T@(y - X@b): printed only
    if G_shown is not G0:
        from .adjoint import term

        hidden = steps[-1].expanded if steps else frozenset()
        steps.append(Step(term(G0, dW), term(G_shown, dW), REGROUP_STEP[0], hidden, REGROUP_STEP[1]))
    if "d" + wrt in typed.symbols:  # a symbol named dW: the steps write W's differential d(W)
        names[dW] = DiffName(wrt, f"d({wrt})")
    if wrt in typed.spread and G.op == "const" and G.attr == 0.0:  # X@W + b, b per row, under softmax(·, 1)
        message, start, end = typed.spread[wrt]
        if wrt == next(iter(typed.spread)):  # (its note was given: one, on the first spread vector)
            message = f"{wrt} is a column spread over the columns (the note on {wrt} says what NumPy does instead)"
        warnings.warn(NotationWarning(f"∂λ/∂{wrt} is 0 everywhere: {message}", expr, start, end), stacklevel=3)
    d = Derivation(expr, typed, primal, wrt, G, steps, rules, user_names, names)
    d.shown = G_shown
    d.syntax = syntax
    d._subst = subst
    d.symmetric = tuple(symmetric)
    return d


def _use_symmetry(typed, symmetric):
    from dataclasses import replace

    from .symmetric import use_symmetry

    defs = {k: use_symmetry(v, symmetric) for k, v in (typed.definitions or {}).items()}
    return replace(typed, expr=use_symmetry(typed.expr, symmetric), definitions=defs)


def substitute(root: ir.Expr, mapping: dict) -> ir.Expr:
    """``root`` with every node that is a key of ``mapping`` replaced by its value."""
    out: dict = {}
    for n in ir.walk(root):
        if n in mapping:
            out[n] = mapping[n]
        elif n.args:
            args = tuple(out[a] for a in n.args)
            out[n] = n if all(a is b for a, b in zip(args, n.args)) else ir.Expr(n.op, args, n.attr, n.shape)
        else:
            out[n] = n
    return out[root]


def _intermediate(typed, name):
    """∂λ/∂y for a defined y (``definitions={"y": "W@x+b"}``): y becomes a symbol of its shape,
    its inputs held fixed (dL/dy, as backprop asks).  Returns the retyped expression and
    {y's symbol: its value}, which the emitted code substitutes so it takes the leaves."""
    from dataclasses import replace

    value = typed.definitions[name]
    r, c = value.shape
    expr, definitions, y = typed.with_symbol(name)  # (a literal copy of the value elsewhere is no y)
    del definitions[name]
    user = () if value.shape == ir.SCALAR else ((r,) if c == 1 else (r, c))
    return replace(typed, expr=expr, symbols={**typed.symbols, name: y},
                   user_shapes={**typed.user_shapes, name: user}, definitions=definitions,
                   held=typed.held + (name,)), {y: value}




class ValueAndGrad:
    """λ and its gradients for several variables from one emitted function that shares
    the forward pass: ``function(**inputs) -> (value, {name: gradient})``."""

    def __init__(self, derivations: dict):
        from .codegen import function_source, module_source

        self.derivations = derivations
        first = next(iter(derivations.values()))
        self.expr, self.lam = first.expr, first._leaves(first.lam)
        self.user_shapes = {k: v for k, v in first.user_shapes.items() if k in first._params}
        self.symbols = {k: v for k, v in first.symbols.items() if k in first._params}
        names = list(derivations)
        outputs = [simplify(self.lam)] + [d._leaves(d.gradient) for d in derivations.values()]

        def returns(results):
            grads = ", ".join(f"{n!r}: {r}" for n, r in zip(names, results[1:]))
            return f"{results[0]}, {{{grads}}}"

        doc = f"λ and its gradients wrt {', '.join(names)}, for λ = {first.lam_text_short}."
        src, params = function_source("value_and_grad", optimize(outputs), list(self.user_shapes), self.symbols,
                                      doc, returns=returns, optimized=True, declared=self.user_shapes,
                                      shaped_like=[None] + names)
        self.numpy_source = module_source([src])
        self.function = GradientFunction(self.numpy_source, "value_and_grad", params, self.user_shapes)
        self.function.grads_like = tuple(n for n in names if n in self.user_shapes)
        self.function.spread, self.function.symmetric = first._spread, first.symmetric
        self.function.numbers = first._numbers
        self._emit_args = (outputs, doc, returns)

    def source(self, backend: str = "numpy") -> str:
        """The module of ``function`` for ``"numpy"`` (the default), ``"torch"`` or ``"jax"``."""
        from .backends import check_backend, function_source, module_source

        if check_backend(backend) == "numpy":
            return self.numpy_source
        outputs, doc, returns = self._emit_args
        src, _ = function_source(backend, "value_and_grad", outputs, list(self.user_shapes), self.symbols,
                                 doc, returns=returns, declared=self.user_shapes,
                                 shaped_like=[None] + list(self.derivations))
        return module_source(backend, [src])

    def callable(self, backend: str = "numpy"):
        """``function`` for ``"numpy"``; for ``"torch"`` / ``"jax"`` the same function of the
        framework's tensors: ``(value, {name: gradient})``."""
        from .backends import BackendFunction, check_backend, require
        from .codegen import sanitize

        if check_backend(backend) == "numpy":
            return self.function
        require(backend)
        f = BackendFunction(backend, self.source(backend), "value_and_grad", sanitize(list(self.user_shapes)),
                            self.user_shapes)
        f.grads_like = self.function.grads_like
        return f

    def __getitem__(self, name):
        return self.derivations[name]

    def __repr__(self):
        return f"<ValueAndGrad of λ = {_to_text(self.lam)} wrt {', '.join(self.derivations)}>"

    def __str__(self):
        return "\n".join(f"∂λ/∂{k} = {d.text}" for k, d in self.derivations.items())

    def _repr_markdown_(self):  # (Jupyter: each gradient, its derivation folded)
        return "\n\n".join(d._repr_markdown_() for d in self.derivations.values())


def value_and_grad(expr: str, wrt, shapes: dict | None = None, definitions: dict | None = None,
                   where: dict | None = None, **options) -> ValueAndGrad:
    """One NumPy function returning λ and ∂λ/∂w for every w in ``wrt`` (a name or a list);
    ``options`` are derive()'s keywords (``syntax=``, …)."""
    ds = derive(expr, wrt=list(wrt) if isinstance(wrt, (list, tuple)) else [wrt], shapes=shapes,
                definitions=definitions, where=where, **options)
    return ValueAndGrad(ds)


__all__ = ["derive", "value_and_grad", "Derivation", "ValueAndGrad", "GradientFunction", "MatcalcError"]
