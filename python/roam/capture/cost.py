"""Per-op cost estimate (seconds) from FLOPs and bytes: a roofline model.

A fake capture has no real values to time, so each op's ``cost`` is estimated as

    cost = max(flops / flops_per_second, bytes / bytes_per_second) + seconds_per_op

with (defaults of :class:`CostModel`, an NVIDIA A100 in fp32 without TF32):
``flops_per_second`` = 19.5e12, ``bytes_per_second`` = 1.555e12 (HBM2), ``seconds_per_op`` =
5e-6 (kernel launch and framework overhead). Counting:

* **FLOPs**: ``mm`` 2MKN, ``addmm`` 2MKN + MN, ``bmm`` 2BMKN, ``baddbmm`` 2BMKN + BMN;
  ``convolution`` 2 x (output elements) x (input channels per group x kernel elements), plus
  the output elements for a bias; ``convolution_backward`` the forward count once per
  requested input / weight gradient, plus the gradient elements for the bias gradient; every
  other op one FLOP per element of its largest input or output;
* **bytes**: the bytes of every tensor argument read plus every fresh result and every
  argument written in place; an op whose results are all views and that writes nothing moves
  no bytes (its cost is ``seconds_per_op``).

The estimate is deterministic; a real capture can measure instead (``cost="measured"``: the
median CPU time of each op over a few runs, see :func:`roam.capture.export.measure_costs`).
"""

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, Sequence, Tuple

import torch


@dataclass(frozen=True)
class CostModel:
    """Roofline constants of :func:`op_seconds` (see the module docstring)."""
    name: str = "roofline, NVIDIA A100 fp32"
    flops_per_second: float = 19.5e12
    bytes_per_second: float = 1.555e12
    seconds_per_op: float = 5e-6

    def as_meta(self) -> Dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (f"cost: estimated ({self.name}): max(flops / {self.flops_per_second:g}, "
                f"bytes / {self.bytes_per_second:g}) + {self.seconds_per_op:g} seconds per op; "
                f"FLOPs of mm/addmm/bmm/baddbmm/convolution/convolution_backward counted "
                f"exactly, one FLOP per element elsewhere (roam.capture.cost)")


DEFAULT_COST_MODEL = CostModel()


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _prod(xs) -> int:
    return int(math.prod(int(x) for x in xs))


def estimate_op(target, args: Dict[str, Any], inputs: Sequence[torch.Tensor],
                fresh_outputs: Sequence[torch.Tensor],
                written: Sequence[torch.Tensor]) -> Tuple[float, float]:
    """``(flops, bytes)`` of one ATen op call.

    Args:
        target: the ``OpOverload``.
        args: schema argument name -> value (tensors as passed).
        inputs: the distinct tensor arguments.
        fresh_outputs: results that own a new storage (views excluded).
        written: tensor arguments the op writes in place.
    """
    name = target._schema.name.split("::")[-1]
    if not fresh_outputs and not written:
        return 0.0, 0.0
    nbytes = sum(_nbytes(t) for t in inputs) + sum(_nbytes(t) for t in fresh_outputs) + \
        sum(_nbytes(t) for t in written)
    flops = None
    try:
        if name == "mm":
            a, b = args["self"], args["mat2"]
            flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
        elif name == "addmm":
            a, b = args["mat1"], args["mat2"]
            flops = 2 * a.shape[0] * a.shape[1] * b.shape[1] + a.shape[0] * b.shape[1]
        elif name in ("bmm", "baddbmm"):
            a, b = (args["self"], args["mat2"]) if name == "bmm" else (args["batch1"],
                                                                      args["batch2"])
            flops = 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
            if name == "baddbmm":
                flops += a.shape[0] * a.shape[1] * b.shape[2]
        elif name == "convolution":
            w = args["weight"]
            side = args["input"] if args.get("transposed") else fresh_outputs[0]
            flops = 2 * side.numel() * _prod(w.shape[1:])
            if args.get("bias") is not None:
                flops += fresh_outputs[0].numel()
        elif name == "convolution_backward":
            w, go = args["weight"], args["grad_output"]
            side = args["input"] if args.get("transposed") else go
            fwd = 2 * side.numel() * _prod(w.shape[1:])
            mask = list(args.get("output_mask") or (True, True, True))
            flops = fwd * (int(bool(mask[0])) + int(bool(mask[1])))
            if mask[2]:
                flops += go.numel()
    except (KeyError, IndexError, AttributeError, TypeError):
        flops = None
    if flops is None:
        flops = max([t.numel() for t in list(inputs) + list(fresh_outputs)] or [0])
    return float(flops), float(nbytes)


def op_seconds(flops: float, nbytes: float, model: CostModel = DEFAULT_COST_MODEL) -> float:
    """Roofline time in seconds of an op with ``flops`` and ``nbytes``."""
    return max(flops / model.flops_per_second, nbytes / model.bytes_per_second) + \
        model.seconds_per_op
