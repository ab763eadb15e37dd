"""A model of GPUs, LLMs, drafts and a continuous-batching engine.

Everything it produces is *modelled*, never measured, and says so
(``source: modelled``). It backs the benchmarks and the profiler's ``sim``
backend (``runtime/profiler/sim_backend.py``).

Modules, one concern each:

- ``hardware``: GPU datasheet figures and efficiency factors.
- ``models``: transformer shapes (dense and MoE), bytes and FLOPs per step.
- ``roofline``: time of one forward pass by kernel class on a TP group.
- ``drafts``: EAGLE / EAGLE-3 heads, draft models, n-gram: cost per step.
- ``proposals``: how many drafts a drafter proposes (lookup drafters: often none).
- ``step_time``: the true step time = target verify + draft + engine overheads
  (piecewise graphs only with a K table, the cost of a K switch); the fitted
  model the policies use is ``runtime.cost``.
- ``acceptance``: per-position acceptance profiles, drift, bursts, mixtures, sampling.
- ``workload``: request lengths, closed loop, open loop with pre-drawn arrivals,
  rollouts.
- ``counts``: one step's reached/proposed/accepted counts (``goodput``'s definition).
- ``engine``: continuous batching driven by a K policy (``simulate``).
- ``state``: what simulator-only oracles may see of the engine.
- ``oracles``: the best choice of K in hindsight, to score policies against.
- ``presets``: named deployments, including the seed's dense and MoE cases.
- ``calibration``: ``seed-dense`` against the seed's figures and vLLM's AL anchors.
- ``profiling``: a preset's exhaustive, noise-free profile (``profile_preset``),
  the reference the benchmarks derive tables from.
- ``seeds``, ``compare``, ``scenarios`` and ``scenario_*``: policies side by
  side on several seeds, in steady state and in the benchmark's scenarios.
"""
