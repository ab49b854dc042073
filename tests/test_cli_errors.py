"""What an operator sees when the CLI cannot do its job: a port taken at start-up is one
``error:`` line and exit 1 (no traceback, no grpc noise at interpreter exit); a reader that
closes the pipe early (``semantic-router status | head``) ends the command quietly."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extproc import server as server_module
from extproc.admin import AdminServer
from extproc.config import load_config_text
from extproc.server import Router, StartupError
from tests.dataplane.serve_support import CONFIG, serve_ports, write_config

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "extproc.cli", *args], cwd=ROOT, text=True,
                          stdout=stdout, stderr=subprocess.PIPE, timeout=60, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.fixture
def holder() -> Iterator[socket.socket]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


@pytest.mark.parametrize(("taken", "what"), [("grpc", "the gRPC server (router.grpc)"),
                                            ("admin", "the admin API (router.admin)")])
def test_a_taken_router_port_fails_in_one_line(tmp_path: Path, holder: socket.socket,
                                                taken: str, what: str) -> None:
    ports = {**serve_ports(), taken: holder.getsockname()[1]}
    config = write_config(tmp_path / "router.yaml", ports)
    result = _cli("serve", "--config", str(config), "--log-format", "text")
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: cannot bind {what} to 127.0.0.1:{ports[taken]}: address already in use"]


async def test_a_port_taken_after_the_check_still_fails_cleanly(
        monkeypatch: pytest.MonkeyPatch, holder: socket.socket) -> None:
    # another process binds the gRPC port between the start-up check and grpc's own bind:
    # a StartupError, and the half-made grpc server is collected while the loop runs (the
    # warnings-as-errors setting turns its "Exception ignored" into a failure)
    busy = f"127.0.0.1:{holder.getsockname()[1]}"
    config = load_config_text(CONFIG.format(grace=10, **{**serve_ports(), "grpc": 1, "admin": 2}))
    checked: list[str] = []

    def bind_problem(address: str) -> str | None:  # passes the two start-up checks only
        checked.append(address)
        return None if len(checked) <= 2 else "address already in use"

    monkeypatch.setattr(server_module, "_bind_problem", bind_problem)
    router = Router(config, grpc_address=busy, admin_address="127.0.0.1:0",
                    logger=logging.getLogger("test.router"))
    try:
        with pytest.raises(StartupError) as info:
            await router.start()
    finally:
        await router.stop(0)
    assert str(info.value) == (f"cannot bind the gRPC server (router.grpc) to {busy}: "
                               "address already in use")


def _report() -> tuple[bool, dict[str, Any]]:
    endpoints = [{"name": f"e{i}", "source": "config", "url": "http://127.0.0.1:1/v1/models",
                  "ready": True, "reason": "lists m"} for i in range(200)]
    return True, {"status": "ready", "default_model": "m",
                  "models": {"m": {"ready": True, "endpoints": endpoints}}}


async def test_status_into_a_closed_pipe_ends_quietly() -> None:
    admin = AdminServer("127.0.0.1:0", _report, lambda: b"")
    await admin.start()
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte: `status | head -0`
    try:
        result = await _run_status(admin.port, write)
    finally:
        os.close(write)
        await admin.stop()
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
    assert result.returncode == 141  # 128 + SIGPIPE, as a shell reports `yes | head`


async def _run_status(port: int, stdout: int) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        _cli, "status", "--admin", f"http://127.0.0.1:{port}",
        "--envoy-admin", "http://127.0.0.1:1", stdout=stdout)
