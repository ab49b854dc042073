#!/bin/sh
# Renders base/envoy.yaml (the envoy-config ConfigMap) from base/router-config.yaml.
# The ext_proc cluster points at the router's headless Service, so Envoy resolves every ready
# router pod and spreads streams over them. tests/test_deploy_manifests.py fails while
# base/envoy.yaml differs from this output.
#   NAMESPACE=other ./render-envoy.sh   (also change `namespace:` in base/kustomization.yaml)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
namespace=${NAMESPACE:-semantic-router}
router=${SEMANTIC_ROUTER:-semantic-router}
out="$here/base/envoy.yaml"
"$router" envoy render --config "$here/base/router-config.yaml" \
    --grpc-address "semantic-router.$namespace.svc:50051" > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out"
