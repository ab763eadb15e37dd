"""Fuzzing the SpeculativeDeployment API on the local control plane (review §5.4 F1, F3).

Specs are drawn by hypothesis from the CRD's own OpenAPI schema
(``crds/*.yaml``, ``schema.py``), biased to the edges where bugs live
(``strategies.py``): lengths at and one past their bounds, numbers at and past
their limits, unicode, flag-like strings, annotation keys, toleration
combinations, pools and batch sizes. ``runner.py`` sends them in batches to a
real API server with the operator running and checks, per spec, what
``oracle.py`` says must hold: rejected at admission (422), or accepted and
then observed, either ``Valid=False`` naming a field of the spec and owning
nothing, or valid with every child write accepted; child names fit 63
characters; the operator neither dies, stalls nor logs a traceback.

Emulated, and said so: no profiler runs (every spec's node selector names a
label no node carries, so profiling pods stay Pending); the harness writes a
small modelled SpeculationProfile under the name each profiling Job states
(``landing.py``), so valid specs also reach the serving builders. The seed is
fixed, so a failing run replays; failures found are kept as YAML fixtures in
``regressions/`` and replayed by ``e2e/tests/cluster/test_fuzz_specs.py``.
"""
