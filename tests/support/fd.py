"""Finite-difference gradients and the comparison used by the soundness tests.

Independent of matcalc.  ``f`` is any callable ``f(**inputs) -> float``;
inputs are floats (scalars), 1-D arrays (vectors) or 2-D arrays (matrices).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

__all__ = ["central_fd_grad", "richardson_fd_grad", "rel_error",
           "GradientCheck", "check_gradient"]


def central_fd_grad(f: Callable[..., float], inputs: dict, wrt: str,
                    h: float = 1e-6):
    """Central differences (f(x+h e_i) - f(x-h e_i)) / 2h, entry by entry.

    Returns an array of the shape of ``inputs[wrt]``, or a float when that
    input is a scalar.  ``inputs`` is not modified.
    """
    x0 = inputs[wrt]
    args = dict(inputs)
    if np.ndim(x0) == 0:
        x = float(x0)
        args[wrt] = x + h
        fp = f(**args)
        args[wrt] = x - h
        fm = f(**args)
        return (fp - fm) / (2.0 * h)
    x = np.array(x0, dtype=float)          # a private copy
    work = x.copy()
    args[wrt] = work
    grad = np.empty_like(x)
    for idx in np.ndindex(x.shape):
        work[idx] = x[idx] + h
        fp = f(**args)
        work[idx] = x[idx] - h
        fm = f(**args)
        work[idx] = x[idx]
        grad[idx] = (fp - fm) / (2.0 * h)
    return grad


def richardson_fd_grad(f: Callable[..., float], inputs: dict, wrt: str,
                       h: float = 1e-3):
    """Richardson-extrapolated central differences, error O(h⁴).

    (4·D(h/2) − D(h)) / 3 with D the central difference.  With h = 1e-3 the
    rounding noise is ~1000× smaller than that of D(1e-6), at the price of a
    wider stencil; used to confirm a disagreement before calling it a bug.
    """
    d1 = central_fd_grad(f, inputs, wrt, h)
    d2 = central_fd_grad(f, inputs, wrt, h / 2.0)
    if np.ndim(d1) == 0:
        return (4.0 * d2 - d1) / 3.0
    return (4.0 * np.asarray(d2) - np.asarray(d1)) / 3.0


def rel_error(a, b) -> float:
    """max|a − b| / max(max|a|, max|b|, 1e-12).

    Shapes must agree exactly (a scalar is shape ()); otherwise, or when
    either side has a NaN/inf, the error is ``inf``.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape != b.shape:
        return float("inf")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("inf")
    if a.size == 0:
        return 0.0
    num = float(np.max(np.abs(a - b)))
    den = max(float(np.max(np.abs(a))), float(np.max(np.abs(b))), 1e-12)
    return num / den


@dataclass
class GradientCheck:
    ok: bool
    error: float                 # rel_error against the h=1e-6 central FD
    fd: object                   # the h=1e-6 central FD
    confirm_error: Optional[float] = None   # against Richardson, if computed
    confirm_fd: object = None

    def describe(self) -> str:
        s = f"rel error {self.error:.3g} (central FD, h=1e-6)"
        if self.confirm_error is not None:
            s += f", {self.confirm_error:.3g} (Richardson FD, h=1e-3)"
        return s


def check_gradient(got, f: Callable[..., float], inputs: dict, wrt: str,
                   tol: float = 1e-5, h: float = 1e-6,
                   zero_tol: float = 1e-8) -> GradientCheck:
    """Compare a claimed gradient with finite differences of f.

    Passes when rel_error(got, central FD with step h) < tol.  Otherwise the
    FD is recomputed with Richardson extrapolation (much less rounding noise,
    which matters when |f| is large compared with the gradient): the check
    passes if the gradient agrees with that one to ``tol``.  A wrong gradient
    disagrees with both, so this only removes false alarms.  Finally, entries
    within ``zero_tol·max(1, |f|)`` of the Richardson FD are accepted: that
    is below what any FD can resolve (gradients that are zero in exact
    arithmetic, like that of sum(softmax(x)), or of a saturated tanh).
    Shapes must match exactly (a vector's gradient is 1-D, a scalar's is a
    float); NaN/inf never passes.
    """
    fd = central_fd_grad(f, inputs, wrt, h)
    err = rel_error(got, fd)
    if err < tol:
        return GradientCheck(True, err, fd)
    if np.shape(got) != np.shape(fd) or not np.all(np.isfinite(got)):
        return GradientCheck(False, err, fd)
    fd2 = richardson_fd_grad(f, inputs, wrt)
    err2 = rel_error(got, fd2)
    ok = err2 < tol
    if not ok and np.all(np.isfinite(fd2)):
        # a (numerically) zero gradient, e.g. of sum(softmax(x)) = 1: FD can
        # only resolve it down to its rounding noise, ~eps·|f|/h.
        atol = zero_tol * max(1.0, abs(f(**inputs)))
        diff = np.max(np.abs(np.asarray(got, float) - np.asarray(fd2, float)))
        scale = max(np.max(np.abs(got)), np.max(np.abs(fd2)))
        ok = bool(diff <= tol * scale + atol)
    return GradientCheck(ok, err, fd, err2, fd2)
