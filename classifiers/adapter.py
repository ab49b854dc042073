"""Low-rank (LoRA) adapters for the shared encoder: train them, save them, merge them at load.
(An adapter directory may instead hold a layer-reduced student: see `classifiers.student`.)

Constraints: an adapter is a directory with `adapter.json` (base encoder id, rank, alpha, target
module names, metrics) and `adapter.safetensors` (the `A`/`B` factors). Loading merges
`W += (alpha / rank) * B @ A` into the base encoder's Linear weights once, at start-up, so the hot
path runs a plain transformer with no extra cost. A few MB of factors replace shipping a second
90 MB encoder. Merging refuses an adapter made for another base encoder or whose shapes do not fit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from classifiers.student import STUDENT_KIND, StudentError, apply_student

ADAPTER_CONFIG = "adapter.json"
BASE_ENCODER_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what the bundled encoder is
ADAPTER_WEIGHTS = "adapter.safetensors"
# Every Linear layer of a BERT-style encoder layer: q, k, v, both output projections
# ("output.dense" ends attention.output.dense too) and the feed-forward input.
DEFAULT_TARGETS = ("query", "key", "value", "output.dense", "intermediate.dense")


def bundled_adapter_dir() -> Path:
    """The LoRA adapter fine-tuned for the default heads (classifiers/models/encoder)."""
    return Path(__file__).resolve().parent / "models" / "encoder"


def default_encoder_id() -> str:
    """The id of the default encoder: the bundled MiniLM with the bundled adapter, when it is
    there (`<encoder>+<adapter name>`, what `Encoder.model_id` reports and heads record)."""
    config = bundled_adapter_dir() / ADAPTER_CONFIG
    if not config.is_file():
        return BASE_ENCODER_ID
    name = json.loads(config.read_text()).get("name", bundled_adapter_dir().name)
    return f"{BASE_ENCODER_ID}+{name}"


class AdapterError(ValueError):
    """An adapter directory that does not fit the encoder it is applied to."""


class LoRALinear(torch.nn.Module):
    """`base(x) + scale * (x @ A.T) @ B.T`; the base Linear stays frozen, `B` starts at zero."""

    def __init__(self, base: torch.nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        self.enabled = True
        self.lora_a = torch.nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_b = torch.nn.Parameter(torch.zeros(base.out_features, rank))
        torch.nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        if not self.enabled:
            return out
        return out + (x @ self.lora_a.T) @ self.lora_b.T * self.scale


def _targets(model: torch.nn.Module, targets: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.Linear) and name.endswith(targets) and ".layer." in name:
            yield name, module


def _set_module(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name), child, module)


def add_lora(
    model: torch.nn.Module, rank: int, alpha: float, targets: tuple[str, ...] = DEFAULT_TARGETS
) -> dict[str, LoRALinear]:
    """Freeze `model` and wrap its target Linear layers; returns the wrappers by module name."""
    for param in model.parameters():
        param.requires_grad_(False)
    wrapped: dict[str, LoRALinear] = {}
    for name, linear in _targets(model, targets):
        wrapper = LoRALinear(linear, rank, alpha)
        _set_module(model, name, wrapper)
        wrapped[name] = wrapper
    if not wrapped:
        raise AdapterError(f"no Linear layer matches {targets}")
    return wrapped


def set_lora_enabled(wrapped: Mapping[str, LoRALinear], enabled: bool) -> None:
    """Switch every adapter on or off (off gives the base encoder, e.g. for distillation)."""
    for wrapper in wrapped.values():
        wrapper.enabled = enabled


def save_adapter(
    wrapped: Mapping[str, LoRALinear], directory: str | Path, config: Mapping[str, Any]
) -> Path:
    """Write the factors and `config` (must hold `base`, `rank`, `alpha`) to `directory`."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    for name, wrapper in wrapped.items():
        tensors[f"{name}.lora_a"] = wrapper.lora_a.detach().to(torch.float32).contiguous()
        tensors[f"{name}.lora_b"] = wrapper.lora_b.detach().to(torch.float32).contiguous()
    save_file(tensors, str(out / ADAPTER_WEIGHTS))
    body = dict(config) | {"modules": sorted(wrapped)}
    (out / ADAPTER_CONFIG).write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return out


def read_adapter_config(directory: str | Path) -> dict[str, Any]:
    """`adapter.json` of an adapter directory, checked for the keys merging needs."""
    path = Path(directory) / ADAPTER_CONFIG
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise AdapterError(f"{path}: {err}") from err
    needed = ("base", "layers") if config.get("kind") == STUDENT_KIND else (
        "base", "rank", "alpha", "modules")
    missing = [k for k in needed if k not in config]
    if missing:
        raise AdapterError(f"{path}: missing {', '.join(missing)}")
    return dict(config)


def merge_adapter(model: torch.nn.Module, directory: str | Path, base_id: str) -> dict[str, Any]:
    """Merge the adapter in `directory` into `model`'s weights in place; returns its config.
    A layer-reduced student (`classifiers.student`) cuts the model to its layers instead."""
    config = read_adapter_config(directory)
    if config["base"] != base_id:
        raise AdapterError(
            f"{directory}: adapter is for encoder {config['base']!r}, not {base_id!r}"
        )
    if config.get("kind") == STUDENT_KIND:
        try:
            apply_student(model, directory, config)
        except StudentError as err:
            raise AdapterError(str(err)) from err
        return config
    tensors = load_file(str(Path(directory) / ADAPTER_WEIGHTS))
    scale = float(config["alpha"]) / int(config["rank"])
    with torch.no_grad():
        for name in config["modules"]:
            try:
                linear = model.get_submodule(name)
                a, b = tensors[f"{name}.lora_a"], tensors[f"{name}.lora_b"]
            except (AttributeError, KeyError) as err:
                raise AdapterError(f"{directory}: module {name!r} missing: {err}") from err
            if not isinstance(linear, torch.nn.Linear) or (b.shape[0], a.shape[1]) != tuple(
                linear.weight.shape
            ):
                raise AdapterError(f"{directory}: module {name!r} does not fit the encoder")
            delta = (b @ a) * scale
            linear.weight.add_(delta.to(linear.weight.dtype))
    return config
