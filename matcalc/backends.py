"""Code emission for PyTorch and JAX: the same optimised IR that ``codegen`` writes as
NumPy, written with one framework's own operations only.

The emitted functions call no NumPy, copy nothing to the host (no ``.item()``,
``.cpu()``, ``.numpy()``, no Python branch on a tensor's value), read every dimension
from ``.shape``, so they run unchanged on GPU tensors and under ``jax.jit``.
Vectors are 1-D tensors, matrices 2-D, as in the NumPy code; a scalar argument may be
a Python float or a 0-d tensor.  Every ``inv``, ``solve``, ``logdet`` and ``det`` of
one matrix shares one LU factorisation (``torch.linalg.lu_factor`` /
``jax.scipy.linalg.lu_factor``), and the stable forms of the NumPy code are kept
(log-space softplus and sigmoid, shifted logsumexp and softmax).

Each operator's torch and jax emission is a field of its registry entry (``ops``);
``TORCH_TEMPLATES`` and ``JAX_TEMPLATES`` are views of them.
"""
from __future__ import annotations

import re

from . import codegen
from .codegen import FACTOR_OPS, dim_lines, np_shape, sanitize
from .errors import DeriveError
from .ir import SCALAR, Expr
from .ops import REGISTRY

BACKENDS = ("numpy", "torch", "jax")
EXTRAS = {"torch": "torch", "jax": "jax"}  # backend -> the pip extra that installs it

# every operator's torch and jax emission lives in its registry entry (ops.REGISTRY): a
# template of its arguments' code, or a function (emitter, node, codes) -> code
TORCH_TEMPLATES = {name: op.torch for name, op in REGISTRY.items() if op.torch is not None}
JAX_TEMPLATES = {name: op.jax for name, op in REGISTRY.items() if op.jax is not None}

# the module prefix each backend's code may use; the static check looks for any other
PRELUDE = {"torch": "import torch\n", "jax": "import jax\nimport jax.numpy as jnp\nimport jax.scipy.linalg\nimport jax.scipy.special\n"}

HELPERS = {
    "torch": {
        "_logerfc": '''def _logerfc(z):
    # log erfc(z): log1p(-erf(z)) below 1, log 2 + log Φ(-√2 z) from 1 (finite where erfc underflows)
    return torch.where(z < 1.0, torch.log1p(-torch.special.erf(torch.clamp(z, max=1.0))),
                       0.6931471805599453 + torch.special.log_ndtr(torch.clamp(z, min=1.0) * -1.4142135623730951))
''',
        "_over_norm": '''def _over_norm(a, n):
    # a / ‖x‖, and 0 where ‖x‖ = 0 (the least-norm subgradient there); no branch on a value
    pos = n != 0  # (nan where ‖x‖ is nan)
    a = torch.as_tensor(a, dtype=n.dtype, device=n.device)  # (a may be a number: 1.0)
    return torch.where(pos, a / torch.where(pos, n, torch.ones_like(n)), torch.zeros_like(a))
''',
        "_gelu": '''def _gelu(z):
    return 0.5 * z * torch.special.erfc(z * -0.7071067811865476)  # 1 + erf(u) = erfc(−u)
''',
        "_lu": '''def _lu(a):
    return torch.linalg.lu_factor(a)


def _lu_solve(lu, b, transposed=False):
    """solve(a, b), or solve(a.T, b) if transposed, from the factors of a."""
    if b.dim() == 1:
        return torch.linalg.lu_solve(lu[0], lu[1], b[:, None], adjoint=transposed)[:, 0]
    return torch.linalg.lu_solve(lu[0], lu[1], b, adjoint=transposed)


def _lu_inv(lu):
    f = lu[0]
    return torch.linalg.lu_solve(f, lu[1], torch.eye(f.shape[0], dtype=f.dtype, device=f.device))


def _lu_logdet(lu):
    return torch.sum(torch.log(torch.abs(torch.diagonal(lu[0]))))


def _lu_det(lu):
    f, piv = lu
    swaps = torch.sum(piv != torch.arange(1, piv.shape[0] + 1, device=piv.device, dtype=piv.dtype))
    return (1 - 2 * (swaps % 2)).to(f.dtype) * torch.prod(torch.diagonal(f))
''',
    },
    "jax": {
        "_logerfc": '''def _logerfc(z):
    # log erfc(z): log1p(-erf(z)) below 1, log 2 + log Φ(-√2 z) from 1 (finite where erfc underflows)
    return jnp.where(z < 1.0, jnp.log1p(-jax.scipy.special.erf(jnp.minimum(z, 1.0))),
                     0.6931471805599453 + jax.scipy.special.log_ndtr(jnp.maximum(z, 1.0) * -1.4142135623730951))
''',
        "_gelu": '''def _gelu(z):
    return 0.5 * z * jax.scipy.special.erfc(z * -0.7071067811865476)  # 1 + erf(u) = erfc(−u)
''',
        "_over_norm": '''def _over_norm(a, n):
    # a / ‖x‖, and 0 where ‖x‖ = 0 (the least-norm subgradient there); no branch on a value
    pos = n != 0  # (nan where ‖x‖ is nan)
    return jnp.where(pos, a / jnp.where(pos, n, 1.0), jnp.zeros_like(a))
''',
        "_lu": '''def _lu(a):
    return jax.scipy.linalg.lu_factor(a)


def _lu_solve(lu, b, transposed=False):
    """solve(a, b), or solve(a.T, b) if transposed, from the factors of a."""
    return jax.scipy.linalg.lu_solve(lu, b, trans=1 if transposed else 0)


def _lu_inv(lu):
    f = lu[0]
    return jax.scipy.linalg.lu_solve(lu, jnp.eye(f.shape[0], dtype=f.dtype))


def _lu_logdet(lu):
    return jnp.sum(jnp.log(jnp.abs(jnp.diagonal(lu[0]))))


def _lu_det(lu):
    f, piv = lu
    swaps = jnp.sum(piv != jnp.arange(piv.shape[0]))
    return jnp.where(swaps % 2 == 1, -1.0, 1.0) * jnp.prod(jnp.diagonal(f))
''',
    },
}

# in place where the result is a new matrix nothing else reads; only functions whose derivative
# torch computes from the result, so the code stays differentiable (second derivatives through
# matcalc.op in torch)
IN_PLACE_TORCH = ("exp", "sqrt", "tanh", "expm1", "sigmoid")
FORBIDDEN = re.compile(r"\bnp\.|(?<!jax\.)\bnumpy\b|\.item\(|\.cpu\(|\.numpy\(|\.tolist\(|\bfloat\(|\bmath\.")


def check_backend(backend: str) -> str:
    """The backend name, or a DeriveError naming the choices."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise DeriveError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return backend


def require(backend: str):
    """Import the framework of a backend, or say which extra installs it."""
    check_backend(backend)
    if backend == "numpy":
        import numpy
        return numpy
    try:
        if backend == "torch":
            import torch
            return torch
        import jax
        import jax.numpy  # noqa: F401
        import jax.scipy.linalg  # noqa: F401
        import jax.scipy.special  # noqa: F401
        return jax
    except ImportError:
        raise DeriveError(f"the {backend} backend needs {backend}, which is not installed: "
                          f"pip install \"matcalc-diff[{EXTRAS[backend]}]\"") from None


class FrameworkEmitter(codegen.Emitter):
    """The NumPy emitter's DAG walk (temporaries, shared LU factors, negated terms) with
    every operation written for torch or jax."""

    def __init__(self, backend: str, params: dict, dim_source: dict, ref: str | None):
        super().__init__(params, dim_source)
        self.backend = backend
        self.ref = ref  # an array parameter whose dtype (and device) new arrays take
        self.mod = "torch" if backend == "torch" else "jnp"

    # ---- new arrays, on the arguments' device and of their dtype
    def _like(self) -> str:
        if self.ref is None:  # only scalar arguments: Python floats are doubles
            return ", dtype=torch.float64" if self.backend == "torch" else ""
        if self.backend == "torch":  # (_dtype: the arguments' float dtype, set at the top)
            return f", dtype=_dtype, device={self.ref}.device"
        return f", dtype={self.ref}.dtype"

    def full(self, shape, value: float) -> str:
        return f"{self.mod}.full({self.shape_src(shape)}, {value!r}{self._like()})"

    safe_quotient = False  # (the frameworks' numbers divide as their arrays do)

    def outer_code(self, u: str, v: str) -> str:
        return f"{self.mod}.outer({u}, {v})"

    def product_code(self, x: str, y: str) -> str:
        return f"({x} @ {y})"

    def single_factor(self, n: Expr, a: list):
        return None  # one use: the framework's own function factorises once anyway

    def scalar_arg(self, n: Expr, code: str) -> str:
        """A number computed on the host (a constant, a dimension, arithmetic of them) as a
        tensor: torch's functions take no Python numbers."""
        if self.backend == "torch" and codegen.host_number(n):
            return f"torch.tensor({code}{self._like()})"
        return code

    def node(self, n: Expr, a: list) -> str:  # noqa: C901 - one branch per operator
        op, m, be = n.op, self.mod, self.backend
        if op in FACTOR_OPS:
            s = self.factored(n, a)
            if s is not None:
                return s
        if op == "sym":
            return self.params[n.attr]
        if op == "const":
            v = float(n.attr)
            return repr(v) if n.shape == SCALAR else self.full(n.shape, v)
        if op == "eye":
            return f"{m}.eye({self.dim(n.shape[0])}{self._like()})"
        if op in ("add", "mul", "div"):
            return self.arithmetic(n, a)
        if op == "pow":
            k = n.args[1]
            x = self.scalar_arg(n.args[0], a[0])
            if k.op == "const":
                if k.attr == 2.0:
                    return f"{m}.square({x})"
                if k.attr == 0.5:
                    return f"{m}.sqrt({x})"
                if k.attr == -1.0:
                    return f"(1.0 / {a[0]})"
            return f"{m}.pow({x}, {a[1]})" if be == "torch" else f"jnp.power({x}, {a[1]})"
        if op == "matmul":
            return self.matmul(n, a)
        if op == "T":
            return f"{a[0]}.T" if len(np_shape(n.shape)) == 2 else a[0]
        if op == "frob":
            x, y = n.args
            if y.op == "const" and x.op == "const":
                dims = [self.dim(d) for d in np_shape(x.shape)]
                return "(" + " * ".join([repr(float(x.attr * y.attr))] + dims) + ")"
            if y.op == "const" or x.op == "const":
                c, other = (y.attr, a[0]) if y.op == "const" else (x.attr, a[1])
                total = f"{m}.sum({other})" if x.shape != SCALAR else other
                return total if c == 1.0 else f"({c!r} * {total})"
            if x.shape == SCALAR:
                return f"({a[0]} * {a[1]})"
            if len(np_shape(x.shape)) == 1:
                return f"({a[0]} @ {a[1]})"
            if be == "torch":
                return f"torch.sum({a[0]} * {a[1]})"
            return f"jnp.vdot({a[0]}, {a[1]})"
        if op in ("sum", "tr", "mean") and n.args[0].shape == SCALAR:
            return a[0]
        if op == "dim":
            return self.dim(n.attr)
        if op == "step" and self.bool_ok.get(n):
            return f"({a[0]} > 0.0)"  # a factor of a product: the boolean mask is enough
        if (be == "torch" and op in IN_PLACE_TORCH
                and self.fresh_matrix(n.args[0], a[0])):
            name = self.new_temp()  # a new matrix nothing else reads: overwrite it
            # (not where autograd saved that matrix for its backward: exp's and tanh's outputs)
            self.lines += [f"{name} = {a[0]}",
                           f"{name} = {name}.{op}() if {name}.requires_grad else {name}.{op}_()"]
            return name
        spec = REGISTRY.get(op)
        tpl = getattr(spec, be, None) if spec is not None else None
        if tpl is None:
            raise DeriveError(f"the {be} backend cannot emit the operation {op!r}")
        if callable(tpl):
            return tpl(self, n, a)
        return tpl.format(*(self.scalar_arg(x, c) for x, c in zip(n.args, a)))

    def item0(self, code: str) -> str:
        return f"{code}.reshape(-1)[0]"  # stays a 0-d tensor: no copy to the host


def function_source(backend: str, fname: str, outputs: list, param_names: list, syms: dict,
                    doc: str = "", returns=None, declared: dict | None = None,
                    shaped_like: list | None = None) -> tuple:
    """Source of ``def fname(*, <params>)`` for torch or jax; like
    ``codegen.function_source`` (same arguments, same optimisations, the same handling of
    arguments declared with a size-1 dimension)."""
    from .optimize import optimize

    params = sanitize(param_names)
    dim_source = {}
    ref = None
    for name in param_names:
        shape = np_shape(syms[name].shape)
        if shape and ref is None:
            ref = params[name]
        for axis, d in enumerate(shape):
            if isinstance(d, str):
                dim_source.setdefault(d, (params[name], axis))
    em = FrameworkEmitter(backend, params, dim_source, ref)
    outputs = optimize(list(outputs))
    results = em.emit(outputs)
    if backend == "torch":  # (jax arrays are immutable)
        results = [f"{r}.clone()" if copy else r
                   for r, copy in zip(results, codegen.shared(outputs, em.code, scalars=True))]
    head = [f"def {fname}(*, {', '.join(params[p] for p in param_names)}):"]
    if doc:
        safe = not any(ch in doc for ch in "\\\"'\n")
        head.append('    """' + doc + '"""' if safe else "    " + repr(doc))
    unit, given = codegen.unit_params(param_names, declared, shaped_like)
    lib = "torch" if backend == "torch" else "jnp"
    head.extend(f"    _shape_{params[n]} = {lib}.as_tensor({params[n]}).shape" if backend == "torch"
                else f"    _shape_{params[n]} = jnp.shape({params[n]})" for n in given)
    dtype = None
    if backend == "torch" and ref:  # the arrays' float dtype (an integer tensor's would make 0.5 a 0)
        arrays = [params[n] for n in param_names if syms[n].shape != SCALAR]
        dtype = "_dtype"
        if len(arrays) == 1:
            head.append(f"    _dtype = {ref}.dtype if {ref}.is_floating_point() else torch.get_default_dtype()")
        else:
            head.append(f"    _dtype = next((t.dtype for t in ({', '.join(arrays)}) if t.is_floating_point()), "
                        f"torch.get_default_dtype())")
        # integer arrays (class labels) as floats: x@k of a float x and an integer k is an error in torch
        head.extend(f"    {a} = {a} if {a}.is_floating_point() else {a}.to(_dtype)" for a in arrays)
    if backend == "torch":  # scalars as 0-d tensors of the arrays' dtype, on their device
        like = f", dtype={dtype}, device={ref}.device" if ref else ""
        for name in param_names:
            if syms[name].shape == SCALAR:
                p = params[name]
                if ref:
                    head.append(f"    {p} = torch.as_tensor({p}{like})")
                else:  # only scalars: a Python float is a double
                    head.append(f"    {p} = {p} if torch.is_tensor({p}) else torch.tensor({p}, dtype=torch.float64)")
    elif ref is None:  # jax with only scalars: 0-d arrays (jax's dtype), as jax.grad returns them
        head.extend(f"    {params[name]} = jnp.asarray({params[name]})" for name in param_names)
    else:  # jax: integer arrays (class labels) as jax's float (sigmoid, softplus refuse integers)
        for name in param_names:
            if syms[name].shape != SCALAR:
                a = params[name]
                head.append(f"    {a} = jnp.asarray({a})")
                head.append(f"    {a} = {a} if jnp.issubdtype({a}.dtype, jnp.inexact) else "
                            f"{a}.astype(jnp.result_type(float))")
    head += squeeze_lines(backend, param_names, params, syms, unit)
    body = ["    " + line for line in em.lines]
    results = [_as_array(backend, r, ref, dtype) if codegen.host_number(o) else r for r, o in zip(results, outputs)]
    if given:  # each such gradient takes its argument's shape as given
        results = [f"{lib}.reshape({r}, _shape_{params[n]})" if n in given else r
                   for r, n in zip(results, shaped_like)]
    ret = results[0] if len(results) == 1 else "(" + ", ".join(results) + ")"
    if returns is not None:
        ret = returns(results)
    body.append(f"    return {ret}")
    text = "\n".join(body)
    head.extend(dim_lines(em, text))
    helpers = "".join(HELPERS[backend][h] + "\n\n" for h in sorted(em.helpers))
    return helpers + "\n".join(head + body) + "\n", params


def squeeze_lines(backend: str, param_names, params: dict, syms: dict, unit) -> list:
    """The lines that squeeze each argument declared with a size-1 dimension (in ``unit``) as
    the code computes it: (n, 1) and (1, n) 1-D, (1, 1) 0-d."""
    lib = "torch" if backend == "torch" else "jnp"
    return [f"    {params[n]} = {lib}.reshape({params[n]}, {'()' if syms[n].shape == SCALAR else '(-1,)'})"
            for n in param_names if n in unit]


def _as_array(backend: str, code: str, ref, dtype=None) -> str:
    """A result that is a number (a constant gradient, a size) as a 0-d array of the framework
    (torch: of ``dtype``, the arrays' float dtype)."""
    if backend == "torch":
        like = f"dtype={dtype or ref + '.dtype'}, device={ref}.device" if ref else "dtype=torch.float64"
        return f"torch.as_tensor({code}, {like})"
    return f"jnp.asarray({code}, dtype={ref}.dtype)" if ref else f"jnp.asarray({code} * 1.0)"


def module_source(backend: str, functions: list) -> str:
    """A complete importable module (torch or jax) with the given function sources."""
    src = codegen.module_source(functions)
    return PRELUDE[backend] + src[len("import numpy as np\n"):]


def compile_function(backend: str, source: str, fname: str):
    """Compile emitted source (matcalc's own output, never user text) into a function."""
    namespace: dict = {}
    fw = require(backend)
    if backend == "torch":
        namespace["torch"] = fw
    else:
        import jax.numpy as jnp

        namespace.update(jax=fw, jnp=jnp)
    code = compile(source, f"<matcalc:{backend}:{fname}>", "exec")
    exec(code, namespace)  # noqa: S102 - the source is matcalc's own output
    return namespace[fname]


def host_calls(source: str) -> list:
    """Lines of emitted torch/jax source that would call NumPy or copy to the host."""
    code = [line for line in source.splitlines()
            if not line.strip().startswith(('"""', "'", "#"))]  # docstrings quote the user's text
    return [line for line in code if FORBIDDEN.search(line)]


class BackendFunction:
    """A torch or jax function compiled from emitted source; takes every symbol as a
    keyword tensor (vectors 1-D, matrices 2-D, scalars 0-d or Python floats)."""

    def __init__(self, backend: str, source: str, fname: str, params: dict, user_shapes: dict):
        self.backend = backend
        self.source = source
        self.name = fname
        self.params = params
        self.user_shapes = user_shapes
        self.emitted = compile_function(backend, source, fname)
        self._same_names = all(k == v for k, v in params.items())
        from .function import keyword_signature

        keyword_signature(self, params)

    def __repr__(self):
        return f"<matcalc {self.backend} function {self.name}({', '.join(self.params)})>"

    def __call__(self, /, *args, **kwargs):
        from .function import by_name

        if args:
            raise by_name(self.name, args, self.params)
        kwargs, given = framework_arguments(self.name, kwargs, self.params, self.user_shapes, self.backend)
        out = self.emitted(**(kwargs if self._same_names else {self.params[k]: v for k, v in kwargs.items()}))
        if self.wrt in given:  # a vector given as a column or row: its gradient comes back so
            out = out.reshape(given[self.wrt])
        elif given and self.grads_like:
            out[1].update({k: out[1][k].reshape(given[k]) for k in self.grads_like if k in given})
        return out

    wrt = None  # the variable whose gradient this returns
    grads_like = ()  # value_and_grad: the variables of its gradients


def framework_arguments(fname: str, kwargs: dict, params, user_shapes: dict, backend: str):
    """(the arguments of a torch or jax function by their symbols' names, {each plain vector
    given as a column or row: the shape given}): names and shapes checked, NumPy arrays and
    lists as torch's tensors (torch_inputs), those vectors 1-D."""
    import numpy as np

    from .function import as_floats, check_arguments, check_shapes

    kwargs = check_arguments(fname, kwargs, params)
    for k, v in kwargs.items():
        if _is_complex(v):  # (torch dropped the imaginary part; jax differentiated a complex function)
            raise TypeError(f"{k} is complex; matcalc's functions take real numbers")
        if v is None or isinstance(v, (str, bytes, list, tuple)) or isinstance(v, np.ndarray) and v.dtype.kind in "USO":
            kwargs[k] = as_floats(k, v)  # (text, None and ragged lists refused by name, as in NumPy's)
    flat = check_shapes(fname, kwargs, user_shapes)
    if backend == "torch":
        kwargs = torch_inputs(kwargs)
    given = {k: shape_of(kwargs[k]) for k in flat}
    return ({k: flatten(v) if k in given else v for k, v in kwargs.items()} if given else kwargs), given


def _is_complex(v) -> bool:
    import numpy as np

    dtype = getattr(v, "dtype", None)
    if dtype is None:  # (lists: as_floats says so)
        return isinstance(v, complex)
    flag = getattr(dtype, "is_complex", None)  # (a torch dtype)
    return flag if isinstance(flag, bool) else np.dtype(dtype).kind == "c"


def shape_of(v) -> tuple:
    """The shape of an array of any framework, or of nested lists."""
    import numpy as np

    return tuple(v.shape) if hasattr(v, "shape") else np.shape(v)


def flatten(v):
    """v (a tensor, an array or nested lists) as a 1-D array of its framework (NumPy for lists)."""
    import numpy as np

    return v.reshape(-1) if hasattr(v, "reshape") else np.reshape(np.asarray(v, dtype=float), -1)


def from_numpy(kwargs: dict) -> dict:
    """For torch: NumPy arrays as CPU tensors (shared memory), nested lists as float64
    tensors, NumPy scalars as floats."""
    import numpy as np
    import torch

    out = {}
    for k, v in kwargs.items():
        if isinstance(v, (list, tuple)):
            v = np.asarray(v, dtype=float)
        if isinstance(v, np.ndarray):
            v = torch.from_numpy(np.asarray(v, dtype=float) if v.dtype.kind != "f" else v)
        elif isinstance(v, np.generic):
            v = float(v)
        out[k] = v
    return out


def torch_inputs(kwargs: dict) -> dict:
    """For torch: NumPy arrays and lists as tensors (from_numpy), floating tensors in one
    dtype (common_float)."""
    return common_float(from_numpy(kwargs))


def common_float(kwargs: dict) -> dict:
    """For torch: floating tensors of several dtypes (float32 beside float64) all in the
    widest, as NumPy and the torch callables promote them (torch's products refuse mixed ones),
    and integer ones in that dtype."""
    import torch

    kinds = {v.dtype for v in kwargs.values() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    whole = any(isinstance(v, torch.Tensor) and not v.is_floating_point() for v in kwargs.values())
    if len(kinds) < 2 and not whole:
        return kwargs
    # integer tensors too: in float64 beside no floating ones, as NumPy reads them (torch's
    # default float32 rounds them from 2**24 on)
    wide = max(kinds, key=lambda t: torch.finfo(t).bits) if kinds else torch.float64
    return {k: v.to(wide) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
