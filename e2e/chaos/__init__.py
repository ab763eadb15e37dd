"""The chaos matrix on the local control plane (issue 15, review §5.1-5.3).

Faults are injected from outside the operator, which runs unchanged:

- ``proxy``: a TLS-terminating fault proxy between the operator and the API
  server (delays, 5xx/429, resets, truncated bodies, dropped watches, and a
  SIGKILL of the operator after a request reached the server);
- ``faults``: signals to the cluster's recorded processes, and their restart
  from the same command line;
- ``identity``: the operator under a ServiceAccount token and the ClusterRole
  it generates, reaching the API server through the proxy;
- ``oracle``: quiescence read from the API server's audit log, then the
  invariants I1-I7 (``invariants``);
- ``scenarios`` and ``runner``: the matrix, and ``make chaos`` writing
  ``bench/results/chaos.{json,md}``.

Everything runs against real components (etcd, kube-apiserver,
controller-manager, scheduler, KWOK); GPU nodes and pods are emulated as the
rest of the local cluster emulates them (``e2e/localcluster``).
"""
