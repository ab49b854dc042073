"""PII detection quality: recall per structured type and false positives, on synthetic data.

Not a test. Bounded: `--per-type` (default 120) sentences per entity type, each embedding one
Faker-generated value (seeded, so the run is reproducible) in a chat-style sentence, half of the
templates with a context word ("my email is ...") and half without ("... is what I gave them").
A value counts as found when a finding of its type overlaps its span. Then it runs the hand-written
prompts below that only talk about PII formats (no real value; placeholders such as XXX-XX-XXXX)
and, as extra negatives, every prompt of `--negatives` (JSONL with "text"): any finding there is a
false positive. Runs in well under a minute on CPU.

Values: e-mail, US SSN, IPv4/IPv6 and credit cards (all Faker card types, Luhn-valid) from Faker;
phone numbers from Faker's en_US, en_GB, de_DE, fr_FR, en_IN and pt_BR locales (the detector's
regions), in each locale's own formats; IBANs from Faker for DE, GB, FR, NL, ES, IT, compact or in
groups of four. Faker has no API keys: those are random strings in the vendor formats the detector
knows (so API_KEY recall only checks the patterns and overlap handling, not coverage of vendors).

Usage: python bench/pii_quality.py [--per-type 120] [--seed 7] [--negatives FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

# Run as `python bench/pii_quality.py`, this folder is first on sys.path and bench/classifiers.py
# would shadow the `classifiers` package; the repository root must come first instead.
if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from faker import Faker

from classifiers.pii import ENTITY_TYPES, PiiDetector, PiiFinding

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_NEGATIVES = ROOT / "bench" / "data" / "conversational_domains.jsonl"

# (template with context word, template without): "{v}" is the value.
TEMPLATES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "EMAIL_ADDRESS": (
        (
            "my email is {v}, can you draft a reply to the landlord?",
            "please send the invoice to my e-mail {v} by friday",
        ),
        ("forward this thread to {v} and cc me", "{v} keeps bouncing my messages, why?"),
    ),
    "PHONE_NUMBER": (
        (
            "you can call me at {v} after 5pm",
            "my phone number is {v}, is it safe to put it on my CV?",
        ),
        (
            "the plumber left {v} on my voicemail, should I ring back?",
            "write a polite text to {v} saying I'll be late",
        ),
    ),
    "CREDIT_CARD": (
        (
            "my credit card {v} was charged twice, help me write a complaint",
            "I paid with card number {v} but the order never arrived",
        ),
        ("why was {v} declined at the hotel?", "is {v} still valid if the expiry is 09/27?"),
    ),
    "US_SSN": (
        (
            "my social security number is {v}, do I put it on the W-4?",
            "the form asks for SSN, mine is {v}, where does it go?",
        ),
        (
            "I typed {v} into the IRS site and it says mismatch",
            "fill in this letter for me: name John Doe, {v}, 12 Oak St",
        ),
    ),
    "IBAN_CODE": (
        (
            "my IBAN is {v}, write a transfer request to my bank",
            "please wire the deposit to bank account {v}",
        ),
        (
            "the seller gave me {v}, does this look legit?",
            "draft an email telling the tenant to pay rent to {v}",
        ),
    ),
    "IP_ADDRESS": (
        (
            "my server ip is {v} and ssh times out, what should I check?",
            "the IP address {v} keeps hitting our login page",
        ),
        (
            "nginx logs show {v} sending 500 requests a second, block it how?",
            "ping {v} works but curl doesn't, why?",
        ),
    ),
    "API_KEY": (
        (
            "here's my api key {v}, why does the request return 401?",
            "my token {v} stopped working yesterday",
        ),
        (
            "curl -H 'x-auth: {v}' https://example.org/v1 fails, help",
            "I accidentally pushed {v} to github, what now?",
        ),
    ),
}

# Prompts that only talk about formats: nothing here should be flagged.
FORMAT_TALK = (
    "how does the Luhn check work?",
    "what's the format of a US social security number?",
    "why do SSNs never start with 666 or 9?",
    "how is the IBAN check digit calculated, the mod 97 thing?",
    "how many characters does a German IBAN have?",
    "what does XXX-XX-XXXX mean on my pay stub?",
    "write a regex that matches email addresses",
    "what characters are allowed before the @ in an email address?",
    "explain the difference between IPv4 and IPv6 addresses",
    "what's a subnet mask and how does CIDR notation work?",
    "how do I store my OpenAI API key safely in a python project?",
    "what is a bearer token in HTTP authentication?",
    "my key starts with sk-... is that a secret key or a publishable one?",
    "should I commit my .env file with API keys to git?",
    "how do credit card numbers encode the card network, like Visa starting with 4?",
    "why do Amex cards have 15 digits and Visa 16?",
    "what is the CVV on a card and why shouldn't I share it?",
    "how are US phone numbers structured, area code and exchange?",
    "what's the international format for phone numbers, E.164?",
    "how do I validate a phone number field in a signup form?",
    "is it safe to give my social security number over the phone?",
    "what does PCI DSS require for storing card numbers?",
    "how does tokenization protect credit card data?",
    "what is PII and which fields count as personally identifiable?",
    "how do I mask all but the last four digits of a card in SQL?",
    "what's the difference between an IBAN and a SWIFT/BIC code?",
    "how does GitHub detect leaked tokens like ghp_... in commits?",
    "can you explain how JWTs are structured, header payload signature?",
    "how do I rotate AWS access keys without downtime?",
    "what does the phone format (XXX) XXX-XXXX mean on this form?",
    "why does my router use 192.168.x.x addresses?",
    "how do spammers find email addresses on websites and how do I hide mine?",
    "what is the checksum digit in a credit card number for?",
    "how many digits is an SSN and what do the groups mean?",
)

PHONE_LOCALES = ("en_US", "en_GB", "de_DE", "fr_FR", "en_IN", "pt_BR")
IBAN_LOCALES = ("de_DE", "en_GB", "fr_FR", "nl_NL", "es_ES", "it_IT")


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def api_key(rng: random.Random) -> tuple[str, str]:
    """A random token in one of the vendor formats; returns (value, vendor)."""
    alnum = string.ascii_letters + string.digits
    upper = string.ascii_uppercase + string.digits
    b64url = alnum + "_-"
    makers: dict[str, Callable[[], str]] = {
        "openai": lambda: "sk-proj-" + _rand(rng, b64url, 48),
        "anthropic": lambda: "sk-ant-api03-" + _rand(rng, b64url, 40),
        "github": lambda: "ghp_" + _rand(rng, alnum, 36),
        "aws": lambda: "AKIA" + _rand(rng, upper, 16),
        "google": lambda: "AIza" + _rand(rng, b64url, 35),
        "slack": lambda: "xoxb-" + _rand(rng, string.digits, 12) + "-" + _rand(rng, alnum, 24),
        "stripe": lambda: "sk_live_" + _rand(rng, alnum, 24),
        "huggingface": lambda: "hf_" + _rand(rng, alnum, 34),
        "jwt": lambda: (
            ".".join(["eyJ" + _rand(rng, b64url, 20) for _ in range(2)])
            + "."
            + _rand(rng, b64url, 43)
        ),
        "bearer": lambda: (
            "Bearer "
            + _rand(rng, string.ascii_lowercase, 8)
            + _rand(rng, string.digits, 4)
            + _rand(rng, alnum, 20)
        ),
    }
    vendor = rng.choice(sorted(makers))
    return makers[vendor](), vendor


def make_value(entity: str, fakers: dict[str, Faker], rng: random.Random) -> tuple[str, str]:
    """One value of `entity` and its subgroup (locale, card type, vendor) for the breakdown."""
    us = fakers["en_US"]
    if entity == "EMAIL_ADDRESS":
        return us.email(), "-"
    if entity == "PHONE_NUMBER":
        locale = rng.choice(PHONE_LOCALES)
        return fakers[locale].phone_number(), locale
    if entity == "CREDIT_CARD":
        kind = rng.choice(
            (
                "visa16",
                "visa13",
                "visa19",
                "mastercard",
                "amex",
                "discover",
                "jcb16",
                "jcb15",
                "diners",
                "maestro",
            )
        )
        value = us.credit_card_number(card_type=kind)
        if rng.random() < 0.5 and len(value) == 16:
            value = " ".join(value[i : i + 4] for i in range(0, 16, 4))
        return value, kind
    if entity == "US_SSN":
        return us.ssn(), "-"
    if entity == "IBAN_CODE":
        locale = rng.choice(IBAN_LOCALES)
        value = fakers[locale].iban()
        if rng.random() < 0.5:
            value = " ".join(value[i : i + 4] for i in range(0, len(value), 4))
        return value, locale[-2:]
    if entity == "IP_ADDRESS":
        if rng.random() < 0.75:
            return us.ipv4(), "v4"
        return us.ipv6(), "v6"
    if entity == "API_KEY":
        return api_key(rng)
    raise ValueError(entity)


class Tally:
    """Counts for the positive sentences and the flagged negatives."""

    def __init__(self, detector: PiiDetector) -> None:
        self.detector = detector
        self.found: Counter[str] = Counter()
        self.by_group: dict[str, Counter[tuple[str, bool]]] = defaultdict(Counter)
        self.by_context: Counter[tuple[str, bool, bool]] = Counter()
        self.extra: Counter[str] = Counter()  # findings of another type on positive sentences
        self.misses: dict[str, list[str]] = defaultdict(list)
        self.detect_s = 0.0
        self.n_detect = 0

    def detect(self, text: str) -> tuple[PiiFinding, ...]:
        t0 = time.perf_counter()
        findings = self.detector.detect(text)
        self.detect_s += time.perf_counter() - t0
        self.n_detect += 1
        return findings

    def positive(
        self, entity: str, prefix: str, value: str, suffix: str, group: str, context: bool
    ) -> None:
        start, end = len(prefix), len(prefix) + len(value)
        findings = self.detect(prefix + value + suffix)
        hit = any(f.entity_type == entity and f.start < end and f.end > start for f in findings)
        self.found[entity] += hit
        self.by_group[entity][(group, hit)] += 1
        self.by_context[(entity, context, hit)] += 1
        for f in findings:
            if f.entity_type != entity:
                self.extra[f"{entity}->{f.entity_type}"] += 1
        if not hit and len(self.misses[entity]) < 4:
            self.misses[entity].append(value)

    def negatives(self, texts: list[str]) -> list[str]:
        flagged: list[str] = []
        for text in texts:
            findings = self.detect(text)
            if findings:
                kinds = ",".join(f"{f.entity_type}:{text[f.start : f.end]!r}" for f in findings)
                flagged.append(f"{text[:60]!r} -> {kinds}")
        return flagged

    def print_recall(self, per_type: int) -> None:
        print(
            f"{'type':<14} {'found':>7} {'recall':>7} {'ctx':>6} {'no ctx':>7}  "
            "breakdown (subgroup found/n)"
        )
        for entity in ENTITY_TYPES:
            ctx = [self.by_context[(entity, True, hit)] for hit in (True, False)]
            noc = [self.by_context[(entity, False, hit)] for hit in (True, False)]
            parts = []
            for g in sorted({g for g, _ in self.by_group[entity]} - {"-"}):
                ok = self.by_group[entity][(g, True)]
                parts.append(f"{g} {ok}/{ok + self.by_group[entity][(g, False)]}")
            n = self.found[entity]
            print(
                f"{entity:<14} {n:>3}/{per_type:<3} {n / per_type:>7.3f} "
                f"{ctx[0] / max(1, sum(ctx)):>6.2f} {noc[0] / max(1, sum(noc)):>7.2f}  "
                f"{' '.join(parts)}"
            )
        print()
        for entity, values in self.misses.items():
            print(f"missed {entity} (first {len(values)}): {values}")
        if self.extra:
            print(f"other-type findings on positive sentences: {dict(self.extra)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-type", type=int, default=120)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--negatives",
        type=Path,
        default=DEFAULT_NEGATIVES,
        help="JSONL with 'text': extra prompts that contain no PII",
    )
    args = parser.parse_args()

    rng = random.Random(args.seed)
    Faker.seed(args.seed)
    fakers = {loc: Faker(loc) for loc in sorted({"en_US", *PHONE_LOCALES, *IBAN_LOCALES})}
    for loc, fake in fakers.items():
        fake.seed_instance(f"{args.seed}-{loc}")

    started = time.perf_counter()
    detector = PiiDetector()  # all types, default min_score
    load_s = time.perf_counter() - started
    tally = Tally(detector)
    for entity in ENTITY_TYPES:
        with_ctx, without_ctx = TEMPLATES[entity]
        for i in range(args.per_type):
            value, group = make_value(entity, fakers, rng)
            context = i % 2 == 0
            prefix, suffix = rng.choice(with_ctx if context else without_ctx).split("{v}")
            tally.positive(entity, prefix, value, suffix, group, context)

    fmt_flagged = tally.negatives(list(FORMAT_TALK))
    neg_texts: list[str] = []
    if args.negatives and args.negatives.exists():
        with args.negatives.open() as fh:
            neg_texts = [json.loads(line)["text"] for line in fh if line.strip()]
    neg_flagged = tally.negatives(neg_texts)

    print(
        f"PiiDetector (all types, min_score {detector.min_score}), seed {args.seed}, "
        f"{args.per_type} sentences per type; load {load_s:.1f} s, mean detect "
        f"{1000 * tally.detect_s / max(1, tally.n_detect):.2f} ms over {tally.n_detect} texts\n"
    )
    tally.print_recall(args.per_type)
    print(f"\nformat talk: {len(fmt_flagged)}/{len(FORMAT_TALK)} prompts flagged")
    for line in fmt_flagged:
        print(f"  {line}")
    if neg_texts:
        print(
            f"negatives ({args.negatives.name}): {len(neg_flagged)}/{len(neg_texts)} "
            "prompts flagged"
        )
        for line in neg_flagged:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
