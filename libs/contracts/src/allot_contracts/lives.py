"""Pod lives: a pod deleted and created again under the same name is a new life (a new ``metadata.uid``).

Events about one pod carry the ``uid`` of the life they are about. Whoever folds the log (every service's
:class:`allot_runtime.processor.Host`, the CLI's views) keeps the current life of every pod it has seen submitted or
observed, ignores events about any other life (a decision about the old pod that landed after the new one arrived),
and stamps its own decisions with the current life.
"""

from __future__ import annotations

import msgspec

from allot_contracts.events import Event, ObjectRef, PodDeleted, PodObserved, PodSubmitted


class PodLives:
    def __init__(self) -> None:
        self.current: dict[str, str] = {}  # pod key -> uid of its current life
        self._ended = ("", "")  # (pod key, uid) of the life the latest pod.deleted ended

    def stale(self, event: Event) -> bool:
        """Whether ``event`` is about a life of its pod other than the current one. Events about a PodMigrationJob
        (they name the ``job``) are about the job: their ``uid`` is the job's, and they stand whatever life the
        pod is in (an eviction's answer may land after the pod was re-created)."""
        shape = _SHAPES.get(type(event))
        if shape is None:
            shape = _shape(type(event))
        if shape <= _BIRTH or (shape == _JOB and isinstance(getattr(event, "job", None), ObjectRef)):
            return False
        uid = getattr(event, "uid", "")
        if not uid:  # about the current life, whichever it is (most decisions name none)
            return False
        pod = getattr(event, "pod", None)
        if not isinstance(pod, ObjectRef):
            return False
        current = self.current.get(pod.key)
        return current is not None and current != uid

    def observe(self, event: Event) -> None:
        """Follow births and deaths (call for events that are not stale)."""
        shape = _SHAPES.get(type(event))
        if shape is None:
            shape = _shape(type(event))
        if shape == _BIRTH:
            assert isinstance(event, PodSubmitted | PodObserved)
            if event.uid:
                self.current[event.pod.key] = event.uid
        elif shape == _DEATH:
            assert isinstance(event, PodDeleted)
            self._ended = (event.pod.key, self.current.pop(event.pod.key, "") or event.uid)

    def stamp(self, event: Event, trigger: Event | None = None) -> Event:
        """``event`` with its pod's current life filled in (or the trigger's, when it is about the same pod)."""
        if getattr(event, "uid", None) != "":
            return event
        pod = getattr(event, "pod", None)
        if not isinstance(pod, ObjectRef):
            return event
        uid = self.current.get(pod.key, "")
        if not uid and trigger is not None:
            trigger_pod = getattr(trigger, "pod", None)
            if isinstance(trigger_pod, ObjectRef) and trigger_pod.key == pod.key:
                uid = getattr(trigger, "uid", "") or ""
                if not uid and isinstance(trigger, PodDeleted) and self._ended[0] == pod.key:
                    uid = self._ended[1]  # a delete that named no uid: the life it ended
        return msgspec.structs.replace(event, uid=uid) if uid else event

    def snapshot(self) -> dict[str, str]:
        return dict(sorted(self.current.items()))


# What a class of events is to the lives, worked out once per class (the event classes are a fixed set): a birth
# (pod.submitted, pod.observed), a death (pod.deleted), about a PodMigrationJob when it names one (``job``), about a
# life of a pod (``uid`` and ``pod``), or never about a life.
_NEVER, _BIRTH, _DEATH, _JOB, _POD = range(5)  # never and birth first: ``stale`` tests ``shape <= _BIRTH``
_SHAPES: dict[type, int] = {}


def _shape(cls: type) -> int:
    shape = _SHAPES.get(cls)
    if shape is None:
        if issubclass(cls, PodSubmitted | PodObserved):
            shape = _BIRTH
        elif issubclass(cls, PodDeleted):
            shape = _DEATH
        elif hasattr(cls, "job"):
            shape = _JOB
        elif hasattr(cls, "uid") and hasattr(cls, "pod"):
            shape = _POD
        else:
            shape = _NEVER
        _SHAPES[cls] = shape
    return shape
