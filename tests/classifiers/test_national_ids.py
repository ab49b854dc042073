"""National identity numbers (classifiers.national_ids): found right after their own name and
only with valid check digits; the same shapes elsewhere are other numbers."""

from __future__ import annotations

import pytest

from classifiers.pii import PiiDetector

DETECTOR = PiiDetector(["NATIONAL_ID"])


def found(text: str) -> list[str]:
    return [text[f.start:f.end] for f in DETECTOR.detect(text)]


@pytest.mark.parametrize(("text", "number"), [
    ("Meu CPF é 529.982.247-25, pode emitir a nota?", "529.982.247-25"),
    ("CPF: 11144477735", "11144477735"),
    ("Mon numéro de sécurité sociale est 1 85 05 78 006 084 91.", "1 85 05 78 006 084 91"),
    ("Mitt personnummer är 811218-9876.", "811218-9876"),
    ("personnummer 19811218-9876", "19811218-9876"),
    ("mi DNI es 12345678Z", "12345678Z"),
    ("NIE X1234567L", "X1234567L"),
    ("BSN 111222333, naam J. de Vries", "111222333"),
    ("mój PESEL to 44051401359.", "44051401359"),
    ("Il mio codice fiscale è RSSMRA85T10A562S.", "RSSMRA85T10A562S"),
    ("NI number: AB123456C", "AB123456C"),
])
def test_a_labelled_valid_number_is_found(text: str, number: str) -> None:
    assert found(text) == [number]


@pytest.mark.parametrize("text", [
    "order 529.982.247-25 shipped",             # no name before it
    "CPF 111.111.111-11",                       # one digit repeated: never issued
    "Meu CPF é 529.982.247-26",                 # a wrong check digit
    "DNI 12345678A",                            # a wrong letter
    "BSN 111222334",
    "PESEL 44051401358",
    "codice fiscale RSSMRA85T10A562T",
    "national insurance number QQ 12 34 56 C",  # HMRC's specimen prefix
    "Tengo el DNI caducado, ¿cómo lo renuevo?",
    "Mon numéro de sécurité sociale a changé, que faire ?",
])
def test_other_numbers_and_talk_about_ids_are_not(text: str) -> None:
    assert found(text) == []
