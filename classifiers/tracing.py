"""TorchScript traces of classifier transformers, checked against the eager model before use.

Why: a traced forward pass runs in the TorchScript interpreter, which releases the GIL for the
whole pass and skips the per-module Python dispatch. With the router's event loop and two CPU
queue workers in one process, eager workers wait for the GIL at every op boundary while the loop
holds it (bench/RESULTS.md, "traced encoders": under a thread holding the GIL 17% of the time,
two eager workers lost 19% of their throughput and two traced ones 9%, the CPU that thread used).

Constraints:
- The trace is recorded on a padded batch of two texts, so the attention-mask path is the one
  recorded (an unpadded example could record "no mask" and ignore padding later).
- Before use, the trace is compared with the eager model on probe batches of other sizes and
  lengths, padded and not, one of them a full window, each called several times (the
  executor's optimized graph is checked too). Any error or any difference above the
  tolerance keeps the eager model, and the reason is returned for the binding log line: never a
  silent fallback, never a trace that disagrees with eager.
- Inference only: training code keeps using `Encoder.model`. Used for the shared encoders
  (`last_hidden_state`) and for sequence/token classification models (`logits`).
"""

from __future__ import annotations

import inspect
import json
import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
_EXAMPLE = ("route this request to the right model, please", "short")
_PROBES = (
    ("one text with no padding at all",),
    ("a", "three texts of different lengths", "and one more text that is longer than the rest"),
)
_CALLS_PER_PROBE = 3
# (rtol, atol) per element, |trace - eager| <= atol + rtol * |eager|: the trace runs the same
# kernels, so fp32 agrees to rounding; half precision gets a few units in the last place.
_TOLERANCE = {torch.float32: (1e-4, 1e-5), torch.float16: (4e-3, 1e-3),
              torch.bfloat16: (1.6e-2, 1e-3)}

HiddenStates = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]


@dataclass(frozen=True)
class Trace:
    """The traced forward pass (None when the eager model stays) and why not."""

    forward: HiddenStates | None
    reason: str = ""


def log_trace_skipped(reason: str, role: str, model: str, log: logging.Logger) -> None:
    """A requested trace that did not pass its check is said once, as a warning."""
    if reason:
        fields = {"event": "encoder_trace_skipped", "encoder": role, "model": model,
                  "reason": reason}
        log.warning(json.dumps(fields), extra=fields)


class _Output(torch.nn.Module):
    """Positional inputs -> the one output the caller reads (`last_hidden_state`, `logits`)."""

    def __init__(self, model: torch.nn.Module, with_token_types: bool, output: str) -> None:
        super().__init__()
        self.model = model
        self.with_token_types = with_token_types
        self.output = output

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        if self.with_token_types:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids)
        else:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        result: torch.Tensor = getattr(out, self.output)
        return result


def trace_model(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    device: torch.device,
    max_length: int,
    dtype: torch.dtype,
    output: str = "last_hidden_state",
) -> Trace:
    """Trace `model` (eval mode, on `device`) returning its `output` tensor and check it
    against eager; see the module doc."""
    with_token_types = "token_type_ids" in inspect.signature(model.forward).parameters
    try:
        with torch.inference_mode(), warnings.catch_warnings():
            # TracerWarnings name branches frozen at trace time; the probes below check them.
            warnings.simplefilter("ignore")
            eager = _Output(model, with_token_types, output).eval()
            example = _inputs(tokenizer, _EXAMPLE, device, max_length)
            traced = torch.jit.trace(
                eager, tuple(example[name] for name in INPUT_NAMES), check_trace=False
            )
            forward = _positional(traced)
            probes = (*_PROBES, ("word " * (2 * max_length),))
            for texts in probes:
                inputs = _inputs(tokenizer, texts, device, max_length)
                expected = eager(*(inputs[name] for name in INPUT_NAMES))
                # Several calls: TorchScript's profiling executor may swap in an optimized
                # (on CUDA, fused) graph after the first ones; that graph is checked too.
                worst = max(_worst_difference(expected, forward(inputs), inputs,
                                              _TOLERANCE.get(dtype, (1.6e-2, 1e-3)))
                            for _ in range(_CALLS_PER_PROBE))
                if worst > 1.0:
                    return Trace(None, f"trace differs from eager by {worst:.3g} times the "
                                       f"tolerance on {len(texts)} text(s) of "
                                       f"{inputs['input_ids'].shape[1]} tokens")
    except Exception as err:  # any failure keeps the eager model, with the reason logged
        first_line = (str(err).splitlines() or [""])[0][:200]
        return Trace(None, f"{type(err).__name__}: {first_line}".rstrip(": "))
    return Trace(forward)


def _positional(traced: torch.jit.ScriptModule) -> HiddenStates:
    def forward(inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        ids = inputs["input_ids"]
        types = inputs.get("token_type_ids")
        return traced(ids, inputs["attention_mask"],
                      torch.zeros_like(ids) if types is None else types)

    return forward


def _inputs(tokenizer: PreTrainedTokenizerBase, texts: tuple[str, ...], device: torch.device,
            max_length: int) -> dict[str, torch.Tensor]:
    encoded = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length,
                        return_tensors="pt")
    ids = encoded["input_ids"]
    return {
        "input_ids": ids.to(device),
        "attention_mask": encoded["attention_mask"].to(device),
        "token_type_ids": encoded.get("token_type_ids", torch.zeros_like(ids)).to(device),
    }


def _worst_difference(expected: torch.Tensor, actual: torch.Tensor,
                      inputs: Mapping[str, torch.Tensor], tolerance: tuple[float, float]) -> float:
    """The largest |actual - expected| / (atol + rtol * |expected|) over the positions a caller
    reads (padding excluded); above 1 means the trace disagrees."""
    if expected.shape != actual.shape:
        return float("inf")
    if expected.dim() == 3:  # per token: padding positions are never read
        mask = inputs["attention_mask"].unsqueeze(-1).bool().expand_as(expected)
    else:  # one row per text
        mask = torch.ones_like(expected, dtype=torch.bool)
    rtol, atol = tolerance
    want = expected.float().masked_select(mask)
    got = actual.float().masked_select(mask)
    if not want.numel():
        return 0.0
    if not bool(torch.isfinite(got).all()) and bool(torch.isfinite(want).all()):
        return float("inf")
    ratio = (got - want).abs() / (atol + rtol * want.abs())
    return float(ratio.nan_to_num(nan=0.0).max().item())
