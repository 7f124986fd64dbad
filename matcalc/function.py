"""A callable made from emitted NumPy source: argument checks and conversions around the
emitted function, with a fast path for float arrays of the right shapes."""
from __future__ import annotations

import math
import re

from .errors import ShapeError


def check_arguments(fname: str, given: dict, params) -> dict:
    """The keyword arguments of ``fname``, with any given under its Python name (``lambda_``
    for a symbol named lambda, the emitted code's parameter) under the symbol's; a TypeError
    naming the unexpected and the missing ones, and which were probably meant."""
    if given.keys() == (params.keys() if isinstance(params, dict) else set(params)):
        return given
    if isinstance(params, dict):
        python = {v: k for k, v in params.items()}
        if given.keys() == python.keys():  # every one under its Python name (the signature's)
            given = {python[k]: v for k, v in given.items()}
        elif any(k in python and k not in params for k in given):  # some: those that are no symbol's
            given = {python[k] if k in python and k not in params and python[k] not in given else k: v
                     for k, v in given.items()}
    missing = [n for n in params if n not in given]
    unknown = [n for n in given if n not in params]
    if not (missing or unknown):
        return given
    import difflib

    said = []
    if unknown:
        meant = {u: difflib.get_close_matches(u, missing, 1, 0.5)
                 or [m for m in missing if m.lower() == u.lower()] for u in unknown}
        hints = [f"{m[0]} for {u}" for u, m in meant.items() if m]
        said.append(f"got unexpected argument(s) {', '.join(unknown)}"
                    + (f" (did you mean {', '.join(hints)}?)" if hints else ""))
    if missing:
        said.append(f"is missing the argument(s) {', '.join(missing)}")
    raise TypeError(f"{fname}{'' if fname.endswith(')') else '()'} {' and '.join(said)}; "
                    f"it takes {', '.join(params)}")


def keyword_signature(f, params) -> None:
    """What help(), inspect.signature and Jupyter's ? show for the callable f: its keywords,
    under their Python names where a symbol's is a keyword of Python's (lambda_, which f
    takes as well as lambda)."""
    import inspect

    names = params.values() if isinstance(params, dict) else params
    try:
        f.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in names])
    except ValueError:  # (a name that is no identifier even so)
        pass


def by_name(fname: str, args: tuple, params) -> TypeError:
    """The error of a call that gave arguments by position: which names to give them."""
    names = params.values() if isinstance(params, dict) else params
    return TypeError(f"{fname}{'' if fname.endswith(')') else '()'} takes its arguments by name, not position "
                     f"({len(args)} given): {fname}({', '.join(f'{p}=…' for p in names)})")


class Sizes(dict):
    """The sizes the arguments give the names of dimensions (dimension -> size), and the
    argument that gave each (``by``): a ShapeError where two give one name different sizes
    names both of them."""

    def __init__(self, fname: str = ""):
        super().__init__()
        self.prefix = f"{fname}: " if fname else ""
        self.by: dict = {}

    def take(self, d, s: int, name: str, given: tuple, shape: tuple) -> None:
        if self.setdefault(d, s) != s:
            self.conflict(d, s, name, given, shape)
        self.by.setdefault(d, (name, given, shape))

    def conflict(self, d, s: int, name: str, given: tuple, shape: tuple):
        """The ShapeError of name's shape ``given``, which makes d = s where by[d] made it self[d]."""
        other, other_given, other_shape = self.by[d]
        if other == name:
            raise ShapeError(f"{self.prefix}{name} has shape {given}, but its dimensions named {d} must be "
                             f"equal ({name} is {_names(shape)})")
        raise ShapeError(f"{self.prefix}{name} has shape {given}, which makes {d} = {s}, but {other} has shape "
                         f"{other_given}, which makes {d} = {self[d]} ({other} is {_names(other_shape)} and {name} "
                         f"is {_names(shape)}): one of them is not the shape the expression takes")

    def check_products(self) -> None:
        """A ShapeError where a product of dimensions (the a*b of vec(X) or kron(A, B)) is not
        the product of its factors' sizes, or not a multiple of those known."""
        from .ir import dim_factors

        for d, s in self.items():
            factors = dim_factors(d)
            if len(factors) < 2:
                continue
            named = [f for f in factors if not isinstance(f, int) and f in self]
            k = math.prod(f if isinstance(f, int) else self[f] for f in factors if f in named or isinstance(f, int))
            complete = len(named) == sum(not isinstance(f, int) for f in factors)
            if s == k if complete else (s % k == 0 if k else s == 0):  # (an empty array: k = 0)
                continue
            name, given, shape = self.by[d]
            said: dict = {}  # the argument that gave a factor its size -> [factor = size]
            for f in dict.fromkeys(named):  # (b*b of kron(A, A): b once)
                said.setdefault(self.by[f][0], []).append(f"{f} = {self[f]}")
            parts = " and ".join(f"{' and '.join(fs)} ({a} has shape {self.by[_first(self.by, a)][1]})"
                                 for a, fs in said.items())
            if not parts:
                why = f"{s} is not a multiple of {k}"
            else:
                verb = "makes" if len(set(named)) == 1 else "make"
                why = f"{parts} {verb} {d} {'=' if complete else 'a multiple of'} {k}"
            involved = {name: shape, **{a: self.by[_first(self.by, a)][2] for a in said}}
            names = [f"{a} is {_names(sh)}" for a, sh in involved.items()]
            names = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
            raise ShapeError(f"{self.prefix}{name} has shape {given}, which makes {d} = {s}, but {why} "
                             f"({names})" + (": one of them is not the shape the expression takes"
                                             if len(involved) > 1 else ""))


def _first(by: dict, arg: str):
    """The first dimension that the argument ``arg`` gave its size."""
    return next(d for d, (a, _, _) in by.items() if a == arg)


def _names(shape) -> str:
    """A shape of named dimensions as a tuple is written: (a, b), (n,)."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _number_hint(name: str, given: tuple) -> str:
    """Where a number was given for an array: how to make it one (d in softmax(Q@K.T/sqrt(d))
    is a vector by the spelling of its name)."""
    if given != ():
        return ""
    return (f" (if {name} is a number, derive again with it declared one: shapes={{'{name}': ()}}, "
            f"--shape {name}=scalar)")


def vector_length(shape: tuple, given: tuple) -> tuple:
    """``given`` (a shape) as the (length,) of a plain vector (``shape`` 1-D) given as a column
    or row; else ``given`` itself."""
    return (given[0] * given[1],) if len(shape) == 1 and len(given) == 2 and 1 in given else given


def check_shapes(fname: str, values: dict, user_shapes: dict) -> list:
    """A ShapeError where the arguments' shapes (NumPy, torch or jax arrays, numbers) do not
    fit the declared ones or each other: what the framework's own error would say deep inside
    the computation.  A size-1 dimension may be given or left out, as everywhere, and a plain
    vector given as a column or row: the names of those are returned."""
    import numpy as np

    sizes = Sizes(fname)
    flat = []
    for name, value in values.items():
        shape = user_shapes.get(name)
        if shape is None:
            continue
        given = tuple(value.shape) if hasattr(value, "shape") else np.shape(value)
        dims = [d for d in shape if d != 1]
        if len(given) == len(shape) and len(dims) < len(shape):  # the declared form, (n, 1)
            if any(d == 1 and s != 1 for d, s in zip(shape, given)):
                raise ShapeError(f"{fname}: {name} must have shape {shape}, got {given}")
            given = tuple(s for d, s in zip(shape, given) if d != 1)
        elif len(dims) == 1 and (length := vector_length(shape, given)) is not given:  # as a column or row
            flat.append(name)
            given = length
        elif len(given) != len(dims) and not (not dims and all(s == 1 for s in given)):
            kind = {0: "a scalar", 1: "a vector (1-D)", 2: "a matrix (2-D)"}[len(dims)]
            raise ShapeError(f"{fname}: {name} must be {kind} of shape {shape}, got shape {given}"
                             + _number_hint(name, given))
        for d, s in zip(dims, given):
            if isinstance(d, int):
                if d != s:
                    raise ShapeError(f"{fname}: {name} has shape {given}, but its declared shape is {shape}")
                continue
            sizes.take(d, s, name, given, shape)
    sizes.check_products()
    return flat


class Orientation:
    """Where a vector result comes back as a row or column: ``unit`` are the arguments declared
    as a row (1, n) or column (n, 1), ``shape`` the result's shape with its 1 (None where the
    result is no vector, or nothing is declared so).  exp(A@x) with x declared (n, 1) and given
    (n, 1) is (m, 1), as NumPy computes it; given 1-D, it is 1-D."""

    def __init__(self, user_shapes: dict, shape: tuple):
        self.unit = [k for k, sh in user_shapes.items() if len(sh) == 2 and 1 in sh]
        self.shape = shape if self.unit and shape != (1, 1) and 1 in shape else None

    def apply(self, out, values: dict):
        """out (a NumPy, torch or jax array) as a row or column where an argument in ``unit``
        was given 2-D."""
        import numpy as np

        if self.shape is not None and any(np.ndim(values.get(k)) == 2 for k in self.unit):
            return out.reshape((-1, 1) if self.shape[1] == 1 else (1, -1))
        return out


class GradientFunction:
    """A callable made from emitted NumPy source.  Takes every symbol of the expression
    as a keyword argument (scalars as floats, vectors 1-D, matrices 2-D arrays)."""

    def __init__(self, source: str, fname: str, params: dict, user_shapes: dict, out_shape=None,
                 fixed_forms: bool = False):
        import numpy as np

        from .codegen import compile_function

        self.source = source
        self.name = fname
        self.params = params            # user name -> python name
        self.user_shapes = user_shapes  # user name -> () / (n,) / (m, n)
        self._f = compile_function(source, fname, fixed_forms)  # (fixed: no forms picked by timing)
        self.emitted = self._f  # the emitted function itself: no argument checks, Python-safe names
        keyword_signature(self, params)
        self.__doc__ = self._f.__doc__
        self._keys = set(params)
        self._same_names = all(k == v for k, v in params.items())
        # a declared size-1 dimension is squeezed inside the emitted code: no fast path then
        self._fast = self._same_names and not any(d == 1 or "*" in str(d)  # (a*b: check_shapes)
                                                  for sh in user_shapes.values() for d in sh)
        self._out_shape = out_shape  # the declared shape of the result (None: as computed)
        self._ndims = [(k, len(user_shapes[k])) for k in params]
        self._ndarray = np.ndarray
        self._np = np
        # the dimension constraints between arguments, checked on every fast call
        first: dict = {}
        self._same_dims, self._fixed_dims = [], []
        for k in params:
            for ax, d in enumerate(user_shapes[k]):
                if isinstance(d, int):
                    self._fixed_dims.append((k, ax, d))
                elif d in first:
                    self._same_dims.append((first[d][0], first[d][1], k, ax))
                else:
                    first[d] = (k, ax)

    def __repr__(self):
        return f"<matcalc function {self.name}({', '.join(self.params)})>"

    spread = ()  # vectors the expression spreads over a matrix's columns (X@W + b): named in shape errors
    numbers = {}  # undeclared names that are numbers by their spelling -> why (said where given an array)
    symmetric = ()  # matrices declared symmetric (symmetric=): their values are checked to be

    def _check_symmetric(self, out: dict) -> None:
        """A value given for a matrix declared symmetric is symmetric (to 1e-8 of its largest
        entry): the results use Sᵀ = S, and are wrong at any other matrix.  Up to 16 rows are
        compared with their columns, spread over the matrix (all of a matrix up to 16×16): the
        whole comparison, a strided read of n² entries, took 20 matrix-vector products' time."""
        np = self._np
        for name in self.symmetric:
            S = out.get(self.params.get(name))
            if S is None or np.ndim(S) != 2 or S.shape[0] != S.shape[1]:
                continue
            n = S.shape[0]
            rows = slice(None) if n <= 16 else np.linspace(0, n - 1, 16).astype(int)
            R, C = S[rows], S[:, rows].T
            if np.array_equal(R, C):
                continue  # (exactly symmetric, inf on the diagonal too: one comparison)
            same = (R == C) | np.isnan(R) & np.isnan(C)  # (nan facing nan is symmetric, facing a number not)
            gap = float(np.max(np.where(same, 0.0, np.abs(R - C)), initial=0.0))
            if not gap <= 1e-8 * float(np.max(np.where(np.isfinite(R), np.abs(R), 0.0), initial=0.0)):
                raise ValueError(f"{self.name}: {name} is declared symmetric, but its value is not (max |{name} - "
                                 f"{name}ᵀ| = {gap:.3g}); the results hold where {name}ᵀ = {name}: give a symmetric "
                                 f"{name}, such as ({name} + {name}.T)/2")

    def convert(self, kwargs: dict, checked: bool = False) -> dict:
        """The arguments as the emitted function takes them (``checked``: their names are)."""
        try:
            return self._convert(kwargs, checked)
        except ShapeError as e:
            names = [b for b in self.spread if re.search(rf"(?<![\w.]){re.escape(b)}(?![\w(])", e.message)]
            if not names:
                raise
            b = names[0]
            raise ShapeError(f"{e.message} ({b} is a column in the expression, one entry per row of the matrix it "
                             f"is added to; NumPy adds a 1-D {b} to every row: for that write {b}.T in the "
                             "expression)") from None

    def _convert(self, kwargs: dict, checked: bool) -> dict:
        import numpy as np

        if not checked:
            kwargs = check_arguments(self.name, kwargs, self.params)
        sizes = Sizes()
        by = sizes.by
        out = {}
        for name, value in kwargs.items():
            shape = self.user_shapes[name]
            try:
                arr = as_floats(name, value)  # (None, text, complex: refused; asarray(None, float) is nan)
            except RuntimeError:  # (torch's: "Can't call numpy() on Tensor that requires grad")
                if getattr(value, "requires_grad", False):
                    raise TypeError(f"{name} is a torch tensor that requires grad, and this is a NumPy function: "
                                    "for torch's autograd use matcalc.op(expr) or d.callable('torch'), or pass "
                                    f"{self.params[name]}.detach()") from None
                raise
            if len(shape) == 0:
                if arr.size != 1:
                    why = self.numbers.get(name)
                    raise ShapeError(f"{name} is a scalar, got an array of shape {arr.shape}" + (
                        f" ({name} is a number {why}; to make it a vector declare it: shapes={{'{name}': ('n',)}}, "
                        f"--shape {name}=n)" if why else ""))
                out[self.params[name]] = float(arr.reshape(()))
                continue
            if len(shape) == 1 and arr.ndim == 2 and 1 in arr.shape:
                arr = arr.reshape(-1)
            if len(shape) == 2 and arr.ndim == 1 and sum(d == 1 for d in shape) == 1:
                # a 1-D array for a declared row (1, d) or column (d, 1): as NumPy's 1-D vectors
                d = shape[1] if shape[0] == 1 else shape[0]
                if isinstance(d, int) and d != arr.shape[0]:
                    raise ShapeError(f"{name} has length {arr.shape[0]}, but its declared shape is {shape}")
                if not isinstance(d, int):
                    sizes.take(d, arr.shape[0], name, arr.shape, shape)
                out[self.params[name]] = arr
                continue
            if arr.size == 1 and shape and all(d == 1 for d in shape):  # (1,) / (1, 1): any one number
                out[self.params[name]] = arr
                continue
            if arr.ndim == len(shape) and any(d == 1 for d in shape):
                for d, s in zip(shape, arr.shape):
                    if d == 1 and s != 1:
                        raise ShapeError(f"{name} must have shape {shape}, got {arr.shape}")
                out[self.params[name]] = arr  # (the emitted code squeezes it, and keeps its shape)
                continue
            if arr.ndim != len(shape):
                kind = "vector (1-D array)" if len(shape) == 1 else "matrix (2-D array)"
                raise ShapeError(f"{name} must be a {kind} of shape {shape}, got shape {arr.shape}"
                                 + _number_hint(name, arr.shape))
            for d, s in zip(shape, arr.shape):
                if isinstance(d, int):
                    if d != s:
                        raise ShapeError(f"{name} has shape {arr.shape}, but its declared shape is {shape}")
                    continue
                if sizes.setdefault(d, s) != s:  # (Sizes.take's work inline: this runs on every call)
                    sizes.conflict(d, s, name, arr.shape, shape)
                by.setdefault(d, (name, arr.shape, shape))
            out[self.params[name]] = arr
        if not self._fast:  # (a product of dimensions turns the fast path off)
            sizes.check_products()
        if self.symmetric:
            self._check_symmetric(out)
        return out

    def __call__(self, /, *args, **kwargs):
        if args:
            raise by_name(self.name, args, self.params)
        # fast path: float64 arrays of the right ranks under their own names
        if self._fast and kwargs.keys() == self._keys:
            nd = self._ndarray
            for k, d in self._ndims:
                v = kwargs[k]
                if d == 0:
                    if type(v) is not float:
                        break
                elif type(v) is not nd or v.ndim != d or v.dtype.kind != "f":
                    break
            else:
                if all(kwargs[k1].shape[a1] == kwargs[k2].shape[a2] for k1, a1, k2, a2 in self._same_dims) \
                        and all(kwargs[k].shape[a] == d for k, a, d in self._fixed_dims):
                    if self.symmetric:
                        self._check_symmetric(kwargs)
                    try:
                        return self._f(**kwargs)
                    except self._np.linalg.LinAlgError as e:
                        raise singular(self.name, e) from None
        kwargs = check_arguments(self.name, kwargs, self.params)
        try:
            out = self._f(**self.convert(kwargs, checked=True))
        except self._np.linalg.LinAlgError as e:
            raise singular(self.name, e) from None
        if self.wrt is not None and self._out_shape is not None and len(self._out_shape) == 1 \
                and self._np.ndim(kwargs[self.wrt]) == 2:  # a vector given as a column or row: so is its gradient
            return self._np.reshape(out, self._np.shape(kwargs[self.wrt]))
        if self.grads_like:  # (value_and_grad: the same for each gradient)
            for k in self.grads_like:
                if len(self.user_shapes[k]) == 1 and self._np.ndim(kwargs[k]) == 2:
                    out[1][k] = self._np.reshape(out[1][k], self._np.shape(kwargs[k]))
        if self._out_shape is not None and any(d == 1 for d in self._out_shape):
            like = [self.wrt] if self.wrt is not None else self.given_like
            if like and len(self._out_shape) == 2 and all(self._np.ndim(kwargs[k]) == 1 for k in like):
                return self._np.reshape(out, -1)  # given as 1-D arrays, returned as one
            out = self._np.reshape(out, self._concrete_out(kwargs))
        return out

    wrt = None  # the variable whose gradient this returns (its shape as given is kept)
    grads_like = ()  # value_and_grad: the variables of the gradients (value, {name: gradient}) it returns
    given_like = ()  # without wrt: a declared row or column result is 1-D if all these were given so

    def _concrete_out(self, kwargs):
        np = self._np
        sizes = {}
        for name, shape in self.user_shapes.items():
            given = np.shape(kwargs[name])
            if len(given) < len(shape):  # a 1-D array for a row or column: skip the 1
                given = tuple(1 if d == 1 else given[0] for d in shape)
            for d, s in zip(shape, given):
                sizes.setdefault(d, s)
        return tuple(d if isinstance(d, int) else sizes[d] for d in self._out_shape)


def as_floats(name, value):
    """value as a float array, or an error that names it: text ('1.5' too, which NumPy's float
    conversion reads but no ufunc takes), None (nan in that conversion), ragged lists, complex
    numbers (whose imaginary part that conversion drops)."""
    import numpy as np

    if value is None or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} is {type(value).__name__}; matcalc's functions take numbers and arrays")
    try:
        raw = np.asarray(value)  # (one conversion: its dtype says what the entries were)
    except (ValueError, TypeError) as e:  # (ragged lists)
        raise _not_numbers(name, e) from None
    if raw.dtype.kind == "c":
        raise TypeError(f"{name} is complex; matcalc's functions take real numbers")
    held = "text" if raw.dtype.kind in "US" else None
    if raw.dtype.kind == "O":  # (a list of numbers and None or text: one look at each entry)
        flat = raw.reshape(-1)
        held = "None" if any(v is None for v in flat) else "text" if any(
            isinstance(v, (str, bytes)) for v in flat) else None
    if held:
        raise TypeError(f"{name} holds {held}; matcalc's functions take numbers and arrays of numbers")
    try:
        return np.asarray(raw, dtype=float)
    except (ValueError, TypeError) as e:  # (a dict)
        raise _not_numbers(name, e) from None


def singular(name, error):
    """NumPy's LinAlgError (a singular matrix) with what met it."""
    return type(error)(f"{name}: a matrix it inverts or factorises (inv, solve, det, logdet) is singular at "
                       f"these values ({error})")


def _not_numbers(name, error):
    """NumPy's error converting an argument to floats, with the argument's name."""
    return type(error)(f"{name} is not an array of numbers ({error}); matcalc's functions take numbers and arrays")
