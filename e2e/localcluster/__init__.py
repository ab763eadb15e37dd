"""The local control plane: real Kubernetes components as local processes, fake GPU nodes.

Every cluster-level test of the operator, and the demo, run on this. The pieces
are the upstream programs (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, KWOK, Prometheus 3) built from their Go modules by
``e2e/build/build.sh``; this package starts them on 127.0.0.1 with real TLS
and RBAC, registers a fake GPU fleet, and stands in for the kubelet where a
test needs a container's effect (``standin``).

Layers, lowest first; a module imports only from layers below it:

- pure values and decisions: ``fleet`` (fleet spec -> Node objects),
  ``components`` (argv per component), ``podenv`` (pod env and paths),
  ``stages`` (KWOK stage config), ``prometheus`` (scrape config, the label
  contract, and the atomic file-SD target writer the stand-in calls);
- effects, one concern each: ``kubeapi`` (the harness's API verbs over the shared
  ``specdeploy.runtime.kube`` client), ``pki`` (openssl), ``processes`` (spawn, probe, stop by
  recorded PID), ``binaries`` (find or build the cached binaries),
  ``volumes`` (materialise a pod's volumes);
- orchestration: ``cluster`` (up / down of a work directory), ``standin``
  (the kubelet stand-in process).

Nothing here imports the operator, and of the runtime only its API client
(``specdeploy.runtime.kube``, which the operator and the profiler share): the
harness must not depend on the decisions it tests, and the cluster tests
exercise that client end to end against a real API server.
"""
