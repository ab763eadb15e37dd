"""Where the local cluster's binaries are, and building them when they are not.

``e2e/build/build.sh`` builds each unit from its wrapper Go module into a
cache directory outside the repository, keyed by the version pinned in
``e2e/build/versions.env``. This module reads the same file, so the harness
and the build script cannot disagree about which binaries a checkout uses.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Which build unit produces each program.
UNIT_OF = {
    "etcd": "etcd",
    "kube-apiserver": "k8s",
    "kube-controller-manager": "k8s",
    "kube-scheduler": "k8s",
    "kubectl": "k8s",
    "kwok": "kwok",
    "helm": "helm",
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "helm-unittest": "helm-unittest",
    # The binary of the module's cmd/adapter package.
    "adapter": "prometheus-adapter",
}
VERSION_KEY = {
    "etcd": "ETCD_VERSION",
    "k8s": "K8S_VERSION",
    "kwok": "KWOK_VERSION",
    "helm": "HELM_VERSION",
    "prometheus": "PROMETHEUS_VERSION",
    "helm-unittest": "HELM_UNITTEST_VERSION",
    "prometheus-adapter": "PROMETHEUS_ADAPTER_VERSION",
}


class BinariesMissing(RuntimeError):
    """A binary is not in the cache; the message says which command builds it."""


def repo_root() -> Path:
    """The source checkout this package runs from (the harness is a dev tool)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "e2e" / "build" / "versions.env").is_file():
        raise BinariesMissing(f"{root} is not a specdeploy checkout (no e2e/build/versions.env)")
    return root


def cache_root() -> Path:
    """Mirrors build.sh: $SPECDEPLOY_CACHE, else $XDG_CACHE_HOME/specdeploy, else ~/.cache."""
    if explicit := os.environ.get("SPECDEPLOY_CACHE"):
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "specdeploy"


def read_versions(path: Path) -> dict[str, str]:
    """Parse the KEY=VALUE lines of versions.env."""
    versions = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip()
    return versions


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the programs for one set of versions."""

    root: Path
    versions: dict[str, str]

    @classmethod
    def for_checkout(cls) -> Binaries:
        versions_file = repo_root() / "e2e" / "build" / "versions.env"
        return cls(cache_root() / "bin", read_versions(versions_file))

    def unit_dir(self, unit: str) -> Path:
        return self.root / f"{unit}-{self.versions[VERSION_KEY[unit]]}"

    def path(self, program: str) -> Path:
        """The program's path; raises BinariesMissing if it has not been built."""
        unit = UNIT_OF[program]
        found = self.unit_dir(unit) / program
        if not (self.unit_dir(unit) / ".complete").is_file() or not found.is_file():
            raise BinariesMissing(f"{program} is not built: run `make cluster-bins` ({found})")
        return found

    def missing(self) -> list[str]:
        """Programs not built yet."""
        return [p for p in UNIT_OF if not (self.unit_dir(UNIT_OF[p]) / p).is_file()]


def build(units: list[str] | None = None) -> None:
    """Run build.sh (reuses what is cached; a cold build takes many minutes)."""
    script = repo_root() / "e2e" / "build" / "build.sh"
    subprocess.run([str(script), *(units or [])], check=True)
