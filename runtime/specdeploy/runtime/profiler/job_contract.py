"""The operator→profiling-pod contract: what a profiling Job's pod is told, and how it answers.

The operator's Job builder sets these variables and reads the exit codes
back (``podFailurePolicy`` fails the Job on a deterministic code, so
Kubernetes does not retry it); ``specdeploy profile`` reads the variables
and exits with those codes. Both sides import this module, which is pure
(no client, no engine), so the operator's decisions never load the
profiler's runner or an HTTP client through it.
"""

from __future__ import annotations

from specdeploy.runtime.kube.serviceaccount import ENV_SA_DIR, SERVICEACCOUNT_DIR
from specdeploy.runtime.profiler.exit_codes import DETERMINISTIC

__all__ = [
    "DETERMINISTIC_EXIT_CODES",
    "ENV_FINGERPRINT",
    "ENV_NAME",
    "ENV_NAMESPACE",
    "ENV_SA_DIR",
    "PROFILER_CONTAINER",
    "SERVICEACCOUNT_DIR",
]

PROFILER_CONTAINER = "profiler"
"""The Job's container: the operator reads its exit code from the pod's status."""
ENV_NAME = "SPECDEPLOY_PROFILE_NAME"
"""The SpeculationProfile to write (the operator names it after the fingerprint)."""
ENV_NAMESPACE = "SPECDEPLOY_PROFILE_NAMESPACE"
"""Where to write it: the Job's own namespace (a downward-API field)."""
ENV_FINGERPRINT = "SPECDEPLOY_PROFILE_FINGERPRINT"
"""The fingerprint the operator names the profile after (JSON). The ``sim`` backend
records it as the profile's (a modelled profile of exactly what the pool asked for);
the ``vllm`` backend records its engine's own, and the operator refuses a profile whose
fingerprint does not name it (review M12)."""
DETERMINISTIC_EXIT_CODES: tuple[int, ...] = tuple(sorted(int(c) for c in DETERMINISTIC))
"""Exit codes a retry cannot cure (invalid arguments, model missing, OOM, ...)."""
