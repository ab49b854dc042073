"""Package boundary: `classifiers/` never imports grpc or anything from `extproc/`."""

from __future__ import annotations

import ast
from pathlib import Path

import classifiers

FORBIDDEN = ("grpc", "extproc")


def test_classifiers_never_import_grpc_or_extproc() -> None:
    root = Path(classifiers.__file__).resolve().parent
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []
