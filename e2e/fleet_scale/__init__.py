"""The fleet-scale benchmark's pure parts (``bench/fleet_scale.py`` drives the cluster)."""
