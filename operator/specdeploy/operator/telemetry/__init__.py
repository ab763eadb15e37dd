"""Telemetry, pure: Prometheus' answers -> windows -> a pool's live view, merged with the profiles.

Acceptance depends on the traffic (per deployment and pool), step cost on
the hardware (per profile). Every ``spec.telemetry.interval`` the loop
(``reactor.telemetry_loop``) reads the add-on's counters for every pool (one PromQL query per metric
family for all due deployments, ``queries``), hands each deployment its
pools' windows (``window``), and the ordinary reconcile decides purely what
they mean (``assess``): the live acceptance with its confidence, a schedule
re-derived from it and the profile's cost model corrected by live step
times (``specdeploy.runtime.live``), cost drift (``drift``) and
Prometheus' health (``health``). The reconciler stays the only writer of the
deployment's status and table ConfigMaps; the loop writes only the
SpeculationProfiles' ``status.live`` (``profile_live``), hash-gated.

Layer: every module here is pure. The timer that runs an interval is
``reactor/telemetry_loop.py`` and the HTTP client ``clients/prometheus.py``;
``.importlinter`` holds this package to no I/O.
"""
