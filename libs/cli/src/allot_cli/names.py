"""Object names and namespaces given on the command line (``allot get``, ``describe``, ``explain``), checked as
argparse types: an empty name, an empty part of ``NS/NAME``, a control character or a namespace that no object can
be in is a usage error naming the argument, instead of an empty answer or "not found" for a name that cannot exist.

A namespace is an RFC 1123 label, as Kubernetes requires (``allot apply`` records no other). A name is only checked
for its form (not empty, printable, at most one ``/`` with a valid namespace before it): the kinds differ in what
their names may be, and a name the log does not hold is the command's "not found".
"""

from __future__ import annotations

import argparse

from allot_runtime.flags import clipped

__all__ = ["namespace", "object_name"]


def namespace(text: str) -> str:
    from allot_contracts.objects.meta import is_dns_label  # imported when -n is given: it loads msgspec

    if not is_dns_label(text):
        raise argparse.ArgumentTypeError(
            f"must be a namespace (at most 63 lowercase letters, digits or '-', starting and ending with a letter "
            f"or digit), not {clipped(text)}"
        )
    return text


def object_name(text: str) -> str:
    """``NAME`` or ``NS/NAME``."""
    parts = text.split("/")
    if len(parts) > 2 or "" in parts or not text.isprintable():
        raise argparse.ArgumentTypeError(f"must be NAME or NAMESPACE/NAME, not {clipped(text)}")
    if len(parts) == 2:
        try:
            namespace(parts[0])
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"NAMESPACE/NAME: the namespace {exc}") from None
    return text
