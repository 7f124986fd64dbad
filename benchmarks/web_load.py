"""A bounded load test of ``matcalc serve`` on this machine (loopback only).

    python benchmarks/web_load.py [--requests 1000] [--concurrency 50] [--workers 2]

Starts its own server on 127.0.0.1 (a free port) twice, with its answer cache (as
``matcalc serve`` runs) and without it (every request derived by a worker), sends a fixed
number of ``POST /api/derive`` requests over the examples menu from concurrent clients, and
reports errors, p50/p95/max latency (client side, queueing included) and throughput, next to the time of the same derivations
called in-process in the same run (the baseline). Stops by itself."""
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent


def _questions():
    from matcalc.web.examples import EXAMPLES

    # the gradient examples (those of the Hessian and Jacobian modes ask other endpoints)
    return [{k: ex[k] for k in ("expr", "wrt", "shapes") if k in ex} for ex in EXAMPLES
            if ex.get("mode", "gradient") == "gradient"]


def _percentile(values, q):
    values = sorted(values)
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


def run_load(url: str, requests: int = 1000, concurrency: int = 50, timeout: float = 60.0,
             questions=None) -> dict:
    """Send ``requests`` POST /api/derive from ``concurrency`` threads (one keep-alive connection
    each) to ``url`` (loopback only). Returns ok, errors, p50_ms, p95_ms, max_ms, seconds, rps."""
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"the load test only talks to this machine, not {parts.hostname}")
    bodies = [json.dumps(q).encode() for q in (questions or _questions())]
    lock = threading.Lock()
    next_i = [0]
    latencies, errors = [], []

    def client():
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        try:
            while True:
                with lock:
                    i = next_i[0]
                    if i >= requests:
                        return
                    next_i[0] += 1
                body = bodies[i % len(bodies)]
                t0 = time.perf_counter()
                try:
                    conn.request("POST", "/api/derive", body, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    data = resp.read()
                    dt = time.perf_counter() - t0
                    if resp.status != 200 or not isinstance(json.loads(data), list):
                        with lock:
                            errors.append(f"HTTP {resp.status}: {data[:200]!r}")
                    else:
                        with lock:
                            latencies.append(dt)
                except Exception as e:  # noqa: BLE001 - every failure counts as an error
                    with lock:
                        errors.append(f"{type(e).__name__}: {e}")
                    conn.close()
                    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        finally:
            conn.close()

    t_start = time.perf_counter()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * requests)
    seconds = time.perf_counter() - t_start
    ms = [x * 1000 for x in latencies]
    return {"requests": requests, "concurrency": concurrency, "ok": len(latencies), "errors": errors,
            "p50_ms": _percentile(ms, 50), "p95_ms": _percentile(ms, 95), "max_ms": max(ms, default=float("nan")),
            "seconds": seconds, "rps": len(latencies) / seconds if seconds else float("nan")}


class _Server:
    def __init__(self, workers: int, cache: bool):
        code = ("import sys; from matcalc.web.server import run_server; "
                f"sys.exit(run_server(port=0, workers={workers}, cache_size={256 if cache else 0}))")
        self.process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 120
        for line in self.process.stdout:
            if "serving " in line:
                self.url = line.split("serving ")[1].split()[0]
                break
            if time.time() > deadline:
                break
        else:
            raise RuntimeError("the server did not start")
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _baseline_ms(questions, rounds=3):
    """The same derivations in this process, one after another: ms per question (median)."""
    import matcalc
    from matcalc.cli import json_object
    from matcalc.web.protocol import derive_params

    times = []
    for _ in range(rounds):
        for q in questions:
            p = derive_params(q)
            t0 = time.perf_counter()
            ds = matcalc.derive(p["expr"], wrt=p["wrt"], shapes=p["shapes"], definitions=p["definitions"])
            json.dumps([json_object(d) for d in ds.values()])
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _machine():
    cpu = platform.processor() or ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    questions = _questions()
    base = _baseline_ms(questions)
    print(f"machine: {_machine()}")
    print(f"{args.requests} requests, {args.concurrency} concurrent clients, {args.workers} workers, "
          f"{len(questions)} example questions")
    print(f"baseline: one derivation in-process (median) {base:.1f} ms\n")
    print("| server | ok | errors | p50 ms | p95 ms | max ms | req/s | p50 / baseline |")
    print("|---|---|---|---|---|---|---|---|")
    failed = False
    for cache in (False, True):
        server = _Server(args.workers, cache)
        try:
            runs = [(f"{args.concurrency} clients", run_load(server.url, args.requests, args.concurrency))]
            if not cache:  # one client: the time of a request with no queue, the server's overhead
                runs.insert(0, ("1 client", run_load(server.url, min(args.requests, 200), 1)))
        finally:
            server.stop()
        for label, s in runs:
            failed |= bool(s["errors"])
            print(f"| {'with' if cache else 'without'} answer cache, {label} | {s['ok']} | {len(s['errors'])} | "
                  f"{s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {s['max_ms']:.1f} | {s['rps']:.0f} | "
                  f"{s['p50_ms'] / base:.1f} |")
            for e in s["errors"][:5]:
                print("   error:", e)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
