#!/usr/bin/env python
"""Benchmark matcalc's torch and jax gradient functions against the frameworks' own autodiff.

    python benchmarks/backends.py --sizes small,medium --out benchmarks/backends.md
    python benchmarks/backends.py --quick          # tiny sizes, 2 repeats (smoke test)

For every workload of workloads.py and size: the median time of ``d.callable("torch")``
against ``torch.autograd.grad`` of the hand-written forward, and of
``jax.jit(d.callable("jax"))`` against ``jax.jit(jax.grad(forward))``, float64, calls
interleaved in the same process (one subprocess per framework, as their thread pools
interfere).  Both results are compared with the hand-written NumPy gradient.
Targets (geometric mean of the ratios): torch ≤ 0.8× autograd, jax ≤ 1.0× jit(grad).
Exit status 1 if a gradient disagrees or a worker fails; timings never fail.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import bench, fmt, geomean, load_matcalc, log, rel_err, rng_for, short  # noqa: E402
from workloads import BY_NAME  # noqa: E402

TARGETS = {"torch": 0.8, "jax": 1.0}
RTOL = 1e-6


def worker(fw, sizes, workloads, args):
    matcalc, err, _ = load_matcalc()
    if matcalc is None:
        raise SystemExit(f"matcalc does not import: {err}")
    if fw == "jax":
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        def pair(w, d, inp):
            a = {k: jnp.asarray(v) for k, v in inp.items()}
            p, rest = a[w.wrt], {k: v for k, v in a.items() if k != w.wrt}
            base = jax.jit(jax.grad(lambda p, rest: w.lam(jnp, **{w.wrt: p}, **rest)))
            ours = jax.jit(d.callable("jax"))
            return (lambda: base(p, rest).block_until_ready(),
                    lambda: ours(**a).block_until_ready())
    else:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)

        def pair(w, d, inp):
            t = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in inp.items()}
            tg = dict(t)
            tg[w.wrt] = t[w.wrt].clone().requires_grad_(True)
            ours = d.callable("torch")
            return (lambda: torch.autograd.grad(w.lam(torch, **tg), tg[w.wrt])[0],
                    lambda: ours(**t))
    res = {}
    for w in workloads:
        for size in sizes:
            key = f"{w.name}/{size}"
            try:
                inp = w.inputs(size, rng_for(w.name, size))
                d = matcalc.derive(w.expr_at(size), wrt=w.wrt, shapes=w.shapes_at(size))
                fns = pair(w, d, inp)
                (tb, to), (gb, go) = bench(list(fns), **({"repeats": 2} if args.quick else {"budget": args.budget}))
                want = w.grad(**inp)
                res[key] = (tb, to, rel_err(np.asarray(gb), want), rel_err(np.asarray(go), want))
            except Exception as e:
                res[key] = (None, None, short(e), short(e))
            log(f"[{fw}] {key} done")
    print(json.dumps(res))


def machine():
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or "unknown CPU"
    return f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def versions():
    out = []
    for fw in ("torch", "jax"):
        if importlib.util.find_spec(fw) is not None:
            p = subprocess.run([sys.executable, "-c", f"import {fw}; print({fw}.__version__)"],
                               capture_output=True, text=True)
            out.append(f"{fw} {p.stdout.strip()}")
    return ", ".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="small,medium")
    ap.add_argument("--workloads", default=",".join(BY_NAME))
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per workload and size")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 2 repeats")
    ap.add_argument("--out", default=None, help="also write the Markdown table here")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own choice)")
    ap.add_argument("--worker", choices=("torch", "jax"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sizes = ["tiny"] if args.quick else args.sizes.split(",")
    workloads = [BY_NAME[n] for n in args.workloads.split(",")]
    if args.worker:
        return worker(args.worker, sizes, workloads, args)
    results, failures = {}, []
    for fw in ("torch", "jax"):
        if importlib.util.find_spec(fw) is None:
            log(f"[{fw}] not installed: skipped")
            continue
        log(f"[{fw}] timing in a subprocess ...")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", fw, "--sizes", ",".join(sizes),
               "--workloads", ",".join(w.name for w in workloads), "--budget", str(args.budget),
               "--threads", str(args.threads)]
        p = subprocess.run(cmd + (["--quick"] if args.quick else []), capture_output=True, text=True)
        try:
            results[fw] = json.loads(p.stdout.strip().splitlines()[-1])
        except Exception:
            failures.append(f"{fw} worker failed (exit {p.returncode}): "
                            + " | ".join(p.stderr.strip().splitlines()[-3:]))
    lines = ["# matcalc torch / jax backends against the frameworks' autodiff", "",
             f"Machine: {machine()}; {versions()}. float64; median of interleaved calls"
             + (f"; torch threads {args.threads}" if args.threads else "") + ".", "",
             "ratio = matcalc backend / framework autodiff (below 1: matcalc is faster); "
             "torch: `d.callable('torch')` vs `torch.autograd.grad`; jax: `jax.jit(d.callable('jax'))` "
             "vs `jax.jit(jax.grad(f))`.", "",
             "| workload | size | torch autograd ms | matcalc torch ms | ratio | jax.jit(grad) ms | matcalc jax ms | ratio |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    ratios = {fw: [] for fw in ("torch", "jax")}
    for w in workloads:
        for size in sizes:
            key = f"{w.name}/{size}"
            row = [w.name, size]
            for fw in ("torch", "jax"):
                r = results.get(fw, {}).get(key)
                if r is None:
                    row += ["n/a"] * 3
                    continue
                tb, to, eb, eo = r
                if isinstance(eo, str) or eo > RTOL:
                    failures.append(f"{fw} {key}: matcalc's gradient disagrees ({eo})")
                if tb is None or to is None:
                    row += ["n/a"] * 3
                    continue
                ratios[fw].append(to / tb)
                row += [f"{1e3 * tb:.3f}", f"{1e3 * to:.3f}", fmt(to / tb)]
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "| backend | geomean ratio | target |", "|---|---:|---:|"]
    for fw in ("torch", "jax"):
        g = geomean(ratios[fw])
        lines.append(f"| {fw} | {fmt(g, '.3f', TARGETS[fw])} | ≤ {TARGETS[fw]} |")
    if failures:
        lines += ["", "Failures:", *[f"- {f}" for f in failures]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
