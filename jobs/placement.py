"""Placements: the node, GPU indices and CPU slots each worker rank of a job holds
(`placement["hosts" | "gpus" | "cpus"][rank]`, written by admission)."""


def devices_overlap(a: dict, b: dict) -> bool:
    """Do two placements share a GPU index or CPU slot on the same node?"""

    def held(p):
        hosts = p.get("hosts") or {}
        out = set()
        for kind in ("gpus", "cpus"):
            for rank, ids in (p.get(kind) or {}).items():
                out.update((kind, hosts.get(rank), i) for i in ids)
        return out

    return not held(a).isdisjoint(held(b))
