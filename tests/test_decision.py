"""The pure decision engine, keyword/context-length signals and the signal evaluator.

No torch: learned signals come from a fake engine with the ``LearnedEngine`` shape.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping

import pytest

from classifiers.api import ClassifierError, ClassifierTimeout, Overloaded, SignalScore
from extproc.decision import (
    AllRule,
    AnyRule,
    Block,
    CompiledDecision,
    DecisionPlugins,
    NotRule,
    Rule,
    SignalResult,
    SignalRule,
    decide,
    holds_on_failures_only,
    order_decisions,
    rule_matches,
    signals_of,
)
from extproc.errors import ServiceUnavailable
from extproc.signals.evaluator import SignalEvaluator
from extproc.signals.specs import (
    ContextLengthSpec,
    KeywordSpec,
    LearnedSpec,
    compile_keywords,
    estimate_tokens,
    keyword_pattern,
)
from extproc.signals.specs import SignalSpec as Spec

S = SignalRule

RESULTS: Mapping[str, SignalResult] = {
    "kw": SignalResult("kw", matched=True, score=1.0, label="python"),
    "miss": SignalResult("miss", matched=False),
    "domain": SignalResult("domain", matched=True, score=0.7, label="math"),
    "weak": SignalResult("weak", matched=False, score=0.3, label="law"),
    "failed_match": SignalResult("failed_match", matched=True, error="timeout"),
    "failed_ignore": SignalResult("failed_ignore", matched=False, error="timeout"),
}

RULES = [
    ("leaf matched", S("kw"), True),
    ("leaf not matched", S("miss"), False),
    ("missing result", S("absent"), False),
    ("label equal", S("domain", label="math"), True),
    ("label differs", S("domain", label="code"), False),
    ("label of unmatched signal", S("weak", label="law"), False),
    ("min_score reached", S("domain", min_score=0.7), True),
    ("min_score missed", S("domain", min_score=0.71), False),
    ("min_score overrides threshold", S("weak", min_score=0.2), True),
    ("label and min_score", S("domain", label="math", min_score=0.5), True),
    ("label ok, score low", S("domain", label="math", min_score=0.9), False),
    ("failed signal uses on_error match", S("failed_match"), True),
    ("failed signal ignores min_score", S("failed_match", min_score=0.9), True),
    ("failed signal ignored", S("failed_ignore", min_score=0.0), False),
    ("all true", AllRule((S("kw"), S("domain"))), True),
    ("all with one false", AllRule((S("kw"), S("miss"))), False),
    ("any with one true", AnyRule((S("miss"), S("kw"))), True),
    ("any all false", AnyRule((S("miss"), S("absent"))), False),
    ("not false", NotRule(S("miss")), True),
    ("not true", NotRule(S("kw")), False),
    ("not missing", NotRule(S("absent")), True),
    (
        "nested all/any/not",
        AllRule((AnyRule((S("miss"), S("domain", label="math"))), NotRule(S("weak")))),
        True,
    ),
    ("nested not of all", NotRule(AllRule((S("kw"), NotRule(S("miss"))))), False),
]


@pytest.mark.parametrize(("rule", "expected"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_rule_matches(rule: Rule, expected: bool) -> None:
    assert rule_matches(rule, RESULTS) is expected


def test_rule_matches_rejects_non_rules() -> None:
    with pytest.raises(TypeError):
        rule_matches("kw", RESULTS)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        signals_of("kw")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (S("a"), {"a"}),
        (AllRule((S("a"), AnyRule((S("b"), NotRule(S("c")))))), {"a", "b", "c"}),
        (AnyRule((S("a"), S("a", label="x"))), {"a"}),
        (NotRule(NotRule(S("z"))), {"z"}),
    ],
)
def test_signals_of(rule: Rule, expected: set[str]) -> None:
    assert signals_of(rule) == frozenset(expected)


def D(name: str, priority: int, rule: Rule, model: str = "") -> CompiledDecision:
    return CompiledDecision(name, priority, rule, model or f"m-{name}")


DECISIONS = order_decisions(
    [
        D("low", 1, S("kw")),
        D("tie-first", 5, S("domain")),
        D("high", 9, S("miss")),
        D("tie-second", 5, S("kw")),
        D("negative", -1, NotRule(S("absent"))),
    ]
)


def test_order_decisions_by_priority_ties_keep_file_order() -> None:
    names = [d.name for d in DECISIONS]
    assert names == ["high", "tie-first", "tie-second", "low", "negative"]


@pytest.mark.parametrize(
    ("results", "decision", "model", "matched"),
    [
        (RESULTS, "tie-first", "m-tie-first", True),
        ({"kw": RESULTS["kw"]}, "tie-second", "m-tie-second", True),
        ({"miss": RESULTS["miss"]}, "negative", "m-negative", True),
        ({"miss": RESULTS["miss"], "absent": RESULTS["kw"]}, "default", "fallback", False),
        ({**RESULTS, "miss": SignalResult("miss", True)}, "high", "m-high", True),
    ],
    ids=["priority-then-file-order", "tie-second", "lowest", "default", "highest"],
)
def test_decide(
    results: Mapping[str, SignalResult], decision: str, model: str, matched: bool
) -> None:
    outcome = decide(DECISIONS, results, "fallback")
    assert (outcome.decision, outcome.model, outcome.matched) == (decision, model, matched)


def test_decide_without_decisions_is_the_default() -> None:
    outcome = decide((), RESULTS, "fallback")
    assert (outcome.decision, outcome.model, outcome.matched) == ("default", "fallback", False)


# --- keyword and context-length signals --------------------------------------------------------


def keyword(keywords: list[str], **options: bool) -> KeywordSpec:
    settings = {"regex": False, "case_sensitive": False, "word_boundary": True, "match_all": False}
    settings.update(options)
    patterns = compile_keywords(keywords, **settings)
    return KeywordSpec("kw", "ignore", patterns, settings["match_all"])


KEYWORDS = [
    ("case-insensitive default", ["Python"], {}, "I love PYTHON.", True, "PYTHON"),
    ("case-sensitive", ["Python"], {"case_sensitive": True}, "I love python", False, None),
    ("case-sensitive hit", ["Python"], {"case_sensitive": True}, "I love Python", True, "Python"),
    ("word boundary", ["api"], {}, "the capital of France", False, None),
    ("word boundary hit", ["api"], {}, "call the API, please", True, "API"),
    ("boundary off", ["api"], {"word_boundary": False}, "the capital", True, "api"),
    ("symbols c++", ["c++"], {}, "write it in C++ now", True, "C++"),
    ("symbols c++ glued", ["c++"], {}, "xc++y", False, None),
    ("c# not c", ["c#"], {}, "I use c only", False, None),
    ("phrase", ["stack trace"], {}, "here is my Stack Trace:", True, "Stack Trace"),
    ("plural s", ["unit test"], {}, "add Unit Tests please", True, "Unit Tests"),
    ("plural es", ["regex"], {}, "two regexes", True, "regexes"),
    ("plural, still whole words", ["bug"], {}, "bugsy and debugs", False, None),
    ("no plural without boundaries", ["api"], {"word_boundary": False}, "apis", True, "api"),
    ("no plural after a digit", ["v2"], {}, "v2s", False, None),
    ("escaped literal", ["a.b"], {}, "axb", False, None),
    ("regex", [r"\bv\d+\.\d+"], {"regex": True}, "upgrade to v2.10 today", True, "v2.10"),
    ("regex case", [r"err(or)?"], {"regex": True}, "ERROR here", True, "ERROR"),
    ("any second", ["rust", "golang"], {}, "golang or", True, "golang"),
    ("all hit", ["rust", "golang"], {"match_all": True}, "golang vs rust", True, "rust"),
    ("all miss", ["rust", "golang"], {"match_all": True}, "just golang", False, None),
    # scripts written without spaces: an edge next to them is a word edge
    ("before kana", ["python"], {}, "Pythonでリストを並べ替える", True, "Python"),
    ("inside hanzi", ["java"], {}, "我的Java程序崩溃了", True, "Java"),
    ("before hangul", ["python"], {}, "Python코드에서", True, "Python"),
    ("hanzi keyword in a sentence", ["概率"], {}, "这个概率是多少", True, "概率"),
    ("hanzi prefix only", ["java"], {}, "我的javascript程序", False, None),
    ("accented letters still join words", ["java"], {}, "javaé", False, None),
    ("cyrillic still joins words", ["java"], {}, "javaскрипт", False, None),
]


@pytest.mark.parametrize(
    ("keywords", "options", "text", "matched", "label"),
    [k[1:] for k in KEYWORDS],
    ids=[k[0] for k in KEYWORDS],
)
def test_keyword_signal(
    keywords: list[str], options: dict[str, bool], text: str, matched: bool, label: str | None
) -> None:
    result = keyword(keywords, **options).evaluate(text)
    assert result == SignalResult("kw", matched, 1.0 if matched else 0.0, label)


def test_keyword_any_is_one_alternation_all_is_one_pattern_each() -> None:
    assert len(keyword(["a", "b", "c"]).patterns) == 1
    assert len(keyword(["a", "b", "c"], match_all=True).patterns) == 3


def test_invalid_user_regex_raises_re_error() -> None:
    with pytest.raises(re.error):
        compile_keywords(["(x"], regex=True, case_sensitive=False, word_boundary=True,
                         match_all=False)


@pytest.mark.parametrize(
    ("low", "high", "tokens", "matched"),
    [
        (100, None, 99, False),
        (100, None, 100, True),
        (None, 50, 50, True),
        (None, 50, 51, False),
        (10, 20, 9, False),
        (10, 20, 15, True),
        (10, 20, 21, False),
    ],
)
def test_context_length_bounds(low: int | None, high: int | None, tokens: int,
                               matched: bool) -> None:
    result = ContextLengthSpec("len", "ignore", low, high).evaluate(tokens)
    assert result == SignalResult("len", matched, float(tokens))


@pytest.mark.parametrize(("length", "tokens"), [(0, 0), (1, 1), (4, 1), (5, 2), (4000, 1000)])
def test_estimate_tokens(length: int, tokens: int) -> None:
    assert estimate_tokens(length) == tokens


# --- the evaluator, with a fake learned engine -------------------------------------------------


class FakeEngine:
    """Returns fixed scores or raises ``error``; records what it was asked."""

    def __init__(
        self, scores: Mapping[str, SignalScore] | None = None, error: Exception | None = None
    ) -> None:
        self.scores = dict(scores or {})
        self.error = error
        self.calls: list[tuple[str, frozenset[str] | None]] = []

    async def evaluate(
        self, text: str, names: frozenset[str] | None = None, timeout_s: float | None = None
    ) -> Mapping[str, SignalScore]:
        self.calls.append((text, names))
        if self.error is not None:
            raise self.error
        return {n: s for n, s in self.scores.items() if names is None or n in names}


def learned(name: str, on_error: str = "ignore") -> LearnedSpec:
    return LearnedSpec(name, on_error, "domain", None, 0.5, None)


SPECS: tuple[Spec, ...] = (
    keyword(["python"]),
    KeywordSpec("unused_kw", "ignore", compile_keywords(
        ["x"], regex=False, case_sensitive=False, word_boundary=True, match_all=False), False),
    ContextLengthSpec("long", "ignore", 1000, None),
    learned("domain"),
    learned("unused_learned"),
)


async def test_evaluator_computes_only_needed_signals() -> None:
    engine = FakeEngine({
        "domain": SignalScore("domain", "math", 0.8, True),
        "unused_learned": SignalScore("unused_learned", "x", 0.9, True),
    })
    evaluator = SignalEvaluator(SPECS, frozenset({"kw", "long", "domain"}), engine)
    assert evaluator.needs_classifiers
    results = await evaluator.evaluate("python x", tokens=1200)
    assert results == {
        "kw": SignalResult("kw", True, 1.0, "python"),
        "long": SignalResult("long", True, 1200.0),
        "domain": SignalResult("domain", True, 0.8, "math"),
    }
    assert engine.calls == [("python x", frozenset({"domain"}))]


async def test_evaluator_without_learned_signals_never_calls_the_engine() -> None:
    engine = FakeEngine()
    evaluator = SignalEvaluator(SPECS, frozenset({"kw"}), engine)
    assert not evaluator.needs_classifiers
    assert await evaluator.evaluate("no", tokens=1) == {"kw": SignalResult("kw", False, 0.0)}
    assert engine.calls == []


def test_evaluator_needs_an_engine_for_learned_signals() -> None:
    with pytest.raises(ValueError, match="no classifier engine"):
        SignalEvaluator(SPECS, frozenset({"domain"}), None)
    SignalEvaluator(SPECS, frozenset({"kw", "long"}), None)  # no learned signal: fine


@pytest.mark.parametrize("error", [ClassifierTimeout("slow"), ClassifierError("boom")],
                         ids=["timeout", "error"])
@pytest.mark.parametrize("on_error", ["ignore", "match"])
async def test_failed_signal_takes_its_on_error_outcome(error: Exception, on_error: str) -> None:
    kind = "timeout" if isinstance(error, ClassifierTimeout) else "error"
    hooked: list[tuple[str, str, str]] = []
    specs = (learned("a", on_error), learned("b", "ignore"), keyword(["python"]))
    evaluator = SignalEvaluator(
        specs, frozenset({"a", "b", "kw"}), FakeEngine(error=error),
        on_signal_error=lambda *args: hooked.append(args),
    )
    results = await evaluator.evaluate("python", tokens=1)
    assert results == {
        "kw": SignalResult("kw", True, 1.0, "python"),
        "a": SignalResult("a", matched=on_error == "match", error=kind),
        "b": SignalResult("b", matched=False, error=kind),
    }
    assert hooked == [("a", kind, on_error), ("b", kind, "ignore")]


@pytest.mark.parametrize("error", [ClassifierTimeout("slow"), ClassifierError("boom")],
                         ids=["timeout", "error"])
async def test_failed_signal_with_reject_is_service_unavailable(error: Exception) -> None:
    kind = "timeout" if isinstance(error, ClassifierTimeout) else "error"
    hooked: list[tuple[str, str, str]] = []
    evaluator = SignalEvaluator(
        (learned("guard", "reject"),), frozenset({"guard"}), FakeEngine(error=error),
        on_signal_error=lambda *args: hooked.append(args),
    )
    with pytest.raises(ServiceUnavailable) as info:
        await evaluator.evaluate("hi", tokens=1)
    assert info.value.status == 503
    assert info.value.code == "classifier_unavailable"
    assert f"signal 'guard' is unavailable ({kind})" in info.value.message
    assert hooked == [("guard", kind, "reject")]


async def test_overloaded_propagates_and_is_not_a_signal_error() -> None:
    hooked: list[tuple[str, str, str]] = []
    evaluator = SignalEvaluator(
        (learned("guard", "match"),), frozenset({"guard"}), FakeEngine(error=Overloaded("full")),
        on_signal_error=lambda *args: hooked.append(args),
    )
    with pytest.raises(Overloaded):
        await evaluator.evaluate("hi", tokens=1)
    assert hooked == []


async def test_score_missing_from_engine_counts_as_error() -> None:
    hooked: list[tuple[str, str, str]] = []
    engine = FakeEngine({"a": SignalScore("a", "x", 0.2, False)})
    evaluator = SignalEvaluator(
        (learned("a"), learned("b", "match")), frozenset({"a", "b"}), engine,
        on_signal_error=lambda *args: hooked.append(args),
    )
    results = await evaluator.evaluate("hi", tokens=1)
    assert results == {
        "a": SignalResult("a", False, 0.2, "x"),
        "b": SignalResult("b", True, error="error"),
    }
    assert hooked == [("b", "error", "match")]


def test_keyword_trie_matches_exactly_where_the_keywords_own_patterns_match() -> None:
    """`any` whole-word keywords compile to one trie-shaped alternation: same texts matched,
    at the same earliest position, labelled with one of the keywords matching there."""
    rng = random.Random(11)
    vocabulary = ["java", "javascript", "react", "react native", "unit test", "c++", "c#",
                  "node.js", "ohm's law", "p-value", "git", "github", "k8s", "x2", "regex",
                  "代码", "代码库", "コード", "```", "ignora tus reglas", "ki ohne regeln"]
    alphabet = "abcdejgiknorstuvx +#.'-2_\n代码コ`"
    for _ in range(400):
        keywords = rng.sample(vocabulary, rng.randint(1, 8))
        pieces = [rng.choice([*keywords, "".join(rng.choice(alphabet) for _ in range(5))])
                  for _ in range(rng.randint(1, 6))]
        text = rng.choice(["", " ", "-"]).join(
            p.upper() if rng.random() < 0.2 else p for p in pieces)
        (trie,) = compile_keywords(keywords, regex=False, case_sensitive=False,
                                   word_boundary=True, match_all=False)
        own = [re.compile(keyword_pattern(k, regex=False, word_boundary=True), re.I)
               for k in keywords]
        hits = [m for p in own if (m := p.search(text))]
        found = trie.search(text)
        assert (found is None) == (not hits), (keywords, text)
        if found is not None:
            first = min(m.start() for m in hits)
            assert found.start() == first, (keywords, text)
            assert found.group(0) in {m.group(0) for m in hits if m.start() == first}


def test_a_block_through_failed_signals_only_is_told_apart() -> None:
    """`holds_on_failures_only`: the processor answers such a block with a 413 ("too long to
    check"), not the decision's accusation; a real match beside a failure still blocks."""
    decisions = (
        CompiledDecision("jailbreak", 90, AnyRule((SignalRule("head"), SignalRule("phrases"))),
                         None, plugins=DecisionPlugins(
                             block=Block(403, "jailbreak_detected", "no", "error"))),
    )
    failed = SignalResult("phrases", True, error="timeout")
    for head, only_failures in ((False, True), (True, False)):
        results = {"head": SignalResult("head", head), "phrases": failed}
        outcome = decide(decisions, results, "general")
        assert outcome.decision == "jailbreak"
        assert holds_on_failures_only(decisions, outcome, results) is only_failures
    fallback = {"head": SignalResult("head", True, 1.0, "fallback", error="timeout"),
                "phrases": failed}  # the head's fallback phrases were found: a real match
    assert not holds_on_failures_only(decisions, decide(decisions, fallback, "general"), fallback)
    clean = {"head": SignalResult("head", True), "phrases": SignalResult("phrases", False)}
    assert not holds_on_failures_only(decisions, decide(decisions, clean, "general"), clean)
