"""Transformer models that torchvision lacks, in plain PyTorch, with their standard
configurations: BERT-base with a masked-LM head and the four GPT-2 sizes with a causal-LM head
tied to the token embedding.

Every zoo model maps a batch of token ids ``(B, S)`` int64 to logits ``(B, S, vocab)``; its
training loss is :func:`lm_loss` (cross-entropy over all positions, ``-100`` labels ignored).
:func:`build` makes one by name, :func:`example_batch` a deterministic random batch.

``build`` only calls ordinary ``nn.Module`` constructors, so it also works inside a
``FakeTensorMode`` (no memory is allocated for the parameters; see ``roam.capture``).
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from .bert import Bert, BertConfig
from .gpt2 import GPT2, GPT2Config


@dataclass(frozen=True)
class ZooEntry:
    """A zoo model: its family (``"bert"`` or ``"gpt2"``), configuration, default sequence
    length and a one-line description."""
    family: str
    config: object
    seq_len: int
    description: str


MODELS: Dict[str, ZooEntry] = {
    "bert-base": ZooEntry("bert", BertConfig(), 128,
                          "BERT-base: 12 layers, hidden 768, 12 heads, masked-LM head, seq 128"),
    "gpt2": ZooEntry("gpt2", GPT2Config(n_layer=12, n_head=12, n_embd=768), 1024,
                     "GPT-2 small (124M): 12 layers, 12 heads, width 768, seq 1024"),
    "gpt2-medium": ZooEntry("gpt2", GPT2Config(n_layer=24, n_head=16, n_embd=1024), 1024,
                            "GPT-2 medium (355M): 24 layers, 16 heads, width 1024, seq 1024"),
    "gpt2-large": ZooEntry("gpt2", GPT2Config(n_layer=36, n_head=20, n_embd=1280), 1024,
                           "GPT-2 large (774M): 36 layers, 20 heads, width 1280, seq 1024"),
    "gpt2-xl": ZooEntry("gpt2", GPT2Config(n_layer=48, n_head=25, n_embd=1600), 1024,
                        "GPT-2 XL (1558M): 48 layers, 25 heads, width 1600, seq 1024"),
}


def model_names() -> List[str]:
    """Sorted names of the zoo models."""
    return sorted(MODELS)


def build(name: str, config: Optional[object] = None) -> torch.nn.Module:
    """A freshly initialised zoo model (``config`` overrides the preset's, e.g. a tiny
    ``GPT2Config`` in tests). Raises KeyError for an unknown name."""
    entry = MODELS[name]
    cfg = config if config is not None else entry.config
    return Bert(cfg) if entry.family == "bert" else GPT2(cfg)


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``logits`` (B, S, V) against ``labels`` (B, S) (``-100``: ignored),
    averaged over the counted positions."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100)


def example_batch(name: str, batch_size: int, seq_len: Optional[int] = None,
                  generator: Optional[torch.Generator] = None,
                  config: Optional[object] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, labels)``, both (B, S) int64, random but deterministic for a given
    generator.

    GPT-2 (causal LM): ``labels`` are the next tokens (the data pipeline shifts them, as in
    nanoGPT, so the loss needs no shifted copy of the logits). BERT (masked LM): 15% of the
    positions are masked (their input replaced by ``[MASK]`` = 103) and carry the original
    token as label; every other label is ``-100``.
    """
    entry = MODELS[name]
    cfg = config if config is not None else entry.config
    s = seq_len or entry.seq_len
    g = generator
    if entry.family == "gpt2":
        tokens = torch.randint(0, cfg.vocab_size, (batch_size, s + 1), generator=g)
        return tokens[:, :-1].clone(), tokens[:, 1:].clone()
    ids = torch.randint(1000, cfg.vocab_size, (batch_size, s), generator=g)
    masked = torch.rand(batch_size, s, generator=g) < 0.15
    masked[:, 0] = True  # at least one counted position per sequence
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    ids = torch.where(masked, torch.full_like(ids, min(103, cfg.vocab_size - 1)), ids)
    return ids, labels


__all__ = ["Bert", "BertConfig", "GPT2", "GPT2Config", "MODELS", "ZooEntry", "build",
           "example_batch", "lm_loss", "model_names"]
