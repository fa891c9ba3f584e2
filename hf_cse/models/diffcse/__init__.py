"""DiffCSE (Chuang et al., NAACL 2022): SimCSE's contrastive views plus replaced-token detection conditioned on the
sentence vector (:mod:`.model`; its settings: :mod:`.config`), the edits of a sentence and their collator
(:mod:`.edits`), and the frozen generators that fill the edits (:mod:`.generators`)."""

from .config import DiffCSEConfig
from .edits import EDIT_OPERATIONS, DiffCSECollator, delete_tokens, insert_masks
from .generators import (
    PAPER_GENERATORS,
    UNIGRAM,
    GeneratorError,
    MaskedLMGenerator,
    UnigramGenerator,
    load_generator,
)
from .model import DiffCSEModel, RTDOutput

__all__ = ["EDIT_OPERATIONS", "PAPER_GENERATORS", "UNIGRAM", "DiffCSECollator", "DiffCSEConfig", "DiffCSEModel",
           "GeneratorError", "MaskedLMGenerator", "RTDOutput", "UnigramGenerator", "delete_tokens", "insert_masks",
           "load_generator"]
