"""The values matrix every chart test renders: each case a values file and the APIs served."""

from __future__ import annotations

from e2e.tests.chart.chart_render import MONITORING_APIS, Case

NAMESPACE = "specdeploy-system"
MONITORING_OFF = {
    "monitoring": {
        "serviceMonitor": {"enabled": False},
        "podMonitor": {"enabled": False},
        "prometheusRule": {"enabled": False},
    }
}
CUSTOM = {
    "image": {"repository": "registry.example/specdeploy", "tag": "9.9.9", "pullPolicy": "Always"},
    "replicaCount": 2,
    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}
    ],
    "podAnnotations": {"example.com/team": "inference"},
    "leaderElection": {"id": "sd-lease", "leaseDuration": 30},
    "operator": {"prometheusURL": "http://prometheus.monitoring:9090", "logLevel": "debug"},
}
CASES = {
    "defaults": Case(),
    "namespaced": Case({"watchNamespaces": ["team-a", "team-b"]}),
    "monitoring-on": Case({}, MONITORING_APIS),
    "monitoring-off": Case(MONITORING_OFF, MONITORING_APIS),
    "namespaced-monitoring-on": Case({"watchNamespaces": ["team-a"]}, MONITORING_APIS),
    "leader-election-off": Case({"leaderElection": {"enabled": False}}),
    "custom-image-and-resources": Case(CUSTOM),
}
