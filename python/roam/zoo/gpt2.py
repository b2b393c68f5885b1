"""GPT-2 (Radford et al. 2019) in plain PyTorch: learned token and position embeddings,
pre-LayerNorm transformer blocks with causal multi-head self-attention and a GELU (tanh) MLP,
a final LayerNorm, and an LM head tied to the token embedding (no separate weight). Dropout
0.1 on embeddings, attention probabilities and residual branches, as in the released
configuration. Layer names follow Hugging Face's ``GPT2LMHeadModel`` (``wte``, ``wpe``,
``h.N.attn.c_attn``, ...), with ``nn.Linear`` in place of its transposed ``Conv1D`` (same
parameters and memory)."""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPT2Config:
    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    dropout: float = 0.1
    layer_norm_epsilon: float = 1e-5


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError("n_embd must be a multiple of n_head")
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
        b, s, c = x.shape
        d = c // self.n_head
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, s, self.n_head, d).transpose(1, 2)  # (B, H, S, D)
        k = k.view(b, s, self.n_head, d).transpose(1, 2)
        v = v.view(b, s, self.n_head, d).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = att.masked_fill(future[:s, :s], float("-inf"))  # causal mask
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg)

    def forward(self, x, future):
        x = x + self.attn(self.ln_1(x), future)
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """``forward(input_ids (B, S) int64) -> logits (B, S, vocab_size)``, S <= n_positions.

    The causal mask is one non-trainable boolean buffer ``future`` (n_positions x
    n_positions, True above the diagonal), shared by all blocks."""

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        future = torch.ones(cfg.n_positions, cfg.n_positions, dtype=torch.bool).triu(1)
        self.register_buffer("future", future, persistent=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        s = input_ids.shape[1]
        if s > self.config.n_positions:
            raise ValueError(f"sequence length {s} > n_positions {self.config.n_positions}")
        pos = torch.arange(s, device=input_ids.device)
        x = self.drop(self.wte(input_ids) + self.wpe(pos))
        for block in self.h:
            x = block(x, self.future)
        x = self.ln_f(x)
        return F.linear(x, self.wte.weight)  # LM head tied to the token embedding
