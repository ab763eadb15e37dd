"""The controller (kopf): a SpeculativeDeployment becomes profiling Jobs, tables and vLLM pools.

Folders by what runs when. Layers, highest first; a module imports only from
layers below it (``.importlinter`` checks it, transitively):

=================  ========================================================
``main``           start: the client, the reconciler, the kopf handlers, kopf's loop
``reactor/``       WHEN (async): handlers, the reconciler and its queue, one reconcile's I/O,
                   the telemetry timer, leader election, the operator's metrics
``clients/``       the only API and HTTP I/O: ``k8s``, ``watch_cache``, ``prometheus``
``decision/``      PURE one deployment: ``decide`` (spec, observed, memory) -> Decision,
                   ``validation``, ``status``, ``plan`` (Decision -> requests)
``pool/``          PURE one pool's decision, one stage per module; ``pool/pipeline.py``
                   alone holds their order (jobs -> table -> floor -> live -> scaling ->
                   children -> outcome), and a stage imports only earlier ones
``config``         ``Config`` (operator-wide settings), ``Clock``, ``utc_now``
``telemetry/``     PURE windows -> a pool's live view
shared nouns       PURE ``observed``, ``manifests``, ``builders/``, ``discovery``,
                   ``conditions``, ``naming``
``api``            the pydantic models: the source of the CRDs (``crdgen`` writes ``crds/``)
=================  ========================================================

The pure modules never reach I/O, the profiler's runner or the simulator,
through any chain of imports. The operator may import the runtime (the pod
contract, the profile model, the schedule), never the reverse.
"""
