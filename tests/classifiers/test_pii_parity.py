"""Our PII recognizers find exactly what the Presidio-based detector found.

`classifiers.pii` replaced presidio-analyzer's predefined recognizers with
`classifiers.pii_recognizers`. Here the former detector (`pii_presidio_reference`) and the new
one must agree finding for finding (type, start, end, score), and each recognizer must return
the same raw spans and scores as its Presidio counterpart, on (a) every text of
tests/classifiers/test_pii.py and bench/pii_quality.py, (b) an IBAN of every country Presidio
knows, and (c) generated texts mixing Faker values with prose, punctuation, Unicode and context
words. Skipped where presidio-analyzer (a dev dependency) is not installed.
"""

from __future__ import annotations

import ast
import json
import random
import string
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import phonenumbers
import pytest

pytest.importorskip("presidio_analyzer")

from faker import Faker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from classifiers.pii import ENTITY_TYPES, PiiDetector
from classifiers.pii_recognizers import IBAN_LAYOUTS
from tests.classifiers.pii_presidio_reference import ReferenceDetector, presidio_spans

ROOT = Path(__file__).resolve().parents[2]
CORPUS_FILES = (ROOT / "tests/classifiers/test_pii.py", ROOT / "bench/pii_quality.py")


@pytest.fixture(scope="module")
def pair() -> tuple[ReferenceDetector, PiiDetector]:
    return ReferenceDetector(), PiiDetector(presidio_compatible=True)


def assert_same(pair: tuple[ReferenceDetector, PiiDetector], text: str) -> None:
    reference, ours = pair
    for old, new in zip(reference.presidio_recognizers, ours._recognizers, strict=True):
        assert old.supported_entities == [new.entity]
        expected = presidio_spans(old, text)
        got = sorted((s.start, s.end, s.score) for s in new.analyze(text))
        assert got == expected, (new.entity, text)
    assert ours.detect(text) == reference.detect(text), text


# --- (a) the corpus -------------------------------------------------------------------------


def _literals(path: Path) -> Iterator[str]:
    """Every string literal in a source file (test texts, templates, docstrings)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
            yield node.value


def _test_pii_texts() -> Iterator[str]:
    from tests.classifiers import test_pii

    for number in test_pii.DIALLED_PHONES:
        yield f"who does {number} belong to?"
    yield "+1 " + "12 " * 4000 + "x" + "0-" * 4000 + "a" + "1" * 5000
    for entity_type in ENTITY_TYPES:  # the recall test's sentences
        generate = test_pii._generators(seed=42)[entity_type]
        for i in range(60):
            yield test_pii.TEMPLATES[i % len(test_pii.TEMPLATES)].format(v=generate())


def _bench_texts() -> Iterator[str]:
    """The sentences `bench/pii_quality.py` builds with its defaults, and its negatives."""
    from bench import pii_quality as bench

    rng = random.Random(7)
    Faker.seed(7)
    locales = sorted({"en_US", *bench.PHONE_LOCALES, *bench.IBAN_LOCALES})
    fakers = {loc: Faker(loc) for loc in locales}
    for loc, fake in fakers.items():
        fake.seed_instance(f"7-{loc}")
    for entity in ENTITY_TYPES:
        with_ctx, without_ctx = bench.TEMPLATES[entity]
        for i in range(120):
            value, _ = bench.make_value(entity, fakers, rng)
            yield rng.choice(with_ctx if i % 2 == 0 else without_ctx).replace("{v}", value)
    with bench.DEFAULT_NEGATIVES.open() as fh:
        yield from (json.loads(line)["text"] for line in fh if line.strip())


@cache
def corpus() -> tuple[str, ...]:
    texts = [t for path in CORPUS_FILES for t in _literals(path)]
    texts += [*_test_pii_texts(), *_bench_texts()]
    return tuple(dict.fromkeys(texts))


def test_corpus_has_the_texts_of_both_files() -> None:
    assert len(corpus()) > 1500
    assert "why are 555-0100 through 555-0199 reserved for fiction?" in corpus()


def test_same_findings_on_the_corpus(pair: tuple[ReferenceDetector, PiiDetector]) -> None:
    for text in corpus():
        assert_same(pair, text)


# --- (b) an IBAN of every country -------------------------------------------------------------

_KINDS = {"n": string.digits, "a": string.ascii_uppercase, "c": string.ascii_uppercase + "0123"}


def _mod97_check(country: str, bban: str) -> str:
    """Check digits computed independently of the code under test."""
    moved = bban + country + "00"
    number = "".join(str(string.digits.index(c)) if c.isdigit() else str(ord(c) - 55)
                     for c in moved)
    return f"{98 - int(number) % 97:02d}"


def _iban(country: str, layout: str, rng: random.Random) -> str:
    bban = ""
    for token in layout.split():
        bban += token if token == "0" else "".join(
            rng.choice(_KINDS[token[-1]]) for _ in range(int(token[:-1])))
    return country + _mod97_check(country, bban) + bban


def _variants(iban: str, rng: random.Random) -> Iterator[str]:
    grouped = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))
    yield from (iban, grouped, grouped.replace(" ", "-"), iban.lower(), iban + "1", iban[:-1])
    i = rng.randrange(4, len(iban))
    yield iban[:i] + ("7" if iban[i] != "7" else "8") + iban[i + 1 :]  # one character changed
    yield iban[:i] + "X" + iban[i + 1 :]  # a letter where the layout may want a digit


def test_ibans_of_every_country(pair: tuple[ReferenceDetector, PiiDetector]) -> None:
    rng = random.Random(3)
    from presidio_analyzer.predefined_recognizers.generic.iban_patterns import (
        regex_per_country,
    )

    assert set(IBAN_LAYOUTS) == set(regex_per_country)
    for country, layout in sorted(IBAN_LAYOUTS.items()):
        for _ in range(3):
            for value in _variants(_iban(country, layout, rng), rng):
                assert_same(pair, f"pay it to {value} 2 days from now")


def _layout_probes(country: str, layout: str, rng: random.Random) -> Iterator[str]:
    """Checksum-valid IBANs that break the layout at each position, or are one character short
    or long; then some with check digits 00, 01 or 99 (mod 97 gives 1, yet no IBAN has them)."""
    bban = _iban(country, layout, rng)[4:]
    changed = (bban[:i] + ("Q" if c.isdigit() else "5") + bban[i + 1 :] for i, c in enumerate(bban))
    for other in (*changed, bban[:-1], bban + "7"):
        yield country + _mod97_check(country, other) + other
    for _ in range(200):
        bban = _iban(country, layout, rng)[4:]
        edge = {"97": "00", "98": "01", "02": "99"}.get(_mod97_check(country, bban))
        if edge:
            yield country + edge + bban


def test_iban_layouts_position_by_position(pair: tuple[ReferenceDetector, PiiDetector]) -> None:
    reference, ours = pair
    index = ours.entity_types.index("IBAN_CODE")
    old, new = reference.presidio_recognizers[index], ours._recognizers[index]
    rng = random.Random(5)
    for country, layout in sorted(IBAN_LAYOUTS.items()):
        for value in _layout_probes(country, layout, rng):
            text = f"IBAN {value}."
            got = sorted((s.start, s.end, s.score) for s in new.analyze(text))
            assert got == presidio_spans(old, text), text


# --- (c) generated texts ------------------------------------------------------------------

CARD_TYPES = ("amex", "diners", "discover", "jcb15", "jcb16", "maestro", "mastercard", "visa13",
              "visa16", "visa19")
IBAN_LOCALES = ("de_DE", "en_GB", "fr_FR", "nl_NL", "es_ES", "it_IT", "pl_PL", "pt_PT", "fi_FI",
                "no_NO", "cs_CZ", "sk_SK", "da_DK", "de_AT", "de_CH", "el_GR", "en_IE", "ro_RO",
                "tr_TR", "az_AZ", "uk_UA", "mk_MK", "nl_BE", "pt_BR", "ru_RU", "th_TH")
PHONE_LOCALES = ("en_US", "en_GB", "de_DE", "fr_FR", "en_IN", "pt_BR")
PHONE_REGIONS = ("US", "GB", "DE", "FR", "IN", "BR", "IL", "CA", "JP", "AU", "ES", "IT")
BAD_SSNS = ("000-12-3456", "123-45-6789", "666-12-3456", "078-05-1120", "987-65-4320",
            "123-00-4567", "123-45-0000", "111-11-1111", "123-45 6789", "900-12-3456")
ODD_IPS = ("256.1.1.1", "1.2.3", "01.02.03.004", "1.2.3.4/33", "10.0.0.0/8", "::", "::1",
           "::ffff:10.0.0.1", "fe80::1%eth0", "2001:db8::/32", "1:2:3:4:5:6:7:8:9", ":::",
           "2001:db8:0:0:0:0:2:1", "::ffff:0:192.0.2.1", "64:ff9b::192.0.2.33", "1::2::3")
ODD_EMAILS = ("a@b.c", "x@localhost", "user@example.invalidtld", "name@xn--80ak6aa92e.com",
              "jo.o@exämple.de", "first..last@example.com", ".a@example.org", "a-@b-.com",
              "ü@ü.ü", "support@mail.example.co.uk")
CONTEXT_WORDS = ("credit card", "card", "visa", "cc ", "SSN", "social security", "iban", "bank",
                 "transaction", "ip", "IPv6", "email", "phone", "call", "mobile", "api key",
                 "token", "secret", "Bearer", "Authorization:", "my number is", "account")
PROSE = ("please", "update my record", "the value on file is", "tomorrow", "and", "or",
         "Kontonummer", "número", "電話", "сумма", "2024-05-01", "v1.2.3", "$1,299.99", "#42")


# Unicode around values: `regex` (as Presidio) and `re` disagree on these word boundaries.
UNICODE_EDGES = ("mail a@example.com\u0301 now", "card 4111111111111111\u0301",
                 "x\u212aa@b.com", "\u212aey AKIA\u212a234567890ABCDEF", "ssn ١٢٣-٤٥-٦٧٨٩",
                 "card ４１１１ １１１１ １１１１ １１１１", "ip １.２.３.４", "ιp 10.0.0.1\u0345")
EDGE_TEMPLATES = ("{v}", "my ssn / ip / email / card / iban is {v}.", "({v})", "x{v}y", "{v}\u0301")


def test_same_findings_on_edge_values(pair: tuple[ReferenceDetector, PiiDetector]) -> None:
    for value in (*BAD_SSNS, *ODD_IPS, *ODD_EMAILS, *UNICODE_EDGES):
        for template in EDGE_TEMPLATES:
            assert_same(pair, template.format(v=value))


@cache
def _faker(locale: str) -> Faker:
    return Faker(locale)


def _seeded(locale: str, seed: int) -> Faker:
    fake = _faker(locale)
    fake.seed_instance(seed)
    return fake


def _luhn_complete(prefix: str) -> str:
    for last in string.digits:
        digits = [int(c) for c in reversed(prefix + last)]
        doubled = [d * 2 - 9 if d > 4 else d * 2 for d in digits[1::2]]
        if (sum(digits[::2]) + sum(doubled)) % 10 == 0:
            return prefix + last
    raise AssertionError(prefix)


def _group(value: str, how: str) -> str:
    if how == "compact":
        return value
    return how.join(value[i : i + 4] for i in range(0, len(value), 4))


seeds = st.integers(0, 2**31)
seps = st.sampled_from(("compact", " ", "-"))


def _card(seed: int, kind: str) -> str:
    return _seeded("en_US", seed).credit_card_number(card_type=kind)


def _synthetic_card(prefix: int, rest: str, corrupt: bool) -> str:
    value = _luhn_complete(f"{prefix}{rest}")
    return value[:-1] + str((int(value[-1]) + 1) % 10) if corrupt else value


def _ssn(digits: str, first: str, second: str) -> str:
    return f"{digits[:3]}{first}{digits[3:5]}{second}{digits[5:]}"


def _phone_example(region: str, kind: int, style: int) -> str:
    kinds = (phonenumbers.PhoneNumberType.FIXED_LINE, phonenumbers.PhoneNumberType.MOBILE)
    number = phonenumbers.example_number_for_type(region, kinds[kind])
    assert number is not None
    formats = (phonenumbers.PhoneNumberFormat.E164, phonenumbers.PhoneNumberFormat.INTERNATIONAL,
               phonenumbers.PhoneNumberFormat.NATIONAL)
    return phonenumbers.format_number(number, formats[style])


def _api_key(seed: int) -> str:
    from bench.pii_quality import api_key

    return api_key(random.Random(seed))[0]


def _iban_value(seed: int, locale: str, how: str, corrupt: bool) -> str:
    value = _seeded(locale, seed).iban()
    if corrupt:
        i = random.Random(seed).randrange(4, len(value))
        changed = str((int(value[i]) + 1) % 10) if value[i].isdigit() else "1"
        value = value[:i] + changed + value[i + 1 :]
    return _group(value, how)


def _layout_iban(seed: int, country: str) -> str:
    """A valid IBAN of any country Presidio knows, or one of its variants (see `_variants`)."""
    rng = random.Random(seed)
    variants = list(_variants(_iban(country, IBAN_LAYOUTS[country], rng), rng))
    return variants[seed % len(variants)]


def _ip(seed: int, kind: int) -> str:
    fake = _seeded("en_US", seed)
    makers: tuple[Callable[[], str], ...] = (
        fake.ipv4, fake.ipv4_private, fake.ipv6, lambda: fake.ipv4(network=True),
        lambda: fake.ipv6(network=True), lambda: "::ffff:" + fake.ipv4(),
    )
    return makers[kind]()


values = st.one_of(
    st.builds(_card, seeds, st.sampled_from(CARD_TYPES)).flatmap(
        lambda v: seps.map(lambda how: _group(v, how) if len(v) == 16 else v)),
    st.builds(_synthetic_card, st.integers(2221, 2720), st.text(string.digits, min_size=11,
              max_size=11), st.booleans()),  # 2-series Mastercard, valid or not
    st.builds(_synthetic_card, st.sampled_from((4, 4000, 5018, 6304, 6759, 2131, 1800, 3530)),
              st.text(string.digits, min_size=8, max_size=15), st.booleans()),
    st.builds(lambda s: _seeded("en_US", s).ssn(), seeds),
    st.sampled_from(BAD_SSNS),
    st.builds(_ssn, st.text(string.digits, min_size=9, max_size=9),
              st.sampled_from(("-", " ", ".", "")), st.sampled_from(("-", " ", ".", ""))),
    st.builds(_iban_value, seeds, st.sampled_from(IBAN_LOCALES), seps, st.booleans()),
    st.builds(_layout_iban, seeds, st.sampled_from(sorted(IBAN_LAYOUTS))),
    st.builds(_ip, seeds, st.integers(0, 5)),
    st.sampled_from(ODD_IPS),
    st.builds(lambda s: _seeded("en_US", s).email(), seeds),
    st.builds(lambda s: _seeded("en_US", s).free_email(), seeds),
    st.sampled_from(ODD_EMAILS),
    st.builds(lambda s, loc: _seeded(loc, s).phone_number(), seeds, st.sampled_from(PHONE_LOCALES)),
    st.builds(_phone_example, st.sampled_from(PHONE_REGIONS), st.integers(0, 1),
              st.integers(0, 2)),
    st.builds(_api_key, seeds),
)
fillers = st.one_of(
    st.sampled_from(CONTEXT_WORDS),
    st.sampled_from(PROSE),
    st.sampled_from(list(",.;:!?()[]{}\"'-/+@#\n\t")),
    st.text(max_size=6),  # any Unicode: combining marks, other scripts' digits, ...
    st.text(alphabet="0123456789 -.:/+()", max_size=16),
)
texts = st.lists(st.one_of(values, fillers, values), min_size=1, max_size=8).flatmap(
    lambda parts: st.lists(st.sampled_from(("", " ", "\n", ", ", "-", ": ")), min_size=len(parts),
                           max_size=len(parts)).map(
        lambda glue: "".join(p + g for p, g in zip(parts, glue, strict=True))))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts)
def test_same_findings_on_generated_texts(
    pair: tuple[ReferenceDetector, PiiDetector], text: str
) -> None:
    assert_same(pair, text)
