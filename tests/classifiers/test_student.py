"""Layer-reduced students: what training leaves in the kept layers is what loading rebuilds,
through the same `merge_adapter` entry point as LoRA adapters, and a student whose layers or
weights do not fit the encoder is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel

from classifiers.adapter import AdapterError, merge_adapter
from classifiers.student import StudentError, keep_layers, layer_parameters, save_student


def _tiny(layers: int = 4, hidden: int = 16) -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=2 * hidden,
                        max_position_embeddings=32)
    return BertModel(config).eval()


def _hidden(model: BertModel) -> torch.Tensor:
    ids = torch.tensor([[2, 7, 9, 11, 3], [2, 5, 3, 0, 0]])
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=(ids != 0).long()).last_hidden_state


def _trained_student(tmp_path: Path, layers: list[int]) -> torch.Tensor:
    student = _tiny()
    keep_layers(student, layers)
    torch.manual_seed(1)
    with torch.no_grad():  # as if trained: every kept parameter moved
        for param in layer_parameters(student).values():
            param.add_(torch.randn_like(param) * 0.05)
    save_student(student, layers, tmp_path / "s", {"name": "tiny-l2", "base": "tiny"})
    return _hidden(student)


def test_a_loaded_student_reproduces_the_trained_one(tmp_path: Path) -> None:
    expected = _trained_student(tmp_path, [0, 3])
    config = json.loads((tmp_path / "s" / "adapter.json").read_text())
    assert config["kind"] == "student" and config["layers"] == [0, 3]
    fresh = _tiny()
    before = _hidden(fresh)
    merged = merge_adapter(fresh, tmp_path / "s", "tiny")
    assert merged["name"] == "tiny-l2"
    assert len(fresh.encoder.layer) == 2 and fresh.config.num_hidden_layers == 2
    after = _hidden(fresh)
    assert not torch.allclose(after, before, atol=1e-2)
    assert torch.allclose(after, expected, atol=2e-3)  # weights are shipped as float16


def test_only_the_kept_layers_are_shipped(tmp_path: Path) -> None:
    _trained_student(tmp_path, [1, 2])
    from safetensors.torch import load_file

    tensors = load_file(str(tmp_path / "s" / "adapter.safetensors"))
    assert tensors
    assert all(name.startswith(("encoder.layer.0.", "encoder.layer.1.")) for name in tensors)
    assert all(tensor.dtype == torch.float16 for tensor in tensors.values())


def test_a_student_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    _trained_student(tmp_path, [0, 3])
    with pytest.raises(AdapterError, match="not 'other'"):
        merge_adapter(_tiny(), tmp_path / "s", "other")
    with pytest.raises(AdapterError, match="do not fit an encoder of 2 layers"):
        merge_adapter(_tiny(layers=2), tmp_path / "s", "tiny")  # no layer 3 to start from
    with pytest.raises(AdapterError, match="has shape"):
        merge_adapter(_tiny(hidden=32), tmp_path / "s", "tiny")
    config = json.loads((tmp_path / "s" / "adapter.json").read_text())
    (tmp_path / "s" / "adapter.json").write_text(json.dumps(config | {"layers": [0, 1, 2]}))
    with pytest.raises(AdapterError, match="weights do not fit"):
        merge_adapter(_tiny(), tmp_path / "s", "tiny")  # three layers, two layers of weights
    (tmp_path / "s" / "adapter.json").write_text(json.dumps(config | {"layers": "0,3"}))
    with pytest.raises(AdapterError, match="list of layer numbers"):
        merge_adapter(_tiny(), tmp_path / "s", "tiny")
    del config["layers"]
    (tmp_path / "s" / "adapter.json").write_text(json.dumps(config))
    with pytest.raises(AdapterError, match="missing layers"):
        merge_adapter(_tiny(), tmp_path / "s", "tiny")


def test_keep_layers_refuses_an_empty_or_foreign_model() -> None:
    with pytest.raises(StudentError):
        keep_layers(_tiny(), [])
    with pytest.raises(StudentError, match="BERT-style"):
        keep_layers(torch.nn.Linear(2, 2), [0])


def _write_task(path: Path, labels: dict[str, list[str]]) -> str:
    rows = [{"text": text, "label": label} for label, texts in labels.items() for text in texts]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_finetune_trains_a_student_the_encoder_loads(tmp_path: Path) -> None:
    """The build step end to end on the real MiniLM and the shipped LoRA adapter as teacher: three
    kept layers, the teacher named, loadable as an encoder adapter with three layers."""
    from classifiers import finetune
    from classifiers.adapter import bundled_adapter_dir
    from classifiers.encoder import Encoder

    topics = _write_task(tmp_path / "topics.jsonl", {
        "code": [f"how do I sort a list in python, case {i}" for i in range(8)],
        "cooking": [f"how long should I boil an egg, case {i}" for i in range(8)],
    })
    code = finetune.main([
        "--task", f"topics={topics}", "--out", str(tmp_path / "student"), "--name", "tiny-l3",
        "--student-layers", "0,2,5", "--teacher", str(bundled_adapter_dir()),
        "--epochs", "1", "--batch-size", "8", "--max-length", "32", "--val-fraction", "0.25",
    ])
    assert code == 0
    config = json.loads((tmp_path / "student" / "adapter.json").read_text())
    assert config["kind"] == "student" and config["layers"] == [0, 2, 5]
    assert config["teacher"].endswith("+sr-lora-e1")
    student = Encoder.load(max_length=32, adapter=str(tmp_path / "student"))
    teacher = Encoder.load(max_length=32, adapter=str(bundled_adapter_dir()))
    assert student.model_id.endswith("+tiny-l3")
    assert len(student.model.encoder.layer) == 3 and len(teacher.model.encoder.layer) == 6
    texts = ["how do I sort a list in python", "how long should I boil an egg"]
    ours, theirs = student.embed(texts), teacher.embed(texts)
    assert torch.allclose(ours.norm(dim=1), torch.ones(2), atol=1e-4)
    assert not torch.allclose(ours, theirs, atol=1e-2)


def test_finetune_holds_out_the_rows_the_heads_hold_out(tmp_path: Path) -> None:
    """By default the encoder (LoRA or student) never trains on the rows `classifiers.training`
    keeps for a head's early stopping and `lexical_training` for the mix: a head judged on rows
    its encoder has seen looks better than it is (the student experiment picked a lexical mix of
    0.1 instead of 0.4 that way)."""
    import numpy as np

    from classifiers.finetune import build_parser, load_task
    from classifiers.training import TrainConfig, split_groups

    labels = ("law", "math", "physics")
    rows = [{"text": f"{label} question {g}-{v}", "label": label, "group": f"{label}{g}"}
            for label in labels for g in range(30) for v in range(2)]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = build_parser().parse_args(["--task", f"domain={data}", "--out", str(tmp_path / "o")])
    task = load_task("domain", str(data), args.val_fraction, 0, args.seed)
    config = TrainConfig()
    y = np.array([labels.index(r["label"]) for r in rows])
    _, head_val = split_groups(y, [r["group"] for r in rows], config.val_fraction, config.seed)
    assert task.val
    assert {e.group for e in task.val} == {rows[i]["group"] for i in head_val}
