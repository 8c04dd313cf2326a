"""Reading the counters a child process reports (torch's `counters`, as JSON: group -> name -> count)."""

from __future__ import annotations

from typing import Any


def counter(result: dict[str, Any], group: str, name: str) -> int:
    """One counter of a child's result; an absent group or name counts 0."""
    return int(result["counters"].get(group, {}).get(name, 0))


def miss_counters(result: dict[str, Any]) -> dict[str, int]:
    """The store's miss counters (`precompile`'s `miss_<reason>`) of a child's result."""
    return {k: v for k, v in result["counters"].get("precompile", {}).items() if k.startswith("miss_")}
