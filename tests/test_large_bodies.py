"""Bodies of several MiB are read one at a time; the next waits, then gets 429."""

from __future__ import annotations

import asyncio

import pytest

from extproc import context
from extproc.config import load_config_text
from extproc.context import LARGE_BODY_BYTES, build_state, large_body_slot
from extproc.errors import TooManyRequests
from extproc.metrics import RouterMetrics

CONFIG = """
providers:
  defaults: {model: general}
  models:
    - {name: general, provider_model_id: m/g, backend_refs: [{name: a, endpoint: "h:1"}]}
"""


async def test_a_second_large_body_waits_then_gets_429(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context, "LARGE_BODY_WAIT_S", 0.2)
    state = build_state(load_config_text(CONFIG), RouterMetrics(), None)
    big = LARGE_BODY_BYTES + 1
    async with large_body_slot(state, big):
        async with large_body_slot(state, 100):  # small bodies never wait
            pass
        with pytest.raises(TooManyRequests) as caught:
            async with large_body_slot(state, big):
                pass
        assert caught.value.status == 429 and "retry-after" in caught.value.headers
    async with large_body_slot(state, big):  # released: the next one gets the slot
        pass


async def test_a_waiting_large_body_gets_the_slot_once_it_is_free() -> None:
    state = build_state(load_config_text(CONFIG), RouterMetrics(), None)
    order: list[str] = []

    async def hold(name: str, seconds: float) -> None:
        async with large_body_slot(state, LARGE_BODY_BYTES + 1):
            order.append(f"{name} in")
            await asyncio.sleep(seconds)
            order.append(f"{name} out")

    await asyncio.gather(hold("first", 0.1), hold("second", 0))
    assert order == ["first in", "first out", "second in", "second out"]
