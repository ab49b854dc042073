"""Device selection: auto/cpu, CUDA requested without a GPU, env override, dtypes."""

from __future__ import annotations

import pytest
import torch

from classifiers import ClassifierSettings, DeviceError, LearnedSignalSpec
from classifiers.device import DEVICE_ENV, default_dtype, dtype_name, resolve_device
from classifiers.engine import SignalEngine


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(DEVICE_ENV, raising=False)


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_auto_is_cpu_without_cuda(no_cuda: None) -> None:
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_auto_picks_first_gpu(two_gpus: None) -> None:
    assert resolve_device("auto", env={}) == torch.device("cuda", 0)
    assert resolve_device("cuda", env={}) == torch.device("cuda", 0)
    assert resolve_device("cuda:1", env={}) == torch.device("cuda", 1)


def test_missing_gpu_index_is_an_error(two_gpus: None) -> None:
    with pytest.raises(DeviceError, match="only 2 CUDA"):
        resolve_device("cuda:2", env={})


@pytest.mark.parametrize("setting", ["cuda", "cuda:0", "CUDA:1"])
def test_cuda_without_gpu_raises(no_cuda: None, setting: str) -> None:
    with pytest.raises(DeviceError, match="no CUDA device"):
        resolve_device(setting)


def test_unknown_device_raises() -> None:
    with pytest.raises(DeviceError, match="unknown classifier device"):
        resolve_device("tpu", env={})


def test_env_wins_over_setting_and_override(no_cuda: None) -> None:
    env = {DEVICE_ENV: "cpu"}
    assert resolve_device("cuda", override="cuda:1", env=env) == torch.device("cpu")
    with pytest.raises(DeviceError):
        resolve_device("cpu", override="cpu", env={DEVICE_ENV: "cuda"})


def test_override_wins_over_setting(no_cuda: None) -> None:
    assert resolve_device("cuda", override="cpu", env={}) == torch.device("cpu")


def test_env_read_from_process(no_cuda: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    with pytest.raises(DeviceError):
        resolve_device("cpu")


def test_dtypes() -> None:
    assert default_dtype(torch.device("cpu")) == torch.float32
    assert dtype_name(torch.bfloat16) == "bfloat16"


def test_engine_build_fails_before_loading_on_missing_gpu(no_cuda: None) -> None:
    specs = [LearnedSignalSpec(name="dom", kind="domain")]
    with pytest.raises(DeviceError):
        SignalEngine.build(ClassifierSettings(device="cuda"), specs)


def test_shared_encoder_signals_cannot_split_devices(two_gpus: None) -> None:
    specs = [LearnedSignalSpec(name="dom", kind="domain", device="cuda:1")]
    with pytest.raises(DeviceError, match="shares the encoder"):
        SignalEngine.build(ClassifierSettings(device="cuda:0"), specs)
