"""The helper functions of emitted code.

Emitted modules are standalone: they import NumPy only, and the text of each helper
they call is copied into them (``codegen.HELPERS`` maps a helper's name to its source,
read from this file).  This module is also an ordinary importable module, so the helpers
can be linted, tested and called directly.

Each helper block starts at a ``# helper: NAME`` line (``, needs: A B`` names the blocks
it calls) and runs to the next one.  A block may hold several functions and module-level
state (``_ONES``, ``_PICKED``, ``_LAPACK``), and reads only ``np`` and other helpers.

``_lu``: one LU factorisation of a matrix, shared by its inv, solve, logdet and det,
through the LAPACK inside NumPy's own OpenBLAS (numpy.linalg factors again on every call
and computes inv as a solve against I).  Without that library: numpy.linalg.
"""
import numpy as np


# helper: _cube
# whole and half powers without np.power, which takes 4-8 times as long; the second step
# writes into the first one's new array (a second large array costs its page faults)
def _cube(t):
    return np.square(t) * t


def _fourth(t):
    s = np.square(t)
    return np.square(s, out=s) if type(s) is np.ndarray else s * s


def _inv_square(t):
    s = np.divide(1.0, t)  # (1/t first: t*t overflows where np.power's t**-2 is subnormal)
    return np.square(s, out=s) if type(s) is np.ndarray else s * s


def _inv_sqrt(t):
    s = np.sqrt(t)  # (at -0.0: -inf, where np.power gives inf; a third pass to fix the sign cost 7-10%)
    return np.divide(1.0, s, out=s) if type(s) is np.ndarray else 1.0 / s


# helper: _sigmoid
def _sigmoid(z):
    # 1/(1 + e^-z): SciPy's expit, in a quarter of the time of exp(-logaddexp(0, -z)), the form without SciPy
    f = _EXPIT[0]
    if f is None:
        try:
            from scipy.special import expit as f
        except ImportError:
            def f(t):
                return np.exp(-np.logaddexp(0.0, -t))
        _EXPIT[0] = f
    return f(z)


_EXPIT = [None]


# helper: _logsumexp
def _logsumexp(z):
    m = np.maximum.reduce(z, None, initial=-np.inf)
    return m + np.log(np.add.reduce(np.exp(z - m), None))


# helper: _softmax
def _softmax(z):
    e = np.exp(z - np.maximum.reduce(z, None, initial=-np.inf))
    return e / np.add.reduce(e, None)


# helper: _logsumexp_axis
def _logsumexp_axis(z, axis):
    m = np.maximum.reduce(z, axis, keepdims=True, initial=-np.inf)
    return np.squeeze(m, axis) + np.log(np.add.reduce(np.exp(z - m), axis))


# helper: _softmax_axis
def _softmax_axis(z, axis):
    e = np.exp(z - np.maximum.reduce(z, axis, keepdims=True, initial=-np.inf))
    return e / np.add.reduce(e, axis, keepdims=True)


# helper: _erf
def _erf(z):
    from scipy.special import erf  # NumPy has no erf
    return erf(z)


# helper: _erfc
def _erfc(z):
    from scipy.special import erfc  # 1 − erf(z), exact where erf(z) is near 1
    return erfc(z)


# helper: _erfcx
def _erfcx(z):
    from scipy.special import erfcx  # exp(z²) erfc(z), finite where erfc(z) underflows
    return erfcx(z)


# helper: _logerfc
def _logerfc(z):
    # log erfc(z): log1p(-erf(z)) below 1, log 2 + log Φ(-√2 z) from 1 (finite where erfc underflows)
    from scipy.special import erf, log_ndtr
    return np.where(z < 1.0, np.log1p(-erf(np.minimum(z, 1.0))),
                    0.6931471805599453 + log_ndtr(np.maximum(z, 1.0) * -1.4142135623730951))


# helper: _gammaln
def _gammaln(z):
    from scipy.special import gammaln  # log |Γ(z)| (NumPy has no gamma function)
    return gammaln(z)


# helper: _digamma
def _digamma(z):
    from scipy.special import digamma  # ψ(z), the derivative of log Γ(z)
    return digamma(z)


# helper: _polygamma
def _polygamma(k, z):
    from scipy.special import polygamma  # ψ⁽ᵏ⁾(z), the (k+1)-th derivative of log Γ(z)
    return polygamma(k, z)


# helper: _xlogy
def _xlogy(a, b):
    from scipy.special import xlogy  # a log b, and 0 where a = 0 (0·log 0 = 0: d(xᵏ)/dk at x = 0)
    return xlogy(a, b)


# helper: _gelu
def _gelu(z):
    from scipy.special import erfc  # 1 + erf(u) = erfc(−u), exact where erf(u) is near −1
    return 0.5 * z * erfc(z * -0.7071067811865476)


# helper: _chain
def _chain(*fs):
    # the matrix product of fs in the order that costs least for their shapes (1-D ends: a row
    # first, a column last), as np.linalg.multi_dot orders it; three and four factors inline (the
    # costs of their 2 and 5 orders: multi_dot's call took 10-20 us more)
    if len(fs) == 3:
        a, b, c = fs
        p = a.shape[0] if a.ndim == 2 else 1
        q, r = b.shape
        s = c.shape[1] if c.ndim == 2 else 1
        if p * q * r + p * r * s <= q * r * s + p * q * s:
            return a.dot(b).dot(c)
        return a.dot(b.dot(c))
    if len(fs) != 4:
        return np.linalg.multi_dot(fs)
    a, b, c, d = fs
    p0 = a.shape[0] if a.ndim == 2 else 1
    p1, p2 = b.shape
    p3 = c.shape[1]
    p4 = d.shape[1] if d.ndim == 2 else 1
    costs = (p0 * p1 * p2 + p0 * p2 * p3 + p0 * p3 * p4,  # ((ab)c)d
             p1 * p2 * p3 + p0 * p1 * p3 + p0 * p3 * p4,  # (a(bc))d
             p0 * p1 * p2 + p2 * p3 * p4 + p0 * p2 * p4,  # (ab)(cd)
             p1 * p2 * p3 + p1 * p3 * p4 + p0 * p1 * p4,  # a((bc)d)
             p2 * p3 * p4 + p1 * p2 * p4 + p0 * p1 * p4)  # a(b(cd))
    k = costs.index(min(costs))
    if k == 0:
        return a.dot(b).dot(c).dot(d)
    if k == 1:
        return a.dot(b.dot(c)).dot(d)
    if k == 2:
        return a.dot(b).dot(c.dot(d))
    if k == 3:
        return a.dot(b.dot(c).dot(d))
    return a.dot(b.dot(c.dot(d)))


# helper: _div
def _div(a, b):
    # a / b of Python numbers, with NumPy's result where b is 0 (inf, -inf or nan, and its warning)
    try:
        return a / b
    except ZeroDivisionError:
        return np.float64(a) / b


# helper: _over_norm
def _over_norm(a, n):
    # a / ‖x‖, and 0 where ‖x‖ = 0: the least-norm subgradient of ‖x‖ there
    return 0.0 * a if n == 0 else a / n  # (nan where ‖x‖ is nan, as a / n)


# helper: _norm2
def _norm2(x):
    n = np.linalg.norm(x)
    if 0.0 < n < np.inf:
        return n
    m = np.max(np.abs(x), initial=0.0)  # the sum of squares under- or overflowed: scale first
    return m * np.linalg.norm(x / m) if 0.0 < m < np.inf else n


# helper: _ones
def _ones(n):
    """n ones, read-only and kept: a sum is a BLAS dot product with them (a fraction of
    the call overhead of a ufunc reduction on small arrays, and no slower on large ones)."""
    v = _ONES.get(n)
    if v is None:
        if len(_ONES) > 64:
            _ONES.clear()
        v = _ONES[n] = np.ones(n)
        v.flags.writeable = False
    return v


_ONES = {}


# helper: _outer, needs: _pick
def _outer(u, v):
    """u vᵀ, by whichever form runs fastest for this shape in this process (_pick): a broadcast
    multiply (np.outer's way), einsum's product loop (faster than the broadcast at most
    sizes), a BLAS product of a column and a row (faster still at some sizes, and several
    times slower at others, which differ between CPUs), or einsum split over threads (large
    arrays on idle CPUs).  All are the same products, so the same numbers."""
    key = ("outer", u.shape[0], v.shape[0])
    due = _DUE.get(key)  # (_pick's own first step, inline: this is called often on small arrays)
    if due is not None and due[0] > 1:
        due[0] -= 1
        return due[4](u, v)
    return _pick(key, _OUTER_FORMS, u, v)


def _outer_einsum(u, v, out=None):
    return np.einsum("i,j->ij", u, v, out=out)


def _outer_blas(u, v):
    return u[:, None].dot(v[None, :])


def _outer_split(u, v):
    """einsum's product in row blocks on all the process's CPUs (NumPy lets go of the GIL
    while it multiplies; the page faults of a new large array are shared out too).  The
    blocks are taken in turn by whichever thread is free, the calling one included, and the
    call waits only for the threads that took one: a pool thread that a busy CPU keeps from
    starting costs nothing, the calling thread does its share."""
    pool = _pool()
    out = np.empty((u.shape[0], v.shape[0]))
    if pool is None:
        return _outer_einsum(u, v, out)
    pool, workers = pool
    blocks = 4 * (workers + 1)
    cuts = np.linspace(0, u.shape[0], blocks + 1).astype(int)
    left = list(range(blocks - 1, -1, -1))  # (list.pop and list.append are atomic)
    started = []

    def work(me=None):
        if me is not None:
            started.append(me)  # before taking a block: the caller then waits for this job
        while True:
            try:
                k = left.pop()
            except IndexError:
                return
            i, j = cuts[k], cuts[k + 1]
            _outer_einsum(u[i:j], v, out[i:j])

    jobs = [pool.submit(work, w) for w in range(workers)]
    work()
    for w in list(started):
        jobs[w].result()
    return out


def _pool():
    """(a pool of k = CPUs - 1 threads, k), made on first use; None on a single CPU."""
    global _POOL
    if _POOL is None:
        import os

        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
        if cpus < 2:
            _POOL = False
        else:
            from concurrent.futures import ThreadPoolExecutor

            _POOL = (ThreadPoolExecutor(min(cpus, 8) - 1), min(cpus, 8) - 1)
    return _POOL or None


_OUTER_FORMS = (np.multiply.outer, _outer_einsum, _outer_blas, _outer_split)
_POOL = None


# helper: _blas_threads, needs: _pick
def _blas_threads(f, keys):
    """f, or f run with OpenBLAS on one thread, whichever runs faster (_pick) for the shapes
    of the arguments named in keys (which hold every dimension).

    OpenBLAS splits a large product over all cores and waits for every part: on cores that
    other processes keep busy that wait can cost 10x the product (a 2048x2048 matrix times a
    vector took 17 ms on two threads and 1.4 ms on one, on 2 cores at load average 8); on
    idle cores the threads win.  The single thread is set for the calling thread only
    (openblas_set_num_threads_local, OpenBLAS >= 0.3.27) and restored; without that
    function, f itself."""
    setter = _thread_setter()
    if setter is None:
        return f

    def one(*a, **kw):
        old = setter(1)
        try:
            return f(*a, **kw)
        finally:
            setter(old)

    forms = (f, one)
    k0, k1 = keys[0], keys[-1]  # (_pick's own first step is inline: this runs on every call)

    if len(keys) <= 2:
        def chosen(*a, **kw):  # (a: a positional tangent or cotangent, as in hvp(V, /, ...))
            v, w = kw[k0], kw[k1]
            key = (chosen, v.shape if hasattr(v, "shape") else np.shape(v),  # (a list works too)
                   w.shape if hasattr(w, "shape") else np.shape(w))
            due = _DUE.get(key)
            if due is not None and due[0] > 1:
                due[0] -= 1
                return due[4](*a, **kw)
            return _pick(key, forms, *a, **kw)
    else:
        def chosen(*a, **kw):
            return _pick((chosen,) + tuple([np.shape(kw[k]) for k in keys]), forms, *a, **kw)

    chosen.__doc__, chosen.__name__, chosen.__wrapped__ = f.__doc__, f.__name__, f
    chosen.__qualname__ = f.__qualname__  # (repr(grad_X) names grad_X)
    return chosen


def _thread_setter():
    """OpenBLAS's openblas_set_num_threads_local in NumPy's own library (None: absent)."""
    global _THREADS
    if _THREADS is None:
        _THREADS = False
        try:
            import ctypes

            for path in _openblas_libraries():
                try:
                    fn = ctypes.CDLL(path).openblas_set_num_threads_local
                except (OSError, AttributeError):
                    continue
                fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
                _THREADS = fn
                break
        except Exception:
            pass
    return _THREADS or None


def _openblas_libraries():
    """The paths of the OpenBLAS libraries NumPy's wheel bundles (none for another BLAS)."""
    import glob
    import os

    here = os.path.dirname(np.__file__)
    return sorted(glob.glob(os.path.join(here + ".libs", "*openblas*"))
                  + glob.glob(os.path.join(here, ".dylibs", "*openblas*")))


_THREADS = None


# helper: _pick
def _pick(key, forms, /, *args, **kw):
    """forms[i](*args, **kw), for the i that runs fastest for key (an operation and its shape)
    in this process.  The forms compute the same values (to rounding) without writing into
    their arguments, and forms[0] is the safe default.

    The first call for a key times every form (_pick_first).  Later calls run the chosen form
    (_PICKED[key]) and now and then, when _DUE[key] counts down to its turn, time the forms
    again, one per call, on the calls' own work (_probe): a choice made while other processes
    held the CPUs, or before the caches were warm, is undone the next time it is checked.
    The checks get rarer (after 4 calls, then 8, 16, ... up to 1024) while the choice stands.  A key in
    _PICKED without _DUE is fixed.  After 16 shapes of one operation, a new shape takes
    forms[0], untimed: the first call of a shape costs several calls, too many when every
    call brings a new shape."""
    f = _PICKED.get(key)
    if f is None:
        return _pick_first(key, forms, args, kw)
    due = _DUE.get(key)
    if due is None or due[0] > 1:
        if due is not None:
            due[0] -= 1
        return f(*args, **kw)
    return _probe(key, forms, due, args, kw)


def _pick_first(key, forms, args, kw):
    """Every form runs once to warm up and once more timed, interleaved, and again (up to five
    timed runs) while all this took under 20 ms; the median time of each counts (a form
    that is fast only now and then is not taken), and another form replaces forms[0] only if
    it is at least 10% faster.  The warm-up's times never count: the first run of forms[0]
    also makes the choices of the forms inside it (an inverse inside a gradient)."""
    from time import perf_counter

    if len(_PICKED) > 1024:
        _PICKED.clear()
        _DUE.clear()
        _SHAPES.clear()
    family = key[0]  # the operation (key[1:] is the shape)
    _SHAPES[family] = _SHAPES.get(family, 0) + 1
    if _SHAPES[family] > _TIMED_SHAPES:  # a shape that keeps changing (a batch size): the plain form
        _PICKED[key] = forms[0]
        return forms[0](*args, **kw)
    times, out, spent, rounds = [[] for _ in forms], None, 0.0, 0
    while rounds < 6 and (rounds < 2 or spent < 0.02):
        for k, f in enumerate(forms):
            out = None  # one result alive at a time: new memory is slow to touch the first time
            t = perf_counter()
            out = f(*args, **kw)
            t = perf_counter() - t
            spent += t
            if rounds:  # round 0 is the warm-up
                times[k].append(t)
        rounds += 1
    typical = [_median(t) for t in times]
    i = min(range(len(forms)), key=typical.__getitem__)
    if not typical[i] < 0.9 * typical[0]:
        i = 0
    _PICKED[key] = forms[i]
    # [calls left before the next check, checks' spacing, recent times of each form,
    #  the forms still to time in this check, the chosen form, checks so far]
    _DUE[key] = [_EVERY, _EVERY, [[t] for t in typical], None, forms[i], 0]
    return out  # (the last form's: all give the same values)


def _probe(key, forms, due, args, kw):
    """One call of a check: the next form in turn runs, timed; after the last, the form with
    the lowest median of its last three times is chosen if it is 10% faster than the form
    in use (which keeps its place otherwise).  A check times the form in use and every form
    not 4× slower than it; the slower ones only every fourth check (a thread hand-off can
    cost a hundred calls of a small product)."""
    from time import perf_counter

    typical = [_median(r) for r in due[2]]
    now = forms.index(due[4])
    queue = due[3]
    if not queue:  # a check begins
        due[5] += 1
        queue = due[3] = [k for k in range(len(forms)) if due[5] % 4 == 0 or typical[k] < 4 * typical[now]]
    try:
        j = queue.pop(0)
    except IndexError:  # another thread's call took the last form of this check
        return due[4](*args, **kw)
    t = perf_counter()
    out = forms[j](*args, **kw)
    recent = due[2][j]
    recent.append(perf_counter() - t)
    del recent[:-3]
    if queue:
        due[0] = 1
        return out
    typical[j] = _median(recent)
    i = min(range(len(forms)), key=typical.__getitem__)
    if typical[i] < 0.9 * typical[now]:
        _PICKED[key] = due[4] = forms[i]
        due[1] = _EVERY
    else:
        due[1] = min(2 * due[1], 256 * _EVERY)
    due[0], due[3] = due[1], None
    return out


def _median(times):
    """The median of a few times (the lower one of an even count)."""
    return sorted(times)[(len(times) - 1) // 2]


_PICKED = {}
_DUE = {}
_SHAPES = {}
_EVERY = 4
_TIMED_SHAPES = 16


# helper: _lu, needs: _pick
def _load_lapack():
    """getrf, getrs and getri (64-bit integers) of NumPy's OpenBLAS, or None."""
    try:
        import ctypes
        import glob
        import os
        here = os.path.dirname(np.__file__)
        paths = sorted(glob.glob(os.path.join(here + ".libs", "*openblas*"))
                       + glob.glob(os.path.join(here, ".dylibs", "*openblas*")))
        for path in paths:
            for prefix in ("scipy_", ""):
                try:
                    lib = ctypes.CDLL(path)
                    fns = tuple(lib[prefix + "d" + f + "_64_"] for f in ("getrf", "getrs", "getri"))
                except (OSError, AttributeError):
                    continue
                for f in fns:
                    f.restype = None
                lapack = (ctypes, fns)
                a = np.array([[0.5, 2.0, 1.0], [3.0, -1.0, 0.25], [1.5, 0.5, 4.0]])
                lu = _lu(a, lapack)
                if (np.allclose(_lu_inv(lu, lapack), np.linalg.inv(a))
                        and np.allclose(_lu_solve(lu, a[:, :2], True, lapack), np.linalg.solve(a.T, a[:, :2]))
                        and np.isclose(_lu_det(lu), np.linalg.det(a))):
                    return lapack
    except Exception:
        pass
    return None


def _lapack():
    """The LAPACK functions, looked up on first use (False: not available)."""
    global _LAPACK
    if _LAPACK is None:
        _LAPACK = _load_lapack() or False
    return _LAPACK or None


def _lu(a, lapack=None):
    """(a, LU factors of a, pivots, singular?); factors None when LAPACK is not reachable."""
    lapack = lapack or _lapack()
    a = np.asarray(a, dtype=float)
    if lapack is None or a.shape[0] < 2:
        return a, None, None, False
    ctypes, (getrf, _, _) = lapack
    n, info = ctypes.byref(ctypes.c_int64(a.shape[0])), ctypes.c_int64(0)
    piv = np.empty(a.shape[0], dtype=np.int64)
    f = np.array(a, order="C")  # a C-order copy, which LAPACK reads as a.T
    getrf(n, n, ctypes.c_void_p(f.ctypes.data), n, ctypes.c_void_p(piv.ctypes.data), ctypes.byref(info))
    return a, f, piv, info.value > 0


def _lu_singular(lu):
    if lu[3]:
        raise np.linalg.LinAlgError("Singular matrix")


def _lu_inv(lu, lapack=None, overwrite=False):
    """inv(a) from its factors, by getri or as a solve against I (numpy.linalg.inv's way),
    whichever ran faster for this size (getri is faster at most sizes, several times slower
    at some); the factors are kept unless overwrite (they are needed no more)."""
    lapack = lapack or _lapack()
    a, f, piv, _ = lu
    if f is None:
        return np.linalg.inv(a)
    _lu_singular(lu)
    key = ("getri", a.shape[0])
    overwrite = overwrite and key in _PICKED  # timing runs each form several times
    return _pick(key, (_lu_getri, _lu_solve_eye), lu, lapack, overwrite)


def _lu_getri(lu, lapack, overwrite=False):
    a, f, piv, _ = lu
    ctypes, (_, _, getri) = lapack
    n, info = ctypes.byref(ctypes.c_int64(a.shape[0])), ctypes.c_int64(0)
    f = f if overwrite else f.copy()
    work = np.empty(64 * a.shape[0])
    getri(n, ctypes.c_void_p(f.ctypes.data), n, ctypes.c_void_p(piv.ctypes.data),
          ctypes.c_void_p(work.ctypes.data), ctypes.byref(ctypes.c_int64(work.size)), ctypes.byref(info))
    return f  # LAPACK inverted a.T in Fortran order: in C order this is inv(a)


def _lu_solve_eye(lu, lapack, overwrite=False):
    return _lu_solve(lu, np.eye(lu[0].shape[0]), False, lapack)


def _lu_solve(lu, b, transposed=False, lapack=None):
    """solve(a, b), or solve(a.T, b) if transposed, from the factors of a (getrs)."""
    lapack = lapack or _lapack()
    a, f, piv, _ = lu
    if f is None:
        return np.linalg.solve(a.T if transposed else a, b)
    _lu_singular(lu)
    ctypes, (_, getrs, _) = lapack
    x = np.array(np.transpose(b), dtype=float, order="C")  # C order of b.T = Fortran order of b
    n, info = ctypes.byref(ctypes.c_int64(a.shape[0])), ctypes.c_int64(0)
    nrhs = ctypes.byref(ctypes.c_int64(1 if x.ndim == 1 else x.shape[0]))
    getrs(ctypes.c_char_p(b"N" if transposed else b"T"), n, nrhs, ctypes.c_void_p(f.ctypes.data), n,
          ctypes.c_void_p(piv.ctypes.data), ctypes.c_void_p(x.ctypes.data), n, ctypes.byref(info),
          ctypes.c_size_t(1))
    return x.T


def _lu_logdet(lu):
    """log|det a| from the factors: the log-sum of |diagonal of U|."""
    a, f, _, singular = lu
    if f is None:
        return np.linalg.slogdet(a)[1]
    return -np.inf if singular else np.add.reduce(np.log(np.abs(f.diagonal())))


def _lu_det(lu):
    """det a from the factors: sign from the row swaps and U's diagonal, size from the log."""
    a, f, piv, singular = lu
    if f is None:
        return np.linalg.det(a)
    if singular:
        return 0.0
    swaps = np.count_nonzero(piv != np.arange(1, len(piv) + 1))
    return (-1.0) ** swaps * np.prod(np.sign(f.diagonal())) * np.exp(_lu_logdet(lu))


def _inv(a):
    """inv(a): numpy.linalg.inv, or LAPACK's getrf + getri (0.6-0.8 of its time at most
    sizes), whichever ran faster for this size."""
    return _pick(("inv", a.shape[0]), (np.linalg.inv, _inv_lu), a)


def _inv_lu(a):
    return _lu_inv(_lu(a), overwrite=True)


_LAPACK = None
