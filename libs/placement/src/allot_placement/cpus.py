"""CPU selection for cpuset-bound pods (the CPU accumulator).

Responsibility: ``take_cpus`` picks ``n`` CPUs from the available ones under a bind policy (``FullPCPUs``: whole
physical cores; ``SpreadByPCPUs``: one logical CPU per core first), an exclusive policy (``PCPULevel`` avoids cores,
``NUMANodeLevel`` NUMA nodes, already holding CPUs of pods with that policy) and a NUMA strategy (MostAllocated packs
the fullest NUMA node / socket first, LeastAllocated the emptiest).

Order of attempts (Koordinator's ``takeCPUs``):
1. FullPCPUs: one NUMA node with enough fully free cores (a pass that skips NUMANodeLevel-exclusive NUMA nodes
   first), then one socket; NUMA nodes and sockets are ranked by the CPUs of their *fully free cores*. Then whole
   sockets' free cores largest first, then the remaining cores smallest socket first.
2. SpreadByPCPUs: one NUMA node (ranked by its free CPUs), then one socket (ranked by its free cores), spreading
   over cores; the exclusive-respecting pass keeps one CPU per core.
3. Fallback: cores ordered by (CPUs already taken on the socket, socket strategy, NUMA strategy, core free count,
   socket id, core id), spread, recomputed for the pass that ignores exclusivity.
Ties are broken by NUMA id, socket id, core id and CPU id (decision 4), so the result is deterministic. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from allot_contracts.objects.inventory import Topology

__all__ = ["bind_policy_holds", "take_cpus"]


def _spread(cpus: Iterable[int], core_of: Mapping[int, int]) -> list[int]:
    """Round-robin over cores: the first CPU of every core in order, then the next unseen ones, and so on."""
    rest, out = list(cpus), []
    while rest:
        seen: set[int] = set()
        later: list[int] = []
        for c in rest:
            if core_of[c] in seen:
                later.append(c)
            else:
                seen.add(core_of[c])
                out.append(c)
        rest = later
    return out


def _count(cpus: Iterable[int], key: Mapping[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for c in cpus:
        out[key[c]] = out.get(key[c], 0) + 1
    return out


def bind_policy_holds(topo: Topology, cpus: list[int], policy: str) -> bool:
    cores = {topo.cpus[c][0] for c in cpus}
    if policy == "FullPCPUs":
        return len(cores) * topo.cpus_per_core == len(cpus)
    if policy == "SpreadByPCPUs":
        return len(cores) == len(cpus)
    return True


class _Acc:
    """What one ``take_cpus`` call reads: the topology maps, the exclusivity of placed CPUs, the strategy."""

    def __init__(self, topo: Topology, owner: Mapping[int, str], exclusive: str, most: bool) -> None:
        self.per_core = topo.cpus_per_core
        self.core_of = {c: v[0] for c, v in topo.cpus.items()}
        self.socket_of = {c: v[1] for c, v in topo.cpus.items()}
        self.numa_of = {c: v[2] for c, v in topo.cpus.items()}
        self.exclusive = exclusive
        self.sign = 1 if most else -1
        self.excl_cores = {
            self.core_of[c] for c, p in owner.items() if p == "PCPULevel" and c in self.core_of
        }
        self.excl_numas = {
            self.numa_of[c] for c, p in owner.items() if p == "NUMANodeLevel" and c in self.numa_of
        }

    def pcpu_excl(self, c: int) -> bool:
        return self.exclusive == "PCPULevel" and self.core_of[c] in self.excl_cores

    def numa_excl(self, c: int) -> bool:
        return self.exclusive == "NUMANodeLevel" and self.numa_of[c] in self.excl_numas

    def one_per_core(self, cpus: list[int]) -> list[int]:
        seen: set[int] = set()
        return [c for c in cpus if not (self.core_of[c] in seen or seen.add(self.core_of[c]))]  # type: ignore[func-returns-value]

    def full_cores(self, pool: list[int]) -> list[list[int]]:
        """The fully free cores among ``pool`` (sorted CPU ids), by core id."""
        by_core: dict[int, list[int]] = {}
        for c in pool:
            by_core.setdefault(self.core_of[c], []).append(c)
        return [by_core[k] for k in sorted(by_core) if len(by_core[k]) == self.per_core]

    def ranked(
        self, groups: dict[int, list[int]], score: Mapping[int, int] | None, socket: Mapping[int, int] | None
    ) -> list[list[int]]:
        """Groups ordered by the strategy on ``score`` (default: their size), then on their socket's ``socket``
        count, then by id."""

        def key(g: int) -> tuple[int, int, int]:
            s = socket.get(self.socket_of[groups[g][0]], 0) if socket is not None else 0
            return (self.sign * (score[g] if score is not None else len(groups[g])), self.sign * s, g)

        return [groups[g] for g in sorted(groups, key=key)]


def take_cpus(
    topo: Topology,
    available: Iterable[int],
    owner: Mapping[int, str],
    n: int,
    bind: str,
    exclusive: str,
    most_allocated: bool,
) -> list[int] | None:
    """``n`` CPUs out of ``available`` (sorted result), or ``None`` if there are not enough."""
    avail = sorted(c for c in available if c in topo.cpus)
    if n <= 0:
        return []
    if n > len(avail):
        return None
    acc = _Acc(topo, owner, exclusive, most_allocated)
    numas = {v[2] for v in topo.cpus.values()}
    sockets = {v[1] for v in topo.cpus.values()}
    cpus_per_numa = len(topo.cpus) // max(len(numas), 1)
    cpus_per_socket = len(topo.cpus) // max(len(sockets), 1)
    if bind == "FullPCPUs" or topo.cpus_per_core == 1:
        got, taken = _full_pcpus(acc, avail, n, cpus_per_numa, cpus_per_socket)
        if got is not None:
            return got
    else:
        got, taken = _spread_pcpus(acc, avail, n, cpus_per_numa, cpus_per_socket), []
        if got is not None:
            return got
    return _fallback(acc, avail, n, taken)


def _full_pcpus(
    acc: _Acc, avail: list[int], n: int, cpus_per_numa: int, cpus_per_socket: int
) -> tuple[list[int] | None, list[int]]:
    """(the CPUs, or None and the whole cores taken so far)."""
    if n <= cpus_per_numa:
        for filt in (True, False):
            pool = [c for c in avail if not (filt and acc.numa_excl(c))]
            groups: dict[int, list[int]] = {}
            for core in acc.full_cores(pool):
                groups.setdefault(acc.numa_of[core[0]], []).extend(core)
            for cpus in acc.ranked(groups, None, _count(pool, acc.socket_of)):
                if len(cpus) >= n:
                    return sorted(cpus[:n]), []
    per_socket: dict[int, list[list[int]]] = {}
    for core in acc.full_cores(avail):
        per_socket.setdefault(acc.socket_of[core[0]], []).append(core)
    if n <= cpus_per_socket:
        flat = {s: [c for core in cores for c in core] for s, cores in per_socket.items()}
        for cpus in acc.ranked(flat, None, None):
            if len(cpus) >= n:
                return sorted(cpus[:n]), []
    taken: list[int] = []
    leftover: list[list[list[int]]] = []
    for cores in sorted(per_socket.values(), key=lambda cs: (-len(cs), acc.socket_of[cs[0][0]])):
        size = sum(len(core) for core in cores)
        if size <= n - len(taken):
            taken.extend(c for core in cores for c in core)
        else:
            leftover.append(cores)
    for cores in sorted(leftover, key=len):
        for core in cores:
            if n - len(taken) < acc.per_core:
                break
            taken.extend(core)
    return (sorted(taken), taken) if len(taken) == n else (None, taken)


def _spread_pcpus(
    acc: _Acc, avail: list[int], n: int, cpus_per_numa: int, cpus_per_socket: int
) -> list[int] | None:
    if n <= cpus_per_numa:
        for filt in (True, False):
            pool = [c for c in avail if not (filt and (acc.pcpu_excl(c) or acc.numa_excl(c)))]
            groups: dict[int, list[int]] = {}
            for c in pool:
                groups.setdefault(acc.numa_of[c], []).append(c)
            free = {g: len(cpus) for g, cpus in groups.items()}
            for cpus in acc.ranked(groups, free, _count(pool, acc.socket_of)):
                cpus = acc.one_per_core(cpus) if filt else cpus
                if len(cpus) >= n:
                    return sorted(_spread(cpus, acc.core_of)[:n])
    if n <= cpus_per_socket:
        for filt in (True, False):
            by_socket: dict[int, list[int]] = {}
            for c in avail:
                if not (filt and acc.pcpu_excl(c)):
                    by_socket.setdefault(acc.socket_of[c], []).append(c)
            if filt:
                by_socket = {s: acc.one_per_core(cpus) for s, cpus in by_socket.items()}
            for cpus in acc.ranked(by_socket, None, None):
                if len(cpus) >= n:
                    return sorted(_spread(cpus, acc.core_of)[:n])
    return None


def _fallback(acc: _Acc, avail: list[int], n: int, taken: list[int]) -> list[int] | None:
    chosen = list(taken)
    for filt in (True, False):
        have = set(chosen)
        pool = [c for c in avail if c not in have and not (filt and (acc.pcpu_excl(c) or acc.numa_excl(c)))]
        colo = _count(chosen, acc.socket_of)
        socket_free, numa_free = _count(pool, acc.socket_of), _count(pool, acc.numa_of)
        core_free = _count(pool, acc.core_of)
        s = acc.sign
        pool.sort(
            key=lambda c: (
                -colo.get(acc.socket_of[c], 0),
                s * socket_free[acc.socket_of[c]],
                s * numa_free[acc.numa_of[c]],
                core_free[acc.core_of[c]],
                acc.socket_of[c],
                acc.core_of[c],
                c,
            )
        )
        for c in _spread(pool, acc.core_of):
            if len(chosen) >= n:
                break
            chosen.append(c)
        if len(chosen) >= n:
            return sorted(chosen)
    return None
