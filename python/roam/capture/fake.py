"""Fake tensors: tracing a training step without allocating its tensors.

PyTorch's ``FakeTensorMode`` (``torch._subclasses.fake_tensor``) runs every operator on
"meta" tensors: shapes, dtypes, strides and storage sharing are computed, no data is
allocated. The capture traces with ``make_fx`` (which records ATen calls through its proxy
mode) while a ``FakeTensorMode`` is active below it, so the recorded program is the one the
real tensors would run, and a model as large as GPT-2 XL traces in a few GiB of memory.

This module holds:

* :func:`new_fake_mode` / :func:`fake_mode_of`: the mode used for a capture;
* :func:`to_fake`: conversion of real tensors (model parameters, optimizer state, inputs); a
  0-d optimizer-state tensor (e.g. Adam's ``step``) becomes a *constant* fake tensor that
  keeps its real value, so ``step.item()`` in the optimizer works while tracing;
* meta kernels for the operators that this PyTorch lacks one for (the fused SGD and Adagrad
  updates on torch 2.x; the backward operators of older releases)
  (:func:`register_meta_kernels`): ``convolution_backward``,
  ``max_pool2d_with_indices_backward``, ``_adaptive_avg_pool2d_backward``,
  ``native_batch_norm_backward``, ``embedding_dense_backward``, ... Each returns empty
  tensors of the shapes and dtypes the CPU kernel returns. Without them FakeTensorMode would
  fall back to running the real CPU kernel on zero-filled inputs (allocating them);
* :func:`count_fallbacks`: counts any such fallback that still happens (reported in the
  graph's notes).
"""

import contextlib
from typing import Dict, Iterator, Optional

import torch
from torch._subclasses import fake_tensor as _ft
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._mode_utils import no_dispatch

__all__ = ["FakeTensor", "FakeTensorMode", "count_fallbacks", "fake_mode_of", "is_fake",
           "new_fake_mode", "register_meta_kernels", "to_fake"]


def is_fake(t) -> bool:
    """True for a ``FakeTensor``."""
    return isinstance(t, FakeTensor)


def new_fake_mode() -> FakeTensorMode:
    """A fresh ``FakeTensorMode`` (fallback kernels allowed but counted, see
    :func:`count_fallbacks`); registers the missing meta kernels first."""
    register_meta_kernels()
    return FakeTensorMode(allow_fallback_kernels=True)


def fake_mode_of(tensors) -> Optional[FakeTensorMode]:
    """The fake mode of the first ``FakeTensor`` among ``tensors`` (None if all are real).
    Raises ValueError when fake tensors of two different modes are mixed."""
    mode = None
    for t in tensors:
        if isinstance(t, FakeTensor):
            if mode is None:
                mode = t.fake_mode
            elif t.fake_mode is not mode:
                raise ValueError("tensors from two different FakeTensorModes")
    return mode


def to_fake(mode: FakeTensorMode, t: torch.Tensor, constant: bool = False) -> torch.Tensor:
    """``t`` as a fake tensor of ``mode`` (``t`` itself when it already is one).

    ``constant=True`` (only for tensors of at most one element) keeps the real value inside
    the fake tensor, as FakeTensorMode does for ``torch.tensor(...)`` literals, so that
    ``.item()`` on it and on results computed from constants only returns the real number.
    ``requires_grad`` is preserved.
    """
    if isinstance(t, FakeTensor):
        if t.fake_mode is not mode:
            raise ValueError("tensor belongs to another FakeTensorMode")
        return t
    if constant and t.numel() <= _ft.CONSTANT_NUMEL_LIMIT:
        # The copy is made with the mode's dispatch off: inside an active FakeTensorMode a real
        # tensor's detach() is refused (swin_t's relative-position constants met that).
        with torch.no_grad():
            with no_dispatch():
                real = t.detach().clone()
            f = mode.fake_tensor_converter(mode, real, make_constant=True)
        return f.requires_grad_(t.requires_grad) if t.requires_grad else f
    return mode.from_tensor(t)



def module_to_fake(module: torch.nn.Module, mode: FakeTensorMode) -> torch.nn.Module:
    """Replaces, in place, every parameter and buffer of ``module`` (built with real tensors)
    by a fake tensor of ``mode`` with the same shape, dtype and ``requires_grad``; a tensor
    shared by several modules (tied weights) stays shared. Returns ``module``.

    For models whose constructor reads tensor values (torchvision's RegNet calls ``.tolist()``
    on a tensor to size its stages), which FakeTensorMode refuses; building them for real first
    costs their parameters' bytes once."""
    done: Dict[int, torch.Tensor] = {}
    for m in module.modules():
        for name, p in list(m._parameters.items()):
            if p is not None:
                if id(p) not in done:
                    done[id(p)] = torch.nn.Parameter(mode.from_tensor(p.detach()),
                                                     requires_grad=p.requires_grad)
                m._parameters[name] = done[id(p)]
        for name, b in list(m._buffers.items()):
            if b is not None:
                if id(b) not in done:
                    done[id(b)] = mode.from_tensor(b)
                m._buffers[name] = done[id(b)]
    return module

# ---------------------------------------------------------------- fallback counting

_FALLBACKS: Optional[Dict[str, int]] = None


@contextlib.contextmanager
def count_fallbacks() -> Iterator[Dict[str, int]]:
    """Within the block, every operator that FakeTensorMode runs through its real-kernel
    fallback (no meta kernel) is counted in the yielded dict ``{operator: calls}``."""
    global _FALLBACKS
    original = _ft.run_fallback_kernel
    counts: Dict[str, int] = {}

    def counting(fake_mode, func, args, kwargs, exc):
        counts[str(func)] = counts.get(str(func), 0) + 1
        return original(fake_mode, func, args, kwargs, exc)

    _ft.run_fallback_kernel = counting
    try:
        yield counts
    finally:
        _ft.run_fallback_kernel = original


# ---------------------------------------------------------------- meta kernels

_REGISTERED = False
_LIB = None


def _empty_like_shape(ref: torch.Tensor, shape, dtype=None) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=dtype or ref.dtype, device=ref.device)


def _meta_convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
                               dilation, transposed, output_padding, groups, output_mask):
    gi = _empty_like_shape(input, input.shape) if output_mask[0] else None
    gw = _empty_like_shape(weight, weight.shape) if output_mask[1] else None
    gb = None
    if output_mask[2]:
        n = bias_sizes[0] if bias_sizes else grad_output.shape[1]
        gb = _empty_like_shape(grad_output, (n,))
    return gi, gw, gb


def _meta_max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
                                           dilation, ceil_mode, indices):
    return _empty_like_shape(self, self.shape)


def _meta_adaptive_avg_pool2d_backward(grad_output, self):
    return _empty_like_shape(self, self.shape)


def _meta_avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override):
    return _empty_like_shape(self, self.shape)


def _meta_native_batch_norm_backward(grad_out, input, weight, running_mean, running_var,
                                     save_mean, save_invstd, train, eps, output_mask):
    c = input.shape[1]
    gi = _empty_like_shape(input, input.shape) if output_mask[0] else None
    gw = _empty_like_shape(input, (c,)) if output_mask[1] else None
    gb = _empty_like_shape(input, (c,)) if output_mask[2] else None
    return gi, gw, gb


def _meta_embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
                                   scale_grad_by_freq):
    return _empty_like_shape(grad_output, (num_weights, grad_output.shape[-1]))


def _meta_native_dropout_backward(grad_output, mask, scale):
    return _empty_like_shape(grad_output, grad_output.shape)


def _meta_hardswish_backward(grad_output, self):
    return _empty_like_shape(self, self.shape)


def _meta_hardsigmoid_backward(grad_output, self):
    return _empty_like_shape(self, self.shape)


def _meta_silu_backward(grad_output, self):
    return _empty_like_shape(self, self.shape)


def _meta_gelu_backward(grad_output, self, approximate="none"):
    return _empty_like_shape(self, self.shape)


def _meta_threshold_backward(grad_output, self, threshold):
    return _empty_like_shape(self, self.shape)


def _meta_softmax_backward_data(grad_output, output, dim, input_dtype):
    return _empty_like_shape(output, output.shape, dtype=input_dtype)


def _meta_native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight,
                                     bias, output_mask):
    gi = _empty_like_shape(input, input.shape) if output_mask[0] else None
    gw = _empty_like_shape(weight, weight.shape) if output_mask[1] and weight is not None \
        else None
    gb = _empty_like_shape(bias, bias.shape) if output_mask[2] and bias is not None else None
    return gi, gw, gb


def _meta_fused_update_(*args, **kwargs):
    """The fused optimizer kernels write their arguments in place and return nothing: on meta
    tensors there is nothing to compute."""
    return None


# operator name -> (meta kernel, probe building meta arguments for a check that PyTorch has
# no meta kernel of its own)
_KERNELS = {
    "_fused_sgd_": _meta_fused_update_,
    "_fused_sgd_.tensor_lr": _meta_fused_update_,
    "_fused_adagrad_": _meta_fused_update_,
    "_fused_adagrad_.tensor_lr": _meta_fused_update_,
    "_fused_adam_.tensor_lr": _meta_fused_update_,
    "_fused_adamw_.tensor_lr": _meta_fused_update_,
    "convolution_backward": _meta_convolution_backward,
    "max_pool2d_with_indices_backward": _meta_max_pool2d_with_indices_backward,
    "_adaptive_avg_pool2d_backward": _meta_adaptive_avg_pool2d_backward,
    "avg_pool2d_backward": _meta_avg_pool2d_backward,
    "native_batch_norm_backward": _meta_native_batch_norm_backward,
    "embedding_dense_backward": _meta_embedding_dense_backward,
    "native_dropout_backward": _meta_native_dropout_backward,
    "hardswish_backward": _meta_hardswish_backward,
    "hardsigmoid_backward": _meta_hardsigmoid_backward,
    "silu_backward": _meta_silu_backward,
    "gelu_backward": _meta_gelu_backward,
    "threshold_backward": _meta_threshold_backward,
    "_softmax_backward_data": _meta_softmax_backward_data,
    "native_layer_norm_backward": _meta_native_layer_norm_backward,
}


def _has_meta_kernel(name: str) -> bool:
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None or (overload and overload not in packet.overloads()):
        return True  # not in this PyTorch: nothing to register
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta")


def register_meta_kernels() -> Dict[str, bool]:
    """Register the meta kernels of :data:`_KERNELS` for the operators that have none in
    this PyTorch build (idempotent). Returns ``{operator: registered here}``."""
    global _REGISTERED, _LIB
    done = {}
    if _REGISTERED:
        return {k: False for k in _KERNELS}
    _LIB = torch.library.Library("aten", "IMPL", "Meta")
    for name, fn in _KERNELS.items():
        if _has_meta_kernel(name):
            done[name] = False
            continue
        _LIB.impl(name, fn)
        done[name] = True
    _REGISTERED = True
    return done
