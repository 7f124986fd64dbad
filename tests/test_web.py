"""matcalc serve: the JSON endpoint against the CLI, refusals, limits, a real server under load
and the page in a real browser (headless Chromium through Playwright; skipped without them)."""
import inspect
import re
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from collections import defaultdict
from urllib.parse import quote

import numpy as np
import pytest

import matcalc
from conftest import HERE, case_inputs, load_corpus, np_eval
from webutil import ARTIFACTS, ROOT, RunningServer

pytest.importorskip("starlette")
pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # newer Starlette prefers another HTTP client for its TestClient
    from starlette.testclient import TestClient

from matcalc.web.protocol import LIMITS  # noqa: E402
from matcalc.web.server import create_app  # noqa: E402

CASES = load_corpus()


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(workers=2)) as c:
        yield c


def _groups():
    """Corpus cases sharing expression and shapes: one CLI call and one request with every wrt."""
    groups = defaultdict(list)
    for case in CASES:
        groups[(case["expr"], json.dumps(case["shapes"], sort_keys=True))].append(case)
    return list(groups.values())


GROUPS = _groups()


def _cli_json(expr, wrt, shapes, *extra):
    args = [sys.executable, "-m", "matcalc", "derive", expr, *extra]
    for w in wrt:
        args += ["--wrt", w]
    for name, shape in shapes.items():
        args += ["--shape", f"{name}=" + (",".join(map(str, shape)) if shape else "scalar")]
    r = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120)
    return r, [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("group", GROUPS, ids=[g[0]["id"] for g in GROUPS])
def test_endpoint_returns_exactly_the_cli_json(client, group):
    expr, shapes = group[0]["expr"], group[0]["shapes"]
    wrt = list(dict.fromkeys(c["wrt"] for c in group))
    r, cli = _cli_json(expr, wrt, shapes, "--check")
    assert r.returncode == 0, r.stderr
    resp = client.post("/api/derive", json={"expr": expr, "wrt": wrt, "shapes": shapes, "check": True})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert body == cli
    assert [o["wrt"] for o in body] == wrt
    for case in group:
        o = body[wrt.index(case["wrt"])]
        assert o["shape"] == case["shapes"][case["wrt"]]
        assert o["check"]["ok"] is True
        assert o["steps_latex"].startswith("\\begin{aligned}")


def test_shapes_and_definitions_as_text_mean_what_the_cli_flags_mean(client):
    expr, lets = "alpha*(p - l + m*m - 1):1", ["l=W@x+c", "p=exp(l)"]
    r, cli = _cli_json(expr, ["W", "c"], {"W": ["n", "d"]}, "--let", lets[0], "--let", lets[1])
    assert r.returncode == 0, r.stderr
    resp = client.post("/api/derive", json={"expr": expr, "wrt": "W, c", "shapes": "W = n,d",
                                            "definitions": "l = W@x+c\np = exp(l)"})
    assert resp.status_code == 200, resp.text
    assert resp.json() == cli
    assert cli[0]["shape"] == ["n", "d"]


def test_symbols_lists_the_variables_in_order_with_their_shapes(client):
    resp = client.post("/api/symbols", json={"expr": "G:exp(X@W)", "shapes": {"X": ["n", "d"], "W": ["d", "k"]}})
    assert resp.status_code == 200, resp.text
    syms = resp.json()["symbols"]
    assert [s["name"] for s in syms] == ["G", "X", "W"]
    assert [s["shape"] for s in syms] == [["n", "k"], ["n", "d"], ["d", "k"]]


REFUSED = [
    ("W@x + X:1", "W"),                 # shapes differ
    ("alpha*(exp(W@x+c) - W@@x):1", "W"),  # parse error
    ("W@x", "W"),                       # not a scalar
    ("G:(X@W)", "w"),                   # not a symbol of the expression
    ("tr(x)", "x"),                     # tr of a vector
]


@pytest.mark.parametrize("expr,wrt", REFUSED)
def test_refusals_are_400_with_the_message_the_api_raises(client, expr, wrt):
    with pytest.raises(matcalc.MatcalcError) as err:
        matcalc.derive(expr, wrt=[wrt])
    resp = client.post("/api/derive", json={"expr": expr, "wrt": wrt})
    assert resp.status_code == 400
    body = resp.json()
    assert body["error"] == str(err.value)
    assert "Traceback" not in body["error"]
    if err.value.start is not None:  # a caret under the column of the sub-expression
        line, caret = body["error"].splitlines()[-2:]
        assert caret.strip() and set(caret.strip()) == {"^"}
        assert body["column"] == caret.index("^") - 1  # both lines are indented by two spaces
        assert line.strip() == expr


def test_a_refusal_from_the_cli_has_the_same_message(client):
    r = subprocess.run([sys.executable, "-m", "matcalc", "derive", "W@x + X:1", "--wrt", "W"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    resp = client.post("/api/derive", json={"expr": "W@x + X:1", "wrt": "W"})
    assert r.stderr.strip() == "matcalc: " + resp.json()["error"].strip()


@pytest.mark.parametrize("body,needle", [
    ({"wrt": "W"}, "expr is missing"),
    ({"expr": "G:(X@W)"}, "wrt is missing"),
    ({"expr": "G:(X@W)", "wrt": "W", "definitons": {}}, "unknown key 'definitons'"),
    ({"expr": "G:(X@W)", "wrt": 3}, "wrt must be"),
    ({"expr": "G:(X@W)", "wrt": "W", "shapes": [1, 2]}, "shapes must be"),
    ({"expr": "G:(X@W)", "wrt": "W", "shapes": {"W": [["a"]]}}, "the shape of W"),
    ({"expr": "G:(X@W)", "wrt": "W", "shapes": {"W": ["d; X=k,k", "m"]}}, "the shape of W"),  # one dimension each
    ({"expr": 123, "wrt": "W"}, "expr must be text"),
    ({"expr": "G:(X@W)", "wrt": "W", "shapes": "W"}, "NAME=DIMS"),
    ({"expr": "G:(X@W)", "wrt": "W", "definitions": "l"}, "NAME = EXPR"),
    ({"expr": "G:(X@W)", "wrt": "W", "shapes": {"W": ["a", 1.5]}}, "the shape of W"),
    ({"expr": "G:(X@W)", "wrt": "W", "check": "yes"}, "check must be"),
    (["G:(X@W)"], "JSON object"),
])
def test_malformed_requests_are_400_with_a_message(client, body, needle):
    resp = client.post("/api/derive", json=body)
    assert resp.status_code == 400
    assert needle in resp.json()["error"]


def test_body_that_is_not_json_is_400(client):
    resp = client.post("/api/derive", content=b"expr=G:(X@W)", headers={"content-type": "text/plain"})
    assert resp.status_code == 400
    assert "not JSON" in resp.json()["error"]


@pytest.mark.parametrize("body,needle", [
    (b"[" * 20000 + b"]" * 20000, "nested too deeply"),  # (40 kB, under the body limit)
    (b'{"expr": "W:1 + \\ud800", "wrt": "W"}', "surrogate"),  # a lone half of a UTF-16 pair
])
def test_json_python_cannot_take_is_400(client, body, needle):
    resp = client.post("/api/derive", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 400 and needle in resp.json()["error"]


@pytest.mark.skipif("syntax" in inspect.signature(matcalc.derive).parameters,
                    reason="this matcalc reads other syntaxes")
def test_an_unknown_syntax_is_named_in_a_400(client):
    resp = client.post("/api/derive", json={"expr": "G:(X@W)", "wrt": "W", "syntax": "matlab"})
    assert resp.status_code == 400
    assert "'matlab'" in resp.json()["error"]
    ok = client.post("/api/derive", json={"expr": "G:(X@W)", "wrt": "W", "syntax": "matcalc"})
    assert ok.status_code == 200


@pytest.mark.parametrize("body", [
    {"expr": "x:x + " * (LIMITS["expr_chars"] // 6) + "x:x", "wrt": "x"},
    {"expr": "G:(X@W)", "wrt": "W", "definitions": {"l": "x" + "+x" * LIMITS["definition_chars"]}},
    {"expr": "G:(X@W)", "wrt": [f"w{i}" for i in range(LIMITS["wrt"] + 1)]},
    {"expr": "G:(X@W)", "wrt": "W", "shapes": {f"v{i}": ["n"] for i in range(LIMITS["shapes"] + 1)}},
    {"expr": "G:(X@W)", "wrt": "W", "pad": "x" * LIMITS["body_bytes"]},
])
def test_oversized_input_is_413_at_once(client, body):
    t0 = time.perf_counter()
    resp = client.post("/api/derive", json=body)
    assert resp.status_code == 413, resp.text
    assert "limit" in resp.json()["error"]
    assert time.perf_counter() - t0 < 5


def test_deep_nesting_is_refused_with_a_caret(client):
    resp = client.post("/api/derive", json={"expr": "(" * 5000 + "x" + ")" * 5000, "wrt": "x"})
    assert resp.status_code == 413  # over the size limit
    resp = client.post("/api/derive", json={"expr": "(" * 2000 + "x" + ")" * 2000, "wrt": "x"})
    assert resp.status_code == 400
    assert "^" in resp.json()["error"]


def _slow_expression():
    """Under the size limit, but a derivation of a second or more on any machine (hundreds of terms)."""
    expr = "+".join(f"sin(W@x+{i}*c):1" for i in range(280))
    assert len(expr) <= LIMITS["expr_chars"]
    return expr


def test_a_slow_question_is_stopped_at_the_time_limit_while_others_are_served():
    timeout = 0.5
    with TestClient(create_app(workers=2, timeout=timeout, cache_size=0)) as c:
        slow = {}

        def ask_slow():
            t0 = time.perf_counter()
            r = c.post("/api/derive", json={"expr": _slow_expression(), "wrt": "W"})
            slow.update(status=r.status_code, body=r.json(), seconds=time.perf_counter() - t0,
                        done=time.perf_counter())

        thread = threading.Thread(target=ask_slow)
        thread.start()
        time.sleep(0.1)
        quick = c.post("/api/derive", json={"expr": "G:exp(X@W)", "wrt": "X"})
        quick_done = time.perf_counter()
        thread.join(60)
        assert quick.status_code == 200
        assert slow["status"] == 422
        assert "longer than 0.5 s" in slow["body"]["error"]
        assert slow["seconds"] < timeout + 10
        assert c.app.state.pool.restarts == 1
        # the killed worker was replaced: both workers answer again
        for _ in range(4):
            assert c.post("/api/derive", json={"expr": "x.T@A@x", "wrt": "x"}).status_code == 200
        assert quick_done < slow["done"]  # answered while the slow one was still running


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the memory limit needs POSIX rlimits")
def test_a_question_that_needs_too_much_memory_is_stopped():
    # the check of a 20000×20000 W draws matrices of 3.2 GB each
    with TestClient(create_app(workers=1, timeout=30, memory_limit=1 << 30, cache_size=0)) as c:
        t0 = time.perf_counter()
        r = c.post("/api/derive", json={"expr": "sum(exp(W@x))", "wrt": "W", "check": True,
                                        "shapes": {"W": [20000, 20000]}})
        assert r.status_code == 422, r.text
        assert "memory" in r.json()["error"] or "longer than" in r.json()["error"]
        assert time.perf_counter() - t0 < 40
        ok = c.post("/api/derive", json={"expr": "G:(X@W)", "wrt": "W"})
        assert ok.status_code == 200


def test_an_answer_over_the_size_limit_is_refused(client):
    # 235 different terms: every one of the ~700 steps writes dλ out (about 10 MB of JSON)
    expr = " + ".join(f"sum(exp(W@x+{i}))" for i in range(235))
    r = client.post("/api/derive", json={"expr": expr, "wrt": "W"})
    assert r.status_code == 422, r.text[:200]
    assert "MiB of JSON" in r.json()["error"]


def test_page_assets_are_all_served_from_here(client):
    page = client.get("/")
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "connect-src 'self'" in csp
    for path in ["/static/app.js", "/static/app.css", "/static/katex/katex.min.js", "/static/katex/katex.min.css"]:
        assert f'"{path}"' in page.text
        assert client.get(path).status_code == 200, path
    assert "MIT" in client.get("/static/katex/LICENSE").text
    for path in ["/", "/static/app.js", "/static/app.css"]:
        text = client.get(path).text
        assert "http://" not in text and "https://" not in text, path
    css = client.get("/static/katex/katex.min.css").text
    assert "http" not in css
    for font in set(__import__("re").findall(r"url\((fonts/[^)]+\.woff2)\)", css)):
        assert client.get("/static/katex/" + font).status_code == 200, font


ENDPOINT = {"gradient": "/api/derive", "hessian": "/api/hessian", "jacobian": "/api/jacobian"}


def test_info_lists_the_examples_and_each_derives(client):
    info = client.get("/api/info").json()
    names = " ".join(e["name"] for e in info["examples"]).lower()
    for word in ("vae", "relu", "linear", "torch", "least squares", "logdet"):
        assert word in names
    second = {(e.get("mode"), e["expr"]) for e in info["examples"]}
    for q in [("hessian", "x.T@A@x"), ("hessian", "norm2(X@W - Y)**2"), ("hessian", "logdet(X)"),
              ("jacobian", "softmax(x)"), ("jacobian", "A@X@B")]:
        assert q in second
    assert info["modes"] == ["gradient", "hessian", "jacobian"]
    for ex in info["examples"]:
        mode = ex.get("mode", "gradient")
        r = client.post(ENDPOINT[mode], json={k: ex[k] for k in ("expr", "wrt", "shapes") if k in ex})
        assert r.status_code == 200, (ex, r.text)
        assert [o["wrt"] for o in r.json()] == ex["wrt"]
        if mode != "gradient":
            assert all(o["kron"] and o[mode] for o in r.json())


def test_other_hosts_and_other_sites_are_refused():
    with TestClient(create_app(workers=1, allowed_hosts=["127.0.0.1", "localhost"]),
                    base_url="http://127.0.0.1:8000") as c:
        assert c.get("/api/info").status_code == 200
        assert c.get("/api/info", headers={"host": "attacker.example"}).status_code == 400
        r = c.post("/api/derive", json={"expr": "G:(X@W)", "wrt": "W"},
                   headers={"origin": "http://attacker.example"})
        assert r.status_code == 403
        r = c.post("/api/derive", json={"expr": "G:(X@W)", "wrt": "W"}, headers={"origin": "http://127.0.0.1:8000"})
        assert r.status_code == 200


def test_cli_never_imports_the_web_framework():
    code = ("import sys, matcalc, matcalc.cli; matcalc.cli.run(['derive', 'G:(X@W)', '--wrt', 'W']); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn', 'httpx', 'anyio')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_serve_without_the_web_extra_says_how_to_install_it():
    code = ("import sys; sys.modules['starlette'] = None; sys.modules['uvicorn'] = None; "
            "from matcalc.cli import run; sys.exit(run(['serve']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "pip install 'matcalc-diff[web]'" in r.stderr
    assert "Traceback" not in r.stderr


def test_serve_refuses_a_port_in_use():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "matcalc", "serve", "--port", str(port)],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert f"127.0.0.1:{port}" in r.stderr and "--port" in r.stderr
    assert "Traceback" not in r.stderr


# ---- Hessians, Jacobians and the torch/jax sources

SECOND = json.loads((HERE / "data" / "second_order_public.json").read_text(encoding="utf-8"))


def _cli_second(kind, expr, wrt, shapes, *extra):
    args = [sys.executable, "-m", "matcalc", kind, expr, *extra]
    for w in wrt:
        args += ["--wrt", w]
    for name, shape in shapes.items():
        args += ["--shape", f"{name}=" + (",".join(map(str, shape)) if shape else "scalar")]
    r = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120)
    return r, [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("case", SECOND, ids=[c["id"] for c in SECOND])
def test_second_order_endpoint_returns_exactly_the_cli_json(client, case):
    kind = case["kind"]
    r, cli = _cli_second(kind, case["expr"], [case["wrt"]], case["shapes"], "--check")
    assert r.returncode == 0, r.stderr
    resp = client.post(f"/api/{kind}", json={"expr": case["expr"], "wrt": case["wrt"], "shapes": case["shapes"],
                                             "check": True})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body == cli
    (o,) = body
    assert o["wrt"] == case["wrt"] and o["check"]["ok"] is True
    assert o["steps_latex"].startswith("\\begin{aligned}") and o["derivation"]
    # the dense matrix of the module the endpoint returned, against the corpus' closed form
    ns = {}
    exec(compile(o["numpy_source"], "<endpoint>", "exec"), ns)  # noqa: S102 - matcalc's own output
    inputs = case_inputs(case)
    got = ns[f"{kind}_{case['wrt']}"](**{k: np.asarray(v, dtype=float) for k, v in inputs.items()})
    want = np_eval(case["reference"], inputs)
    assert got.shape == want.shape
    assert np.allclose(got, want, rtol=1e-9, atol=1e-9)


def test_hessian_blocks_and_kronecker_forms_match_the_closed_forms(client):
    r = client.post("/api/hessian", json={"expr": "norm2(X@W - Y)**2", "wrt": "W", "shapes": "X=n,d; W=d,m"})
    assert r.status_code == 200, r.text
    (o,) = r.json()
    assert (o["hessian"], o["kron"], o["matrix_shape"]) == ("2*X.T@X@dW", "kron(I_m, 2*X.T@X)", ["d*m", "d*m"])
    r = client.post("/api/jacobian", json={"expr": "A@X@B", "wrt": ["X"]})
    assert r.json()[0]["kron"] == "kron(B.T, A)"
    # two variables: four blocks, keyed by the ordered pair where it is not a diagonal block
    r = client.post("/api/hessian", json={"expr": "G:(X@W)", "wrt": ["X", "W"], "shapes": {"X": ["n", "d"]}})
    assert r.status_code == 200, r.text
    assert [o["wrt"] for o in r.json()] == [["X", "X"], ["X", "W"], ["W", "X"], ["W", "W"]]


def test_a_gradient_carries_the_cli_notes(client):
    # A*X.T*B*X*C (MATLAB's matrix products, entrywise here): the CLI notes it on stderr; the
    # page showed nothing, as /api/derive sent no notes
    r, cli = _cli_json("tr(A*X.T*B*X*C)", ["X"], {})
    assert r.returncode == 0 and "entrywise (Hadamard) product" in r.stderr
    resp = client.post("/api/derive", json={"expr": "tr(A*X.T*B*X*C)", "wrt": "X"})
    assert resp.json() == cli and "entrywise (Hadamard) product" in cli[0]["notes"][0]
    assert "notes" not in client.post("/api/derive", json={"expr": "tr(A@X.T@B@X@C)", "wrt": "X"}).json()[0]


def test_jacobian_of_a_scalar_carries_the_cli_note(client):
    r, cli = _cli_second("jacobian", "x:x", ["x"], {})
    assert r.returncode == 0 and "1×N row" in r.stderr
    resp = client.post("/api/jacobian", json={"expr": "x:x", "wrt": "x"})
    assert resp.json() == cli
    assert "1×N row" in cli[0]["notes"][0]
    assert cli[0]["matrix_shape"] == [1, "a"]


@pytest.mark.parametrize("kind,expr,wrt,needle", [
    ("hessian", "A@X", "X", "use jacobian"),           # not a scalar: points to the Jacobian
    ("hessian", "x.T@A@x", "y", "'y' does not occur"),
    ("jacobian", "softmax(X@@x)", "x", "^"),           # a parse error, with its caret
    ("jacobian", "x + kron(x, x)", "x", "^"),            # ill-shaped
])
def test_second_order_refusals_are_the_cli_messages_with_the_caret(client, kind, expr, wrt, needle):
    r = subprocess.run([sys.executable, "-m", "matcalc", kind, expr, "--wrt", wrt],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    resp = client.post(f"/api/{kind}", json={"expr": expr, "wrt": wrt})
    assert resp.status_code == 400
    body = resp.json()
    assert needle in body["error"] and "Traceback" not in body["error"]
    assert r.stderr.strip() == "matcalc: " + body["error"].strip()
    if body["column"] is not None:
        line, caret = body["error"].splitlines()[-2:]
        assert line.strip() == expr and caret.index("^") - 1 == body["column"]


@pytest.mark.parametrize("path,body,needle", [
    ("/api/symbols", {"expr": "x:x", "backends": ["torch"]}, "unknown key 'backends'"),
    ("/api/jacobian", {"expr": "A@x", "wrt": "x", "backends": ["cupy"]}, "unknown backend 'cupy'"),
    ("/api/hessian", {"expr": "x:x"}, "wrt is missing"),
    ("/api/derive", {"expr": "x:x", "wrt": "x", "backends": ["tensorflow"]}, "unknown backend 'tensorflow'"),
    ("/api/derive", {"expr": "x:x", "wrt": "x", "backends": {"torch": 1}}, "backends must be"),
    ("/api/derive", {"expr": "x:x", "wrt": "x", "mode": "hessian"}, "unknown key 'mode'"),
    ("/api/symbols", {"expr": "x:x", "mode": "hessain"}, "mode must be one of"),
])
def test_malformed_second_order_and_backend_requests_are_400(client, path, body, needle):
    resp = client.post(path, json=body)
    assert resp.status_code == 400
    assert needle in resp.json()["error"]


def test_symbols_of_an_array_valued_expression_in_jacobian_mode(client):
    r = client.post("/api/symbols", json={"expr": "A@X@B", "mode": "jacobian", "shapes": "X=p,q"})
    assert r.status_code == 200, r.text
    assert [(s["name"], s["shape"]) for s in r.json()["symbols"]] == [("A", ["a", "p"]), ("X", ["p", "q"]),
                                                                        ("B", ["q", "b"])]
    r = client.post("/api/symbols", json={"expr": "A@X@B"})  # the gradient needs a scalar
    assert r.status_code == 400 and "must be a scalar" in r.json()["error"]


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_backends_add_the_cli_backend_source(client, backend):
    expr = "G:exp(X@W)"
    r, cli = _cli_json(expr, ["X", "W"], {}, "--backend", backend)
    assert r.returncode == 0, r.stderr
    resp = client.post("/api/derive", json={"expr": expr, "wrt": ["X", "W"], "backends": [backend]})
    assert resp.status_code == 200, resp.text
    assert resp.json() == cli
    src = cli[0][f"{backend}_source"]
    assert f"import {backend}" in src and "import numpy" not in src and not re.search(r"\bnp\.", src)
    compile(src, "<emitted>", "exec")


def test_both_backends_at_once_without_either_installed():
    # the sources are text: writing them needs neither torch nor jax
    code = ("import sys, json; sys.modules['torch'] = None; sys.modules['jax'] = None\n"
            "from matcalc.web.protocol import answer, derive_params\n"
            "p = derive_params({'expr': 'sum(tanh(W@x))', 'wrt': 'W', 'backends': ['torch', 'jax']})\n"
            "print(json.dumps(answer('derive', p)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (o,) = json.loads(r.stdout)
    assert "torch.tanh" in o["torch_source"] and "jnp.tanh" in o["jax_source"]
    assert "def grad_W" in o["numpy_source"]
    assert not [k for k in o if k.endswith("_error")]


# ---- a real server

@pytest.fixture(scope="module")
def server():
    s = RunningServer("--workers", "2")
    yield s
    s.stop()


def test_load_50_concurrent_clients_no_errors(server):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from web_load import run_load

    stats = run_load(server.url, requests=150, concurrency=50, timeout=60)
    assert stats["errors"] == [], stats["errors"][:3]
    assert stats["ok"] == 150
    assert stats["p50_ms"] <= stats["p95_ms"]


def test_the_server_stops_its_workers():
    import urllib.request

    s = RunningServer("--workers", "2")
    try:
        with urllib.request.urlopen(s.url + "api/info", timeout=30) as r:
            assert json.load(r)["examples"]
        pids = _children(s.process.pid)
        assert len(pids) >= 2
    finally:
        s.stop()
    assert s.process.returncode is not None
    deadline = time.time() + 10
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)]


def test_serve_open_opens_the_page_in_the_browser(tmp_path):
    if os.name != "posix":
        pytest.skip("uses a shell script as the browser")
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"  # webbrowser runs $BROWSER with the URL as its argument
    browser.write_text(f'#!/bin/sh\nprintf %s "$1" > "{opened}"\n')
    browser.chmod(0o755)
    s = RunningServer("--open", env={"BROWSER": str(browser)})
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not (opened.exists() and opened.read_text()):
            time.sleep(0.1)
        assert opened.read_text() == s.url
    finally:
        s.stop()


def _children(pid):
    tasks = f"/proc/{pid}/task"
    if not os.path.exists(f"{tasks}/{pid}/children"):
        pytest.skip("needs /proc/PID/task/TID/children")
    out = []
    for tid in os.listdir(tasks):  # workers are started from the pool's threads
        try:
            out += [int(p) for p in open(f"{tasks}/{tid}/children").read().split()]
        except OSError:
            pass
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# ---- the page in a real browser

CHROMIUM = os.environ.get("MATCALC_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.skip("no chromium (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        except sync_api.Error as e:  # e.g. a chromium without the libraries it needs
            pytest.skip(f"chromium did not start: {str(e).splitlines()[0]}")
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    page = browser.new_page(viewport={"width": 1200, "height": 1000})
    hosts = set()
    page.on("request", lambda r: hosts.add(r.url.split("/")[2]))
    page.hosts = hosts
    yield page
    page.close()
    assert hosts <= {f"127.0.0.1:{server.port}"}, hosts  # no request left the machine


def _shot(page, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


VAE = "alpha*(exp(W@x+c)-W@x-c+m*m-1):1"


def _wait_for_gradient(page, wrt, text, timeout=20000):
    page.wait_for_function(
        "([w, t]) => { const e = document.querySelector(`.card[data-wrt='${w}'] .gradient-text`);"
        " return e && e.textContent === t; }", arg=[wrt, text], timeout=timeout)


def test_browser_vae_example_typeset_with_steps(page, server):
    want = matcalc.derive(VAE, wrt="W")
    page.goto(server.url)
    page.fill("#expr", "")
    page.type("#expr", VAE, delay=15)
    _wait_for_gradient(page, "W", want.text)
    card = page.locator(".card[data-wrt='W']")
    assert card.locator(".result .katex").count() >= 1
    # the whole derivation is typeset: one KaTeX row per step, each with its identity
    steps_math = card.locator(".steps-math .katex-display")
    assert steps_math.count() == 1
    annotation = card.locator(".steps-math annotation").text_content()
    assert annotation.count("&=") == len(want.steps) + 1 + 1 + len(want.definitions)
    plain = card.locator(".steps-text").text_content()
    for st in want.steps:
        assert f"[{st.identity}]" in plain
    assert "(a, b)" in card.locator(".shape").text_content()
    assert "def grad_W" in card.locator(".source").text_content()
    assert page.locator("#wrt .chip").count() == len(want.symbols)
    # the question is in the URL: opening it again gives the same answer
    assert "expr=" in page.url and "wrt=W" in page.url
    _shot(page, "vae.png")
    page.click("#check")
    page.wait_for_selector(".card[data-wrt='W'] .check-result.ok", timeout=20000)
    assert "agrees with central finite differences" in card.locator(".check-result").text_content()
    _shot(page, "vae-checked.png")


def test_browser_refusal_shows_the_caret_and_the_page_stays_usable(page, server):
    bad = "alpha*(exp(W@x+c)-W@x-c+kron(c, c)-1):1"
    with pytest.raises(matcalc.MatcalcError) as err:
        matcalc.derive(bad, wrt=["W"])
    page.goto(server.url)
    page.wait_for_selector(".card .result .katex", timeout=20000)  # the first example
    page.fill("#expr", bad)
    page.wait_for_selector("#error:not([hidden])", timeout=20000)
    shown = page.locator("#error-text").text_content()
    assert shown == str(err.value)
    assert "^" in shown.splitlines()[-1]
    assert page.locator(".card").count() == 0
    _shot(page, "refusal.png")
    page.fill("#expr", "G:exp(X@W)")  # W is still picked
    _wait_for_gradient(page, "W", matcalc.derive("G:exp(X@W)", wrt="W").text)
    assert page.locator("#error").is_hidden()


def test_browser_gradient_shows_the_notes(page, server):
    page.goto(server.url)
    page.wait_for_selector(".card .result .katex", timeout=20000)  # the first example
    page.fill("#expr", "sum(x - mu)")
    _wait_for_gradient(page, "x", matcalc.derive("sum(x - mu)", wrt="x").text)
    note = page.locator(".card[data-wrt='x'] .notes")
    assert note.is_visible() and "adds the number mu to every entry" in note.text_content()


def test_browser_permalink_opens_the_question(page, server):
    q = "?expr=" + quote("G:(X@W)") + "&wrt=X,W&shapes=" + quote("X=n,d; W=d,k")
    page.goto(server.url + q)
    _wait_for_gradient(page, "W", "X.T@G")
    _wait_for_gradient(page, "X", "G@W.T")
    assert page.locator(".card").count() == 2
    assert "(d, k)" in page.locator(".card[data-wrt='W'] .shape").text_content()


def test_browser_examples_menu(page, server):
    page.goto(server.url)
    page.wait_for_selector(".card .result .katex", timeout=20000)
    labels = page.locator("#examples option").all_text_contents()
    i = next(i for i, t in enumerate(labels) if "least squares" in t) - 1
    page.select_option("#examples", str(i))
    want = matcalc.derive("(X@W - Y):(X@W - Y)", wrt="W")
    _wait_for_gradient(page, "W", want.text)
    assert page.input_value("#expr") == "(X@W - Y):(X@W - Y)"


def test_browser_wrt_can_be_typed_when_the_variables_are_not_listed(page, server):
    # as with a syntax whose variables the server cannot list: /api/symbols answers none
    page.route("**/api/symbols", lambda route: route.fulfill(
        status=200, content_type="application/json", body='{"symbols": [], "definitions": []}'))
    page.goto(server.url + "?expr=" + quote("G:(X@W)") + "&wrt=W")
    _wait_for_gradient(page, "W", "X.T@G")
    assert page.input_value("#wrt-text") == "W"
    page.fill("#wrt-text", "X, W")
    _wait_for_gradient(page, "X", "G@W.T")
    assert page.locator(".card").count() == 2


def _wait_for_text(page, selector, text, timeout=20000):
    page.wait_for_function(
        "([s, t]) => { const e = document.querySelector(s); return e && e.textContent === t; }",
        arg=[selector, text], timeout=timeout)


def test_browser_hessian_mode_on_the_quadratic_form(page, server):
    h = matcalc.hessian("x.T@A@x", "x")
    page.goto(server.url)
    page.wait_for_selector(".card .result .katex", timeout=20000)  # the first example
    labels = page.locator("#examples option").all_text_contents()
    page.select_option("#examples", str(labels.index("quadratic form") - 1))
    _wait_for_gradient(page, "x", matcalc.derive("x.T@A@x", wrt="x").text)
    # the gradient's code in three tabs
    tabs = page.locator(".card[data-wrt='x'] .tabs button")
    assert tabs.all_text_contents() == ["NumPy", "PyTorch", "JAX"]
    tabs.nth(1).click()
    assert "import torch" in page.locator(".card[data-wrt='x'] .source").text_content()
    page.check("input[name=mode][value=hessian]")
    card = page.locator(".card[data-mode='hessian'][data-wrt='x']")
    _wait_for_text(page, ".card[data-mode='hessian'][data-wrt='x'] .gradient-text", h.text)
    # H[dx] typeset, and its Kronecker (vec) form A + Aᵀ typeset under it
    assert card.locator(".result annotation").text_content() == f"H[\\mathrm{{d}}x] = {h.latex}"
    vec = card.locator(".vec annotation").text_content()
    assert vec.endswith(f"= {h.kron_latex}") and "A^{\\top}" in vec and "\\operatorname{vec}" in vec
    assert card.locator(".vec .katex").count() == 1
    assert "the dense Hessian is a×a" in card.locator(".shape").text_content()
    steps = card.locator(".steps-text").text_content()
    for st in h.steps:
        assert f"[{st.identity}]" in steps
    assert card.locator(".tabs button").all_text_contents() == ["NumPy", "PyTorch", "JAX"]
    assert "def hvp_x" in card.locator(".source").text_content()
    card.locator(".tabs button").nth(2).click()
    assert "def hvp_x(dx, /, *, x, A):" in card.locator(".source").text_content()
    assert "import jax" in card.locator(".source").text_content()
    assert "mode=hessian" in page.url
    _shot(page, "hessian.png")
    page.click("#check")
    page.wait_for_selector(".card[data-mode='hessian'] .check-result.ok", timeout=20000)
    # the permalink reopens the Hessian
    page.goto(page.url)
    _wait_for_text(page, ".card[data-mode='hessian'][data-wrt='x'] .gradient-text", h.text)
    assert page.is_checked("input[name=mode][value=hessian]")


def test_browser_hessian_of_an_array_points_to_the_jacobian(page, server):
    page.goto(server.url + "?mode=hessian&expr=" + quote("A@X@B") + "&wrt=X")
    page.wait_for_selector("#error:not([hidden])", timeout=20000)
    shown = page.locator("#error-text").text_content()
    with pytest.raises(matcalc.MatcalcError) as err:
        matcalc.hessian("A@X@B", "X")
    assert shown == str(err.value) and "^" in shown.splitlines()[-1]
    _shot(page, "hessian-refused.png")
    page.click("#to-jacobian")
    j = matcalc.jacobian("A@X@B", "X")
    _wait_for_text(page, ".card[data-mode='jacobian'][data-wrt='X'] .gradient-text", j.text)
    card = page.locator(".card[data-mode='jacobian']")
    assert card.locator(".vec annotation").text_content().endswith(f"= {j.kron_latex}")
    assert "mode=jacobian" in page.url
    assert page.locator("#error").is_hidden()
    _shot(page, "jacobian.png")


def test_browser_second_order_examples(page, server):
    page.goto(server.url)
    page.wait_for_selector(".card .result .katex", timeout=20000)
    labels = page.locator("#examples option").all_text_contents()
    page.select_option("#examples", str(labels.index("Jacobian of softmax") - 1))
    j = matcalc.jacobian("softmax(x)", "x")
    _wait_for_text(page, ".card[data-mode='jacobian'][data-wrt='x'] .gradient-text", j.text)
    assert page.is_checked("input[name=mode][value=jacobian]")
    assert page.locator("#lhs-label").text_content() == "F ="
    page.select_option("#examples", str(labels.index("Hessian of logdet X") - 1))
    h = matcalc.hessian("logdet(X)", "X")
    _wait_for_text(page, ".card[data-mode='hessian'][data-wrt='X'] .gradient-text", h.text)
    assert "K_{" in page.locator(".card .vec annotation").text_content()


@pytest.mark.parametrize("kind,expr,wrt", [("hessian", "sum(exp(W@x))", "x"), ("jacobian", "softmax(W@x)", "W")])
def test_second_order_backends_are_the_cli_backend_sources(client, kind, expr, wrt):
    for backend in ("torch", "jax"):
        r, cli = _cli_second(kind, expr, [wrt], {}, "--backend", backend)
        assert r.returncode == 0, r.stderr
        resp = client.post(f"/api/{kind}", json={"expr": expr, "wrt": wrt, "backends": [backend]})
        assert resp.status_code == 200, resp.text
        assert resp.json() == cli
        src = cli[0][f"{backend}_source"]
        assert f"def {'hvp' if kind == 'hessian' else 'jvp'}_{wrt}(d{wrt}, /, *" in src
        compile(src, "<emitted>", "exec")
    both = client.post(f"/api/{kind}", json={"expr": expr, "wrt": wrt, "backends": ["torch", "jax"]}).json()
    assert "import torch" in both[0]["torch_source"] and "import jax" in both[0]["jax_source"]


def test_the_answer_cache_is_bounded_in_bytes_as_well_as_in_count():
    from matcalc.web.server import _Cache

    cache = _Cache(size=256, max_bytes=1000)
    for i in range(10):
        cache.put(("derive", str(i)), (200, b"x" * 300))  # 3 fit in 1000 bytes
    assert cache.bytes <= 1000 and cache.get(("derive", "9")) is not None
    assert cache.get(("derive", "0")) is None and len(cache._data) == 3
    cache.put(("derive", "9"), (200, b"y" * 10))  # replacing an answer counts its new size
    assert cache.bytes == 610
    small = _Cache(size=2)
    for i in range(3):
        small.put(i, (200, b"z"))
    assert small.get(0) is None and small.get(2) == (200, b"z")


def test_hessian_and_jacobian_in_matlab_syntax(client):
    r = client.post("/api/hessian", json={"expr": "x'*A*x", "wrt": "x", "syntax": "matlab"})
    assert r.status_code == 200, r.text
    assert r.json()[0]["hessian"] == "(A.T + A)@dx"
    r = client.post("/api/jacobian", json={"expr": "A*X*B", "wrt": "X", "syntax": "matlab"})
    assert r.status_code == 200, r.text
    assert r.json()[0]["kron"] == "kron(B.T, A)"
