"""The admin HTTP server's own answers: an unknown path or a wrong method gets the same
OpenAI-style JSON error as the handlers' errors, never aiohttp's plain text."""

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
