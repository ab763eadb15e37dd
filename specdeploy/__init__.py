"""specdeploy: speculative decoding on Kubernetes that adapts K to load.

The import package joins two source folders kept at the repository root:
``specdeploy.runtime`` (what runs inside vLLM pods: K tables, the goodput
policy, the simulator) and ``specdeploy.operator`` (the kopf controller).
The runtime never imports the operator; this top level holds only the CLI.
"""

__version__ = "0.1.0"
