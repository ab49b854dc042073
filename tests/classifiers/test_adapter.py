"""LoRA adapters: what training computes is what the merged encoder computes, and an adapter
that does not fit the encoder is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel

from classifiers.adapter import (
    AdapterError,
    add_lora,
    merge_adapter,
    save_adapter,
    set_lora_enabled,
)
from classifiers.encoder import BUNDLED_ADAPTER, adapter_dir


def _tiny(seed: int = 0) -> BertModel:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    return BertModel(config).eval()


def _hidden(model: BertModel) -> torch.Tensor:
    ids = torch.tensor([[2, 7, 9, 11, 3], [2, 5, 3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).last_hidden_state


def test_merged_weights_reproduce_the_adapted_model(tmp_path: Path) -> None:
    base = _hidden(_tiny())
    adapted = _tiny()
    wrapped = add_lora(adapted, rank=4, alpha=8.0)
    assert len(wrapped) == 2 * 6  # q, k, v, attention output, intermediate, output per layer
    trainable = {id(p) for p in adapted.parameters() if p.requires_grad}
    assert trainable == {id(p) for w in wrapped.values() for p in (w.lora_a, w.lora_b)}
    torch.manual_seed(1)
    for wrapper in wrapped.values():  # as if trained: B is no longer zero
        torch.nn.init.normal_(wrapper.lora_b, std=0.2)
    expected = _hidden(adapted)
    assert not torch.allclose(expected, base, atol=1e-3)
    set_lora_enabled(wrapped, False)
    assert torch.allclose(_hidden(adapted), base, atol=1e-6)  # off = the base encoder
    set_lora_enabled(wrapped, True)
    save_adapter(wrapped, tmp_path / "a", {"name": "tiny-lora", "base": "tiny", "rank": 4,
                                           "alpha": 8.0})
    fresh = _tiny()
    config = merge_adapter(fresh, tmp_path / "a", "tiny")
    assert config["name"] == "tiny-lora"
    assert torch.allclose(_hidden(fresh), expected, atol=1e-5)


def test_an_adapter_for_another_encoder_or_shape_is_refused(tmp_path: Path) -> None:
    model = _tiny()
    wrapped = add_lora(model, rank=2, alpha=2.0)
    save_adapter(wrapped, tmp_path / "a", {"base": "tiny", "rank": 2, "alpha": 2.0})
    with pytest.raises(AdapterError, match="not 'other'"):
        merge_adapter(_tiny(), tmp_path / "a", "other")
    wider = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=64,
                                 max_position_embeddings=32))
    with pytest.raises(AdapterError, match="does not fit"):
        merge_adapter(wider, tmp_path / "a", "tiny")
    config = json.loads((tmp_path / "a" / "adapter.json").read_text())
    config["modules"].append("encoder.layer.9.attention.self.query")
    (tmp_path / "a" / "adapter.json").write_text(json.dumps(config))
    with pytest.raises(AdapterError, match="missing"):
        merge_adapter(_tiny(), tmp_path / "a", "tiny")
    (tmp_path / "b").mkdir()
    with pytest.raises(AdapterError):
        merge_adapter(_tiny(), tmp_path / "b", "tiny")


def test_the_bundled_adapter_applies_to_the_bundled_encoder_only(tmp_path: Path) -> None:
    assert adapter_dir("/some/other/encoder", BUNDLED_ADAPTER) is None
    assert adapter_dir(None, None) is None
    assert adapter_dir(None, str(tmp_path)) == tmp_path
