"""US social security numbers that the SSN recognizer drops on purpose: the published placeholders
(123-45-6789, 987-65-4320, 078-05-1120), which it treats as examples.

In a prompt they are examples only when the text talks about the format ("SSNs look like
123-45-6789"). When the writer discloses one as a number of their own or of someone they
handle ("my SSN is 123-45-6789", "Patient SSN: 078-05-1120"), a guard must treat it as the SSN
it is presented as: that is what the client is about to send to a model, and it is the value
people type when they try the guard. A placeholder counts only right after "SSN is", "SSN:" and
the like; format talk ("an SSN such as ...") still passes.

A bare run of nine digits counts the same way right after an SSN word ("SSN 071114336",
"social security no. 071114336"): the recognizer scores a bare run 0.05 even there, below any
threshold, but labelled like that it is the number it says it is (a policy departure from
Presidio; not in `presidio_compatible` mode).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from classifiers.pii_recognizers import not_an_ssn

_PLACEHOLDER = (r"(?:123(?P<a>[- .]?)45(?P=a)6789|987(?P<b>[- .]?)65(?P=b)4320"
                r"|078(?P<c>[- .]?)05(?P=c)1120)")
_SSN_WORD = r"(?:ssn|social[- ]security(?:[- ](?:number|no\.?|#))?)"
# "<SSN word> is|was|:|=|#|- <number>" with nothing else between ("my SSN is ...",
# "Patient SSN: ..."); "SSNs look like ..." or "an SSN such as ..." never match.
_DISCLOSED = re.compile(
    r"\b" + _SSN_WORD
    + r"\s*(?:(?:is|was|=|:|#|-)\s*){1,2}[\"'(]?(?P<number>" + _PLACEHOLDER + r")\b",
    re.IGNORECASE,
)
_LABELLED_BARE = re.compile(
    r"\b" + _SSN_WORD
    + r"\s*(?:(?:is|was|=|:|#|-|no\.?)\s*){0,2}[\"'(]?(?P<number>[0-9]{9})(?![0-9])",
    re.IGNORECASE,
)
SCORE = 0.85  # as the SSN recognizer scores one with context


def disclosed_placeholders(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each placeholder SSN disclosed as someone's number."""
    for match in _DISCLOSED.finditer(text):
        yield match.start("number"), match.end("number")


def labelled_bare_numbers(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each nine-digit run written right after an SSN word, unless the SSA
    never issues it (area 000 or 666, group 00, serial 0000, published samples)."""
    for match in _LABELLED_BARE.finditer(text):
        if not not_an_ssn(match.group("number")):
            yield match.start("number"), match.end("number")
