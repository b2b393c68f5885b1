"""Kernels whose results depend on autograd's grad mode, and how to call them.

The captured graph holds the backward explicitly, so roam runs it under ``torch.no_grad()``.
A few CPU kernels behave differently there: ``mkldnn_rnn_layer`` (nn.LSTM / GRU / RNN's forward
on the CPU) returns its ``workspace`` only where grad mode is on (and ``train`` is true), and
its backward needs that workspace (seen on torch 2.13 and 2.14). Eager PyTorch runs the forward
with grad mode on, so roam calls these operators the same way, on detached arguments (nothing
is recorded by autograd).
"""

from typing import Any, Dict, Sequence

import torch
import torch.utils._pytree as pytree

GRAD_MODE_OPS = frozenset({"aten::mkldnn_rnn_layer"})


def needs_grad_mode(target) -> bool:
    """True for an operator of :data:`GRAD_MODE_OPS`."""
    schema = getattr(target, "_schema", None)
    return schema is not None and schema.name in GRAD_MODE_OPS


def call_with_grad_mode(target, args: Sequence[Any], kwargs: Dict[str, Any],
                        detach: bool = True):
    """``target(*args, **kwargs)`` with grad mode on; ``detach``: tensor arguments detached
    first (the results are fresh tensors and the arguments' storages are shared, so nothing
    else changes). Tracing passes ``detach=False`` (a detach would be recorded)."""
    if detach:
        args, kwargs = pytree.tree_map(
            lambda t: t.detach() if isinstance(t, torch.Tensor) else t, (tuple(args), kwargs))
    with torch.enable_grad():
        return target(*args, **kwargs)


def grad_mode_wrapper(fn):
    """``fn`` (an operator callable) called through :func:`call_with_grad_mode`."""
    def call(*args, **kwargs):
        return call_with_grad_mode(fn, args, kwargs)
    return call


def call_graph(gm, *args):
    """Run a captured GraphModule as a whole (its generated code) on ``args``: tensors
    detached, grad mode on, so that :data:`GRAD_MODE_OPS` run as eager PyTorch runs them and
    autograd records nothing (no argument requires grad). The tensors are updated in place
    (the detached tensors share their storages)."""
    args = pytree.tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, args)
    with torch.enable_grad():
        return gm(*args)
