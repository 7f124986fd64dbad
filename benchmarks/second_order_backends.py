#!/usr/bin/env python
"""Benchmark matcalc's torch and jax Hessian code against the frameworks' own autodiff.

    python benchmarks/second_order_backends.py              # small workloads, dense cases
    python benchmarks/second_order_backends.py --quick      # tiny sizes, 2 repeats (a smoke test)
    python benchmarks/second_order_backends.py --threads 1  # one thread per library

For each installed framework, in its own subprocess (medians of interleaved calls; every
ratio compares two functions timed in the same process):

1. HVP: matcalc's ``hvp_W`` from ``h.callable(backend)`` (under ``jax.jit`` for jax) against
   forward-over-reverse (``jax.jit`` of ``jax.jvp`` of ``jax.grad``; ``torch.func.jvp`` of
   ``torch.func.grad``) on the workloads of ``workloads.py``: matcalc time over framework time,
   and the geometric mean.
2. Dense Hessians: xᵀAx at n = 1024 and the logistic loss at n = 2048, d = 512: matcalc's
   ``.matrix`` (jitted for jax) against ``jax.jit(jax.hessian(f))`` and ``torch.func.hessian``.

Every framework result is compared with matcalc's (relative error ≤ 1e-6); a disagreement
makes the exit status 1. Timings never fail.
"""
import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

from run import bench, geomean, rel_err, rng_for  # noqa: E402 (benchmarks/ is the script's directory)
from second_order import dense_cases
from workloads import WORKLOADS

HERE = Path(__file__).resolve().parent
FRAMEWORKS = ("jax", "torch")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def worker(fw, size, args):
    import matcalc

    reps = {"repeats": 2} if args.quick else {"budget": args.budget}
    if fw == "jax":
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        def conv(inp):
            return {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inp.items()}

        def done(x):
            return x.block_until_ready()

        def mine_hvp(h, inp):
            f = jax.jit(h.callable("jax").hvp)
            t = conv(inp)
            return lambda V: done(f(V, **t))

        def their_hvp(lam, wrt, inp):
            t = conv(inp)
            p, rest = t[wrt], {k: v for k, v in t.items() if k != wrt}
            g = jax.grad(lambda p, rest: lam(jnp, **{wrt: p}, **rest))
            f = jax.jit(lambda p, rest, v: jax.jvp(lambda q: g(q, rest), (p,), (v,))[1])
            return lambda V: done(f(p, rest, V))

        def mine_dense(h, inp):
            f = jax.jit(h.callable("jax").matrix)
            t = conv(inp)
            return lambda: done(f(**t))

        def their_dense(lam, wrt, inp):
            t = conv(inp)
            p, rest = t[wrt], {k: v for k, v in t.items() if k != wrt}
            f = jax.jit(jax.hessian(lambda p, rest: lam(jnp, **{wrt: p}, **rest)))
            return lambda: done(f(p, rest))

        def tangent(V):
            return jnp.asarray(V)
    else:
        import torch
        from torch.func import grad as tgrad, hessian as thessian, jvp as tjvp

        if args.threads:
            torch.set_num_threads(args.threads)

        def conv(inp):
            return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in inp.items()}

        def mine_hvp(h, inp):
            f, t = h.callable("torch"), conv(inp)
            return lambda V: f.hvp(V, **t)

        def their_hvp(lam, wrt, inp):
            t = conv(inp)
            rest = {k: v for k, v in t.items() if k != wrt}
            g = tgrad(lambda q: lam(torch, **{wrt: q}, **rest))
            return lambda V: tjvp(g, (t[wrt],), (V,))[1]

        def mine_dense(h, inp):
            f, t = h.callable("torch"), conv(inp)
            return lambda: f.matrix(**t)

        def their_dense(lam, wrt, inp):
            t = conv(inp)
            rest = {k: v for k, v in t.items() if k != wrt}
            f = thessian(lambda q: lam(torch, **{wrt: q}, **rest))
            return lambda: f(t[wrt])

        def tangent(V):
            return torch.from_numpy(V)

    def arr(x):
        return np.asarray(x.detach().numpy() if hasattr(x, "detach") else x, dtype=float)

    res = {}
    for w in WORKLOADS:
        key = f"hvp/{w.name}/{size}"
        try:
            h = matcalc.hessian(w.expr_at(size), w.wrt, shapes=w.shapes_at(size))
            inp = w.inputs(size, rng_for(w.name, size))
            V = tangent(np.random.default_rng(1).standard_normal(np.shape(inp[w.wrt])))
            a, b = mine_hvp(h, inp), their_hvp(w.lam, w.wrt, inp)
            (tm, tf), (x, y) = bench([lambda: a(V), lambda: b(V)], **reps)
            res[key] = {"matcalc": tm, "fw": tf, "err": rel_err(arr(y), arr(x))}
        except Exception as e:
            res[key] = {"matcalc": None, "fw": None, "err": f"{type(e).__name__}: {e}"}
        log(f"[{fw}] {key}")
    for name, (expr, wrt, shapes, inp, lam) in dense_cases(args.quick).items():
        key = f"dense/{name}"
        try:
            h = matcalc.hessian(expr, wrt, shapes=shapes)
            a, b = mine_dense(h, inp), their_dense(lam, wrt, inp)
            (tm, tf), (x, y) = bench([a, b], **reps)
            res[key] = {"matcalc": tm, "fw": tf, "err": rel_err(arr(y).reshape(arr(x).shape), arr(x))}
        except Exception as e:
            res[key] = {"matcalc": None, "fw": None, "err": f"{type(e).__name__}: {e}"}
        log(f"[{fw}] {key}")
    print(json.dumps(res))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--size", default="small", help="workload size label (small, medium, large)")
    ap.add_argument("--budget", type=float, default=0.5, help="seconds per timed pair")
    ap.add_argument("--threads", type=int, default=0, help="threads per library (0: their default)")
    ap.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    size = "tiny" if args.quick and args.size == "small" else args.size
    if args.worker:
        worker(args.worker, size, args)
        return 0
    failures, results = [], {}
    for fw in FRAMEWORKS:
        if importlib.util.find_spec(fw) is None:
            log(f"[{fw}] not installed: skipped")
            continue
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", fw, "--size", size,
               "--budget", str(args.budget), "--threads", str(args.threads)] + (["--quick"] if args.quick else [])
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=os.environ)
        try:
            res = json.loads(p.stdout.strip().splitlines()[-1])
        except Exception:
            failures.append(f"{fw} worker failed (exit {p.returncode}): "
                            + " | ".join(p.stderr.strip().splitlines()[-3:]))
            continue
        for key, r in res.items():
            if isinstance(r.get("err"), str) or (r.get("err") or 0) > 1e-6:
                failures.append(f"{fw} {key}: disagrees with matcalc ({r.get('err')})")
        results[fw] = res
    print(f"# matcalc torch/jax Hessian code vs the frameworks' autodiff ({platform.machine()}, "
          f"{os.cpu_count()} cores, threads {args.threads or 'default'}, size {size})\n")
    print("| case | framework | matcalc ms | framework ms | matcalc / framework |")
    print("|---|---|---|---|---|")
    for fw, res in results.items():
        ratios = []
        for key, r in res.items():
            tm, tf = r.get("matcalc"), r.get("fw")
            ratio = tm / tf if tm and tf else None
            if key.startswith("hvp/") and ratio:
                ratios.append(ratio)
            show = "n/a" if ratio is None else f"{ratio:.2f}"
            print(f"| {key} | {fw} | {'n/a' if tm is None else f'{1e3 * tm:.3f}'} | "
                  f"{'n/a' if tf is None else f'{1e3 * tf:.3f}'} | {show} |")
        g = geomean(ratios)
        print(f"| hvp geomean | {fw} | | | {'n/a' if g is None else f'{g:.2f}'} |")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
