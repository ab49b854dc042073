"""Language identification with py3langid (langid.py's model: 97 languages, naive Bayes over
byte n-grams, shipped inside the package, ~0.1 ms for a chat message).

Build one detector at start-up (the model loads in about a second); `detect` is thread-safe
for concurrent reads and cheap enough to run inline for short texts.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LanguageGuess:
    language: str
    """ISO 639-1 code, e.g. ``en``, ``de``, ``ja``."""
    probability: float


class LanguageDetector:
    def __init__(self, languages: Collection[str] | None = None) -> None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        identifier: Any = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        if languages:
            unknown = set(languages) - set(identifier.labels)
            if unknown:
                raise ValueError(f"unknown language codes: {sorted(unknown)}")
            identifier.set_languages(sorted(languages))
        self._identifier = identifier

    def detect(self, text: str) -> LanguageGuess:
        language, probability = self._identifier.classify(text)
        return LanguageGuess(str(language), float(probability))
