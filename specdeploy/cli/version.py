"""The distribution's version, read from its metadata (pyproject.toml is the one source)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("specdeploy")
except PackageNotFoundError:  # a checkout on PYTHONPATH, never installed
    __version__ = "0+unknown"
