"""Language identification with py3langid (langid.py's model: 97 languages, naive Bayes over
byte n-grams, shipped inside the package, ~0.1 ms for a chat message).

Build one detector at start-up (the model loads in about a second); `detect` is thread-safe
for concurrent reads and cheap enough to run inline for short texts. A long text costs about
0.2 s per MB (a byte-by-byte automaton walk in Python): with a `ScanBudget` the walk checks it
every `CHUNK_CHARS` bytes, carrying the automaton's state across, so the result is the same as
one walk and the scan stops at its deadline or on cancellation (`classifiers.scan`). That walk
replaces py3langid's `_raw_score` in a subclass (it reads the identifier's automaton tables);
tests compare it with the library's own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from classifiers.scan import CHUNK_CHARS, ScanBudget

_BUDGET: ContextVar[ScanBudget | None] = ContextVar("language_scan_budget", default=None)


@dataclass(frozen=True)
class LanguageGuess:
    language: str
    """ISO 639-1 code, e.g. ``en``, ``de``, ``ja``."""
    probability: float


class LanguageDetector:
    def __init__(self, languages: Collection[str] | None = None) -> None:
        from py3langid.langid import MODEL_FILE

        identifier: Any = _identifier_class().from_model_file(MODEL_FILE, norm_probs=True)
        if languages:
            unknown = set(languages) - set(identifier.labels)
            if unknown:
                raise ValueError(f"unknown language codes: {sorted(unknown)}")
            identifier.set_languages(sorted(languages))
        self._identifier = identifier

    def detect(self, text: str, budget: ScanBudget | None = None) -> LanguageGuess:
        """The most likely language; `budget` (checked every `CHUNK_CHARS` bytes of a long
        text) raises `ClassifierTimeout` or `ScanCancelled` to stop the scan."""
        token = _BUDGET.set(budget)  # read by _raw_score below, on this thread only
        try:
            language, probability = self._identifier.classify(text)
        finally:
            _BUDGET.reset(token)
        return LanguageGuess(str(language), float(probability))


def _identifier_class() -> Any:
    """py3langid's identifier whose feature walk checks the current `ScanBudget`."""
    from py3langid.langid import LanguageIdentifier

    class BudgetedIdentifier(LanguageIdentifier):
        def _raw_score(self, text: bytes) -> Any:
            budget = _BUDGET.get()
            if budget is None or len(text) <= CHUNK_CHARS:
                return super()._raw_score(text)
            # py3langid's visit_counts, one slice at a time with the state carried over:
            # the same counts, in the same first-seen order, as one walk
            nextmove, rowbase, output = self.tk_nextmove, self._rowbase, self.tk_output
            state, visits = 0, Counter[int]()
            for start in range(0, len(text), CHUNK_CHARS):
                budget.check()
                features: list[int] = []
                append = features.append
                for letter in text[start : start + CHUNK_CHARS]:
                    state = nextmove[rowbase[state] + letter]
                    feature = output[state]
                    if feature >= 0:
                        append(feature)
                visits.update(features)
            if not visits:
                return super()._raw_score(b"")  # the library's score for no features
            return self._sparse_score(visits, self.nb_ptc)

    return BudgetedIdentifier
