"""What runs in GPU pods: K tables, the goodput policy, the vLLM add-on, the profiler.

Also the simulator (``sim``), which stands in for a GPU in the benchmarks and
the profiler's ``sim`` backend, and the operator↔pod contract (``contract``:
what the operator writes and the add-on reads, and the series the add-on
exports that the operator reads back; ``profiler.job_contract``) that both
sides import. A K schedule's shape and vLLM's rules for it are ``ranges``,
the schedule derived from a profile ``schedule``, the one derived from live
telemetry ``live``. No module of a package imports a sibling that imports
it back (``.importlinter``'s acyclic contract).

Kept to a small dependency set (numpy, pydantic, PyYAML; prometheus-client
for the add-on, the kubernetes client for the profiler's write) because the
add-on is imported inside vLLM's engine-core process; it never imports the
operator, the CLI, kopf or ``e2e`` (``.importlinter``).
"""
