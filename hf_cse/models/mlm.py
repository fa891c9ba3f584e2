"""SimCSE's auxiliary masked-LM objective (Gao et al., EMNLP 2021, Appendix, "MLM auxiliary objective": lambda =
0.1), as the authors' code computes it (``simcse/models.py`` ``cl_forward``): the two-view batch (or the pair /
triplet rows) is masked once more (BERT's 80/10/10 recipe, 15 % of the tokens: :func:`hf_cse.masking.mask_tokens`),
encoded in a second forward with the same attention mask, and the pretrained masked-LM head (BERT's
``cls.predictions``, RoBERTa's ``lm_head``) predicts the masked tokens; ``mlm_weight * CE`` is added to the
contrastive loss. The head is a separate copy (not tied to the encoder's input embeddings), as in the authors'
code, which loads ``BertForPreTraining``'s ``cls.predictions`` into its own ``lm_head``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForMaskedLM
from transformers.utils import logging as hf_logging

from ..errors import CSEError
from ..losses.inputs import compute_dtype
from ..seams import tied_weights_keys


class NoMaskedLMHeadError(CSEError):
    """The encoder (architecture or checkpoint) has no pretrained masked-LM head for ``do_mlm``."""


def _head_of(mlm_model: nn.Module, model_type: str) -> tuple[str, nn.Module]:
    """The one submodule of a ``*ForMaskedLM`` model besides its base model (BERT's ``cls``, RoBERTa's
    ``lm_head``), with each parameter tied inside it kept once: BERT's and RoBERTa's decoder bias *is* their head's
    ``bias`` (tied by the MaskedLM model); the forward reads it through the decoder, which keeps it."""
    base = getattr(mlm_model, "base_model_prefix", "")
    heads = [(name, m) for name, m in mlm_model.named_children() if name != base]
    if len(heads) != 1:
        raise NoMaskedLMHeadError(
            f"do_mlm: the masked-LM head of a {model_type!r} encoder is not one module ({[n for n, _ in heads]}); "
            "SimCSE's MLM objective is supported for BERT- and RoBERTa-like encoders. Drop do_mlm.")
    name, head = heads[0]
    declared = tied_weights_keys(mlm_model)
    inside = name + "."
    for target, source in (declared.items() if isinstance(declared, dict) else ()):
        if target.startswith(inside) and source.startswith(inside):
            owner, _, attr = source[len(inside):].rpartition(".")
            module = head.get_submodule(owner)
            kept, dropped = head.get_parameter(target[len(inside):]), module._parameters.pop(attr, None)
            if dropped is not None and dropped is not kept:  # not tied yet (e.g. built under from_pretrained)
                with torch.no_grad():
                    kept.copy_(dropped)
    return name, head


def check_mlm_architecture(encoder_config) -> None:
    """The encoder's architecture has a masked-LM model in transformers (checked before any weights are read)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    if encoder_config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        raise NoMaskedLMHeadError(f"do_mlm: a {encoder_config.model_type!r} encoder has no masked-LM head in "
                                  "transformers (a causal or encoder-only architecture). Drop do_mlm.")


def build_mlm_head(encoder_config) -> nn.Module:
    """A freshly initialised masked-LM head of the encoder's architecture (weights come from a checkpoint). Its
    decoder weight is not tied to the input embeddings (the authors' separate ``lm_head``)."""
    check_mlm_architecture(encoder_config)
    return _head_of(AutoModelForMaskedLM.from_config(encoder_config), encoder_config.model_type)[1]


def load_mlm_head(name_or_path: str, encoder_config, **kwargs) -> nn.Module:
    """The pretrained masked-LM head of the checkpoint ``name_or_path``; :class:`NoMaskedLMHeadError` in one line
    when the checkpoint holds no head weights (a bare encoder, e.g. a sentence-transformers model)."""
    check_mlm_architecture(encoder_config)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the missing keys are reported below, in our terms
    try:
        mlm_model, info = AutoModelForMaskedLM.from_pretrained(name_or_path, config=encoder_config,
                                                               dtype=torch.float32, output_loading_info=True,
                                                               **kwargs)
    finally:
        hf_logging.set_verbosity(verbosity)
    name, head = _head_of(mlm_model, encoder_config.model_type)
    tied = {k for k in info.get("missing_keys", ()) if k.endswith("decoder.weight")}  # tied to the embeddings
    missing = sorted(k for k in info.get("missing_keys", ()) if k.startswith(name + ".") and k not in tied)
    if missing:
        raise NoMaskedLMHeadError(
            f"do_mlm: {name_or_path} has no pretrained masked-LM head ({len(missing)} weight(s) missing, e.g. "
            f"{missing[0]}); SimCSE's MLM objective starts from the checkpoint's head. Use a checkpoint saved with "
            "its head (e.g. bert-base-uncased, roberta-base) or drop do_mlm.")
    return head


def masked_lm_loss(head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the head's predictions at the masked positions (labels != -100), in at least fp32;
    0 when no token was masked (the authors' mean would be NaN there)."""
    logits = head(hidden)
    flat = labels.reshape(-1)
    logits = logits.reshape(flat.shape[0], -1).to(compute_dtype(logits))
    total = F.cross_entropy(logits, flat, ignore_index=-100, reduction="sum")
    return total / flat.ne(-100).sum().clamp(min=1)
