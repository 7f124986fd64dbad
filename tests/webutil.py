"""A real ``matcalc serve`` on a free loopback port, for the browser and load tests."""
import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("MATCALC_ARTIFACTS", ROOT / "artifacts")) / "web"


class RunningServer:
    """``python -m matcalc serve --port 0`` started, and its URL read from what it prints."""

    def __init__(self, *args, start_timeout=90.0, env=None):
        self.process = subprocess.Popen([sys.executable, "-m", "matcalc", "serve", "--port", "0", *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                        env=None if env is None else dict(os.environ, **env))
        lines = queue.Queue()
        self.output = []

        def read():
            for line in self.process.stdout:
                self.output.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        while True:
            try:
                line = lines.get(timeout=start_timeout)
            except queue.Empty:
                self.stop()
                raise RuntimeError("matcalc serve did not start: " + "".join(self.output))
            if line is None:
                raise RuntimeError("matcalc serve exited: " + "".join(self.output))
            m = re.search(r"serving (http://127\.0\.0\.1:(\d+)/)", line)
            if m:
                self.url, self.port = m.group(1), int(m.group(2))
                return

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()  # uvicorn shuts down and stops its workers
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
