"""BERT (Devlin et al. 2019) for masked-language-model training, in plain PyTorch:
word + position + token-type embeddings with LayerNorm, post-LayerNorm encoder layers
(multi-head self-attention, GELU feed-forward), and the masked-LM head (dense, GELU,
LayerNorm, decoder tied to the word embedding plus its own bias). Dropout 0.1 everywhere, as
in the released configuration; no pooler (``BertForMaskedLM`` has none). Layer names follow
Hugging Face's ``BertForMaskedLM``. All positions attend to all positions (no padding)."""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        if cfg.hidden_size % cfg.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        self.n_head = cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        b, s, c = x.shape
        d = c // self.n_head

        def heads(t):
            return t.view(b, s, self.n_head, d).transpose(1, 2)  # (B, H, S, D)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        probs = self.dropout(F.softmax(scores, dim=-1))
        return (probs @ v).transpose(1, 2).contiguous().view(b, s, c)


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        h = cfg.hidden_size
        self.attention = BertSelfAttention(cfg)
        self.attention_output = nn.Linear(h, h)
        self.attention_dropout = nn.Dropout(cfg.dropout)
        self.attention_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.intermediate = nn.Linear(h, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, h)
        self.output_dropout = nn.Dropout(cfg.dropout)
        self.output_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)

    def forward(self, x):
        a = self.attention_dropout(self.attention_output(self.attention(x)))
        x = self.attention_norm(a + x)
        y = self.output_dropout(self.output(F.gelu(self.intermediate(x))))
        return self.output_norm(y + x)


class Bert(nn.Module):
    """``forward(input_ids (B, S) int64) -> MLM logits (B, S, vocab_size)``."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        h = cfg.hidden_size
        self.config = cfg
        self.word_embeddings = nn.Embedding(cfg.vocab_size, h)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, h)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, h)
        self.embeddings_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.embeddings_dropout = nn.Dropout(cfg.dropout)
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.mlm_transform = nn.Linear(h, h)
        self.mlm_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.mlm_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        b, s = input_ids.shape
        if s > self.config.max_position_embeddings:
            raise ValueError(f"sequence length {s} > {self.config.max_position_embeddings}")
        pos = torch.arange(s, device=input_ids.device)
        token_type = torch.zeros_like(input_ids)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(pos)
             + self.token_type_embeddings(token_type))
        x = self.embeddings_dropout(self.embeddings_norm(x))
        for layer in self.layer:
            x = layer(x)
        x = self.mlm_norm(F.gelu(self.mlm_transform(x)))
        return F.linear(x, self.word_embeddings.weight, self.mlm_bias)  # tied decoder
