"""matcalc: matrix calculus with the differential method.

    >>> import matcalc
    >>> d = matcalc.derive("alpha*(exp(W@x+c)-W@x-c+m*m-1):1", wrt="W")
    >>> d.text
    'alpha*(exp(W@x + c) - 1)@x.T'
"""
from .api import Derivation, ValueAndGrad, derive, value_and_grad
from .function import GradientFunction
from .errors import DeriveError, MatcalcError, NotationWarning, OutOfMemory, ParseError, ShapeError
from .second_order import Hessian, Jacobian, hessian, jacobian


def op(expr, backend="torch", shapes=None, definitions=None):
    """``expr`` as a PyTorch or JAX function of keyword tensors whose backward is matcalc's
    derived VJP (see ``matcalc.framework_op``); torch / jax are imported on first use."""
    from .framework_op import op as _op

    return _op(expr, backend=backend, shapes=shapes, definitions=definitions)

__version__ = "0.1.0"

__all__ = ["derive", "value_and_grad", "ValueAndGrad", "Derivation", "GradientFunction", "MatcalcError", "ParseError", "ShapeError",
           "DeriveError", "OutOfMemory", "op", "__version__", "hessian", "jacobian", "Hessian", "Jacobian",
           "NotationWarning"]
