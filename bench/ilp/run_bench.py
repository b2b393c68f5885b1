#!/usr/bin/python3
"""Measures the CBC order ILP (order_ilp.py) against `roam plan --order roam` on random graphs
and real graphs.  Writes results.json (every row, full ILP info) and results.md (tables).

  /usr/bin/python3 bench/ilp/run_bench.py [--time-limit 60] [--sizes 8,12,...] [--seeds 1-5]
      [--shapes chain,dag] [--real bench/graphs/alexnet-b1-adam.json.gz] [--out bench/ilp]

Runs are sequential (one cbc at a time, single thread)."""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import order_ilp  # noqa: E402

ROAM = os.environ.get("ROAM_BIN", os.path.join(ROOT, "build", "roam"))


def roam_plan(graph, plan_path):
    t0 = time.monotonic()
    cp = subprocess.run([ROAM, "-q", "plan", graph, "--order", "roam", "--layout", "llfb",
                         "-o", plan_path], capture_output=True, text=True)
    wall = time.monotonic() - t0
    if cp.returncode != 0:
        return {"roam_error": cp.stderr.strip() or cp.stdout.strip()}
    plan = order_ilp.load_json(plan_path)
    st = plan["stats"]
    return {"roam_tp_bytes": st["theoretical_peak_bytes"], "roam_lb_bytes": st["lower_bound_bytes"],
            "roam_solve_seconds": st["solve_seconds"], "roam_cli_seconds": round(wall, 3),
            "roam_order": plan["order"], "roam_order_stats": order_stats_summary(plan)}


def order_stats_summary(plan):
    """What roam's plan says about its own search (method.options.order_stats), if present."""
    os_ = plan.get("method", {}).get("options", {}).get("order_stats")
    if not isinstance(os_, dict):
        return None
    keep = ("winner", "segments", "max_segment_ops", "exact_solved", "states", "swaps",
            "key_points", "lower_bound", "time_limit_hit")
    out = {k: os_[k] for k in keep if k in os_}
    v = os_.get("variants", {})
    out["all_exact_variants"] = sorted(k for k, x in v.items() if isinstance(x, dict) and x.get("all_exact"))
    return out


def run_case(graph, work, time_limit, label):
    m = order_ilp.Model(order_ilp.load_json(graph))
    row = {"case": label, "graph": graph, "ops": m.n, "storages": len(m.storages)}
    r = roam_plan(graph, os.path.join(work, "plan.json"))
    row.update(r)
    if "roam_order" in r:
        idx = {o: i for i, o in enumerate(m.op_ids)}
        order = [idx[o] for o in r.pop("roam_order")]
        row.pop("roam_order", None)
        row["roam_order_valid"] = m.is_topological(order)
        row["roam_tp_recount_equal"] = m.tp(order) == row["roam_tp_bytes"]
    info = order_ilp.solve(m, os.path.join(work, "ilp"), time_limit)
    info.pop("order", None)
    row["ilp"] = info
    print(json.dumps({k: v for k, v in row.items() if k != "ilp"}), file=sys.stderr)
    print("   ilp: %s obj=%s bound=%s recount=%s cbc=%.1fs z=%d rows=%d" % (
        info["status"], info.get("ilp_objective_bytes"), info.get("lower_bound_bytes"),
        info.get("objective_equals_recount"), info["cbc_seconds"], info["z_vars"], info["rows"]),
        file=sys.stderr, flush=True)
    return row


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[:3]
    except OSError:
        return None


def mib(b):
    return "%d" % b if b is not None else "-"


def verdict(row):
    ilp = row["ilp"]
    obj = ilp.get("order_tp_bytes")
    roam = row.get("roam_tp_bytes")
    if ilp["status"] == "optimal":
        return "equal" if roam == obj else ("ROAM WORSE" if roam > obj else "ROAM BETTER (ILP bug)")
    if obj is None:
        return "no ILP solution"
    return "roam <= ILP" if roam <= obj else "ILP better"


def tables(rows, time_limit):
    out = ["| case | ops | storages | z vars / rows | ILP status | ILP Tp (B) | ILP bound (B) "
           "| CBC wall s (cpu s) | roam Tp (B) | roam LB (B) | roam s | roam vs ILP |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        i = r["ilp"]
        out.append("| %s | %d | %d | %d / %d | %s | %s | %s | %.2f (%s) | %s | %s | %.4f | %s |" % (
            r["case"], r["ops"], r["storages"], i["z_vars"], i["rows"], i["status"],
            mib(i.get("order_tp_bytes")), mib(i.get("lower_bound_bytes")), i["cbc_seconds"],
            i.get("cpu_seconds", "-"),
            mib(r.get("roam_tp_bytes")), mib(r.get("roam_lb_bytes")), r.get("roam_solve_seconds", -1),
            verdict(r)))
    # Aggregate per (shape, ops).
    groups = {}
    for r in rows:
        key = r["case"].rsplit("-s", 1)[0] if r["case"].startswith("random") else r["case"]
        groups.setdefault(key, []).append(r)
    agg = ["| graphs | seeds | CBC optimal within %gs | CBC wall s (median / max) | roam s (max) "
           "| roam = ILP optimum | roam worse | roam Tp = roam LB | ILP objective = recount |" % time_limit,
           "|---|---|---|---|---|---|---|---|---|"]
    for key, rs in groups.items():
        cs = sorted(r["ilp"]["cbc_seconds"] for r in rs)
        opt = [r for r in rs if r["ilp"]["status"] == "optimal"]
        eq = sum(1 for r in opt if r["roam_tp_bytes"] == r["ilp"]["order_tp_bytes"])
        worse = sum(1 for r in opt if r["roam_tp_bytes"] > r["ilp"]["order_tp_bytes"])
        lbeq = sum(1 for r in rs if r.get("roam_tp_bytes") == r.get("roam_lb_bytes"))
        rec = [r["ilp"].get("objective_equals_recount") for r in rs if "order_tp_bytes" in r["ilp"]]
        agg.append("| %s | %d | %d/%d | %.2f / %.2f | %.4f | %d/%d | %d | %d/%d | %d/%d |" % (
            key, len(rs), len(opt), len(rs), cs[len(cs) // 2], cs[-1],
            max(r.get("roam_solve_seconds", 0) for r in rs), eq, len(opt), worse, lbeq, len(rs),
            sum(1 for x in rec if x), len(rec)))
    return "\n".join(agg), "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=60)
    ap.add_argument("--sizes", default="8,12,16,20,30,40")
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--shapes", default="chain,dag")
    ap.add_argument("--real", action="append", default=[])
    ap.add_argument("--work", default="/tmp/roam_ilp_bench")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--tag", default="results")
    ap.add_argument("--retable", action="store_true",
                    help="only rewrite TAG.md from TAG.json, first re-planning every row's graph with "
                         "roam to fill roam_order_stats (roam is deterministic: Tp must not change)")
    args = ap.parse_args()
    if args.retable:
        path = os.path.join(args.out, args.tag + ".json")
        with open(path) as f:
            d = json.load(f)
        for r in d["rows"]:
            if r.get("roam_order_stats") is None and os.path.exists(r["graph"]):
                p = roam_plan(r["graph"], os.path.join(args.work, "replan.json"))
                if p.get("roam_tp_bytes") != r["roam_tp_bytes"]:
                    raise SystemExit("roam Tp changed on " + r["case"])
                r["roam_order_stats"] = p["roam_order_stats"]
        d["meta"]["roam_order_stats_from"] = ROAM
        with open(path, "w") as f:
            json.dump(d, f, indent=1)
        agg, full = tables(d["rows"], d["meta"]["time_limit_s"])
        meta = d["meta"]
        with open(os.path.join(args.out, args.tag + ".md"), "w") as f:
            f.write("<!-- written by bench/ilp/run_bench.py, %s -->\n\n" % meta["date"])
            f.write("Run: `%s`, %s, %d CPUs, %.0f s in all, load average at start / end %s / %s.\n\n" % (
                " ".join(meta["argv"]), meta["cbc"], meta["cpus"], meta["total_seconds"],
                meta.get("loadavg_start"), meta.get("loadavg_end")))
            f.write(agg + "\n\n" + full + "\n")
        print(agg)
        return 0
    a, _, b = args.seeds.partition("-")
    seeds = list(range(int(a), int(b or a) + 1))
    sizes = [int(x) for x in args.sizes.split(",") if x]
    os.makedirs(args.work, exist_ok=True)
    rows = []
    load0 = loadavg()
    t_all = time.monotonic()
    for shape in [s for s in args.shapes.split(",") if s]:
        for n in sizes:
            for seed in seeds:
                label = "random-%s-n%d-s%d" % (shape, n, seed)
                gpath = os.path.join(args.work, label + ".json")
                with open(gpath, "w") as f:
                    json.dump(order_ilp.gen_graph(n, seed, shape), f)
                rows.append(run_case(gpath, args.work, args.time_limit, label))
    for g in args.real:
        label = os.path.basename(g).split(".json")[0]
        rows.append(run_case(g, args.work, args.time_limit, label))
    total = time.monotonic() - t_all
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "time_limit_s": args.time_limit,
            "cpus": os.cpu_count(), "cbc": "coinor-cbc 2.10.8 (Debian), 1 thread, timeMode elapsed",
            "total_seconds": round(total, 1), "argv": sys.argv, "roam": ROAM,
            "loadavg_start": load0, "loadavg_end": loadavg()}
    with open(os.path.join(args.out, args.tag + ".json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    agg, full = tables(rows, args.time_limit)
    with open(os.path.join(args.out, args.tag + ".md"), "w") as f:
        f.write("<!-- written by bench/ilp/run_bench.py, %s -->\n\n" % meta["date"])
        f.write("Run: `%s`, %s, %d CPUs, %.0f s in all, load average at start / end %s / %s.\n\n" % (
            " ".join(sys.argv), meta["cbc"], meta["cpus"], total, load0, meta["loadavg_end"]))
        f.write(agg + "\n\n" + full + "\n")
    print(agg)
    print()
    print(full)
    return 0


if __name__ == "__main__":
    sys.exit(main())
