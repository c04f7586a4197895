"""kube-sync: records the cluster's pods, quotas, PodGroups, Reservations and PodMigrationJobs in the event log
(:mod:`allot_kube_sync.sync`), as a process with health and metrics endpoints (:mod:`allot_kube_sync.process`,
started by :mod:`allot_kube_sync.main`)."""
