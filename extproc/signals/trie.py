"""A word list as one regex with shared prefixes written once (a trie): the regex engine
follows one branch per character instead of trying every word at every position."""

from __future__ import annotations

import re

_Trie = dict[str, "_Trie"]


def trie_source(words: list[str]) -> str:
    """One regex matching exactly ``words`` (escaped), shared prefixes written once."""
    root: _Trie = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here

    def source(node: _Trie) -> str:
        branches = [re.escape(char) + source(child) for char, child in node.items() if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if "" not in node:
            return body
        return f"(?:{body})?"

    return source(root)
