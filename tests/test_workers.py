"""Worker registration: the validation table (secret-looking metadata included), config
workers, and the crash-safe state file."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from extproc import workers as workers_module
from extproc.config import RouterConfig, load_config_text
from extproc.config.loader import ConfigError
from extproc.worker_endpoint import OwnEndpoint
from extproc.workers import WorkerError, WorkerRegistry, parse_worker, static_workers

CONFIG = """
providers:
  defaults: {model: general}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{name: g, endpoint: "127.0.0.1:8000"}]
    - name: acme
      provider_model_id: acme/model-1
      backend_refs: [{name: a, endpoint: "127.0.0.1:8001"}]
"""


def example(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "worker_id": "cuda-01", "worker_type": "nvidia-gpu", "runtime": "cuda",
        "runtime_endpoint": "http://cuda-worker:8000/v1", "supported_models": ["acme/model-1"],
        "runtime_config": {"transport": "openai"},
        "gpu_metadata": {"product": "operator-reported"},
        "runtime_metadata": {"cuda_version": "operator-reported"},
    }
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not None}


@pytest.fixture(scope="module")
def config() -> RouterConfig:
    return load_config_text(CONFIG)


def test_the_documented_example_is_accepted(config: RouterConfig) -> None:
    worker = parse_worker(example(), config.models)
    assert worker.models == ("acme",)
    assert (worker.scheme, worker.host, worker.port) == ("http", "cuda-worker", 8000)
    by_name = parse_worker(example(supported_models=["general", "acme"]), config.models)
    assert by_name.models == ("general", "acme")
    ok_meta = {"product": "NVIDIA H100 80GB HBM3", "driver": "550.54.15", "mig": False,
               "memory_gib": 80, "image": "vllm/vllm-openai:v0.6.3.post1"}
    parse_worker(example(gpu_metadata=ok_meta, runtime_metadata={"model": "Qwen/Qwen3-8B"}),
                 config.models)


GPU_UUID = "GPU-3f8a1c2e-1b2d-4c5e-9f0a-1234567890ab"

CASES = [
    # (changes, field, words in the reason)
    ({"worker_id": None}, "worker_id", "required"),
    ({"runtime_config": None}, "runtime_config", "required"),
    ({"worker_id": "bad id!"}, "worker_id", "must match"),
    ({"worker_id": "x" * 64}, "worker_id", "must match"),
    ({"worker_id": "wnl\n"}, "worker_id", "must match"),  # "$" alone accepts this
    ({"worker_type": "gpu\n"}, "worker_type", "must match"),
    ({"runtime": "cuda\n"}, "runtime", "must match"),
    ({"gpu_metadata": {"k\n": 1}}, "gpu_metadata.k\n", "keys are"),
    ({"nickname": "x"}, "nickname", "unknown field"),
    ({"runtime_endpoint": "ftp://w:21/v1"}, "runtime_endpoint", "http:// or https://"),
    ({"runtime_endpoint": "cuda-worker:8000"}, "runtime_endpoint", "http:// or https://"),
    ({"runtime_endpoint": "http://u:p@w:8000/v1"}, "runtime_endpoint", "credentials"),
    ({"runtime_endpoint": "http://w:8000/openai/v1"}, "runtime_endpoint", "path must be /v1"),
    ({"runtime_endpoint": "http://w:99999/v1"}, "runtime_endpoint", "not a valid URL"),
    ({"runtime_endpoint": "http://127.0.0.1:0/v1"}, "runtime_endpoint", "port must be 1-65535"),
    ({"runtime_endpoint": "http://exa mple:8000/"}, "runtime_endpoint", "not an IP address"),
    ({"runtime_endpoint": "http://my_host:8000/"}, "runtime_endpoint", "not an IP address"),
    ({"runtime_endpoint": "http://a%20b:8000/"}, "runtime_endpoint", "not an IP address"),
    ({"runtime_endpoint": "http://-w:8000/"}, "runtime_endpoint", "not an IP address"),
    ({"runtime_endpoint": "http://999.1.1.1:8000/"}, "runtime_endpoint", "not a valid IPv4"),
    ({"runtime_endpoint": "http://[fe80::1%25eth0]:8000/"}, "runtime_endpoint", "zone ids"),
    ({"runtime_endpoint": "https://w/v1"}, "runtime_endpoint", "served over http"),
    ({"runtime_config": {"transport": "grpc"}}, "runtime_config.transport", "openai"),
    ({"supported_models": []}, "supported_models", "list of 1-"),
    ({"supported_models": ["nope"]}, "supported_models[0]", "unknown model 'nope'"),
    ({"weight": 0}, "weight", "1-128"),
    ({"gpu_metadata": "x"}, "gpu_metadata", "JSON object"),
    ({"gpu_metadata": {f"k{i}": 1 for i in range(33)}}, "gpu_metadata", "at most 32 keys"),
    ({"gpu_metadata": {"product": "x" * 300}}, "gpu_metadata.product", "at most 256"),
    ({"gpu_metadata": {"nested": {"a": 1}}}, "gpu_metadata.nested", "strings, numbers"),
    ({"gpu_metadata": {"bad key": 1}}, "gpu_metadata.bad key", "keys are"),
    # secrets and identities, by key
    ({"runtime_metadata": {"hf_token": "x"}}, "runtime_metadata.hf_token", "credential"),
    ({"runtime_metadata": {"password": "x"}}, "runtime_metadata.password", "credential"),
    ({"runtime_config": {"transport": "openai", "api_key": "x"}}, "runtime_config.api_key",
     "credential"),
    ({"runtime_metadata": {"client_secret": "x"}}, "runtime_metadata.client_secret",
     "credential"),
    ({"gpu_metadata": {"serial": "x"}}, "gpu_metadata.serial", "serial numbers and UUIDs"),
    ({"gpu_metadata": {"gpu_uuid": "x"}}, "gpu_metadata.gpu_uuid", "serial numbers and UUIDs"),
    # secrets and identities, by value
    ({"gpu_metadata": {"id": GPU_UUID}}, "gpu_metadata.id", "GPU UUID"),
    ({"gpu_metadata": {"id": "MIG-3f8a1c2e-1b2d-4c5e-9f0a-1234567890ab"}}, "gpu_metadata.id",
     "GPU UUID"),
    ({"gpu_metadata": {"board": "1324021012345"}}, "gpu_metadata.board", "serial number"),
    ({"runtime_metadata": {"note": "Bearer abc.def"}}, "runtime_metadata.note",
     "Authorization"),
    ({"runtime_metadata": {"note": "sk-proj-abcdef123456"}}, "runtime_metadata.note", "API key"),
    ({"runtime_metadata": {"note": "hf_abcdefghijklmnop"}}, "runtime_metadata.note",
     "access token"),
    ({"runtime_metadata": {"note": "aZ8kP2qLm9XvB4nR7tYw1sJd"}}, "runtime_metadata.note",
     "high-entropy"),
    ({"runtime_metadata": {"note": "d41d8cd98f00b204e9800998ecf8427e"}}, "runtime_metadata.note",
     "key or hash"),
]


@pytest.mark.parametrize(("changes", "field", "words"), CASES,
                         ids=[f"{c[1]}:{c[2]}" for c in CASES])
def test_rejections_name_the_field_and_why(config: RouterConfig, changes: dict[str, Any],
                                           field: str, words: str) -> None:
    with pytest.raises(WorkerError) as info:
        parse_worker(example(**changes), config.models)
    assert any(f == field and words in reason for f, reason in info.value.problems), \
        info.value.problems
    assert info.value.status == 400


@pytest.mark.parametrize(("given", "stored"), [
    ("http://w:8000/v1", "http://w:8000/v1"),
    ("http://w:8000/v1/", "http://w:8000/v1"),
    ("http://w:8000/", "http://w:8000/v1"),  # the README: an empty path or / means /v1
    ("http://w:8000", "http://w:8000/v1"),
    ("http://[fd00::1]:8000/", "http://[fd00::1]:8000/v1"),
    ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
    ("http://localhost:8000", "http://localhost:8000/v1"),
    ("http://vllm-0.vllm.svc.cluster.local:8000", "http://vllm-0.vllm.svc.cluster.local:8000/v1"),
    ("http://10.0.0.7:8000/v1", "http://10.0.0.7:8000/v1"),
    ("http://w/v1", "http://w/v1"),  # port 80
])
def test_runtime_endpoint_path_is_v1(config: RouterConfig, given: str, stored: str) -> None:
    worker = parse_worker(example(runtime_endpoint=given), config.models, now=1.0)
    assert worker.runtime_endpoint == stored  # shown by GET /v1/workers, persisted
    assert worker.to_json()["runtime_endpoint"] == stored
    assert parse_worker(worker.document(), config.models, now=1.0) == worker


def test_every_problem_is_reported(config: RouterConfig) -> None:
    doc = example(worker_id="bad id", runtime_config={"transport": "x"},
                  gpu_metadata={"serial": "1"})
    with pytest.raises(WorkerError) as info:
        parse_worker(doc, config.models)
    assert {f for f, _ in info.value.problems} == {
        "worker_id", "runtime_config.transport", "gpu_metadata.serial"}


def test_config_workers_list_and_directory(config: RouterConfig, tmp_path: Path) -> None:
    workers, errors = static_workers([example(), example(worker_id="b", gpu_metadata={
        "serial": "1"})], config.models)
    assert [w.worker_id for w in workers] == ["cuda-01"] and workers[0].source == "config"
    assert errors == ["workers[1].gpu_metadata.serial: GPU serial numbers and UUIDs are not "
                      "accepted"]
    (tmp_path / "a.json").write_text(json.dumps(example()))
    (tmp_path / "b.json").write_text("{broken")
    workers, errors = static_workers(str(tmp_path), config.models)
    assert [w.worker_id for w in workers] == ["cuda-01"]
    assert len(errors) == 1 and "b.json: cannot read JSON" in errors[0]
    with pytest.raises(ConfigError, match=r"workers\[0\]\.supported_models\[0\]: unknown"):
        load_config_text(CONFIG + "workers:\n  - " + json.dumps(example(
            supported_models=["x"])))


async def test_registrations_persist_atomically(config: RouterConfig, tmp_path: Path) -> None:
    registry = WorkerRegistry(config.models, tmp_path)
    worker, created = await registry.upsert(example())
    assert created
    again, created = await registry.upsert(example(weight=3))
    assert not created and again.registered_at == worker.registered_at and again.weight == 3
    await registry.upsert(example(worker_id="cuda-02", runtime_endpoint="http://cuda-2:8000"))
    assert [p.name for p in tmp_path.iterdir()] == ["workers.json"]  # no temp files left

    reloaded = WorkerRegistry(config.models, tmp_path)
    reloaded.load()
    assert [w.worker_id for w in reloaded.all()] == ["cuda-01", "cuda-02"]
    restored = reloaded.get("cuda-01")
    assert restored is not None and restored.weight == 3
    assert restored.registered_at == worker.registered_at
    assert await reloaded.remove("cuda-02") is not None
    after = WorkerRegistry(config.models, tmp_path)
    after.load()
    assert [w.worker_id for w in after.all()] == ["cuda-01"]


async def test_a_failed_write_keeps_the_old_file(config: RouterConfig, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    registry = WorkerRegistry(config.models, tmp_path)
    await registry.upsert(example())
    before = (tmp_path / "workers.json").read_bytes()

    def crash(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)  # the crash happens between write and rename
    with pytest.raises(WorkerError) as info:
        await registry.upsert(example(worker_id="cuda-02", runtime_endpoint="http://w2:8000"))
    assert info.value.status == 503
    assert (tmp_path / "workers.json").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["workers.json"]
    assert registry.get("cuda-02") is None  # memory matches what a restart would load


async def test_config_workers_are_read_only(config: RouterConfig) -> None:
    configured, _ = static_workers([example()], config.models)
    registry = WorkerRegistry(config.models)
    registry.load(configured)
    with pytest.raises(WorkerError) as info:
        await registry.upsert(example())
    assert info.value.status == 409
    with pytest.raises(WorkerError):
        await registry.remove("cuda-01")


async def test_an_endpoint_serves_a_model_for_one_worker_only(config: RouterConfig) -> None:
    """Two workers at one host:port for one model: Envoy would get that endpoint twice."""
    registry = WorkerRegistry(config.models)
    await registry.upsert(example())
    with pytest.raises(WorkerError) as info:
        await registry.upsert(example(worker_id="cuda-02", supported_models=["general", "acme"],
                                      runtime_endpoint="http://CUDA-worker:8000/"))
    assert (info.value.status, info.value.code, info.value.field) == (
        409, "endpoint_in_use", "runtime_endpoint")
    assert "cuda-worker:8000 already serves model 'acme' as worker 'cuda-01'" in str(info.value)
    assert registry.get("cuda-02") is None
    # the same worker may update itself; another model or another port is fine
    updated, created = await registry.upsert(example(weight=2))
    assert not created and updated.weight == 2
    await registry.upsert(example(worker_id="cuda-02", supported_models=["general"]))
    await registry.upsert(example(worker_id="cuda-03", runtime_endpoint="http://cuda-worker:8001"))
    # a config worker holds its endpoint too
    configured, _ = static_workers([example(worker_id="cfg", runtime_endpoint="http://c:1")],
                                   config.models)
    registry.load(configured)
    with pytest.raises(WorkerError, match="as worker 'cfg'"):
        await registry.upsert(example(runtime_endpoint="http://c:1/v1"))


async def test_a_corrupt_state_file_is_moved_aside_not_overwritten(
        config: RouterConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "workers.json"
    state.write_text('{"version": 1, "workers": [')  # torn by hand, or another tool
    registry = WorkerRegistry(config.models, tmp_path)
    with caplog.at_level(logging.ERROR):
        registry.load()
    (aside,) = tmp_path.glob("workers.json.corrupt-*")
    assert aside.read_text() == '{"version": 1, "workers": ['
    assert aside.name.removeprefix("workers.json.corrupt-").isdigit()
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert getattr(record, "moved_to", None) == str(aside)
    await registry.upsert(example())
    assert aside.read_text() == '{"version": 1, "workers": ['  # the next write left it alone
    assert json.loads(state.read_text())["workers"][0]["worker"]["worker_id"] == "cuda-01"
    state.write_text('{"workers": {"cuda-01": {}}}')  # JSON, but not the shape: aside too
    WorkerRegistry(config.models, tmp_path).load()
    assert len(list(tmp_path.glob("workers.json.corrupt-*"))) == 2 and not state.exists()


async def test_dropped_saved_workers_are_named(config: RouterConfig, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    registry = WorkerRegistry(config.models, tmp_path)
    await registry.upsert(example())
    shrunk = load_config_text(CONFIG.split("    - name: acme")[0])  # model acme removed
    with caplog.at_level(logging.WARNING):
        WorkerRegistry(shrunk.models, tmp_path).load()
    (record,) = [r for r in caplog.records if r.getMessage() == "dropping saved worker"]
    assert getattr(record, "worker_id", None) == "cuda-01"
    assert "unknown model 'acme/model-1'" in getattr(record, "error", "")


@pytest.mark.parametrize("endpoint", [
    "http://169.254.169.254/v1",  # link-local: AWS, GCP, Azure, OCI metadata
    "http://169.254.1.1:8000/v1",
    "http://[fe80::1]:8000/v1",
    "http://[::ffff:169.254.169.254]:80/v1",  # IPv4-mapped
    "http://[::ffff:a9fe:a9fe]/v1",  # the same, in hex
    "http://[::169.254.169.254]/v1",  # IPv4-compatible
    "http://[2002:a9fe:a9fe::1]/v1",  # 6to4
    "http://[64:ff9b::a9fe:a9fe]/v1",  # NAT64
    "http://[fd00:ec2::254]/v1",  # AWS metadata over IPv6
    "http://100.100.100.200/v1",  # Alibaba Cloud metadata
    "http://metadata.google.internal/v1",
    "http://METADATA.google.internal./v1",
    "http://metadata/v1",
    "http://instance-data/v1",
    "http://0.0.0.0:8000/v1",  # unspecified
    "http://[::]:8000/v1",
    "http://[::ffff:0.0.0.0]:8000/v1",
    "http://224.0.0.1:8000/v1",  # multicast
    "http://[ff02::1]:8000/v1",
    "http://255.255.255.255:8000/v1",  # broadcast
])
def test_endpoints_the_router_must_never_call_are_refused(config: RouterConfig,
                                                          endpoint: str) -> None:
    with pytest.raises(WorkerError) as info:
        parse_worker(example(runtime_endpoint=endpoint), config.models)
    assert (info.value.status, info.value.field) == (400, "runtime_endpoint")
    assert "workers must not point there" in str(info.value), info.value.problems


@pytest.mark.parametrize("endpoint", [
    "http://127.0.0.1:8000/v1", "http://[::1]:8000/v1", "http://localhost:8000/v1",
    "http://10.0.0.7:8000/v1", "http://192.168.1.20:8000/v1", "http://[fd00::7]:8000/v1",
    "http://metadata-cache.internal:8000/v1", "http://[::ffff:10.0.0.7]:8000/v1",
])
def test_loopback_and_private_workers_stay_allowed(config: RouterConfig, endpoint: str) -> None:
    assert parse_worker(example(runtime_endpoint=endpoint), config.models).port == 8000


OWN = (OwnEndpoint("admin API (router.admin)", "127.0.0.1", 8080),
       OwnEndpoint("Envoy listener (listener.address)", "0.0.0.0", 8899),
       OwnEndpoint("ext_proc gRPC server (router.grpc)", "10.1.2.3", 50051))


@pytest.mark.parametrize(("endpoint", "what"), [
    ("http://127.0.0.1:8080/v1", "admin API"),
    ("http://localhost:8080/v1", "admin API"),
    ("http://127.0.0.2:8899/v1", "Envoy listener"),  # a listener on all addresses
    ("http://[::1]:8899/v1", "Envoy listener"),
    ("http://10.1.2.3:50051/v1", "ext_proc gRPC server"),  # the address it is bound to
])
async def test_the_routers_own_ports_are_refused(config: RouterConfig, endpoint: str,
                                                 what: str) -> None:
    registry = WorkerRegistry(config.models, own_endpoints=lambda: OWN)
    with pytest.raises(WorkerError) as info:
        await registry.upsert(example(runtime_endpoint=endpoint))
    assert (info.value.status, info.value.field) == (400, "runtime_endpoint")
    assert f"the router's own {what}" in str(info.value)
    assert registry.all() == []


async def test_other_ports_and_hosts_are_not_the_router(config: RouterConfig) -> None:
    registry = WorkerRegistry(config.models, own_endpoints=lambda: OWN)
    for i, endpoint in enumerate(("http://127.0.0.1:8081/v1", "http://10.9.9.9:8080/v1",
                                  "http://10.9.9.9:50051/v1")):
        await registry.upsert(example(worker_id=f"w{i}", runtime_endpoint=endpoint))
    assert len(registry.all()) == 3


async def test_a_config_backend_holds_its_endpoint(config: RouterConfig) -> None:
    """A worker at a config backend_refs endpoint for the same model: Envoy would keep one host
    at the config weight, silently ignoring the worker's."""
    registry = WorkerRegistry(config.models)
    with pytest.raises(WorkerError) as info:
        await registry.upsert(example(runtime_endpoint="http://127.0.0.1:8001/v1", weight=5))
    assert (info.value.status, info.value.code) == (409, "endpoint_in_use")
    assert "127.0.0.1:8001 already serves model 'acme' as config backend 'a'" in str(info.value)
    # the same endpoint for another model is another cluster: fine
    await registry.upsert(example(runtime_endpoint="http://127.0.0.1:8001/v1",
                                  supported_models=["general"]))


async def test_the_worker_cap_says_how_to_free_space(config: RouterConfig,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers_module, "MAX_WORKERS", 2)
    registry = WorkerRegistry(config.models)
    for i in range(2):
        await registry.upsert(example(worker_id=f"w{i}", runtime_endpoint=f"http://w{i}:8000"))
    with pytest.raises(WorkerError) as info:
        await registry.upsert(example(worker_id="w2", runtime_endpoint="http://w2:8000"))
    assert (info.value.status, info.value.code) == (409, "too_many_workers")
    assert "never expire" in str(info.value) and "DELETE /v1/workers/" in str(info.value)
