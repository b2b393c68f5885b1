"""Capture one PyTorch training step as a roam-graph v1 (see GRAPH_FORMAT.md).

``roam.capture(model, optimizer, loss_fn, example_inputs, *, fake=False) -> Graph`` (this
module is callable: it is :func:`~roam.capture.api.capture`); ``Graph.save(path)`` writes
the file.

Pipeline (:func:`capture_step`):

1. a steady-state :class:`TrainingState`: the model, an optimizer whose state exists (a
   warm-up step on copies creates it if needed, :func:`~roam.capture.trace.warm_up`), the
   loss function and a batch; for ``fake=True`` every tensor is a fake tensor of one
   ``FakeTensorMode`` (:mod:`roam.capture.fake`);
2. :func:`~roam.capture.trace.trace_training_step`: ``make_fx`` of
   ``train_step(params, buffers, optimizer_state, inputs)`` = forward through
   ``functional_call``, the loss, ``torch.autograd.grad``, the optimizer's own ``step()``
   on the traced tensors; phases stamped on the fx nodes while tracing;
3. :class:`~roam.capture.export.GraphBuilder`: run the GraphModule once with an
   ``fx.Interpreter`` (on real or fake tensors); tensors, sizes (bytes), aliases (from
   operator schemas, checked against the storages), writes; then ``after`` edges;
4. :func:`~roam.capture.check.check_graph` plus capture-specific checks (parameters and
   optimizer state updated, loss depends on the model inputs, in real mode the measured eager
   peak matches Tp(program order)); ``cost`` per op measured (real) or estimated
   (:mod:`roam.capture.cost`); write with :func:`~roam.capture.io.write_graph`.

The graph is what ROAM (arXiv 2310.19295) plans: the order of the ops and the offsets of
the non-resident tensors.

Command line: ``python -m roam.capture --model alexnet --batch-size 1 -o out.json.gz``.
"""

import sys as _sys
import types as _types

from .api import (COST_KINDS, CaptureResult, Graph, _capture_checks, capture, capture_model,
                  capture_step, check_eager_peak)
from .check import (check_graph, inplace_in_order, program_order_peak, resident_bytes, summary,
                    with_inplace)
from .cost import DEFAULT_COST_MODEL, CostModel
from .errors import CaptureError, GraphCheckError, UnknownModelError
from .edges import add_order_edges, resolve_root
from .export import GraphBuilder, dtype_name, measure_costs
from .io import read_graph, write_graph
from .models import (OPTIMIZERS, build_model, capture_named, capture_torchvision,
                     classification_model_names, make_optimizer, model_names)
from .functional import functionalize_step
from .state import (AdamOptions, StepInputs, TrainingState, cross_entropy_loss,
                    eager_reference, make_state, prepare_training_state, warm_up)
from .trace import TracedStep, make_train_step, trace_training_step

__all__ = [
    "AdamOptions", "COST_KINDS", "CaptureError", "CaptureResult", "CostModel",
    "DEFAULT_COST_MODEL", "Graph", "GraphCheckError", "OPTIMIZERS", "StepInputs",
    "TracedStep", "TrainingState", "UnknownModelError", "build_model", "capture",
    "capture_model", "capture_named", "capture_step", "capture_torchvision",
    "check_eager_peak", "check_graph", "classification_model_names", "cross_entropy_loss",
    "eager_reference", "make_optimizer", "make_state", "make_train_step", "model_names",
    "prepare_training_state", "program_order_peak", "read_graph", "resident_bytes", "summary",
    "trace_training_step", "warm_up", "write_graph",
]


class _CallableModule(_types.ModuleType):
    """Makes ``roam.capture(...)`` call :func:`capture` while ``roam.capture.X`` still
    reaches the package's names."""

    def __call__(self, *args, **kwargs):
        return capture(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableModule
