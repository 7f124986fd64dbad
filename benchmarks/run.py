#!/usr/bin/env python
"""Benchmark matcalc's emitted gradient functions against hand-written NumPy and jax.

    python benchmarks/run.py                        # every workload at every size
    python benchmarks/run.py --sizes 64,512,L8,L8xB256 --workloads vae_kl,relu2_kl
    python benchmarks/run.py --keep-memory          # freed memory kept in the process
    python benchmarks/run.py --quick                # tiny sizes, 2 repeats, seconds

Sizes: every workload but the MLPs at n = 64, 250, 256, 257, 500, 511, 512, 724, 1000,
1023, 1024 and its large sizes (powers of two, their neighbours and odd sizes); the MLPs
at width 256 with depth L (``L8``) and batch B (``L8xB250``).  For every workload and size:
median time of matcalc's emitted function and of the hand-written FLOP-optimal gradient
(calls interleaved, so the ratio is measured under the same conditions), value_and_grad
cost, and jax.jit(jax.grad) / torch autograd when installed (each in its own subprocess,
timed there interleaved with the same hand-written gradient, and jax with matcalc too: their thread pools would
disturb NumPy's).  Also derive() times, the deep-MLP L-scaling table, the cold CLI wall
time, the machine (CPU, NumPy, BLAS) and a summary of the targets.
Exit status 1 if an emitted function disagrees with the hand-written gradient or anything
else fails (the table is written anyway); timings never fail.
"""
import argparse
import importlib.util
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np

from machine import MALLOC_VARS, describe
from workloads import BY_NAME, VAE, WORKLOADS, mlp_expr, mlp_shapes

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RATIO_TARGET, GEOMEAN_TARGET, DERIVE_TARGET_MS, LSCALE_TARGET, CLI_TARGET_S, VG_TARGET = (
    1.10, 0.95, 20.0, 2.2, 0.3, 1.2)
JAX_TARGET = 1.10  # no workload more than this times jax.jit(grad)'s time
VG_SIZE = "64"     # the size at which value_and_grad / gradient ≤ VG_TARGET is asked
KEEP_MEMORY = {"MALLOC_TRIM_THRESHOLD_": "1000000000", "MALLOC_MMAP_THRESHOLD_": "1000000000",
               "MALLOC_TOP_PAD_": "100000000"}
RTOL = 1e-6
FRAMEWORKS = ("jax", "torch")


# ---------------------------------------------------------------------------- helpers

def log(*a):
    print(*a, file=sys.stderr, flush=True)


def rng_for(name, size):
    return np.random.default_rng(zlib.crc32(f"{name}/{size}".encode()))


def bench(fns, repeats=None, budget=1.0, min_rep=5, max_rep=200, min_sample=5e-4):
    """Median seconds per call of each zero-argument fn, plus their warm-up outputs.

    Two warm-up calls each; then `repeats` rounds in which every fn is timed once,
    in rotated order, so all fns see the same machine conditions. Fast fns are
    called `number` times per sample (the same for all) so a sample is ≥ min_sample.
    """
    outs, est = [f() for f in fns], []
    for f in fns:  # the second call estimates the cost (the first may compile or allocate)
        t = time.perf_counter()
        f()
        est.append(time.perf_counter() - t)
    number = max(1, int(min_sample / max(max(est), 1e-9)))
    if repeats is None:
        repeats = int(min(max_rep, max(min_rep, budget / max(number * sum(est), 1e-9))))
    times = [[] for _ in fns]
    for r in range(repeats):
        for i in range(len(fns)):
            j = (i + r) % len(fns)
            f = fns[j]
            t = time.perf_counter()
            for _ in range(number):
                f()
            times[j].append((time.perf_counter() - t) / number)
    bench.samples = times  # per round, for pair_ratio
    return [statistics.median(t) for t in times], outs


def pair_ratio(i, j):
    """Median over the rounds of the last bench() of time(fns[i]) / time(fns[j]) in the same
    round: a slow spell of the machine (another process) slows both calls of a round, so
    this ratio drifts less than the ratio of the two medians."""
    a, b = bench.samples[i], bench.samples[j]
    return statistics.median(x / y for x, y in zip(a, b) if y > 0)


def rel_err(got, ref):
    got, ref = np.asarray(got, dtype=float), np.asarray(ref, dtype=float)
    if got.shape != ref.shape:
        raise ValueError(f"shape {got.shape} instead of {ref.shape}")
    return float(np.max(np.abs(got - ref), initial=0.0) / max(np.max(np.abs(ref), initial=0.0), 1e-300))


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def fmt(x, spec=".2f", target=None):
    if x is None:
        return "n/a"
    s = format(x, spec)
    return s + " ✗" if target is not None and x > target else s


def short(exc):
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def load_matcalc():
    """Import matcalc (installed, else from the repository): (module, error, from_repo)."""
    try:
        import matcalc
        return matcalc, None, False
    except ImportError:
        sys.path.insert(0, str(ROOT))
    except Exception as e:  # a package under construction may fail in any way
        return None, short(e), False
    try:
        import matcalc
        return matcalc, None, True
    except Exception as e:
        return None, short(e), True


def timed_derive(matcalc, expr, wrt, shapes):
    """Parse to callable: derive() plus fetching .function (it may be built lazily)."""
    t = time.perf_counter()
    d = matcalc.derive(expr, wrt=wrt, shapes=shapes)
    d.function
    return time.perf_counter() - t, d


def first_derive(matcalc, expr, wrt, shapes, copies=3):
    """derive()'s time on an expression it has not seen: the median over copies of it, each
    with its own symbol names (W1 → W1_c0, …), so no copy finds anything cached from
    another, and one slow spell of the machine does not decide the figure. Also the
    result for the original names."""
    names = sorted(shapes, key=len, reverse=True)
    times = []
    for c in range(copies):
        rename = {n: f"{n}_c{c}" for n in names}
        text = re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", lambda m: rename[m.group(1)], expr)
        times.append(timed_derive(matcalc, text, rename[wrt], {rename[k]: v for k, v in shapes.items()})[0])
    return statistics.median(times), timed_derive(matcalc, expr, wrt, shapes)[1]


# ---------------------------------------------------------------------------- sections

def derive_times(matcalc, repeats, failures):
    """First call (fresh expression, warm process) and median of repeated calls, in ms."""
    rows = []
    for w in WORKLOADS:
        if not w.target:
            continue
        try:
            first, _ = first_derive(matcalc, w.expr, w.wrt, w.shapes)
            rep = statistics.median(timed_derive(matcalc, w.expr, w.wrt, w.shapes)[0]
                                    for _ in range(repeats))
            rows.append((w.name, 1e3 * first, 1e3 * rep))
        except Exception as e:
            failures.append(f"derive {w.name}: {short(e)}")
            rows.append((w.name, None, None))
    return rows


def l_scaling(matcalc, Ls, repeats, failures):
    rows = []
    for L in Ls:
        expr, shapes = mlp_expr(L), mlp_shapes(L)
        try:
            first, d = first_derive(matcalc, expr, "W1", shapes)
            rep = statistics.median(timed_derive(matcalc, expr, "W1", shapes)[0]
                                    for _ in range(repeats))
            rows.append((L, 1e3 * first, 1e3 * rep, len(d.numpy_source)))
        except Exception as e:
            failures.append(f"derive deep MLP L={L}: {short(e)}")
            rows.append((L, None, None, None))
    return rows


def changing_shapes(matcalc, n, failures):
    """One call each at n input widths (the two-layer ReLU, d = 200, 201, ...): the total time of
    the emitted function and of the hand-written gradient, in ms (each new shape makes the
    emitted function time its forms, up to a number of shapes per operation)."""
    RELU2 = BY_NAME["relu2_kl"]
    try:
        f = matcalc.derive(RELU2.expr, wrt=RELU2.wrt, shapes=RELU2.shapes).function.emitted
        rng = rng_for("changing", n)
        inputs = [RELU2.make(rng, d=200 + k, h=256, o=64) for k in range(n)]
        total = []
        for fn in (lambda inp: f(**inp), lambda inp: RELU2.grad(**inp)):
            t = time.perf_counter()
            for inp in inputs:
                fn(inp)
            total.append(1e3 * (time.perf_counter() - t))
        return n, total[0], total[1]
    except Exception as e:
        failures.append(f"changing shapes: {short(e)}")
        return n, None, None


def cli_wall(runs, from_repo, failures):
    """Median wall time of the CLI in fresh processes, run the way matcalc was imported here:
    the `matcalc` script of this interpreter's environment (a launcher found first on PATH,
    such as pyenv's shell shims, would add its own start-up time), else `python -m matcalc`."""
    here = Path(sys.executable).parent
    exe = next((str(p) for p in (here / "matcalc", here / "matcalc.exe") if p.is_file()), None)
    cmd = [exe] if exe else [sys.executable, "-m", "matcalc"]
    cmd += ["derive", VAE.expr, "--wrt", "W"]
    env = dict(os.environ)
    if from_repo:  # not installed: the repository's copy, as in this process
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        p = subprocess.run(cmd, cwd=ROOT if from_repo else HERE, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if p.returncode != 0:
            tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
            failures.append(f"CLI `{' '.join(cmd[:-4])} derive ...` exit {p.returncode}: {tail}")
            return None, cmd
    return statistics.median(times), cmd


def run_frameworks(sizes, workloads, args, failures):
    """Time jax / torch in one subprocess each: {fw: {(name, size): (seconds, hand seconds)},
    fw + " matcalc": {(name, size): matcalc's time / fw's, interleaved in fw's process}}."""
    out = {}
    for fw in FRAMEWORKS:
        if importlib.util.find_spec(fw) is None:
            continue
        log(f"[{fw}] timing in a subprocess ...")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", fw,
               "--sizes", ",".join(sizes), "--workloads", ",".join(w.name for w in workloads),
               "--budget", str(args.budget)] + (["--quick"] if args.quick else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        try:
            res = json.loads(p.stdout.strip().splitlines()[-1])
        except Exception:
            tail = " | ".join(p.stderr.strip().splitlines()[-3:])
            failures.append(f"{fw} worker failed (exit {p.returncode}): {tail}")
            continue
        out[fw], out[fw + " matcalc"] = {}, {}
        for key, (t, t_hand, err, m_over_fw) in res.items():
            name, size = key.split("/")
            if isinstance(err, str) or err > RTOL:
                failures.append(f"{fw} {key}: gradient disagrees with hand-written ({err})")
            out[fw][name, size] = (t, t_hand)
            out[fw + " matcalc"][name, size] = m_over_fw
    return out


def worker(fw, sizes, workloads, args):
    """Subprocess body: time jax.jit(jax.grad) or torch autograd of each forward, interleaved
    with the hand-written NumPy gradient and matcalc's emitted function in the same process
    (the framework's threads slow NumPy down in its process: comparing each with the hand-written
    gradient in its own process alone would charge that to matcalc)."""
    if fw == "jax":
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        def make(w, inp):
            p = jnp.asarray(inp[w.wrt])
            rest = {k: jnp.asarray(v) for k, v in inp.items() if k != w.wrt}
            g = jax.jit(jax.grad(lambda p, rest: w.lam(jnp, **{w.wrt: p}, **rest)))
            return lambda: g(p, rest).block_until_ready()
    else:
        import torch

        def make(w, inp):
            t = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in inp.items()}
            t[w.wrt] = t[w.wrt].clone().requires_grad_(True)
            return lambda: torch.autograd.grad(w.lam(torch, **t), t[w.wrt])[0]
    matcalc = load_matcalc()[0] if fw == "jax" else None  # (the report compares with jax)
    res = {}
    for w in workloads:
        for size in sizes_of(w, sizes):
            inp = w.inputs(size, rng_for(w.name, size))
            try:
                fns = [make(w, inp), lambda: w.grad(**inp)]
                if matcalc is not None:  # matcalc too, interleaved here: the same conditions
                    f = matcalc.derive(w.expr_at(size), wrt=w.wrt, shapes=w.shapes_at(size)).function.emitted
                    fns.append(lambda: f(**inp))
                times, outs = bench(fns, **reps(args))
                res[f"{w.name}/{size}"] = (times[0], times[0] / pair_ratio(0, 1), rel_err(np.asarray(outs[0]), outs[1]),
                                           pair_ratio(2, 0) if matcalc is not None else None)
            except Exception as e:
                res[f"{w.name}/{size}"] = (None, None, short(e), None)
            log(f"[{fw}] {w.name}/{size} done")
    print(json.dumps(res))


def sizes_of(w, sizes):
    """The sizes of workload w that were asked for, in w's order ("all": all but tiny)."""
    if sizes == ["all"]:
        return [s for s in w.sizes if s != "tiny"]
    return [s for s in w.sizes if s in sizes]


def reps(args):
    return {"repeats": 2} if args.quick else {"budget": args.budget}


# ---------------------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="all",
                    help="comma-separated size labels (64, 512, 4096, L8, L8xB256, …) or all")
    ap.add_argument("--out", default=str(HERE / "results.md"))
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 2 repeats (smoke test)")
    ap.add_argument("--workloads", default=",".join(BY_NAME), help="comma-separated subset")
    ap.add_argument("--budget", type=float, default=1.5,
                    help="seconds of timed calls per workload and size (at least 5 rounds)")
    ap.add_argument("--no-frameworks", action="store_true", help="skip jax/torch even if installed")
    ap.add_argument("--keep-memory", action="store_true",
                    help="run with freed memory kept in the process (no page faults; see README)")
    ap.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.keep_memory and not all(os.environ.get(v) for v in MALLOC_VARS):
        env = {**os.environ, **KEEP_MEMORY}  # glibc reads these at start-up: run again
        return subprocess.run([sys.executable, str(Path(__file__).resolve())]
                              + (sys.argv[1:] if argv is None else list(argv)), env=env).returncode
    sizes = ["tiny"] if args.quick else args.sizes.split(",")
    workloads = [BY_NAME[n] for n in args.workloads.split(",")]
    if args.worker:
        return worker(args.worker, sizes, workloads, args)

    failures, notes = [], []
    matcalc, err, from_repo = load_matcalc()
    if matcalc is None:
        failures.append(f"import matcalc: {err}")
    nrep = 2 if args.quick else 7
    Ls = [2, 4, 8] if args.quick else [2, 4, 8, 16, 32, 64]

    derive_rows, lrows, cli, changing = [], [], (None, None), (0, None, None)
    if matcalc is not None:
        log("derive() times ...")
        try:  # warm the process: imports, grammar, code generation paths
            timed_derive(matcalc, "sum(exp(A@v))", "A", {"A": ("p", "q"), "v": ("q",)})
        except Exception as e:
            failures.append(f"warm-up derive: {short(e)}")
        derive_rows = derive_times(matcalc, nrep, failures)
        log("deep-MLP L-scaling ...")
        lrows = l_scaling(matcalc, Ls, nrep, failures)
        log("a new shape every call ...")
        changing = changing_shapes(matcalc, 20 if args.quick else 300, failures)
        log("cold CLI ...")
        cli = cli_wall(2 if args.quick else 5, from_repo, failures)
    has_vg = matcalc is not None and hasattr(matcalc, "value_and_grad")

    rows = []  # (workload, size, emitted s, hand s, vg ratio, err)
    for w in workloads:
        for size in sizes_of(w, sizes):
            log(f"{w.name}/{size} ...")
            inp = w.inputs(size, rng_for(w.name, size))
            fns = [lambda: w.grad(**inp)]
            d = vg = vg1 = None
            if matcalc is not None:
                try:
                    d = matcalc.derive(w.expr_at(size), wrt=w.wrt, shapes=w.shapes_at(size))
                    fns.append(lambda: d.function.emitted(**inp))
                    fns.append(lambda: d.function(**inp))
                except Exception as e:
                    failures.append(f"derive {w.name}/{size}: {short(e)}")
            if d is not None and has_vg:
                try:
                    vg = matcalc.value_and_grad(w.expr_at(size), wrt=w.vg_wrt, shapes=w.shapes_at(size))
                    fns.append(lambda: vg.function.emitted(**inp))
                    vg1 = matcalc.value_and_grad(w.expr_at(size), wrt=[w.wrt], shapes=w.shapes_at(size))
                    fns.append(lambda: vg1.function.emitted(**inp))
                    fns.append(lambda: vg.function(**inp))  # with argument checks, as users call it
                except Exception as e:
                    failures.append(f"value_and_grad {w.name}/{size}: {short(e)}")
            # the hand-written value_and_grad: timed at the size of the target only (at the large
            # sizes another n² result per round changes when the others page-fault), and the
            # reference for every gradient value_and_grad returns
            hand_vg = len(fns) if w.vg is not None and size == VG_SIZE else None
            if hand_vg is not None:
                fns.append(lambda: w.vg(**inp))
            try:
                times, outs = bench(fns, **reps(args))
                if d is not None:  # the emitted time as its per-round ratio to the hand-written one
                    times[1] = times[0] * pair_ratio(1, 0)
            except Exception as e:
                failures.append(f"run {w.name}/{size}: {short(e)}")
                rows.append((w, size, None, None, None, None, None, None, None, None))
                continue
            t_emit = times[1] if d is not None else None
            t_checked = times[2] if d is not None else None
            t_vg = pair_ratio(3, 1) if vg is not None else None
            t_vg1 = pair_ratio(4, 1) if vg1 is not None else None
            t_vgc = pair_ratio(5, 2) if vg1 is not None else None
            t_vgh = pair_ratio(hand_vg, 0) if hand_vg is not None else None
            hand_out = outs[hand_vg] if hand_vg is not None else w.vg(**inp) if w.vg is not None else None
            err = None
            try:
                if d is not None:
                    err = rel_err(outs[1], outs[0])
                    if err > RTOL:
                        failures.append(f"{w.name}/{size}: emitted gradient disagrees with hand-written "
                                        f"(max rel error {err:.2e})")
                lam = w.lam(np, **inp)
                if hand_out is not None:  # the hand-written value_and_grad against λ and the gradient
                    value, grads = hand_out
                    if abs(float(value) - lam) > RTOL * abs(lam) or rel_err(grads[w.wrt], outs[0]) > RTOL:
                        failures.append(f"{w.name}/{size}: hand-written value_and_grad disagrees")
                for k in (3, 4) if vg1 is not None else (3,) if vg is not None else ():
                    value, grads = outs[k]
                    e_val = abs(float(value) - lam) / max(abs(lam), 1e-300)
                    refs = hand_out[1] if hand_out is not None else {w.wrt: outs[0]}
                    e_grad = max(rel_err(grads[v], refs[v]) for v in refs if v in grads)
                    if max(e_val, e_grad) > RTOL:
                        failures.append(f"{w.name}/{size}: value_and_grad disagrees "
                                        f"(value {e_val:.1e}, grad {e_grad:.1e})")
            except Exception as e:
                failures.append(f"{w.name}/{size}: {short(e)}")
                err = math.inf
            rows.append((w, size, t_emit, times[0], t_vg, err, t_checked, t_vg1, t_vgc, t_vgh))

    fw_times = {} if args.no_frameworks else run_frameworks(sizes, workloads, args, failures)
    missing = [fw for fw in FRAMEWORKS if fw not in fw_times]
    if missing:
        notes.append(f"{' and '.join(missing)} not run (not installed, disabled or failed).")
    if not has_vg and matcalc is not None:
        notes.append("matcalc.value_and_grad does not exist: value_and_grad reported as n/a.")

    md = report(sizes, rows, fw_times, derive_rows, lrows, cli, changing, failures, notes, args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(md)
    print(md)
    return 1 if failures else 0


def report(sizes, rows, fw_times, derive_rows, lrows, cli, changing, failures, notes, args):
    ms = lambda t: fmt(None if t is None else 1e3 * t, ".3f")
    ratio = lambda a, b: a / b if a is not None and b else None
    out = ["# matcalc benchmark", "", describe(), "",
           f"{platform.machine()}; {time.strftime('%Y-%m-%d %H:%M')}"
           + ("; **--quick** (tiny sizes, 2 repeats)" if args.quick else ""), "",
           "## Emitted function vs hand-written NumPy and jax.jit(grad)", "",
           f"Medians of interleaved repeated calls after a warm-up; every ratio is the median of the per-round ratios (the calls of one round run back to back). matcalc = the emitted function "
           f"(`d.function.emitted`), hand = hand-written FLOP-optimal NumPy, both in this process; "
           f"jax = jax.jit(jax.grad), timed in its own process interleaved with the same "
           f"hand-written gradient and matcalc's emitted function: jax/hand is that process's ratio, "
           f"m/j same = matcalc/jax measured there (interleaved: the same conditions), and m/j via "
           f"hand = (matcalc/hand) / (jax/hand), each ratio from its own process (jax's threads "
           f"slow NumPy down in jax's process, so this one charges that to matcalc). Targets: "
           f"matcalc/hand ≤ {RATIO_TARGET}, m/j same ≤ {JAX_TARGET} (✗ marks a miss). checked = `d.function` (which also checks its "
           f"arguments) / hand; torch = autograd / hand (own process); v&g = value_and_grad (λ and "
           f"the gradients of the listed wrt) / emitted single gradient; v&g 1 = value_and_grad with "
           f"the gradient's own wrt only (what λ adds); v&g checked = `vg.function` / `d.function` "
           f"(target ≤ {VG_TARGET} at size {VG_SIZE}); hand v&g = hand-written NumPy value_and_grad "
           f"(the same wrt as v&g, sharing the forward pass) / hand-written gradient, what NumPy's "
           f"calls cost a programmer for the same job (timed at size {VG_SIZE} only); err = max relative difference emitted vs hand.", "",
           "| workload | size | dims | hand ms | matcalc ms | jax ms | matcalc/hand | jax/hand "
           "| m/j same | m/j via hand | checked | torch | v&g | v&g wrt | v&g 1 | v&g checked | hand v&g | err |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    by_w = {}
    summary = {"worst": (0.0, None), "worst_jax": (0.0, None), "worst_via": (0.0, None), "vg": [],
               "vg hand": []}
    for w, size, te, th, vg, err, tc, vg1, vgc, vgh in rows:
        r = ratio(te, th)
        fr = {fw: ratio(*fw_times[fw][w.name, size]) if (w.name, size) in fw_times.get(fw, {}) else None
              for fw in FRAMEWORKS}
        rv = ratio(r, fr["jax"])
        rj = fw_times.get("jax matcalc", {}).get((w.name, size))
        g = by_w.setdefault(w.name, {"matcalc": [], "jax": [], "torch": [], "mj": [], "via": []})
        g["matcalc"].append(r)
        g["jax"].append(fr["jax"])
        g["torch"].append(fr["torch"])
        g["mj"].append(rj)
        g["via"].append(rv)
        if r is not None and r > summary["worst"][0]:
            summary["worst"] = (r, f"{w.name} {size}")
        if rj is not None and rj > summary["worst_jax"][0]:
            summary["worst_jax"] = (rj, f"{w.name} {size}")
        if rv is not None and rv > summary["worst_via"][0]:
            summary["worst_via"] = (rv, f"{w.name} {size}")
        if size == VG_SIZE:
            summary["vg"].append((w.name, vg, vg1, vgc))
            summary["vg hand"].append((w.name, vgh))
        tj = fw_times.get("jax", {}).get((w.name, size), (None, None))[0]
        dims = " ".join(f"{k}={v}" for k, v in w.sizes[size].items())
        vg_target = VG_TARGET if size == VG_SIZE else None
        out.append(f"| {w.name} | {size} | {dims} | {ms(th)} | {ms(te)} | {ms(tj)} "
                   f"| {fmt(r, target=RATIO_TARGET)} | {fmt(fr['jax'])} | {fmt(rj, target=JAX_TARGET)} "
                   f"| {fmt(rv)} "
                   f"| {fmt(ratio(tc, th))} | {fmt(fr['torch'])} | {fmt(vg, target=vg_target)} "
                   f"| {','.join(w.vg_wrt)} | {fmt(vg1, target=vg_target)} "
                   f"| {fmt(vgc, target=vg_target)} | {fmt(vgh)} | {fmt(err, '.1e')} |")
    out += ["", f"Geometric means of the ratios over each workload's sizes (target ≤ {GEOMEAN_TARGET} "
            f"for matcalc/hand over all, and below jax/hand):", "",
            "| workload | sizes | matcalc/hand | jax/hand | m/j same | m/j via hand | torch/hand |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for name, g in by_w.items():
        out.append(f"| {name} | {len(g['matcalc'])} | {fmt(geomean(g['matcalc']), '.3f')} "
                   f"| {fmt(geomean(g['jax']), '.3f')} | {fmt(geomean(g['mj']), '.3f')} "
                   f"| {fmt(geomean(g['via']), '.3f')} | {fmt(geomean(g['torch']), '.3f')} |")
    every = {k: geomean([x for g in by_w.values() for x in g[k]]) for k in ("matcalc", "jax", "mj", "via", "torch")}
    # over the cells where jax ran, so that both geometric means cover the same cells
    paired = [(m, j) for g in by_w.values() for m, j in zip(g["matcalc"], g["jax"])
              if m is not None and j is not None]
    gm_m, gm_j = geomean([m for m, _ in paired]), geomean([j for _, j in paired])
    out.append(f"| all | {sum(len(g['matcalc']) for g in by_w.values())} "
               f"| {fmt(every['matcalc'], '.3f', GEOMEAN_TARGET)} | {fmt(every['jax'], '.3f')} "
               f"| {fmt(every['mj'], '.3f')} | {fmt(every['via'], '.3f')} | {fmt(every['torch'], '.3f')} |")

    met = lambda ok: "n/a" if ok is None else ("met" if ok else "**not met**")
    worst, worst_at = summary["worst"]
    wj, wj_at = summary["worst_jax"]
    wv, wv_at = summary["worst_via"]
    vgs = [x for _, *v in summary["vg"] for x in v if x is not None]
    cli_t = cli[0]
    out += ["", "## Targets", "",
            f"- every workload at every size ≤ {RATIO_TARGET}× hand-written: "
            f"{met(worst <= RATIO_TARGET if worst_at else None)} (worst {worst:.2f}, {worst_at})",
            f"- geometric mean ≤ {GEOMEAN_TARGET}: {met(None if every['matcalc'] is None else every['matcalc'] <= GEOMEAN_TARGET)} "
            f"({fmt(every['matcalc'], '.3f')})",
            f"- geometric mean below jax.jit(grad)'s (same cells, each over hand-written NumPy in its "
            f"own process): {met(None if gm_j is None else gm_m < gm_j)} (matcalc {fmt(gm_m, '.3f')}, "
            f"jax {fmt(gm_j, '.3f')}); matcalc/jax interleaved in jax's process: "
            f"{fmt(every['mj'], '.3f')}, via hand: {fmt(every['via'], '.3f')}",
            f"- no workload > {JAX_TARGET}× jax.jit(grad)'s time (interleaved in jax's process): "
            f"{met(wj <= JAX_TARGET if wj_at else None)} (worst {wj:.2f}, {wj_at}; via hand: worst "
            f"{wv:.2f}, {wv_at})",
            f"- value_and_grad ≤ {VG_TARGET}× the gradient at size {VG_SIZE}: "
            f"{met(max(vgs) <= VG_TARGET if vgs else None)} ("
            + ", ".join(f"{n} {fmt(a)}/{fmt(b)}/{fmt(c)}" for n, a, b, c in summary["vg"]) + "; v&g/v&g 1/v&g checked). "
            "Hand-written NumPy's value_and_grad over its gradient at that size: "
            + ", ".join(f"{n} {fmt(h)}" for n, h in summary["vg hand"]),
            f"- cold CLI ≤ {CLI_TARGET_S} s: {met(None if cli_t is None else cli_t <= CLI_TARGET_S)} "
            f"({fmt(cli_t, '.3f')} s)"]

    n = 2 if args.quick else 7
    out += ["", "## derive() time (parse to callable, warm process)", "",
            f"First call for the expression (after one unrelated warm-up derive): the median over "
            f"3 copies of it with their own symbol names, so each is new to matcalc; and median of "
            f"{n} repeated calls (these may hit a cache). Target: first call ≤ {DERIVE_TARGET_MS:g} ms.",
            "", "| workload | first ms | median ms |", "|---|---:|---:|"]
    for name, first, rep in derive_rows:
        out.append(f"| {name} | {fmt(first, '.1f', DERIVE_TARGET_MS)} | {fmt(rep, '.1f')} |")

    out += ["", "## Deep tanh MLP (batch 1): derive time and emitted source size vs depth L", "",
            "| L | derive first ms | derive median ms | numpy_source chars |", "|---:|---:|---:|---:|"]
    for L, first, rep, src in lrows:
        out.append(f"| {L} | {fmt(first, '.1f')} | {fmt(rep, '.1f')} | {fmt(src, 'd')} |")
    if len(lrows) >= 2:
        (L0, f0, r0, s0), (L1, f1, r1, s1) = lrows[-2:]
        out += ["", f"Ratio L={L1} / L={L0} (target ≤ {LSCALE_TARGET}): derive first "
                f"{fmt(ratio(f1, f0), target=LSCALE_TARGET)}, derive median "
                f"{fmt(ratio(r1, r0), target=LSCALE_TARGET)}, source size "
                f"{fmt(ratio(s1, s0), target=LSCALE_TARGET)}."]

    n_shapes, t_m, t_h = changing
    out += ["", "## A new shape every call", "",
            f"The two-layer ReLU gradient called once at each of {n_shapes} input widths (d = 200, 201, "
            f"…; h = 256, o = 64), in a fresh emitted module: matcalc {fmt(t_m, '.1f')} ms, hand-written "
            f"{fmt(t_h, '.1f')} ms, ratio {fmt(ratio(t_m, t_h))} (a new shape makes the emitted "
            f"function time its forms, for the first 16 shapes of each operation)."]

    t, cmd = cli
    runs = 2 if args.quick else 5
    out += ["", "## Cold CLI", "",
            f"`matcalc derive \"{VAE.expr}\" --wrt W` in a fresh process "
            f"({' '.join(Path(c).name for c in cmd[:-4]) if cmd else 'not run'}), median of {runs} runs: "
            f"**{fmt(t, '.3f', CLI_TARGET_S)}** s (target ≤ {CLI_TARGET_S} s)."]
    if notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    if failures:
        out += ["", "## Failures", ""] + [f"- {f}" for f in failures]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
