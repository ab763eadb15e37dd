"""The controller (kopf): a SpeculativeDeployment becomes profiling Jobs, tables and vLLM pools.

Layers, highest first; a module imports only from layers below it
(``.importlinter`` checks it, transitively):

=============  ===========================================================
``main``       start: the client, the reconciler, the kopf handlers, kopf's loop
``handlers``   thin kopf event handlers -> "reconcile this deployment"
``reconcile``  gather -> decide -> plan -> send: the only place I/O and decisions meet
``metrics``    beside ``reconcile``: the operator's Prometheus metrics, ``MeteredApi``
``k8s``        the only module doing API I/O (gather, send)
``plan``       PURE Decision + observed -> the exact API requests (none when nothing changed)
``decide``     PURE (spec, observed, memory) -> Decision: validation, health, the status
``pool/``      PURE one pool's decision, one stage per module; ``pool/pipeline.py``
               alone holds their order (jobs -> table -> floor -> live -> scaling ->
               children -> outcome), and a stage imports only earlier ones
``config``     ``Config`` (operator-wide settings), ``Clock``, ``utc_now``
helpers        PURE ``observed``, ``status``, ``validation``, ``builders/``, ``manifests``,
               ``discovery``, ``naming``
``api``        the pydantic models: the source of the CRDs (``crdgen`` writes ``crds/``)
=============  ===========================================================

The pure modules never reach I/O, the profiler's runner or the simulator,
through any chain of imports. The operator may import the runtime (the pod
contract, the profile model, the schedule), never the reverse.
"""
