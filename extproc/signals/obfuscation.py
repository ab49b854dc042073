"""Spellings people use to slip words past a filter, read back as the words they spell, for the
keyword signals that ask for it (``read_obfuscated: true``: the guards' phrase lists).

- leetspeak: a word of letters and the digits or symbols that stand for letters ("m4k3 m3th",
  "1gn0r3", "pa$$w0rd") reads 0 as o, 1 as i, 3 as e, 4 and @ as a, 5 and $ as s, 7 as t. Only
  a word made of nothing else changes, so "sha256", "k8s" or "i18n" stay as they are;
- letters spelled out one at a time ("i g n o r e", "b.o.m.b", "m-e-t-h"): three or more single
  letters with the same separator read as one word, and words spelled so and set two spaces
  apart ("h o w  t o") word by word;
- and then runs of spaces as one ("ignore  all  previous");
- payloads hidden in base64, hex, binary, Morse or named ROT13, and strings assigned to
  variables, decoded or joined (``extproc.signals.encodings``) and read after the text.

This is a second text a signal also searches when the first has no match; ``None`` when the
text has none of these spellings (most texts: a few linear regex searches), computed once per
text for all the signals that read it.
"""

from __future__ import annotations

import functools
import re

from extproc.signals.encodings import decoded_payloads

_LEET = str.maketrans("013457@$", "oieastas")
# a word with at least one letter and at least one stand-in, made of nothing else
_LEET_WORD = re.compile(
    r"(?<![\w@$])(?=[a-z013457@$]*?[013457@$])(?=[013457@$]*[a-z])[a-z013457@$]{2,}(?![\w@$])",
    re.IGNORECASE,
)
# three or more single characters, each followed by the same separator as the first
# (linear: a run's first attempt matches, backtracking off a glued end, and `sub` goes on
# after it)
_SPELLED = re.compile(
    r"(?<![\w.*_-])[a-z0-9@$](?P<sep>[ .*_-])[a-z0-9@$](?:(?P=sep)[a-z0-9@$])+(?![\w@$])",
    re.IGNORECASE,
)
_SPACES = re.compile(r"[ \t]{2,}")
# in a text with this many leetspeak words, a lone 1, 4, 0 or 3 is a letter too
LEET_TEXT_WORDS = 2
_LEET_LETTER = re.compile(r"(?<![\w.,])[0134](?![\w.,])")
# words spelled out with one space between letters and two or more between words ("h o w  t o
# m a k e"): read word by word, so two-letter words count too
# (linear: tried only where a run of single characters starts, never inside one, and without
# backtracking: a long run of single-spaced letters is one failed attempt, not one per letter)
_SPACED_WORDS = re.compile(
    r"(?<!\S)(?<!\s[a-z0-9@$] )(?<!^[a-z0-9@$] )"
    r"[a-z0-9@$](?: [a-z0-9@$])*+(?: {2,}+[a-z0-9@$](?: [a-z0-9@$])*+){2,}(?!\S)",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=16)  # several guard lists read the same text of one request
def deobfuscated(text: str) -> str | None:
    """``text`` with leetspeak words and spelled-out letters read as words, runs of spaces as
    one, and the payloads of its encoded blobs (``extproc.signals.encodings``) on lines of
    their own after it; ``None`` when it has none of these."""
    payloads = decoded_payloads(text)
    if not payloads and _LEET_WORD.search(text) is None and _SPELLED.search(text) is None:
        return None
    joined = _SPACED_WORDS.sub(_join_spaced_words, text)
    joined = _SPELLED.sub(lambda match: match.group(0).replace(match.group("sep"), ""), joined)
    read, words = _LEET_WORD.subn(lambda match: match.group(0).translate(_LEET), joined)
    if words >= LEET_TEXT_WORDS:  # a text in leetspeak: "h0w d0 1 m4k3 4 ..." ("I", "a")
        read = _LEET_LETTER.sub(lambda match: match.group(0).translate(_LEET), read)
    read = _SPACES.sub(" ", read)
    if payloads:
        read = "\n".join((read, *payloads))
    return None if read == text else read


def _join_spaced_words(match: re.Match[str]) -> str:
    """"w h a t  i s  y o u r": the letters of each word joined, the words one space apart."""
    return " ".join(word.replace(" ", "") for word in re.split(r" {2,}", match.group(0)))
