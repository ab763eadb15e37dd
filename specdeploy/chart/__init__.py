"""The Helm chart's generated parts, written from typed sources (a test fails when stale)."""
