"""PromptBERT (Jiang et al., EMNLP 2022): template views, [MASK] representation and template denoising
(:mod:`.model`), the templates at the token level (:mod:`.templates`)."""

from .model import BERT_TEMPLATES, PROMPTBERT, ROBERTA_TEMPLATES, PromptBERTConfig, PromptBERTModel

__all__ = ["BERT_TEMPLATES", "PROMPTBERT", "PromptBERTConfig", "PromptBERTModel", "ROBERTA_TEMPLATES"]
