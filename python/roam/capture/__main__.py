"""``python -m roam.capture``: capture a torchvision model's training step (Adam,
cross-entropy) as a roam-graph v1 file. Exit status 0 on success, 2 on bad arguments (e.g. an
unknown model), 1 when the capture itself fails."""

import argparse
import os
import sys
import time


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m roam.capture",
        description="Trace one training step (forward, cross-entropy, backward, Adam update) "
                    "of a torchvision classification model with make_fx and write it as a "
                    "roam-graph v1 file (.json or .json.gz).")
    p.add_argument("--model", required=True, help="torchvision.models classification model")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("-o", "--output", required=True, help="output file (.json or .json.gz)")
    p.add_argument("--measure-cost", action="store_true",
                   help="add per-op 'cost' (median CPU seconds over --cost-repeats runs); the "
                        "output is then no longer byte-reproducible")
    p.add_argument("--cost-repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-peak-check", action="store_true",
                   help="skip the check that the measured eager peak matches Tp(program order)")
    p.add_argument("--quiet", action="store_true", help="no status lines on stderr")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    t0 = time.perf_counter()

    def say(msg):
        if not args.quiet:
            print(f"[roam.capture {time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr,
                  flush=True)

    if not (args.output.endswith(".json") or args.output.endswith(".json.gz")):
        print("error: -o must end in .json or .json.gz", file=sys.stderr)
        return 2
    if args.batch_size < 1 or args.image_size < 1 or args.num_classes < 1 or args.cost_repeats < 1:
        print("error: --batch-size, --image-size, --num-classes and --cost-repeats must be >= 1",
              file=sys.stderr)
        return 2
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        print(f"error: output folder {folder} does not exist", file=sys.stderr)
        return 2

    from .models import classification_model_names
    valid = classification_model_names()
    if args.model not in valid:
        print(f"error: unknown model {args.model!r}. Valid torchvision classification models: "
              + ", ".join(valid), file=sys.stderr)
        return 2

    from . import capture_torchvision, summary, write_graph
    from .errors import CaptureError
    try:
        res = capture_torchvision(args.model, args.batch_size, args.image_size,
                                  args.num_classes, seed=args.seed,
                                  measure_cost=args.measure_cost,
                                  cost_repeats=args.cost_repeats,
                                  check_peak=not args.no_peak_check, progress=say)
    except CaptureError as e:
        print(f"error: capture of {args.model} failed: {e}", file=sys.stderr)
        return 1
    write_graph(res.graph, args.output)
    s = summary(res.graph)
    say(f"wrote {args.output}: {s['ops']} ops, {s['tensors']} tensors "
        f"({s['aliases']} aliases), {s['after_edges']} after edges, "
        f"resident {s['resident_bytes']} B, Tp(program order) "
        f"{s['tp_program_order_bytes']} B, phases {s['ops_per_phase']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
