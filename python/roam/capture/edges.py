"""Order edges of a roam-graph (the ``after`` field, GRAPH_FORMAT.md): every write after
the earlier readers of its storage and every reader after the last write
(:func:`add_order_edges`), and the resident writes of a step after every op of its forward and
loss (:func:`add_write_after_forward_edges`). Operates on the graph's JSON lists."""

from typing import Any, Dict, List, Sequence, Set

from .errors import CaptureError


def resolve_root(tensors_by_id: Dict[str, Dict[str, Any]], tid: str) -> str:
    """Follow ``alias_of`` to the root tensor id (raises CaptureError on a cycle)."""
    seen = set()
    while "alias_of" in tensors_by_id[tid]:
        if tid in seen:
            raise CaptureError(f"alias cycle through {tid}")
        seen.add(tid)
        tid = tensors_by_id[tid]["alias_of"]
    return tid


def add_order_edges(tensors: List[Dict[str, Any]], ops: List[Dict[str, Any]],
                    writes: Dict[str, List[str]]) -> None:
    """Add ``after`` control edges to ``ops`` (in place, program order = list order).

    ``writes[op_id]`` lists the tensor ids whose storage the op writes. For every op W that
    writes storage S: each op that read any alias of S since the previous write of S (and the
    previous writer) must run before W; each later reader of S must run after W. An edge is
    skipped when the earlier op already produces a tensor on the alias chain of one of the
    later op's inputs (a direct data edge); other redundant edges are harmless.
    """
    by_id = {t["id"]: t for t in tensors}
    producer: Dict[str, str] = {}
    for op in ops:
        for o in op["outputs"]:
            producer[o] = op["id"]
    root_cache: Dict[str, str] = {}

    def root(t):
        r = root_cache.get(t)
        if r is None:
            r = root_cache[t] = resolve_root(by_id, t)
        return r

    def chain_producers(t):
        res = set()
        while True:
            if t in producer:
                res.add(producer[t])
            nxt = by_id[t].get("alias_of")
            if nxt is None:
                return res
            t = nxt

    position = {op["id"]: i for i, op in enumerate(ops)}
    last_writer: Dict[str, str] = {}
    readers: Dict[str, List[str]] = {}
    for op in ops:
        k = op["id"]
        anc: Set[str] = set()
        for t in op["inputs"]:
            anc |= chain_producers(t)
        in_roots = []
        for t in op["inputs"]:
            r = root(t)
            if r not in in_roots:
                in_roots.append(r)
        w_roots = []
        for t in writes.get(k, []):
            r = root(t)
            if r not in w_roots:
                w_roots.append(r)
        after: Set[str] = set(op.get("after", []))
        for r in in_roots + w_roots:  # read after write
            lw = last_writer.get(r)
            if lw is not None and lw != k and lw not in anc:
                after.add(lw)
        for r in w_roots:  # write after read
            for rd in readers.get(r, []):
                if rd != k and rd not in anc:
                    after.add(rd)
        for r in w_roots:
            last_writer[r] = k
            readers[r] = []
        for r in in_roots:
            if r not in w_roots:
                lst = readers.setdefault(r, [])
                if not lst or lst[-1] != k:
                    lst.append(k)
        for o in op["outputs"]:
            if "alias_of" not in by_id[o]:
                last_writer[o] = k  # the producer is the first writer of a new storage
        if after:
            op["after"] = sorted(after, key=position.__getitem__)
        elif "after" in op:
            del op["after"]


def add_write_after_forward_edges(tensors: List[Dict[str, Any]], ops: List[Dict[str, Any]],
                                  writes: Dict[str, List[str]],
                                  losses: Sequence[str] = ()) -> int:
    """Order every op that writes a resident tensor (a parameter, buffer, optimizer state or
    input: the optimizer's update, the write-backs of running statistics) after the ops that
    produce the losses (``losses``: the tensors ``backward()`` started from) and the graph
    outputs, with ``after`` edges where no path orders them already. Where the forward pass
    raises (bad input data: it reaches the loss through them), nothing resident has been
    written yet: a step that fails there leaves the model and the optimizer as they were.
    Returns the edges added. One forward sweep per loss op (ops are in program order)."""
    by_id = {t["id"]: t for t in tensors}
    position = {op["id"]: i for i, op in enumerate(ops)}
    producer: Dict[str, int] = {}
    for i, op in enumerate(ops):
        for o in op["outputs"]:
            producer[o] = i
    succ: List[Set[int]] = [set() for _ in ops]
    for i, op in enumerate(ops):
        for x in op["inputs"]:
            if x in producer:
                succ[producer[x]].add(i)
        for a in op.get("after", []):
            succ[position[a]].add(i)

    def root(tid):
        while "alias_of" in by_id[tid]:
            tid = by_id[tid]["alias_of"]
        return tid

    ends = sorted({producer[t] for t in losses if t in producer})
    writers = [i for i, op in enumerate(ops)
               if any("role" in by_id[root(t)] for t in writes.get(op["id"], []))]
    if not writers or not ends:
        return 0
    added = 0
    for s_ in ends:
        reach = bytearray(len(ops))
        reach[s_] = 1
        for i in range(s_, len(ops)):
            if reach[i]:
                for j in succ[i]:
                    reach[j] = 1
        for w in writers:
            if w <= s_ or reach[w]:
                continue
            op = ops[w]
            after = op.setdefault("after", [])
            after.append(ops[s_]["id"])
            op["after"] = sorted(set(after), key=position.__getitem__)
            added += 1
    return added
