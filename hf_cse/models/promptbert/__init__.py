"""PromptBERT (Jiang et al., EMNLP 2022): template views, [MASK] representation and template denoising
(:mod:`.model`; its settings: :mod:`.config`), the templates at the token level (:mod:`.templates`)."""

from .config import BERT_TEMPLATES, ROBERTA_TEMPLATES, PromptBERTConfig
from .model import PROMPTBERT, PromptBERTModel

__all__ = ["BERT_TEMPLATES", "PROMPTBERT", "PromptBERTConfig", "PromptBERTModel", "ROBERTA_TEMPLATES"]
