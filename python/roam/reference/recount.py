"""The plan-v2 recount of a schedule's theoretical peak (docs/GRAPH_FORMAT.md: liveness per
instance, aliases in their root's storage, resident storages free, sizes rounded to the
alignment, one workspace per run, graph outputs to the end), written independently of libroam,
and the graph loading shared with :mod:`roam.reference.remat_ilp`.

Raises ValueError naming the argument for bad input (a graph that is not a roam-graph dict or
file, an alignment that is not a power of two, an order naming unknown ops).
"""

import gzip
import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

def load_graph(path) -> dict:
    """Read a roam-graph v1 file (``.json``, or gzip-compressed ``.json.gz``) into a dict.

    Raises:
        ValueError: ``path`` is not a file of JSON (the message names it).
    """
    p = os.fspath(path)
    opener = gzip.open if p.endswith(".gz") else open
    try:
        with opener(p, "rt", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"path: cannot read a graph from {p!r}: {e}") from e


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _check_alignment(alignment) -> int:
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1 or \
            alignment & (alignment - 1):
        raise ValueError(f"alignment: a power of two >= 1, got {alignment!r}")
    return alignment


def _as_graph(graph) -> dict:
    if isinstance(graph, (str, os.PathLike)):
        graph = load_graph(graph)
    if not isinstance(graph, dict) or not isinstance(graph.get("ops"), list) or \
            not isinstance(graph.get("tensors"), list):
        raise ValueError("graph: a roam-graph dict with 'tensors' and 'ops' lists "
                         "(as loaded from JSON) or a path to one")
    return graph


class _Tensors:
    """Tensor table of a graph: roots, residency, producers (shared by recount and the model)."""

    def __init__(self, g: dict):
        self.t = {}
        for x in g["tensors"]:
            if not isinstance(x, dict) or "id" not in x:
                raise ValueError("graph: every tensor needs an 'id'")
            if x["id"] in self.t:
                raise ValueError(f"graph: duplicate tensor id {x['id']!r}")
            size = x.get("size", 0)
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ValueError(f"graph: tensor {x['id']!r}: size must be an integer >= 0")
            self.t[x["id"]] = x
        for x in self.t.values():
            if x.get("alias_of") is not None and x["alias_of"] not in self.t:
                raise ValueError(f"graph: tensor {x['id']!r}: alias_of {x['alias_of']!r} unknown")
        self._root = {}
        for tid in self.t:
            self.root(tid)
        self.producer = {}
        self.op_ids = []
        seen = set()
        for k, o in enumerate(g["ops"]):
            if not isinstance(o, dict) or "id" not in o:
                raise ValueError("graph: every op needs an 'id'")
            if o["id"] in seen:
                raise ValueError(f"graph: duplicate op id {o['id']!r}")
            seen.add(o["id"])
            self.op_ids.append(o["id"])
            for y in list(o.get("inputs", [])) + list(o.get("outputs", [])):
                if y not in self.t:
                    raise ValueError(f"graph: op {o['id']!r} names unknown tensor {y!r}")
            for y in o.get("outputs", []):
                if y in self.producer:
                    raise ValueError(f"graph: tensor {y!r} has two producers")
                self.producer[y] = k
        for tid, x in self.t.items():
            if tid not in self.producer and not self.resident(tid):
                raise ValueError(f"graph: tensor {tid!r} has no producer and no role "
                                 "(graph inputs are resident)")

    def root(self, tid: str) -> str:
        r = self._root.get(tid)
        if r is not None:
            return r
        path, cur = [], tid
        while self.t[cur].get("alias_of") is not None:
            path.append(cur)
            cur = self.t[cur]["alias_of"]
            if len(path) > len(self.t):
                raise ValueError(f"graph: alias cycle at tensor {tid!r}")
        for p in path + [cur]:
            self._root[p] = cur
        return cur

    def resident(self, tid: str) -> bool:
        return bool(self.t[tid].get("role")) or bool(self.t[self.root(tid)].get("role"))

    def storage_bytes(self, tid: str, alignment: int) -> int:
        """Aligned bytes of tid's root storage; 0 for resident or size-0 storages."""
        if self.resident(tid):
            return 0
        return _align(int(self.t[self.root(tid)].get("size", 0)), alignment)


# ------------------------------------------------------------------------------ recount ---

@dataclass
class Recount:
    """Liveness of a plan-v2 order recounted from GRAPH_FORMAT.md's rules.

    Attributes:
        tp_bytes: theoretical peak Tp (arena part, bytes; resident excluded).
        live_bytes: bytes live at every step (instances plus that step's workspace).
        recompute_seconds: sum of ``cost`` over recomputations (seconds).
        compute_seconds: sum of ``cost`` over every op once (seconds).
        recomputations: appearances after an op's first.
        overlapping: root ids of storages with two instances live at the same step (outside
            the model of :func:`solve_remat`; allowed by the format).
        instances: every instance of non-zero size, in order of creation: dicts with
            ``root``, ``index`` (0 at the first appearance), ``first``, ``last`` (steps) and
            ``size`` (aligned bytes): what a layout places.
        workspaces: every run's non-zero workspace: dicts with ``op``, ``run`` (0-based),
            ``step`` and ``size`` (aligned bytes).
    """
    tp_bytes: int
    live_bytes: List[int]
    recompute_seconds: float
    compute_seconds: float
    recomputations: int
    overlapping: List[str] = field(default_factory=list)
    instances: List[dict] = field(default_factory=list)
    workspaces: List[dict] = field(default_factory=list)


def recount(graph, order: Sequence[str], *, alignment: int = 64) -> Recount:
    """Recount Tp of ``order`` (a plan-v2 order: op ids, repeats allowed) on ``graph`` from the
    plan-v2 rules of docs/GRAPH_FORMAT.md: each appearance binds a new instance to each root
    output, an alias output to the instance its ``alias_of`` tensor is bound to then; inputs read
    the instance bound now; an instance lives from its creation to the last appearance reading
    or binding a tensor bound to it (to the end if a graph output is bound to it at the end);
    every run has its own workspace at its step; resident and size-0 storages are ignored;
    sizes are rounded up to ``alignment``. ``inplace`` permissions are ignored (a plan's
    ``inplace`` field is not read). Independent of the integer program of this module.

    Returns:
        :class:`Recount` (bytes, seconds).

    Raises:
        ValueError: ``graph`` is malformed; ``order`` is not a valid plan-v2 order (an unknown
            op, an op missing, a repeated op that is not recomputable, an input read before it
            is produced, an ``after`` edge broken, collective ops out of program order);
            ``alignment`` not a power of two.
    """
    g = _as_graph(graph)
    alignment = _check_alignment(alignment)
    T = _Tensors(g)
    ops = {o["id"]: o for o in g["ops"]}
    if isinstance(order, (str, bytes)) or not all(isinstance(x, str) for x in order):
        raise ValueError("order: a list of op ids")
    order = list(order)
    for x in order:
        if x not in ops:
            raise ValueError(f"order: unknown op {x!r}")
    missing = [o for o in ops if o not in set(order)]
    if missing:
        raise ValueError(f"order: op {missing[0]!r} never appears")
    must_follow = {}  # v -> ops w with v in after(w)
    for o in g["ops"]:
        for v in o.get("after", []):
            if v not in ops:
                raise ValueError(f"graph: op {o['id']!r}: after names unknown op {v!r}")
            must_follow.setdefault(v, []).append(o["id"])
    steps = len(order)
    bound: Dict[str, Optional[int]] = {}
    inst_size, inst_first, inst_last, inst_root = [], [], [], []
    seen: Dict[str, int] = {}
    work = [0] * steps
    workspaces = []
    rec_s = 0.0
    recs = 0

    def touch(inst, k):
        if inst is not None and inst_last[inst] < k:
            inst_last[inst] = k

    # docs/COLLECTIVES.md: collective ops run in program order
    collectives = [o["id"] for o in g["ops"] if o.get("collective") is not None]
    next_collective = 0
    for k, oid in enumerate(order):
        o = ops[oid]
        if o.get("collective") is not None and oid not in seen:
            if collectives[next_collective] != oid:
                raise ValueError(f"order: collective op {oid!r} at step {k} runs before "
                                 f"collective op {collectives[next_collective]!r}, which comes "
                                 f"before it in program order")
            next_collective += 1
        seen[oid] = seen.get(oid, 0) + 1
        if seen[oid] > 1:
            if not o.get("recomputable", False):
                raise ValueError(f"order: op {oid!r} appears again at step {k} "
                                 "but is not recomputable")
            rec_s += float(o.get("cost", 0.0) or 0.0)
            recs += 1
        for v in o.get("after", []):
            if v not in seen:
                raise ValueError(f"order: op {oid!r} at step {k} before its after-op {v!r}")
        for w in must_follow.get(oid, []):
            if w in seen:
                raise ValueError(f"order: op {oid!r} at step {k} after {w!r}, which lists it "
                                 "in after")
        for x in o.get("inputs", []):
            if x not in bound:
                if T.resident(x) and x not in T.producer:
                    bound[x] = None
                else:
                    raise ValueError(f"order: op {oid!r} at step {k} reads {x!r} before it "
                                     "is produced")
            touch(bound[x], k)
        outs = list(o.get("outputs", []))
        for y in outs:
            if T.t[y].get("alias_of") is None:
                size = T.storage_bytes(y, alignment)
                if T.resident(y):
                    bound[y] = None
                else:
                    bound[y] = len(inst_size)
                    inst_size.append(size)
                    inst_first.append(k)
                    inst_last.append(k)
                    inst_root.append(y)
        pending = [y for y in outs if T.t[y].get("alias_of") is not None]
        done_now = set(y for y in outs if T.t[y].get("alias_of") is None)
        while pending:
            rest = []
            for y in pending:
                b = T.t[y]["alias_of"]
                if b in pending and b not in done_now:
                    rest.append(y)
                    continue
                if b not in bound:
                    if T.resident(b) and b not in T.producer:
                        bound[b] = None
                    else:
                        raise ValueError(f"order: op {oid!r} at step {k} binds {y!r} to "
                                         f"{b!r} before it is produced")
                bound[y] = bound[b]
                touch(bound[y], k)
                done_now.add(y)
            if len(rest) == len(pending):
                raise ValueError(f"graph: op {oid!r}: alias outputs form a cycle")
            pending = rest
        work[k] = _align(int(o.get("workspace", 0) or 0), alignment)
        if work[k]:
            workspaces.append({"op": oid, "run": seen[oid] - 1, "step": k, "size": work[k]})
    for x in g.get("outputs", []):
        if x not in T.t:
            raise ValueError(f"graph: output {x!r} is not a tensor")
        if x not in bound:
            if T.resident(x):
                continue
            raise ValueError(f"order: graph output {x!r} is never produced")
        if bound[x] is not None:
            inst_last[bound[x]] = steps - 1
    delta = [0] * (steps + 1)
    by_root: Dict[str, List[int]] = {}
    for i, size in enumerate(inst_size):
        if size == 0:
            continue
        delta[inst_first[i]] += size
        delta[inst_last[i] + 1] -= size
        by_root.setdefault(inst_root[i], []).append(i)
    live, run = [], 0
    for k in range(steps):
        run += delta[k]
        live.append(run + work[k])
    overlapping = []
    for r, insts in by_root.items():
        for a, b in zip(insts, insts[1:]):
            if inst_last[a] >= inst_first[b]:
                overlapping.append(r)
                break
    comp = sum(float(o.get("cost", 0.0) or 0.0) for o in g["ops"])
    index: Dict[str, int] = {}
    instances = []
    for i, size in enumerate(inst_size):
        r = inst_root[i]
        j = index.get(r, 0)
        index[r] = j + 1
        if size:
            instances.append({"root": r, "index": j, "first": inst_first[i],
                              "last": inst_last[i], "size": size})
    return Recount(tp_bytes=max(live) if live else 0, live_bytes=live,
                   recompute_seconds=rec_s, compute_seconds=comp, recomputations=recs,
                   overlapping=sorted(overlapping), instances=instances,
                   workspaces=workspaces)
