"""Hessians and Jacobians for PyTorch and JAX: one module per map holding all its functions.

``module_source(m, backend)`` writes, for a ``Hessian`` or ``Jacobian`` ``m``, the torch or
jax counterpart of ``m.numpy_source``: the gradient ``grad_W`` (a Hessian) or F itself
(``value``, a Jacobian), the matrix-free product ``hvp_W``/``jvp_W``, the transposed product
``vjp_W`` (a Jacobian) and the dense matrix ``hessian_W``/``jacobian_W`` in column-major vec
order.  The functions use their framework's operations only (``backends.host_calls`` finds
nothing in them), so they run on GPU tensors and under ``jax.jit``.

The dense matrix follows the vec form where there is one (``vecform``): Kronecker products
as ``torch.kron``/``jnp.kron``, K as a permutation of rows, B ⊗ A applied to a matrix as
A X Bᵀ per column, Diag(h) as a row scaling.  Where no vec form can be written, it is the
product applied to every basis tangent (or cotangent, whichever are fewer) at once, with
``torch.func.vmap``/``jax.vmap`` over the rows of an identity: no Python loop over basis
vectors and no copy to the host.

``FRAMEWORK_DENSE`` holds, per vec-form factor, the code each backend writes; ``HELPERS`` the
helper functions the emitted modules may include.
"""
from __future__ import annotations

from . import ir
from .errors import ShapeError

# per backend: the array module's name in emitted code
MOD = {"torch": "torch", "jax": "jnp"}

HELPERS = {
    "torch": {
        "_vec": '''def _vec(a):
    """vec(a), column-major (a scalar is a length-1 vector)."""
    return a.reshape(-1) if a.dim() < 2 else a.T.reshape(-1)
''',
        "_unvec": '''def _unvec(v, shape):
    """The array of the given shape whose column-major vec is v."""
    if len(shape) < 2:
        return v.reshape(shape)
    return v.reshape(shape[::-1]).T
''',
        "_mat": '''def _mat(a, r, c):
    """a as an r×c tensor (a vector is a column or a row, a scalar 1×1)."""
    return a.reshape(r, c)
''',
        "_kron_apply": '''def _kron_apply(b, a, m):
    """(b ⊗ a) m without the Kronecker product: a X bᵀ for each column vec(X) of m; an
    int stands for the identity of that size."""
    ac = a if isinstance(a, int) else a.shape[1]
    bc = b if isinstance(b, int) else b.shape[1]
    x = m.reshape(bc, ac, -1)  # x[j, i, col] = X_col[i, j]
    if not isinstance(a, int):
        x = torch.matmul(a, x)
    if not isinstance(b, int):
        x = torch.tensordot(b, x, dims=([1], [0]))
    return x.reshape(-1, m.shape[1])
''',
        "_kron": '''def _kron(b, a):
    """b ⊗ a (torch.kron wants row-major strides: a transposed matrix, even one of n×1 that
    torch calls contiguous, is copied to them)."""
    return torch.kron(b.clone(memory_format=torch.contiguous_format),
                      a.clone(memory_format=torch.contiguous_format))
''',
        "_comm": '''def _comm(m, p, q):
    """K_pq m: the rows of m permuted as vec(X) -> vec(Xᵀ) for a p×q X (K is never built)."""
    return m.reshape(q, p, -1).permute(1, 0, 2).reshape(p * q, -1)
''',
        "_symadd": '''def _symadd(a, c=1.0):
    """c (a + aᵀ)."""
    if a.dim() < 2:
        return (2.0 * c) * a
    return c * (a + a.T)
''',
        "_xtdx": '''def _xtdx(x, d):
    """xᵀ Diag(d) x."""
    return x.T @ (d[:, None] * x)
''',
        "_dense_from": '''def _dense_from(jvp, vjp, w_shape, f_shape, values, like):
    """The dense matrix from the product with every basis tangent at once (torch.func.vmap
    over the rows of an identity), or from the transposed product with every basis
    cotangent where those are fewer; vec is column-major."""
    n, m = 1, 1
    for s in w_shape:
        n *= s
    for s in f_shape:
        m *= s
    if vjp is None or n <= m:
        fn, k, shape, rows = jvp, n, w_shape, False
    else:
        fn, k, shape, rows = vjp, m, f_shape, True
    if like is None:
        eye = torch.eye(k, dtype=torch.float64)
    else:
        eye = torch.eye(k, dtype=like.dtype, device=like.device)
    out = torch.func.vmap(lambda e: _vec(fn(_unvec(e, shape), **values)))(eye)
    return out if rows else out.T
''',
    },
    "jax": {
        "_vec": '''def _vec(a):
    """vec(a), column-major (a scalar is a length-1 vector)."""
    return jnp.ravel(a, order="F")
''',
        "_unvec": '''def _unvec(v, shape):
    """The array of the given shape whose column-major vec is v."""
    return jnp.reshape(v, shape, order="F")
''',
        "_mat": '''def _mat(a, r, c):
    """a as an r×c array (a vector is a column or a row, a scalar 1×1)."""
    return jnp.reshape(a, (r, c))
''',
        "_kron_apply": '''def _kron_apply(b, a, m):
    """(b ⊗ a) m without the Kronecker product: a X bᵀ for each column vec(X) of m; an
    int stands for the identity of that size."""
    ac = a if isinstance(a, int) else a.shape[1]
    bc = b if isinstance(b, int) else b.shape[1]
    x = m.reshape(bc, ac, -1)  # x[j, i, col] = X_col[i, j]
    if not isinstance(a, int):
        x = jnp.matmul(a, x)
    if not isinstance(b, int):
        x = jnp.tensordot(b, x, axes=(1, 0))
    return x.reshape(-1, m.shape[1])
''',
        "_kron": '''def _kron(b, a):
    """b ⊗ a."""
    return jnp.kron(b, a)
''',
        "_comm": '''def _comm(m, p, q):
    """K_pq m: the rows of m permuted as vec(X) -> vec(Xᵀ) for a p×q X (K is never built)."""
    return jnp.transpose(m.reshape(q, p, -1), (1, 0, 2)).reshape(p * q, -1)
''',
        "_symadd": '''def _symadd(a, c=1.0):
    """c (a + aᵀ)."""
    if jnp.ndim(a) < 2:
        return (2.0 * c) * a
    return c * (a + a.T)
''',
        "_xtdx": '''def _xtdx(x, d):
    """xᵀ Diag(d) x."""
    return x.T @ (d[:, None] * x)
''',
        "_dense_from": '''def _dense_from(jvp, vjp, w_shape, f_shape, values, like):
    """The dense matrix from the product with every basis tangent at once (jax.vmap over
    the rows of an identity), or from the transposed product with every basis cotangent
    where those are fewer; vec is column-major."""
    n, m = 1, 1
    for s in w_shape:
        n *= s
    for s in f_shape:
        m *= s
    if vjp is None or n <= m:
        fn, k, shape, rows = jvp, n, w_shape, False
    else:
        fn, k, shape, rows = vjp, m, f_shape, True
    eye = jnp.eye(k) if like is None else jnp.eye(k, dtype=like.dtype)
    out = jax.vmap(lambda e: _vec(fn(_unvec(e, shape), **values)))(eye)
    return out if rows else out.T
''',
    },
}
HELPER_DEPS = {"_dense_from": ("_vec", "_unvec")}


# ------------------------------------------------------------------ the dense matrix from a vec form

def _like(backend: str, ref) -> str:
    if ref is None:
        return ", dtype=torch.float64" if backend == "torch" else ""
    if backend == "torch":
        return f", dtype={ref}.dtype, device={ref}.device"
    return f", dtype={ref}.dtype"


# ------------------------------------------------------------------ the module

def _with_deps(names) -> list:
    out = set(names)
    for n in list(out):
        out.update(HELPER_DEPS.get(n, ()))
    return sorted(out)


def module_source(m, backend: str, vmap: bool = False) -> str:
    """The torch or jax module of a Hessian or Jacobian ``m`` (see the module docstring);
    ``vmap=True`` builds the dense matrix from the products even where there is a vec form."""
    from .backends import function_source as fw_source
    from .backends import module_source as fw_module
    from .backends import squeeze_lines
    from .codegen import np_shape, sanitize, size_code, unit_params
    from .second_order import Jacobian, substitute
    from .simplify import simplify

    names = m._fnames
    parts = []
    params = m._params
    py = sanitize(params)
    declared = m.user_shapes  # (a column declared (n, 1) is taken as given or squeezed)
    if isinstance(m, Jacobian):
        src, _ = fw_source(backend, "value", [simplify(m.F)], params, m.symbols, "F", declared=declared)
    else:
        d = m.derivation
        fname = d._grad_source[2]
        doc = f"∂λ/∂{d.wrt} for λ = {d.lam_text_short}; shape {d.shape_text}."
        src, _ = fw_source(backend, fname, [d.gradient], params, m.symbols, doc, declared=declared,
                           shaped_like=[d.wrt])
    parts.append(src)

    def product(fname, node, key, tnode, doc):
        if node is None:
            node = ir.const(0.0, m._result_shape(fname))
        syms = dict(m.symbols)
        syms[key] = tnode
        io_declared, like = m._io_shapes(fname, key)
        s, ps = fw_source(backend, fname, [node], params + [key], syms, doc, declared=io_declared,
                          shaped_like=like)
        return m._positional(s, fname, ps[key])

    tkey, tnode = m._tangent
    prod_node = substitute(m.linear, m.dW, tnode) if m.linear is not None else None
    parts.append(product(names["product"], prod_node, tkey, tnode, m._product_doc()))
    if m._has_vjp():
        ckey, cnode = m._cotangent
        parts.append(product(names["vjp"], m.vjp_node, ckey, cnode, m._vjp_doc()))

    ref = None
    dim_src: dict = {}
    for name in params:
        shape = np_shape(m.symbols[name].shape)
        if shape and ref is None:
            ref = py[name]
        for axis, dd in enumerate(shape):
            if isinstance(dd, str):
                dim_src.setdefault(dd, f"{py[name]}.shape[{axis}]")

    def dim(dd):  # (a product dimension (kron, vec): of its factors' sizes, or read whole)
        return size_code(dd, dim_src)

    def shape_code(shape):
        ds = [dim(dd) for dd in np_shape(shape)]
        return "(" + ", ".join(ds) + ("," if len(ds) == 1 else "") + ")"

    dname, ddoc = names["dense"], m._dense_doc()
    vf = None if vmap else m._vec
    used = set()
    if vf is not None:
        pieces = vf.pieces() or [ir.const(0.0)]
        box = {}

        def returns(results):
            s, helpers = vf.dense_expr(dict(zip(pieces, results)), dim, backend, _like(backend, ref))
            box["helpers"] = helpers
            return s

        # each piece twice: the emitter then computes every piece once, into a temporary
        dsrc, _ = fw_source(backend, dname, pieces + pieces, params, m.symbols, ddoc, returns=returns,
                            declared=declared)
        used = box["helpers"]
    else:
        values = "dict(" + ", ".join(f"{v}={v}" for v in py.values()) + ")"
        vjp = names["vjp"] if m._has_vjp() else "None"
        unit, _ = unit_params(params, m.user_shapes, None)  # (1, n) given so: squeezed, as the products compute
        squeeze = "".join(line + "\n" for line in squeeze_lines(backend, params, py, m.symbols, unit))
        dsrc = (f"def {dname}(*, {', '.join(py[p] for p in params)}):\n"
                f"    {ddoc!r}\n" + squeeze +
                f"    return _dense_from({names['product']}, {vjp}, {shape_code(m.dW.shape)}, "
                f"{shape_code(m.out_node.shape)}, {values}, {ref})\n")
        used = {"_dense_from"}
    helper_src = "".join(HELPERS[backend][h] + "\n\n" for h in _with_deps(used))
    parts.append(helper_src + dsrc)
    return fw_module(backend, parts)


# ------------------------------------------------------------------ the callable

def _named_apart(bound, letter: str, taken: set):
    """bound (hvp(V, /, **values)) with a signature whose positional parameter is named
    apart from the symbols (V, else V_, …): jax.jit binds arguments by the signature's names,
    and fails where the tangent and a symbol named V share one."""
    import inspect

    name = letter
    while name in taken:
        name += "_"

    def call(*args, **values):
        return bound(*args, **values)

    call.__name__, call.__doc__ = bound.__name__, bound.__doc__
    call.__signature__ = inspect.Signature([inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY),
                                            inspect.Parameter("values", inspect.Parameter.VAR_KEYWORD)])
    return call


class _Functions:
    """The functions of one torch or jax module of a Hessian or Jacobian, with the methods of
    the NumPy side.  Arguments are the framework's tensors (torch also takes NumPy arrays);
    results are tensors, a 0-d one where the NumPy side returns a float (no copy to the
    host)."""

    def __init__(self, m, backend: str, source: str):
        from .backends import compile_function
        from .codegen import sanitize

        self.backend = backend
        self.source = source
        self.kind = m.kind
        self.wrt = m.wrt
        self._like = m.wrt_i if m.kind == "hessian" else m.wrt  # (the variable hvp's or vjp's result is shaped as)
        self._names = dict(m._fnames)
        self._py = sanitize(m._params)
        self._in_shape = m.shape
        self._out_shape = m._out_user_shape
        self._user_shapes = m.user_shapes
        dense = compile_function(backend, source, self._names["dense"])
        self._ns = dense.__globals__
        self._first = m.derivation._grad_source[2] if m.kind == "hessian" else "value"
        if m.kind == "jacobian":
            self._orientation = m.orientation
        for method, letter in (("hvp", "V"), ("jvp", "V"), ("vjp", "G")):
            if method in self.methods:
                setattr(self, method, _named_apart(getattr(self, method), letter, set(self._user_shapes)))

    def __repr__(self):
        return f"<matcalc {self.backend} {self.kind} functions of {self.wrt}: {', '.join(self.methods)}>"

    # ---- arguments
    def _values(self, fname, values):
        """(the values under the emitted code's names, {a vector given as a column or row: its
        shape}): the values checked (names, shapes), in torch's tensors, those vectors 1-D."""
        from .backends import framework_arguments

        values, given = framework_arguments(fname, values, self._py, self._user_shapes, self.backend)
        return {self._py[k]: v for k, v in values.items()}, given

    def _shaped(self, out, given):
        """A gradient-shaped result in the shape its variable was given in (a column or row)."""
        return out.reshape(given[self._like]) if self._like in given else out

    def _concrete(self, shape_user, values):
        from .function import vector_length

        sizes = {}
        for name, shape in self._user_shapes.items():
            v = values.get(name)
            if v is not None and hasattr(v, "shape"):
                for dd, s in zip(shape, vector_length(shape, tuple(v.shape))):  # (a column or row vector too)
                    sizes.setdefault(dd, int(s))
        from .second_order import _dim_size

        out = []
        for dd in shape_user:
            if dd == 1:
                continue
            try:
                out.append(dd if isinstance(dd, int) else _dim_size(dd, sizes))
            except KeyError:
                out.append(-1)  # not determined by the values given: not checked
        return tuple(out)

    def _tangent(self, V, values, shape_user, what):
        if isinstance(V, (list, tuple)):
            import numpy as np

            V = np.asarray(V, dtype=float)
        if self.backend == "torch" and type(V).__module__ == "numpy":
            from .backends import from_numpy

            V = from_numpy({"V": V})["V"]  # float32 stays float32, as the values do
        target = self._concrete(shape_user, values)
        if not hasattr(V, "shape"):  # a Python number
            if target:
                raise ShapeError(f"{what} must have shape {target}, got a number")
            return V
        got = tuple(V.shape)
        if got == target or -1 in target:
            return V
        size = n = 1
        for s in target:
            size *= s
        for s in got:
            n *= s
        if n == size and len(target) <= 1:  # a column or row for a vector, 1×1 for a scalar
            return V.reshape(target)
        raise ShapeError(f"{what} must have shape {target}, got {got}")

    def _product(self, key, t, values, shaped=False):
        """The product ``key`` along t; ``shaped``: its result has the shape of a variable."""
        fname = self._names[key]
        args, given = self._values(fname, values)
        out = self._ns[fname](t, **args)
        return self._shaped(out, given) if shaped else out

    def _first_function(self, values, shaped=False):
        args, given = self._values(self._first, values)
        out = self._ns[self._first](**args)
        return self._shaped(out, given) if shaped else out

    def matrix(self, /, **values):
        """The dense matrix, (entries of the result) × (entries of W), column-major vec order."""
        return self._ns[self._names["dense"]](**self._values(self._names["dense"], values)[0])


class HessianFunctions(_Functions):
    """A Hessian's torch or jax functions: ``hvp(V, /, **values)``, ``matrix(**values)``,
    ``gradient_function(**values)``."""

    methods = ("hvp", "matrix", "gradient_function")

    def hvp(self, V, /, **values):
        """H[V] (V has W's shape; for a block (Wi, Wj), Wj's, and H[V] Wi's)."""
        return self._product("product", self._tangent(V, values, self._in_shape, "the direction V"), values,
                             shaped=True)

    def gradient_function(self, /, **values):
        """The gradient of λ (in Wi for a block (Wi, Wj))."""
        return self._first_function(values, shaped=True)


class JacobianFunctions(_Functions):
    """A Jacobian's torch or jax functions: ``jvp(V, /, **values)``, ``vjp(G, /, **values)``,
    ``matrix(**values)``, ``value_function(**values)`` (F itself)."""

    methods = ("jvp", "vjp", "matrix", "value_function")

    def jvp(self, V, /, **values):
        """J[V]: dF along the tangent V (W's shape); the result has F's shape."""
        return self._orientation.apply(
            self._product("product", self._tangent(V, values, self._in_shape, "the tangent V"), values), values)

    def vjp(self, G, /, **values):
        """Jᵀ[G]: the cotangent G (F's shape) pulled back to W's shape, ∂(G:F)/∂W."""
        return self._product("vjp", self._tangent(G, values, self._out_shape, "the cotangent G"), values,
                             shaped=True)

    def value_function(self, /, **values):
        """F itself."""
        return self._orientation.apply(self._first_function(values), values)


def functions(m, backend: str, source: str) -> _Functions:
    """The compiled functions of ``source`` (``module_source(m, backend)``)."""
    cls = HessianFunctions if m.kind == "hessian" else JacobianFunctions
    return cls(m, backend, source)
