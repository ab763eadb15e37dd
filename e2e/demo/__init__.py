"""``make demo``: the fleet on the local cluster, installed the way a user installs it.

Brings the local cluster up (binaries built once and cached), installs the chart
with Helm (the operator then runs as the chart's ServiceAccount in a pod the
kubelet stand-in runs), applies ``examples/specdeploy.yaml``, drives emulated
traffic through chat, random text and chat again (the live floor's round trip
to plain decoding and back), prints the fleet's status as it changes, draws
the dashboards' panels from the live Prometheus and tears it all down
(``KEEP=1``: leaves it up). Modules: ``helm`` (the helm binary), ``builds``
(what the binaries cost to build), ``table`` (the status table), ``observe``
(the status read from the API and Prometheus), ``phases`` (the load's phases
and what the live floor showed in each), ``__main__`` (the run).
"""
