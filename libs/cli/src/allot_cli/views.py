"""The cluster read model, kept importable here for the modules that still name it: it lives in
:mod:`allot_views.cluster`."""

from allot_views.cluster import ClusterView, GpuRow, gpu_rows, node_allocated

__all__ = ["ClusterView", "GpuRow", "gpu_rows", "node_allocated"]
