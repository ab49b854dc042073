"""The frozen runtime view of a validated config: lookups only, no parsing on the hot path."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from extproc.config.schema import (
    ClassifiersConfig,
    ListenerSettings,
    RouterFile,
    RouterSettings,
)
from extproc.decision import CompiledDecision
from extproc.names import ClusterName, ProviderModelId, PublicModelName
from extproc.signals.specs import SignalSpec

_CLUSTER_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def cluster_name_for(model_name: str) -> ClusterName:
    """Envoy cluster (and stats) name for a model: ``local/qwen`` becomes ``local_qwen``.

    Stats read ``cluster.<name>.upstream_rq_*``, so the name stays recognisable; the loader
    rejects configs where two models map to the same cluster name.
    """
    return ClusterName(_CLUSTER_UNSAFE.sub("_", model_name))


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int
    protocol: str
    weight: int


@dataclass(frozen=True, slots=True)
class ModelTarget:
    name: PublicModelName
    provider_model_id: ProviderModelId
    cluster: ClusterName
    endpoints: tuple[Endpoint, ...]
    pii_allowed: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """Everything the processor needs, resolved and indexed once at load time."""

    source: RouterFile
    listener: ListenerSettings
    router: RouterSettings
    classifiers: ClassifiersConfig
    models: Mapping[str, ModelTarget]
    by_provider_id: Mapping[str, ModelTarget]
    default_model: ModelTarget
    auto_names: frozenset[str]
    signals: tuple[SignalSpec, ...]
    decisions: tuple[CompiledDecision, ...]
    public_model_names: tuple[str, ...]
    pii_signal: str | None = None
    """The pii signal that enforces models' ``pii_allowed`` lists (None when no model
    declares one)."""

    def resolve_explicit(self, requested: str) -> ModelTarget | None:
        """A configured model by public name, else by its (unambiguous) provider model id."""
        target = self.models.get(requested)
        return target if target is not None else self.by_provider_id.get(requested)

    def summary(self) -> str:
        return (
            f"{len(self.models)} models, {len(self.signals)} signals, "
            f"{len(self.decisions)} decisions, default model '{self.default_model.name}', "
            f"auto names {sorted(self.auto_names)}"
        )


def split_host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


def frozen_map(items: Mapping[str, ModelTarget]) -> Mapping[str, ModelTarget]:
    return MappingProxyType(dict(items))
