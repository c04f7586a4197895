"""Kubernetes mode of the CLI: ``allot kube-sync`` records the cluster's pods, quotas and PodGroups in the log
(:mod:`allot_cli.kube.sync`), as a process with health and metrics endpoints (:mod:`allot_cli.kube.process`)."""
