"""The language signal: py3langid's bundled model, routed on by ISO code."""

from __future__ import annotations

import json
import logging

import pytest
from envoy_data_plane.envoy.service.ext_proc.v3 import ProcessingResponse

from classifiers.language import LanguageDetector
from extproc.config import ConfigError, load_config_text
from extproc.context import build_state
from extproc.envoy_adapter import Phase, RequestMessage
from extproc.metrics import RouterMetrics
from extproc.processor import StreamProcessor

CONFIG = """
providers:
  defaults: {model: general}
  models:
    - {name: general, provider_model_id: m/g, backend_refs: [{name: a, endpoint: "h:1"}]}
    - {name: german, provider_model_id: m/de, backend_refs: [{name: b, endpoint: "h:2"}]}
signals:
  - {name: lang, type: language, languages: [en, de, fr, es], threshold: 0.6}
decisions:
  - {name: german, rules: {signal: lang, label: de}, model: german}
"""
HEADERS = {":method": "POST", ":path": "/v1/chat/completions"}


@pytest.fixture(scope="module")
def detector() -> LanguageDetector:
    return LanguageDetector()


@pytest.mark.parametrize(("text", "language"), [
    ("Wie spät ist es in Berlin und wann fährt der nächste Zug?", "de"),
    ("What time is it in Berlin and when does the next train leave?", "en"),
    ("¿Qué hora es en Madrid y cuándo sale el próximo tren?", "es"),
    ("Quelle heure est-il à Paris et quand part le prochain train ?", "fr"),
    ("東京は今何時ですか", "ja"),
])
def test_detects_common_languages(detector: LanguageDetector, text: str, language: str) -> None:
    guess = detector.detect(text)
    assert guess.language == language
    assert 0.5 < guess.probability <= 1.0


def test_unknown_language_codes_are_refused() -> None:
    with pytest.raises(ValueError, match="xx"):
        LanguageDetector(["en", "xx"])
    with pytest.raises(ConfigError) as info:
        load_config_text(CONFIG.replace("[en, de, fr, es]", "[en, EN]"))
    assert any(e.startswith("signals[0].languages[1]") for e in info.value.errors)


@pytest.mark.parametrize(("text", "cluster"), [
    ("Kannst du mir bitte erklären, wie eine Steuererklärung funktioniert?", "german"),
    ("Can you please explain how a tax return works?", "general"),
])
async def test_routes_by_language(text: str, cluster: str) -> None:
    state = build_state(load_config_text(CONFIG), RouterMetrics(), engine=None)
    processor = StreamProcessor(state, logging.getLogger("test"))
    await processor.handle(RequestMessage(Phase.REQUEST_HEADERS, HEADERS, b"", False))
    body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": text}]})
    raw = await processor.handle(RequestMessage(Phase.REQUEST_BODY, {}, body.encode(), True))
    response = ProcessingResponse.parse(raw)
    assert response.request_body is not None
    mutation = response.request_body.response.header_mutation  # type: ignore[union-attr]
    headers = {h.header.key: h.header.raw_value.decode() for h in mutation.set_headers}
    assert headers["x-semantic-router-cluster"] == cluster
