"""all-MiniLM-L6-v2 in plain torch: the packaged model's BERT encoder and mean pooling, no framework.

Importing sentence-transformers (which imports transformers, scikit-learn, scipy...) cost 5-9 s
of a 20 s budget for `llmwatch score` on 1,000 samples, more than the model forward of a few
hundred samples. The model itself is six standard BERT layers: this module reads the same
`model.safetensors` and `tokenizer.json` with `safetensors` and `tokenizers` (both already
installed with transformers) and computes the same vectors (tests/integration/test_embeddings.py compares
them with sentence-transformers' on mixed texts: cosine >= 0.99999).

`load` returns None for any model directory that is not exactly this layout (BERT, absolute
positions, mean pooling only); the caller then falls back to sentence-transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MiniLM", "load"]

# sentence_bert_config.json's max_seq_length when absent; the model was trained at 256.
_DEFAULT_MAX_TOKENS = 256


class _Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int, eps: float) -> None:
        super().__init__()
        self.heads = heads
        # Query, key and value as one matrix: one GEMM instead of three thin ones.
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.up = nn.Linear(hidden, intermediate)
        self.down = nn.Linear(intermediate, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.attn_norm(self.attn_out(attended.transpose(1, 2).reshape(b, t, h)) + x)
        return self.out_norm(self.down(F.gelu(self.up(x))) + x)


class MiniLM(nn.Module):
    """BERT encoder + attention-masked mean pooling; `embed(texts)` -> (n, hidden) float32, not normalised."""

    def __init__(self, config: dict[str, Any], tokenizer: Any, max_tokens: int) -> None:
        super().__init__()
        hidden = int(config["hidden_size"])
        eps = float(config["layer_norm_eps"])
        self.dimension = hidden
        self.word = nn.Embedding(int(config["vocab_size"]), hidden)
        self.position = nn.Embedding(int(config["max_position_embeddings"]), hidden)
        self.token_type = nn.Embedding(int(config["type_vocab_size"]), hidden)
        self.embed_norm = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(
            _Layer(hidden, int(config["num_attention_heads"]), int(config["intermediate_size"]), eps)
            for _ in range(int(config["num_hidden_layers"]))
        )
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens

    def tokenize(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        # sentence-transformers strips each text before tokenising; so do we, for the same vectors.
        encoded = self.tokenizer.encode_batch([text.strip() for text in texts])
        ids = torch.tensor([e.ids for e in encoded], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in encoded], dtype=torch.long)
        return ids, mask

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.embed_norm(self.word(ids) + self.position(positions) + self.token_type(torch.zeros_like(ids)))
        keep = mask.bool()
        # Padding keys get no attention weight (boolean mask: True = attend).
        attn_mask = keep[:, None, None, :]
        for layer in self.layers:
            x = layer(x, attn_mask)
        weights = keep.unsqueeze(-1).to(x.dtype)
        return (x * weights).sum(1) / weights.sum(1).clamp(min=1e-9)

    def embed(self, texts: list[str]) -> torch.Tensor:
        with torch.inference_mode():
            return self(*self.tokenize(texts))


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def load(path: str) -> MiniLM | None:
    """The model under `path`, or None when its layout is not the one this module computes."""
    root = Path(path)
    try:
        config = _read_json(root / "config.json")
        modules = _read_json(root / "modules.json")
        pooling = _read_json(root / "1_Pooling" / "config.json")
        bert_config = (
            _read_json(root / "sentence_bert_config.json") if (root / "sentence_bert_config.json").is_file() else {}
        )
    except (OSError, ValueError):
        return None
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    mean_only = pooling.get("pooling_mode_mean_tokens") and not any(
        pooling.get(k)
        for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")
    )
    if (
        config.get("model_type") != "bert"
        or config.get("hidden_act") != "gelu"
        or config.get("position_embedding_type", "absolute") != "absolute"
        or kinds[:2] != ["Transformer", "Pooling"]
        or any(kind != "Normalize" for kind in kinds[2:])
        or not mean_only
        or bert_config.get("do_lower_case")
        or not (root / "model.safetensors").is_file()
    ):
        return None

    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    max_tokens = min(
        int(bert_config.get("max_seq_length") or _DEFAULT_MAX_TOKENS), int(config["max_position_embeddings"])
    )
    tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=max_tokens)
    # Pad to the longest text of the call (tokenizer.json itself pads every text to 128).
    tokenizer.enable_padding(pad_id=int(config.get("pad_token_id", 0)), pad_token="[PAD]")
    model = MiniLM(config, tokenizer, max_tokens)
    try:
        model.load_state_dict(_renamed(load_file(str(root / "model.safetensors")), len(model.layers)))
    except (KeyError, RuntimeError):  # other weight names or shapes: not this layout
        return None
    return model.eval()


def _renamed(weights: dict[str, torch.Tensor], layers: int) -> dict[str, torch.Tensor]:
    """transformers' BertModel weight names -> this module's (query, key and value concatenated)."""
    state: dict[str, torch.Tensor] = {
        "word.weight": weights["embeddings.word_embeddings.weight"],
        "position.weight": weights["embeddings.position_embeddings.weight"],
        "token_type.weight": weights["embeddings.token_type_embeddings.weight"],
        "embed_norm.weight": weights["embeddings.LayerNorm.weight"],
        "embed_norm.bias": weights["embeddings.LayerNorm.bias"],
    }
    for i in range(layers):
        src = f"encoder.layer.{i}."
        dst = f"layers.{i}."
        for part in ("weight", "bias"):
            state[dst + "qkv." + part] = torch.cat(
                [weights[f"{src}attention.self.{name}.{part}"] for name in ("query", "key", "value")]
            )
            state[dst + "attn_out." + part] = weights[f"{src}attention.output.dense.{part}"]
            state[dst + "attn_norm." + part] = weights[f"{src}attention.output.LayerNorm.{part}"]
            state[dst + "up." + part] = weights[f"{src}intermediate.dense.{part}"]
            state[dst + "down." + part] = weights[f"{src}output.dense.{part}"]
            state[dst + "out_norm." + part] = weights[f"{src}output.LayerNorm.{part}"]
    return state
