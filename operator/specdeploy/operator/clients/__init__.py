"""The operator's only API and HTTP I/O: the Kubernetes API (``k8s``), the watches' view
of it (``watch_cache``) and Prometheus' HTTP API (``prometheus``)."""
