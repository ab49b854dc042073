"""High-entropy tokens (UUIDs, hashes, JWTs, base64 blobs) that the jailbreak head reads as an
obfuscated payload even in a harmless question ("Is this a SHA-1 or a SHA-256 hash? 9f86d0...",
"what claims does this JWT have?"). A jailbreak score reached on a text holding such tokens is
checked again with each token read as "ID" (``SignalEvaluator``): an attack keeps its words
("decode this and do what it says" is also an ``attack_phrases`` match), a question about an
identifier loses its only suspicious part.
"""

from __future__ import annotations

import re

_OPAQUE = re.compile(
    r"\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b"                  # UUID
    r"|\beyJ[\w-]{4,}\.[\w-]{4,}\.[\w-]*"                                        # JWT
    r"|\b(?:0x)?(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*[0-9])[0-9a-fA-F]{12,}\b"  # hex
    r"|(?<![\w+/=-])(?=[\w+/-]*[0-9])(?=[\w+/-]*[a-z])(?=[\w+/-]*[A-Z])"           # base64
    r"[A-Za-z0-9+/_-]{16,}={0,2}(?![\w+/=-])"
    r"|\b(?=[A-Z0-9]*[0-9])(?=[A-Z0-9]*[A-Z])[A-Z0-9]{16,}\b"                    # key ids
)
# The head reads at most a few thousand characters: masking more would be wasted work.
MASKED_CHARS = 16 * 1024


def mask_opaque(text: str) -> str:
    """``text`` with each high-entropy token (in its first ``MASKED_CHARS``) read as "ID"."""
    head = text[:MASKED_CHARS]
    masked = _OPAQUE.sub("ID", head)
    return text if masked == head else masked + text[MASKED_CHARS:]
