"""Config loading: valid files compile, every problem of a bad file is named by its YAML path."""

from __future__ import annotations

from pathlib import Path

import pytest

from extproc.cli import main
from extproc.config import ConfigError, load_config, load_config_text
from extproc.config.runtime import cluster_name_for
from extproc.decision import SignalResult, decide

DEFAULT_YAML = Path(__file__).resolve().parent.parent / "config" / "default.yaml"

# The smallest useful config: two models, one keyword signal, one decision.
MINIMAL = """\
providers:
  defaults: {model: small}
  models:
    - name: small
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{name: s1, endpoint: "127.0.0.1:8101"}]
    - name: coder
      provider_model_id: Qwen/Qwen2.5-Coder-7B-Instruct
      backend_refs: [{name: c1, endpoint: "127.0.0.1:8103"}]
signals:
  - {name: code, type: keyword, keywords: [python, "c++"]}
decisions:
  - {name: code, rules: {signal: code}, model: coder}
"""


def with_lines(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def errors_of(text: str) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as info:
        load_config_text(text)
    return info.value.errors


# --- valid configs ---------------------------------------------------------------------------


def test_minimal_config_routes_by_keyword() -> None:
    assert len(MINIMAL.splitlines()) < 30
    config = load_config_text(MINIMAL)
    assert config.default_model.name == "small"
    assert config.auto_names == frozenset({"auto"})
    assert config.public_model_names == ("auto", "small", "coder")
    assert config.models["coder"].cluster == "coder"
    assert config.models["coder"].endpoints[0].port == 8103
    (spec,) = config.signals
    hit = spec.evaluate("Write a Python function")  # type: ignore[call-arg,arg-type]
    miss = spec.evaluate("Tell me a story")  # type: ignore[call-arg,arg-type]
    assert (hit.matched, miss.matched) == (True, False)
    outcome = decide(config.decisions, {"code": hit}, config.default_model.name)
    assert (outcome.decision, outcome.model, outcome.matched) == ("code", "coder", True)
    outcome = decide(config.decisions, {"code": miss}, config.default_model.name)
    assert (outcome.decision, outcome.model, outcome.matched) == ("default", "small", False)


def test_default_yaml_loads() -> None:
    config = load_config(DEFAULT_YAML)
    assert set(config.models) == {"general", "reasoning", "code"}
    assert config.auto_names == frozenset({"auto", "vllm-sr/auto"})
    # highest priority first: the guards, then the routes
    assert [d.name for d in config.decisions] == [
        "pii", "self_harm", "jailbreak", "harmful_request", "tool_injection", "code",
        "reasoning"]
    assert config.default_model.name == "general"
    long = {"long_context": SignalResult("long_context", True, 7000.0)}
    assert decide(config.decisions, long, "general").model == "reasoning"
    math = {"domain": SignalResult("domain", True, 0.8, "math")}
    assert decide(config.decisions, math, "general").model == "reasoning"
    # the head's score refuses a text with a jailbreak's words (`attack_cues`)
    guarded = {**math, "jailbreak": SignalResult("jailbreak", True, 0.99),
               "attack_cues": SignalResult("attack_cues", True, 1.0, "you")}
    assert decide(config.decisions, {**guarded, "attack_cues": SignalResult(
        "attack_cues", False, 0.0)}, "general").decision == "reasoning"
    outcome = decide(config.decisions, guarded, "general")
    assert outcome.decision == "jailbreak"
    assert outcome.plugins.block is not None


def test_long_prompts_reach_the_classifier_settings() -> None:
    from classifiers.api import LongPromptSettings
    from extproc.classifier_binding import classifier_settings

    # the embedded defaults turn it on; a config without the section keeps one encoder
    assert classifier_settings(load_config(DEFAULT_YAML)).long_prompts == LongPromptSettings()
    assert classifier_settings(load_config_text(MINIMAL)).long_prompts is None
    text = MINIMAL + "classifiers: {long_prompts: {min_tokens: 300, quantize_int8: false}}\n"
    assert classifier_settings(load_config_text(text)).long_prompts == LongPromptSettings(
        min_tokens=300, quantize_int8=False
    )


def test_batching_workers_reach_the_classifier_settings() -> None:
    from extproc.classifier_binding import classifier_settings

    assert classifier_settings(load_config_text(MINIMAL)).batching.workers == 0  # auto
    text = MINIMAL + "classifiers: {batching: {workers: 3}}\n"
    assert classifier_settings(load_config_text(text)).batching.workers == 3


def test_trace_setting_reaches_the_classifier_settings() -> None:
    from extproc.classifier_binding import classifier_settings

    default = classifier_settings(load_config_text(MINIMAL))
    assert default.trace == "cpu" and default.traces("cpu") and not default.traces("cuda")
    for value, cpu, cuda in (("always", True, True), ("never", False, False)):
        text = MINIMAL + f"classifiers: {{trace: {value}}}\n"
        settings = classifier_settings(load_config_text(text))
        assert (settings.traces("cpu"), settings.traces("cuda")) == (cpu, cuda)


def test_explicit_model_resolves_by_name_or_unique_provider_id() -> None:
    config = load_config_text(MINIMAL)
    assert config.resolve_explicit("coder") is config.models["coder"]
    assert config.resolve_explicit("Qwen/Qwen3-0.6B") is config.models["small"]
    assert config.resolve_explicit("nope") is None


# --- invalid configs -------------------------------------------------------------------------

INVALID = [
    pytest.param(
        MINIMAL + "  - {name: other, rules: {signal: code}, model: x}\n",
        "decisions[1].model: unknown model 'x'",
        id="unknown-model",
    ),
    pytest.param(
        with_lines(
            MINIMAL, "rules: {signal: code}", "rules: {any: [{signal: code}, {signal: nope}]}"
        ),
        "decisions[0].rules.any[1].signal: unknown signal 'nope'",
        id="unknown-signal-nested-any",
    ),
    pytest.param(
        with_lines(MINIMAL, "rules: {signal: code}", "rules: {all: [{not: {signal: nope}}]}"),
        "decisions[0].rules.all[0].not.signal: unknown signal 'nope'",
        id="unknown-signal-under-not",
    ),
    pytest.param(
        with_lines(MINIMAL, "    - name: coder", "    - name: small"),
        "providers.models[1].name: duplicate model name 'small'",
        id="duplicate-model",
    ),
    pytest.param(
        with_lines(
            MINIMAL,
            "decisions:",
            "  - {name: code, type: keyword, keywords: [java]}\ndecisions:",
        ),
        "signals[1].name: duplicate signal name 'code'",
        id="duplicate-signal",
    ),
    pytest.param(
        MINIMAL + "  - {name: code, rules: {signal: code}, model: small}\n",
        "decisions[1].name: duplicate decision name 'code'",
        id="duplicate-decision",
    ),
    pytest.param(
        with_lines(MINIMAL, 'keywords: [python, "c++"]', "keywords: ['(unclosed'], regex: true"),
        "signals[0].keywords: invalid regular expression: "
        "missing ), unterminated subpattern at position 0",
        id="bad-regex",
    ),
    pytest.param(
        with_lines(MINIMAL, "defaults: {model: small}", "defaults: {model: large}"),
        "providers.defaults.model: unknown model 'large'",
        id="unknown-default-model",
    ),
    pytest.param(
        with_lines(MINIMAL, "      provider_model_id: Qwen/Qwen3-0.6B\n",
                   "      provider_model_id: Qwen/Qwen3-0.6B\n      wieght: 2\n"),
        "providers.models[0].wieght: Extra inputs are not permitted",
        id="typo-extra-key",
    ),
    pytest.param(
        with_lines(MINIMAL, "{name: s1,", "{name: s1, wieght: 2,"),
        "providers.models[0].backend_refs[0].wieght: Extra inputs are not permitted",
        id="typo-in-backend-ref",
    ),
    pytest.param(
        with_lines(MINIMAL, "type: keyword,", "type: keyword, keyword: [x],"),
        "signals[0].keyword: Extra inputs are not permitted",
        id="typo-in-signal-drops-union-tag",
    ),
    pytest.param(
        with_lines(
            MINIMAL, "rules: {signal: code}", "rules: {signal: code, any: [{signal: code}]}"
        ),
        "decisions[0].rules: Value error, a rule has exactly one of: signal, all, any, not",
        id="rule-with-two-kinds",
    ),
    pytest.param(
        with_lines(MINIMAL, "rules: {signal: code}", "rules: {any: []}"),
        "decisions[0].rules: Value error, 'any' needs at least one rule",
        id="empty-any",
    ),
    pytest.param(
        with_lines(
            MINIMAL,
            "decisions:",
            "  - {name: len, type: context_length, min_tokens: 9, max_tokens: 2}\ndecisions:",
        ),
        "signals[1]: Value error, min_tokens is greater than max_tokens",
        id="min-over-max-tokens",
    ),
    pytest.param(
        with_lines(MINIMAL, "    - name: coder", "    - name: small/v2").replace(
            "model: coder", "model: small/v2"
        ).replace("    - name: small\n", "    - name: small_v2\n").replace(
            "{model: small}", "{model: small_v2}"
        ),
        "providers.models[1].name: 'small/v2' and 'small_v2' map to the same Envoy cluster "
        "name 'small_v2'",
        id="two-models-one-cluster",
    ),
    pytest.param(
        MINIMAL + "router: {auto_model_names: [auto, coder]}\n",
        "router.auto_model_names[1]: 'coder' is also a model name",
        id="auto-name-is-a-model",
    ),
    pytest.param(
        with_lines(MINIMAL, '"127.0.0.1:8101"', '"127.0.0.1"'),
        "providers.models[0].backend_refs[0].endpoint: String should match pattern",
        id="endpoint-without-port",
    ),
    pytest.param(
        with_lines(MINIMAL, '"127.0.0.1:8101"', '"127.0.0.1:99999"'),
        "providers.models[0].backend_refs[0].endpoint: Value error, port must be 0-65535",
        id="endpoint-port-out-of-range",
    ),
    pytest.param(
        with_lines(MINIMAL, '{name: s1, endpoint: "127.0.0.1:8101"}',
                   '{name: s1, endpoint: "127.0.0.1:8101"}, {name: s1, endpoint: "h:1"}'),
        "providers.models[0].backend_refs[1].name: duplicate 's1'",
        id="duplicate-backend-ref",
    ),
    pytest.param(
        with_lines(MINIMAL, "type: keyword, keywords: [python, \"c++\"]", "type: bogus"),
        "signals[0]: Input tag 'bogus' found using 'type' does not match any of the expected "
        "tags",
        id="unknown-signal-type",
    ),
    pytest.param(
        with_lines(MINIMAL, "type: keyword, keywords: [python, \"c++\"]",
                   "type: domain, threshold: 1.5"),
        "signals[0].threshold: Input should be less than or equal to 1",
        id="learned-signal-field-drops-union-tag",
    ),
    pytest.param(
        with_lines(MINIMAL, "rules: {signal: code}", "rules: {any: [{sigal: code}]}"),
        "decisions[0].rules.any[0].sigal: Extra inputs are not permitted",
        id="typo-in-nested-rule",
    ),
    pytest.param(
        with_lines(MINIMAL, "type: keyword, keywords: [python, \"c++\"]",
                   "type: domain, escalate_at: 0.7"),
        "signals[0]: Value error, escalate_at is only for jailbreak signals",
        id="escalate-at-on-a-domain-signal",
    ),
    pytest.param(
        MINIMAL + "classifiers: {long_prompts: {escalate_at: 1.5}}\n",
        "classifiers.long_prompts.escalate_at: Input should be less than or equal to 1",
        id="long-prompts-escalate-above-one",
    ),
    pytest.param(
        MINIMAL + "classifiers: {batching: {workers: 0}}\n",
        "classifiers.batching.workers: Value error, expected auto or a count in [1, 64], got 0",
        id="batching-workers-zero",
    ),
    pytest.param(
        MINIMAL + "classifiers: {batching: {workers: many}}\n",
        "classifiers.batching.workers: Value error, expected auto or a count in [1, 64], got "
        "'many'",
        id="batching-workers-not-a-count",
    ),
    pytest.param(
        MINIMAL + "classifiers: {trace: true}\n",
        "classifiers.trace: Input should be 'cpu', 'always' or 'never'",
        id="trace-not-a-mode",
    ),
    pytest.param(
        "providers: [unclosed\n", "invalid YAML: while parsing a flow sequence", id="bad-yaml"
    ),
    pytest.param("- a\n- b\n", "(top level): expected a mapping", id="top-level-list"),
    pytest.param("", "(top level): expected a mapping", id="empty-file"),
    pytest.param("signals: []\n", "providers: Field required", id="no-providers"),
]


@pytest.mark.parametrize(("text", "expected"), INVALID)
def test_invalid_config_names_its_path(text: str, expected: str) -> None:
    errors = errors_of(text)
    assert any(e.startswith(expected) for e in errors), errors


def test_bad_regex_is_one_error_not_also_an_unknown_signal() -> None:
    text = with_lines(MINIMAL, 'keywords: [python, "c++"]', "keywords: ['a[b'], regex: true")
    assert len(errors_of(text)) == 1


def test_all_cross_reference_errors_are_reported_together() -> None:
    text = (
        with_lines(MINIMAL, "defaults: {model: small}", "defaults: {model: large}")
        .replace("rules: {signal: code}", "rules: {not: {signal: nope}}")
        .replace("model: coder}", "model: x}")
    )
    assert errors_of(text) == (
        "decisions[0].model: unknown model 'x'",
        "decisions[0].rules.not.signal: unknown signal 'nope'",
        "providers.defaults.model: unknown model 'large'",
    )


def test_all_schema_errors_are_reported_together() -> None:
    text = with_lines(MINIMAL, "{name: s1,", "{name: s1, wieght: 2,").replace(
        "{name: c1, endpoint: \"127.0.0.1:8103\"}", "{name: c1, endpoint: nowhere}"
    )
    errors = errors_of(text)
    assert len(errors) == 2, errors
    assert errors[0].startswith("providers.models[0].backend_refs[0].wieght:")
    assert errors[1].startswith("providers.models[1].backend_refs[0].endpoint:")


def test_config_error_message_lists_every_error_with_the_source() -> None:
    err = ConfigError(["a: one", "b: two"], "router.yaml")
    assert str(err) == "router.yaml: 2 error(s):\n  a: one\n  b: two"


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "missing.yaml")
    assert info.value.errors[0].startswith("cannot read config:")
    assert info.value.source == str(tmp_path / "missing.yaml")


# --- CLI ---------------------------------------------------------------------------------------


def test_cli_validate_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(MINIMAL)
    assert main(["config", "validate", "--config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.count("\n") == 1
    assert out == (
        f"ok: {path}: 2 models, 1 signals, 1 decisions, default model 'small', "
        "auto names ['auto']\n"
    )


def test_cli_validate_reports_every_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        with_lines(MINIMAL, "defaults: {model: small}", "defaults: {model: large}")
        .replace("rules: {signal: code}", "rules: {signal: nope}")
        .replace("model: coder}", "model: x}")
    )
    assert main(["config", "validate", "--config", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{path}: 3 error(s)" in err
    for expected in (
        "decisions[0].model: unknown model 'x'",
        "decisions[0].rules.signal: unknown signal 'nope'",
        "providers.defaults.model: unknown model 'large'",
    ):
        assert expected in err


def test_cli_validate_default_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate"]) == 0
    assert capsys.readouterr().out.startswith("ok: ")


def test_ambiguous_provider_id_is_not_an_explicit_name() -> None:
    text = with_lines(MINIMAL, "provider_model_id: Qwen/Qwen2.5-Coder-7B-Instruct",
                      "provider_model_id: Qwen/Qwen3-0.6B")
    config = load_config_text(text)
    assert config.resolve_explicit("Qwen/Qwen3-0.6B") is None
    assert config.resolve_explicit("coder") is config.models["coder"]


def test_cluster_name_for_keeps_safe_characters() -> None:
    assert cluster_name_for("local/qwen:7b") == "local_qwen_7b"
    assert cluster_name_for("a-b.c_d") == "a-b.c_d"


def test_listening_addresses_must_differ() -> None:
    """A router admin port on Envoy's listener would fail only at start-up, half started."""
    text = Path("config/default.yaml").read_text(encoding="utf-8").replace(
        "\nrouter:\n", "\nrouter:\n  admin: 127.0.0.1:8899\n", 1)
    with pytest.raises(ConfigError) as err:
        load_config_text(text)
    assert "router.admin: '127.0.0.1:8899' is also listener.address" in str(err.value)
