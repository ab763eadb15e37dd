"""Draft models for SmolLM2-135M (placeholder until the distilled draft lands)."""

from __future__ import annotations

from pathlib import Path

ALIASES: frozenset[str] = frozenset()


class DraftUnavailable(RuntimeError):
    """The draft cannot be prepared here."""


def is_alias(name: str) -> bool:
    return name.lower() in ALIASES


def revision(name: str) -> str:
    return "none"


def ensure_draft(name: str, *, target: Path, root: Path | None = None) -> Path:
    raise DraftUnavailable(f"no draft named {name!r}")
