"""The Helm chart's generated parts (``charts/specdeploy``), made from the project's own sources.

A chart drifts from the operator it installs unless its contracts are output,
not copies: the operator's RBAC rules come from ``operator.builders.rbac``
(the same function ``specdeploy operator rbac`` prints), the CRDs from
``crds/`` (generated from the API models), and ``values.schema.json`` from the
typed values model in ``values``. ``generate`` writes them and lists stale ones;
``specdeploy chart generate [--check]`` is its command line. Pure except
``generate.write``. The alerts (``alerts``, rendered into ``rules/``) and the dashboards
(``dashboards``) follow the same habit.
"""
