"""Encoders on a checked TorchScript trace: the same embeddings as eager on every batch shape,
one trace shared by threads, and a trace that fails or disagrees is never used."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import DistilBertConfig, DistilBertModel, DistilBertTokenizerFast

from classifiers.encoder import Encoder
from classifiers.windowing import pad_rows

TEXTS = (
    "hi",
    "Write a Python function that merges two sorted lists.",
    "What is the derivative of x^3 * sin(x)? " * 12,  # truncated at the window
    "Summarise the causes of the French Revolution in three sentences.",
    "ok then",
)


def skew_traces(monkeypatch: pytest.MonkeyPatch,
                skew: Callable[[torch.Tensor], torch.Tensor | float]) -> None:
    """Make `torch.jit.trace` return the real trace plus `skew(input_ids)` on every output."""
    real = torch.jit.trace

    class Skewed(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.inner(*args)
            return out + skew(args[0])

    def skewed_trace(module: torch.nn.Module, example: object, **kwargs: object) -> object:
        return Skewed(real(module, example, **kwargs))

    monkeypatch.setattr(torch.jit, "trace", skewed_trace)


@pytest.fixture(scope="module")
def pair() -> tuple[Encoder, Encoder]:
    traced = Encoder.load(max_length=48, trace=True)
    eager = Encoder.load(max_length=48)
    return traced, eager


def test_traced_embeddings_equal_eager_on_every_shape(pair: tuple[Encoder, Encoder]) -> None:
    traced, eager = pair
    assert traced.execution == "traced" and traced.trace_skipped == ""
    assert eager.execution == "eager"
    for texts in (TEXTS, TEXTS[:1], TEXTS[1:3], TEXTS[2:3] * 3, TEXTS[::-1]):
        got = traced.forward(traced.tokenize(texts))
        want = eager.forward(eager.tokenize(texts))
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_padding_is_masked_in_the_trace(pair: tuple[Encoder, Encoder]) -> None:
    """A text alone and the same text padded beside a longer one embed the same: the trace
    kept the attention mask rather than a frozen "no padding" branch."""
    traced, _ = pair
    alone = traced.forward(traced.tokenize([TEXTS[0]]))
    padded = traced.forward(traced.tokenize([TEXTS[0], TEXTS[2]]))[:1]
    torch.testing.assert_close(alone, padded, rtol=1e-4, atol=1e-5)


def test_threads_share_one_trace(pair: tuple[Encoder, Encoder]) -> None:
    traced, _ = pair
    batches = [TEXTS[: k + 1] for k in range(len(TEXTS))]
    want = [traced.forward(traced.tokenize(b)) for b in batches]
    errors: list[str] = []

    def work(k: int) -> None:
        for _ in range(6):
            got = traced.forward(traced.tokenize(batches[k]))
            if not torch.allclose(got, want[k], rtol=1e-5, atol=1e-6):
                errors.append(f"batch {k} differs")

    torch.set_num_threads(max(1, torch.get_num_threads()))
    pool = [threading.Thread(target=work, args=(k,)) for k in range(len(batches))]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert errors == []


def test_runner_rows_without_token_types_use_zeros(pair: tuple[Encoder, Encoder]) -> None:
    traced, eager = pair
    rows = [traced.tokenizer(t, truncation=True, max_length=48)["input_ids"] for t in TEXTS[:2]]
    inputs = pad_rows(rows, 0)
    without = {k: v for k, v in inputs.items() if k != "token_type_ids"}
    torch.testing.assert_close(traced.forward(without), eager.forward(inputs))


def test_a_failing_trace_keeps_eager_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("cannot trace this\nmore detail")

    monkeypatch.setattr(torch.jit, "trace", refuse)
    encoder = Encoder.load(max_length=32, trace=True)
    assert encoder.execution == "eager"
    assert encoder.trace_skipped == "RuntimeError: cannot trace this"
    assert encoder.forward(encoder.tokenize(["still works"])).shape == (1, encoder.dim)


def test_a_trace_that_disagrees_with_eager_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    skew_traces(monkeypatch, lambda ids: 0.01 * (ids.shape[0] > 2))  # wrong on bigger batches
    encoder = Encoder.load(max_length=32, trace=True)
    assert encoder.execution == "eager"
    assert encoder.trace_skipped.startswith("trace differs from eager by ")
    assert "on 3 text(s)" in encoder.trace_skipped


def test_a_model_without_token_types_is_traced(tmp_path: Path) -> None:
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "route", "me"]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    DistilBertTokenizerFast.from_pretrained(str(tmp_path)).save_pretrained(str(tmp_path))
    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=len(words), dim=16, n_layers=1, n_heads=2,
                              hidden_dim=32, max_position_embeddings=64)
    DistilBertModel(config).save_pretrained(str(tmp_path))
    traced = Encoder.load(str(tmp_path), max_length=16, adapter=None, trace=True)
    eager = Encoder.load(str(tmp_path), max_length=16, adapter=None)
    assert traced.execution == "traced", traced.trace_skipped
    texts = ["a b c", "route me", "a"]
    torch.testing.assert_close(traced.forward(traced.tokenize(texts)),
                               eager.forward(eager.tokenize(texts)))


@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_half_precision_trace_is_checked_per_element(
    monkeypatch: pytest.MonkeyPatch, noise: float
) -> None:
    """In bf16 a trace agrees with eager to the last place; one that is off by 0.05 on every
    hidden value (small next to the largest value, large next to a typical one) is refused."""
    skew_traces(monkeypatch, lambda ids: noise)
    encoder = Encoder.load(max_length=32, dtype=torch.bfloat16, trace=True)
    assert encoder.execution == ("traced" if noise == 0.0 else "eager"), encoder.trace_skipped


def test_a_tracer_error_without_a_message_still_keeps_eager(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError()

    monkeypatch.setattr(torch.jit, "trace", refuse)
    encoder = Encoder.load(max_length=32, trace=True)
    assert (encoder.execution, encoder.trace_skipped) == ("eager", "RuntimeError")
