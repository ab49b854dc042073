"""The worker state file (``<state_dir>/workers.json``): crash-safe writes, and reads that
never lose what they cannot parse.

Contracts:

* :func:`write_atomically` writes a temp file in the same directory, fsyncs it and
  ``os.replace``s it over the old one, so a crash mid-write leaves the old file or the new one,
  never a torn one.
* :func:`read_saved` returns the saved entries. A file that cannot be read or parsed (not
  JSON, no ``workers`` list) is moved aside to ``workers.json.corrupt-<unix time>`` and the
  new path logged as an error, so the next registration's write does not overwrite the only
  copy of the registrations an operator may still recover by hand.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any


def write_atomically(path: Path, payload: bytes) -> None:
    """Temp file in the same directory, fsync, ``os.replace``, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _aside_path(path: Path, now: float) -> Path:
    aside = path.with_name(f"{path.name}.corrupt-{int(now)}")
    n = 1
    while aside.exists() or aside.is_symlink():  # never replace an earlier corrupt copy
        aside = path.with_name(f"{path.name}.corrupt-{int(now)}-{n}")
        n += 1
    return aside


def read_saved(path: Path, logger: logging.Logger, now: float | None = None) -> list[Any]:
    """The saved entries (``[]`` when there is no file); an unreadable file is moved aside."""
    if not path.exists() and not path.is_symlink():
        return []
    try:
        saved = json.loads(path.read_text("utf-8"))["workers"]
        if not isinstance(saved, list):
            raise TypeError("'workers' is not a list")
        return saved
    except (OSError, ValueError, KeyError, TypeError) as err:
        problem = str(err) if not isinstance(err, KeyError) else "no 'workers' list"
    aside = _aside_path(path, time.time() if now is None else now)
    try:
        os.replace(path, aside)
    except OSError as err:
        logger.error("cannot read the worker state file, nor move it aside: the next "
                     "registration overwrites it", extra={
                         "path": str(path), "error": problem, "move_error": str(err)})
        return []
    logger.error("cannot read the worker state file; moved it aside and started with no "
                 "saved registrations", extra={
                     "path": str(path), "moved_to": str(aside), "error": problem})
    return []
