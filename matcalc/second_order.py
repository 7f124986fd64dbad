"""Jacobians and Hessians in the differential style.

``jacobian(F, wrt)``: dF = J[dW], the differential of an array-valued F, kept in matrix
notation with dW inside (dF = dW@x); ``hessian(λ, wrt)``: the second differential
d²λ = d(G:dW) = dG:dW (d(dW) = 0 for the variable), so H[dW] = dG, the differential of
the gradient (forward over reverse).  A Hessian of a twice differentiable λ is
self-adjoint, and dG is that map itself, so the identification theorem's
symmetrisation H = ½(A + A*) leaves it as it is.

Each result has the map in matcalc syntax (``.text``), LaTeX, the steps, its vec form
(``.kron``: vec(dF) = J vec(dW), column-major, see ``vecform``) and one NumPy module with
the matrix-free product (``jvp``/``hvp``), the transposed product (``vjp``) and the dense
matrix (``matrix``).
"""
from __future__ import annotations

import warnings
from functools import cached_property

from . import ir
from .api import MAX_TREE, Results, _typed_any, as_text, differential_free, too_long
from .adjoint import Step, pullback
from .differential import differential
from .errors import DeriveError, NotationWarning, ShapeError, not_in_expression, with_notes
from .naming import REGROUP_STEP, definition_names, definitions_in_order, regrouped, shared_names
from .ir import tree_size
from .printing import dim_names, objective_tex, tex_name, to_latex, to_text
from .simplify import settle, simplify, stabilize


# ------------------------------------------------------------------ helpers


def _doc(e, names) -> str:
    """An expression for a docstring: with the definitions' names, at most 200 characters."""
    t = to_text(e, names)
    return t if len(t) <= 200 else t[:150] + " … " + t[-40:]

def _check_wrt(typed, wrt):
    if not isinstance(wrt, str):
        raise DeriveError(f"wrt must be a symbol name, got {wrt!r}")
    differential_free(typed, wrt)
    if wrt in (typed.definitions or {}) and wrt not in typed.symbols:
        raise DeriveError(f"{wrt} is a definition: a Hessian or Jacobian is taken with respect to one alone "
                          f"(wrt={wrt!r}: its inputs held fixed, its functions take {wrt}'s value), not in a "
                          f"list with other variables, whose blocks would then leave out the paths "
                          f"through {wrt}")
    if wrt not in typed.symbols:
        raise not_in_expression(wrt, typed.symbols)


def _as_variable(typed, wrt):
    """typed with the definition wrt made a symbol of its own, its inputs held fixed (the
    Hessian of a loss in the logits Z = X@W, as torch.autograd.functional.hessian takes it
    at Z): the functions take Z's value.  Anything else: typed as it is."""
    if isinstance(wrt, (list, tuple)) and len(wrt) == 1:
        wrt = wrt[0]
    if isinstance(wrt, str) and wrt in (typed.definitions or {}) and wrt not in typed.symbols:
        from dataclasses import replace

        from .api import _intermediate

        typed, _ = _intermediate(typed, wrt)
        used = {n.attr for n in ir.symbols(typed.expr)}  # (Z's inputs only in Z: no arguments now)
        typed = replace(typed, symbols={k: v for k, v in typed.symbols.items() if k in used},
                        user_shapes={k: v for k, v in typed.user_shapes.items() if k in used})
    return typed


def substitute(e: ir.Expr, old: ir.Expr, new: ir.Expr) -> ir.Expr:
    """e with the node ``old`` replaced by ``new`` (same shape)."""
    memo: dict = {}
    for n in ir.walk(e):
        if n is old:
            memo[n] = new
            continue
        args = tuple(memo[a] for a in n.args)
        memo[n] = n if all(a is b for a, b in zip(args, n.args)) else ir.Expr(n.op, args, n.attr, n.shape)
    return memo[e]


def _free_name(base: str, taken) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


def size_text(shape) -> object:
    """The number of entries of a user shape: an int, a dim name, or a product 'n*m'."""
    dims = [d for d in shape if d != 1]
    if not dims:
        return 1
    if all(isinstance(d, int) for d in dims):
        out = 1
        for d in dims:
            out *= d
        return out
    return dims[0] if len(dims) == 1 else "*".join(str(d) for d in dims)


def _shape_str(shape) -> str:
    from .api import shape_str

    return shape_str(shape)


def _shape_tex(shape) -> str:
    from .api import shape_tex

    return shape_tex(shape)


def _size_tex(shape) -> str:
    s = size_text(shape)
    return str(s).replace("*", " ")


_MISSING = object()  # (a direction not given: a keyword V= names a symbol)
_DENSE_HELPER = '''def _dense_from(jvp, vjp, w_shape, f_shape, values):
    """The dense matrix column by column from the product with basis tangents (or row by
    row from the transposed product, whichever needs fewer calls); vec is column-major."""
    n, m = int(np.prod(w_shape)), int(np.prod(f_shape))
    out = np.empty((m, n))
    if vjp is None or n <= m:
        fn, k, shape, rows = jvp, n, w_shape, False
    else:
        fn, k, shape, rows = vjp, m, f_shape, True
    e = np.zeros(k)
    for j in range(k):
        e[j] = 1.0
        t = e.reshape(shape, order="F") if shape else 1.0
        col = np.reshape(fn(t, **values), -1, order="F")
        if rows:
            out[j, :] = col
        else:
            out[:, j] = col
        e[j] = 0.0
    return out
'''


# ------------------------------------------------------------------ the common part

class _LinearMap:
    """A linear map L[dW] (the IR ``linear``, in ``delta(wrt)``) from W's shape to the shape
    of ``out``, with its vec form and NumPy functions."""

    kind = ""          # "jacobian" or "hessian"
    product = ""       # "jvp" or "hvp"
    _fixed_forms = False  # its NumPy functions pick no form by timing (the check's copy)
    symmetric = ()        # the symmetric matrices of hessian(..., symmetric=)

    @property
    def function(self):
        """(A gradient's attribute: which of this map's functions is meant.)"""
        funcs = (".matrix(**values) its dense matrix, .hvp(V, **values) its product, .gradient_function the "
                 "gradient" if self.kind == "hessian" else ".matrix(**values) its dense matrix, .jvp(V, **values) "
                 "and .vjp(G, **values) its products, .value_function F")
        raise AttributeError(f"a {self.kind.capitalize()} has no .function (a gradient's): {funcs}")

    def with_fixed_forms(self):
        """A copy whose NumPy functions never pick a form by timing (codegen.compile_function),
        so the check's figures are the same on every run; the text and forms are shared."""
        import copy

        out = copy.copy(self)
        for k in ("_gf", "value_function", "gradient_function"):
            out.__dict__.pop(k, None)
        out._fixed_forms = True
        return out

    def _setup(self, expr, typed, wrt, out_node, linear, user_names):
        self.expr = expr
        self.wrt = wrt
        self.symbols = typed.symbols
        self.user_shapes = typed.user_shapes
        self._held = typed.held  # definitions taken as variables of their own
        self._numbers = typed.numbers  # undeclared names that are numbers by their spelling: why
        self.shape = typed.user_shapes[wrt]
        self.dW = ir.delta(wrt, typed.symbols[wrt].shape)
        self.linear = linear                     # simplified, or None (the zero map)
        self.out_node = out_node
        self._user_names = user_names
        self._huge = linear is not None and too_long(linear, user_names)
        if self._huge:  # written out it would be huge
            taken = set(typed.symbols) | set(user_names.values())
            self._user_names = {**user_names, **shared_names([linear], taken, user_names)}

    @cached_property
    def _step_names(self):
        """The names the steps print with: the user's, and u1, u2, … for shared parts where
        a step written out would be huge."""
        roots = [st.after for st in self.steps] + [st.before for st in self.steps]
        if not roots or max(tree_size(r) for r in roots) <= MAX_TREE:
            return self._user_names
        taken = set(self.symbols) | set(self._user_names.values())
        return {**self._user_names, **shared_names(roots, taken, self._user_names)}

    # ---- text
    @property
    def _zero(self):
        return ir.const(0.0, self.out_node.shape)

    @cached_property
    def _shown(self):
        """The map as printed: the factored form when there is one (dW written once), with
        the definitions by their names."""
        if self.linear is None:
            return self._zero
        if self._huge:  # (written with names: the factored form is built apart from them)
            return self.linear
        return regrouped(self._factored if self._factored is not None else self.linear, self._user_names)

    @cached_property
    def _dims(self) -> dict:
        """dimension -> (symbol, axis): a size prints as size(X, 0), which reads back."""
        from .printing import dim_sources

        return dim_sources(self.symbols)

    @cached_property
    def text(self) -> str:
        return to_text(self._shown, self._user_names, self._dims)

    def _named_parts(self, roots, names: dict, latex: bool = False) -> list:
        """[(name, its value printed)] for the named parts (u1, u2, … of a map too large to
        write out, the names of definitions=) that the roots use, each after those it uses."""
        used = {n for r in roots for n in ir.walk(r) if n in names}
        sub = {n: name for n, name in names.items() if n in used}
        if latex:
            return [(tex_name(name), self._latex(node, {k: v for k, v in names.items() if k is not node}))
                    for name, node in definitions_in_order(sub)]
        return [(name, to_text(node, {k: v for k, v in names.items() if k is not node}, self._dims))
                for name, node in definitions_in_order(sub)]

    @property
    def definitions(self) -> dict:
        """The names ``text`` and ``latex`` use for parts of the map: name -> value as text."""
        return dict(self._named_parts([self._shown], self._user_names))

    def _definition_lines(self) -> list:
        """The definitions the steps and the map use, a line each."""
        roots = [self._shown] + [st.after for st in self.steps]
        return [f"{name} = {value}" for name, value in self._named_parts(roots, self._step_names)]

    @cached_property
    def latex(self) -> str:
        return self._latex(self._shown, self._user_names)

    def _latex(self, e, names) -> str:
        return to_latex(e, names, taken=self._symbol_tex)

    @cached_property
    def _symbol_tex(self) -> frozenset:
        return frozenset(tex_name(n) for n in self.symbols)

    @cached_property
    def _factored(self):
        """A@dW@B.T when dW occurs several times in the map but its vec form is one Kronecker
        product B ⊗ A (dp = (Diag(p) - p@p.T)@dW@x), else None."""
        from .simplify import const, ones_multiple, s_matmul, s_mul, s_T
        from .vecform import Kron, _is_one

        L, vf = self.linear, self._vec
        if L is None or vf is None or len(vf.terms) != 1 or _delta_count(L, self.dW) < 2:
            return None
        c, chain = vf.terms[0]
        if len(chain) != 1 or not isinstance(chain[0], Kron):
            return None
        k = chain[0]
        dW = self.dW
        if k.A.shape[1] != dW.shape[0] or not (_is_one(k.B) and dW.shape[1] == 1
                                                 or k.B.shape[1] == dW.shape[1]):
            return None
        # a multiple of a matrix of ones stays one (s 1 1ᵀ dW): as a bare number it would read back
        # as a scalar
        sa = ones_multiple(k.A)
        out = s_matmul(k.A, dW) if sa is None else s_mul(sa, s_matmul(const(1.0, k.A.shape), dW))
        if not _is_one(k.B):
            sb = ones_multiple(k.B)
            out = s_matmul(out, s_T(k.B)) if sb is None else s_mul(sb, s_matmul(out, const(1.0, k.B.shape[::-1])))
        out = simplify(s_mul(c, out))
        if out.shape != L.shape:
            if out.shape[::-1] == L.shape and 1 in L.shape:
                out = simplify(s_T(out))
            else:
                return None
        return out

    def _factor_step(self, before, wrap=lambda e: e):
        """The step to the factored form, if any."""
        if self._factored is None:
            return None
        return Step(wrap(before), wrap(self._factored),
                    "collect d" + self.wrt + ": vec(A dW Bᵀ) = (B ⊗ A) vec(dW) read back", frozenset(),
                    "\\text{collect } \\mathrm{d}" + tex_name(self.wrt))

    def _regroup_step(self, wrap=lambda e: e):
        """The step that writes the definitions by their names, if any."""
        before = self._factored if self._factored is not None else self.linear
        if self.linear is None or self._huge or self._shown is before:
            return None
        return Step(wrap(before), wrap(self._shown), REGROUP_STEP[0], frozenset(), REGROUP_STEP[1])

    @cached_property
    def _vec(self):
        """The vec form, or None: also for a map too large to write out (MAX_TREE), whose
        Kronecker products would be larger still, and slow to collect (about L⁴ for L
        nested layers)."""
        from .vecform import vec_form

        if self.linear is not None and tree_size(self.linear) > MAX_TREE:
            return None
        vf = vec_form(self.linear, self.dW, self.out_node.shape)
        if vf is not None and self.symmetric:
            vf = vf.with_symmetry(self.symmetric)
        if vf is not None:
            vf.names, vf.dims, vf.taken = dict(self._user_names or {}), self._dims, self._symbol_tex
            vf.symmetric = self.symmetric
        return vf

    @property
    def kron(self) -> str | None:
        """The vec form J of vec(L[dW]) = J vec(dW) as text (kron, vec, Diag, K_pq, I_n), or None."""
        return None if self._vec is None else self._vec.text

    @property
    def kron_latex(self) -> str | None:
        return None if self._vec is None else self._vec.latex

    @property
    def shape_text(self) -> str:
        return _shape_str(self.shape)

    @property
    def matrix_shape(self) -> tuple:
        """(rows, columns) of the dense matrix: entries of the result by entries of dW."""
        return (size_text(self._out_user_shape), size_text(self.shape))

    @property
    def _matrix_text(self) -> str:
        """matrix_shape as text, a side that is a product in brackets: a×(a*b), not a×a*b."""
        return "×".join(f"({d})" if "*" in str(d) else str(d) for d in self.matrix_shape)

    @property
    def _out_user_shape(self):
        return tuple(d for d in self.out_node.shape if d != 1) if self.out_node.shape != ir.SCALAR else ()

    # ---- code
    @cached_property
    def _fnames(self):
        from .codegen import sanitize

        suffix = sanitize([self._suffix])[self._suffix].strip("_") or "w"
        return {"product": f"{self.product}_{suffix}", "vjp": f"vjp_{suffix}",
                "dense": f"{self.kind}_{suffix}"}

    @cached_property
    def _params(self):
        return list(self.user_shapes)

    def _positional(self, src: str, fname: str, tname_py: str) -> str:
        """def f(*, a, b, t): -> def f(t, /, *, a, b): (the tangent positional-only)."""
        lines = src.split("\n")
        for i, line in enumerate(lines):
            if line.startswith(f"def {fname}(*, "):
                inner = line[len(f"def {fname}(*, "):-2]
                rest = [p for p in inner.split(", ") if p != tname_py]
                lines[i] = f"def {fname}({tname_py}, /, *, {', '.join(rest)}):"
                break
        return "\n".join(lines)

    def _product_source(self, fname, node, tangent_key, tangent_node, doc):
        """Source of ``fname(t, /, **values)`` computing ``node`` with ``tangent_node`` = t."""
        from .codegen import function_source

        if node is None:
            node = ir.const(0.0, self._result_shape(fname))
        syms = dict(self.symbols)
        syms[tangent_key] = tangent_node
        declared, like = self._io_shapes(fname, tangent_key)
        src, params = function_source(fname, [node], self._params + [tangent_key], syms, doc,
                                      declared=declared, shaped_like=like, positional=tangent_key)
        return self._positional(src, fname, params[tangent_key]), params

    def _result_shape(self, fname):
        return self.out_node.shape if fname == self._fnames["product"] else self.dW.shape

    def _io_shapes(self, fname, tangent_key):
        """(the declared shapes with the tangent's, [the argument whose shape as given the
        result takes, or None]) of the product ``fname``: an argument declared with a size-1
        dimension (a column (n, 1)) is taken as given or squeezed, the tangent too, and H[V]
        comes back in Wi's shape as given, Jᵀ[G] in W's."""
        if fname == self._fnames["product"]:
            tangent, like = self.shape, getattr(self, "wrt_i", None)
        else:
            tangent, like = self.out_shape, self.wrt
        return {**self.user_shapes, tangent_key: tangent}, [like]

    @cached_property
    def _tangent(self):
        key = _free_name("d" + self.wrt, self.symbols)
        return key, ir.sym(key, self.dW.shape)

    @cached_property
    def _cotangent(self):
        key = _free_name("G", self.symbols)
        return key, ir.sym(key, self.out_node.shape)

    @cached_property
    def vjp_node(self):
        """The transposed map as IR in the cotangent symbol: ∂(G:L[dW])/∂W."""
        if self.linear is None:
            return None
        key, G = self._cotangent
        dlam = ir.frob(G, self.linear) if self.linear.shape != ir.SCALAR else ir.mul(G, self.linear)
        grad, _ = pullback(dlam, self.dW, record=False)
        return grad

    def _module_parts(self) -> list:
        return []

    def _has_vjp(self) -> bool:
        return True

    @cached_property
    def numpy_source(self) -> str:
        """One standalone NumPy module: the product, the transposed product and the dense matrix."""
        from .codegen import function_source, module_source, np_shape, sanitize, size_code
        from .vecform import HELPERS as VHELPERS

        names = self._fnames
        tkey, tnode = self._tangent
        prod_node = substitute(self.linear, self.dW, tnode) if self.linear is not None else None
        doc = self._product_doc()
        parts = list(self._module_parts())
        src, params = self._product_source(names["product"], prod_node, tkey, tnode, doc)
        parts.append(src)
        if self._has_vjp():
            ckey, cnode = self._cotangent
            vsrc, _ = self._product_source(names["vjp"], self.vjp_node, ckey, cnode, self._vjp_doc())
            parts.append(vsrc)
        py = sanitize(self._params)
        dim_src: dict = {}
        for name in self._params:
            for axis, d in enumerate(np_shape(self.symbols[name].shape)):
                if isinstance(d, str):
                    dim_src.setdefault(d, f"{py[name]}.shape[{axis}]")

        def dim(d):  # (a product dimension: of its factors' sizes, or read whole)
            return size_code(d, dim_src)

        def shape_code(shape):
            ds = [dim(d) for d in np_shape(shape)]
            return "(" + ", ".join(ds) + ("," if len(ds) == 1 else "") + ")"

        vf = self._vec
        dname = names["dense"]
        ddoc = self._dense_doc()
        extra = set()
        if vf is not None:
            pieces = vf.pieces() or [ir.const(0.0)]
            box = {}

            def returns(results):
                code = dict(zip(pieces, results))
                s, helpers = vf.dense_expr(code, dim)
                box["helpers"] = helpers
                return s

            # each piece twice: the emitter then computes every piece once, into a temporary
            dsrc, _ = function_source(dname, pieces + pieces, self._params, self.symbols, ddoc,
                                      returns=returns, declared=self.user_shapes)
            extra = box["helpers"]
        else:
            from .codegen import entry_conversions, unit_params

            values = "dict(" + ", ".join(f"{v}={v}" for v in py.values()) + ")"
            vjp = names["vjp"] if self._has_vjp() else "None"
            unit, _ = unit_params(self._params, self.user_shapes, None)  # (1, n) given so: squeezed
            dsrc = (f"def {dname}(*, {', '.join(py[p] for p in self._params)}):\n"
                    f"    {ddoc!r}\n"
                    + "".join(line + "\n" for line in entry_conversions(self._params, py, self.symbols, unit))
                    + f"    return _dense_from({names['product']}, {vjp}, {shape_code(self.dW.shape)}, "
                    f"{shape_code(self.out_node.shape)}, {values})\n")
            parts.insert(0, _DENSE_HELPER)
        helper_src = "".join(VHELPERS[h] + "\n\n" for h in sorted(extra))
        parts.append(helper_src + dsrc)
        return module_source(parts)

    def source(self, backend: str = "numpy") -> str:
        """One module holding all the functions, for ``backend``: ``"numpy"`` (the default,
        ``numpy_source``), ``"torch"`` or ``"jax"`` (framework ops only: GPU tensors, ``jax.jit``)."""
        from .backends import check_backend

        if check_backend(backend) == "numpy":
            return self.numpy_source
        cache = self.__dict__.setdefault("_backend_sources", {})
        if backend not in cache:
            from .second_order_backends import module_source

            cache[backend] = module_source(self, backend)
        return cache[backend]

    def callable(self, backend: str = "numpy"):
        """The functions for ``backend``: this object itself for ``"numpy"``; for ``"torch"`` /
        ``"jax"`` an object with the same ``hvp``/``jvp``/``vjp``/``matrix`` taking tensors."""
        from .backends import check_backend, require

        if check_backend(backend) == "numpy":
            return self
        require(backend)
        from .second_order_backends import functions

        return functions(self, backend, self.source(backend))

    @cached_property
    def _gf(self):
        """The dense function wrapped (argument checks and conversion), the module's namespace."""
        from .function import GradientFunction
        from .codegen import sanitize

        gf = GradientFunction(self.numpy_source, self._fnames["dense"], sanitize(self._params),
                              self.user_shapes, fixed_forms=self._fixed_forms)
        gf.symmetric, gf.numbers = self.symmetric, self._numbers
        return gf

    def _fn(self, key):
        return self._gf._f.__globals__[self._fnames[key]]

    def _tangent_array(self, V, values, shape_user, what):
        import numpy as np

        from .function import as_floats

        target = self._concrete(shape_user, values)
        arr = as_floats(what, V)
        if not target:
            if arr.size != 1:
                raise ShapeError(f"{what} must be a scalar here, got an array of shape {arr.shape}")
            return float(arr.reshape(()))
        if arr.shape != target:
            if arr.size == int(np.prod(target)) and len(target) == 1 and 1 in arr.shape:
                return arr.reshape(target)
            raise ShapeError(f"{what} must have shape {target}, got {arr.shape}")
        return arr

    def _concrete(self, shape_user, values):
        import numpy as np

        from .function import vector_length

        sizes = {}
        for name, shape in self.user_shapes.items():
            if name in values:
                given = np.shape(values[name])
                if len(given) < len(shape):  # a row or column given as a 1-D vector: skip the 1
                    given = tuple(1 if d == 1 else given[0] for d in shape) if given else ()
                given = vector_length(shape, given)  # (a vector given as a column or row)
                for d, s in zip(shape, given):
                    sizes.setdefault(d, s)
        return tuple(d if isinstance(d, int) else _dim_size(d, sizes) for d in shape_user if d != 1)

    def matrix(self, /, *args, **values):
        """The dense matrix, (entries of the result) × (entries of dW), column-major vec order."""
        import numpy as np

        self._by_name("dense", args)

        try:
            out = self._gf(**values)
        except MemoryError:
            from .errors import OutOfMemory

            use = "jvp and vjp" if self.kind == "jacobian" else "hvp"
            raise OutOfMemory(f"the dense {self.kind} at these sizes does not fit in memory: {use} apply it "
                              f"without forming it") from None
        return np.asarray(out, dtype=float)

    def _by_name(self, key, args, first=None, method="hvp", name="V"):
        """A TypeError where the values were given by position (beside the direction), or the
        direction ``name`` of ``method`` was not (``first``: _MISSING)."""
        if first is _MISSING:
            raise TypeError(f"{method} takes {name} first, by position: .{method}({name}, **values) "
                            f"(a keyword names a symbol)")
        if args:
            from .function import by_name

            raise by_name(self._fnames[key], args, self._gf.params)

    def _apply(self, key, V, values, in_shape, out_shape, what, like=None):
        """The product ``key`` of the tangent V at ``values``, in out_shape; the shape of
        ``like`` (the argument the result is shaped as) when that was given as a row or
        column of the declared shape rather than as a 1-D vector."""
        import numpy as np

        from .function import check_arguments

        values = check_arguments(self._fnames[key], values, self._gf.params)  # named as the product called
        conv = self._gf.convert(values, checked=True)
        t = self._tangent_array(V, values, in_shape, what)
        try:
            out = self._fn(key)(t, **conv)
        except np.linalg.LinAlgError as e:
            from .function import singular

            raise singular(self._fnames[key], e) from None
        target = self._concrete(out_shape, values)
        if not target:  # a number, or a (1,) / (1, 1) array if the argument was given as one
            return float(np.reshape(out, ())) if np.ndim(like) == 0 else np.reshape(out, np.shape(like)).astype(float)
        if len(target) == 1 and np.ndim(like) == 2 and np.size(like) == target[0]:
            target = np.shape(like)
        return np.reshape(np.asarray(out, dtype=float), target)

    # ---- presentation
    def _steps_rows(self, printer) -> list:
        return [(printer(st.before, self._step_names), printer(st.after, self._step_names), st.identity)
                for st in self.steps]

    def to_dict(self, check=None) -> dict:
        out = {"wrt": self.wrt, "expr": self.expr, self.kind: self.text, "latex": self.latex,
               "shape": list(self.shape), "shape_text": self.shape_text,
               "matrix_shape": list(self.matrix_shape), "kron": self.kron, "kron_latex": self.kron_latex,
               "shape_reason": self.shape_reason,
               "numpy_source": self.numpy_source,
               "steps": [{"before": to_text(s.before, self._step_names, self._dims),
                          "after": to_text(s.after, self._step_names, self._dims), "identity": s.identity}
                         for s in self.steps],
               "definitions": self.definitions}
        if getattr(self, "symmetric", ()):
            out["symmetric"] = list(self.symmetric)
        if check is not None:
            out["check"] = check.to_dict()
        return out

    @cached_property
    def steps_latex(self) -> str:
        from .api import _tex_escape

        roots = [self._shown] + [st.after for st in self.steps]
        rows = [f"{name} &= {value}" for name, value in self._named_parts(roots, self._step_names, latex=True)]
        for i, (lhs, st) in enumerate(zip(self._step_lhs_latex(), self.steps)):
            note = st.identity_latex or f"\\text{{{_tex_escape(st.identity)}}}"
            rows.append(f"{lhs} &= {self._latex(st.after, self._step_names)} && {note}")
        if self.kron_latex is not None:
            rows.append(f"{self._vec_lhs_latex()} &= {self.kron_latex}"
                        f" && \\text{{vec form, column-major}}")
        return "\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}"

    def _repr_latex_(self):
        return f"${self._head_latex()}$"

    def _repr_markdown_(self):
        out = f"$${self._head_latex()}$$\n\n"
        for name, value in self._named_parts([self._shown], self._user_names, latex=True):
            out += f"$${name} = {value}$$\n\n"
        if self.kron_latex is not None:
            out += f"$${self._vec_lhs_latex()} = {self.kron_latex}$$\n\n"
        out += (f"dense: {self.matrix_shape[0]} × {self.matrix_shape[1]}, column-major vec order\n\n"
                "<details><summary>derivation</summary>\n\n$$" + self.steps_latex + "$$\n\n</details>\n")
        return out


# ------------------------------------------------------------------ Jacobian

class Jacobian(_LinearMap):
    """dF = J[dW] for an array-valued F: ``text`` (with dW), ``kron``, ``jvp``, ``vjp``,
    ``matrix`` (size F × size W, column-major vec), ``check``."""

    kind = "jacobian"
    product = "jvp"

    def __init__(self, expr, typed, wrt, primal, raw, linear, rules, user_names, symmetric=()):
        self.symmetric = tuple(symmetric)  # (before the steps: their vec form prints with it)
        self._setup(expr, typed, wrt, primal, linear, user_names)
        self.F = primal
        self._suffix = wrt
        self.out_shape = self._out_user_shape
        dF = ir.Expr("d", (primal,), None, primal.shape)
        self.steps: list[Step] = []
        if raw is not None:
            self.steps.append(Step(dF, raw, "differential: " + "; ".join(rules), frozenset(),
                                   "\\text{differential}"))
            if linear is not None and linear is not raw:
                self.steps.append(Step(raw, linear, "simplify (collect like terms, fold constants)",
                                       frozenset(), "\\text{simplify}"))
            if linear is not None:
                for step in (self._factor_step(linear), self._regroup_step()):
                    if step is not None:
                        self.steps.append(step)

    def __repr__(self):
        return f"<Jacobian dF = {self.text} (d{self.wrt}), matrix {self._matrix_text}>"

    def __str__(self):
        return f"dF = {self.text}"

    def jvp(self, V=_MISSING, /, *args, **values):
        """J[V]: dF along the tangent V (W's shape); the result has F's shape."""
        self._by_name("product", args, V, "jvp")
        out = self._apply("product", V, values, self.shape, self.out_shape, "the tangent V")
        return self.orientation.apply(out, values)

    def vjp(self, G=_MISSING, /, *args, **values):
        """Jᵀ[G]: the cotangent G (F's shape) pulled back to W's shape; equals ∂(G:F)/∂W."""
        self._by_name("vjp", args, G, "vjp", "G")
        return self._apply("vjp", G, values, self.out_shape, self.shape, "the cotangent G",
                           values.get(self.wrt))

    def _product_doc(self):
        return f"dF for F = {_doc(self.F, self._user_names)} along the tangent d{self.wrt} (the shape of {self.wrt})."

    def _vjp_doc(self):
        return f"The pullback of the cotangent G (the shape of F) to {self.wrt}: the gradient of G:F."

    def _dense_doc(self):
        return (f"The Jacobian of F = {_doc(self.F, self._user_names)} wrt {self.wrt}: (size F, size {self.wrt}), "
                "column-major vec order.")

    def _module_parts(self):
        from .codegen import function_source

        src, _ = function_source("value", [simplify(self.F)], self._params, self.symbols, "F",
                                 declared=self.user_shapes)
        return [src]

    @cached_property
    def value_function(self):
        from .function import GradientFunction
        from .codegen import sanitize

        gf = GradientFunction(self.numpy_source, "value", sanitize(self._params), self.user_shapes,
                              out_shape=self.orientation.shape, fixed_forms=self._fixed_forms)
        gf.given_like, gf.numbers = self.orientation.unit, self._numbers
        return gf

    @cached_property
    def orientation(self):
        """Where a vector F comes back as a row or column (``function.Orientation``)."""
        from .function import Orientation

        return Orientation(self.user_shapes, self.out_node.shape)

    def _step_lhs_latex(self):
        return ["\\mathrm{d}F"] + ["" for _ in self.steps[1:]]

    def _vec_lhs_latex(self):
        return (f"\\frac{{\\partial \\operatorname{{vec}} F}}{{\\partial \\operatorname{{vec}} "
                f"{tex_name(self.wrt)}}}")

    def _head_latex(self):
        return (f"\\mathrm{{d}}F = {self.latex},\\quad F = {self._latex(self.F, self._user_names)}"
                f"\\quad \\text{{matrix }} {_size_tex(self._out_user_shape)} \\times {_size_tex(self.shape)}")

    def derivation_lines(self) -> list[str]:
        lines = [f"F = {to_text(self.F, self._user_names, self._dims)}    ({_describe(self.out_node.shape)})"]
        lines += self._definition_lines()
        for i, st in enumerate(self.steps):
            prefix = "dF = " if i == 0 else "   = "
            lines.append(f"{prefix}{to_text(st.after, self._step_names, self._dims)}    [{st.identity}]")
        if not self.steps:
            lines.append(f"dF = 0    [F does not change with {self.wrt}]")
        if self.kron is not None:
            lines.append(f"vec(dF) = J vec(d{self.wrt}),  J = {self.kron}")
        lines.append(self.shape_reason)
        return lines

    @property
    def shape_reason(self) -> str:
        if not self.out_shape:  # F a number: one row, the gradient's transpose
            return (f"J is {self._matrix_text}: F is a scalar, one row; one column per entry of {self.wrt} "
                    f"{self.shape_text}, in column-major vec order")
        return (f"J is {self._matrix_text}: one row per entry of F {_shape_str(self.out_shape)}, one column per "
                f"entry of {self.wrt} {self.shape_text}, both in column-major vec order")

    def check(self, seed: int = 0, tol: float = 1e-5, draws: int = 2, domain: dict | None = None,
              sizes: dict | None = None):
        """The dense Jacobian against central differences of F, and jvp/vjp against it."""
        return _check(self, seed, tol, draws, domain, sizes)


def _dim_size(d, sizes):
    """The size of a dimension from the sizes of named ones (a product dimension 'a*c' too, a
    factor of one: ir.size_expr); KeyError where they do not give it."""
    import math
    import operator

    n = ir.size_expr(d, sizes, operator.floordiv, math.prod, int)
    if n is None:
        raise KeyError(d)
    return n


def _delta_count(e, dW) -> int:
    """How many times dW is written in e (as a tree)."""
    counts: dict = {}
    for n in ir.walk(e):
        counts[n] = 1 if n is dW else sum(counts[a] for a in n.args)
    return counts[e]


def _describe(shape):
    return "a scalar" if shape == ir.SCALAR else ir.fmt_shape(shape)


# ------------------------------------------------------------------ Hessian

class Hessian(_LinearMap):
    """d²λ = dW : H[dW]: ``text`` is H[dW], ``kron`` its vec form, ``hvp``, ``matrix``
    (size W × size W, column-major vec), ``check``.  For a block of ``hessian(λ, [X, W])``,
    (Wi, Wj) maps dWj to Wi's shape: d²λ = dWi : H_ij[dWj]."""

    kind = "hessian"
    product = "hvp"

    def __init__(self, derivation, wrt_j, typed, raw, linear, rules, symmetric=()):
        self.symmetric = tuple(symmetric)  # (before the steps: their vec form prints with it)
        wi = derivation.wrt
        self._setup(derivation.expr, typed, wrt_j, derivation.gradient, linear, derivation._user_names)
        self.derivation = derivation
        self.lam = derivation.lam
        self.gradient = derivation.gradient
        self.wrt_i, self.wrt_j = wi, wrt_j
        self.pair = (wi, wrt_j)
        self.diagonal = wi == wrt_j
        self.out_shape = typed.user_shapes[wi]
        self._suffix = wi if self.diagonal else f"{wi}_{wrt_j}"
        dWi = ir.delta(wi, typed.symbols[wi].shape)
        G = derivation.gradient
        d = lambda e: ir.Expr("d", (e,), None, e.shape)  # noqa: E731
        lin = linear if linear is not None else ir.const(0.0, G.shape)
        first = ir.frob(G, dWi)
        self.steps: list[Step] = [
            Step(d(self.lam), first, f"the gradient: dλ = (∂λ/∂{wi}):d{wi}", frozenset(),
                 "\\text{the gradient}"),
            Step(d(first), ir.frob(d(G), dWi),
                 f"d(A:B) = dA:B + A:dB; d(d{wi}) = 0 (d{wi} is a fixed direction)", frozenset(),
                 f"\\mathrm{{d}}(A:B) = \\mathrm{{d}}A:B + A:\\mathrm{{d}}B;\\ \\mathrm{{d}}^2 {tex_name(wi)} = 0"),
        ]
        if raw is not None:
            self.steps.append(Step(ir.frob(d(G), dWi), ir.frob(raw, dWi),
                                   "differential of the gradient: " + "; ".join(rules), frozenset(),
                                   "\\text{differential of the gradient}"))
            if lin is not raw:
                self.steps.append(Step(ir.frob(raw, dWi), ir.frob(lin, dWi), "simplify", frozenset(),
                                       "\\text{simplify}"))
        if self.diagonal:
            note = (f"A:B = B:A; H[d{wi}] = dG is self-adjoint (⟨U, H[V]⟩ = ⟨H[U], V⟩), so the "
                    "identification theorem's H = ½(A + A*) is A itself")
            note_tex = ("A:B = B:A;\\ \\text{self-adjoint, so } H = \\tfrac{1}{2}(A + A^{*}) = A")
        else:
            note = f"A:B = B:A; the block (∂²λ/∂{wi}∂{wrt_j}) maps d{wrt_j} to the shape of {wi}"
            note_tex = "A:B = B:A"
        if linear is not None:
            step = self._factor_step(linear, lambda e: ir.frob(e, dWi))
            if step is not None:
                self.steps.append(step)
                lin = self._factored
        self.steps.append(Step(ir.frob(lin, dWi), ir.frob(dWi, lin), note, frozenset(), note_tex))
        step = self._regroup_step(lambda e: ir.frob(dWi, e))
        if step is not None:
            self.steps.append(step)

    def __repr__(self):
        return f"<Hessian H[d{self.wrt}] = {self.text}, matrix {self._matrix_text}>"

    def __str__(self):
        return f"H[d{self.wrt}] = {self.text}"

    def hvp(self, V=_MISSING, /, *args, **values):
        """H[V] (V has the shape of W; for a block (Wi, Wj), of Wj, and H[V] that of Wi)."""
        self._by_name("product", args, V)
        return self._apply("product", V, values, self.shape, self.out_shape, "the direction V",
                           values.get(self.wrt_i))

    def _has_vjp(self):
        return False  # the diagonal block is its own transpose; a mixed block's is (Wj, Wi)

    def _product_doc(self):
        if self.diagonal:
            return (f"H[d{self.wrt}] for λ = {_doc(self.lam, self._user_names)}: the Hessian along d{self.wrt} "
                    f"(the shape of {self.wrt}).")
        return f"The block (∂²λ/∂{self.wrt_i}∂{self.wrt_j}) applied to d{self.wrt_j}, for λ = {_doc(self.lam, self._user_names)}."

    def _vjp_doc(self):  # pragma: no cover - never emitted
        return ""

    def _dense_doc(self):
        return (f"The Hessian block ({self.wrt_i}, {self.wrt_j}) of λ = {_doc(self.lam, self._user_names)}: "
                f"(size {self.wrt_i}, size {self.wrt_j}), column-major vec order.")

    def _module_parts(self):
        return [self.derivation._grad_source[0]]

    @cached_property
    def gradient_function(self):
        from .function import GradientFunction
        from .codegen import sanitize

        gf = GradientFunction(self.numpy_source, self.derivation._grad_source[2],
                              sanitize(self._params), self.user_shapes, self.derivation.shape,
                              fixed_forms=self._fixed_forms)
        gf.wrt = self.wrt_i if self.wrt_i in self.user_shapes else None  # (a column in: a column out)
        gf.symmetric, gf.numbers = self.symmetric, self._numbers
        return gf

    @property
    def _lam_tex(self) -> str:
        """λ, or ℓ where a symbol or dimension typesets as λ (printing.objective_tex)."""
        return objective_tex(set(self.symbols) | dim_names(self.user_shapes))

    def _step_lhs_latex(self):
        lam = self._lam_tex
        return [f"\\mathrm{{d}}{lam}", f"\\mathrm{{d}}^2{lam}"] + ["" for _ in self.steps[2:]]

    def _vec_lhs_latex(self):
        lam = self._lam_tex
        if self.diagonal:
            return f"\\frac{{\\partial^2 {lam}}}{{\\partial \\operatorname{{vec}} {tex_name(self.wrt)}^2}}"
        return (f"\\frac{{\\partial^2 {lam}}}{{\\partial \\operatorname{{vec}} {tex_name(self.wrt_i)}"
                f"\\, \\partial \\operatorname{{vec}} {tex_name(self.wrt_j)}}}")

    def _head_latex(self):
        block = "" if self.diagonal else f"_{{{tex_name(self.wrt_i)} {tex_name(self.wrt_j)}}}"  # (a block Hᵢⱼ)
        return (f"H{block}[\\mathrm{{d}}{tex_name(self.wrt)}] = {self.latex}\\quad \\text{{matrix }} "
                f"{_size_tex(self.out_shape)} \\times {_size_tex(self.shape)}")

    def derivation_lines(self) -> list[str]:
        lines = [f"λ = {to_text(self.lam, self._user_names, self._dims)}"]
        lines += self._definition_lines()
        for i, st in enumerate(self.steps):
            prefix = "dλ = " if i == 0 else ("d²λ = " if i == 1 else "    = ")
            lines.append(f"{prefix}{to_text(st.after, self._step_names, self._dims)}    [{st.identity}]")
        lines.append(f"H[d{self.wrt}] = {self.text}")
        if self.kron is not None:
            what = f"∂²λ/∂vec({self.wrt})²" if self.diagonal else f"∂²λ/∂vec({self.wrt_i})∂vec({self.wrt_j})"
            lines.append(f"{what} = {self.kron}")
        lines.append(self.shape_reason)
        return lines

    @property
    def shape_reason(self) -> str:
        if self.diagonal:
            return (f"H maps d{self.wrt} {self.shape_text} to the shape of {self.wrt}; the dense Hessian "
                    f"is {self._matrix_text} (column-major vec order)")
        return (f"the block maps d{self.wrt_j} {self.shape_text} to the shape of {self.wrt_i} "
                f"{_shape_str(self.out_shape)}; dense {self._matrix_text} (column-major vec order)")

    def check(self, seed: int = 0, tol: float = 1e-5, draws: int = 2, domain: dict | None = None,
              sizes: dict | None = None):
        """The dense Hessian against central differences of the gradient, hvp against it, and
        symmetry: ⟨U, H[V]⟩ = ⟨H[U], V⟩ (a diagonal block)."""
        return _check(self, seed, tol, draws, domain, sizes)


# ------------------------------------------------------------------ the check

def _check(m: _LinearMap, seed, tol, draws, domain, sizes):
    from .check import inverts, over_size_choices

    m = m.with_fixed_forms()

    return over_size_choices(m.user_shapes, sizes, lambda s: _check_at(m, seed, tol, draws, domain, s),
                             inverts=inverts(m.lam if m.kind == "hessian" else m.F))


UNMEASURABLE_MAP = ("the finite differences were the rounding noise of the function differentiated (the gradient "
                    "for a Hessian, F for a Jacobian) on every draw, too coarse to compare the map with (a large "
                    "constant in it, or a difference of much larger terms)")


def _check_at(m: _LinearMap, seed, tol, draws, domain, sizes):
    import numpy as np

    from .check import CheckReport, infer_domains, longer_steps, random_inputs, smooth

    root = m.F if isinstance(m, Jacobian) else m.lam
    domains = infer_domains(root, m.symbols)
    domains.update(domain or {})
    rng = np.random.default_rng(seed)
    if isinstance(m, Jacobian):
        f = m.value_function
        wrt = m.wrt
    else:
        f = m.gradient_function
        wrt = m.wrt_j
    # f's IR does not read wrt (a Hessian of a λ linear in W): its differences are exactly 0
    constant = wrt not in {n.attr for n in ir.symbols(m.F if isinstance(m, Jacobian) else m.gradient)}
    kinks = not smooth(root)
    worst, total, used, note, unmeasurable = 0.0, 0, 0, "", 0
    for attempt in range(draws + 12):
        if used >= draws:
            break
        inputs = random_inputs(m.user_shapes, domains, sizes, rng)
        for name in m.symmetric:  # a symmetric S: drawn symmetric
            inputs[name] = (inputs[name] + inputs[name].T) / 2
        with np.errstate(all="ignore"):
            try:
                base = np.asarray(f(**inputs), dtype=float)
                if m.kind == "hessian":  # λ itself finite too (log(-exp(x)) has a finite gradient)
                    base = np.append(base, m.derivation.value_function(**inputs))
            except (np.linalg.LinAlgError, ValueError):
                continue
        if not np.all(np.isfinite(base)):
            if attempt >= 2:
                for name, s in m.user_shapes.items():
                    if not (domain and name in domain):
                        domains[name] = "spd" if len(s) == 2 and s[0] == s[1] else "positive"
            continue
        with np.errstate(all="ignore"):
            try:
                err, n, msg = longer_steps(lambda h, careful=False: _compare(
                    m, f, inputs, wrt, rng, tol, h, constant=constant, careful=careful), tol, kinks=kinks)
            except np.linalg.LinAlgError:  # a singular matrix at this draw: not a finite value
                err, n, msg = float("inf"), 0, "non-finite values (a singular matrix)"
        if msg == "unmeasurable":  # (a draw that tested nothing: another is drawn)
            unmeasurable += 1
            continue
        worst, total, used = max(worst, err), total + n, used + 1
        note = note or (msg if msg != "zero" else "")
    if used == 0:
        return CheckReport(False, float("inf"), tol, sizes, domains, 0, 0, UNMEASURABLE_MAP if unmeasurable else
                           "the function was not finite on any random draw; say where to draw its "
                           "inputs: .check(domain={...}), --domain NAME=KIND")
    return CheckReport(worst <= tol, worst, tol, sizes, domains, total, used, note)


def _compare(m, f, inputs, wrt, rng, tol, h=1e-6, max_cols=24, constant=False, careful=False):
    """(relative error, comparisons, note): dense columns vs central differences of f along
    basis directions, the product and the transposed product vs the dense matrix, symmetry.
    ``constant`` and ``careful``: as for check._judge."""
    import numpy as np

    from .check import ZERO, _central, _noise, _scale, step_spread

    J = m.matrix(**inputs)
    x0 = np.asarray(inputs[wrt], dtype=float)
    shape = x0.shape
    flat = x0.reshape(-1, order="F")
    n = flat.size
    cols = np.arange(n) if n <= max_cols else rng.choice(n, max_cols, replace=False)
    errs, count, note = [], 0, ""
    if wrt in m.symmetric:  # along symmetric directions sym(E), which the map takes
        def direction(v):                    # as it takes E (it is written through sym(dS))
            M = v.reshape(shape, order="F")
            return ((M + M.T) / 2).reshape(-1, order="F")
    else:
        def direction(v):
            return v
    scale = max(float(np.max(np.abs(J))) if J.size else 0.0, 1e-300)

    def at(x):  # f at wrt = x, as a column-major vector
        return np.reshape(np.asarray(f(**dict(inputs, **{wrt: x if shape else float(x)})), float), -1, order="F")

    moves = []  # the columns' directions (sym(E) for a symmetric S) and steps
    for j in cols:
        e = np.zeros(n)
        e[j] = 1.0
        moves.append((direction(e).reshape(shape, order="F"), h * max(1.0, abs(flat[j]))))

    def differences(k=1.0):  # the columns by central differences, the steps k times as long
        return _central(at, x0, moves, k)

    fd, an = differences(), np.array([J[:, j] for j in cols])
    if fd.size and not (np.all(np.isfinite(fd)) and np.all(np.isfinite(an))):
        return float("inf"), len(cols), "non-finite values"
    fscale = max(scale, float(np.max(np.abs(fd))) if fd.size else 0.0)
    # central differences carry f's rounding over the step (check._noise: measured, eps·|f| at
    # least); where that could hide 1% of the map the draw tests nothing, and where a comparison
    # fails, the differences' own spread against those over twice the step counts as noise too.
    # A map and differences below ZERO are zero (of a λ linear in W): its products are held to
    # f's rounding.
    noise = _noise(at, x0 if shape else float(x0), h, symmetric=wrt in m.symmetric)
    zero = fscale < ZERO
    if zero and noise > ZERO and not constant:  # (the differences could not have seen a map above ZERO)
        return float("inf"), len(cols), "unmeasurable"
    if zero:  # a zero map's products are held to f's rounding, as the differences measure it
        spread = 10 * float(np.max(np.abs(fd - differences(2.0)))) if fd.size else 0.0  # (a margin)
        denom, note = max(fscale, 0.0 if constant else noise / tol, spread / tol, 1e-10), "zero"
    else:
        if careful:  # (a longer step: its truncation and aliasing count from the start)
            noise = max(noise, 2 * step_spread(fd, differences))
        got = _scale(fscale, noise, tol)
        if got is None:
            return float("inf"), len(cols), "unmeasurable"
        denom, note = got
        err = float(np.max(np.abs(fd - an)))
        if err / denom > tol and not careful:  # (careful counted that spread already)
            noise = max(noise, 2 * float(np.max(np.abs(fd - differences(2.0)))))
            got = _scale(fscale, noise, tol)
            if got is None:
                return float("inf"), len(cols), "unmeasurable"
            denom, note = got
        errs.append(err / denom)
        count += fd.size
    # the products against the dense matrix take no differences: they are held to the map's
    # scale (and the rounding of f-sized terms in their formulas), not to the differences' noise
    fmag = float(np.max(np.abs(at(x0 if shape else float(x0)))))
    exact = max(fscale, 1e-10, 100 * float(np.finfo(float).eps) * fmag)
    if zero:  # (a map 0 by cancellation: its products are the rounding of its terms, as the differences')
        exact = max(exact, denom)
    # the matrix-free product along random directions, against the dense matrix
    V = rng.standard_normal(n)
    Vt = V.reshape(shape, order="F") if shape else float(V[0])
    prod = m.jvp(Vt, **inputs) if isinstance(m, Jacobian) else m.hvp(Vt, **inputs)
    errs.append(float(np.max(np.abs(np.reshape(prod, -1, order="F") - J @ V), initial=0.0))
                / max(exact * max(1.0, np.abs(V).sum()), 1e-300))
    # and the product itself against central differences of f along V
    if n > 1:
        Vn = direction(V) / np.linalg.norm(V)
        fdv = _central(at, x0, [(Vn.reshape(shape, order="F"), h * max(1.0, float(np.max(np.abs(flat)))))])[0]
        errs.append(float(np.max(np.abs(np.reshape(prod, -1, order="F") / np.linalg.norm(V) - fdv),
                                 initial=0.0)) / denom)
    count += 2
    if isinstance(m, Jacobian):
        Gc = rng.standard_normal(J.shape[0])
        out_shape = m._concrete(m.out_shape, inputs)
        Gt = Gc.reshape(out_shape, order="F") if out_shape else float(Gc[0])
        back = m.vjp(Gt, **inputs)
        errs.append(float(np.max(np.abs(np.reshape(back, -1, order="F") - J.T @ Gc), initial=0.0))
                    / max(exact * max(1.0, np.abs(Gc).sum()), 1e-300))
        count += 1
    elif m.diagonal:
        U = rng.standard_normal(n)
        Ut = U.reshape(shape, order="F") if shape else float(U[0])
        hu = np.reshape(m.hvp(Ut, **inputs), -1, order="F")
        hv = np.reshape(prod, -1, order="F")
        asym = abs(float(U @ hv) - float(hu @ V)) / max(exact * np.abs(U).sum() * np.abs(V).sum(), 1e-300)
        errs.append(asym)
        errs.append(float(np.max(np.abs(J - J.T), initial=0.0)) / exact)
        count += 2
        if asym > 1e-8 and not zero:
            note = "the Hessian is not symmetric"
    if not J.size or scale <= 1e-300 and not fd.size:
        return 0.0, count, "zero"
    return max(errs), count, note


# ------------------------------------------------------------------ the API

def jacobian(expr: str, wrt, shapes: dict | None = None, definitions: dict | None = None,
             where: dict | None = None, *, syntax: str = "matcalc", symmetric=None):
    """dF = J[dW] for the (vector- or matrix-valued) ``expr`` and ``wrt`` (a name or a list):
    a Jacobian, or a dict name -> Jacobian.  ``expr`` may be a SymPy matrix expression, as
    for ``derive``.  A scalar ``expr`` gives the 1×N Jacobian, the
    transpose of the gradient, with a NotationWarning.  ``syntax="matlab"`` reads the question
    in matrixcalculus.org's language; results print in matcalc's.  ``symmetric`` names
    symmetric matrices, as for ``hessian``: the Jacobian in a symmetric S is the one along
    symmetric dS, J[dS] = J[sym(dS)] (so its dense matrix is J P, P vec(dS) = vec(sym(dS)))."""
    from .api import _use_symmetry, symmetric_names

    if definitions is not None and where is not None:
        raise DeriveError("give definitions= or where=, not both")
    definitions = definitions if definitions is not None else where
    expr, wrt, shapes = as_text(expr, wrt, shapes)
    symmetric = symmetric_names(symmetric)
    typed = _as_variable(_typed_any(expr, shapes, definitions, syntax, symmetric), wrt)
    if symmetric:
        typed = _use_symmetry(typed, symmetric)
    if typed.expr.shape == ir.SCALAR:
        names = wrt if isinstance(wrt, (list, tuple)) else [wrt]
        where = f"{names[0]}'s shape" if len(names) == 1 else "the shape of its variable"
        warnings.warn(NotationWarning(
            "the expression is a scalar: its Jacobian is the 1×N row, the transpose of the gradient "
            f"(matcalc derive / matcalc.derive gives the gradient in {where})"), stacklevel=2)
    if isinstance(wrt, (list, tuple)):
        if not wrt:
            raise DeriveError("wrt is empty: name at least one symbol")
        return Results({w: _jacobian_one(expr, typed, w, symmetric) for w in wrt})
    return _jacobian_one(expr, typed, wrt, symmetric)


def _jacobian_one(expr, typed, wrt, symmetric=()) -> Jacobian:
    _check_wrt(typed, wrt)
    primal = stabilize(typed.expr)
    user_names = definition_names(typed.definitions)
    raw, rules, _ = differential(primal, wrt)
    raw, rules, linear = _along_symmetric(raw, rules, wrt, typed, symmetric, "J")
    return Jacobian(expr, typed, wrt, primal, raw, linear, rules, user_names, symmetric)


def _along_symmetric(raw, rules, w, typed, symmetric, name):
    """(raw, rules, linear) of a linear map in dW (None where it is 0): along symmetric dS only
    where W is a symmetric S, dS through sym(dS) (name: H or J, for the rule it cites)."""
    if raw is not None and w in symmetric:
        dS = ir.delta(w, typed.symbols[w].shape)
        raw = substitute(raw, dS, ir.mul(ir.const(0.5), ir.add(dS, ir.T(dS))))
        rules = list(rules) + [f"d{w} symmetric: {name}[d{w}] = {name}[sym(d{w})], sym(d{w}) = (d{w} + d{w}ᵀ)/2"]
    linear = None if raw is None else settle(raw)
    if linear is not None and symmetric:
        from .symmetric import use_symmetry

        linear = settle(use_symmetry(linear, symmetric))  # (0.5*(0.5*A + 0.5*B) read as it was)
    if linear is not None and linear.op == "const" and linear.attr == 0.0:
        linear = None
    return raw, rules, linear


def hessian(expr: str, wrt, shapes: dict | None = None, definitions: dict | None = None,
            where: dict | None = None, *, syntax: str = "matcalc", symmetric=None):
    """d²λ = dW : H[dW] for the scalar ``expr`` (text, or a SymPy matrix expression as for
    ``derive``).  ``wrt`` a name: a Hessian; a list: a dict
    keyed by ordered pairs (Wi, Wj) whose block maps dWj to Wi's shape.  ``syntax="matlab"``
    reads the question in matrixcalculus.org's language; results print in matcalc's.
    ``symmetric`` names symmetric matrices, as for ``derive``: the gradient is sym(G), and a
    block in a symmetric S is the Hessian along symmetric dS, H[dS] = d sym(G)[sym(dS)]
    (written for any dS through sym(dS) = (dS + dSᵀ)/2, so the dense matrix is P H P with
    P vec(dS) = vec(sym(dS)))."""
    from .api import _derive_one, _scalar_hint, _use_symmetry, symmetric_names

    if definitions is not None and where is not None:
        raise DeriveError("give definitions= or where=, not both")
    definitions = definitions if definitions is not None else where
    expr, wrt, shapes = as_text(expr, wrt, shapes)
    symmetric = symmetric_names(symmetric)
    typed = _as_variable(_typed_any(expr, shapes, definitions, syntax, symmetric, scalar=True), wrt)
    if symmetric:
        typed = _use_symmetry(typed, symmetric)
    if typed.expr.shape != ir.SCALAR:
        scalar = "sum(...) or G:(...)" if syntax == "matcalc" else "sum(...), x'*y or trace(...)"
        asked = tuple(wrt) if isinstance(wrt, (list, tuple)) else (wrt,)
        raise ShapeError(f"a Hessian needs a scalar λ, but the expression is {ir.describe(typed.expr.shape)}: "
                         f"use jacobian (matcalc jacobian) for the derivative of an array-valued F, "
                         f"or make a scalar with {scalar}"
                         f"{_scalar_hint(expr, typed, shapes, definitions, syntax, (), asked)}",
                         expr, 0, len(expr.rstrip()))
    names = list(wrt) if isinstance(wrt, (list, tuple)) else [wrt]
    if not names:
        raise DeriveError("wrt is empty: name at least one symbol")
    for w in names:
        _check_wrt(typed, w)
    derivs = {w: _derive_one(expr, typed, w, symmetric=symmetric) for w in names}
    if not isinstance(wrt, (list, tuple)):
        return _hessian_block(derivs[wrt], wrt, typed, symmetric)
    return Results({(wi, wj): _hessian_block(derivs[wi], wj, typed, symmetric) for wi in names for wj in names})


def _hessian_block(d, wj, typed, symmetric=()) -> Hessian:
    try:
        raw, rules, _ = differential(d.gradient, wj)
    except KeyError as e:  # an operator without a differential rule in the gradient
        raise DeriveError(f"cannot differentiate the gradient {d.text} again: no rule for {e}") from None
    raw, rules, linear = _along_symmetric(raw, rules, wj, typed, symmetric, "H")
    return Hessian(d, wj, typed, raw, linear, rules, symmetric)


__all__ = ["jacobian", "hessian", "Jacobian", "Hessian"]


# ------------------------------------------------------------------ the command line

def add_cli_parsers(sub) -> None:
    """``matcalc hessian`` and ``matcalc jacobian``, with the options of ``derive`` and --kron."""
    from .cli import DOMAIN_HELP

    for name, what, example in [
            ("hessian", "the Hessian of a scalar expression: d²λ = dW : H[dW]",
             'matcalc hessian "norm2(X@W - Y)**2" --wrt W --kron'),
            ("jacobian", "the Jacobian of an array-valued expression: dF = J[dW]",
             'matcalc jacobian "softmax(W@x)" --wrt W --kron')]:
        p = sub.add_parser(name, help=what, description=f"Print {what}, and its vec (Kronecker) form.",
                           epilog="example: " + example)
        p.add_argument("expr", metavar="EXPR", help="the expression")
        p.add_argument("--wrt", action="append", required=True, metavar="NAME", type=str.strip,
                       help="the variable (repeat for several" + (": every block (Wi, Wj))" if name == "hessian" else ")"))
        p.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS",
                       help="declare a shape: W=a,b  x=b  alpha=scalar  (ints allowed: W=n,3)")
        p.add_argument("--let", action="append", default=[], metavar="NAME=EXPR", dest="let",
                       help="name an intermediate quantity, e.g. --let z=W@x+c")
        p.add_argument("--syntax", choices=["matcalc", "matlab"], default="matcalc",
                       help="read EXPR in matcalc's language or matrixcalculus.org's (MATLAB-like: "
                            "* the matrix product, .* entrywise, x' the transpose); results print in matcalc's")
        p.add_argument("--steps", action="store_true", help="print the derivation step by step")
        p.add_argument("--latex", action="store_true", help="print the result in LaTeX")
        p.add_argument("--kron", action="store_true",
                       help="print the vec form: vec(d·) = J vec(dW) with kron, vec, Diag, K_pq, I_n")
        p.add_argument("--code", action="store_true",
                       help="print the module (products, dense matrix): NumPy, or the framework of --backend")
        p.add_argument("--backend", default="numpy", metavar="numpy|torch|jax",
                       help="the framework of --code and of --json's <backend>_source (default numpy)")
        p.add_argument("--check", action="store_true",
                       help="check against finite differences (exit 1 if it fails)")
        p.add_argument("--domain", action="append", default=[], metavar="NAME=KIND", help=DOMAIN_HELP)
        p.add_argument("--at", action="append", default=[], metavar="NAME=VALUE",
                       help="the dense matrix at numbers: a number, a nested list or a file (.npy, .csv, .txt) "
                            "per symbol, e.g. --at x=[1,2] --at A=[[1,0],[0,1]] --at X=X.npy")
        p.add_argument("--json", action="store_true", help="print one JSON object per variable (block)")
        p.add_argument("--sym", action="append", default=[], metavar="NAME", type=str.strip,
                       help="NAME is a symmetric matrix: " + ("the gradient is sym(G) and its block is the Hessian"
                                                              if name == "hessian" else "the Jacobian is the one")
                       + " along symmetric dNAME (repeat for several)")


def compute(kind: str, expr: str, wrt: list, shapes: dict, definitions, emit: bool = True,
            syntax: str = "matcalc", symmetric=()):
    """``(results, notes)`` as ``matcalc hessian|jacobian`` computes them (``matcalc serve``'s
    endpoints too): ``results`` maps a name (a pair for Hessian blocks) to its Jacobian or
    Hessian, with the NumPy module already emitted if ``emit`` (a refusal of the emitted code is
    then a refusal), ``notes`` the NotationWarnings (the Jacobian of a scalar) as text."""
    extra = {"symmetric": symmetric} if symmetric else {}
    results, caught = with_notes(jacobian if kind == "jacobian" else hessian, expr, wrt=list(wrt), shapes=shapes,
                                 definitions=definitions, syntax=syntax, **extra)
    notes = [w.message for w in caught]
    for r in results.values() if emit else ():
        r.numpy_source  # noqa: B018
    return results, notes


def json_object(r, report=None, key=None, notes=(), backend: str = "numpy", several: bool = False) -> dict:
    """What ``matcalc hessian|jacobian --json`` prints for one variable (block): ``r.to_dict``
    plus the LaTeX of the left-hand sides (``lhs_latex``: H[dW] or dF; ``vec_lhs_latex``),
    ``wrt_latex``, the derivation as LaTeX (``steps_latex``) and text lines (``derivation``),
    ``notes`` (the Jacobian of a scalar) when there are any, ``definitions_latex`` (the names
    the map uses, as LaTeX) and ``<backend>_source`` for ``--backend`` torch or jax.  ``wrt``
    is the pair for a block of a Hessian in ``several`` variables (and for an off-diagonal one)."""
    obj = r.to_dict(report)
    if backend != "numpy":
        obj[f"{backend}_source"] = r.source(backend)
    if isinstance(key, tuple) and (key[0] != key[1] or several):
        obj["wrt"] = list(key)
    obj["wrt_latex"] = tex_name(r.wrt)
    obj["lhs_latex"] = (f"H[\\mathrm{{d}}{tex_name(r.wrt)}]" if r.kind == "hessian" else "\\mathrm{d}F")
    obj["vec_lhs_latex"] = r._vec_lhs_latex()
    obj["steps_latex"] = r.steps_latex
    obj["derivation"] = r.derivation_lines()
    obj["definitions_latex"] = dict(r._named_parts([r._shown], r._user_names, latex=True))
    if notes:
        obj["notes"] = list(notes)
    return obj


def _matrix_at(r, values: dict):
    """The dense matrix of ``r`` at ``values`` (name -> number or nested list), for --at."""
    from .cli import value_at
    from .errors import DeriveError, not_symbols

    unknown = [k for k in values if k not in r._params]
    if unknown:
        wrts = [w for w in (r.wrt if isinstance(r.wrt, (list, tuple)) else [r.wrt]) if w in r._params]
        defined = [w for w in wrts if w in r._held]
        raise DeriveError(not_symbols("--at", unknown, r._params) + (
            f" (the {r.kind.capitalize()} in {', '.join(defined)}, a definition, takes its value: --at {defined[0]}=...)"
            if defined else ""))
    missing = [p for p in r._params if p not in values]
    if missing:
        raise DeriveError(f"--at gives no value for {', '.join(missing)} (the {r.kind} needs "
                          f"{', '.join(r._params)})")
    return value_at(lambda: r.matrix(**values), f"the {r.kind}")


def run_cli(args) -> int:
    import sys

    from .cli import (EXIT_OK, EXIT_REFUSED, Source, check_backend_args, check_status, dumps, joined, parse_at,
                      parse_domains, parse_lets, parse_shapes)
    from .errors import MatcalcError

    try:
        check_backend_args(args)
        shapes = parse_shapes(args.shape)
        lets = parse_lets(args.let) or None
        # the module is emitted now: a refusal of the emitted code is a refusal, not a crash later
        results, notes = compute(args.command, args.expr, args.wrt, shapes, lets,
                                 emit=args.code or args.json or args.check,  # (the text alone needs no code)
                                 syntax=args.syntax, symmetric=getattr(args, "sym", ()))
        for note in notes:
            print(f"matcalc: note: {note}", file=sys.stderr)
        for r in results.values():  # a refusal of the emitted framework code is a refusal too
            if args.backend != "numpy":
                r.source(args.backend)
        at = parse_at(args.at) if args.at else None
        dense = {key: _matrix_at(r, at) for key, r in results.items()} if at is not None else {}
    except MatcalcError as e:
        print(f"matcalc: {e}", file=sys.stderr)
        return EXIT_REFUSED
    status = EXIT_OK
    out = []
    for key, r in results.items():
        try:
            report = r.check(domain=parse_domains(args.domain)) if args.check else None
        except MatcalcError as e:  # arrays too large for memory
            print(f"matcalc: the check cannot be made: {e}", file=sys.stderr)
            return EXIT_REFUSED
        if report is not None and not report.ok:
            status = max(status, check_status(report))
        if args.json:
            obj = json_object(r, report, key, notes, args.backend, several=len(results) > 1)
            if key in dense:
                obj["value"] = (dense[key] + 0.0).tolist()  # (+ 0.0: no -0.0)
            out.append(dumps(obj))
            continue
        if len(results) > 1:
            label = f"({key[0]}, {key[1]})" if isinstance(key, tuple) else key
            out.append(f"── {label} ──")
        if args.steps:
            out.extend(r.derivation_lines())
        else:
            lhs = f"H[d{r.wrt}]" if r.kind == "hessian" else "dF"
            out.append(f"{lhs} = {r.text}")
            out.extend(f"  where {name} = {value}" for name, value in r.definitions.items())
            if args.kron:
                out.append(f"vec form: {r.kron}" if r.kron is not None
                           else "vec form: none (no Kronecker/vec expression for this map)")
            out.append(f"shape: {r.shape_reason}")
        if args.latex:
            out.append(f"latex: {r.latex}")
            if args.kron and r.kron_latex is not None:
                out.append(f"vec form latex: {r.kron_latex}")
            if args.steps:
                out.append(r.steps_latex)
        if key in dense:
            import numpy as np

            out.append(f"at the given {', '.join(r._params)}: the dense {r.kind.capitalize()}, {dense[key].shape[0]}×"
                       f"{dense[key].shape[1]} (column-major vec order) =")
            out.append(np.array2string(dense[key] + 0.0, precision=8, max_line_width=100, threshold=10 ** 6))
        if args.code:
            out.append(Source(r.source(args.backend).rstrip()))
        if report is not None:
            out.append(str(report))
    print(joined(out, args.code and not args.json))
    if status != EXIT_OK and not args.json:
        print("matcalc: the numerical check " + ("cannot be made" if status == EXIT_REFUSED else "failed"),
              file=sys.stderr)
    return status
