"""The PII detector as it was on presidio-analyzer, kept as the reference for parity tests.

`classifiers.pii` now runs its own recognizers (`classifiers.pii_recognizers`);
`ReferenceDetector` is the same `PiiDetector` with the recognizers and candidate loop it had
when it was built on Presidio's predefined recognizers (copied from that version). Needs
presidio-analyzer (a dev dependency); it is imported only when a reference is built.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from classifiers import phones, ssn
from classifiers.pii import (
    _PHONE_CANDIDATE,
    API_KEY_CONTEXT,
    API_KEY_PATTERNS,
    CONTEXT_WINDOW_CHARS,
    DEFAULT_MIN_SCORE,
    EXTRA_CARD_PATTERNS,
    MASTERCARD_2_SERIES,
    PHONE_REGIONS,
    PiiDetector,
    PiiFinding,
    _has_mixed_chars,
)
from classifiers.scan import CHUNK_CHARS


def build_presidio_recognizers(entity_types: Collection[str]) -> list[Any]:
    """Presidio recognizers for the requested entity types (the former `_build_recognizers`)."""
    import tldextract
    from presidio_analyzer import Pattern, PatternRecognizer
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        EmailRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
        UsSsnRecognizer,
    )

    # Empty suffix_list_urls: use the snapshot bundled with tldextract, never the network.
    offline_tld = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    class OfflineEmailRecognizer(EmailRecognizer):
        def validate_result(self, pattern_text: str) -> bool:
            return bool(offline_tld(pattern_text).fqdn)

    def card_recognizer() -> Any:
        extra = [Pattern("mastercard_2_series", MASTERCARD_2_SERIES, 0.3)]
        extra += [Pattern(name, regex, 0.3) for name, regex in EXTRA_CARD_PATTERNS]
        return CreditCardRecognizer(patterns=[*CreditCardRecognizer.PATTERNS, *extra])

    class ApiKeyRecognizer(PatternRecognizer):
        def validate_result(self, pattern_text: str) -> bool | None:
            if pattern_text.lower().startswith("bearer"):
                return _has_mixed_chars(pattern_text)
            return None

    api_keys = ApiKeyRecognizer(
        supported_entity="API_KEY",
        patterns=[Pattern(name, regex, score) for name, regex, score in API_KEY_PATTERNS],
        context=list(API_KEY_CONTEXT),
    )
    available: dict[str, Callable[[], Any]] = {
        "EMAIL_ADDRESS": OfflineEmailRecognizer,
        "PHONE_NUMBER": lambda: PhoneRecognizer(supported_regions=PHONE_REGIONS),
        "CREDIT_CARD": card_recognizer,
        "US_SSN": UsSsnRecognizer,
        "IBAN_CODE": IbanRecognizer,
        "IP_ADDRESS": IpRecognizer,
    }
    recognizers = [available[name]() for name in entity_types if name in available]
    if "API_KEY" in entity_types:
        recognizers.append(api_keys)
    return recognizers


def presidio_spans(recognizer: Any, text: str) -> list[tuple[int, int, float]]:
    """A Presidio recognizer's raw results on `text`, as sorted (start, end, score)."""
    entities = list(recognizer.supported_entities)
    found = recognizer.analyze(text, entities=entities, nlp_artifacts=None)
    return sorted((r.start, r.end, float(r.score)) for r in found)


class ReferenceDetector(PiiDetector):
    """`PiiDetector` on Presidio's recognizers, with the candidate loop of that version."""

    def __init__(
        self,
        entity_types: Collection[str] | None = None,
        min_score: float = DEFAULT_MIN_SCORE,
        chunk_chars: int = CHUNK_CHARS,
    ) -> None:
        super().__init__(entity_types, min_score, chunk_chars)
        self.presidio_recognizers = build_presidio_recognizers(self.entity_types)

    def _candidates(self, text: str) -> list[PiiFinding]:
        lowered = text.lower()
        gate = "PHONE_NUMBER" in self.entity_types and bool(_PHONE_CANDIDATE.search(text))
        candidates: list[PiiFinding] = []
        for recognizer in self.presidio_recognizers:
            entities = [e for e in recognizer.supported_entities if e in self.entity_types]
            if entities == ["PHONE_NUMBER"] and not gate:
                continue
            for result in recognizer.analyze(text, entities=entities, nlp_artifacts=None):
                if result.entity_type == "PHONE_NUMBER":
                    keep, context = phones.judge(lowered, result.start, result.end)
                    if not keep:
                        continue
                else:
                    window = lowered[max(0, result.start - CONTEXT_WINDOW_CHARS) : result.start]
                    words = getattr(recognizer, "context", None) or ()
                    context = any(word in window for word in words)
                score = float(result.score)
                candidates.append(
                    self._finding(result.entity_type, result.start, result.end, score, context)
                )
        if "US_SSN" in self.entity_types:
            for start, end in ssn.disclosed_placeholders(text):
                candidates.append(self._finding("US_SSN", start, end, ssn.SCORE, False))
        if gate:
            for start, end, score, context in phones.find_phones(text, lowered):
                candidates.append(self._finding("PHONE_NUMBER", start, end, score, context))
        return [c for c in candidates if c.score >= self.min_score]
