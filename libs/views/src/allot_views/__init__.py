"""Read models of Allot: pure folds of the event log into what ``allot get``, ``allot explain``, ``allot decisions``,
the simulator and the web view show.

- :mod:`allot_views.cluster`: pods, nodes and GPUs as the log says they stand (:class:`~allot_views.cluster.ClusterView`);
- :mod:`allot_views.decisions`: the scheduling decisions, one JSON object each (the same for a simulator log and a live
  one);
- :mod:`allot_views.usage`: quota chargeback (GPU-, GPU-memory- and CPU-hours, own and borrowed) over a window.

No IO and no clock: a view is a function of the recorded events it is given.
"""
