"""CPU selection for cpuset-bound pods (the CPU accumulator).

Responsibility: ``take_cpus`` picks ``n`` CPUs from the available ones under a bind policy (``FullPCPUs``: whole
physical cores; ``SpreadByPCPUs``: one logical CPU per core first), an exclusive policy (``PCPULevel`` avoids cores,
``NUMANodeLevel`` NUMA nodes, already holding CPUs of pods with that policy) and a NUMA strategy (MostAllocated packs
the fullest NUMA node / socket first, LeastAllocated the emptiest).

Order of attempts (Koordinator's accumulator):
1. FullPCPUs: one NUMA node with enough fully free cores (exclusive-respecting pass first), then one socket, then
   whole sockets' free cores largest first, then remaining cores smallest socket first.
2. SpreadByPCPUs: one NUMA node, then one socket, spreading over cores.
3. Fallback: cores ordered by (socket strategy, NUMA strategy, core free count, socket id, core id), spread.
Ties are broken by NUMA id, socket id, core id and CPU id (decision 4), so the result is deterministic. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from allot_contracts.objects.inventory import Topology

__all__ = ["bind_policy_holds", "take_cpus"]


def _spread(cpus: Iterable[int], core_of: Mapping[int, int]) -> list[int]:
    by_core: dict[int, list[int]] = {}
    for c in cpus:
        by_core.setdefault(core_of[c], []).append(c)
    out: list[int] = []
    depth = 0
    lists = list(by_core.values())
    while True:
        layer = [lst[depth] for lst in lists if len(lst) > depth]
        if not layer:
            return out
        out.extend(layer)
        depth += 1


def bind_policy_holds(topo: Topology, cpus: list[int], policy: str) -> bool:
    cores = {topo.cpus[c][0] for c in cpus}
    if policy == "FullPCPUs":
        return len(cores) * topo.cpus_per_core == len(cpus)
    if policy == "SpreadByPCPUs":
        return len(cores) == len(cpus)
    return True


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
    core_of = {c: v[0] for c, v in topo.cpus.items()}
    socket_of = {c: v[1] for c, v in topo.cpus.items()}
    numa_of = {c: v[2] for c, v in topo.cpus.items()}
    aset = set(avail)
    excl_cores = {core_of[c] for c, p in owner.items() if p == "PCPULevel" and c in core_of}
    excl_numas = {numa_of[c] for c, p in owner.items() if p == "NUMANodeLevel" and c in numa_of}

    def is_excl(c: int) -> bool:
        return (exclusive == "PCPULevel" and core_of[c] in excl_cores) or (
            exclusive == "NUMANodeLevel" and numa_of[c] in excl_numas
        )

    sign = 1 if most_allocated else -1
    numa_free: dict[int, int] = {}
    socket_free: dict[int, int] = {}
    for c in avail:
        numa_free[numa_of[c]] = numa_free.get(numa_of[c], 0) + 1
        socket_free[socket_of[c]] = socket_free.get(socket_of[c], 0) + 1
    numa_socket = {numa_of[c]: socket_of[c] for c in topo.cpus}
    numas = sorted(
        numa_socket, key=lambda z: (sign * numa_free.get(z, 0), sign * socket_free.get(numa_socket[z], 0), z)
    )
    sockets = sorted(set(socket_of.values()), key=lambda s: (sign * socket_free.get(s, 0), s))
    cpus_per_numa = len(topo.cpus) // max(len(numa_socket), 1)
    cpus_per_socket = len(topo.cpus) // max(len(sockets), 1)
    core_cpus: dict[int, list[int]] = {}
    for c in sorted(topo.cpus):
        core_cpus.setdefault(core_of[c], []).append(c)
    full_cores = [k for k in sorted(core_cpus) if all(c in aset for c in core_cpus[k])]

    if bind == "FullPCPUs" or topo.cpus_per_core == 1:
        for groups, key in ((numas, numa_of), (sockets, socket_of)):
            limit = cpus_per_numa if key is numa_of else cpus_per_socket
            if n > limit:
                continue
            for filt in (True, False):
                for g in groups:
                    if filt and key is numa_of and exclusive == "NUMANodeLevel" and g in excl_numas:
                        continue
                    cpus = [
                        c
                        for k in full_cores
                        if key[core_cpus[k][0]] == g
                        for c in core_cpus[k]
                        if not (filt and is_excl(c))
                    ]
                    if len(cpus) >= n:
                        return sorted(cpus[:n])
        taken: list[int] = []
        per_socket = {s: [k for k in full_cores if socket_of[core_cpus[k][0]] == s] for s in sockets}
        lists = sorted(
            per_socket.values(),
            key=lambda cores: (-len(cores), socket_of[core_cpus[cores[0]][0]] if cores else 0),
        )
        leftover = []
        for cores in lists:
            size = sum(len(core_cpus[k]) for k in cores)
            if cores and size <= n - len(taken):
                taken.extend(c for k in cores for c in core_cpus[k])
            else:
                leftover.append(cores)
        for cores in sorted(leftover, key=len):
            for k in cores:
                if n - len(taken) < topo.cpus_per_core:
                    break
                taken.extend(core_cpus[k])
        if len(taken) == n:
            return sorted(taken)
        return _fallback(n, avail, taken, core_of, socket_of, numa_of, sign, socket_free, numa_free, is_excl)

    for groups, key in ((numas, numa_of), (sockets, socket_of)):
        limit = cpus_per_numa if key is numa_of else cpus_per_socket
        if n > limit:
            continue
        for filt in (True, False):
            for g in groups:
                cpus = [c for c in avail if key[c] == g and not (filt and is_excl(c))]
                if filt:
                    seen: set[int] = set()
                    cpus = [c for c in cpus if not (core_of[c] in seen or seen.add(core_of[c]))]  # type: ignore[func-returns-value]
                if len(cpus) >= n:
                    return sorted(_spread(cpus, core_of)[:n])
    return _fallback(n, avail, [], core_of, socket_of, numa_of, sign, socket_free, numa_free, is_excl)


def _fallback(
    n: int,
    avail: list[int],
    taken: list[int],
    core_of: Mapping[int, int],
    socket_of: Mapping[int, int],
    numa_of: Mapping[int, int],
    sign: int,
    socket_free: Mapping[int, int],
    numa_free: Mapping[int, int],
    is_excl: object,
) -> list[int] | None:
    chosen = list(taken)
    have = set(chosen)
    used_sockets = {socket_of[c] for c in chosen}
    core_free: dict[int, int] = {}
    for c in avail:
        core_free[core_of[c]] = core_free.get(core_of[c], 0) + 1
    for filt in (True, False):
        rest = [c for c in avail if c not in have and not (filt and is_excl(c))]  # type: ignore[operator]
        rest.sort(
            key=lambda c: (
                0 if socket_of[c] in used_sockets else 1,
                sign * socket_free.get(socket_of[c], 0),
                sign * numa_free.get(numa_of[c], 0),
                core_free[core_of[c]],
                socket_of[c],
                core_of[c],
                c,
            )
        )
        for c in _spread(rest, core_of):
            if len(chosen) >= n:
                break
            chosen.append(c)
            have.add(c)
        if len(chosen) >= n:
            return sorted(chosen)
    return None
