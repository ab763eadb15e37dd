"""The chart's dashboards checked without Grafana: their queries run against a real
Prometheus (``panels``, ``prom``) and their panels are drawn with matplotlib (``render``)."""
