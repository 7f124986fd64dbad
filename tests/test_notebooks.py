"""Execute every notebook in notebooks/ and fail if any cell raises.

The notebooks assert their own results (numeric checks, torch's printed numbers), so running
them is the test. They are stored without outputs; this runs them in a fresh kernel.

Needs the ``notebooks`` extra (nbclient, nbformat, ipykernel, matplotlib); without it the tests
are skipped with the reason. The kernel is started with the interpreter that runs pytest, so
the notebooks import the matcalc installed in this environment, whatever other "python3"
kernels a machine has registered.
"""

import json
import sys
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
KERNEL = "python3"
CELL_TIMEOUT = 120  # seconds per cell


def test_notebooks_exist():
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """A ``python3`` kernelspec for this interpreter, first on JUPYTER_PATH."""
    pytest.importorskip("nbclient", reason="nbclient is not installed (pip install -e '.[notebooks]')")
    pytest.importorskip("nbformat", reason="nbformat is not installed (pip install -e '.[notebooks]')")
    pytest.importorskip("ipykernel", reason="no Jupyter kernel available: ipykernel is not installed")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed; the notebooks plot with it")
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (tests)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return str(root)


def _clean(nb) -> bool:
    return all(not c.get("outputs") and c.get("execution_count") is None
               for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, kernel_env, monkeypatch):
    import nbformat
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("JUPYTER_PATH", kernel_env)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    assert _clean(nb), f"{path.name} is stored with outputs; clear them before committing"
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT,
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    try:
        client.execute()
    except NoSuchKernel as err:  # pragma: no cover - depends on the machine
        pytest.skip(f"no Jupyter kernel {KERNEL!r} available: {err}")
    except CellExecutionError as err:
        pytest.fail(f"{path.name}: a cell raised\n{err}", pytrace=False)
