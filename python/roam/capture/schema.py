"""What an ATen operator's schema says of it, for the graph export
(:mod:`roam.capture.export`): which outputs alias which arguments, which arguments it writes
(declared, or hidden: :data:`HIDDEN_WRITES`), whether it draws from a random generator, and
why it cannot be recomputed (:func:`recompute_blocker`). Names are those of the schema
(``aten::name``); nothing here looks at tensor values."""

import re
from functools import lru_cache
from typing import List, Optional, Sequence, Set, Tuple

import torch
import torch.fx

from .collectives import WAIT_OPS
from .errors import CaptureError


# Operators whose result shares its argument's storage although the schema declares a fresh
# result. aten::_unsafe_view is "view without autograd view tracking", applied by composite
# ops (reshape of a fresh temporary) to an input that is never used again; for memory it is an
# alias. aten::unsafe_split / unsafe_chunk / unsafe_split_with_sizes (nn.LSTM's gate split)
# return views of their argument without view tracking, likewise. Every other undeclared
# storage sharing raises CaptureError.
UNDECLARED_ALIAS_OK = frozenset({"aten::_unsafe_view", "aten::unsafe_split",
                                 "aten::unsafe_chunk", "aten::unsafe_split_with_sizes"}) \
    | WAIT_OPS  # a wait returns its argument once the collective writing it is done

# Arguments that an operator writes although neither its schema annotates the write nor the
# tensor's version counter changes (the CPU kernel writes through a raw pointer); fake tensors
# cannot reveal them by content, so they are listed: operator -> (written arguments, the
# boolean argument that must be true for the write to happen, or None).
HIDDEN_WRITES = {
    "aten::native_batch_norm": (("running_mean", "running_var"), "training"),
    "aten::cudnn_batch_norm": (("running_mean", "running_var"), "training"),
    "aten::miopen_batch_norm": (("running_mean", "running_var"), "training"),
    "aten::rrelu_with_noise": (("noise",), "training"),
}


# Random operators (schema names without the ``aten::`` prefix and without a trailing ``_``,
# so that the in-place and ``out=`` overloads are covered too). The schema tells randomness
# only where it has a ``Generator`` argument or PyTorch tagged the operator
# ``nondeterministic_seeded``; not every random operator carries either, so the list is the
# primary source and the schema a second one.
RANDOM_OPS = frozenset({
    "dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout", "native_dropout",
    "_fused_dropout", "fused_dropout", "bernoulli", "rand", "rand_like", "randn", "randn_like",
    "randint", "randint_like", "normal", "uniform", "multinomial", "randperm", "random",
    "exponential", "geometric", "cauchy", "log_normal", "poisson", "binomial", "rrelu",
    "rrelu_with_noise", "_standard_gamma", "_sample_dirichlet", "_dirichlet_grad_random",
})

# Operators whose result is fresh memory with unspecified contents: running them again does
# not give the same bytes (their users fill the result in place).
UNINITIALIZED_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "_empty_affine_quantized", "_empty_per_channel_affine_quantized", "empty_quantized",
})


def _base_name(schema) -> str:
    """``aten::uniform_`` -> ``uniform``."""
    name = schema.name.split("::", 1)[-1]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def is_random_op(target) -> bool:
    """True for an operator that draws from a random generator: named in
    :data:`RANDOM_OPS`, taking a ``Generator`` argument, or tagged ``nondeterministic_seeded``
    (or ``nondeterministic_bitwise``) by PyTorch."""
    schema = target._schema
    if _base_name(schema) in RANDOM_OPS:
        return True
    if any("Generator" in str(a.type) for a in schema.arguments):
        return True
    tags = set(getattr(target, "tags", ()) or ())
    nd = {getattr(torch.Tag, n) for n in ("nondeterministic_seeded", "nondeterministic_bitwise")
          if hasattr(torch, "Tag") and hasattr(torch.Tag, n)}
    return bool(tags & nd)


def schema_mutates(schema) -> bool:
    """True when the schema says the operator writes an argument: ``is_mutable`` (some
    argument's alias info has a write, e.g. ``Tensor(a!) self`` of ``relu_`` or ``Tensor(a!)
    out`` of an ``out=`` overload)."""
    if getattr(schema, "is_mutable", False):
        return True
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


RECOMPUTE_BLOCKERS = ("collective", "random", "writes", "aliases_resident", "uninitialized")


def recompute_blocker(target, written: Sequence[str], output_roots_resident: Sequence[bool],
                      explicit_generator: bool = False) -> Optional[str]:
    """Why the op cannot be recomputed, or None when it is ``recomputable``.

    GRAPH_FORMAT.md: an op is recomputable when running it again later on the same input
    values gives bit-identical outputs and changes nothing else; a random operator only where
    the executor restores the generator state it drew from. The rules, in order (the first
    that applies is returned):

    * ``"random"``: :func:`is_random_op` (dropout, ``bernoulli``, ``rand*``, ...) that writes
      (``bernoulli_``, ``uniform_``: in place, random first) or is given a generator of its
      own (``explicit_generator``). An out-of-place random op that draws from the default
      CPU generator is recomputable: roam's executor saves the generator state before its
      first run and replays it for every recomputation (as ``torch.utils.checkpoint`` does
      with ``preserve_rng_state``; :mod:`roam.executor.program`). On the CPU, PyTorch runs
      ``F.dropout`` as ``empty_like``, ``bernoulli_`` (random, in place), ``div_`` and
      ``mul``; the capture draws the mask out of place
      (:func:`roam.capture.trace.functional_dropout_masks`), so the mask is recomputable.
    * ``"writes"``: the op writes an argument's storage. From the schema
      (:func:`schema_mutates`: ``is_mutable`` / an argument alias annotated with a write --
      every ``_``-suffixed in-place overload and every ``out=`` overload), from the
      tensors' version counters and the hidden writes of :data:`HIDDEN_WRITES` (e.g.
      ``native_batch_norm`` updating the running statistics in training mode), i.e.
      ``written`` non-empty. This covers the optimizer update (``add_``, ``mul_``,
      ``addcdiv_``, ... on parameters and state) and BatchNorm's running-stat updates. A
      name ending in a single ``_`` is also treated as a write even if the schema were to say
      none.
    * ``"aliases_resident"``: an output is an alias whose root is a resident tensor
      (parameter, buffer, optimizer state, constant, input), e.g. ``t`` of a weight or a
      ``view`` of the input batch: ``output_roots_resident`` has a True.
    * ``"uninitialized"``: :data:`UNINITIALIZED_OPS` (``empty`` and relatives): the
      contents of the result are unspecified.

    Everything else -- pure operators and views of intermediate tensors -- is recomputable.
    Whether the inputs still hold the same values when a planner recomputes is the planner's
    concern: the ``after`` edges order every overwrite of a storage after its readers.
    """
    schema = target._schema
    if schema.name.startswith("_c10d_functional::"):
        return "collective"
    inplace_name = schema.name.endswith("_") and not schema.name.endswith("__")
    writes = bool(written) or schema_mutates(schema) or inplace_name
    if is_random_op(target) and (writes or explicit_generator):
        return "random"
    if writes:
        return "writes"
    if any(output_roots_resident):
        return "aliases_resident"
    if _base_name(schema) in UNINITIALIZED_OPS:
        return "uninitialized"
    return None


def passes_generator(schema, node: torch.fx.Node) -> bool:
    """True when ``node`` gives its operator a ``Generator`` argument that is not None."""
    for j, a in enumerate(schema.arguments):
        if "Generator" not in str(a.type):
            continue
        v = node.args[j] if j < len(node.args) else node.kwargs.get(a.name)
        if v is not None:
            return True
    return False


# ---------------------------------------------------------------- schema alias sets

@lru_cache(maxsize=None)
def _torchgen_return_sets(schema_str: str) -> Optional[Tuple[Tuple[str, ...], ...]]:
    """Alias sets of the returns parsed by torchgen (the C++ binding drops the element alias
    of list returns such as ``Tensor(a)[]``)."""
    try:
        from torchgen.model import FunctionSchema
        fs = FunctionSchema.parse(schema_str.split("::", 1)[-1])
        return tuple(tuple(r.annotation.alias_set) if r.annotation else () for r in fs.returns)
    except Exception:  # pragma: no cover - fallback when torchgen is absent
        rets = schema_str.rsplit("->", 1)[-1]
        return tuple(tuple(m.group(1).replace("!", "").split("|")) if m else ()
                     for m in (re.search(r"Tensor\(([^)]*)\)", r) for r in rets.split(",")))


def return_alias_sets(schema) -> List[Set[str]]:
    """For each return of ``schema`` (a ``torch._C.FunctionSchema``) the set of alias names
    (``{"a"}`` for ``Tensor(a)``), empty when the return is fresh memory."""
    out = []
    parsed = None
    for i, r in enumerate(schema.returns):
        ai = r.alias_info
        s = set(ai.before_set) if ai is not None else set()
        if ai is not None and not s and isinstance(r.type, torch.ListType):
            if parsed is None:
                parsed = _torchgen_return_sets(str(schema))
            s = set(parsed[i]) if parsed and i < len(parsed) else set()
        s.discard("*")
        out.append(s)
    return out


def argument_alias_sets(schema) -> List[Tuple[Set[str], bool]]:
    """For each argument: (alias names before the call, is_write)."""
    out = []
    for a in schema.arguments:
        ai = a.alias_info
        if ai is None:
            out.append((set(), False))
        else:
            s = set(ai.before_set)
            s.discard("*")
            out.append((s, bool(ai.is_write)))
    return out


def _bind(schema, node: torch.fx.Node, args, kwargs):
    """Pair each schema argument with (node-side value, real value)."""
    nargs, nkwargs = node.args, node.kwargs
    if len(args) > len(schema.arguments):
        raise CaptureError(f"{node.format_node()}: more positional arguments than the schema "
                           f"{schema} has")
    known = {a.name for a in schema.arguments}
    extra = set(kwargs) - known
    if extra:
        raise CaptureError(f"{node.format_node()}: keyword arguments {sorted(extra)} not in "
                           f"schema {schema}")
    bound = []
    for j, a in enumerate(schema.arguments):
        if j < len(args):
            bound.append((a, nargs[j], args[j]))
        elif a.name in kwargs:
            bound.append((a, nkwargs[a.name], kwargs[a.name]))
        else:
            bound.append((a, None, None))  # default: never a tensor
    return bound
