"""PII detection: recall on generated PII, no findings on prompts that only discuss formats."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable

import pytest

from classifiers.pii import ENTITY_TYPES, PiiDetector, PiiFinding

TEMPLATES = (
    "Please update my record: {v}.",
    "Hi, you can reach me via {v} tomorrow",
    "{v}",
    "Customer note (ticket 3): the value on file is {v}, confirm it please.",
)
# Minimum recall per type on generated values. Phone is lower: a bare digit run ("9568413953")
# with no phone word near it is not reported (classifiers/phones.py).
MIN_RECALL = {
    "EMAIL_ADDRESS": 0.95,
    "PHONE_NUMBER": 0.9,
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


# Phone numbers written the way people dial them, in the detector's six regions; found with no
# phone word nearby, whether or not libphonenumber thinks the number is assigned.
DIALLED_PHONES = (
    "(415) 555-2671",
    "(312)555-0143x2145",
    "646.555.0187",
    "253-555-0199 Ext. 42",
    "1-800-555-0199",
    "+1-415-555-2671x123",
    "001-415-555-2671",
    "+911894002373",
    "+91 98123 45678",
    "+44(0)113 496 0123",
    "0113 496 0123",
    "(0113) 4960123",
    "0044 20 7946 0123",
    "+49 (0) 4321 987654",
    "(04321) 98765",
    "04321 987654",
    "+33 (0)1 23 45 67 89",
    "01 42 68 53 07",
    "+55 11 2345-6789",
    "(21) 98765-4321",
    "07911123456",  # bare, but after the trunk prefix 0 of a national number
    "0612345678",
)
# Other bare digit runs: phone numbers only with a phone word before or after them.
BARE_PHONE_SENTENCES = (
    "text me at 4367094869 when you land",
    "my mobile: 07911123456",
    "the plumber's WhatsApp is 9812345670",
    "4367094869 is my cell, save it",
    "can you ring 0219258929 for me?",
    "meine Telefonnummer ist 03012345678",
    "meu celular é 11987654321",
    "my number is 98123 45678",
)
PHONE_NEGATIVES = (
    "call me in 2024 or 2025, not 1999",
    "the phone costs $1,299.99 and the case 29.99 euros",
    "a population of 7 800 000 000 people, call it 8 billion",
    "ISBN 0-13-110163-3 and 978-0-13-110362-7",
    "isbn 0131103628 - can you call the library about it?",
    "Avogadro's number is 6.02214076e+23 and c = 299792458 m/s",
    "what does the phone format (XXX) XXX-XXXX or XXX-XXX-XXXX mean?",
    "the API call returned 1701348307, convert that timestamp",
    "log line 2023-11-30 12:45:07 after the call",
    "call back on 30/11/2023 10:30 or 01.12.2023",
    "upgrade python 3.11.7 to 3.12.1 and numpy 1.26.4, then call the tests",
    "ping 192.168.100.200 and 10.0.0.1",
    "call the sum of 2 3 4 5 6 7 8 9 10 S",
    "the matrix rows are 12 34 56 78 90 and 98 76 54 32 10",
    "my account number is 12345678901, should I call the bank?",
    "mobile data used: 10737418240 bytes",
    "text field placeholder 0123456789",
    "call it with the bit string 0110100110",
    "Is 2147483647 a prime number? 2^33 = 8589934592",
    "order 4367094869 never arrived",
    "Is 4367094869 in the list?",  # a bare run with no phone word: not reported
    "the book 0131103628 is on my desk",  # an ISBN-10 check digit, no phone word
    "Kontonummer 0532013000, bitte",
    "the cell culture reached 2500000000 cells",
    "Llama 3.1 8B has 8030261248 parameters, call it 8B",
    "why are 555-0100 through 555-0199 reserved for fiction?",
)


def _phones(detector: PiiDetector, text: str) -> list[str]:
    return [text[f.start : f.end] for f in detector.detect(text) if f.entity_type == "PHONE_NUMBER"]


@pytest.mark.parametrize("number", DIALLED_PHONES)
def test_dialled_phone_formats_without_context(detector: PiiDetector, number: str) -> None:
    text = f"who does {number} belong to?"
    start = text.index(number)
    found = [f for f in detector.detect(text) if f.entity_type == "PHONE_NUMBER"]
    assert any(_covers(f, start, start + len(number)) for f in found), (number, found)


@pytest.mark.parametrize("text", BARE_PHONE_SENTENCES)
def test_bare_digit_runs_need_a_phone_word(detector: PiiDetector, text: str) -> None:
    found = _phones(detector, text)
    assert len(found) == 1 and sum(c.isdigit() for c in found[0]) >= 10, found


@pytest.mark.parametrize("text", PHONE_NEGATIVES)
def test_numbers_that_are_not_phone_numbers(detector: PiiDetector, text: str) -> None:
    assert _phones(detector, text) == []


def test_phone_span_keeps_extension_and_context_raises_score(detector: PiiDetector) -> None:
    plain = detector.detect("who is 001-415-555-2671x1234?")
    assert [(f.entity_type, f.start, f.end) for f in plain] == [("PHONE_NUMBER", 7, 28)]
    with_word = detector.detect("call 001-415-555-2671x1234")
    assert with_word[0].score > plain[0].score


def test_phone_patterns_do_not_backtrack_on_long_digit_runs(detector: PiiDetector) -> None:
    text = "+1 " + "12 " * 4000 + "x" + "0-" * 4000 + "a" + "1" * 5000
    started = time.perf_counter()
    detector.detect(text)
    assert time.perf_counter() - started < 5.0


@pytest.mark.parametrize("text", [
    "My SSN is 123-45-6789, can you check my tax form?",
    "patient ssn: 078-05-1120",
    "Social Security number = 987654320",
    'my social security no. is "123 45 6789"',
])
def test_placeholder_ssns_count_when_disclosed(detector: PiiDetector, text: str) -> None:
    """Presidio drops the published sample SSNs; typed after "SSN is" they are an SSN."""
    assert [f.entity_type for f in detector.detect(text)] == ["US_SSN"]


@pytest.mark.parametrize("text", [
    "SSNs look like 123-45-6789",
    "an SSN such as 123-45-6789 has three groups",
    "123-45-6789 is the usual example",
    "what is 123456789 times 2?",
])
def test_placeholder_ssns_in_format_talk_pass(detector: PiiDetector, text: str) -> None:
    assert detector.detect(text) == ()
