"""Models by name: every torchvision classification model and the zoo models
(:mod:`roam.zoo`: ``bert-base``, ``gpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl``), and
:func:`capture_named`, the capture behind ``python -m roam.capture``."""

import contextlib
from typing import Any, Callable, Dict, List, Optional

import torch

from .errors import UnknownModelError

OPTIMIZERS = ("adam", "adamw", "sgd")

# Small BERT configurations of roam.zoo's bert-base (roam.zoo.BertConfig fields), by name: one
# list of models for python -m roam.capture and python -m roam.run (see model_names()).
BERT_PRESETS: Dict[str, Dict[str, int]] = {
    "bert-tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2,
                      intermediate_size=512),
    "bert-mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                      intermediate_size=1024),
    "bert-small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8,
                       intermediate_size=2048),
}


def classification_model_names() -> List[str]:
    """Sorted names of the classification models of ``torchvision.models``."""
    import torchvision.models as tvm
    if hasattr(tvm, "list_models"):
        return sorted(tvm.list_models(module=tvm))
    return sorted(n for n, f in vars(tvm).items()  # pragma: no cover - torchvision < 0.14
                  if callable(f) and n.islower() and not n.startswith("_")
                  and n not in ("get_weight", "get_model", "get_model_weights", "list_models"))


def zoo_model_names() -> List[str]:
    """Sorted names of the :mod:`roam.zoo` models."""
    from .. import zoo
    return zoo.model_names()


def model_names() -> List[str]:
    """Every name :func:`capture_named` (``python -m roam.capture``) and ``python -m roam.run``
    accept: zoo models, the BERT presets (:data:`BERT_PRESETS`), then torchvision
    classification models."""
    return zoo_model_names() + sorted(BERT_PRESETS) + classification_model_names()


def build_model(name: str, num_classes: int = 1000) -> torch.nn.Module:
    """A freshly initialised (``weights=None``) torchvision classification model.

    Raises:
        UnknownModelError: ``name`` is not in :func:`classification_model_names`.
    """
    import torchvision.models as tvm
    valid = classification_model_names()
    if name not in valid:
        raise UnknownModelError(name, valid)
    if hasattr(tvm, "get_model"):
        return tvm.get_model(name, weights=None, num_classes=num_classes)
    return getattr(tvm, name)(weights=None, num_classes=num_classes)  # pragma: no cover


def make_optimizer(kind: str, params) -> torch.optim.Optimizer:
    """The benchmark optimizers (single-tensor implementations, PyTorch's default on CPU):
    ``adam`` = ``Adam()`` (lr 1e-3), ``adamw`` = ``AdamW()`` (lr 1e-3, weight decay 0.01),
    ``sgd`` = ``SGD(lr=0.01, momentum=0.9)``."""
    params = list(params)
    if kind == "adam":
        return torch.optim.Adam(params, foreach=False)
    if kind == "adamw":
        return torch.optim.AdamW(params, foreach=False)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=False)
    raise ValueError(f"unknown optimizer {kind!r}; valid: {', '.join(OPTIMIZERS)}")


# Input sizes some torchvision models need (image side in pixels).
FIXED_IMAGE_SIZE_PREFIXES = ("vit_",)  # position embeddings built for one size (224 here)
MIN_TRAINING_IMAGE_SIZE = {"inception_v3": 299}  # aux classifier: 17x17 maps at 299 px


def input_size_hint(name: str, batch_size: int, image_size: int, message: str) -> str:
    """The advice printed after a model failed to run a training step on its input: which
    ``--image-size`` (or batch size) it needs, from the model and the error message."""
    msg = message.lower()
    if name.startswith(FIXED_IMAGE_SIZE_PREFIXES) or "wrong image" in msg:
        return f"{name} takes only --image-size 224"
    if "more than 1 value per channel" in msg:
        return "BatchNorm in training needs more than one value per channel: a larger --batch-size"
    need = MIN_TRAINING_IMAGE_SIZE.get(name)
    if need is not None and image_size < need:
        return f"{name} in training needs about --image-size {need}"
    return "try a larger --image-size"


def capture_named(name: str, batch_size: int = 1, *, optimizer: str = "adam",
                  fake: bool = False, image_size: int = 224, num_classes: int = 1000,
                  seq_len: Optional[int] = None, zoo_config: Optional[object] = None,
                  seed: int = 0, cost: str = "none", cost_repeats: int = 3,
                  check_peak: bool = True, graph_name: Optional[str] = None,
                  progress: Optional[Callable[[str], None]] = None):
    """Capture a training step of the model ``name`` on a random (seeded) batch.

    torchvision models: images (B, 3, image_size, image_size), labels in [0, num_classes),
    cross-entropy. Zoo models: token ids (B, seq_len) and :func:`roam.zoo.lm_loss`
    (``seq_len`` defaults to the model's: 128 for BERT, 1024 for GPT-2). The optimizer
    (:func:`make_optimizer`) gets its state from one warm-up step on another batch. With
    ``fake`` the model is built inside a ``FakeTensorMode`` (no parameter memory) and the
    step traced on fake tensors. Graph name ``<name>-b<batch>-<optimizer>``.

    Raises:
        UnknownModelError: unknown model name; ValueError: sizes < 1 or unknown optimizer;
        CaptureError / GraphCheckError as :func:`roam.capture.capture_step`.
    """
    from .. import zoo
    from .api import capture
    from .fake import new_fake_mode
    if batch_size < 1 or image_size < 1 or num_classes < 1 or (seq_len is not None
                                                                and seq_len < 1):
        raise ValueError("batch_size, image_size, num_classes and seq_len must be >= 1")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
    zoo_name = "bert-base" if name in BERT_PRESETS else name  # a preset is a bert-base config
    if name in BERT_PRESETS and zoo_config is None:
        zoo_config = zoo.BertConfig(**BERT_PRESETS[name])
    is_zoo = zoo_name in zoo.MODELS
    if not is_zoo and name not in classification_model_names():
        raise UnknownModelError(name, model_names())
    say = progress or (lambda s: None)
    fm = new_fake_mode() if fake else None
    torch.manual_seed(seed)
    where = "fake tensors" if fake else "real tensors"
    meta: Dict[str, Any] = {}
    built_real: Optional[str] = None
    with (fm if fm is not None else contextlib.nullcontext()):
        if is_zoo:
            say(f"building roam.zoo {name} ({where})")
            model = zoo.build(zoo_name, zoo_config)
        else:
            say(f"building torchvision.{name} (num_classes={num_classes}, {where})")
            try:
                model = build_model(name, num_classes=num_classes)
            except Exception as e:  # noqa: BLE001  (the constructor's own error, reported)
                if fm is None:
                    raise
                # the constructor reads tensor values, which fake tensors do not have
                # (RegNet's .tolist(); torch 2.x's trunc_normal_ init of ViT calls .item())
                built_real = (str(e).strip().splitlines() or [type(e).__name__])[0]
    if fm is not None and built_real is not None:
        # The constructor reads tensor values, which fake tensors do not have: build it with
        # real tensors, then make its parameters and buffers fake.
        say(f"building torchvision.{name} with real tensors ({built_real}), then fake")
        from .fake import module_to_fake
        torch.manual_seed(seed)
        model = module_to_fake(build_model(name, num_classes=num_classes), fm)
    model.train()
    if is_zoo:
        entry = zoo.MODELS[zoo_name]
        cfg = zoo_config if zoo_config is not None else entry.config
        s = seq_len or entry.seq_len
        g = torch.Generator().manual_seed(seed)
        batch = zoo.example_batch(zoo_name, batch_size, s, generator=g, config=cfg)
        warmup = zoo.example_batch(zoo_name, batch_size, s, generator=g, config=cfg)
        loss_fn = zoo.lm_loss
        input_names = ["input_ids", "labels"]
        meta.update({"model": f"roam.zoo.{zoo_name}", "batch_size": batch_size, "seq_len": s,
                     "config": dict(vars(cfg)) if not hasattr(cfg, "__dataclass_fields__")
                     else {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}})
    else:
        import torchvision
        batch = (torch.randn(batch_size, 3, image_size, image_size),
                 torch.randint(0, num_classes, (batch_size,)))
        warmup = (torch.randn(batch_size, 3, image_size, image_size),
                  torch.randint(0, num_classes, (batch_size,)))
        from .state import cross_entropy_loss
        loss_fn = cross_entropy_loss
        input_names = ["data", "labels"]
        meta.update({"model": f"torchvision.{name}", "batch_size": batch_size,
                     "image_size": image_size, "num_classes": num_classes,
                     "torchvision": torchvision.__version__})
    opt = make_optimizer(optimizer, model.parameters())
    say(f"warm-up: one real {type(opt).__name__} step on another batch ({where}) to create "
        f"the optimizer state")
    return capture(model, opt, loss_fn, batch, fake=fake,
                   name=graph_name or f"{name}-b{batch_size}-{optimizer}",
                   input_names=input_names, cost=cost, cost_repeats=cost_repeats,
                   warmup_inputs=warmup, seed=seed, check_peak=check_peak, meta=meta,
                   progress=progress)


def capture_torchvision(model_name: str, batch_size: int = 1, image_size: int = 224,
                        num_classes: int = 1000, *, seed: int = 0, measure_cost: bool = False,
                        cost_repeats: int = 3, check_peak: bool = True,
                        progress: Optional[Callable[[str], None]] = None):
    """Capture a training step (cross-entropy, Adam) of a torchvision classification model
    on a random batch of shape (batch_size, 3, image_size, image_size) float32 with labels in
    [0, num_classes) (:func:`capture_named` in real mode). ``torch.manual_seed(seed)`` before
    building the model, so captures are deterministic. Graph name ``<model>-b<batch>-adam``.

    Raises:
        UnknownModelError: unknown model name; ValueError: batch_size or image_size < 1;
        CaptureError / GraphCheckError as :func:`roam.capture.capture_step`.
    """
    if model_name not in classification_model_names():
        raise UnknownModelError(model_name, classification_model_names())
    return capture_named(model_name, batch_size, optimizer="adam", fake=False,
                         image_size=image_size, num_classes=num_classes, seed=seed,
                         cost="measured" if measure_cost else "none",
                         cost_repeats=cost_repeats, check_peak=check_peak, progress=progress)
