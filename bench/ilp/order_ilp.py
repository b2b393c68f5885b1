#!/usr/bin/python3
"""Time-indexed ILP for roam's operator-order problem (minimum theoretical peak Tp), solved by CBC.

Pure standard library (Debian's /usr/bin/python3); the solver is Debian's `cbc` (coinor-cbc).

Subcommands
  gen    write a seeded random training-like graph of N ops (roam-graph v1 JSON)
  solve  build the ILP of a graph, write it as an LP file, run cbc with a time limit, read the
         solution back, recompute Tp of the ILP's order from the liveness rules and compare
  tp     recompute Tp of a plan's order (e.g. `roam plan -o plan.json`) with this file's rules

Liveness follows docs/GRAPH_FORMAT.md, implemented here independently of the C++ code:
aliases resolve to their root, roots with a role are resident (excluded), storages of size 0
are ignored, sizes are rounded up to the alignment (64), a storage is live at every step t with
first <= t <= last (inclusive), first = step of its producer, last = largest step of any op
listing its root or an alias in inputs or outputs, or the final step when one of those is a
graph output.  An op depends on the nearest producer along the alias chain of every tensor it
reads and of the base of every alias it produces, and on its `after` ops.

ILP (steps 0..n-1, one op per step). Variables, all in units of `alignment` bytes:
  z[v,t] in {0,1}: op v has run at step <= t. Monotone in t, fixed 0 before v's earliest step
          (number of ancestors) and 1 from its latest step (n-1 - number of descendants).
          sum_v z[v,t] = t+1 (exactly one op per step), so op v runs at step
          pos(v) = first t with z[v,t] = 1 and x[v,t] = z[v,t] - z[v,t-1].
  precedence u -> v: z[v,t] <= z[u,t-1]  (v done by t implies u done by t-1).
  live[s,t] in [0,1] (continuous; integral at the optimum of every fixed z):
          live[s,t] >= z[p,t] - z[u,t-1]  for the producer p and every user u of s
          (born by t and u not run before t  =>  live at t).  Users that have another user
          among their descendants are dominated and dropped.  For a storage kept as a graph
          output, live[s,t] = z[p,t] is substituted directly.
  P >= sum_s size_s * live[s,t] for every step t; P >= the bytes one op touches (a static bound).
  minimise P.
"""
import argparse
import gzip
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time


# ----------------------------------------------------------------------------------- graph ---

def load_json(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def align_up(x, a):
    return (x + a - 1) // a * a


class Model:
    """Ops, dependencies and storages of a roam graph, per GRAPH_FORMAT.md."""

    def __init__(self, g, alignment=64):
        self.g = g
        self.alignment = alignment
        tensors = {t["id"]: t for t in g["tensors"]}
        self.op_ids = [o["id"] for o in g["ops"]]
        op_index = {oid: i for i, oid in enumerate(self.op_ids)}
        n = self.n = len(self.op_ids)

        def root(tid):
            seen = 0
            while tensors[tid].get("alias_of") is not None:
                tid = tensors[tid]["alias_of"]
                seen += 1
                if seen > len(tensors):
                    raise ValueError("alias cycle at " + tid)
            return tid

        producer = {}
        for v, o in enumerate(g["ops"]):
            for t in o.get("outputs", []):
                if t in producer:
                    raise ValueError("tensor %s has two producers" % t)
                producer[t] = v

        def nearest_producer(tid):
            while tid is not None:
                if tid in producer:
                    return producer[tid]
                tid = tensors[tid].get("alias_of")
            return None

        preds = [set() for _ in range(n)]
        for v, o in enumerate(g["ops"]):
            for t in o.get("inputs", []):
                u = nearest_producer(t)
                if u is not None and u != v:
                    preds[v].add(u)
            for t in o.get("outputs", []):
                base = tensors[t].get("alias_of")
                u = nearest_producer(base) if base is not None else None
                if u is not None and u != v:
                    preds[v].add(u)
            for a in o.get("after", []):
                preds[v].add(op_index[a])
        self.preds = [sorted(p) for p in preds]
        self.succs = [[] for _ in range(n)]
        for v in range(n):
            for u in self.preds[v]:
                self.succs[u].append(v)

        # Storages: non-resident roots of non-zero size (a produced root has no role).
        self.storages = []  # dicts: root, size (aligned), producer, users (sorted), output
        sidx = {}
        for v, o in enumerate(g["ops"]):
            for t in o.get("outputs", []):
                x = tensors[t]
                if x.get("alias_of") is not None or x.get("role") or int(x["size"]) == 0:
                    continue
                sidx[t] = len(self.storages)
                self.storages.append({"root": t, "size": align_up(int(x["size"]), alignment),
                                      "producer": v, "users": set(), "output": False})
        for v, o in enumerate(g["ops"]):
            for t in list(o.get("inputs", [])) + list(o.get("outputs", [])):
                s = sidx.get(root(t))
                if s is not None:
                    self.storages[s]["users"].add(v)
        for t in g.get("outputs", []):
            s = sidx.get(root(t))
            if s is not None:
                self.storages[s]["output"] = True
        for st in self.storages:
            st["users"] = sorted(st["users"])

        # Topological check of the program order and ancestor / descendant sets (bitsets).
        for v in range(n):
            for u in self.preds[v]:
                if u > v:
                    raise ValueError("program order violates a dependency at op " + self.op_ids[v])
        self.anc = [0] * n
        for v in range(n):
            a = 0
            for u in self.preds[v]:
                a |= self.anc[u] | (1 << u)
            self.anc[v] = a
        self.desc = [0] * n
        for v in range(n - 1, -1, -1):
            d = 0
            for w in self.succs[v]:
                d |= self.desc[w] | (1 << w)
            self.desc[v] = d
        self.est = [bin(self.anc[v]).count("1") for v in range(n)]
        self.lst = [n - 1 - bin(self.desc[v]).count("1") for v in range(n)]

    def is_topological(self, order):
        if sorted(order) != list(range(self.n)):
            return False
        pos = [0] * self.n
        for k, v in enumerate(order):
            pos[v] = k
        return all(pos[u] < pos[v] for v in range(self.n) for u in self.preds[v])

    def live_bytes(self, order):
        """Live bytes at every step of `order` (list of op indices)."""
        n = self.n
        pos = [0] * n
        for k, v in enumerate(order):
            pos[v] = k
        delta = [0] * (n + 1)
        for st in self.storages:
            first = pos[st["producer"]]
            last = max([first] + [pos[u] for u in st["users"]])
            if st["output"]:
                last = n - 1
            delta[first] += st["size"]
            delta[last + 1] -= st["size"]
        out, run = [], 0
        for t in range(n):
            run += delta[t]
            out.append(run)
        return out

    def tp(self, order):
        b = self.live_bytes(order)
        return max(b) if b else 0

    def static_bound(self):
        """Bytes of the storages one op touches (all live at its step): a lower bound on Tp."""
        touch = [0] * self.n
        for st in self.storages:
            for u in set(st["users"]) | {st["producer"]}:
                touch[u] += st["size"]
        return max(touch) if touch else 0


# ------------------------------------------------------------------------------------- ILP ---

class LPWriter:
    def __init__(self):
        self.rows = []
        self.nrow = 0

    def row(self, terms, sense, rhs):
        """terms: list of (coef, var). Skips rows without variables (checked by caller)."""
        if not terms:
            return
        self.nrow += 1
        parts = []
        for c, var in terms:
            if c == 1:
                parts.append("+ %s" % var)
            elif c == -1:
                parts.append("- %s" % var)
            elif c >= 0:
                parts.append("+ %d %s" % (c, var))
            else:
                parts.append("- %d %s" % (-c, var))
        # CPLEX LP: keep lines short.
        line, lines = " c%d:" % self.nrow, []
        for p in parts:
            if len(line) > 200:
                lines.append(line)
                line = "  "
            line += " " + p
        line += " %s %d" % (sense, rhs)
        lines.append(line)
        self.rows.append("\n".join(lines))


def build_ilp(m, lp_path):
    n, A = m.n, m.alignment
    zvars = []

    def Z(v, t):
        """Constant 0/1 or variable name for z[v,t]."""
        if t < m.est[v]:
            return 0
        if t >= m.lst[v]:
            return 1
        return "z%d_%d" % (v, t)

    for v in range(n):
        for t in range(m.est[v], m.lst[v]):
            zvars.append(Z(v, t))

    w = LPWriter()

    def add(lhs, sense, rhs):
        """lhs: list of (coef, Z-value) where Z-value may be a constant."""
        terms, const = [], 0
        for c, x in lhs:
            if isinstance(x, str):
                terms.append((c, x))
            else:
                const += c * x
        rhs -= const
        if not terms:
            ok = {"<=": 0 <= rhs, ">=": 0 >= rhs, "=": rhs == 0}[sense]
            if not ok:
                raise RuntimeError("infeasible constant row")
            return
        w.row(terms, sense, rhs)

    # Monotone z.
    for v in range(n):
        for t in range(m.est[v] + 1, m.lst[v]):
            add([(1, Z(v, t)), (-1, Z(v, t - 1))], ">=", 0)
    # Exactly t+1 ops done by step t.
    for t in range(n - 1):
        add([(1, Z(v, t)) for v in range(n)], "=", t + 1)
    # Precedence.
    for v in range(n):
        for u in m.preds[v]:
            for t in range(m.est[v], m.lst[v]):
                a, b = Z(v, t), Z(u, t - 1)
                if b == 1 or a == 0:
                    continue
                add([(1, a), (-1, b)], "<=", 0)
    # Liveness.
    live_terms = [[] for _ in range(n)]  # per step: (size units, live value)
    lvars = []
    for s, st in enumerate(m.storages):
        p, size = st["producer"], st["size"] // A
        if st["output"]:
            for t in range(m.est[p], n):
                live_terms[t].append((size, Z(p, t)))
            continue
        users = [u for u in st["users"] if u != p]
        # Drop users dominated by a later user (one of their descendants).
        maximal = [u for u in users if not any((m.desc[u] >> x) & 1 for x in users)]
        if not maximal:
            maximal = [p]
        end = max(m.lst[u] for u in maximal)
        for t in range(m.est[p], end + 1):
            var = "l%d_%d" % (s, t)
            used = False
            for u in maximal:
                a, b = Z(p, t), Z(u, t - 1)
                if a == 0 or b == 1:
                    continue
                used = True
                add([(1, var), (-1, a), (1, b)], ">=", 0)
            if used:
                lvars.append(var)
                live_terms[t].append((size, var))
    # Peak.
    for t in range(n):
        add([(1, "P")] + [(-c, x) for c, x in live_terms[t]], ">=", 0)
    lb = m.static_bound() // A
    with open(lp_path, "w") as f:
        f.write("\\ roam order ILP: %d ops, %d storages, units of %d bytes\n" % (n, len(m.storages), A))
        f.write("Minimize\n obj: P\nSubject To\n")
        f.write("\n".join(w.rows))
        f.write("\nBounds\n P >= %d\n" % lb)
        for var in lvars:
            f.write(" 0 <= %s <= 1\n" % var)
        f.write("Binaries\n")
        for i in range(0, len(zvars), 10):
            f.write(" " + " ".join(zvars[i:i + 10]) + "\n")
        f.write("End\n")
    return {"z_vars": len(zvars), "live_vars": len(lvars), "rows": w.nrow, "static_bound_bytes": lb * A}


def parse_cbc_log(text):
    r = {}
    mres = re.search(r"^Result - (.*)$", text, re.M)
    r["result"] = mres.group(1).strip() if mres else None
    for key, pat in [("objective", r"^Objective value:\s+(\S+)"), ("lower_bound", r"^Lower bound:\s+(\S+)"),
                     ("gap", r"^Gap:\s+(\S+)"), ("nodes", r"^Enumerated nodes:\s+(\S+)"),
                     ("cpu_seconds", r"^Total time \(CPU seconds\):\s+(\S+)"),
                     ("wall_seconds", r"\(Wallclock seconds\):\s+(\S+)"),
                     ("root_lp", r"Continuous objective value is (\S+)"),
                     ("root_lp_seconds", r"Continuous objective value is \S+ - (\S+) seconds")]:
        mm = re.search(pat, text, re.M)
        if mm:
            try:
                r[key] = float(mm.group(1))
            except ValueError:
                r[key] = mm.group(1)
    if re.search(r"^No feasible solution found", text, re.M):
        r["no_feasible"] = True
    return r


def solve(m, work, time_limit, threads=1, keep=False):
    os.makedirs(work, exist_ok=True)
    lp = os.path.join(work, "model.lp")
    sol = os.path.join(work, "solution.txt")
    if os.path.exists(sol):
        os.remove(sol)
    t0 = time.monotonic()
    info = build_ilp(m, lp)
    info["build_seconds"] = round(time.monotonic() - t0, 3)
    info["lp_bytes"] = os.path.getsize(lp)
    cmd = ["cbc", lp, "timeMode", "elapsed", "sec", str(time_limit), "threads", str(threads),
           "solve", "solu", sol]
    info["cbc_command"] = " ".join(cmd)
    t0 = time.monotonic()
    # cbc's `sec` is checked only between phases: a root LP that runs long is not stopped by it.
    # Past 1.5 x the limit + 30 s, cbc gets SIGINT (it stops and reports its best so far), then
    # SIGKILL 60 s later.  stdbuf keeps the log line-buffered so nothing is lost.
    log_path = os.path.join(work, "cbc.log")
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(["stdbuf", "-oL"] + cmd, stdout=logf, stderr=subprocess.STDOUT)
        info["interrupted"] = info["killed"] = False
        try:
            proc.wait(timeout=time_limit * 1.5 + 30)
        except subprocess.TimeoutExpired:
            info["interrupted"] = True
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                info["killed"] = True
                proc.kill()
                proc.wait()
    info["cbc_seconds"] = round(time.monotonic() - t0, 3)
    with open(log_path) as f:
        log = f.read()
    info.update(parse_cbc_log(log))
    A = m.alignment
    info["status"] = ("optimal" if (info.get("result") or "").startswith("Optimal") else
                      "infeasible" if "infeasible" in (info.get("result") or "").lower() else
                      "time_limit" if info.get("result") and "time" in info["result"].lower() else
                      "killed" if info["killed"] else str(info.get("result")))
    # Solution file: first line status, then "index name value reduced_cost".
    order = None
    if os.path.exists(sol):
        with open(sol) as f:
            lines = f.read().splitlines()
        info["solution_header"] = lines[0].strip() if lines else ""
        ones = set()
        pval = None
        for ln in lines[1:]:
            parts = ln.split()
            if len(parts) >= 3:
                name, val = parts[1], float(parts[2])
                if name == "P":
                    pval = val
                elif name.startswith("z") and val > 0.5:
                    ones.add(name)
        hdr = info["solution_header"].lower()
        feasible = not (info.get("no_feasible") or "infeasible" in hdr or "no feasible" in hdr
                        or "no integer solution" in hdr)
        if feasible and pval is not None:
            pos = []
            for v in range(m.n):
                t = m.est[v]
                while t < m.lst[v] and ("z%d_%d" % (v, t)) not in ones:
                    t += 1
                pos.append(t)
            order = sorted(range(m.n), key=lambda v: pos[v])
            info["ilp_objective_bytes"] = int(round(pval)) * A
            info["positions_distinct"] = len(set(pos)) == m.n
    if order is not None:
        info["order_valid"] = m.is_topological(order) and info["positions_distinct"]
        info["order_tp_bytes"] = m.tp(order)
        info["objective_equals_recount"] = info["order_tp_bytes"] == info["ilp_objective_bytes"]
        info["order"] = [m.op_ids[v] for v in order]
    if info.get("lower_bound") is not None:
        info["lower_bound_bytes"] = int(math.ceil(info["lower_bound"] - 1e-6)) * A
    elif info["status"] == "optimal" and "ilp_objective_bytes" in info:
        info["lower_bound_bytes"] = info["ilp_objective_bytes"]
    if not keep:
        for p in (lp,):
            if os.path.exists(p):
                os.remove(p)
    return info


# ------------------------------------------------------------------------------- generator ---

def gen_graph(N, seed, shape="dag", width=4):
    """Seeded random training-like graph of exactly N ops (a memory benchmark: the structure and
    sizes are training-like, the values mean nothing).

    Forward: nf-1 layers and a loss (the graph output).  shape "chain": layer i reads layer i-1
    and, with probability 0.3, one earlier activation (a skip).  shape "dag": layer i reads one
    or (probability 0.4) two activations drawn from the `width` layers before it (or the input
    batch), so branches run in parallel and many orders are valid.  The loss reads every layer
    nobody else reads.  Some layers have a weight (layer 0 always), some save an extra tensor for
    their backward, some single-input layers without weight run in place (their output is an
    alias of their input, which nobody else reads).
    Backward: one op per layer in reverse, reading the gradient contribution of each consumer
    (fused accumulation), the activations it saved and its weight; it makes one gradient per
    input activation and dw for its weight.  Update: one in-place Adam-like op per weighted layer
    (param and optimizer state updated through aliases, `after` its backward).
    N = 2*nf + w with nf forward ops and w weighted layers."""
    if N < 5:
        raise ValueError("N >= 5")
    if shape not in ("chain", "dag"):
        raise ValueError("shape is chain or dag")
    rng = random.Random(seed)
    lo, hi = -(-(N + 1) // 3), (N - 1) // 2
    nf = rng.randint(lo, hi)
    L = nf - 1
    w = N - 2 * nf
    assert 1 <= w <= L
    weighted = {0} | set(rng.sample(range(1, L), w - 1))

    def size():
        return int(math.exp(rng.uniform(math.log(1024), math.log(4 << 20))))

    # Structure: inputs of each layer (-1 = the input batch).
    inputs = []
    for i in range(L):
        if shape == "chain":
            ins = [i - 1]
            if i >= 2 and rng.random() < 0.3:
                ins.append(rng.randrange(i - 1))
        else:
            pool = list(range(max(-1, i - width), i))
            k = 2 if (len(pool) >= 2 and rng.random() < 0.4) else 1
            ins = sorted(rng.sample(pool, k))
        inputs.append(ins)
    consumers = [[] for _ in range(L)]
    for i in range(L):
        for j in inputs[i]:
            if j >= 0:
                consumers[j].append(i)
    sinks = [i for i in range(L) if not consumers[i]]
    inplace = [len(inputs[i]) == 1 and inputs[i][0] >= 0 and consumers[inputs[i][0]] == [i]
               and i not in weighted and rng.random() < 0.25 for i in range(L)]

    tensors = []
    tsize = {}

    def T(tid, sz, role=None, alias=None):
        t = {"id": tid, "size": sz}
        if role:
            t["role"] = role
        if alias:
            t["alias_of"] = alias
        tensors.append(t)
        tsize[tid] = sz
        return tid

    T("data", size(), role="input")
    T("label", 512, role="input")
    act = {-1: "data"}
    saved, params = {}, {}
    ops = []
    for i in range(L):
        ins = [act[j] for j in inputs[i]]
        if i in weighted:
            params[i] = T("w%d" % i, size(), role="param")
            T("m%d" % i, 2 * tsize[params[i]], role="optimizer_state")
            ins.append(params[i])
        if inplace[i]:
            base = act[inputs[i][0]]
            act[i] = T("a%d" % i, tsize[base], alias=base)
        else:
            act[i] = T("a%d" % i, size())
        outs = [act[i]]
        if not inplace[i] and rng.random() < 0.2:
            saved[i] = T("s%d" % i, size() // 4 + 1)
            outs.append(saved[i])
        ops.append({"id": "f%d" % i, "target": "gen.layer", "phase": "forward", "inputs": ins,
                    "outputs": outs})
    T("loss", 4)
    ops.append({"id": "f%d" % L, "target": "gen.loss", "phase": "forward",
                "inputs": [act[s] for s in sinks] + ["label"], "outputs": ["loss"]})
    gc = {}  # (consumer, layer) -> gradient contribution tensor
    for s in sinks:
        gc[("L", s)] = T("gL_%d" % s, tsize[act[s]])
    ops.append({"id": "b%d" % L, "target": "gen.loss_backward", "phase": "backward",
                "inputs": [act[s] for s in sinks] + ["label"],
                "outputs": [gc[("L", s)] for s in sinks]})
    for i in range(L - 1, -1, -1):
        ins = [gc[(c, i)] for c in consumers[i]] + ([gc[("L", i)]] if i in sinks else [])
        if inplace[i]:
            ins.append(act[i])  # e.g. relu_ backward reads its output
        else:
            ins += [act[j] for j in inputs[i]]
            if rng.random() < 0.3:
                ins.append(act[i])
        if i in saved:
            ins.append(saved[i])
        outs = []
        for j in inputs[i]:
            if j >= 0:
                gc[(i, j)] = T("g%d_%d" % (i, j), tsize[act[j]])
                outs.append(gc[(i, j)])
        if i in weighted:
            ins.append(params[i])
            outs.append(T("dw%d" % i, tsize[params[i]]))
        ops.append({"id": "b%d" % i, "target": "gen.layer_backward", "phase": "backward",
                    "inputs": ins, "outputs": outs})
    for i in sorted(weighted, reverse=True):
        T("w%d_new" % i, tsize[params[i]], alias=params[i])
        T("m%d_new" % i, tsize["m%d" % i], alias="m%d" % i)
        ops.append({"id": "u%d" % i, "target": "gen.adam_", "phase": "update",
                    "inputs": [params[i], "dw%d" % i, "m%d" % i],
                    "outputs": ["w%d_new" % i, "m%d_new" % i], "after": ["b%d" % i]})
    assert len(ops) == N, (len(ops), N)
    return {"format": "roam-graph", "version": 1, "name": "random-%s-n%d-s%d" % (shape, N, seed),
            "meta": {"generator": "bench/ilp/order_ilp.py gen", "shape": shape, "width": width,
                     "ops": N, "seed": seed, "optimizer": "Adam", "forward_layers": L,
                     "weighted_layers": w},
            "tensors": tensors, "ops": ops, "outputs": ["loss"]}


# ------------------------------------------------------------------------------------- CLI ---

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("gen", help="write a random training-like graph")
    a.add_argument("--ops", type=int, required=True)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--shape", choices=["chain", "dag"], default="dag")
    a.add_argument("--width", type=int, default=4, help="dag: inputs drawn from this many previous layers")
    a.add_argument("-o", "--output", required=True)
    a = sub.add_parser("solve", help="solve a graph's order ILP with cbc")
    a.add_argument("--graph", required=True)
    a.add_argument("--time-limit", type=float, default=60.0, help="cbc wall-clock seconds")
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--alignment", type=int, default=64)
    a.add_argument("--work", default=None, help="folder for model.lp, solution.txt, cbc.log")
    a.add_argument("--keep-lp", action="store_true")
    a.add_argument("--json", default=None, help="write the result here")
    a = sub.add_parser("tp", help="recompute Tp of a plan's order")
    a.add_argument("--graph", required=True)
    a.add_argument("--plan", required=True)
    a.add_argument("--alignment", type=int, default=64)
    args = ap.parse_args()

    if args.cmd == "gen":
        g = gen_graph(args.ops, args.seed, args.shape, args.width)
        Model(g)  # sanity: parses, program order valid
        with open(args.output, "w") as f:
            json.dump(g, f, indent=1)
        return 0
    if args.cmd == "tp":
        m = Model(load_json(args.graph), args.alignment)
        plan = load_json(args.plan)
        idx = {oid: i for i, oid in enumerate(m.op_ids)}
        order = [idx[o] for o in plan["order"]]
        tp = m.tp(order)
        print(json.dumps({"valid": m.is_topological(order), "tp_bytes": tp,
                          "plan_tp_bytes": plan["stats"]["theoretical_peak_bytes"],
                          "equal": tp == plan["stats"]["theoretical_peak_bytes"]}))
        return 0
    m = Model(load_json(args.graph), args.alignment)
    work = args.work or "/tmp/order_ilp_%d" % os.getpid()
    info = solve(m, work, args.time_limit, args.threads, args.keep_lp)
    info["graph"] = args.graph
    info["ops"] = m.n
    info["storages"] = len(m.storages)
    short = {k: v for k, v in info.items() if k != "order"}
    print(json.dumps(short, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(info, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
