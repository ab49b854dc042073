"""Does a metadata key or value look like something the router must never store?

Worker metadata is kept in memory, written to the state file and served by ``GET
/v1/workers``, so it must not carry credentials or hardware identities. These are heuristics
tuned to reject keys, tokens and IDs while accepting what operators put in metadata (product
names such as "NVIDIA H100 80GB HBM3", versions such as "0.6.3.post1+cu124", model ids).
:func:`redacted` applies the same test to a client's unknown ``model`` before the router
echoes it in a 404 or logs it.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter

_SECRET_KEY = re.compile(
    r"token|passw|secret|api[_.-]?key|apikey|credential|private[_.-]?key|bearer|auth|cookie|"
    r"session",
    re.IGNORECASE,
)
_IDENTITY_KEY = re.compile(r"serial|uuid", re.IGNORECASE)
_SECRET_VALUE = (
    (re.compile(r"^\s*(bearer|basic)\s+\S", re.IGNORECASE), "looks like an Authorization value"),
    (re.compile(r"^(sk|pk|rk)-[A-Za-z0-9_-]{8,}"), "looks like an API key"),
    (re.compile(r"^(ghp|gho|ghs|github_pat|hf|xox[abp]|glpat)[_-][A-Za-z0-9_-]{8,}"),
     "looks like an access token"),
    (re.compile(r"^(AKIA|ASIA)[A-Z0-9]{12,}$"), "looks like a cloud access key"),
    (re.compile(r"^eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "looks like a JSON web token"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY"), "looks like a private key"),
    (re.compile(r"^(GPU|MIG)-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", re.IGNORECASE),
     "looks like a GPU UUID"),
    (re.compile(r"^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$"), "looks like a UUID"),
    (re.compile(r"^[0-9]{12,}$"), "looks like a serial number"),
    (re.compile(r"^[0-9a-fA-F]{32,}$"), "looks like a key or hash"),
)
_TOKEN_RUN = re.compile(r"[A-Za-z0-9]{20,}")
_TOKENISH = re.compile(r"^[A-Za-z0-9+/=_.~-]{24,}$")


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(c / len(text) * math.log2(c / len(text)) for c in counts.values())


def _class_changes(text: str) -> int:
    """How often the character class (lower, upper, digit) changes: random keys change
    often, product names ("GeForceRTX4090") rarely."""
    kinds = ["d" if c.isdigit() else "u" if c.isupper() else "l" for c in text]
    return sum(a != b for a, b in itertools.pairwise(kinds))


def secret_reason(value: str) -> str | None:
    """Why a metadata string looks like something that must not be stored, or None."""
    for pattern, reason in _SECRET_VALUE:
        if pattern.search(value):
            return reason
    # A long unbroken run of mixed letters and digits is how keys look; model names and
    # versions ("Qwen2.5-Coder-7B", "0.6.3.post1+cu124") break into short words.
    for run in _TOKEN_RUN.findall(value):
        mixed = any(c.isdigit() for c in run) and any(c.isalpha() for c in run)
        if mixed and _entropy(run) >= 3.8 and _class_changes(run) * 3 >= len(run):
            return "looks like a high-entropy secret"
    if _TOKENISH.match(value) and _entropy(value) >= 4.0:
        letters = "".join(c for c in value if c.isalnum())
        if _class_changes(letters) >= 0.4 * len(letters):
            return "looks like a high-entropy secret"
    return None


def redacted(value: str, limit: int = 200) -> str:
    """``value`` (cut to ``limit`` characters) to show in a log line or an error message, or
    a placeholder when it looks like a secret (a client that put its key in ``model``)."""
    reason = secret_reason(value[:1024])
    return f"[redacted: {reason}]" if reason is not None else value[:limit]


def key_reason(key: str) -> str | None:
    """Why a metadata key names something that must not be stored, or None."""
    if _SECRET_KEY.search(key):
        return "looks like a credential; metadata must not carry secrets"
    if _IDENTITY_KEY.search(key):
        return "GPU serial numbers and UUIDs are not accepted"
    return None
