"""Worker processes that run derivations, so a slow or hostile question can be stopped.

Each worker is a process (not a thread: a thread cannot be stopped), ``python -m
matcalc.web.worker``, that answers one question at a time: a JSON line in on its stdin, a JSON
line out on its stdout. A question that runs past the time limit has its worker killed and
replaced; one that needs more memory than the limit gets a MemoryError inside its worker,
which then retires. The server keeps answering others on the remaining workers meanwhile.
No web framework here: :class:`WorkerPool` is plain asyncio."""
from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from .protocol import LIMITS

#: Single-threaded BLAS in the workers: each question is small, and the workers run in parallel.
_THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class LimitExceeded(Exception):
    """A question stopped by a limit (time, memory, queue): the server answers with ``status``."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.message = message
        self.status = status


class WorkerFailed(Exception):
    """A worker died or matcalc raised an unexpected error (a bug): HTTP 500."""


_EOF = object()


class _Worker:
    def __init__(self, memory_limit, start_timeout: float = 120.0):
        env = dict(os.environ, **_THREAD_ENV)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "matcalc.web.worker", str(int(memory_limit or 0))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, encoding="utf-8",
            bufsize=1)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="matcalc-worker-reader").start()
        try:
            ready = self._lines.get(timeout=start_timeout)
        except queue.Empty:
            ready = _EOF
        if ready is _EOF:
            self.kill()
            raise WorkerFailed("a worker process did not start")

    def _read(self):
        try:
            for line in self.process.stdout:
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        self._lines.put(_EOF)

    def call(self, task, timeout):
        """Blocking: send a question, wait at most ``timeout`` seconds for the answer.
        Raises TimeoutError, or EOFError if the worker died."""
        self.process.stdin.write(json.dumps(task, ensure_ascii=False) + "\n")
        self.process.stdin.flush()
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None
        if line is _EOF:
            raise EOFError
        status, payload = json.loads(line)
        return status, payload

    def kill(self):
        try:
            self.process.kill()
        except OSError:
            pass
        self.process.wait(10)
        for f in (self.process.stdin, self.process.stdout):
            try:
                f.close()
            except OSError:
                pass

    def stop(self):
        try:
            self.process.stdin.close()
            self.process.wait(3)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class WorkerPool:
    """``size`` worker processes; :meth:`run` sends one question to a free one.

    ``timeout``: seconds a question may run before its worker is killed (HTTP 422);
    ``memory_limit``: bytes of address space per worker (None: no limit);
    ``queue_timeout``: seconds a question may wait for a free worker (HTTP 503)."""

    def __init__(self, size: int = 2, timeout: float = 10.0, memory_limit: int | None = 2 << 30,
                 queue_timeout: float = 60.0):
        self.size = max(1, int(size))
        self.timeout = float(timeout)
        self.memory_limit = memory_limit
        self.queue_timeout = float(queue_timeout)
        self._idle: asyncio.Queue | None = None
        self._threads = ThreadPoolExecutor(self.size + 2, thread_name_prefix="matcalc-pool")
        self._jobs: set = set()
        self.restarts = 0

    def _new(self) -> _Worker:
        return _Worker(self.memory_limit)

    async def start(self):
        loop = asyncio.get_running_loop()
        self._idle = asyncio.Queue()
        workers = await asyncio.gather(*[loop.run_in_executor(self._threads, self._new)
                                         for _ in range(self.size)])
        for w in workers:
            self._idle.put_nowait(w)

    async def run(self, kind: str, params: dict):
        """The worker's answer ``(status, payload)``: ``("ok", result)`` or ``("refused", body)``.
        Raises LimitExceeded (time, memory, nesting, queue) or WorkerFailed."""
        if self._idle is None:
            raise WorkerFailed("the worker pool is not running")
        # the job owns its worker from start to end, even if the client goes away meanwhile
        job = asyncio.ensure_future(self._job(kind, params))
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        return await asyncio.shield(job)

    async def _job(self, kind, params):
        loop = asyncio.get_running_loop()
        try:
            worker = await asyncio.wait_for(self._idle.get(), self.queue_timeout)
        except asyncio.TimeoutError:
            raise LimitExceeded(f"the server is busy: no worker was free for {self.queue_timeout:g} s; "
                                "try again", 503) from None
        error = None
        try:
            status, payload = await loop.run_in_executor(self._threads, worker.call, (kind, params),
                                                         self.timeout)
        except TimeoutError:
            status, error = "killed", LimitExceeded(
                f"the derivation took longer than {self.timeout:g} s and was stopped; "
                "try a shorter expression or fewer definitions")
        except (EOFError, OSError):
            status, error = "killed", WorkerFailed("the worker process running this question died")
        except BaseException:  # cancelled (the server is closing): the worker goes with it
            await loop.run_in_executor(self._threads, worker.kill)
            raise
        if status in ("killed", "memory"):  # a new worker takes the place of this one
            worker = await self._replace(worker)
            if worker is not None:
                self._idle.put_nowait(worker)
        else:
            self._idle.put_nowait(worker)
        if error is not None:
            raise error
        if status == "memory":
            limit = f"{self.memory_limit / 2**30:g} GiB" if self.memory_limit else "the memory available"
            raise LimitExceeded(f"the derivation needed more than {limit} of memory and was stopped; "
                                "try a shorter expression, fewer definitions or smaller declared sizes")
        if status == "large":
            raise LimitExceeded(f"the answer is {payload / 2**20:.1f} MiB of JSON, over this server's limit "
                                f"of {LIMITS['answer_bytes'] / 2**20:g} MiB; try a shorter expression or "
                                "fewer definitions")
        if status == "deep":
            raise LimitExceeded("the expression is nested too deeply for matcalc to process")
        if status == "internal":
            raise WorkerFailed(f"internal error ({payload}); please report it")
        return status, payload

    async def _replace(self, worker):
        """Kill ``worker`` and start another (None if that fails: the pool has one worker fewer)."""
        loop = asyncio.get_running_loop()
        self.restarts += 1
        await loop.run_in_executor(self._threads, worker.kill)
        try:
            return await loop.run_in_executor(self._threads, self._new)
        except Exception:
            return None

    async def close(self):
        if self._idle is None:
            return
        for job in list(self._jobs):
            job.cancel()
        loop = asyncio.get_running_loop()
        workers = []
        while not self._idle.empty():
            workers.append(self._idle.get_nowait())
        await asyncio.gather(*[loop.run_in_executor(self._threads, w.stop) for w in workers])
        self._idle = None
        self._threads.shutdown(wait=False)
