"""Development-only code, run from a checkout and never shipped in the wheel or the images.

* ``localcluster``: the local control plane (real etcd, kube-apiserver,
  controller-manager, scheduler, KWOK GPU nodes) and the kubelet stand-in;
* ``models``: the real CPU test models (SmolLM2-135M and its drafts);
* ``dev``: what ``specdeploy dev build|up|down`` runs;
* ``tests``: the harness's own tests and the end-to-end tests on the cluster.

It may import the product (``specdeploy.*``); the product never imports it.
"""
