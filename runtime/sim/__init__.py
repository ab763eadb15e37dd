"""A model of GPUs, LLMs, drafts and a continuous-batching engine.

Everything it produces is *modelled*, never measured, and says so
(``source: modelled``). It backs the benchmarks, the profiler's ``sim``
backend and the emulated vLLM pods of the local cluster.
"""
