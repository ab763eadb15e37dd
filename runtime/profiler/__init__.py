"""The profiler: measures step time per (batch size, K) and acceptance per position.

``specdeploy profile`` runs it as the profiling Job's container and from a
laptop. Backends (``backend.ProfilerBackend``) do the measuring: ``sim``
(the simulator, modelled) and ``vllm`` (a real engine, measured).
"""
