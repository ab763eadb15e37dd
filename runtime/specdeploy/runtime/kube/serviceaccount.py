"""Where a pod's ServiceAccount credentials are, and the variable that may move them. Pure.

Read by ``config`` (the in-cluster client) and written into the profiling
Job's env by the operator (through ``profiler.job_contract``). Its own
module so that neither the profiler's contract nor the operator's builders
import the client's configuration, and the client's configuration imports
nothing of the profiler.
"""

from __future__ import annotations

from pathlib import Path

ENV_SA_DIR = "SPECDEPLOY_SERVICEACCOUNT_DIR"
"""Where the pod's ServiceAccount token and CA are: the standard path, named
explicitly so that a kubelet stand-in running the pod locally (e2e/) can
rewrite it to its local copy, as it rewrites every mount path in env values."""
SERVICEACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

__all__ = ["ENV_SA_DIR", "SERVICEACCOUNT_DIR"]
