"""Load a YAML config: parse, validate, cross-check, compile into a frozen ``RouterConfig``.

Every problem in a file is collected and reported at once, each naming its YAML path
(``decisions[1].model: unknown model 'x'``), so an operator fixes a file in one pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from extproc.config.runtime import (
    Endpoint,
    ModelTarget,
    RouterConfig,
    cluster_name_for,
    frozen_map,
    split_host_port,
)
from extproc.config.schema import (
    ContextLengthSignal,
    KeywordSignal,
    LanguageSignal,
    LearnedSignal,
    PiiSignal,
    Plugins,
    RouterFile,
    RuleNode,
)
from extproc.decision import (
    AllRule,
    AnyRule,
    Block,
    CompiledDecision,
    DecisionPlugins,
    NotRule,
    Rule,
    SignalRule,
    SystemPrompt,
    order_decisions,
)
from extproc.names import ProviderModelId, PublicModelName
from extproc.signals.specs import (
    ContextLengthSpec,
    KeywordSpec,
    LanguageSpec,
    LearnedSpec,
    PiiSpec,
    SignalSpec,
    casefold_safe,
    compile_keywords,
    keyword_gate,
)

_SIGNAL_TAGS = frozenset(
    {"keyword", "context_length", "domain", "jailbreak", "embedding", "sequence", "token", "pii",
     "language"}
)


class ConfigError(ValueError):
    """A config that cannot be used; ``errors`` lists every problem with its YAML path."""

    def __init__(self, errors: Sequence[str], source: str = "") -> None:
        self.errors = tuple(errors)
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{len(self.errors)} error(s):\n  " + "\n  ".join(self.errors))


def yaml_path(loc: Iterable[int | str]) -> str:
    """``('decisions', 1, 'model')`` -> ``decisions[1].model``; union tags are dropped."""
    out = ""
    previous_was_index = False
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            previous_was_index = True
            continue
        if previous_was_index and part in _SIGNAL_TAGS:
            previous_was_index = False
            continue
        out += f".{part}" if out else part
        previous_was_index = False
    return out or "(top level)"


def load_config(path: str | Path) -> RouterConfig:
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError([f"cannot read config: {err}"], source) from err
    return load_config_text(text, source)


def load_config_text(text: str, source: str = "") -> RouterConfig:
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError([f"invalid YAML: {err}"], source) from err
    if not isinstance(data, dict):
        raise ConfigError(["(top level): expected a mapping"], source)
    try:
        parsed = RouterFile.model_validate(data)
    except ValidationError as err:
        messages = [f"{yaml_path(e['loc'])}: {e['msg']}" for e in err.errors()]
        raise ConfigError(messages, source) from err
    errors: list[str] = []
    config = _compile(parsed, errors)
    if errors or config is None:
        raise ConfigError(errors, source)
    return config


def _address_clashes(parsed: RouterFile) -> list[str]:
    """The four listening addresses must differ (port 0: any free port, never a clash)."""
    seen: dict[str, str] = {}
    errors = []
    for path, address in (("listener.address", parsed.listener.address),
                          ("listener.admin", parsed.listener.admin),
                          ("router.grpc", parsed.router.grpc),
                          ("router.admin", parsed.router.admin)):
        if address.endswith(":0"):
            continue
        if address in seen:
            errors.append(f"{path}: '{address}' is also {seen[address]}")
        seen.setdefault(address, path)
    return errors


def _compile(parsed: RouterFile, errors: list[str]) -> RouterConfig | None:
    models = _models(parsed, errors)
    signals = _signals(parsed, errors)
    # Names as declared, so a signal that failed to compile is not also "unknown" to decisions.
    decisions = _decisions(parsed, models, {s.name for s in parsed.signals}, errors)
    default = models.get(parsed.providers.defaults.model)
    if default is None:
        errors.append(
            f"providers.defaults.model: unknown model '{parsed.providers.defaults.model}'"
        )
    auto_names = frozenset(parsed.router.auto_model_names)
    for i, name in enumerate(parsed.router.auto_model_names):
        if name in models:
            errors.append(f"router.auto_model_names[{i}]: '{name}' is also a model name")
    pii_signal = _pii_policy_signal(parsed, errors)
    errors.extend(_address_clashes(parsed))
    if models:
        from extproc.workers import static_workers  # lazy: extproc.workers imports this package

        errors.extend(static_workers(parsed.workers, models)[1])
    if errors or default is None:
        return None
    by_provider: dict[str, ModelTarget] = {}
    duplicated: set[str] = set()
    for target in models.values():
        if target.provider_model_id in by_provider:
            duplicated.add(target.provider_model_id)
        by_provider[target.provider_model_id] = target
    for provider_id in duplicated:
        del by_provider[provider_id]
    return RouterConfig(
        source=parsed,
        listener=parsed.listener,
        router=parsed.router,
        classifiers=parsed.classifiers,
        models=frozen_map(models),
        by_provider_id=frozen_map(by_provider),
        default_model=default,
        auto_names=auto_names,
        signals=tuple(signals),
        decisions=decisions,
        public_model_names=(*parsed.router.auto_model_names, *models),
        pii_signal=pii_signal,
    )


def _pii_policy_signal(parsed: RouterFile, errors: list[str]) -> str | None:
    """The pii signal that enforces ``pii_allowed`` (the first one declared)."""
    restricted = [i for i, m in enumerate(parsed.providers.models) if m.pii_allowed is not None]
    if not restricted:
        return None
    names = [s.name for s in parsed.signals if isinstance(s, PiiSignal)]
    if not names:
        errors.append(f"providers.models[{restricted[0]}].pii_allowed: needs a signal of "
                      "type pii to detect what the request carries")
        return None
    return names[0]


def _models(parsed: RouterFile, errors: list[str]) -> dict[str, ModelTarget]:
    models: dict[str, ModelTarget] = {}
    clusters: dict[str, str] = {}
    for i, model in enumerate(parsed.providers.models):
        path = f"providers.models[{i}]"
        if model.name in models:
            errors.append(f"{path}.name: duplicate model name '{model.name}'")
            continue
        cluster = cluster_name_for(model.name)
        if cluster in clusters:
            errors.append(
                f"{path}.name: '{model.name}' and '{clusters[cluster]}' map to the same "
                f"Envoy cluster name '{cluster}'"
            )
            continue
        clusters[cluster] = model.name
        names = [ref.name for ref in model.backend_refs]
        for j, ref_name in enumerate(names):
            if ref_name in names[:j]:
                errors.append(f"{path}.backend_refs[{j}].name: duplicate '{ref_name}'")
        protocols = {ref.protocol for ref in model.backend_refs}
        if len(protocols) > 1:
            errors.append(f"{path}.backend_refs: mixes http and https; one Envoy cluster "
                          "speaks one protocol")
        if len({ref.api_key_env for ref in model.backend_refs}) > 1:
            errors.append(f"{path}.backend_refs: api_key_env differs between refs; one Envoy "
                          "cluster gets one authorization header")
        endpoints = []
        for ref in model.backend_refs:
            host, port = split_host_port(ref.endpoint)
            endpoints.append(Endpoint(ref.name, host, port, ref.protocol, ref.weight))
        models[model.name] = ModelTarget(
            PublicModelName(model.name),
            ProviderModelId(model.provider_model_id),
            cluster,
            tuple(endpoints),
            frozenset(model.pii_allowed) if model.pii_allowed is not None else None,
        )
    return models


def _signals(parsed: RouterFile, errors: list[str]) -> list[SignalSpec]:
    specs: list[SignalSpec] = []
    seen: set[str] = set()
    for i, signal in enumerate(parsed.signals):
        path = f"signals[{i}]"
        if signal.name in seen:
            errors.append(f"{path}.name: duplicate signal name '{signal.name}'")
            continue
        seen.add(signal.name)
        if isinstance(signal, KeywordSignal):
            fold = not signal.case_sensitive and casefold_safe(signal.keywords,
                                                               regex=signal.regex)
            try:
                patterns = compile_keywords(
                    signal.keywords,
                    regex=signal.regex,
                    case_sensitive=signal.case_sensitive,
                    word_boundary=signal.word_boundary,
                    match_all=signal.match == "all",
                    fold=fold,
                )
            except re.error as err:
                errors.append(f"{path}.keywords: invalid regular expression: {err}")
                continue
            gate = keyword_gate(signal.keywords, regex=signal.regex,
                                case_sensitive=signal.case_sensitive,
                                match_all=signal.match == "all", fold=fold)
            specs.append(KeywordSpec(signal.name, signal.on_error, patterns,
                                     signal.match == "all", signal.text_source, fold, gate,
                                     signal.read_obfuscated))
        elif isinstance(signal, ContextLengthSignal):
            specs.append(
                ContextLengthSpec(
                    signal.name, signal.on_error, signal.min_tokens, signal.max_tokens
                )
            )
        elif isinstance(signal, LearnedSignal):
            examples = {label: tuple(texts) for label, texts in signal.examples.items()}
            fallback = None
            if signal.fallback_keywords:
                (fallback,) = compile_keywords(signal.fallback_keywords, regex=False,
                                               case_sensitive=False, word_boundary=True,
                                               match_all=False)
            specs.append(
                LearnedSpec(
                    signal.name,
                    signal.on_error,
                    signal.type,
                    signal.model,
                    signal.threshold,
                    signal.device,
                    examples,
                    signal.text_source,
                    fallback,
                    signal.escalate_at,
                )
            )
        elif isinstance(signal, PiiSignal):
            types = tuple(signal.entity_types) if signal.entity_types else None
            specs.append(PiiSpec(signal.name, signal.on_error, types, signal.threshold,
                                 signal.text_source))
        elif isinstance(signal, LanguageSignal):
            languages = tuple(signal.languages) if signal.languages else None
            specs.append(LanguageSpec(signal.name, signal.on_error, languages, signal.threshold,
                                      signal.text_source))
    return specs


def _decisions(
    parsed: RouterFile,
    models: dict[str, ModelTarget],
    signal_names: set[str],
    errors: list[str],
) -> tuple[CompiledDecision, ...]:
    compiled = []
    seen: set[str] = set()
    for i, decision in enumerate(parsed.decisions):
        path = f"decisions[{i}]"
        if decision.name in seen:
            errors.append(f"{path}.name: duplicate decision name '{decision.name}'")
        seen.add(decision.name)
        if decision.model is not None and decision.model not in models:
            errors.append(f"{path}.model: unknown model '{decision.model}'")
        rule = _rule(decision.rules, f"{path}.rules", signal_names, errors)
        compiled.append(CompiledDecision(
            decision.name, decision.priority, rule, decision.model,
            shadow=decision.mode == "shadow", plugins=_plugins(decision.plugins)))
    return order_decisions(compiled)


def _plugins(plugins: Plugins) -> DecisionPlugins:
    block = plugins.block
    prompt = plugins.system_prompt
    return DecisionPlugins(
        block=Block(block.status, block.code, block.message, block.respond) if block else None,
        system_prompt=SystemPrompt(prompt.text, prompt.mode) if prompt else None,
        set_headers=tuple(sorted(plugins.set_headers.items())),
    )


def _rule(node: RuleNode, path: str, signal_names: set[str], errors: list[str]) -> Rule:
    if node.signal is not None:
        if node.signal not in signal_names:
            errors.append(f"{path}.signal: unknown signal '{node.signal}'")
        return SignalRule(node.signal, node.label, node.min_score)
    if node.all is not None:
        return AllRule(
            tuple(
                _rule(c, f"{path}.all[{i}]", signal_names, errors) for i, c in enumerate(node.all)
            )
        )
    if node.any is not None:
        return AnyRule(
            tuple(
                _rule(c, f"{path}.any[{i}]", signal_names, errors) for i, c in enumerate(node.any)
            )
        )
    assert node.not_ is not None  # guaranteed by RuleNode's validator
    return NotRule(_rule(node.not_, f"{path}.not", signal_names, errors))
