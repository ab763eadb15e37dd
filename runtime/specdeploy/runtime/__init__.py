"""What runs in GPU pods: K tables, the goodput policy, the vLLM add-on, the profiler.

Also the simulator (``sim``), which stands in for a GPU in the benchmarks and
the profiler's ``sim`` backend, and the operator→pod contract (``contract``,
``profiler.job_contract``) that both sides import.

Kept to a small dependency set (numpy, pydantic, PyYAML; prometheus-client
for the add-on, the kubernetes client for the profiler's write) because the
add-on is imported inside vLLM's engine-core process; it never imports the
operator, the CLI, kopf or ``e2e`` (``.importlinter``).
"""
