"""National identity numbers besides the US SSN (``NATIONAL_ID``): Brazil's CPF, France's
social security number (NIR), Sweden's personnummer, Spain's DNI and NIE, the Netherlands'
BSN, Poland's PESEL, Italy's codice fiscale and the UK's National Insurance number.

Each is found only right after its own name ("CPF", "personnummer", "numéro de sécurité
sociale"; with "is", ":", "n°" and the like between) and only when its check digits or letter
hold (the NINO has none: its prefix letters must be ones HMRC issues). Numbers of these shapes
are everywhere (order numbers, dates, phone numbers); the name is what says whose they are.
Not in Presidio's defaults, so never in ``presidio_compatible`` mode.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from classifiers.pii_recognizers import Span, luhn_valid

ENTITY = "NATIONAL_ID"
SCORE = 0.85  # as a labelled SSN scores
CONTEXT = ("cpf", "personnummer", "sécurité sociale", "securite sociale", "dni", "nie", "nif",
           "bsn", "burgerservicenummer", "pesel", "codice fiscale", "national insurance")

# between a name and its number: "is", ":", "n°", "nr.", "number"... in the languages used
_BETWEEN = (r"(?:\s*(?:is|was|est|é|es|ist|är|jest|è|=|:|#|-|n[°º.]?|nr\.?|no\.?|number|"
            r"número|numéro|numero|nummer|numer|del|de|do|di|mijn|mein|mon|mitt|mój|il\s+mio|"
            r"meu|mi|to|är)\s*){0,4}\s*[\"'(]?")


def _cpf(digits: str) -> bool:
    if len(set(digits)) == 1:
        return False
    for size in (9, 10):
        total = sum(int(d) * w for d, w in zip(digits[:size], range(size + 1, 1, -1),
                                                 strict=True))
        if (total * 10 % 11) % 10 != int(digits[size]):
            return False
    return True


def _nir(value: str) -> bool:
    compact = value.replace(" ", "").upper()
    body, key = compact[:13], compact[13:]
    number = int(body.replace("2A", "19").replace("2B", "18"))
    return len(key) == 2 and 97 - number % 97 == int(key)


def _personnummer(digits: str) -> bool:
    return luhn_valid(digits[-10:])


_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def _dni(value: str) -> bool:
    compact = value.replace("-", "").upper()
    number = compact[:-1].replace("X", "0").replace("Y", "1").replace("Z", "2")
    return _DNI_LETTERS[int(number) % 23] == compact[-1]


def _bsn(digits: str) -> bool:
    total = sum(int(d) * w for d, w in zip(digits[:8], range(9, 1, -1), strict=True))
    return (total - int(digits[8])) % 11 == 0 and digits != "000000000"


def _pesel(digits: str) -> bool:
    total = sum(int(d) * w for d, w in zip(digits[:10], (1, 3, 7, 9) * 3, strict=False))
    return (10 - total % 10) % 10 == int(digits[10])


_CF_ODD = dict(zip("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                   (1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 2, 4,
                    18, 20, 11, 3, 6, 8, 12, 14, 16, 10, 22, 25, 24, 23), strict=True))


def _codice_fiscale(value: str) -> bool:
    code = value.upper()
    total = sum(_CF_ODD[c] if i % 2 == 0 else (int(c) if c.isdigit() else ord(c) - 65)
                for i, c in enumerate(code[:15]))
    return chr(65 + total % 26) == code[15]


def _nino(value: str) -> bool:
    prefix = value.replace(" ", "").upper()[:2]
    return not (set(prefix) & set("DFIQUV") or prefix[1] == "O"
                or prefix in ("BG", "GB", "KN", "NK", "NT", "TN", "ZZ"))


def _digits(check: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda value: check("".join(c for c in value if c.isdigit()))


# (name, number pattern, check)
_KINDS: tuple[tuple[str, str, Callable[[str], bool]], ...] = (
    (r"cpf", r"\d{3}\.?\d{3}\.?\d{3}-?\d{2}", _digits(_cpf)),
    (r"num[ée]ro\s+de\s+s[ée]curit[ée]\s+sociale|n°\s*(?:de\s+)?s[ée]cu(?:rit[ée]\s+sociale)?"
     r"|\bnir\b|\bs[ée]cu\b", r"[12]\s?\d{2}\s?\d{2}\s?(?:\d{2}|2[ab])\s?\d{3}\s?\d{3}\s?\d{2}",
     _nir),
    (r"person(?:-|\s)?nummer|personnr", r"(?:\d{2})?\d{6}[-+]?\d{4}", _digits(_personnummer)),
    (r"\b(?:dni|nie|nif)\b", r"[xyz]?\d{7,8}-?[a-z]", _dni),
    (r"\bbsn\b|burgerservicenummer|sofinummer", r"\d{4}\.?\d{2}\.?\d{3}", _digits(_bsn)),
    (r"\bpesel\b", r"\d{11}", _digits(_pesel)),
    (r"codice\s+fiscale|\bcod\.?\s*fisc\.?|\bc\.f\.",
     r"[a-z]{6}\d{2}[a-ehlmpr-t]\d{2}[a-z]\d{3}[a-z]", _codice_fiscale),
    (r"national\s+insurance(?:\s+number)?|\bni\s+number\b|\bnino\b",
     r"[a-z]{2}\s?\d{2}\s?\d{2}\s?\d{2}\s?[a-d]", _nino),
)
_PATTERNS = tuple((re.compile(f"(?:{name}){_BETWEEN}(?P<number>{number})(?![0-9a-z])",
                              re.IGNORECASE), check) for name, number, check in _KINDS)


class NationalIdRecognizer:
    entity = ENTITY
    context = CONTEXT

    def analyze(self, text: str) -> list[Span]:
        spans = []
        for pattern, check in _PATTERNS:
            for match in pattern.finditer(text):
                if check(match.group("number")):
                    spans.append(Span(match.start("number"), match.end("number"), SCORE))
        return spans
