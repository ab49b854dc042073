"""Deployment artefacts, checked statically: the Kubernetes manifests (field checks, and schema
validation with ``kubernetes-validate`` where installed), the committed Envoy config against
``semantic-router envoy render`` so it cannot drift, and the Istio / Envoy Gateway examples
against the rendered fragment. Nothing here needs network.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from extproc.cli import main as cli_main
from extproc.config import RouterConfig, load_config
from extproc.config.runtime import split_host_port
from extproc.envoy_render import bootstrap, fragment
from extproc.names import CLUSTER_HEADER, DECISION_HEADER
from tests.deploy_support import (
    BASE,
    BUFFER_HEADROOM,
    CONTAINER_CONFIG,
    K8S,
    NAMESPACE,
    ROOT,
    ROUTER_CONFIG,
    ROUTER_SERVICE_DNS,
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
    # liveness never, readiness not on the backends: /health (503 while the default model
    # has no ready endpoint) would restart every router in a backend outage
    probes = {p: router[p]["httpGet"] for p in ("readinessProbe", "livenessProbe",
                                                "startupProbe")}
    assert probes == {"readinessProbe": {"path": "/readyz", "port": "admin"},
                      "startupProbe": {"path": "/readyz", "port": "admin"},
                      "livenessProbe": {"path": "/livez", "port": "admin"}}
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
