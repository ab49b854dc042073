"""Layer-reduced students of the shared encoder: fewer transformer layers, same embeddings.

Constraints: a student directory has the adapter layout (`adapter.json` + `adapter.safetensors`)
with `"kind": "student"`: `layers` names the base encoder's layers it starts from (in order) and
the weights file holds every parameter of those layers after training, nothing else. The base
encoder's token and position embeddings, which are most of its size, are kept as they are, so a
student ships a few MB instead of a second encoder. Loading cuts the base encoder to `layers` and
then overwrites their parameters; a file whose names or shapes do not fit is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

STUDENT_KIND = "student"
LAYER_PREFIX = "encoder.layer."


class StudentError(ValueError):
    """A student directory that does not fit the encoder it is applied to."""


def keep_layers(model: torch.nn.Module, layers: Sequence[int]) -> None:
    """Cut a BERT-style `model` down to the encoder layers `layers`, in that order."""
    try:
        stack = model.get_submodule("encoder.layer")
    except AttributeError:
        stack = None
    if not isinstance(stack, torch.nn.ModuleList):
        raise StudentError("not a BERT-style encoder (no encoder.layer list)")
    if not layers or any(not 0 <= i < len(stack) for i in layers):
        raise StudentError(f"layers {list(layers)} do not fit an encoder of {len(stack)} layers")
    model.get_submodule("encoder").layer = torch.nn.ModuleList(stack[i] for i in layers)
    model.config.num_hidden_layers = len(layers)  # type: ignore[union-attr]


def layer_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The parameters a student ships: those of the (kept) encoder layers."""
    return {name: p for name, p in model.named_parameters() if name.startswith(LAYER_PREFIX)}


def save_student(
    model: torch.nn.Module, layers: Sequence[int], directory: str | Path,
    config: Mapping[str, Any],
) -> Path:
    """Write the kept layers' parameters (float16) and `config` (must hold `base`)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {
        name: p.detach().to(torch.float16).contiguous()
        for name, p in layer_parameters(model).items()
    }
    save_file(tensors, str(out / "adapter.safetensors"))
    body = dict(config) | {"kind": STUDENT_KIND, "layers": list(layers)}
    (out / "adapter.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return out


def apply_student(
    model: torch.nn.Module, directory: str | Path, config: Mapping[str, Any]
) -> None:
    """Cut `model` to the student's layers and load their trained parameters in place."""
    layers = config.get("layers")
    if not isinstance(layers, list) or not all(isinstance(i, int) for i in layers):
        raise StudentError(f"{directory}: `layers` must be a list of layer numbers")
    keep_layers(model, layers)
    try:
        tensors = load_file(str(Path(directory) / "adapter.safetensors"))
    except OSError as err:
        raise StudentError(f"{directory}: {err}") from err
    params = layer_parameters(model)
    if set(tensors) != set(params):
        missing = sorted(set(params) - set(tensors))[:3]
        extra = sorted(set(tensors) - set(params))[:3]
        raise StudentError(f"{directory}: weights do not fit (missing {missing}, extra {extra})")
    with torch.no_grad():
        for name, param in params.items():
            if tuple(tensors[name].shape) != tuple(param.shape):
                raise StudentError(f"{directory}: {name} has shape {tuple(tensors[name].shape)}")
            param.copy_(tensors[name].to(param.dtype))
