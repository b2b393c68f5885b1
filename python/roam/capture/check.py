"""Structural checks and liveness figures for roam-graph v1 dicts (GRAPH_FORMAT.md).

Used by the capture before anything is written; usable on any graph loaded with
:func:`roam.capture.io.read_graph`.
"""

from typing import Any, Dict, List, Optional, Set

from .errors import GraphCheckError

RESIDENT_ROLES = ("param", "buffer", "optimizer_state", "constant", "input")
PHASES = ("forward", "backward", "update", "other")


def _roots(tensors: Dict[str, Dict[str, Any]]) -> Dict[str, str]:
    roots: Dict[str, str] = {}
    for tid in tensors:
        path = []
        t = tid
        while True:
            if t in roots:
                r = roots[t]
                break
            if t in path:
                raise GraphCheckError(f"alias cycle through tensor {t}")
            path.append(t)
            nxt = tensors[t].get("alias_of")
            if nxt is None:
                r = t
                break
            if nxt not in tensors:
                raise GraphCheckError(f"tensor {t}: alias_of refers to unknown tensor {nxt}")
            t = nxt
        for p in path:
            roots[p] = r
    return roots


def check_graph(graph: Dict[str, Any], *, require_monotone_phases: bool = False,
                loss_checks: bool = True, losses: Optional[List[str]] = None) -> None:
    """Raise :class:`GraphCheckError` unless ``graph`` is a well-formed roam-graph v1:

    * unique ids; every id referenced (inputs, outputs, after, alias_of, graph outputs) exists;
    * ``role`` exactly on tensors no op produces (resident), one of the five roles; resident
      tensors are never produced; every non-resident tensor (root or alias) has exactly one
      producer; alias chains are acyclic and roots carry no ``alias_of``;
    * program order (file order) is valid: inputs produced earlier or resident, ``after``
      refers to earlier ops; sizes are non-negative integers (bytes), costs non-negative
      (seconds); phases valid;
    * with ``loss_checks``: the losses are ``losses`` (the tensors the step's ``backward()``
      calls started from), else the graph output ``outputs[0]``; every backward-phase op
      descends from a loss-producing op through data edges, or is an ancestor (within the
      backward phase) of one that does (views of forward tensors such as ``t`` feeding the
      gradient computation) -- a disconnected backward op means a dropped data edge;
    * with ``require_monotone_phases``: forward ops precede backward ops precede update ops.
    """
    if graph.get("format") != "roam-graph" or graph.get("version") != 1:
        raise GraphCheckError("not a roam-graph version 1")
    tensors: Dict[str, Dict[str, Any]] = {}
    for t in graph["tensors"]:
        tid = t["id"]
        if tid in tensors:
            raise GraphCheckError(f"duplicate tensor id {tid}")
        if not isinstance(t.get("size"), int) or isinstance(t["size"], bool) or t["size"] < 0:
            raise GraphCheckError(f"tensor {tid}: size must be a non-negative integer")
        tensors[tid] = t
    _roots(tensors)  # raises on unknown alias targets and alias cycles
    producer: Dict[str, str] = {}
    op_pos: Dict[str, int] = {}
    ops = graph["ops"]
    for i, op in enumerate(ops):
        oid = op["id"]
        if oid in op_pos:
            raise GraphCheckError(f"duplicate op id {oid}")
        op_pos[oid] = i
        if op.get("phase") not in PHASES:
            raise GraphCheckError(f"op {oid}: invalid phase {op.get('phase')!r}")
        if "workspace" in op and not (isinstance(op["workspace"], int)
                                      and not isinstance(op["workspace"], bool)
                                      and op["workspace"] >= 0):
            raise GraphCheckError(f"op {oid}: workspace must be a non-negative integer (bytes)")
        if "cost" in op and not (isinstance(op["cost"], (int, float)) and op["cost"] >= 0):
            raise GraphCheckError(f"op {oid}: cost must be non-negative seconds")
        for o in op["outputs"]:
            if o not in tensors:
                raise GraphCheckError(f"op {oid}: unknown output tensor {o}")
            if o in producer:
                raise GraphCheckError(f"tensor {o} produced by both {producer[o]} and {oid}")
            if "role" in tensors[o]:
                raise GraphCheckError(f"op {oid} produces resident tensor {o} "
                                      f"(role {tensors[o]['role']})")
            producer[o] = oid
    for tid, t in tensors.items():
        if "role" in t:
            if t["role"] not in RESIDENT_ROLES:
                raise GraphCheckError(f"tensor {tid}: invalid role {t['role']!r}")
        elif tid not in producer:
            raise GraphCheckError(f"tensor {tid} ({t.get('name')}) has no role and no producer")
    for i, op in enumerate(ops):
        oid = op["id"]
        for x in op["inputs"]:
            if x not in tensors:
                raise GraphCheckError(f"op {oid}: unknown input tensor {x}")
            if x in producer and op_pos[producer[x]] >= i:
                raise GraphCheckError(f"op {oid} reads {x} before its producer "
                                      f"{producer[x]} in program order")
        for a in op.get("after", []):
            if a not in op_pos:
                raise GraphCheckError(f"op {oid}: after refers to unknown op {a}")
            if op_pos[a] >= i:
                raise GraphCheckError(f"op {oid}: after edge to {a} does not point backwards "
                                      f"in program order")
    for x in graph.get("outputs", []):
        if x not in tensors:
            raise GraphCheckError(f"graph output {x} is not a tensor")

    if require_monotone_phases:
        rank = {"forward": 0, "backward": 1, "update": 2}
        cur = 0
        for op in ops:
            r = rank.get(op["phase"])
            if r is None:
                continue
            if r < cur:
                raise GraphCheckError(f"op {op['id']} ({op['phase']}) after a later phase")
            cur = r

    if loss_checks and any(op["phase"] == "backward" for op in ops):
        if not losses and not graph.get("outputs"):
            raise GraphCheckError("graph has backward ops but no output (loss)")
        loss_ops = []
        for loss in (losses or graph["outputs"][:1]):
            if loss not in producer:
                raise GraphCheckError(f"loss tensor {loss} is not produced by an op")
            loss_ops.append(producer[loss])
        loss_op = loss_ops[0]
        consumers: Dict[str, List[str]] = {}
        for op in ops:
            for x in op["inputs"]:
                if x in producer:
                    consumers.setdefault(producer[x], []).append(op["id"])
        desc: Set[str] = set(loss_ops)
        for op in ops[min(op_pos[o] for o in loss_ops):]:
            if op["id"] in desc:
                desc.update(consumers.get(op["id"], []))
        good: Set[str] = set()  # backward ops that descend from the loss or feed one
        for op in reversed(ops):
            oid = op["id"]
            if op["phase"] == "backward" and (
                    oid in desc or any(c in good for c in consumers.get(oid, []))):
                good.add(oid)
        bad = [op["id"] for op in ops if op["phase"] == "backward" and op["id"] not in good]
        if bad:
            raise GraphCheckError(
                f"{len(bad)} backward ops are disconnected from the loss op {loss_op} "
                f"(first: {bad[:5]}); a data edge was probably dropped")


def resident_bytes(graph: Dict[str, Any]) -> int:
    """Total size in bytes of the resident root tensors (those with a ``role``)."""
    return sum(t["size"] for t in graph["tensors"] if "role" in t and "alias_of" not in t)


def inplace_in_order(graph: Dict[str, Any], order: Optional[List[str]] = None
                     ) -> Dict[str, str]:
    """The in-place writes that ``order`` (op ids, each once; default the file order) allows
    under GRAPH_FORMAT.md's rule, all of them: ``{output tensor id: input tensor id}`` (the
    plan field ``inplace``). A permission ``[i, j]`` of op v is used where the storage that
    input i is bound to is not resident, has the output's size, no op after v in the order
    reads or binds it (an alias counts), it is not a graph output, and no other output of v
    took it already; the first listed pair of an output wins (libroam's rule,
    ``roam::inplace_valid_in``). Using every allowed write is the best choice for a
    fixed order: a write merges two live ranges that meet at v and lowers the bytes live at
    v only."""
    tensors = {t["id"]: t for t in graph["tensors"]}
    roots = _roots(tensors)
    ops = {op["id"]: op for op in graph["ops"]}
    order = order or [op["id"] for op in graph["ops"]]
    last: Dict[str, int] = {}
    for step, oid in enumerate(order):
        op = ops[oid]
        for x in op["inputs"] + op["outputs"]:
            last[roots[x]] = step
    outputs = {roots[x] for x in graph.get("outputs", [])}
    chosen: Dict[str, str] = {}
    for step, oid in enumerate(order):
        op = ops[oid]
        taken = set()
        for i, j in op.get("inplace", []):
            x, y = op["inputs"][i], op["outputs"][j]
            r = roots[x]
            if y in chosen or r in taken or "role" in tensors[r] or r in outputs:
                continue
            if tensors[r]["size"] != tensors[y]["size"]:
                continue  # over a part of a larger storage: that storage would stay live
            if last.get(r) != step:
                continue
            chosen[y] = x
            taken.add(r)
    return chosen


def with_inplace(graph: Dict[str, Any], inplace: Dict[str, str]) -> Dict[str, Any]:
    """A shallow copy of ``graph`` whose in-place outputs (``inplace``: output id -> input id)
    are aliases of their inputs: its liveness is the plan's (GRAPH_FORMAT.md plan field
    ``inplace``)."""
    if not inplace:
        return graph
    tensors = [dict(t, alias_of=inplace[t["id"]]) if t["id"] in inplace else t
               for t in graph["tensors"]]
    return dict(graph, tensors=tensors)


def program_order_peak(graph: Dict[str, Any], alignment: int = 1,
                       order: Optional[List[str]] = None, inplace: bool = True) -> int:
    """Theoretical peak ``Tp(order)`` in bytes (arena part, resident excluded) per the
    liveness rules of GRAPH_FORMAT.md (each op's ``workspace`` live at its step), sizes
    rounded up to ``alignment``; ``order`` defaults to the file order (PyTorch's program
    order). With ``inplace`` every in-place write the order allows is used
    (:func:`inplace_in_order`): what eager PyTorch holds where the graph's ``inplace``
    permissions are the writes it made."""
    if inplace:
        graph = with_inplace(graph, inplace_in_order(graph, order))
    tensors = {t["id"]: t for t in graph["tensors"]}
    roots = _roots(tensors)
    ops = {op["id"]: op for op in graph["ops"]}
    order = order or [op["id"] for op in graph["ops"]]
    first: Dict[str, int] = {}
    last: Dict[str, int] = {}
    for step, oid in enumerate(order):
        op = ops[oid]
        for x in op["outputs"]:
            r = roots[x]
            if x == r:
                first[r] = step
        for x in op["inputs"] + op["outputs"]:
            last[roots[x]] = step
    end = len(order) - 1
    for x in graph.get("outputs", []):
        last[roots[x]] = end
    delta = [0] * (len(order) + 1)
    for step, oid in enumerate(order):  # an op's workspace: live at its step only
        w = int(ops[oid].get("workspace", 0))
        if w > 0:
            w = -(-w // alignment) * alignment
            delta[step] += w
            delta[step + 1] -= w
    for r, f in first.items():
        if "role" in tensors[r]:
            continue
        size = tensors[r]["size"]
        if size == 0:
            continue
        size = -(-size // alignment) * alignment
        delta[f] += size
        delta[last.get(r, f) + 1] -= size
    peak = cur = 0
    for d in delta[:-1]:
        cur += d
        peak = max(peak, cur)
    return peak


def summary(graph: Dict[str, Any]) -> Dict[str, Any]:
    """Counts and byte totals of a graph: ops, tensors, resident bytes, sum of the sizes of
    all tensors, of non-resident roots, ops per phase, ``Tp`` of program order."""
    phases: Dict[str, int] = {}
    for op in graph["ops"]:
        phases[op["phase"]] = phases.get(op["phase"], 0) + 1
    return {
        "ops": len(graph["ops"]),
        "tensors": len(graph["tensors"]),
        "aliases": sum(1 for t in graph["tensors"] if "alias_of" in t),
        "after_edges": sum(len(op.get("after", [])) for op in graph["ops"]),
        "resident_bytes": resident_bytes(graph),
        "sum_sizes_bytes": sum(t["size"] for t in graph["tensors"]),
        "non_resident_root_bytes": sum(t["size"] for t in graph["tensors"]
                                       if "role" not in t and "alias_of" not in t),
        "tp_program_order_bytes": program_order_peak(graph),
        "workspace_ops": sum(1 for op in graph["ops"] if op.get("workspace", 0) > 0),
        "ops_per_phase": phases,
    }
