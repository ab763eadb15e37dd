"""How specdeploy talks to the Kubernetes API: one client, one kind table, one request value.

The operator (``specdeploy.operator.clients.k8s``), the profiler writing its
SpeculationProfile from a pod (``specdeploy.runtime.profiler.writer``) and the
local-cluster harness (``e2e.localcluster.kubeapi``) all go through this
package. It lives in the runtime because that is the one layer all three may
import: the profiler runs in GPU pods, which never import the operator or the
harness. Watching stays kopf's.

* ``paths``: where each kind lives (one table: apiVersion, plural, scope) and
  the REST paths built from it. Pure.
* ``requests``: an API call and its answer as plain values, so what a
  reconcile or a profile write would send is testable without a server. Pure.
* ``client``: the official ``kubernetes`` client's ``ApiClient`` behind a
  narrow, typed wrapper (``Client.request``, ``Client.exchange``,
  ``ApiError``, ``TRANSPORT_ERRORS``, ``get_or_none``).
* ``config``: where the server is and who we are (``connect``): an explicit
  kubeconfig, ``$KUBECONFIG``, the pod's ServiceAccount, ``~/.kube/config``,
  read by the official loaders (contexts, exec and OIDC credentials,
  proxies), plus the in-cluster overrides the local kubelet stand-in needs.

This ``__init__`` imports nothing, so the operator's pure modules can import
``paths`` and ``requests`` without loading the client or an HTTP stack
(``tests/unit/repo/test_operator_layering.py`` follows the imports).
"""
