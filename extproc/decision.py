"""The decision engine: a pure function from signal results to a decision and target model.

No torch, no gRPC, no I/O: decisions are compiled once from config and evaluated with
lookups, so they can be tested table-driven and cost microseconds per request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from extproc.names import DEFAULT_DECISION


@dataclass(frozen=True, slots=True)
class SignalResult:
    """What one signal said about one request.

    ``matched`` already folds in the signal's threshold and, for a failed signal, its
    ``on_error`` outcome; ``error`` names what went wrong (``overloaded``, ``timeout``, ...).
    """

    name: str
    matched: bool
    score: float = 0.0
    label: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SignalRule:
    signal: str
    label: str | None = None
    min_score: float | None = None


@dataclass(frozen=True, slots=True)
class AllRule:
    children: tuple[Rule, ...]


@dataclass(frozen=True, slots=True)
class AnyRule:
    children: tuple[Rule, ...]


@dataclass(frozen=True, slots=True)
class NotRule:
    child: Rule


Rule = SignalRule | AllRule | AnyRule | NotRule


def rule_matches(rule: Rule, results: Mapping[str, SignalResult]) -> bool:
    """True when ``rule`` holds; a signal without a result counts as not matched."""
    match rule:
        case SignalRule(signal, label, min_score):
            result = results.get(signal)
            if result is None:
                return False
            if result.error is not None:
                return result.matched  # the signal's on_error outcome, whatever the leaf asks
            if label is not None and result.label != label:
                return False
            if min_score is not None:
                return result.score >= min_score
            return result.matched
        case AllRule(children):
            return all(rule_matches(child, results) for child in children)
        case AnyRule(children):
            return any(rule_matches(child, results) for child in children)
        case NotRule(child):
            return not rule_matches(child, results)
    raise TypeError(f"not a rule: {rule!r}")


def signals_of(rule: Rule) -> frozenset[str]:
    """Names of every signal a rule tree references (so only those are computed)."""
    match rule:
        case SignalRule(signal):
            return frozenset((signal,))
        case AllRule(children) | AnyRule(children):
            return frozenset().union(*(signals_of(child) for child in children))
        case NotRule(child):
            return signals_of(child)
    raise TypeError(f"not a rule: {rule!r}")


@dataclass(frozen=True, slots=True)
class CompiledDecision:
    name: str
    priority: int
    rule: Rule
    model: str


@dataclass(frozen=True, slots=True)
class Outcome:
    decision: str
    model: str
    matched: bool


def order_decisions(decisions: Sequence[CompiledDecision]) -> tuple[CompiledDecision, ...]:
    """Highest priority first; equal priorities keep their order in the file."""
    return tuple(sorted(decisions, key=lambda d: -d.priority))


def decide(
    decisions: Sequence[CompiledDecision],
    results: Mapping[str, SignalResult],
    default_model: str,
) -> Outcome:
    """The first decision (in priority order) whose rule holds, else the default model."""
    for decision in decisions:
        if rule_matches(decision.rule, results):
            return Outcome(decision.name, decision.model, matched=True)
    return Outcome(DEFAULT_DECISION, default_model, matched=False)
