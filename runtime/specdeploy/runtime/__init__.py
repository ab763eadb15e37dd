"""What runs in GPU pods: K tables, the goodput policy, the vLLM add-on,
the profiler and the simulator.

Kept to a small dependency set (numpy, pydantic, PyYAML) because it is
imported inside vLLM's engine-core process; it never imports the operator.
The API client (``kube``), through which the profiler writes its profile
and which the operator and the local-cluster harness share, adds the
official ``kubernetes`` package; the add-on never loads it.
"""
