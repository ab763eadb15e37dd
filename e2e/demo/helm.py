"""The helm binary from the cache, run against the local cluster.

Helm keeps its own state (repositories, cache) under the work directory, so
a demo or a test never reads or writes the user's ``~/.config/helm``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from e2e.localcluster.binaries import Binaries, repo_root

CHART = "charts/specdeploy"
RELEASE = "specdeploy"
NAMESPACE = "specdeploy-system"


class HelmFailed(RuntimeError):
    """A helm command exited non-zero; the message has its command line and stderr."""


def chart_dir() -> Path:
    """The checkout's chart (``charts/specdeploy``)."""
    return repo_root() / CHART


def set_flags(values: Mapping[str, str | float]) -> list[str]:
    """``--set-string key=value`` for a string (never read as a number or a bool),
    ``--set-json`` for a number: ``--set`` keeps ``2.0`` a string, which the chart's schema
    refuses where it wants a number."""
    return [
        f"--set-string={key}={value}" if isinstance(value, str) else f"--set-json={key}={value}"
        for key, value in sorted(values.items())
    ]


class Helm:
    """One helm binary, one kubeconfig, one state directory."""

    def __init__(self, kubeconfig: Path, home: Path, binary: Path | None = None) -> None:
        self.binary = binary or Binaries.for_checkout().path("helm")
        self.kubeconfig = kubeconfig
        self.home = home

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        for kind in ("CACHE", "CONFIG", "DATA"):
            env[f"HELM_{kind}_HOME"] = str(self.home / kind.lower())
        return env

    def run(self, args: Sequence[str], *, timeout: float = 300) -> str:
        """``helm ARGS --kubeconfig ...``; its stdout, or HelmFailed."""
        argv = [str(self.binary), *args, f"--kubeconfig={self.kubeconfig}"]
        done = subprocess.run(
            argv, capture_output=True, text=True, env=self._env(), timeout=timeout, check=False
        )
        if done.returncode != 0:
            shown = " ".join(argv[1:])
            raise HelmFailed(f"helm {shown} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def install(
        self,
        chart: Path,
        values: Mapping[str, str | float],
        *,
        release: str = RELEASE,
        namespace: str = NAMESPACE,
        upgrade: bool = False,
        wait_s: int = 180,
    ) -> str:
        """``helm install`` (or ``upgrade``) and wait: hooks done, the operator's pod Ready."""
        verb = ["upgrade"] if upgrade else ["install", "--create-namespace"]
        args = [*verb, release, str(chart), f"--namespace={namespace}", "--wait"]
        args += [f"--timeout={wait_s}s", *set_flags(values)]
        return self.run(args, timeout=wait_s + 60)

    def uninstall(self, *, release: str = RELEASE, namespace: str = NAMESPACE) -> str:
        return self.run(["uninstall", release, f"--namespace={namespace}", "--wait"])
