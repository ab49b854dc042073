"""The admin HTTP server's own answers: an unknown path or a wrong method gets the same
OpenAI-style JSON error as the handlers' errors, never aiohttp's plain text; ``/livez`` and
``/readyz`` answer from their own sources, not from ``/health``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from extproc.admin import AdminServer


def _health() -> tuple[bool, dict[str, Any]]:
    return True, {"status": "ready"}


@pytest.fixture
async def admin() -> AsyncIterator[str]:
    server = AdminServer("127.0.0.1:0", _health, lambda: b"")
    await server.start()
    yield f"http://127.0.0.1:{server.port}"
    await server.stop()


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/nope", 404, "not_found"),
    ("GET", "/v1/workers", 404, "not_found"),  # no worker registry: no worker routes
    ("POST", "/health", 405, "method_not_allowed"),
    ("DELETE", "/metrics", 405, "method_not_allowed"),
])
async def test_unknown_paths_and_methods_are_json_errors(
    admin: str, method: str, path: str, status: int, code: str
) -> None:
    async with httpx.AsyncClient(base_url=admin) as client:
        response = await client.request(method, path)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}
    if status == 405:
        assert "GET" in response.headers["allow"]


async def test_health_still_answers(admin: str) -> None:
    async with httpx.AsyncClient(base_url=admin) as client:
        response = await client.get("/health")
    assert response.status_code == 200 and response.json() == {"status": "ready"}


async def test_livez_and_readyz_follow_readiness_not_health() -> None:
    state = {"readiness": (False, "starting")}

    def unhealthy() -> tuple[bool, dict[str, Any]]:
        return False, {"status": "not_ready"}  # e.g. the default model has no endpoint

    server = AdminServer("127.0.0.1:0", unhealthy, lambda: b"",
                         readiness=lambda: state["readiness"])
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            seen = []
            for readiness in ((False, "starting"), (True, "ready"), (False, "draining")):
                state["readiness"] = readiness
                ready, live, health = [await client.get(p)
                                       for p in ("/readyz", "/livez", "/health")]
                seen.append((ready.status_code, ready.json()["status"], live.status_code,
                             live.json()["status"], health.status_code))
    finally:
        await server.stop()
    assert seen == [(503, "starting", 200, "alive", 503), (200, "ready", 200, "alive", 503),
                    (503, "draining", 200, "alive", 503)]
