#!/usr/bin/env python
"""Benchmark matcalc's Hessian-vector products and dense Hessians.

    python benchmarks/second_order.py                 # small + medium workloads, dense cases
    python benchmarks/second_order.py --quick         # tiny sizes, 2 repeats (a smoke test)
    python benchmarks/second_order.py --out benchmarks/second_order.md
    python benchmarks/second_order.py --threads 1   # every library on one thread (a busy machine)

Sections (all times are medians of interleaved calls; every ratio compares two functions
timed in the same process under the same conditions):

1. HVP / gradient: matcalc's emitted ``hvp_W`` over its emitted gradient, on the workloads
   of ``workloads.py`` (target ≤ 3).
2. HVP against jax.jit forward-over-reverse (``jax.jvp`` of ``jax.grad``) and torch.func
   (``jvp`` of ``grad``): matcalc time over framework time, geometric mean (target ≤ 1.0
   against jax). Each framework runs in its own subprocess, which times matcalc too.
3. Dense Hessians: xᵀAx at n = 1024 (target ≥ 10× faster than ``jax.jit(jax.hessian(f))``
   and ``torch.func.hessian``) and the logistic loss at n = 2048, d = 512 (≥ 1.8×).

Every framework result is compared with matcalc's (relative error ≤ 1e-6); a disagreement
makes the exit status 1. Timings never fail.
"""
import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from run import bench, geomean, rel_err, rng_for  # noqa: E402 (benchmarks/ is the script's directory)
from workloads import BY_NAME, WORKLOADS

HERE = Path(__file__).resolve().parent
HVP_TARGET, GEO_TARGET, XTAX_TARGET, LOGISTIC_TARGET = 3.0, 1.0, 10.0, 1.8
FRAMEWORKS = ("jax", "torch")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def reps(args):
    return {"repeats": 2} if args.quick else {"budget": args.budget}


def hessian_of(matcalc, w, size):
    return matcalc.hessian(w.expr_at(size), w.wrt, shapes=w.shapes_at(size))


def hvp_case(matcalc, w, size):
    """(hvp function, gradient function, inputs, direction): the raw emitted functions."""
    h = hessian_of(matcalc, w, size)
    inp = w.inputs(size, rng_for(w.name, size))
    V = np.random.default_rng(1).standard_normal(np.shape(inp[w.wrt]))
    hvp = h._fn("product")
    grad = h.derivation.function.emitted
    return hvp, grad, inp, V


def dense_cases(quick):
    """name -> (expr, wrt, shapes, inputs, λ(xp, **inputs))."""
    rng = np.random.default_rng(0)
    n = 64 if quick else 1024
    A, x = rng.standard_normal((n, n)), rng.standard_normal(n)
    lg = BY_NAME["logistic"]
    ln, ld = (128, 32) if quick else (2048, 512)
    lin = lg.make(rng, n=ln, d=ld)
    return {
        f"xTAx n={n}": ("x.T@A@x", "x", {"A": ("n", "n"), "x": ("n",)}, {"A": A, "x": x},
                        lambda xp, A, x: x @ A @ x),
        f"logistic n={ln} d={ld}": (lg.expr, "w", lg.shapes, lin, lg.lam),
    }


# ---------------------------------------------------------------------------- sections

def bench_min(fns, args, rounds=5):
    """Medians as ``bench`` takes them, and the fastest of several such rounds: on a shared
    machine a process is often descheduled mid-call, and the minimum is the cost of the
    arithmetic itself."""
    meds = [bench(fns, **reps(args))[0] for _ in range(1 if args.quick else rounds)]
    return [statistics.median(m[i] for m in meds) for i in range(len(fns))], \
        [min(m[i] for m in meds) for i in range(len(fns))]


def hvp_vs_grad(matcalc, sizes, args, failures):
    rows = []
    for w in WORKLOADS:
        for size in sizes:
            try:
                hvp, grad, inp, V = hvp_case(matcalc, w, size)
                (th, tg), (mh, mg) = bench_min([lambda: hvp(V, **inp), lambda: grad(**inp)], args)
                rows.append((w.name, size, th, tg, th / tg, mh / mg))
            except Exception as e:
                failures.append(f"hvp {w.name}/{size}: {type(e).__name__}: {e}")
            log(f"[numpy] hvp {w.name}/{size}")
    return rows


def dense_numpy(matcalc, args, failures):
    rows = {}
    for name, (expr, wrt, shapes, inp, _) in dense_cases(args.quick).items():
        h = matcalc.hessian(expr, wrt, shapes=shapes)
        f = h._gf.emitted
        (t,), (H,) = bench([lambda: f(**inp)], **reps(args))
        rows[name] = (t, h.kron)
    return rows


def run_workers(sizes, args, failures):
    out = {}
    for fw in FRAMEWORKS:
        if importlib.util.find_spec(fw) is None:
            log(f"[{fw}] not installed: skipped")
            continue
        log(f"[{fw}] timing in a subprocess ...")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", fw, "--sizes", ",".join(sizes),
               "--budget", str(args.budget)] + (["--quick"] if args.quick else [])
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE)
        try:
            res = json.loads(p.stdout.strip().splitlines()[-1])
        except Exception:
            tail = " | ".join(p.stderr.strip().splitlines()[-3:])
            failures.append(f"{fw} worker failed (exit {p.returncode}): {tail}")
            continue
        for key, r in res.items():
            if isinstance(r.get("err"), str) or (r.get("err") or 0) > 1e-6:
                failures.append(f"{fw} {key}: disagrees with matcalc ({r.get('err')})")
        out[fw] = res
    return out


def worker(fw, sizes, args):
    """Subprocess body: matcalc and the framework, timed interleaved, for every HVP workload
    and both dense Hessians."""
    import matcalc

    if fw == "jax":
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        def hvp_fn(lam, wrt, inp):
            p = jnp.asarray(inp[wrt])
            rest = {k: jnp.asarray(v) for k, v in inp.items() if k != wrt}
            g = jax.grad(lambda p, rest: lam(jnp, **{wrt: p}, **rest))
            f = jax.jit(lambda p, rest, v: jax.jvp(lambda q: g(q, rest), (p,), (v,))[1])
            return lambda V: np.asarray(f(p, rest, jnp.asarray(V)).block_until_ready())

        def hess_fn(lam, wrt, inp):
            p = jnp.asarray(inp[wrt])
            rest = {k: jnp.asarray(v) for k, v in inp.items() if k != wrt}
            f = jax.jit(jax.hessian(lambda p, rest: lam(jnp, **{wrt: p}, **rest)))
            return lambda: np.asarray(f(p, rest).block_until_ready())
    else:
        import torch
        from torch.func import grad as tgrad, hessian as thessian, jvp as tjvp

        if os.environ.get("MATCALC_BENCH_THREADS"):
            torch.set_num_threads(int(os.environ["MATCALC_BENCH_THREADS"]))

        def tens(inp):
            return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in inp.items()}

        def hvp_fn(lam, wrt, inp):
            t = tens(inp)
            rest = {k: v for k, v in t.items() if k != wrt}
            g = tgrad(lambda q: lam(torch, **{wrt: q}, **rest))
            return lambda V: tjvp(g, (t[wrt],), (torch.from_numpy(V),))[1].numpy()

        def hess_fn(lam, wrt, inp):
            t = tens(inp)
            rest = {k: v for k, v in t.items() if k != wrt}
            f = thessian(lambda q: lam(torch, **{wrt: q}, **rest))
            return lambda: f(t[wrt]).numpy()

    res = {}
    for w in WORKLOADS:
        for size in sizes:
            key = f"hvp/{w.name}/{size}"
            try:
                hvp, _, inp, V = hvp_case(matcalc, w, size)
                other = hvp_fn(w.lam, w.wrt, inp)
                (tm, tf), (a, b) = bench([lambda: hvp(V, **inp), lambda: other(V)], **reps(args))
                res[key] = {"matcalc": tm, "fw": tf, "err": rel_err(np.asarray(b), np.asarray(a))}
            except Exception as e:
                res[key] = {"matcalc": None, "fw": None, "err": f"{type(e).__name__}: {e}"}
            log(f"[{fw}] {key}")
    for name, (expr, wrt, shapes, inp, lam) in dense_cases(args.quick).items():
        key = f"dense/{name}"
        try:
            h = matcalc.hessian(expr, wrt, shapes=shapes)
            mine = h._gf.emitted
            other = hess_fn(lam, wrt, inp)
            (tm, tf), (a, b) = bench([lambda: mine(**inp), other], **reps(args))
            res[key] = {"matcalc": tm, "fw": tf, "err": rel_err(np.asarray(b), np.asarray(a))}
        except Exception as e:
            res[key] = {"matcalc": None, "fw": None, "err": f"{type(e).__name__}: {e}"}
        log(f"[{fw}] {key}")
    print(json.dumps(res))


# ---------------------------------------------------------------------------- report

def ms(t):
    return "n/a" if t is None else f"{1e3 * t:.3f}"


def mark(x, target, higher=False):
    if x is None:
        return "n/a"
    bad = x < target if higher else x > target
    return f"{x:.2f}" + (" ✗" if bad else "")


def report(hv, dense, fws, sizes, args):
    cpu = platform.processor() or platform.machine()
    out = ["# matcalc second-order benchmark", "",
           f"Machine: {platform.system()} {platform.machine()} ({cpu}), {os.cpu_count()} cores, "
           f"Python {platform.python_version()}, NumPy {np.__version__}, threads per library: "
           f"{os.environ.get('MATCALC_BENCH_THREADS', 'default')}"
           + "".join(f", {fw} {__import__(fw).__version__}" for fw in fws) + ".", "",
           f"## HVP / gradient (matcalc's emitted functions; target ≤ {HVP_TARGET})", "",
           "| workload | size | hvp ms | grad ms | hvp/grad (medians) | hvp/grad (fastest rounds) |",
           "|---|---|---|---|---|---|"]
    for name, size, th, tg, r, rmin in hv:
        out.append(f"| {name} | {size} | {ms(th)} | {ms(tg)} | {mark(r, HVP_TARGET)} | {mark(rmin, HVP_TARGET)} |")
    worst = max((r for *_, r, _ in hv), default=None)
    worst_min = max((r for *_, r in hv), default=None)
    out += ["", f"Worst ratio: {mark(worst, HVP_TARGET)} of medians, {mark(worst_min, HVP_TARGET)} "
            "of the fastest rounds.", ""]
    for fw, res in fws.items():
        what = "jax.jit(jvp of grad)" if fw == "jax" else "torch.func jvp of grad"
        out += [f"## HVP: matcalc / {what}" + (f" (target geomean ≤ {GEO_TARGET})" if fw == "jax" else ""), "",
                "| workload | size | matcalc ms | framework ms | matcalc/framework |", "|---|---|---|---|---|"]
        ratios = []
        for key, r in res.items():
            if not key.startswith("hvp/"):
                continue
            _, name, size = key.split("/")
            ratio = r["matcalc"] / r["fw"] if r["matcalc"] and r["fw"] else None
            ratios.append(ratio)
            note = "" if not isinstance(r["err"], str) else f" ({r['err'][:60]})"
            out.append(f"| {name} | {size} | {ms(r['matcalc'])} | {ms(r['fw'])} | "
                       f"{mark(ratio, GEO_TARGET if fw == 'jax' else float('inf'))}{note} |")
        g = geomean(ratios)
        out += ["", f"Geometric mean matcalc/{fw}: " + (mark(g, GEO_TARGET) if fw == "jax" else
                                                        ("n/a" if g is None else f"{g:.2f}")) + ".", ""]
    out += ["## Dense Hessians", "",
            "| case | vec form | matcalc ms | " + " | ".join(f"{fw} ms | {fw}/matcalc" for fw in fws) + " |",
            "|---|---|---|" + "---|---|" * len(fws)]
    for name, (t, kron) in dense.items():
        target = XTAX_TARGET if name.startswith("xTAx") else LOGISTIC_TARGET
        cells = []
        for fw, res in fws.items():
            r = res.get(f"dense/{name}", {})
            sp = r["fw"] / r["matcalc"] if r.get("fw") and r.get("matcalc") else None
            cells += [ms(r.get("fw")), mark(sp, target, higher=True)]
        out.append(f"| {name} | `{kron}` | {ms(t)} | " + " | ".join(cells) + " |")
    out += ["", f"Targets: xᵀAx ≥ {XTAX_TARGET}× and logistic ≥ {LOGISTIC_TARGET}× faster than each "
            "framework (the framework/matcalc columns; the framework and matcalc times there were "
            "taken in the framework's subprocess, interleaved)."]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 2 repeats")
    ap.add_argument("--sizes", default=None, help="workload sizes (default small,medium; quick: tiny)")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per timing")
    ap.add_argument("--no-frameworks", action="store_true", help="skip jax and torch")
    ap.add_argument("--out", default=None, help="write the Markdown table here too")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for NumPy's BLAS, XLA and torch alike (default: each library's own)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads and os.environ.get("MATCALC_BENCH_THREADS") != str(args.threads):
        # the thread counts are read when the libraries load: run again with them set
        n = str(args.threads)
        env = dict(os.environ, MATCALC_BENCH_THREADS=n, OPENBLAS_NUM_THREADS=n, OMP_NUM_THREADS=n,
                   MKL_NUM_THREADS=n,
                   XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen="
                              + ("false" if n == "1" else "true")
                              + f" intra_op_parallelism_threads={n}").strip())
        return subprocess.run([sys.executable, str(Path(__file__).resolve())] + list(argv or sys.argv[1:]),
                              env=env).returncode
    sizes = (args.sizes or ("tiny" if args.quick else "small,medium")).split(",")
    if args.worker:
        worker(args.worker, sizes, args)
        return 0
    import matcalc

    failures = []
    hv = hvp_vs_grad(matcalc, sizes, args, failures)
    dense = dense_numpy(matcalc, args, failures)
    fws = {} if args.no_frameworks else run_workers(sizes, args, failures)
    text = report(hv, dense, fws, sizes, args)
    if failures:
        text += "\n## Failures\n\n" + "\n".join(f"- {f}" for f in failures) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
