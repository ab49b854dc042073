"""``semantic-router status`` against a real Envoy: per-model counts, error rate and upstream
latency, and per-decision shares, read from Envoy's admin stats."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from extproc.cli import main
from tests.dataplane.conftest import Stack

pytestmark = pytest.mark.dataplane

MIX = [("python function", 3), ("hello", 2)]  # 3 to the code decision, 2 to default


async def _send_streams(stack: Stack) -> None:
    # streamed (about 300 ms each), so upstream latency is well above Envoy's 1 ms resolution
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        for prompt, count in MIX:
            for _ in range(count):
                body = {"model": "auto", "stream": True,
                        "messages": [{"role": "user", "content": prompt}]}
                async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                    assert reply.status_code == 200
                    await reply.aread()


async def _status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = await asyncio.to_thread(main, ["status", *args])
    return code, capsys.readouterr().out


async def test_status_shows_envoy_traffic(stack: Stack,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert stack.router is not None
    admin = ["--admin", f"http://127.0.0.1:{stack.router.admin_port}",
             "--envoy-admin", stack.admin_url]
    await _send_streams(stack)
    envoy: dict[str, Any] = {}
    for _ in range(40):  # latency quantiles appear at Envoy's next stats flush (5 s)
        code, out = await _status(capsys, *admin, "--json")
        assert code == 0
        envoy = json.loads(out)["envoy"]
        if envoy["models"]["code"]["p99_ms"] is not None \
                and envoy["models"]["general"]["p99_ms"] is not None:
            break
        await asyncio.sleep(0.25)
    assert envoy["available"] is True
    models, decisions = envoy["models"], envoy["decisions"]
    assert (models["code"]["requests"], models["general"]["requests"]) == (3, 2)
    assert models["reasoning"]["requests"] == 0 and models["reasoning"]["error_rate"] is None
    for name in ("code", "general"):
        assert models[name]["error_rate"] == 0
        assert 0 < models[name]["p50_ms"] <= models[name]["p99_ms"]
    assert decisions["code"] == {"requests": 3, "share": 0.6}
    assert decisions["default"] == {"requests": 2, "share": 0.4}
    assert decisions["math"] == {"requests": 0, "share": 0.0}

    code, table = await _status(capsys, *admin)
    assert code == 0
    rows = [line.split() for line in table.splitlines()]
    traffic = next(r for r in rows if r[:1] == ["code"] and len(r) == 8)  # model code
    assert traffic[:6] == ["code", "yes", "3", "0", "0", "0.0%"]
    assert float(traffic[6]) > 0 and float(traffic[7]) > 0
    assert ["code", "3", "60.0%"] in rows and ["default", "2", "40.0%"] in rows  # decisions

    # Envoy's admin unreachable: the router part, one clear line, exit code still readiness
    gone = ["--admin", admin[1], "--envoy-admin", "http://127.0.0.1:1"]
    code, table = await _status(capsys, *gone)
    assert code == 0
    assert "router: ready" in table
    assert "Envoy stats unavailable: cannot read http://127.0.0.1:1/stats" in table
    code, out = await _status(capsys, *gone, "--json")
    assert code == 0 and json.loads(out)["envoy"]["available"] is False
