"""The objects Allot reads, typed: what a Kubernetes / Koordinator / HAMi manifest means, parsed once at the door.

Every manifest that enters (``allot apply``, ``allot kube-sync``, node-reporter) is admitted here into a frozen
msgspec Struct; the services and the engines work on those, never on raw dicts. Admission returns the object or the
problems (:class:`allot_contracts.issues.FieldIssue`, with field paths), plus warnings for what is read but not
acted on. Pure: no IO, no clock.
"""
