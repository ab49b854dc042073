"""`semantic-router serve` as a child process, for the tests that signal or kill it: its
output (JSON log lines, the CLI's one-line errors) is read by a thread so the pipe never
fills; :meth:`ServeProcess.close` kills what is left (the router, and its Envoy by pid)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from extproc.localnet import free_port

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
listener: {{address: "127.0.0.1:{listener}", admin: "127.0.0.1:{envoy_admin}"}}
router:
  grpc: "127.0.0.1:{grpc}"
  admin: "127.0.0.1:{admin}"
  shutdown_grace_s: {grace}
providers:
  defaults: {{model: general}}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{{name: sim-1, endpoint: "127.0.0.1:{backend}"}}]
"""


def serve_ports() -> dict[str, int]:
    return {k: free_port() for k in ("listener", "envoy_admin", "grpc", "admin", "backend")}


def write_config(path: Path, ports: dict[str, int], grace: float = 10) -> Path:
    path.write_text(CONFIG.format(grace=grace, **ports))
    return path


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class ServeProcess:
    def __init__(self, config: Path, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "extproc.cli", "serve", "--config", str(config), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1"})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.envoy_pid: int | None = None
        self.envoy_dir: Path | None = None  # Envoy's private work dir

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def logs(self) -> list[dict[str, Any]]:
        found = []
        for line in list(self.lines):
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
        return found

    def output(self) -> str:
        return "\n".join(self.lines)

    async def wait_log(self, msg: str, timeout_s: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.logs():
                if line.get("msg") == msg:
                    return line
            if self.process.poll() is not None:
                break
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {msg!r} log line; output:\n{self.output()[-4000:]}")

    async def wait_envoy_ready(self) -> int:
        ready = await self.wait_log("envoy ready")
        self.envoy_dir = Path(ready["log"]).parent
        self.envoy_pid = int(ready["pid"])
        return self.envoy_pid

    def signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    async def wait_exit(self, timeout_s: float) -> int:
        code = await asyncio.to_thread(self.process.wait, timeout_s)
        await asyncio.to_thread(self._reader.join, 5)
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.envoy_pid is not None and alive(self.envoy_pid):
            os.kill(self.envoy_pid, signal.SIGKILL)
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        if self.envoy_dir is not None:  # left behind only by a router that was killed
            shutil.rmtree(self.envoy_dir, ignore_errors=True)
