"""Kubernetes and Koordinator documents in, log events out."""
