"""benchmarks/backends.py runs (tiny sizes) and its gradients agree; no timing is asserted."""
import subprocess
import sys

from conftest import ROOT


def test_backends_benchmark_quick(tmp_path):
    out = tmp_path / "backends.md"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "backends.py"), "--quick", "--out", str(out),
                        "--workloads", "vae_kl,gaussian_nll"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    text = out.read_text(encoding="utf-8")
    assert "| backend | geomean ratio | target |" in text and "Failures" not in text
    assert text.count("| tiny |") == 2  # one row per workload
