"""The numerical check: the emitted gradient against central finite differences of λ,
on random inputs drawn from each symbol's domain, with a distinct size for every
dimension so that a missing transpose cannot pass."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from . import ir
from .ops import REGISTRY

DOMAINS = ("normal", "positive", "spd", "invertible", "invertible_signed", "unit_simplex", "onehot",
           "symmetric", "small")
_LARGE = {"n", "m", "k", "p", "N", "M", "K", "P", "T"}


@dataclass
class CheckReport:
    ok: bool
    max_rel_error: float
    tolerance: float
    sizes: dict
    domains: dict
    entries_checked: int
    draws: int
    message: str = ""
    details: list = field(default_factory=list)

    def __post_init__(self):  # (plain Python values: a NumPy bool is not JSON)
        self.ok, self.max_rel_error = bool(self.ok), float(self.max_rel_error)
        self.entries_checked, self.draws = int(self.entries_checked), int(self.draws)

    def __bool__(self):
        return self.ok

    def __str__(self):
        verdict = "ok" if self.ok else "FAILED"
        sizes = sizes_text(self.sizes)
        if not self.ok and self.entries_checked == 0:  # nothing compared: not a failure of G
            return f"check cannot be made ({sizes}): {self.message}"
        return (f"check {verdict}: max relative error {self.max_rel_error:.2e} "
                f"(tolerance {self.tolerance:.0e}) over {self.entries_checked} finite differences, "
                f"{self.draws} random draws, {sizes}" + (f"; {self.message}" if self.message else ""))

    def _repr_pretty_(self, printer, cycle):  # IPython and Jupyter show the sentence, as print() does
        printer.text(str(self))

    def to_dict(self):
        return {"ok": self.ok, "max_rel_error": self.max_rel_error, "tolerance": self.tolerance,
                "sizes": self.sizes, "domains": self.domains, "entries_checked": self.entries_checked,
                "draws": self.draws, "message": self.message}


def sizes_text(sizes: dict) -> str:
    """'sizes a=3, b=4', or 'the declared sizes' where every dimension was given as a number."""
    return "sizes " + ", ".join(f"{k}={v}" for k, v in sizes.items()) if sizes else "the declared sizes"


def choose_sizes(dims, fixed=None) -> dict:
    """A distinct size per dimension name; the usual 'large' names (n, m, k, p) get larger sizes."""
    fixed = dict(fixed or {})
    taken = set(fixed.values())
    # (past the listed sizes, the next unused ones: an expression may have any number of dimensions)
    small = iter(s for s in itertools.chain([3, 4, 5, 2, 6, 7, 8, 9, 10, 11, 12, 13], itertools.count(14))
                 if s not in taken)
    large = iter(s for s in itertools.chain([9, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], itertools.count(20))
                 if s not in taken)
    out = {}
    for d in dims:
        if isinstance(d, str) and "*" in d:  # a product of dimensions: sized by its factors
            continue
        if d in fixed:
            out[d] = fixed[d]
            continue
        pool = large if d in _LARGE else small
        s = next(x for x in pool if x not in taken)
        taken.add(s)
        out[d] = s
    return out


def infer_domains(expr: ir.Expr, symbols: dict) -> dict:
    """Guess where each symbol must be drawn from so that λ is defined."""
    positive, spd, small = set(), set(), set()
    for node in ir.walk(expr):
        op = node.op
        sensitive = None
        need = REGISTRY[op].domain if op in REGISTRY else None
        if need == "invertible_if_negative":
            need = "invertible" if node.attr < 0 else None
        if need == "positive":
            sensitive = node.args[0]
        elif need in ("unit_interval", "small"):
            small.update(s.attr for s in ir.symbols(node.args[0]))
        elif op == "pow" and not (node.args[1].op == "const" and float(node.args[1].attr).is_integer()):
            sensitive = node.args[0]
        elif op == "pow" and node.args[1].op == "const" and node.args[1].attr < 0:
            sensitive = node.args[0]
        elif op == "div":
            sensitive = node.args[1]
        if sensitive is not None:
            positive.update(s.attr for s in ir.symbols(sensitive))
        if need == "invertible":  # (a factor of a product, A in inv(A@B): Gaussian, as all-positive
            for s in ir.symbols(node.args[0]):  # factors make A@B nearly rank one)
                if s.shape[0] == s.shape[1] and s.shape != ir.SCALAR:
                    spd.add(s.attr)
                elif s.shape == ir.SCALAR:
                    positive.add(s.attr)
    out = {}
    for name, s in symbols.items():
        square = s.shape[0] == s.shape[1] and s.shape != ir.SCALAR
        # a square matrix that inv/det/logdet need invertible: well-conditioned and NOT symmetric,
        # so that X⁻ᵀ ≠ X⁻¹ and a dropped transpose fails; with det < 0 on every other draw where
        # λ only needs it invertible (logdet is log|det|), never under log(det(·)) or sqrt
        if name in spd and square:
            out[name] = "invertible" if name in positive else "invertible_signed"
        else:
            out[name] = ("positive" if name in positive or name in spd
                         else "small" if name in small else "normal")
    return out


def check_domains(domain, symbols) -> dict:
    """A user's domain= mapping, validated: known symbols and known domain names only."""
    from .errors import DeriveError

    if domain is None:
        return {}
    if not isinstance(domain, dict):
        raise DeriveError(f"domain must be a dict name -> domain, got {type(domain).__name__}")
    for name, dom in domain.items():
        if name not in symbols:
            raise DeriveError(f"domain= names {name!r}, which is not a symbol of the expression; its "
                              f"symbols are {', '.join(symbols)}")
        if dom not in DOMAINS:
            raise DeriveError(f"unknown domain {dom!r} for {name}; the domains are {', '.join(DOMAINS)}")
        shape = symbols[name].shape
        if dom in ("spd", "invertible", "invertible_signed", "symmetric") and \
                (shape[0] != shape[1] or shape == ir.SCALAR):
            raise DeriveError(f"domain {dom!r} needs a square matrix, but {name} is {ir.describe(shape)}")
    return dict(domain)


def draw(shape_np: tuple, domain: str, rng) -> np.ndarray | float:
    if domain == "spd":
        n = shape_np[0]
        R = rng.standard_normal((n, n))
        v = R @ R.T / n + np.eye(n)
    elif domain in ("invertible", "invertible_signed"):
        # eigenvalues within about 1 of 2: well-conditioned, det > 0, and not symmetric
        n = shape_np[0]
        v = 2 * np.eye(n) + rng.standard_normal((n, n)) / np.sqrt(n)
        if domain == "invertible_signed":
            v[0] = -v[0]  # det < 0
    elif domain == "symmetric":
        R = rng.standard_normal(shape_np)
        v = (R + R.T) / 2
    elif domain == "positive":
        v = rng.uniform(0.2, 2.0, size=shape_np)
    elif domain == "small":  # arguments of arcsin, arccos, tan: well inside (-1, 1)
        v = rng.uniform(-0.3, 0.3, size=shape_np)
    elif domain == "unit_simplex":
        v = rng.uniform(0.2, 2.0, size=shape_np)
        v = v / v.sum()
    elif domain == "onehot":
        v = np.zeros(shape_np)
        v.flat[rng.integers(v.size)] = 1.0
    else:
        v = rng.standard_normal(shape_np)
    return float(v) if shape_np == () else v


def numeric_size(d, sizes) -> int:
    if isinstance(d, int):
        return d
    if "*" in d:
        return math.prod(numeric_size(f, sizes) for f in ir.dim_factors(d))
    return sizes.get(d, d)


def numeric_shape(shape, sizes) -> tuple:
    return tuple(numeric_size(d, sizes) for d in shape)


def random_inputs(user_shapes: dict, domains: dict, sizes: dict, rng) -> dict:
    return {name: draw(numeric_shape(us, sizes), domains.get(name, "normal"), rng)
            for name, us in user_shapes.items()}


def finite_difference_check(f, grad, inputs: dict, wrt: str, rng, h: float = 1e-6,
                            max_entries: int = 40, directions: int = 3, symmetric: bool = False,
                            tol: float = 1e-5, constant: bool = False, careful: bool = False):
    """(max relative error, number of comparisons) of grad against central differences of f.
    ``symmetric``: wrt is a symmetric matrix, perturbed only along symmetric directions
    (Eᵢⱼ + Eⱼᵢ), where λ's change is G:dS.  ``constant`` and ``careful``: see _judge."""
    x0 = inputs[wrt]
    G = np.asarray(grad(**inputs), dtype=float)
    base = np.asarray(x0, dtype=float)
    if G.shape != base.shape:
        return float("inf"), 0, f"the gradient has shape {G.shape}, {wrt} has {base.shape}"
    if symmetric:
        return _symmetric_fd(f, G, inputs, wrt, base, rng, h, max_entries, directions, tol, constant, careful)

    def at(x):
        args = dict(inputs)
        args[wrt] = float(x) if base.shape == () else x
        return float(f(**args))

    flat = base.reshape(-1)
    idx = np.arange(flat.size) if flat.size <= max_entries else rng.choice(flat.size, max_entries, replace=False)
    moves, an = [], []  # (a direction, its step) and G along it
    for i in idx:
        E = np.zeros(flat.size)
        E[i] = 1.0
        moves.append((E.reshape(base.shape), h * max(1.0, abs(flat[i]))))
        an.append(G.reshape(-1)[i])
    scale_x = max(1.0, float(np.max(np.abs(flat)))) if flat.size else 1.0
    for _ in range(directions if flat.size > 1 else 0):
        v = rng.standard_normal(flat.size)
        v /= np.linalg.norm(v)
        moves.append((v.reshape(base.shape), h * scale_x))
        an.append(float(G.reshape(-1) @ v))
    fd, an = _central(at, base, moves), np.array(an)
    if not (np.all(np.isfinite(fd)) and np.all(np.isfinite(an))):
        return float("inf"), len(fd), "non-finite values"
    scale = max(float(np.max(np.abs(fd))), float(np.max(np.abs(an))), float(np.max(np.abs(G))) if G.size else 0.0)
    return _judge(np.max(np.abs(fd - an)), fd, scale, _noise(at, base, h), tol,
                  lambda k: _central(at, base, moves, k), constant, careful)


def _central(at, base, moves, k: float = 1.0) -> np.ndarray:
    """Central differences of λ at base along each (direction, step) of moves, the steps k
    times as long."""
    if base.shape == ():
        return np.array([(at(base + k * s) - at(base - k * s)) / (2 * k * s) for _, s in moves])
    return np.array([(at(base + k * s * D) - at(base - k * s * D)) / (2 * k * s) for D, s in moves])


ZERO = 1e-12  # a gradient, a Hessian or a Jacobian whose entries are all below this is 0


def _judge(err: float, fd, signal: float, noise: float, tol: float, differences, constant: bool = False,
           careful: bool = False):
    """_compare; and where that fails, again with the differences' own spread (step_spread)
    counted as noise: λ's rounding that no small step shows (logsumexp(X) − logsumexp(Xᵀ),
    sums of the same terms in two orders) fails nothing, nor does λ that turns faster than
    the step (sin(1e8·b): its differences over h and 2h agree, and are 0.5% of the derivative;
    sin(1e15·b): they are noise), which makes the draw "unmeasurable".
    ``careful`` (a longer step): that spread, and the spread against a shorter step, count from
    the start: a long step's truncation error (1/p at p = 0.08 over 1e-2: 1%) and its aliasing
    (sin(628α) over 1e-2) show there.  A zero gradient and zero differences are "zero" where
    the noise could not hide a gradient above ZERO, or where λ does not read the variable at all
    (``constant``: 1000 + 0·X; 1e15 + wᵀx has zero differences at small steps too, and reads w)."""
    if signal < ZERO:
        return (0.0, len(fd), "zero") if noise <= ZERO or constant else (float("inf"), len(fd), "unmeasurable")
    if careful:
        noise = max(noise, 2 * step_spread(fd, differences))
    out = _compare(err, signal, noise, tol, len(fd))
    if out[2] != "unmeasurable" and out[0] > tol:
        spread = step_spread(fd, differences)
        if not careful:  # (careful counted that spread already)
            out = _compare(err, signal, max(noise, 2 * spread), tol, len(fd))
        if out[0] > tol and spread > 0.01 * float(np.max(np.abs(fd))):
            return float("inf"), len(fd), "unmeasurable"  # differences that do not settle as the step
    return out                                              # shrinks measure nothing (sin(1e15·b))


def step_spread(fd, differences) -> float:
    """How far the differences move over twice the step and over 0.37 of it (differences(k):
    over k times the step): not a half, at which a sine whose period is the step (sin(628α)
    over 1e-2) is as blind as at the step itself."""
    return max(float(np.max(np.abs(fd - differences(k)), initial=0.0)) for k in (2.0, 0.37))


def smooth(root) -> bool:
    """Whether every function in the expression is smooth (no relu, abs, sign, norm…): a
    longer step could straddle a kink of one that is not (longer_steps)."""
    return all(REGISTRY[n.op].smooth for n in ir.walk(root) if n.op in REGISTRY)


LONGER = (1e2, 1e4)  # the steps longer_steps tries, as multiples of the first


def longer_steps(compare, tol: float, h: float = 1e-6, longer=LONGER, kinks: bool = False):
    """compare(h) -> (error, comparisons, note); where the differences over h were λ's
    rounding ("unmeasurable": λ's rounding over h comes near hiding 1% of what they measure,
    as in 1e8 + X:X), compare(h·k) for the longer steps in turn: the rounding shrinks as 1/h, and a
    step too long for λ's curvature shows as the spread of the differences over h·k and 2h·k,
    which _judge counts as noise.  A longer step only ever passes: where it fails (λ that
    oscillates faster than the step: 1e12 + sin(500α), whose differences over h·k and 2h·k can
    agree far from the derivative) or leaves λ's domain, the draw tested nothing.  Where λ
    has ``kinks`` (not smooth), a longer step, which could straddle one, only says "zero"
    (differences below ZERO: a step across a kink shows its jump)."""
    out = compare(h)
    for k in longer:
        if out[2] != "unmeasurable":
            break
        again = compare(h * k, True)
        if again[2] != "unmeasurable" and (again[2] == "non-finite values" or again[0] > tol
                                           or kinks and again[2] != "zero"):
            break
        out = again
    return out


def _noise(at, base, h: float, symmetric: bool = False) -> float:
    """The rounding noise of a central difference of λ over a step h (for an array λ, of its
    entries the largest): λ's own rounding over h, with a margin of 3.  That rounding is at
    least eps·|λ|, and more where λ is a difference of much larger terms (tr(AX)² − (A:X)²,
    identically 0): measured, as the spread of (λ(x+δ) + λ(x−δ))/2 − λ(x) (λ's linear change
    cancels) over steps δ of a few units in the last place of x's entries."""
    eps = float(np.finfo(float).eps)
    rng = np.random.default_rng(0)  # (its own draws: the check's own stay as they were)
    f0 = at(base)
    spread = eps * float(np.max(np.abs(f0), initial=0.0))
    for _ in range(4):
        r = rng.uniform(-1.0, 1.0, np.shape(base))
        d = base * (4 * eps) * ((r + r.T) / 2 if symmetric else r)
        try:
            spread = max(spread, float(np.max(np.abs(at(base + d) + at(base - d) - 2 * f0), initial=0.0)) / 2)
        except np.linalg.LinAlgError:  # singular a few units in the last place away: nothing to measure
            return float("inf")
    return float(3 * spread / h) if np.isfinite(spread) else float("inf")


COARSE = "λ's rounding let this check see relative errors above {:.0e} only"


def _compare(err: float, signal: float, noise: float, tol: float, n: int):
    """(err relative to the scale _scale finds, n, its note), or "unmeasurable" for a draw
    that tested nothing."""
    got = _scale(signal, noise, tol)
    if got is None:
        return float("inf"), n, "unmeasurable"
    return float(err) / got[0], n, got[1]


def _scale(signal: float, noise: float, tol: float):
    """(what an error is relative to, a note): the signal, where the differences' noise is
    below the tolerance; noise/tol and a note (COARSE) where it is above that but below half
    of 1% of the signal; None above, where it comes near hiding an error of 1% (λ a difference
    of much larger terms, 1e10 + wᵀx, det(AXB) ≡ 0 at sizes where AXB is singular): that draw
    tests nothing."""
    if noise > 0.005 * signal:  # (half of 1%: an error of 1% is always seen)
        return None
    if noise > tol * signal:
        return noise / tol, COARSE.format(noise / signal)
    return signal, ""


def _symmetric_fd(f, G, inputs, wrt, base, rng, h, max_entries, directions, tol, constant=False, careful=False):
    n = base.shape[0]

    def at(x):
        return float(f(**dict(inputs, **{wrt: x})))

    pairs = [(i, j) for i in range(n) for j in range(i, n)]
    if len(pairs) > max_entries:
        pairs = [pairs[k] for k in rng.choice(len(pairs), max_entries, replace=False)]
    dirs = []
    for i, j in pairs:
        E = np.zeros((n, n))
        E[i, j] = E[j, i] = 1.0
        dirs.append(E)
    for _ in range(directions):
        V = rng.standard_normal((n, n))
        V = (V + V.T) / 2
        dirs.append(V / np.linalg.norm(V))
    step = h * max(1.0, float(np.max(np.abs(base))))
    moves = [(V, step) for V in dirs]
    fd = _central(at, base, moves)
    an = np.array([float(np.sum(G * V)) for V in dirs])
    if not (np.all(np.isfinite(fd)) and np.all(np.isfinite(an))):
        return float("inf"), len(fd), "non-finite values"
    scale = max(float(np.max(np.abs(fd))), float(np.max(np.abs(an))), float(np.max(np.abs(G))))
    # G:V only sees G's symmetric part: the gradient must also be symmetric itself
    err = max(float(np.max(np.abs(fd - an))), float(np.max(np.abs(G - G.T))))
    return _judge(err, fd, scale, _noise(at, base, h, symmetric=True), tol, lambda k: _central(at, base, moves, k),
                  constant, careful)


ALL_ZERO = "the gradient and the finite differences were zero on every draw"
SINGULAR = "the gradient met a singular matrix on every draw where λ was finite"
UNMEASURABLE = ("λ's finite differences were its rounding noise on every draw, too coarse to compare the gradient "
                "with (λ much larger than its changes: a large constant in it, a difference of much larger terms, "
                "or a determinant of a product singular at these sizes; or λ turning faster than the differences' "
                "steps, as sin(1e8*x))")
RETRIES = 5  # other size choices tried where the first gave no finite values (or, inverting, failed)


def over_size_choices(user_shapes: dict, fixed, run, inverts: bool = True) -> CheckReport:
    """run(sizes) -> a CheckReport, for sizes of the dimension names in ``user_shapes`` (a
    product n*m sized by its factors): with the usual sizes, and if the values were not finite
    there (or, where λ inverts a matrix or takes a determinant, ``inverts``, if the check did
    not pass), again with the sizes handed out in other orders (X drawn 3×4 makes XᵀX
    singular, 4×3 does not; _other_sizes).  A pass at other sizes says what happened at the
    first."""
    dims = []
    for shape in user_shapes.values():
        for d in shape:
            for f in ir.dim_factors(d) if isinstance(d, str) else ():
                if isinstance(f, str) and f not in dims:
                    dims.append(f)

    def at(sizes):
        try:
            return run(sizes)
        except MemoryError:  # (a kron of krons: its arrays grow as the product of their sizes)
            from .errors import OutOfMemory

            raise OutOfMemory(f"the numerical check ran out of memory at {sizes_text(sizes)}: give smaller "
                              "sizes (d.check(sizes={...}) in Python; --shape's sizes on the command line)") from None

    first = at(choose_sizes(dims, fixed))
    # all zero where λ inverts: det(XᵀX) of a wide X is 0 for every X, which tests nothing
    blank = first.ok and inverts and first.message == ALL_ZERO
    if first.ok and not blank or (np.isfinite(first.max_rel_error) and not inverts):
        return first
    second = None
    for other in _other_sizes(dims, fixed, first.sizes):
        second = at(other)
        # after a first that tested nothing, a result here counts where it tests something (not
        # zeros everywhere); after a failure, only a pass at the full tolerance
        tested = np.isfinite(second.max_rel_error) and second.message != ALL_ZERO
        if tested and (blank or not np.isfinite(first.max_rel_error)) \
                or tested and second.ok and not second.message.startswith(COARSE.split("{")[0]):
            break
    else:
        return first
    what = {UNMEASURABLE: "the finite differences were λ's rounding noise", ALL_ZERO: "the gradient and the "
            "finite differences were zero", SINGULAR: "the gradient met a singular matrix"}.get(first.message)
    if what:
        second.message = "; ".join(filter(None, [second.message, (
            f"at {sizes_text(first.sizes)} {what}: products such as XᵀX are singular at some sizes")]))
    if blank or not np.isfinite(first.max_rel_error):
        return second
    # failed at the first sizes and passed at the others: XᵀX of a wide X is singular, and
    # det(XᵀX) is 0 there whatever X is; a gradient that is wrong fails at both
    second.message = "; ".join(filter(None, [second.message, (
        f"at {sizes_text(first.sizes)} it failed (max relative error {first.max_rel_error:.2e}): products such as "
        "XᵀX are singular at some sizes, where a gradient through their inverse is not defined")]))
    return second


def _other_sizes(dims, fixed, tried, most: int = RETRIES):
    """Up to ``most`` other ways to hand out the sizes: the names in reverse order, then
    other orders (AXB of A n×p, X p×m, B m×n is singular unless n is the smallest), or for a
    single free name other sizes."""
    free = [d for d in dims if d not in (fixed or {})]
    values = [tried[d] for d in free]  # (the sizes themselves change hands: m is large in any order)
    seen = [tried]
    # one free size has no other order: other values of it (X 3×m with m fixed… or d fixed at 3:
    # XᵀX is singular for every m > 3), sizes the fixed ones do not have first
    others = [[v] for v in sorted((2, 3, 4, 5, 6), key=lambda v: v in (fixed or {}).values())] if len(free) == 1 else []
    for order in itertools.chain([values[::-1]], itertools.permutations(values), others):
        sizes = dict(tried, **dict(zip(free, order)))
        if sizes not in seen:
            seen.append(sizes)
            yield sizes
            if len(seen) > most:
                return


def _or_nan(f, inputs):
    """f(**inputs), or NaN where a solve or inverse inside meets a singular matrix (XᵀX of a
    wide X): a draw where λ is not defined, as one where it is not finite."""
    try:
        return f(**inputs)
    except np.linalg.LinAlgError:
        return float("nan")


def gradient_check(value_function, gradient, wrt: str, user_shapes: dict, symbols: dict, lam,
                   symmetric=(), seed: int = 0, tol: float = 1e-5, draws: int = 2, domain: dict | None = None,
                   sizes: dict | None = None, reads=None) -> CheckReport:
    """The check policy: ``gradient`` (a function of every symbol) against central finite
    differences of ``value_function`` on random inputs, each symbol drawn from the domain λ
    (``lam``, the IR as written) needs; draws where λ is not finite are retried (domains
    widened after two), draws where everything is zero (every relu off) drawn again; sizes
    as ``over_size_choices`` picks them.  ``reads``: the symbols value_function reads (a
    gradient of λ that does not read wrt is 0 whatever λ's size)."""
    domain = check_domains(domain, symbols)
    constant = reads is not None and wrt not in reads
    return over_size_choices(user_shapes, sizes, lambda s: _gradient_check_at(
        s, value_function, gradient, wrt, user_shapes, symbols, lam, symmetric, seed, tol, draws, domain,
        constant), inverts=inverts(lam))


def inverts(lam) -> bool:
    """Whether λ inverts a matrix or takes a determinant: then a product such as XᵀX can be
    singular at some sizes (and only then may a failed check be one of those sizes)."""
    return any(n.op in ("inv", "det", "logdet") or n.op == "matrix_power" and n.attr < 0 for n in ir.walk(lam))


def _gradient_check_at(sizes, value_function, gradient, wrt, user_shapes, symbols, lam, symmetric,
                       seed, tol, draws, domain, constant=False) -> CheckReport:
    domains = infer_domains(lam, symbols)
    for name in symmetric:  # a symmetric matrix is drawn symmetric (SPD where it must be)
        domains[name] = "spd" if domains.get(name) in ("invertible", "invertible_signed", "positive") \
            else "symmetric"
    domains.update(domain or {})
    # λ that only needs X invertible: det X < 0 on every other draw (det > 0 on the others)
    signed = [k for k, v in domains.items() if v == "invertible_signed" and k not in (domain or {})]
    rng = np.random.default_rng(seed)
    worst, total, note, used, zero_draws, singular, unmeasurable = 0.0, 0, "", 0, 0, 0, 0
    for attempt in range(draws + 14):
        if used >= draws:
            break
        this = dict(domains, **{k: "invertible" for k in signed}) if used % 2 == 0 else domains
        inputs = random_inputs(user_shapes, this, sizes, rng)
        for name in symmetric:
            inputs[name] = (inputs[name] + inputs[name].T) / 2
        with np.errstate(all="ignore"):
            value = _or_nan(value_function, inputs)
        if not np.all(np.isfinite(value)):
            if attempt >= 2:  # widen the domains once λ keeps failing to be finite
                for name, s in user_shapes.items():
                    if domain and name in domain:
                        continue
                    domains[name] = "spd" if len(s) == 2 and s[0] == s[1] else "positive"
            continue
        with np.errstate(all="ignore"):
            try:
                err, n, msg = longer_steps(lambda h, careful=False: finite_difference_check(
                    value_function, gradient, inputs, wrt, rng, h, symmetric=wrt in symmetric, tol=tol,
                    constant=constant, careful=careful), tol, kinks=not smooth(lam))
            except np.linalg.LinAlgError:  # a singular matrix where the gradient inverts it
                singular += 1
                continue
        if msg == "unmeasurable":  # (a draw that tested nothing: another is drawn)
            unmeasurable += 1
            continue
        if msg == "zero" and zero_draws < 8:  # all zero here (every relu off?): draw again
            zero_draws += 1
            continue
        worst, total, used = max(worst, err), total + n, used + 1
        if msg == "zero":
            msg = ALL_ZERO
        note = note or msg
    if used == 0:
        why = (UNMEASURABLE if unmeasurable else SINGULAR if singular
               else "λ was not finite on any random draw; say where to draw its inputs: "
               "d.check(domain={...}) in Python, --domain NAME=KIND on the command line")
        return CheckReport(False, float("inf"), tol, sizes, domains, 0, 0, why)
    return CheckReport(worst <= tol, worst, tol, sizes, domains, total, used, note)
