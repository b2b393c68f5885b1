"""The schedules and the memory model of :mod:`roam.reference.remat_ilp`: :class:`RematModel`,
the graph of docs/GRAPH_FORMAT.md as the integer program sees it (ops in program order, storages,
aliases, sizes in units of the alignment).

The schedules (the model)
-------------------------
Ops are indexed 0..n-1 in program order (the graph's ``ops`` list, a topological order). A
schedule has n *stages*; stage t runs a subset of ops {i <= t} in increasing index order and
ends with op t (R[t,t] = 1, R[t,i] = 0 for i > t), so first appearances are in program order.
An op runs in a stage t > i (a recomputation) only if it is ``recomputable: true``, and never in
a stage after an op that lists it in ``after`` (every appearance of v precedes every appearance
of w). The schedule is the concatenation of the stages: a plan-v2 ``order`` (op ids with
repeats). So an op is recomputed at most once per stage (at most n-1-i times in all), and the
recomputations inside a stage run in program order: these restrictions are Checkmate's and are
part of the model. One more: **no storage has two instances live at once** (equivalently, no
appearance reads, and no graph output ends bound to, an alias bound to an older instance of
its root than the latest; without aliases this always holds).

Memory (GRAPH_FORMAT.md, implemented independently of the C++ code): an alias lives in its
root's storage; roots with a ``role`` (resident) cost nothing and are always available; storages
of size 0 are ignored; every size is rounded up to ``alignment`` (64); each run of an op has its
own ``workspace``, live at that step only; an op's inputs and outputs are live together at its
step; an instance is live from the appearance creating it to the last appearance that reads or
binds a tensor bound to it, and to the end if a graph output is bound to it. The peak Tp is the
arena part (resident bytes excluded). **In-place permissions (``inplace``) are ignored**: the
graph is treated as if it had none, so this is a reference for plans without in-place writes
(roam may use them; on graphs without ``inplace`` fields the models agree on that point).
"""

import math
from typing import Dict, List

from .recount import _align, _as_graph, _check_alignment, _Tensors, recount  # noqa: F401


class RematModel:
    """The graph as the integer program sees it (storages, items, stages), in program order.

    Attributes (op indices are positions in ``graph['ops']``): ``n`` ops; ``sizes[s]`` aligned
    bytes of storage s; ``prod[s]`` its producer; ``users[s]`` ops touching it (listing its root
    or an alias of it in inputs or outputs), producer included; ``out_bytes[k]`` bytes of op k's
    root outputs; ``work[k]`` its aligned workspace; ``needs[k]`` the items (('s', storage) or
    ('a', alias tensor id)) it must find available; ``last_stage[k]`` the last stage in which op
    k may run (k itself unless recomputable); ``graph_out_storages``, ``graph_out_aliases``.

    Raises:
        ValueError: ``graph`` malformed or its ``ops`` list not a topological order (naming the
            op), ``alignment`` not a power of two.
    """

    def __init__(self, graph, alignment: int = 64):
        g = _as_graph(graph)
        self.alignment = _check_alignment(alignment)
        self.graph = g
        T = self.T = _Tensors(g)
        ops = g["ops"]
        n = self.n = len(ops)
        self.op_ids = T.op_ids
        index = {oid: k for k, oid in enumerate(self.op_ids)}
        self.cost = [float(o.get("cost", 0.0) or 0.0) for o in ops]
        for k, c in enumerate(self.cost):
            if not math.isfinite(c) or c < 0:
                raise ValueError(f"graph: op {self.op_ids[k]!r}: cost must be >= 0 seconds")
        self.recomputable = [bool(o.get("recomputable", False)) for o in ops]
        self.work = [_align(int(o.get("workspace", 0) or 0), self.alignment) for o in ops]

        # Storages: non-resident roots of non-zero aligned size, indexed by first production.
        self.sid: Dict[str, int] = {}
        self.sizes, self.prod, self.roots = [], [], []
        for k, o in enumerate(ops):
            for y in o.get("outputs", []):
                if T.t[y].get("alias_of") is None and T.storage_bytes(y, self.alignment) > 0:
                    self.sid[y] = len(self.sizes)
                    self.sizes.append(T.storage_bytes(y, self.alignment))
                    self.prod.append(k)
                    self.roots.append(y)

        def sid_of(x):
            return self.sid.get(T.root(x)) if not T.resident(x) else None

        self.item_prod: Dict[tuple, int] = {}
        self.item_storage: Dict[tuple, int] = {}
        for s, p in enumerate(self.prod):
            self.item_prod[("s", s)] = p
            self.item_storage[("s", s)] = s

        def item_of(x):
            s = sid_of(x)
            if s is None:
                return None
            if T.t[x].get("alias_of") is None:
                return ("s", s)
            it = ("a", x)
            self.item_prod[it] = T.producer[x]
            self.item_storage[it] = s
            return it

        self.needs: List[List[tuple]] = []
        self.touch: List[List[int]] = []
        self.out_storages: List[List[int]] = []
        self.out_bytes: List[int] = []
        self.made: List[List[tuple]] = []  # items an op produces
        preds = [set() for _ in range(n)]
        for k, o in enumerate(ops):
            outs = set(o.get("outputs", []))
            need, made = set(), set()

            def reads(x, k=k, need=need):  # op k reads tensor x (an input, or an alias's base)
                if x in T.producer:
                    preds[k].add(T.producer[x])
                it = item_of(x)
                if it is not None:
                    need.add(it)
            for x in o.get("inputs", []):
                reads(x)
            for y in o.get("outputs", []):
                it = item_of(y)
                if it is not None:
                    made.add(it)
                b = T.t[y].get("alias_of")
                if b is not None and b not in outs:
                    reads(b)
            for v in o.get("after", []):
                if v not in index:
                    raise ValueError(f"graph: op {o['id']!r}: after names unknown op {v!r}")
                preds[k].add(index[v])
            preds[k].discard(k)
            for u in preds[k]:
                if u > k:
                    raise ValueError(f"graph: the ops list is not a topological order: op "
                                     f"{o['id']!r} comes before {self.op_ids[u]!r}, which it "
                                     "depends on")
            self.needs.append(sorted(need, key=repr))
            self.made.append(sorted(made, key=repr))
            tch = set()
            for x in list(o.get("inputs", [])) + list(o.get("outputs", [])):
                s = sid_of(x)
                if s is not None:
                    tch.add(s)
            self.touch.append(sorted(tch))
            outs_s = sorted(self.sid[y] for y in o.get("outputs", []) if y in self.sid)
            self.out_storages.append(outs_s)
            self.out_bytes.append(sum(self.sizes[s] for s in outs_s))
        self.preds = [sorted(p) for p in preds]
        self.users = [[] for _ in self.sizes]
        for k in range(n):
            for s in self.touch[k]:
                self.users[s].append(k)

        # Graph outputs: storages live to the end, alias bindings kept to the end.
        self.graph_out_storages, self.graph_out_aliases = set(), set()
        for x in g.get("outputs", []):
            if x not in T.t:
                raise ValueError(f"graph: output {x!r} is not a tensor")
            s = sid_of(x)
            if s is None:
                continue
            self.graph_out_storages.add(s)
            if T.t[x].get("alias_of") is not None:
                self.graph_out_aliases.add(("a", x))

        # after-caps: an op may not run in a stage after any op that lists it in `after`.
        cap = [n - 1] * n
        for k, o in enumerate(ops):
            for v in o.get("after", []):
                cap[index[v]] = min(cap[index[v]], k)
        self.after_cap = cap
        # Consumers of each item; last stage each op may usefully run in (reverse order).
        self.readers: Dict[tuple, List[int]] = {it: [] for it in self.item_prod}
        for k in range(n):
            for it in self.needs[k]:
                self.readers.setdefault(it, []).append(k)
        last = list(range(n))
        for k in range(n - 1, -1, -1):
            if not self.recomputable[k]:
                continue
            reach = k
            for it in self.made[k]:
                if it in self.graph_out_aliases or (it[0] == "s" and
                                                    self.item_storage[it] in
                                                    self.graph_out_storages):
                    reach = n - 1
                for c in self.readers.get(it, []):
                    if c != k:
                        reach = max(reach, last[c])
            last[k] = min(reach, cap[k])
        self.last_stage = last
        # Horizon of each item: the last stage a reader of it can run in (n for graph outputs).
        self.item_horizon: Dict[tuple, int] = {}
        for it, p in self.item_prod.items():
            h = max([last[c] for c in self.readers.get(it, []) if c != p], default=p)
            if it in self.graph_out_aliases or (it[0] == "s" and
                                                self.item_storage[it] in self.graph_out_storages):
                h = n
            self.item_horizon[it] = h
        self.storage_horizon = []
        for s, p in enumerate(self.prod):
            h = max([last[j] for j in self.users[s] if j != p], default=p)
            if s in self.graph_out_storages:
                h = n
            self.storage_horizon.append(max(h, self.item_horizon[("s", s)]))
        # Ops that may run in each stage, ascending.
        self.stage_ops = [[] for _ in range(n)]
        for k in range(n):
            self.stage_ops[k].append(k)
            if self.recomputable[k]:
                for t in range(k + 1, last[k] + 1):
                    self.stage_ops[t].append(k)
        for t in range(n):
            self.stage_ops[t].sort()

    def static_bound_bytes(self) -> int:
        """Bytes every schedule holds at some step: max over ops of the storages it touches
        plus its outputs and workspace (all live at its step); a lower bound on Tp."""
        best = 0
        for k in range(self.n):
            best = max(best, sum(self.sizes[s] for s in self.touch[k]) + self.work[k])
        return best

    def no_recompute_tp_bytes(self) -> int:
        """Tp of program order without recomputation (bytes)."""
        if getattr(self, "_tp0", None) is None:
            self._tp0 = recount(self.graph, self.op_ids, alignment=self.alignment).tp_bytes
        return self._tp0
