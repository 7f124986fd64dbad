"""Hessians and Jacobians as PyTorch or JAX code: the matrix-free products.

``source(m, backend)`` writes, with the framework's own operations only (as ``backends`` does
for gradients), for a :class:`~matcalc.second_order.Hessian` the gradient ``grad_W`` and
``hvp_W(V, /, **values)``, for a :class:`~matcalc.second_order.Jacobian` ``value`` (F),
``jvp_W(V, /, **values)`` and ``vjp_W(G, /, **values)``: the same functions as the NumPy
module, with the tangent or cotangent positional-only. The dense ``hessian_W``/``jacobian_W``
stay NumPy's (they apply K as a permutation and call BLAS kernels; in a framework,
``torch.func.jacrev``/``jax.jacfwd`` of the product gives the matrix)."""
from __future__ import annotations

from . import ir
from .second_order import substitute


def _products(m, backend: str) -> list:
    from .backends import function_source

    names = m._fnames
    out = []
    tkey, tnode = m._tangent
    prod = substitute(m.linear, m.dW, tnode) if m.linear is not None else ir.const(0.0, m.out_node.shape)
    syms = dict(m.symbols)
    syms[tkey] = tnode
    src, params = function_source(backend, names["product"], [prod], m._params + [tkey], syms, m._product_doc())
    out.append(m._positional(src, names["product"], params[tkey]))
    if m._has_vjp():
        ckey, cnode = m._cotangent
        node = m.vjp_node if m.vjp_node is not None else ir.const(0.0, m.dW.shape)
        syms = dict(m.symbols)
        syms[ckey] = cnode
        src, params = function_source(backend, names["vjp"], [node], m._params + [ckey], syms, m._vjp_doc())
        out.append(m._positional(src, names["vjp"], params[ckey]))
    return out


def source(m, backend: str) -> str:
    """The torch or jax module of a Hessian (block) or Jacobian ``m``: its products (see the
    module's docstring). ``"numpy"`` gives ``m.numpy_source``."""
    from .backends import check_backend, function_source, module_source
    from .simplify import simplify

    if check_backend(backend) == "numpy":
        return m.numpy_source
    if m.kind == "hessian":
        d = m.derivation
        fname = d._grad_source[2]
        first, _ = function_source(backend, fname, [d.gradient], d._params, d.symbols,
                                   f"∂λ/∂{d.wrt}; shape {d.shape_text}.")
    else:
        first, _ = function_source(backend, "value", [simplify(m.F)], m._params, m.symbols, "F")
    return module_source(backend, [first] + _products(m, backend))
