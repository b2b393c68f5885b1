"""Data-parallel training steps: the gradient all-reduce of each rank as ops of its graph.

A rank of a data-parallel job (``torch.nn.parallel.DistributedDataParallel``) runs the whole
model on its own part of the batch, and after ``backward()`` every gradient is averaged over
the ranks. :class:`DataParallel` describes the process group and the gradient buckets;
:func:`all_reduce_gradients` does the averaging as DDP's reducer does it (its default
communication hook, ``gradient_as_bucket_view=False``, torch 2.x ``reducer.cpp``):

* parameters with a gradient are grouped into **buckets** in reverse order of
  ``model.parameters()`` (about the order in which backward produces their gradients), one
  dtype per bucket, a bucket closed once it holds ``first_bucket_bytes`` (the first) or
  ``bucket_cap_bytes`` (the others) -- DDP's ``_compute_bucket_assignment_by_size`` with its
  defaults, 1 MiB and 25 MiB;
* each bucket is one flat tensor: the gradients, each multiplied by ``1 / world_size`` (DDP's
  ``mul_out(bucket_view, grad, 1 / div_factor)``), concatenated; then one all-reduce (sum) of
  the bucket over the group;
* each gradient becomes the view of its part of the reduced bucket (DDP copies it back into
  ``.grad``: the same values).

Gradients of one element are summed across ranks in the same way, so the averaged values are
what DDP computes; with a power-of-two world size the scaling is exact and two ranks' sums do
not depend on the order of addition.

The collectives are torch.distributed's *functional* collectives, called as the operators
``torch.ops._c10d_functional.all_reduce`` (returns a new tensor) and ``wait_tensor`` (waits
for it and returns it), which ``make_fx`` records as ops of the graph and eager mode runs on
the group (``torch.distributed._functional_collectives`` wraps the same operators). The
namespace is private (underscored), but it is the traceable collective API that
torch.compile and DTensor use; checked on torch 2.13 and 2.14 (gloo, CPU).

:func:`data_parallel_backward` applies :func:`all_reduce_gradients` after every
``backward()`` of a step (as DDP's hooks do: each ``backward()`` outside ``no_sync()``
all-reduces), whether the backward is eager autograd or the capture's traced one.
"""

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import torch

from .errors import CaptureError
from .modules import phase

# the graph's op targets of torch.distributed's functional collectives (schema names)
COLLECTIVE_KINDS = {
    "_c10d_functional::all_reduce": "all_reduce",
    "_c10d_functional::all_reduce_": "all_reduce",
    "_c10d_functional::all_reduce_coalesced": "all_reduce",
    "_c10d_functional::all_gather_into_tensor": "all_gather",
    "_c10d_functional::all_gather_into_tensor_coalesced": "all_gather",
    "_c10d_functional::reduce_scatter_tensor": "reduce_scatter",
    "_c10d_functional::reduce_scatter_tensor_coalesced": "reduce_scatter",
    "_c10d_functional::all_to_all_single": "all_to_all",
    "_c10d_functional::broadcast": "broadcast",
    "_c10d_functional::broadcast_": "broadcast",
}
# waits: the result is the argument's tensor once the collective that writes it is done
WAIT_OPS = frozenset({"_c10d_functional::wait_tensor"})

DDP_FIRST_BUCKET_BYTES = 1 << 20   # torch.distributed.constants / DDP's first bucket
DDP_BUCKET_CAP_BYTES = 25 << 20    # DistributedDataParallel(bucket_cap_mb=25)


def collective_kind(target) -> Optional[str]:
    """``"all_reduce"``, ``"all_gather"``, ... for a functional collective op, else None."""
    schema = getattr(target, "_schema", None)
    return None if schema is None else COLLECTIVE_KINDS.get(schema.name)


def waited_at_launch(fn: Callable) -> Callable:
    """``fn`` (a functional collective's operator) followed by ``wait_tensor`` on each
    tensor it returns: the collective is complete when the call returns, and the graph's
    own wait op after it finds no work left and returns its argument (``wait_tensor`` waits
    only for a registered work). The executor runs every collective this way: the scratch a
    process group holds for a collective until it is waited for (gloo's copy of a
    reduce-scatter's input) is then freed within the op, as GRAPH_FORMAT.md's ``workspace``
    is, instead of across the ops a plan puts between the collective and its wait. On the
    CPU nothing overlaps with the collective either way (gloo runs it on its own thread
    while the step waits)."""
    wait = torch.ops._c10d_functional.wait_tensor.default

    def launch_and_wait(*args, **kwargs):
        out = fn(*args, **kwargs)
        for t in (out if isinstance(out, (list, tuple)) else (out,)):
            if isinstance(t, torch.Tensor):
                wait(t)
        return out
    return launch_and_wait


def group_name_of(node_args: Sequence[Any]) -> Optional[str]:
    """The process group name of a functional collective's arguments (its last ``str``)."""
    names = [a for a in node_args if isinstance(a, str)]
    return names[-1] if names else None


@dataclass(frozen=True)
class DataParallel:
    """One rank of a data-parallel step.

    ``group``: the ``torch.distributed`` process group (``None``: the default group, which
    must be initialized). ``bucket_cap_bytes`` / ``first_bucket_bytes``: the gradient bucket
    sizes (bytes), DDP's defaults. ``broadcast_buffers``: as DDP's (default True): at the
    start of the step every module buffer (BatchNorm's running statistics)
    takes rank 0's values (DDP does it before each forward; roam once per step, the same for
    a step with one forward).

    Raises (:meth:`resolve`): CaptureError when torch.distributed is not initialized.
    """
    group: Any = None
    bucket_cap_bytes: int = DDP_BUCKET_CAP_BYTES
    first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES
    broadcast_buffers: bool = True

    def resolve(self) -> "DataParallel":
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            raise CaptureError("roam: process_group: torch.distributed is not initialized "
                               "(call torch.distributed.init_process_group first, e.g. under "
                               "torchrun)")
        group = self.group if self.group is not None else dist.group.WORLD
        if self.bucket_cap_bytes <= 0 or self.first_bucket_bytes <= 0:
            raise ValueError(f"roam: bucket sizes must be positive, not "
                             f"{self.first_bucket_bytes} / {self.bucket_cap_bytes} B")
        return DataParallel(group, self.bucket_cap_bytes, self.first_bucket_bytes,
                            self.broadcast_buffers)

    @property
    def world_size(self) -> int:
        import torch.distributed as dist
        return dist.get_world_size(self.group)

    @property
    def rank(self) -> int:
        import torch.distributed as dist
        return dist.get_rank(self.group)

    @property
    def group_name(self) -> str:
        return self.group.group_name

    def meta(self) -> Dict[str, Any]:
        """The graph's ``meta.distributed``."""
        import torch.distributed as dist
        return {"kind": "data_parallel", "world_size": self.world_size, "rank": self.rank,
                "backend": str(dist.get_backend(self.group)), "group": self.group_name,
                "bucket_cap_bytes": self.bucket_cap_bytes,
                "first_bucket_bytes": self.first_bucket_bytes,
                "broadcast_buffers": self.broadcast_buffers,
                "gradient_average": "each gradient x 1/world_size, then all-reduce (sum) of "
                                    "its bucket, as DistributedDataParallel"}


def gradient_buckets(params: Sequence[torch.Tensor], dp: DataParallel) -> List[List[int]]:
    """Indices into ``params`` (those with a ``.grad``) per bucket, in the order the buckets
    are all-reduced: reverse parameter order, one dtype per bucket, a bucket closed when it
    holds at least its cap (DDP's ``_compute_bucket_assignment_by_size``)."""
    buckets: List[List[int]] = []
    open_: Dict[torch.dtype, List[int]] = {}
    held: Dict[torch.dtype, int] = {}
    done_first = False
    for i in reversed(range(len(params))):
        g = params[i].grad
        if g is None:
            continue
        b = open_.setdefault(g.dtype, [])
        b.append(i)
        held[g.dtype] = held.get(g.dtype, 0) + g.numel() * g.element_size()
        cap = dp.bucket_cap_bytes if done_first else dp.first_bucket_bytes
        if held[g.dtype] >= cap:
            buckets.append(b)
            done_first = True
            open_[g.dtype], held[g.dtype] = [], 0
    buckets.extend(b for b in open_.values() if b)
    return buckets


def all_reduce_gradients(params: Sequence[torch.Tensor], dp: DataParallel) -> int:
    """Average the ``.grad`` of ``params`` over ``dp``'s group in buckets (module docstring);
    each ``.grad`` becomes a view of its reduced bucket. Returns the number of buckets."""
    c10d = torch.ops._c10d_functional
    world, name = dp.world_size, dp.group_name
    buckets = gradient_buckets(params, dp)
    with torch.no_grad():
        for b in buckets:
            grads = [params[i].grad for i in b]
            parts = [g.reshape(-1) for g in grads]
            flat = torch.cat(parts) if len(parts) > 1 else parts[0]
            flat = torch.mul(flat, 1.0 / world)
            reduced = c10d.wait_tensor(c10d.all_reduce(flat, "sum", name))
            pieces = torch.split(reduced, [p.numel() for p in parts])
            for i, g, piece in zip(b, grads, pieces):
                params[i].grad = piece.view(g.shape)
    return len(buckets)


def broadcast_buffers(buffers: Sequence[torch.Tensor], dp: DataParallel) -> int:
    """Overwrite each buffer with rank 0's values (one broadcast per buffer, in order), as
    DDP's ``broadcast_buffers`` does; returns how many were broadcast."""
    if not dp.broadcast_buffers:
        return 0
    c10d = torch.ops._c10d_functional
    src = 0  # the group's rank 0 (ProcessGroup root rank: a rank within the group)
    n = 0
    with torch.no_grad():
        for b in buffers:
            if b.numel() == 0:
                continue
            b.copy_(c10d.wait_tensor(c10d.broadcast(b, src, dp.group_name)))
            n += 1
    return n


@contextlib.contextmanager
def data_parallel_backward(dp: Optional[DataParallel],
                           params: Callable[[], Sequence[torch.Tensor]]) -> Iterator[None]:
    """While active, every ``Tensor.backward()`` / ``torch.autograd.backward()`` is followed
    by :func:`all_reduce_gradients` over ``params()`` (read at each call: the parameters the
    step trains, e.g. while reparametrized). Wraps whatever the two functions are on entry
    (eager autograd, or the capture's traced backward). ``dp`` None: does nothing."""
    if dp is None:
        yield
        return
    tensor_backward, autograd_backward = torch.Tensor.backward, torch.autograd.backward
    depth = [0]  # eager Tensor.backward calls torch.autograd.backward: all-reduce once

    def wrap(fn):
        def call(*a, **k):
            depth[0] += 1
            try:
                out = fn(*a, **k)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                with phase("backward"):
                    all_reduce_gradients(list(params()), dp)
            return out
        return call

    torch.Tensor.backward = wrap(tensor_backward)
    torch.autograd.backward = wrap(autograd_backward)
    try:
        yield
    finally:
        torch.Tensor.backward, torch.autograd.backward = tensor_backward, autograd_backward


@contextlib.contextmanager
def data_parallel_step(dp: Optional[DataParallel], model: torch.nn.Module) -> Iterator[None]:
    """One step of a data-parallel rank, as DDP runs it: on entry rank 0's buffers are
    broadcast (:func:`broadcast_buffers`), and inside every ``backward()`` is followed by the
    gradient all-reduce over ``model``'s parameters (:func:`data_parallel_backward`). The same
    for the traced step and for an eager one. ``dp`` None: does nothing."""
    if dp is None:
        yield
        return
    broadcast_buffers(list(model.buffers()), dp)
    with data_parallel_backward(dp, lambda: list(model.parameters())):
        yield
