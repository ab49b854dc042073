"""The decision engine: a pure function from signal results to a decision and target model.

No torch, no gRPC, no I/O: decisions are compiled once from config and evaluated with
lookups, so they can be tested table-driven and cost microseconds per request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from extproc.names import DEFAULT_DECISION

# The label of a failed learned signal that matched on its ``fallback_keywords``
FALLBACK_LABEL = "fallback"


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
    labels: frozenset[str] = frozenset()
    """Every label present (e.g. all PII entity types found); ``label`` is the top one."""


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
    if isinstance(rule, SignalRule):  # the common leaf, without match's destructuring
        result = results.get(rule.signal)
        if result is None:
            return False
        if result.error is not None:
            return result.matched  # the signal's on_error outcome, whatever the leaf asks
        label = rule.label
        if label is not None and result.label != label and label not in result.labels:
            return False
        if rule.min_score is not None:
            return result.score >= rule.min_score
        return result.matched
    match rule:
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
class Block:
    status: int
    code: str
    message: str
    respond: str  # "error" or "completion"


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    text: str
    mode: str  # "insert" or "replace"


@dataclass(frozen=True, slots=True)
class DecisionPlugins:
    block: Block | None = None
    system_prompt: SystemPrompt | None = None
    set_headers: tuple[tuple[str, str], ...] = ()


NO_PLUGINS = DecisionPlugins()


@dataclass(frozen=True, slots=True)
class CompiledDecision:
    name: str
    priority: int
    rule: Rule
    model: str | None
    shadow: bool = False
    plugins: DecisionPlugins = NO_PLUGINS


@dataclass(frozen=True, slots=True)
class Outcome:
    decision: str
    model: str | None
    """None only for a decision that blocks."""
    matched: bool
    plugins: DecisionPlugins = NO_PLUGINS
    shadowed: tuple[str, ...] = ()
    """Shadow decisions that matched on the way (computed, logged and counted, not applied)."""


def order_decisions(decisions: Sequence[CompiledDecision]) -> tuple[CompiledDecision, ...]:
    """Highest priority first; equal priorities keep their order in the file."""
    return tuple(sorted(decisions, key=lambda d: -d.priority))


def decide(
    decisions: Sequence[CompiledDecision],
    results: Mapping[str, SignalResult],
    default_model: str,
) -> Outcome:
    """The first enforcing decision (in priority order) whose rule holds, else the default
    model; matching shadow decisions on the way are reported, not applied."""
    shadowed: list[str] = []
    for decision in decisions:
        if not rule_matches(decision.rule, results):
            continue
        if decision.shadow:
            shadowed.append(decision.name)
            continue
        return Outcome(decision.name, decision.model, True, decision.plugins, tuple(shadowed))
    return Outcome(DEFAULT_DECISION, default_model, False, NO_PLUGINS, tuple(shadowed))


def holds_on_failures_only(
    decisions: Sequence[CompiledDecision], outcome: Outcome, results: Mapping[str, SignalResult],
) -> bool:
    """Whether ``outcome``'s decision holds only through signals that failed and matched by
    their ``on_error: match`` (a text too long to scan): read as unmatched, its rule fails.
    A failed learned signal that matched on its ``fallback_keywords`` found them: it counts."""
    if not any(matched_on_failure(r) for r in results.values()):
        return False
    clean = {name: replace(r, matched=False) if matched_on_failure(r) else r
             for name, r in results.items()}
    return not any(d.name == outcome.decision and rule_matches(d.rule, clean) for d in decisions)


def matched_on_failure(result: SignalResult) -> bool:
    """Matched only as the failed signal's ``on_error: match`` (fallback phrases found count
    as found)."""
    return result.matched and result.error is not None and result.label != FALLBACK_LABEL
