"""The openb GPU cluster and its pods as the documents ``allot apply -f`` reads: the workload of ``allot bench e2e``,
``allot bench ui`` and the long logs of ``allot bench replay`` / ``allot bench restart``.

Pure but for reading the trace CSVs and writing one YAML file; the placement engine's trace reader
(``allot_placement.openb``) makes each manifest.
"""

from __future__ import annotations

from pathlib import Path

from allot_contracts.jsonvalue import JsonObject

NAMESPACE = "openb"


def cluster_docs(nodes_csv: Path, node_count: int = 0) -> list[JsonObject]:
    """Every trace node's ``v1 Node``, each GPU node followed by its Koordinator ``Device``; with ``node_count``, the
    node list cycled to that many nodes, copies named ``<name>-r<k>`` (as ``allot bench placement --node-count``)."""
    from allot_placement.openb import node_manifests, read_nodes, replicate

    nodes = read_nodes(nodes_csv)
    docs: list[JsonObject] = []
    for node in replicate(nodes, node_count) if node_count else nodes:
        manifest, device = node_manifests(node)
        docs.append(manifest)
        if device is not None:
            docs.append(device)
    return docs


def pod_docs(pods_csv: Path, count: int, prefix: str = "") -> list[JsonObject]:
    """``count`` openb pods in trace order (cycling through the list when it is shorter), renamed with ``prefix``;
    without one, the copies after the first pass are named ``<name>-r<k>`` (as ``allot_placement.openb.replicate``
    names them), so that every name is distinct."""
    from allot_placement.openb import pod_manifest, read_pods

    trace = read_pods(pods_csv)
    docs: list[JsonObject] = []
    for i in range(count):
        k, pod = divmod(i, len(trace))
        name = f"{prefix}{trace[pod].name}-{i}" if prefix else f"{trace[pod].name}-r{k}" if k else None
        docs.append(pod_manifest(trace[pod], name=name, namespace=NAMESPACE))
    return docs


def _metadata(doc: JsonObject) -> JsonObject:
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        raise ValueError(f"a {doc.get('kind')} document without metadata")
    return metadata


def name_of(doc: JsonObject) -> str:
    """``metadata.name`` of a document made here."""
    return str(_metadata(doc).get("name", ""))


def renamed(doc: JsonObject, name: str) -> JsonObject:
    """A copy of ``doc`` named ``name`` (its other metadata kept)."""
    return {**doc, "metadata": {**_metadata(doc), "name": name}}


def deletion(doc: JsonObject) -> JsonObject:
    """The ``Delete`` document that removes ``doc`` (a pod made here)."""
    metadata = _metadata(doc)
    return {
        "apiVersion": "allot.dev/v1",
        "kind": "Delete",
        "spec": {"kind": "Pod", "namespace": metadata.get("namespace"), "name": metadata.get("name")},
    }


def write_yaml(path: Path, docs: list[JsonObject]) -> Path:
    """``docs`` as one multi-document YAML file at ``path`` (keys in their order)."""
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    path.write_text(yaml.dump_all(docs, Dumper=dumper, sort_keys=False))
    return path
