"""What a benchmark ran on: CPU model, cores, load, Python, NumPy and its BLAS, and whether
freed memory stays in the process (the page-fault remedy of the README)."""
import os
import platform

import numpy as np

MALLOC_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas() -> str:
    """The BLAS NumPy was built with, and what threadpoolctl sees loaded (if installed)."""
    parts = []
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        parts.append(f"{cfg.get('name', '?')} {cfg.get('version', '')}".strip())
        extra = cfg.get("openblas configuration")
        if extra:
            parts.append(" ".join(extra.split()))
    except Exception:  # older NumPy: no dict form
        parts.append("unknown (numpy.show_config has no dict form)")
    try:
        from threadpoolctl import threadpool_info
        for p in threadpool_info():
            parts.append(f"loaded: {p.get('internal_api')} {p.get('version')} "
                         f"({p.get('threading_layer')}, {p.get('num_threads')} threads, "
                         f"{p.get('architecture')})")
    except ImportError:
        parts.append("threadpoolctl not installed")
    return "; ".join(parts)


def blas_core() -> str:
    """The CPU kernels OpenBLAS chose (its core name; OPENBLAS_CORETYPE overrides the choice),
    read from NumPy's bundled OpenBLAS; '' if not found."""
    import ctypes

    try:
        from matcalc.runtime import _openblas_libraries
    except ImportError:  # (matcalc not importable: the benchmark says so elsewhere)
        return ""
    for path in _openblas_libraries():
        for name in ("openblas_get_corename", "scipy_openblas_get_corename64_",
                     "scipy_openblas_get_corename_"):
            try:
                fn = getattr(ctypes.CDLL(path), name)
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_char_p
            return fn().decode()
    return ""


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def describe() -> str:
    try:
        load = "load average %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load = "load average n/a"
    malloc = all(os.environ.get(v) for v in MALLOC_VARS)
    try:
        import numexpr
        ne = f"numexpr {numexpr.__version__} ({numexpr.get_num_threads()} threads)"
    except ImportError:
        ne = "numexpr not installed"
    core = blas_core()
    forced = os.environ.get("OPENBLAS_CORETYPE")
    core = f"OpenBLAS kernels: {core}" + (f" (OPENBLAS_CORETYPE={forced})" if forced else "") + "; " if core else ""
    return (f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs ({usable_cpus()} usable by this process), {load}. "
            f"Python {platform.python_version()}, NumPy {np.__version__}, BLAS: {blas()}; {core}{ne}. "
            f"Freed memory kept in the process (MALLOC_* variables): {'yes' if malloc else 'no'}.")


if __name__ == "__main__":
    print(describe())
