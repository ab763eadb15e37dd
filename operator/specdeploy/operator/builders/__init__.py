"""Builders: pure functions from a decided pool (or deployment) to one Kubernetes manifest.

Each module builds one kind. Nothing here reads the cluster or decides
whether an object should exist: ``decision/`` decides, builders only shape.
"""
