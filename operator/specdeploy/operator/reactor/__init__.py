"""When things run: kopf's handlers, the reconciler's queue, one reconcile's I/O sequence,
the telemetry timer, leader election, the operator's own metrics. The only async code;
it calls ``clients`` for I/O and ``decision`` for what to do."""
