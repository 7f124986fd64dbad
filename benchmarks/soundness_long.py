#!/usr/bin/env python
"""Long soundness run outside pytest.

    python benchmarks/soundness_long.py [N=2000] [--seed S] [--max-depth D]
                                        [--exclude TAG ...] [--default-kinds]

Draws N random well-typed scalar expressions (tests/exprgen.py, driven by a
NumPy Generator), derives every symbol's gradient with matcalc and compares
it with central finite differences of the generator's *independent* NumPy
evaluation of λ (tests/fd.py).  Prints "X passed, Y failed" (per case: a
case fails if any of its gradients is wrong, refused or crashes) and then
every failing expression.  Each case's value function and value_and_grad (which
have their own emitted code) are checked too.  Exit status 1 if anything failed.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from support import exprgen  # noqa: E402
from support.fd import check_gradient  # noqa: E402


def run_case(matcalc, case, rng, shapes):
    """Return a list of failure descriptions (empty if the case passed)."""
    inputs = case.draw_inputs(rng)
    failures, grads = [], {}
    for w in case.wrt:
        try:
            d = matcalc.derive(case.expr, wrt=w, shapes=shapes)
            got = d.function(**{k: np.copy(v) if isinstance(v, np.ndarray) else v
                                for k, v in inputs.items()})
        except matcalc.MatcalcError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            failures.append(f"wrt={w}: refused ({type(e).__name__}: {first})")
            continue
        except Exception as e:  # a crash is a failure, keep going
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            failures.append(f"wrt={w}: crashed ({tb})")
            continue
        res = check_gradient(got, case.f, inputs, w)
        if not res.ok:
            failures.append(f"wrt={w}: {res.describe()}; matcalc says "
                            f"{getattr(d, 'text', '?')}")
            continue
        grads[w] = got
    failures += check_value_and_grad(matcalc, case, inputs, shapes, grads) if grads else []
    return failures


def check_value_and_grad(matcalc, case, inputs, shapes, grads):
    """The emitted value function and value_and_grad (its own emitted code) agree with the
    generator's λ and with the gradients checked above."""
    want = case.f(**inputs)
    tol = lambda ref: 1e-8 * max(1.0, float(np.max(np.abs(ref))))
    try:
        d = matcalc.derive(case.expr, wrt=next(iter(grads)), shapes=shapes)
        value = d.value_function(**inputs)
        value2, got = matcalc.value_and_grad(case.expr, wrt=list(grads), shapes=shapes).function(**inputs)
    except Exception as e:
        tb = traceback.format_exception_only(type(e), e)[-1].strip()
        return [f"value / value_and_grad: crashed ({tb})"]
    out = []
    for name, v in (("value function", value), ("value_and_grad value", value2)):
        if not abs(v - want) <= tol(want):
            out.append(f"{name} {v!r}, expected {want!r}")
    for w, g in grads.items():
        if np.shape(got[w]) != np.shape(g) or not np.max(np.abs(np.asarray(got[w]) - g), initial=0.0) <= tol(g):
            out.append(f"value_and_grad gradient wrt {w} differs from the single gradient")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=2000,
                    help="number of random cases (default 2000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-depth", type=int, default=4)
    ap.add_argument("--exclude", nargs="*", default=[],
                    help="feature tags to leave out (see Case.features)")
    ap.add_argument("--default-kinds", action="store_true",
                    help="declare only shapes that differ from the name's "
                         "default kind (tests shape inference)")
    ap.add_argument("--max-report", type=int, default=200,
                    help="print at most this many failing cases")
    args = ap.parse_args(argv)

    import matcalc

    rng = np.random.default_rng(args.seed)
    passed, failed = 0, []
    n_grads = 0
    t0 = time.perf_counter()
    for i in range(args.n):
        case = exprgen.random_case(rng, max_depth=args.max_depth,
                                   exclude=args.exclude)
        shapes = case.declared if args.default_kinds else case.shapes
        n_grads += len(case.wrt)
        problems = run_case(matcalc, case, rng, shapes)
        if problems:
            failed.append((i, case, shapes, problems))
        else:
            passed += 1
    dt = time.perf_counter() - t0

    print(f"{passed} passed, {len(failed)} failed "
          f"({n_grads} gradients, {dt:.1f}s, seed {args.seed})")
    for i, case, shapes, problems in failed[:args.max_report]:
        print(f"\n[case {i}] {case.expr}")
        print(f"  shapes  {shapes}")
        print(f"  domains {case.domains}")
        for p in problems:
            print(f"  {p}")
    if len(failed) > args.max_report:
        print(f"\n... and {len(failed) - args.max_report} more")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
