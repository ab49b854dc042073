"""PII detection: recall on generated PII, no findings on prompts that only discuss formats."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import pytest

pytest.importorskip("presidio_analyzer")

from classifiers.pii import ENTITY_TYPES, PiiDetector, PiiFinding

TEMPLATES = (
    "Please update my record: {v}.",
    "Hi, you can reach me via {v} tomorrow",
    "{v}",
    "Customer note (ticket 3): the value on file is {v}, confirm it please.",
)
# Minimum recall per type on generated values. Phone is lower because Faker invents numbers with
# unassigned area codes that libphonenumber rightly rejects.
MIN_RECALL = {
    "EMAIL_ADDRESS": 0.95,
    "PHONE_NUMBER": 0.6,
    "CREDIT_CARD": 0.95,
    "US_SSN": 0.95,
    "IBAN_CODE": 0.95,
    "IP_ADDRESS": 0.95,
    "API_KEY": 0.95,
}
FORMAT_TALK = (
    "How does the Luhn check work?",
    "What is the format of a US social security number?",
    "Explain the structure of an IBAN and how its check digits are computed.",
    "What does a valid email address look like according to RFC 5322?",
    "How do I send a bearer token in an HTTP Authorization header?",
    "What's the difference between IPv4 and IPv6 addresses?",
    "How many digits does a credit card number have, and what is the BIN?",
    "Write a regex that validates phone numbers in E.164 format.",
    "Where should I store my OpenAI API key so it is not committed to git?",
    "Is it safe to paste my SSN into a chatbot?",
    "Solve 12345 + 67890 and explain the carrying.",
    "The reaction yields 0.994553 mol at 298.15 K and 101.325 kPa.",
    "Python 3.11.7 was released in December 2023.",
    "Use the placeholder sk-... for the key in your .env example.",
)


def _generators(seed: int) -> dict[str, Callable[[], str]]:
    """Faker-backed value generators when Faker is installed, else synthetic valid values."""
    try:
        from faker import Faker
    except ImportError:
        return _synthetic(seed)
    fake = Faker("en_US")
    Faker.seed(seed)
    return {
        "EMAIL_ADDRESS": fake.email,
        "PHONE_NUMBER": fake.phone_number,
        # The networks most prompts carry; Faker's Maestro/JCB-15/19-digit Visa fall outside
        # Presidio's card pattern (a known limitation, stated in classifiers/pii.py).
        "CREDIT_CARD": lambda: fake.credit_card_number(
            card_type=fake.random_element(["visa16", "mastercard", "amex", "discover"])
        ),
        "US_SSN": fake.ssn,
        "IBAN_CODE": fake.iban,
        "IP_ADDRESS": lambda: fake.ipv4_public() if fake.boolean() else fake.ipv6(),
        "API_KEY": lambda: fake.random_element(
            [
                "sk-proj-" + fake.pystr(min_chars=40, max_chars=48),
                "ghp_" + fake.pystr(min_chars=36, max_chars=36),
                "hf_" + fake.pystr(min_chars=34, max_chars=34),
                "AKIA" + fake.pystr(min_chars=16, max_chars=16).upper(),
                "Bearer " + fake.sha256()[:40],
            ]
        ),
    }


def _luhn_complete(prefix: str) -> str:
    total = 0
    for i, digit in enumerate(reversed(prefix + "0")):
        n = int(digit) * (2 if i % 2 else 1)
        total += n - 9 if n > 9 else n
    return prefix + str((10 - total % 10) % 10)


def _synthetic(seed: int) -> dict[str, Callable[[], str]]:
    rng = random.Random(seed)

    def digits(n: int) -> str:
        return "".join(rng.choice("0123456789") for _ in range(n))

    return {
        "EMAIL_ADDRESS": lambda: f"user{digits(3)}@example.org",
        "PHONE_NUMBER": lambda: f"(415) 555-{rng.randint(2000, 9999)}",
        "CREDIT_CARD": lambda: _luhn_complete("4" + digits(14)),
        "US_SSN": lambda: (
            f"{rng.randint(100, 665)}-{rng.randint(10, 99)}-{rng.randint(1000, 9999)}"
        ),
        "IBAN_CODE": lambda: rng.choice(["DE89370400440532013000", "GB82WEST12345698765432"]),
        "IP_ADDRESS": lambda: f"203.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
        "API_KEY": lambda: "ghp_" + "".join(rng.choice("abcdefXYZ0123456789") for _ in range(36)),
    }


@pytest.fixture(scope="module")
def detector() -> PiiDetector:
    return PiiDetector()


def _covers(finding: PiiFinding, start: int, end: int) -> bool:
    # A span may drop a trailing separator or extension; it must cover most of the value.
    overlap = min(finding.end, end) - max(finding.start, start)
    return overlap >= 0.8 * (end - start)


@pytest.mark.parametrize("entity_type", ENTITY_TYPES)
def test_recall_on_generated_values(detector: PiiDetector, entity_type: str) -> None:
    generate = _generators(seed=42)[entity_type]
    hits, n = 0, 60
    for i in range(n):
        value = generate()
        text = TEMPLATES[i % len(TEMPLATES)].format(v=value)
        start = text.index(value)
        found = detector.detect(text)
        hits += any(
            f.entity_type == entity_type and _covers(f, start, start + len(value)) for f in found
        )
    assert hits / n >= MIN_RECALL[entity_type], f"{entity_type} recall {hits / n:.2f}"


@pytest.mark.parametrize("prompt", FORMAT_TALK)
def test_no_findings_on_prompts_about_formats(detector: PiiDetector, prompt: str) -> None:
    assert detector.detect(prompt) == ()


def test_findings_are_ordered_non_overlapping_and_typed(detector: PiiDetector) -> None:
    text = (
        "Mail jane.roe@example.com, card 4111 1111 1111 1111, SSN 536-22-1234, "
        "IBAN DE89 3704 0044 0532 0130 00, from 198.51.100.7 with "
        "Authorization: Bearer abc123DEF456ghi789JKL"
    )
    found = detector.detect(text)
    assert [f.entity_type for f in found] == [
        "EMAIL_ADDRESS", "CREDIT_CARD", "US_SSN", "IBAN_CODE", "IP_ADDRESS", "API_KEY",
    ]  # fmt: skip
    assert all(a.end <= b.start for a, b in itertools.pairwise(found))
    assert all(0.0 < f.score <= 1.0 for f in found)
    assert text[found[2].start : found[2].end] == "536-22-1234"


def test_entity_type_selection(detector: PiiDetector) -> None:
    only_email = PiiDetector(["EMAIL_ADDRESS"])
    text = "write to a.b@example.com or call +1 415 555 2671"
    assert [f.entity_type for f in only_email.detect(text)] == ["EMAIL_ADDRESS"]
    assert {f.entity_type for f in detector.detect(text)} == {"EMAIL_ADDRESS", "PHONE_NUMBER"}
    with pytest.raises(ValueError, match="unknown PII entity types"):
        PiiDetector(["PASSPORT"])
