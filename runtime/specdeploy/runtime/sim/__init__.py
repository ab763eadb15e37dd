"""A model of GPUs, LLMs, drafts and a continuous-batching engine.

Everything it produces is *modelled*, never measured, and says so
(``source: modelled``). It backs the benchmarks and the profiler's ``sim``
backend (``runtime/profiler/sim_backend.py``).

Modules, one concern each:

- ``hardware``: GPU datasheet figures and efficiency factors.
- ``models``: transformer shapes (dense and MoE), bytes and FLOPs per step.
- ``roofline``: time of one forward pass by kernel class on a TP group.
- ``drafts``: EAGLE / EAGLE-3 heads, draft models, n-gram: cost per step.
- ``costs``: step cost = target verify + draft + engine overheads.
- ``acceptance``: per-position acceptance profiles, drift, bursts, sampling.
- ``workload``: request lengths, closed loop, open loop with changing rates.
- ``engine``: continuous batching driven by a K policy (``simulate``).
- ``presets``: named deployments, including the seed's dense and MoE cases.
- ``profiling``: a preset's exhaustive, noise-free profile (``profile_preset``),
  the reference the benchmarks derive tables from.
"""
