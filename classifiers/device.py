"""Device and dtype choice for classifier models.

Constraints: one `device` setting (`auto | cpu | cuda | cuda:N`), overridable per classifier and by
the environment variable `SEMANTIC_ROUTER_DEVICE`, which wins over both. Asking for CUDA where
torch sees none raises `DeviceError`; there is never a silent CPU fallback, because a router that
quietly runs its classifiers 20x slower than planned is worse than one that refuses to start.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping

import torch

from classifiers.api import DeviceError

DEVICE_ENV = "SEMANTIC_ROUTER_DEVICE"
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def choose_setting(
    setting: str, override: str | None = None, env: Mapping[str, str] | None = None
) -> str:
    """The effective device setting: env var, else per-classifier override, else global."""
    environ = os.environ if env is None else env
    from_env = environ.get(DEVICE_ENV, "").strip()
    if from_env:
        return from_env
    return override if override else setting


def resolve_device(
    setting: str = "auto", override: str | None = None, env: Mapping[str, str] | None = None
) -> torch.device:
    """Resolve a device setting to a concrete `torch.device`, or raise `DeviceError`."""
    chosen = choose_setting(setting, override, env).strip().lower()
    if not _DEVICE_RE.match(chosen):
        raise DeviceError(
            f"unknown classifier device {chosen!r}: expected auto, cpu, cuda or cuda:N"
        )
    if chosen == "cpu":
        return torch.device("cpu")
    if chosen == "auto":
        return torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    if not torch.cuda.is_available():
        raise DeviceError(
            f"classifier device {chosen!r} requested but torch sees no CUDA device "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); "
            f"set device: cpu or auto, or {DEVICE_ENV}=cpu"
        )
    index = int(chosen.split(":", 1)[1]) if ":" in chosen else 0
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceError(f"classifier device {chosen!r} requested but only {count} CUDA device(s)")
    return torch.device("cuda", index)


def default_dtype(device: torch.device) -> torch.dtype:
    """fp32 on CPU; bf16 on CUDA where supported (no fp16 overflow risk), else fp16."""
    if device.type != "cuda":
        return torch.float32
    if torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.float32` -> `"float32"`, as logged in `model_binding_ready`."""
    return str(dtype).removeprefix("torch.")


def quantize_int8(module: torch.nn.Module) -> torch.nn.Module:
    """Dynamic int8 quantization of every `nn.Linear` (CPU only).

    `torch.ao.quantization` is deprecated in favour of torchao, which is not a dependency; the
    eager API still works and its deprecation warnings are silenced here so strict-warning test
    runs and start-up logs stay clean.
    """
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8)
