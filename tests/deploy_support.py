"""Shared paths and names for the deployment-artefact tests (test_deploy_dockerfile.py and
test_deploy_manifests.py): the repository root, the Kubernetes base, the router's namespace
and in-cluster DNS name, the config path inside the image, and Envoy's buffer headroom."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "kubernetes"
BASE = K8S / "base"
ROUTER_CONFIG = BASE / "router-config.yaml"
NAMESPACE = "semantic-router"
ROUTER_SERVICE_DNS = f"semantic-router.{NAMESPACE}.svc"
CONTAINER_CONFIG = "/etc/semantic-router/config.yaml"
BUFFER_HEADROOM = 64 * 1024
