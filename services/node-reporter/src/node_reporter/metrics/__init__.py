"""node-reporter's NodeMetric: sampling the node's and its pods' usage, aggregating it, and reporting it.

Modules: ``procfs`` (node cpu and memory from ``/proc``), ``cgroups`` (pod cgroups, v1 and v2, cgroupfs and systemd
drivers), ``window`` (the samples kept, aggregated into Koordinator's ``NodeMetric``: usage averages, percentiles
per window, system usage, ``prodReclaimable``), ``report`` (the processor's decision on a NodeMetric).
Everything but the readers is pure; the sampling loop is the agent's (``adapters/agent.py``).
"""
