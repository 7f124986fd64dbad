"""The local web page: a Starlette app over a pool of worker processes.

    GET  /               the page (static/index.html)
    GET  /static/…       its script, styles and the vendored KaTeX
    GET  /api/info       version, syntaxes, limits and the examples menu
    POST /api/derive     {"expr", "wrt", "shapes", "definitions", "syntax", "check"} -> what
                         ``matcalc derive --json`` prints, as a list (one object per wrt)
                         (+ "backends": ["torch", "jax"] adds ``torch_source``/``jax_source``)
    POST /api/hessian    the same keys -> what ``matcalc hessian --json`` prints, as a list
    POST /api/jacobian   the same keys -> what ``matcalc jacobian --json`` prints, as a list
                         (backends: the products hvp/jvp/vjp in torch/jax, as ``--backend``)
    POST /api/symbols    {"expr", "shapes", "definitions", "syntax", "mode"} -> the variables to pick wrt from

A refusal is HTTP 400 ``{"error": message}`` (the CLI's message, caret and all, plus ``kind``
and ``column``); a question over a size limit 413, one stopped by the time or memory limit 422,
a full queue 503. Nothing here calls out of the machine."""
from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
from collections import OrderedDict
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import MatcalcError
from .examples import EXAMPLES
from .pool import LimitExceeded, WorkerFailed, WorkerPool
from .protocol import BACKENDS, LIMITS, MODES, RequestError, derive_params, refusal, syntaxes

STATIC = Path(__file__).resolve().parent / "static"
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]

#: Every asset is served from here; the browser is told to load nothing from anywhere else.
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; font-src 'self'; "
     b"img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; "
     b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class _SecurityHeaders:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        return await self.app(scope, receive, send_with_headers)


def _json(body, status=200) -> Response:
    from ..cli import dumps

    return Response(dumps(body).encode("utf-8"), status,
                    media_type="application/json")


def _error(message: str, status: int, **extra) -> Response:
    return _json({"error": message, **extra}, status)


async def _read_json(request):
    length = request.headers.get("content-length")
    limit = LIMITS["body_bytes"]
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestError(f"the request body is {int(length)} bytes; the limit is {limit}", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(f"the request body is over {limit} bytes, the limit", 413)
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(f"the request body is not JSON ({e})") from None
    except RecursionError:
        raise RequestError("the request body is not JSON matcalc reads (nested too deeply)") from None
    try:  # a lone surrogate (an escape such as \ud800 alone) is no character
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise RequestError(f"the request body holds {e.object[e.start:e.end]!r}, half of a "
                           f"UTF-16 surrogate pair, which is not a character") from None
    return body


def _same_origin(request) -> bool:
    """A browser says where a POST comes from: only this page's own origin may ask."""
    origin = request.headers.get("origin")
    if origin is None:  # not a browser, or a same-origin GET
        return True
    return urlsplit(origin).netloc == request.headers.get("host", "")


class _Cache:
    """Answers (and refusals) to recent questions: a permalink opened twice is derived once,
    and a question asked again while it is being derived waits for that derivation."""

    def __init__(self, size: int, max_bytes: int = 128 << 20):
        self.size = size
        self.max_bytes = max_bytes  # (answers go up to 8 MiB each: a count alone bounds nothing)
        self.bytes = 0
        self._data: OrderedDict = OrderedDict()

    def get(self, key):
        if key in self._data:
            self._data.move_to_end(key)
            return self._data[key]
        return None

    def put(self, key, value):
        """value: (HTTP status, body bytes); the oldest go while over the count or the bytes."""
        if self.size <= 0:
            return
        if key in self._data:
            self.bytes -= len(self._data[key][1])
        self._data[key] = value
        self._data.move_to_end(key)
        self.bytes += len(value[1])
        while self._data and (len(self._data) > self.size or self.bytes > self.max_bytes):
            _, old = self._data.popitem(last=False)
            self.bytes -= len(old[1])


def create_app(workers: int = 2, timeout: float = 10.0, memory_limit: int | None = 2 << 30,
               allowed_hosts=None, cache_size: int = 256, queue_timeout: float = 60.0) -> Starlette:
    """The Starlette app. ``workers`` processes run derivations, each stopped after ``timeout``
    seconds or at ``memory_limit`` bytes; ``allowed_hosts`` (e.g. ``LOOPBACK_HOSTS``) refuses
    requests whose Host header names another machine (DNS rebinding); ``cache_size`` answers
    are kept."""
    pool = WorkerPool(workers, timeout=timeout, memory_limit=memory_limit, queue_timeout=queue_timeout)
    cache = _Cache(cache_size)
    inflight: dict = {}

    @asynccontextmanager
    async def lifespan(app):
        await pool.start()
        try:
            yield
        finally:
            await pool.close()

    async def ask(request, kind: str):
        if not _same_origin(request):
            return _error("requests from another site's page are refused", 403)
        try:
            params = derive_params(await _read_json(request), need_wrt=(kind != "symbols"), kind=kind)
        except RequestError as e:
            return _error(e.message, e.status)
        except MatcalcError as e:  # a malformed shape or definition
            return _json(refusal(e), 400)
        if kind == "symbols":
            params["check"] = False
        key = (kind, json.dumps(params, sort_keys=True))
        hit = cache.get(key)
        if hit is None:
            # the same question asked again while it is being derived waits for that answer
            job = inflight.get(key)
            if job is None:
                job = asyncio.ensure_future(answer(kind, params))
                if cache.size > 0:  # cache_size=0: every request is derived by a worker
                    inflight[key] = job
                    job.add_done_callback(lambda _: inflight.pop(key, None))
            hit = await asyncio.shield(job)
            if hit[0] in (200, 400):
                cache.put(key, hit)
        return Response(hit[1], hit[0], media_type="application/json")

    async def answer(kind, params):
        """(HTTP status, JSON body) for one checked question."""
        try:
            status, payload = await pool.run(kind, params)
        except LimitExceeded as e:
            return e.status, _error(e.message, e.status).body
        except WorkerFailed as e:
            return 500, _error(str(e), 500).body
        return (200 if status == "ok" else 400), _json(payload).body

    async def derive_endpoint(request):
        return await ask(request, "derive")

    async def hessian_endpoint(request):
        return await ask(request, "hessian")

    async def jacobian_endpoint(request):
        return await ask(request, "jacobian")

    async def symbols_endpoint(request):
        return await ask(request, "symbols")

    async def info(request):
        from .. import __version__

        return _json({"version": __version__, "syntaxes": syntaxes(), "limits": dict(LIMITS, timeout_s=timeout),
                      "examples": EXAMPLES, "modes": list(MODES), "backends": list(BACKENDS)})

    async def index(request):
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    routes = [
        Route("/", index),
        Route("/api/info", info),
        Route("/api/derive", derive_endpoint, methods=["POST"]),
        Route("/api/hessian", hessian_endpoint, methods=["POST"]),
        Route("/api/jacobian", jacobian_endpoint, methods=["POST"]),
        Route("/api/symbols", symbols_endpoint, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [Middleware(_SecurityHeaders)]
    if allowed_hosts:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.pool = pool
    return app


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def run_server(host: str = "127.0.0.1", port: int = 8000, open_browser: bool = False,
               workers: int = 2, timeout: float = 10.0, **app_options) -> int:
    """Serve until Ctrl-C. Returns an exit status (2: refused, e.g. the port is taken)."""
    import uvicorn

    if not 1 <= workers <= 64:
        print(f"matcalc: --workers must be between 1 and 64, got {workers}", file=sys.stderr)
        return 2
    if not 0 < timeout <= 3600:
        print(f"matcalc: --timeout must be a number of seconds in (0, 3600], got {timeout:g}", file=sys.stderr)
        return 2
    if not 0 <= port <= 65535:
        print(f"matcalc: --port must be between 0 and 65535, got {port}", file=sys.stderr)
        return 2
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, so asyncio sets TCP_NODELAY on each connection (else 40 ms delayed-ACK stalls)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        import errno

        hint = ("try another --port (0 picks a free one)" if e.errno in (errno.EADDRINUSE, errno.EACCES)
                else "check --host: an address of this machine, like 127.0.0.1 or 0.0.0.0")
        print(f"matcalc: cannot listen on {host}:{port} ({e.strerror or e}); {hint}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    loopback = _is_loopback(host)
    if loopback:
        app_options.setdefault("allowed_hosts", LOOPBACK_HOSTS)
    app = create_app(workers=workers, timeout=timeout, **app_options)
    shown = host if loopback or host not in ("0.0.0.0", "::") else "127.0.0.1"
    url = f"http://{'[' + shown + ']' if ':' in shown else shown}:{port}/"
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)

    def announce():
        import time
        import webbrowser

        while not server.started and not server.should_exit:
            time.sleep(0.05)
        if server.started:
            print(f"matcalc: serving {url}  (Ctrl-C to stop)", flush=True)
            if not loopback:
                print(f"matcalc: bound to {host}: the page is reachable from other machines", flush=True)
            if open_browser:
                webbrowser.open(url)

    threading.Thread(target=announce, daemon=True).start()
    server.run(sockets=[sock])
    return 0
