"""``python -m roam.capture``: capture a model's training step as a roam-graph v1 file.

``--model`` is any torchvision classification model or zoo model (``bert-base``, ``gpt2``,
``gpt2-medium``, ``gpt2-large``, ``gpt2-xl``); ``--fake`` traces on fake tensors (nothing is
allocated: for models larger than this machine). Progress lines go to stderr when it is a
terminal (``--progress`` forces them, ``--quiet`` silences everything but errors). Exit status
0 on success, 2 on bad arguments (e.g. an unknown model: the valid names are listed), 1 when
the capture itself fails."""

import argparse
import os
import sys
import time


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m roam.capture",
        description="Trace one training step (forward, loss, backward, optimizer update) of a "
                    "torchvision classification model, a roam.zoo model (bert-base, gpt2, "
                    "gpt2-medium, gpt2-large, gpt2-xl) or a BERT preset (bert-tiny, bert-mini, "
                    "bert-small) with make_fx and write it as a roam-graph v1 file (.json or "
                    ".json.gz). python -m roam.run takes the same models.")
    p.add_argument("--model", help="torchvision.models classification model or zoo model "
                                    "(--list-models prints them)")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--optimizer", default="adam", choices=["adam", "adamw", "sgd"],
                   help="adam (default), adamw (weight decay 0.01) or sgd (lr 0.01, momentum "
                        "0.9); single-tensor implementations")
    p.add_argument("--fake", action="store_true",
                   help="trace on fake tensors (FakeTensorMode): no tensor memory is allocated; "
                        "costs are then estimated")
    p.add_argument("--image-size", type=int, default=224, help="torchvision models")
    p.add_argument("--num-classes", type=int, default=1000, help="torchvision models")
    p.add_argument("--seq-len", type=int, default=None,
                   help="zoo models (default: 128 for bert-base, 1024 for gpt2*)")
    p.add_argument("-o", "--output", help="output file (.json or .json.gz)")
    p.add_argument("--cost", default="auto", choices=["auto", "measured", "estimate", "none"],
                   help="per-op 'cost' in seconds: auto (default) = measured per op on the CPU "
                        "in real mode, FLOP/bytes estimate in fake mode; none = no cost "
                        "(byte-reproducible output, as with estimate)")
    p.add_argument("--measure-cost", action="store_true", help="same as --cost measured")
    p.add_argument("--cost-repeats", type=int, default=3,
                   help="runs whose per-op median is the measured cost")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default=None, help="graph name (default <model>-b<B>-<optimizer>)")
    p.add_argument("--no-peak-check", action="store_true",
                   help="skip the check that the measured eager peak matches Tp(program order) "
                        "(real mode)")
    p.add_argument("--list-models", action="store_true", help="print the valid model names")
    p.add_argument("--progress", action="store_true",
                   help="progress lines on stderr even when it is not a terminal")
    p.add_argument("--quiet", action="store_true", help="no status lines on stderr")
    return p


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    show_progress = not args.quiet and (args.progress or sys.stderr.isatty())

    def say(msg):
        print(f"[roam.capture {time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr,
              flush=True)

    def progress(msg):
        if show_progress:
            say(msg)

    from .models import model_names
    if args.list_models:
        try:
            print("\n".join(model_names()), flush=True)
        except BrokenPipeError:  # e.g. `| head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if not args.model or not args.output:
        parser.print_usage(sys.stderr)
        print("error: --model and -o are required", file=sys.stderr)
        return 2
    if not (args.output.endswith(".json") or args.output.endswith(".json.gz")):
        print("error: -o must end in .json or .json.gz", file=sys.stderr)
        return 2
    if (args.batch_size < 1 or args.image_size < 1 or args.num_classes < 1
            or args.cost_repeats < 1 or (args.seq_len is not None and args.seq_len < 1)):
        print("error: --batch-size, --image-size, --num-classes, --seq-len and --cost-repeats "
              "must be >= 1", file=sys.stderr)
        return 2
    cost = "measured" if args.measure_cost else args.cost
    if cost == "measured" and args.fake:
        print("error: --cost measured needs real tensors (not --fake)", file=sys.stderr)
        return 2
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        print(f"error: output folder {folder} does not exist", file=sys.stderr)
        return 2

    valid = model_names()
    if args.model not in valid:
        print(f"error: unknown model {args.model!r}. Valid models (roam.zoo, then torchvision "
              f"classification models): " + ", ".join(valid), file=sys.stderr)
        return 2

    from . import capture_named, summary, write_graph
    from .errors import CaptureError
    try:
        res = capture_named(args.model, args.batch_size, optimizer=args.optimizer,
                            fake=args.fake, image_size=args.image_size,
                            num_classes=args.num_classes, seq_len=args.seq_len, seed=args.seed,
                            cost=cost, cost_repeats=args.cost_repeats,
                            check_peak=not args.no_peak_check, graph_name=args.name,
                            progress=progress)
    except CaptureError as e:
        print(f"error: capture of {args.model} failed: {e}", file=sys.stderr)
        return 1
    except (ValueError, RuntimeError, AssertionError) as e:
        # Raised by the model's own training step on this input (e.g. BatchNorm with one value
        # per channel, a pooling output below 1x1 when --image-size is too small, ViT's
        # assertion on its one image size).
        from .. import zoo
        from .models import BERT_PRESETS, input_size_hint
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if args.model in BERT_PRESETS or args.model in zoo.MODELS:  # token ids, no image
            print(f"error: {args.model} cannot run a training step on a batch of "
                  f"{args.batch_size} at --seq-len {args.seq_len or 'its default'}: {first}",
                  file=sys.stderr)
            return 2
        hint = input_size_hint(args.model, args.batch_size, args.image_size, first)
        print(f"error: {args.model} cannot run a training step on a batch of "
              f"{args.batch_size} at --image-size {args.image_size}: {first} ({hint})",
              file=sys.stderr)
        return 2
    write_graph(res.graph, args.output)
    s = summary(res.graph)
    if not args.quiet:
        say(f"wrote {args.output}: {s['ops']} ops, {s['tensors']} tensors "
            f"({s['aliases']} aliases), {s['after_edges']} after edges, "
            f"resident {s['resident_bytes']} B, Tp(program order) "
            f"{s['tp_program_order_bytes']} B, phases {s['ops_per_phase']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
