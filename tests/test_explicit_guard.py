"""Requests naming a model still face the blocking decisions (``router.guard_explicit_models``),
on only the signals those decisions read; other decisions never apply to them."""

from __future__ import annotations

import json
from collections.abc import Mapping

from envoy_data_plane.envoy.service.ext_proc.v3 import ProcessingResponse

from classifiers.api import Overloaded, SignalScore
from extproc.config import load_config_text
from extproc.context import RouterState, build_state
from extproc.metrics import RouterMetrics
from tests.processor_support import TWO_MODELS, routed_decision, send_chat

CONFIG = TWO_MODELS + """
router: {guard_explicit_models: GUARD}
signals:
  - {name: forbidden, type: keyword, keywords: [open sesame]}
  - {name: topic, type: domain}
decisions:
  - name: refuse
    priority: 100
    rules: {signal: forbidden}
    plugins: {block: {status: 403, code: refused, message: "not here"}}
  - {name: code, priority: 10, rules: {signal: topic, label: computer science}, model: coder}
"""


class CountingEngine:
    """The domain signal's engine: says "computer science" and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def evaluate(self, text: str, names: frozenset[str] | None = None,
                       timeout_s: float | None = None) -> Mapping[str, SignalScore]:
        self.calls += 1
        return {"topic": SignalScore("topic", "computer science", 0.9, True)}


def _state(guard: bool, engine: CountingEngine) -> RouterState:
    config = load_config_text(CONFIG.replace("GUARD", "true" if guard else "false"))
    return build_state(config, RouterMetrics(), engine=engine)


def _status(response: ProcessingResponse) -> int | None:
    reply = response.immediate_response
    return None if reply is None or reply.status is None else int(reply.status.code)


async def test_a_named_model_is_refused_by_a_blockingrouted_decision() -> None:
    engine = CountingEngine()
    state = _state(True, engine)
    for model in ("general", "m/c"):  # a public name, and a provider id
        response = await send_chat(state, model, "please say open sesame")
        assert _status(response) == 403
        assert json.loads(response.immediate_response.body)["error"]["code"] == "refused"  # type: ignore[union-attr]
    assert engine.calls == 0  # only the blocking decision's keyword signal was read


async def test_a_named_model_that_nothing_blocks_goes_to_that_model() -> None:
    engine = CountingEngine()
    state = _state(True, engine)
    response = await send_chat(state, "general", "write a sorting function")
    assert routed_decision(response) == "explicit"  # the code decision never applies to it
    assert engine.calls == 0
    assert routed_decision(await send_chat(state, "auto", "write a sorting function")) == "code"
    assert engine.calls == 1


async def test_guards_off_send_a_named_model_straight_to_it() -> None:
    state = _state(False, CountingEngine())
    assert state.guard is None
    text = "please say open sesame"
    assert routed_decision(await send_chat(state, "general", text)) == "explicit"
    assert _status(await send_chat(state, "auto", text)) == 403


class OverloadedEngine:
    async def evaluate(self, text: str, names: frozenset[str] | None = None,
                       timeout_s: float | None = None) -> Mapping[str, SignalScore]:
        raise Overloaded("encoder: queue full")


LEARNED_GUARD = """
providers:
  defaults: {model: general}
  models:
    - {name: general, provider_model_id: m/g, backend_refs: [{name: a, endpoint: "h:1"}]}
router: {on_overload: OVERLOAD}
signals:
  - {name: jb, type: jailbreak}
decisions:
  - name: refuse
    rules: {signal: jb}
    plugins: {block: {status: 403, code: jailbreak_detected}}
"""


async def test_an_overloaded_guard_follows_on_overload() -> None:
    """`reject`: a named model gets the 429 an auto request would; `default`: it goes on to its
    model unchecked (the model was named: no routing is lost)."""
    for on_overload, status in (("reject", 429), ("default", None)):
        config = load_config_text(LEARNED_GUARD.replace("OVERLOAD", on_overload))
        state = build_state(config, RouterMetrics(), engine=OverloadedEngine())
        response = await send_chat(state, "general", "hello")
        assert _status(response) == status
        if status is None:
            assert routed_decision(response) == "explicit"
