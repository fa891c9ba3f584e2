"""Checking an export before it is committed: the written folder is reloaded with ``SentenceTransformer`` and its
vectors compared with the hf_cse model's own test embedding."""

from __future__ import annotations

from pathlib import Path

import torch

from ..data import with_prompt
from ..models.modes import eval_mode
from ..models.pooling import POOLER_OF_ST_MODE
from .errors import ExportError

# sentences the export is checked on (different lengths, so padding is exercised)
PROBE_SENTENCES = (
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog near the river bank on a sunny afternoon.",
    "Two dogs run",  # no final punctuation: a method that ends test sentences with one (PromptBERT) is checked
    "Contrastive learning pulls two dropout views of the same sentence together.",
)


def reference_embeddings(model, tokenizer, sentences, pooling_mode: str, with_projector: bool, max_length: int):
    """What the export must reproduce: hf_cse's own test embedding (CPU float32)."""
    edit = model.test_text_edit()  # PromptBERT's period, which the export's own module adds too
    sentences = [edit(s) for s in sentences] if edit else list(sentences)
    texts = with_prompt(sentences, getattr(model.config, "prompt", None))
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    with eval_mode(model), torch.no_grad():
        emb = model.sentence_embedding(**inputs, pooler=POOLER_OF_ST_MODE[pooling_mode], projector=with_projector)
    return emb.float().cpu()


def verify_export(folder: Path, model, tokenizer, pooling_mode: str, with_projector: bool, max_length: int,
                  trust_remote_code: bool = False) -> None:
    """Reload the written folder with sentence-transformers and compare with the model's own embeddings
    (``trust_remote_code``: the folder ships a method's own modules, written by hf_cse)."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(folder), device="cpu", trust_remote_code=trust_remote_code)
    got = st.encode(list(PROBE_SENTENCES), convert_to_tensor=True, show_progress_bar=False).float().cpu()
    want = reference_embeddings(model, tokenizer, PROBE_SENTENCES, pooling_mode, with_projector, max_length)
    # and one sentence alone: a batch without padding, where a decoder's attention follows an is_causal flag
    alone = PROBE_SENTENCES[:1]
    got = torch.cat([got, st.encode(list(alone), convert_to_tensor=True, show_progress_bar=False).float().cpu()])
    want = torch.cat([want, reference_embeddings(model, tokenizer, alone, pooling_mode, with_projector, max_length)])
    if got.shape != want.shape:
        raise ExportError(f"export check failed: sentence-transformers gives shape {tuple(got.shape)}, the model "
                          f"{tuple(want.shape)}. This is a bug in hf_cse.export.")
    cos = torch.nn.functional.cosine_similarity(got, want, dim=-1).min().item()
    tol = 1e-4 if next(model.parameters()).dtype == torch.float32 else 2e-2
    norm_gap = ((got.norm(dim=-1) - want.norm(dim=-1)).abs() / want.norm(dim=-1)).max().item()
    if norm_gap > tol:
        raise ExportError(f"export check failed: sentence-transformers vectors differ in length from the model's "
                          f"(relative gap {norm_gap:.6f}; a Normalize module missing or extra). This is a bug in "
                          "hf_cse.export; nothing was written.")
    if cos < 1 - tol:
        raise ExportError(f"export check failed: sentence-transformers vectors differ from the model's (min cosine "
                          f"{cos:.6f}). This is a bug in hf_cse.export; nothing was written.")
