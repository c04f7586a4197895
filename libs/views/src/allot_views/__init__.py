"""Read models of Allot: pure folds of the event log into what ``allot get``, ``allot explain``, ``allot decisions``,
the simulator and the web view show.

- :mod:`allot_views.cluster`: pods, nodes and GPUs as the log says they stand (:class:`~allot_views.cluster.ClusterView`);
- :mod:`allot_views.decisions`: the scheduling decisions, one JSON object each (the same for a simulator log and a live
  one);
- :mod:`allot_views.usage`: quota chargeback (GPU-, GPU-memory- and CPU-hours, own and borrowed) over a window.
- :mod:`allot_views.nearest`: a pending pod's nearest miss (the closest node, the smallest change) and queue place;
- :mod:`allot_views.objects`: a row of ``allot get`` as the Kubernetes object it stands for (``-o json|yaml``);
- :mod:`allot_views.units`: quantities for people (``16Gi``, ``500m``, ``unlimited``).

No IO and no clock: a view is a function of the recorded events it is given.
"""
