"""``matcalc.op``: an expression as a PyTorch or JAX operation whose backward is
matcalc's derived vector-Jacobian product.

For an output F (a scalar or an array) and a cotangent G of F's shape, the VJP with
respect to an input X is the gradient of the scalar G:F, which ``derive`` gives in
closed form; one emitted function computes it for every input at once (shared
intermediates computed once), and the forward is the emitted function of F.  The
backward is used by ``torch.autograd`` (a ``torch.autograd.Function``) and by
``jax.grad`` / ``jax.vjp`` (a ``jax.custom_vjp``).  The backward is made of the framework's
own operations, so second derivatives go through it (torch's double backward and
``torch.func.hessian``, ``jax.hessian``, ``jax.jacrev(jax.grad(f))``).  torch's forward mode
(``torch.func.jvp``, ``jacfwd``) takes J t as the gradient in g of (Jᵀg):t, the VJP being
linear in g; ``jax.jvp`` of the op itself does not apply to a ``custom_vjp``.
"""
from __future__ import annotations

from . import backends, ir
from .errors import DeriveError
from .function import Orientation


def _cotangent_name(taken) -> str:
    """A name for the cotangent that no user symbol or definition uses."""
    name = "G_cot"
    while name in taken:
        name += "_"
    return name


def _nested_forward() -> bool:
    """Whether torch.func runs two forward-mode levels here (jvp of jvp, jacfwd of jacfwd),
    where torch passes an autograd.Function's jvp its saved inputs without the outer level's
    tangents (a second derivative of 0, for any Function); True where this cannot be told."""
    try:
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

        return sum(str(i.key()).endswith("Jvp") for i in retrieve_all_functorch_interpreters()) > 1
    except Exception:
        return True


def _user_shape(shape) -> tuple:
    r, c = shape
    if (r, c) == (1, 1):
        return ()
    return (r,) if c == 1 else (r, c)


class MatcalcOp:
    """A function of keyword tensors computing ``expr``; differentiable by the
    framework, with matcalc's derived VJP as its backward."""

    def __init__(self, expr: str, backend: str, shapes=None, definitions=None):
        from .api import _typed_any, derive
        from .codegen import sanitize
        from .simplify import simplify, stabilize

        if backends.check_backend(backend) == "numpy":
            raise DeriveError("matcalc.op needs backend='torch' or backend='jax' (NumPy has no autodiff)")
        backends.require(backend)
        if not isinstance(expr, str) and type(expr).__module__.startswith("sympy"):
            from .sympy_bridge import from_sympy

            expr, _, shapes = from_sympy(expr, [], shapes)
        typed = _typed_any(expr, shapes, definitions, scalar=True)  # (as derive reads sum(x**2)/n)
        self.expr, self.backend = expr, backend
        self.names = list(typed.user_shapes)
        self.user_shapes = dict(typed.user_shapes)
        from .codegen import sanitize
        from .function import keyword_signature

        self._py = sanitize(self.names)  # (lambda_ for a symbol named lambda, as the other functions take it)
        keyword_signature(self, self._py)
        self.out_shape = _user_shape(typed.expr.shape)
        # a vector F comes back as a column or row where an input declared as one is given so
        self.orientation = Orientation(self.user_shapes, typed.expr.shape)
        taken = set(self.names) | set(definitions or {})
        self.cotangent = gname = _cotangent_name(taken)
        vshapes = dict(self.user_shapes)
        vshapes[gname] = self.out_shape
        # an input whose values λ never reads (only its size: size(A, 0)*X) has the VJP 0
        read = [n for n in self.names if any(s.attr == n for s in ir.symbols(typed.expr))]
        if not read:
            raise DeriveError(f"{expr} reads the values of none of its inputs (only sizes): it has no derivative to use")
        self.derivations = derive(f"{gname}:({expr})", wrt=read, shapes=vshapes, definitions=definitions)
        first = self.derivations[read[0]]
        gradients = [self.derivations[n].gradient if n in self.derivations else ir.const(0.0, typed.symbols[n].shape)
                     for n in self.names]
        # an input declared with a size-1 dimension may come in that shape or squeezed (as in
        # derive's functions); F is in its user shape (a column is 1-D), each gradient in its input's
        fwd_src, fparams = backends.function_source(
            backend, "forward", [simplify(stabilize(typed.expr))], self.names, typed.symbols,
            f"the value of {expr}", declared=self.user_shapes)
        vjp_names = self.names + [gname]
        vjp_src, vparams = backends.function_source(
            backend, "vjp", gradients, vjp_names, first.symbols,
            f"the gradients of {gname}:F for every input, F = {expr}",
            returns=lambda rs: "(" + ", ".join(rs) + ("," if len(rs) == 1 else "") + ")",
            declared=vshapes, shaped_like=self.names)
        self.source = backends.module_source(backend, [fwd_src, vjp_src])
        self._forward = backends.compile_function(backend, self.source, "forward")
        self._vjp = backends.compile_function(backend, self.source, "vjp")
        self._fparams = [fparams[n] for n in self.names]
        self._vparams = [vparams[n] for n in vjp_names]
        assert sanitize(vjp_names)[gname] == vparams[gname]
        self._fn = self._build_torch() if backend == "torch" else self._build_jax()

    def forward(self, *args):
        return self._forward(**dict(zip(self._fparams, args)))

    def vjp(self, args, g):
        return self._vjp(**dict(zip(self._vparams, list(args) + [g])))

    def _build_torch(self):
        import torch

        op = self

        class Function(torch.autograd.Function):
            # forward apart from setup_context, and vmap by running the (torch-only) emitted
            # code on batched tensors: what torch.func.grad, vmap and jacrev need
            generate_vmap_rule = True

            @staticmethod
            def forward(*args):
                return op.forward(*args)

            @staticmethod
            def setup_context(ctx, inputs, output):
                tensors = [a if torch.is_tensor(a) else None for a in inputs]
                ctx.save_for_backward(*tensors)
                ctx.save_for_forward(*tensors, output)  # (output: the cotangent's shape, for jvp)
                ctx.others = [None if torch.is_tensor(a) else a for a in inputs]

            @staticmethod
            def backward(ctx, g):
                args = [t if t is not None else o for t, o in zip(ctx.saved_tensors, ctx.others)]
                grads = op.vjp(args, g)
                return tuple(gr if need else None for gr, need in zip(grads, ctx.needs_input_grad))

            @staticmethod
            def jvp(ctx, *tangents):
                # forward mode (torch.func.jvp, jacfwd, torch.func.hessian): the VJP g -> Jᵀg is
                # linear in g, so J t is the gradient in g of Σ (Jᵀg)_X : t_X
                if _nested_forward():
                    raise NotImplementedError(
                        "matcalc.op: forward mode inside forward mode (jvp of jvp, jacfwd of jacfwd) is not "
                        "supported: torch gives an autograd.Function's jvp its inputs without the outer "
                        "tangents, and the result would be 0; take the outer derivative with jacrev "
                        "(torch.func.hessian, jacfwd of jacrev, works)")
                *saved, out = ctx.saved_tensors
                args = [t if t is not None else o for t, o in zip(saved, ctx.others)]

                def paired(g):
                    grads = op.vjp(args, g)
                    return sum((gr * t).sum() for gr, t in zip(grads, tangents) if t is not None)

                return torch.func.grad(paired)(torch.zeros_like(out))

        Function.__name__ = Function.__qualname__ = "MatcalcFunction"
        return Function.apply

    def _build_jax(self):
        import jax

        op = self

        @jax.custom_vjp
        def f(*args):
            return op.forward(*args)

        def f_fwd(*args):
            return op.forward(*args), args

        def f_bwd(args, g):
            grads = op.vjp(args, g)
            return tuple(jax.numpy.reshape(gr, jax.numpy.shape(a)).astype(jax.numpy.result_type(a))
                         for gr, a in zip(grads, args))

        f.defvjp(f_fwd, f_bwd)
        return f

    def __call__(self, /, *args, **kwargs):
        from .backends import framework_arguments
        from .function import by_name

        if args:
            raise by_name(f"op({self.expr})", args, self._py)
        # (a vector given as a column or row goes in 1-D: the framework carries its gradient back)
        kwargs, _ = framework_arguments(f"op({self.expr})", kwargs, self._py, self.user_shapes, self.backend)
        return self.orientation.apply(self._fn(*[kwargs[n] for n in self.names]), kwargs)

    def __repr__(self):
        return f"<matcalc {self.backend} op {self.expr} ({', '.join(self.names)})>"


def op(expr: str, backend: str = "torch", shapes: dict | None = None,
       definitions: dict | None = None) -> MatcalcOp:
    """``expr`` (a scalar or an array) as a function of keyword tensors of ``backend``
    ("torch" or "jax") whose backward is matcalc's derived VJP for every input."""
    return MatcalcOp(expr, backend, shapes, definitions)
