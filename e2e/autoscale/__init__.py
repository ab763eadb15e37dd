"""Autoscaling e2e and benchmark helpers (issue 17): what a ramp did, drawn over time.

Dev-only, like all of ``e2e``: the load generator writes the run's
``timeline`` (``specdeploy.cli.loadgen.timeline``); the caller scrapes the
pools' replicas and K from Prometheus; ``join`` reads the one and names the
other's series on the run's time axis; ``timeline.plot_ramp`` draws both.
"""
