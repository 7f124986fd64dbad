#!/usr/bin/env python
"""Every machine form the emitter chooses, timed against the plain NumPy form at many sizes.

    python benchmarks/forms.py                      # n = 64 … 2048, powers of two and not
    python benchmarks/forms.py --sizes 64,512 --budget 0.2

Each row is one choice (an n-vector or an n×n matrix); each column a size; each cell the
median time of the form the emitter writes over the plain form (interleaved calls after a
warm-up, so both see the same machine).  A choice is machine-independent when no cell is
much above 1 on any machine: ``outer (picked)`` is the emitter's ``_outer``, which times its
forms per shape on first use, keeps the fastest and checks the choice now and then.  The candidate
rows ``numexpr …`` are forms that were measured and not adopted.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402

SIZES = (64, 250, 256, 257, 500, 511, 512, 724, 1000, 1023, 1024, 2048)


def runtime_namespace():
    from matcalc import codegen

    ns = {"np": np}
    for h in codegen.helper_closure(["_outer", "_ones", "_lu", "_xlogy"]):
        exec(compile(codegen.HELPERS[h], "<helpers>", "exec"), ns)  # noqa: S102 - matcalc's text
    return ns


def ratio(plain, form, budget):
    """median time of form() / median time of plain(), interleaved."""
    fns = [plain, form]
    for f in fns:
        f()
    t = time.perf_counter()
    plain()
    one = max(time.perf_counter() - t, 1e-7)
    number = max(1, int(2e-4 / one))
    rounds = int(min(200, max(7, budget / (2 * number * one))))
    times = [[], []]
    for r in range(rounds):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            t = time.perf_counter()
            for _ in range(number):
                fns[i]()
            times[i].append((time.perf_counter() - t) / number)
    return statistics.median(times[1]) / statistics.median(times[0]), statistics.median(times[0])


def cases(n, ns, rng):
    """(choice, plain form, emitted form) for size n."""
    u, v = rng.standard_normal(n), rng.standard_normal(n)
    A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    S = A @ A.T / n + np.eye(n)
    G, X = rng.standard_normal((2, n, 16))
    W, V = rng.standard_normal((2, 16, n))
    p = rng.uniform(0.5, 2.0, n)
    ones = ns["_ones"]
    outer, blas = ns["_outer"], ns["_outer_blas"]
    out = [
        ("outer (picked)", lambda: np.outer(u, v), lambda: outer(u, v)),
        ("outer, BLAS column·row", lambda: np.outer(u, v), lambda: blas(u, v)),
        ("outer, multiply.outer", lambda: np.outer(u, v), lambda: np.multiply.outer(u, v)),
        ("outer, einsum", lambda: np.outer(u, v), lambda: ns["_outer_einsum"](u, v)),
        ("outer, einsum in row blocks on threads", lambda: np.outer(u, v), lambda: ns["_outer_split"](u, v)),
        ("sum of a vector, dot with ones", lambda: np.sum(u), lambda: u.dot(ones(n))),
        ("sum of a matrix, ones·A·ones", lambda: np.sum(A), lambda: ones(n).dot(A).dot(ones(n))),
        ("A·v as .dot", lambda: A @ u, lambda: A.dot(u)),
        ("Aᵀv as v·A", lambda: A.T @ u, lambda: u.dot(A)),
        ("A·B as .dot", lambda: A @ B, lambda: A.dot(B)),
        ("exp of a new matrix in place", lambda: np.exp(A + B),
         lambda: (lambda t: np.exp(t, out=t))(A + B)),
        ("exp(z) − 1 as expm1", lambda: np.exp(u) - 1.0, lambda: np.expm1(u)),
        ("0.5(C + AB) into AB's array", lambda: 0.5 * (B + A.dot(B)), lambda: into_new(A, B)),
        ("(T − Y)(1 − T²) into new arrays", lambda: tanh_chain(A, B, False), lambda: tanh_chain(A, B, True)),
        ("inv (picked)", lambda: np.linalg.inv(S), lambda: ns["_inv"](S)),
        ("inv via getrf + getri", lambda: np.linalg.inv(S), lambda: ns["_inv_lu"](S)),
        ("diag(ABᵀ) as row sums of A∘B, n×n", lambda: np.diag(A.dot(B.T)), lambda: np.add.reduce(A * B, 1)),
        ("diag(GXᵀ) as row sums of G∘X, n×16", lambda: np.diag(G.dot(X.T)), lambda: np.add.reduce(G * X, 1)),
        ("diag(GXᵀ) as row sums of G∘X, 16×n", lambda: np.diag(W.dot(V.T)), lambda: np.add.reduce(W * V, 1)),
        ("xᵏ log x as xlogy", lambda: np.power(p, 1.5) * np.log(p), lambda: ns["_xlogy"](np.power(p, 1.5), p)),
    ]
    try:
        import numexpr as ne
    except ImportError:
        return out
    fused = ne.NumExpr("(t - y) * (1 - t * t)", signature=[("t", np.float64), ("y", np.float64)])
    gexp = ne.NumExpr("g * exp(t)", signature=[("g", np.float64), ("t", np.float64)])
    bc = ne.NumExpr("a * b", signature=[("a", np.float64), ("b", np.float64)])
    out += [
        ("numexpr (t − y)(1 − t²)", lambda: (A - B) * (1.0 - np.square(A)), lambda: fused(A, B)),
        ("numexpr g·exp(t)", lambda: B * np.exp(A), lambda: gexp(B, A)),
        ("numexpr outer", lambda: np.outer(u, v), lambda: bc(u[:, None], v[None, :])),
    ]
    return out


def into_new(A, B):
    t = A.dot(B)
    np.add(B, t, out=t)
    np.multiply(0.5, t, out=t)
    return t


def tanh_chain(T, Y, in_place):
    if not in_place:
        return (T - Y) * (1.0 - np.square(T))
    s = np.square(T)
    np.subtract(1.0, s, out=s)
    t = T - Y
    np.multiply(t, s, out=t)
    return t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--budget", type=float, default=0.3, help="seconds per cell")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    ap.add_argument("--only", default=None, help="forms whose name contains this text")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    ns = runtime_namespace()
    rng = np.random.default_rng(0)
    rows, base = {}, {}
    for n in sizes:
        print(f"n = {n} ...", file=sys.stderr, flush=True)
        for name, plain, form in cases(n, ns, rng):
            if args.only and args.only not in name:
                continue
            r, t = ratio(plain, form, args.budget)
            rows.setdefault(name, {})[n] = r
            base.setdefault(name, {})[n] = t
    lines = ["# Emitted forms / plain NumPy forms", "", describe(), "",
             "Median time of the emitted form over the plain form (< 1: the emitted form is faster).",
             "", "| form | " + " | ".join(map(str, sizes)) + " | max |",
             "|---|" + "---:|" * (len(sizes) + 1)]
    for name, cells in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{cells[n]:.2f}" for n in sizes)
                     + f" | {max(cells.values()):.2f} |")
    lines += ["", "Time of the plain form, µs:", "", "| form | " + " | ".join(map(str, sizes)) + " |",
              "|---|" + "---:|" * len(sizes)]
    for name, cells in base.items():
        lines.append(f"| {name} | " + " | ".join(f"{1e6 * cells[n]:.1f}" for n in sizes) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
