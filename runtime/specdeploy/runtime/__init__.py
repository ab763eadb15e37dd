"""What runs in GPU pods: K tables, the goodput policy, the vLLM add-on,
the profiler and the simulator.

Kept to a small dependency set (numpy, pydantic, PyYAML) because it is
imported inside vLLM's engine-core process; it never imports the operator.
"""
