"""ESimCSE (Wu et al., COLING 2022): word repetition (:mod:`.repetition`) and momentum contrast
(:mod:`.momentum`) on SimCSE's pipeline (:mod:`.model`)."""

from .model import ESIMCSE, ESimCSEConfig, ESimCSEModel
from .momentum import EmbeddingQueue, momentum_update
from .repetition import WordRepetitionCollator, repeat_tokens, repeated_positions

__all__ = ["ESIMCSE", "ESimCSEConfig", "ESimCSEModel", "EmbeddingQueue", "WordRepetitionCollator", "momentum_update",
           "repeat_tokens", "repeated_positions"]
