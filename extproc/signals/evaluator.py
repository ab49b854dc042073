"""Runs every signal some decision needs for one request.

Keyword and context-length signals are computed inline (microseconds); learned signals go to
the classifier engine in one call, so they share one encoder pass. A failed learned signal
takes its configured ``on_error`` outcome and the failure is reported to ``on_signal_error``
so it is counted, never silent. ``Overloaded`` is not handled here: the router decides what an
overloaded classifier means for the whole request (``router.on_overload``).

Keyword, PII and language scans run inline on short texts and on a worker thread for long
ones, bounded by ``scan_timeout_s`` of CPU time for all of a request's long scans (a request
waiting longer than ``scan_wait_s`` for them gets ``Overloaded``): past it the signal fails
with kind ``timeout`` like a learned signal whose classifier did not answer in time, and a
scan whose request was cancelled (Envoy reset the stream) stops at its next chunk instead of
running on (``classifiers.scan``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

from classifiers.api import ClassifierError, ClassifierTimeout, Overloaded, SignalScore
from classifiers.scan import CpuAccount, ScanBudget
from extproc.decision import FALLBACK_LABEL, SignalResult
from extproc.errors import ServiceUnavailable
from extproc.opaque_tokens import mask_opaque
from extproc.signals.specs import (
    KEYWORD_INLINE_CHARS,
    ContextLengthSpec,
    KeywordSpec,
    LanguageSpec,
    LearnedSpec,
    PiiSpec,
    SignalSpec,
)

if TYPE_CHECKING:
    from classifiers.language import LanguageDetector
    from classifiers.pii import PiiDetector

_INLINE_TEXT_CHARS = 512
DEFAULT_SCAN_TIMEOUT_S = 1.0
DEFAULT_SCAN_WAIT_S = 2.5

T = TypeVar("T")


async def _detect(
    detect: Callable[[str, ScanBudget | None], T], text: str, account: CpuAccount, wait_s: float,
) -> T:
    """Pattern and n-gram detectors are cheap for chat-sized text; long texts go to a thread
    so one huge prompt cannot stall every other request on the event loop. The scan may use
    what is left of ``account``, the CPU time the request's long scans share (then
    ``ClassifierTimeout``: the text is too long to scan, the signal's ``on_error``; a single
    budget for the request, so a huge text gets that answer in about the same time however
    many signals read it); the wait for it is bounded by ``wait_s`` of wall time
    (then ``Overloaded``: the host is too busy to give the scan its time, which
    ``router.on_overload`` answers, 429 with the defaults, rather than a refusal the client
    would not retry). When the wait ends early, the budget is cancelled and the thread stops
    before its next chunk."""
    if len(text) <= _INLINE_TEXT_CHARS:
        return detect(text, None)
    budget = ScanBudget(account.seconds, account)
    try:
        return await asyncio.wait_for(asyncio.to_thread(detect, text, budget), wait_s)
    except TimeoutError as err:
        raise Overloaded(f"a scan got {budget.chunks} chunks done in {wait_s * 1000:.0f} ms "
                         f"of waiting") from err
    finally:
        budget.cancel()  # nothing to stop when the scan finished


async def _named(name: str, call: Awaitable[SignalResult]) -> dict[str, SignalResult]:
    return {name: await call}


async def _together(
    calls: Sequence[Awaitable[dict[str, SignalResult]]],
) -> list[dict[str, SignalResult]]:
    """Every call's results, side by side. The first failure (``Overloaded``, a rejecting
    signal) is raised and cancels the rest: a scan then stops at its next chunk."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()  # nothing to do for the finished ones


def _language_detector(spec: LanguageSpec) -> LanguageDetector:
    from classifiers.language import LanguageDetector

    return LanguageDetector(spec.languages)


def _pii_detector(spec: PiiSpec) -> PiiDetector:
    from classifiers.pii import PiiDetector  # only when configured

    return PiiDetector(spec.entity_types)


class LearnedEngine(Protocol):
    async def evaluate(
        self, text: str, names: frozenset[str] | None = None, timeout_s: float | None = None
    ) -> Mapping[str, SignalScore]: ...


TextFor = Callable[[str], str]
"""The request's text for a ``text_source`` name (``last_user``, ``all_user``, ...)."""

SignalErrorHook = Callable[[str, str, str], None]
"""Called with (signal name, error kind, outcome) for each signal that failed."""


class SignalEvaluator:
    def __init__(
        self,
        specs: Sequence[SignalSpec],
        needed: frozenset[str],
        engine: LearnedEngine | None,
        on_signal_error: SignalErrorHook | None = None,
        on_windows: Callable[[str, int], None] | None = None,
        scan_timeout_s: float = DEFAULT_SCAN_TIMEOUT_S,
        scan_wait_s: float = DEFAULT_SCAN_WAIT_S,
    ) -> None:
        """``scan_timeout_s``: the CPU time a keyword, PII or language scan of one long text
        may take; ``scan_wait_s``: how long a request waits for it (``_detect``)."""
        self._keywords = tuple(s for s in specs if isinstance(s, KeywordSpec) and s.name in needed)
        self._lengths = tuple(
            s for s in specs if isinstance(s, ContextLengthSpec) and s.name in needed
        )
        self._learned = tuple(s for s in specs if isinstance(s, LearnedSpec) and s.name in needed)
        self._learned_names = frozenset(s.name for s in self._learned)
        self._pii = tuple((s, _pii_detector(s)) for s in specs
                          if isinstance(s, PiiSpec) and s.name in needed)
        self._languages = tuple((s, _language_detector(s)) for s in specs
                                if isinstance(s, LanguageSpec) and s.name in needed)
        if self._learned and engine is None:
            raise ValueError("learned signals are configured but no classifier engine was given")
        # only keyword signals, all on the request's default text: no per-source texts
        self._keywords_only = not (self._lengths or self._learned or self._pii
                                   or self._languages) and all(
            s.text_source is None for s in self._keywords)
        self._engine = engine
        self._on_signal_error = on_signal_error
        self._on_windows = on_windows  # encoder windows scored per request, per signal
        self._scan_timeout_s = scan_timeout_s
        self._scan_wait_s = max(scan_wait_s, scan_timeout_s)

    @property
    def needs_classifiers(self) -> bool:
        return bool(self._learned)

    @property
    def needs_tokens(self) -> bool:
        """Whether ``evaluate`` reads ``tokens`` (only context-length signals do)."""
        return bool(self._lengths)

    async def evaluate(
        self, text: str, tokens: int, text_for: TextFor | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, SignalResult]:
        """Results for every needed signal. ``text`` is what signals read by default;
        a signal with its own ``text_source`` reads ``text_for(source)``. Learned signals
        reading the same text share one encoder pass, waited for at most ``timeout_s`` (None:
        the classifiers' own timeout), then they fail with kind ``timeout``. Raises
        ``Overloaded`` (the caller decides) or ``ServiceUnavailable`` when a failed signal is
        ``on_error: reject``."""
        if self._keywords_only and len(text) <= KEYWORD_INLINE_CHARS:
            return {s.name: s.evaluate(text) for s in self._keywords}
        texts: dict[str | None, str] = {None: text}

        def pick(source: str | None) -> str:
            if source not in texts:  # None (the default source) is always there
                texts[source] = text if text_for is None or source is None else text_for(source)
            return texts[source]

        results: dict[str, SignalResult] = {}
        for length in self._lengths:
            results[length.name] = length.evaluate(tokens)
        # scans of long texts run on threads while the learned signals run, so a huge prompt
        # costs the longer of the two, not their sum
        waits = await self._scans(pick, results)
        if self._learned and self._engine is not None:
            groups: dict[str, list[LearnedSpec]] = {}
            for learned in self._learned:
                groups.setdefault(pick(learned.text_source), []).append(learned)
            waits.extend(self._evaluate_learned(t, specs, timeout_s)
                         for t, specs in groups.items())
        if len(waits) == 1:
            results.update(await waits[0])
        elif waits:
            for part in await _together(waits):
                results.update(part)
        return results

    async def _scans(
        self, pick: Callable[[str | None], str], results: dict[str, SignalResult]
    ) -> list[Awaitable[dict[str, SignalResult]]]:
        """Keyword, PII and language results for short texts (inline, into ``results``); the
        scans of long texts (keywords: over ``KEYWORD_INLINE_CHARS``), to be awaited (started
        only once every inline one is done, so a rejecting signal leaves no scan behind)."""
        slow: list[tuple[str, Callable[[], Awaitable[SignalResult]]]] = []
        account = CpuAccount(self._scan_timeout_s)  # the long scans' CPU time, together
        for keyword in self._keywords:
            text = pick(keyword.text_source)
            if len(text) > KEYWORD_INLINE_CHARS:
                slow.append((keyword.name,
                             partial(self._evaluate_keywords, keyword, text, account)))
            else:
                results[keyword.name] = keyword.evaluate(text)
        for spec, detector in self._pii:
            text = pick(spec.text_source)
            if len(text) > _INLINE_TEXT_CHARS:
                slow.append((spec.name,
                             partial(self._evaluate_pii, spec, detector, text, account)))
            else:
                results[spec.name] = await self._evaluate_pii(spec, detector, text, account)
        for language, language_detector in self._languages:
            text = pick(language.text_source)
            if len(text) > _INLINE_TEXT_CHARS:
                slow.append((language.name, partial(self._evaluate_language, language,
                                                    language_detector, text, account)))
            else:
                results[language.name] = await self._evaluate_language(
                    language, language_detector, text, account)
        return [_named(name, scan()) for name, scan in slow]

    async def _evaluate_keywords(self, spec: KeywordSpec, text: str,
                                 account: CpuAccount) -> SignalResult:
        try:
            return await _detect(spec.scan, text, account, self._scan_wait_s)
        except ClassifierTimeout:
            return self._failed("timeout", (spec,))[spec.name]

    async def _evaluate_language(self, spec: LanguageSpec, detector: LanguageDetector,
                                 text: str, account: CpuAccount) -> SignalResult:
        try:
            guess = await _detect(detector.detect, text, account, self._scan_wait_s)
        except ClassifierTimeout:
            return self._failed("timeout", (spec,))[spec.name]
        except Overloaded:
            raise  # the router's to answer (`_detect`)
        except Exception:  # a detector bug must take the signal's on_error path
            return self._failed("error", (spec,))[spec.name]
        return SignalResult(spec.name, guess.probability >= spec.threshold, guess.probability,
                            guess.language)

    async def pii(
        self, name: str, text: str, text_for: TextFor | None = None
    ) -> SignalResult | None:
        """Just the pii signal ``name`` (for models' ``pii_allowed`` on explicit requests)."""
        for spec, detector in self._pii:
            if spec.name == name:
                if spec.text_source is not None and text_for is not None:
                    text = text_for(spec.text_source)
                return await self._evaluate_pii(spec, detector, text,
                                                CpuAccount(self._scan_timeout_s))
        return None

    async def _evaluate_pii(self, spec: PiiSpec, detector: PiiDetector, text: str,
                            account: CpuAccount) -> SignalResult:
        try:
            findings = await _detect(detector.detect, text, account, self._scan_wait_s)
        except ClassifierTimeout:
            return self._failed("timeout", (spec,))[spec.name]
        except Overloaded:
            raise  # the router's to answer (`_detect`)
        except Exception:  # a detector bug must take the signal's on_error path, not the request
            return self._failed("error", (spec,))[spec.name]
        kept = [f for f in findings if f.score >= spec.threshold]
        if not kept:
            return SignalResult(spec.name, False)
        best = max(kept, key=lambda f: f.score)
        return SignalResult(spec.name, True, best.score, best.entity_type,
                            labels=frozenset(f.entity_type for f in kept))

    async def _evaluate_learned(
        self, text: str, specs: Sequence[LearnedSpec], timeout_s: float | None = None
    ) -> dict[str, SignalResult]:
        assert self._engine is not None
        names = (self._learned_names if len(specs) == len(self._learned)
                 else frozenset(s.name for s in specs))
        try:
            scores = await self._engine.evaluate(text, names, timeout_s)
        except Overloaded:
            raise
        except ClassifierTimeout:
            return self._failed("timeout", specs, text)
        except ClassifierError:
            return self._failed("error", specs, text)
        results = {}
        for spec in specs:
            score = scores.get(spec.name)
            if score is None:
                results.update(self._failed("error", (spec,), text))
                continue
            results[spec.name] = SignalResult(spec.name, score.matched, score.score, score.label)
            if self._on_windows is not None:
                self._on_windows(spec.name, score.windows)
        await self._recheck_opaque(text, specs, results, timeout_s)
        return results

    async def _recheck_opaque(
        self, text: str, specs: Sequence[LearnedSpec], results: dict[str, SignalResult],
        timeout_s: float | None,
    ) -> None:
        """A jailbreak match on a text holding UUIDs, hashes, JWTs or base64 blobs stands only
        if the text with those tokens read as "ID" still matches (``extproc.opaque_tokens``).
        A second pass that cannot be had keeps the first result: the request stays refused."""
        matched = frozenset(s.name for s in specs if s.kind == "jailbreak"
                            and results[s.name].matched and results[s.name].error is None)
        if not matched:
            return
        masked = mask_opaque(text)
        if masked is text:
            return
        assert self._engine is not None
        try:
            again = await self._engine.evaluate(masked, matched, timeout_s)
        except (Overloaded, ClassifierTimeout, ClassifierError):
            return
        for name in matched:
            score = again.get(name)
            if score is not None and not score.matched:
                results[name] = SignalResult(name, False, score.score, score.label)

    def _failed(
        self, kind: str,
        specs: Sequence[LearnedSpec | PiiSpec | LanguageSpec | KeywordSpec] | None = None,
        text: str | None = None,
    ) -> dict[str, SignalResult]:
        """Each spec's ``on_error`` outcome; a learned spec with ``fallback_keywords`` found
        in ``text`` matches instead (its label ``fallback``)."""
        results = {}
        for spec in specs if specs is not None else self._learned:
            fallback = getattr(spec, "fallback", None)
            hit = fallback.search(text) if fallback is not None and text else None
            if self._on_signal_error is not None:
                self._on_signal_error(spec.name, kind,
                                      "fallback" if hit is not None else spec.on_error)
            if hit is not None:
                results[spec.name] = SignalResult(spec.name, True, 1.0, FALLBACK_LABEL,
                                                  error=kind)
                continue
            if spec.on_error == "reject":
                raise ServiceUnavailable(
                    f"signal '{spec.name}' is unavailable ({kind}); try again later"
                )
            results[spec.name] = SignalResult(
                spec.name, matched=spec.on_error == "match", error=kind
            )
        return results
