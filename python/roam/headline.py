"""The headline of ``roam plan`` and ``roam compare`` in Python, for reports that want the same
line (e.g. the executor's): one format, the one of include/roam/headline.h::

    peak X MiB; program order on a CPU allocator Y MiB (-Z%); on PyTorch's CUDA caching
    allocator (simulated) W MiB (-V%); lower bound L MiB

(one line). Every figure includes the resident bytes (parameters, buffers, optimizer state,
batch). X: the plan's peak (resident + arena); Y: resident + Tp of the program order, what an
exact-fit CPU allocator (eager PyTorch on a CPU) holds; W: resident + the segments PyTorch's
CUDA caching allocator would hold for the program order (roam's simulation); L: resident + the
lower bound on Tp. Z and V: 100 * (X / reference - 1), one decimal. A figure given as None is
left out with its clause (a CPU run has no W), so a measured report can reuse the format::

    from roam.headline import headline
    print(headline(peak_bytes, cpu_bytes, cuda_bytes=None, lower_bound_bytes=None))

What is live at a plan's peak, as the "at the peak" line of ``roam plan`` (src/cli/main.cpp,
``peak_line``): :func:`live_at_peak` recounts it in Python from a roam-graph v1 and a roam-plan
v1 (dicts) by the liveness rules of docs/GRAPH_FORMAT.md, and :func:`peak_line` formats it::

    op index 804 (n315 aten.convolution_backward.default, features.18.0): 244 storages;
    largest t812 4.59 MiB (features.2.conv.0.0), ...
"""

from typing import Optional

__all__ = ["headline", "percent_change", "KEY", "live_at_peak", "peak_line", "plan_lower_bound"]

MiB = float(1 << 20)

KEY = ("(peak = resident + this plan's arena; CPU allocator = resident + Tp of the graph's own "
       "op order, what eager PyTorch holds on a CPU; CUDA caching allocator = resident + the "
       "segments PyTorch's allocator would hold for that order on a GPU; lower bound = no "
       "valid order needs less; under a budget, no schedule with recomputation needs less)")


def percent_change(value: int, reference: int) -> str:
    """``"-12.3%"`` / ``"+4.0%"``: 100 * (value / reference - 1), one decimal; ``"n/a"`` for a
    zero reference."""
    if not reference:
        return "n/a"
    s = f"{100.0 * (value / reference - 1.0):+.1f}%"
    return "+0.0%" if s == "-0.0%" else s


def headline(peak_bytes: int, cpu_bytes: Optional[int], cuda_bytes: Optional[int] = None,
             lower_bound_bytes: Optional[int] = None, budget_bytes: Optional[int] = None,
             recompute_overhead: Optional[float] = None, recomputations: int = 0) -> str:
    """The headline (see the module docstring); bytes in, MiB with two decimals out.
    ``budget_bytes``: adds "(budget B MiB, recompute overhead R%)" after the peak, with
    ``recompute_overhead`` = recompute seconds / compute seconds when ``recomputations`` > 0."""
    s = f"peak {peak_bytes / MiB:.2f} MiB"
    if budget_bytes is not None:
        s += f" (budget {budget_bytes / MiB:.2f} MiB, "
        if recomputations > 0 and recompute_overhead is not None:
            s += f"recompute overhead {100.0 * recompute_overhead:.1f}%)"
        elif recomputations > 0:
            s += f"{recomputations} recomputations, overhead unknown: no op costs)"
        else:
            s += "no recomputation)"
    if cpu_bytes is not None:
        s += (f"; program order on a CPU allocator {cpu_bytes / MiB:.2f} MiB "
              f"({percent_change(peak_bytes, cpu_bytes)})")
    if cuda_bytes is not None:
        s += (f"; on PyTorch's CUDA caching allocator (simulated) {cuda_bytes / MiB:.2f} MiB "
              f"({percent_change(peak_bytes, cuda_bytes)})")
    if lower_bound_bytes is not None:
        s += f"; lower bound {lower_bound_bytes / MiB:.2f} MiB"
    return s


def plan_lower_bound(plan: dict) -> Optional[int]:
    """The headline's lower bound of a roam-plan (arena part, bytes), as ``roam plan`` states
    it: for a plan without recomputation the bound over the graph's orders (a plan of version 2
    only because it writes in place keeps that one in ``method.options.order_lower_bound_bytes``,
    its ``stats.lower_bound_bytes`` being the bound with recomputation allowed); for a plan that
    recomputes, ``stats.lower_bound_bytes``. None when the plan has no bound."""
    st = plan.get("stats", {})
    if not int(st.get("recomputations", 0)):
        ob = plan.get("method", {}).get("options", {}).get("order_lower_bound_bytes")
        if ob is not None:
            return int(ob)
    lb = st.get("lower_bound_bytes")
    return None if lb is None else int(lb)


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def live_at_peak(graph: dict, order, alignment: int = 64, inplace=None) -> dict:
    """What is live at the first step of the largest live bytes when ``graph`` (roam-graph v1
    dict) runs in ``order`` (op ids; an op listed again is a recomputation, plan version 2):
    ``{"index", "op", "target", "module", "live_bytes", "storages": [{"name", "bytes",
    "module", "op"}, ...], "per_step": [live bytes at each step]}``, storages largest first
    (ties in order of creation, workspaces after tensors). A recomputed instance is named ``id#k`` (k: the appearance of its op), an op's
    workspace "workspace of op 'ID'" (live at that op's step only). Sizes are rounded up to
    ``alignment`` for ``live_bytes`` (= Tp(order)) and listed as in the file. Recounted from the
    liveness rules of docs/GRAPH_FORMAT.md (versions 1 and 2), independently of libroam.
    ``inplace`` (the plan field: output id -> input id): each such output is bound to its
    input's instance at every appearance, as an alias is."""
    if inplace:
        from .capture.check import with_inplace
        graph = with_inplace(graph, inplace)
    tensors = {t["id"]: t for t in graph["tensors"]}
    ops = {op["id"]: op for op in graph["ops"]}
    if set(order) != set(ops):
        raise ValueError("the order does not list every op of the graph (or lists others)")

    def module(o):  # outside every module's forward: the optimizer's update, or loss and glue
        return o.get("module") or ("optimizer update" if o.get("phase") == "update" else "no module")
    RESIDENT = "resident"
    binding = {}     # tensor id -> instance index, or RESIDENT
    inst = []        # instances: dict(name, size, first, last, module, op)
    runs = {}
    appear = []      # (op dict, appearance id)
    for k, oid in enumerate(order):
        op = ops[oid]
        app = runs.get(oid, 0)
        runs[oid] = app + 1
        aid = oid if app == 0 else f"{oid}#{app}"
        appear.append((op, aid))

        def bound(tid):
            while tid not in binding:
                t = tensors[tid]
                if t.get("role"):
                    return RESIDENT
                if t.get("alias_of") is None:
                    raise ValueError(f"op {aid} reads tensor {tid} before it is produced")
                tid = t["alias_of"]
            return binding[tid]

        def use(b):
            if b != RESIDENT:
                inst[b]["last"] = max(inst[b]["last"], k)
        for tid in op.get("inputs", []):
            use(bound(tid))
        for tid in op.get("outputs", []):
            t = tensors[tid]
            if t.get("alias_of") is not None:
                binding[tid] = bound(t["alias_of"])
                use(binding[tid])
                continue
            binding[tid] = len(inst)
            inst.append({"name": tid if app == 0 else f"{tid}#{app}",
                         "size": int(t.get("size", 0)), "first": k, "last": k,
                         "module": module(op), "op": aid})
    n = len(order)
    for tid in graph.get("outputs", []):
        b = bound(tid) if tid in tensors else RESIDENT
        if b != RESIDENT:
            inst[b]["last"] = n - 1
    delta = [0] * (n + 1)
    for s in inst:
        if s["size"] > 0:
            delta[s["first"]] += _align(s["size"], alignment)
            delta[s["last"] + 1] -= _align(s["size"], alignment)
    for k, (op, _aid) in enumerate(appear):
        w = int(op.get("workspace", 0) or 0)
        if w > 0:
            delta[k] += _align(w, alignment)
            delta[k + 1] -= _align(w, alignment)
    best, run, at = -1, 0, 0
    per_step = []
    for k in range(n):
        run += delta[k]
        per_step.append(run)
        if run > best:
            best, at = run, k
    if not n:
        return {"index": 0, "op": None, "target": None, "module": None, "live_bytes": 0,
                "storages": [], "per_step": []}
    op, aid = appear[at]
    here = [{"name": s["name"], "bytes": s["size"], "module": s["module"], "op": s["op"]}
            for s in inst if s["size"] > 0 and s["first"] <= at <= s["last"]]
    w = int(op.get("workspace", 0) or 0)
    if w > 0:  # only the workspace of the op at the peak is live there
        here.append({"name": f"workspace of op '{aid}'", "bytes": w, "module": module(op),
                     "op": aid})
    here.sort(key=lambda s: -s["bytes"])  # stable: ties keep their order of creation
    return {"index": at, "op": aid, "target": op.get("target"), "module": module(op),
            "live_bytes": best, "storages": here, "per_step": per_step}


def peak_line(peak: dict, largest: int = 3) -> str:
    """``roam plan``'s "at the peak" line for a :func:`live_at_peak` result (without the
    trailing "; roam viz draws it")."""
    parts = [f"{s['name']} {s['bytes'] / MiB:.2f} MiB ({s['module']})"
             for s in peak["storages"][:largest]]
    return (f"op index {peak['index']} ({peak['op']} {peak['target']}, {peak['module']}): "
            f"{len(peak['storages'])} storages; largest " + ", ".join(parts))
