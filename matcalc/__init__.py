"""matcalc: matrix calculus with the differential method.

    >>> import matcalc
    >>> d = matcalc.derive("alpha*(exp(W@x+c)-W@x-c+m*m-1):1", wrt="W")
    >>> d.text
    'alpha*(exp(W@x + c) - 1)@x.T'
"""
from .api import Derivation, GradientFunction, ValueAndGrad, derive, value_and_grad
from .errors import DeriveError, MatcalcError, NotationWarning, ParseError, ShapeError

__version__ = "0.1.0"

__all__ = ["derive", "value_and_grad", "ValueAndGrad", "Derivation", "GradientFunction", "MatcalcError", "ParseError", "ShapeError",
           "DeriveError", "NotationWarning", "__version__"]
