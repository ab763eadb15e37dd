"""The Helm chart's generated parts (``charts/specdeploy``), made from the project's own sources."""
