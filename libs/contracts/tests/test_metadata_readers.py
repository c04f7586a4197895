"""The lenient metadata readers: one implementation, in objects/meta.py, that the manifest helpers of kube.py use."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts import kube
from allot_contracts.objects.meta import annotations_of, labels_of, metadata_of


@pytest.mark.parametrize("metadata", [None, "", "pod-a", ["name"], 7])
def test_metadata_that_is_not_a_mapping_reads_as_empty(metadata: Any) -> None:
    manifest = {"metadata": metadata}
    assert metadata_of(manifest) == {} and labels_of(manifest) == {} and annotations_of(manifest) == {}


def test_labels_are_read_as_strings_and_annotations_as_written() -> None:
    manifest = {"metadata": {"name": "a", "labels": {"tier": 1}, "annotations": {"x": {"y": 2}}}}
    assert metadata_of(manifest)["name"] == "a"
    assert labels_of(manifest) == {"tier": "1"}
    assert annotations_of(manifest) == {"x": {"y": 2}}
    assert labels_of({"metadata": {"labels": ["tier"]}}) == {}


def test_the_manifest_helpers_are_the_same_readers() -> None:
    assert kube.meta is metadata_of and kube.labels is labels_of and kube.annotations_of is annotations_of
