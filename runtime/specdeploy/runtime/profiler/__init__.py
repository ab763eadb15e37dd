"""The profiler: measures step time per (batch size, K) and acceptance per position.

``specdeploy profile`` runs it as the profiling Job's container and from a
laptop. Backends (``backend.ProfilerBackend``) do the measuring: ``sim``
(the simulator, modelled) and ``vllm`` (a real engine, measured).

Map: ``run`` (one run end to end, exit codes) -> ``search`` (which cells)
-> ``grid`` (measured cells, pooled acceptance) -> ``sampling`` (when a
cell is stable) -> a backend (``sim_backend``, ``vllm_backend`` built via
``backends``); then ``document`` (the SpeculationProfile) and ``writer``
(file, or the Kubernetes API through ``specdeploy.runtime.kube``). Around them: ``datasets``
(prompts), ``progress``, ``termination`` and ``exit_codes``.
"""
