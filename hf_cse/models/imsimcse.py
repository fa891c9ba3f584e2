"""ImSimCSE (Xu et al., EMNLP 2023, published as SimCSE++): SimCSE + off-dropout negatives (Sec. 3.2) +
dimension-wise contrastive learning (DCL, Sec. 4.3).

Both parts are generic: off-dropout is the ``off_dropout`` switch of :class:`CSEConfig` (implemented once in
:class:`CSEPreTrainedModel`), DCL an ordinary second entry of ``objectives`` (:mod:`hf_cse.objectives`), so they
compose with every method (DiffCSE included, as in the paper's Table 4). This class differs from SimCSE only in its
default objectives and ``off_dropout=True``:

* off-dropout sampling: a third encoder pass over the un-duplicated batch with the whole encoder in
  eval mode gives ``z_nodropout``; ``off_dropout_infonce`` (m = 0.9, positive-logit placement as the
  authors' code) uses similarities among those for the negatives; gradients flow through the pass
  (authors' code; ``off_dropout_grad=False`` to stop them).
* DCL with lambda = 0.1, tau_DCL = 5 and the authors' normalisation (commit 35361a5), on the projector
  outputs of the two dropout views, in fp32.

Paper setting (Sec. 5.1; preset ``imsimcse_bert``): m = 0.9, lambda = 0.1, tau_DCL = 5, lr 3e-5, batch 64.
"""

from __future__ import annotations

from dataclasses import field

from ..objectives import DCL, objective
from ..references import IMSIMCSE, SIMCSE
from .base import CSEPreTrainedModel
from .config import CSEConfig


class ImSimCSEConfig(CSEConfig):
    model_type = "hf_cse_imsimcse"
    method = "imsimcse"

    objectives: list[dict] = field(default_factory=lambda: [
        objective("off_dropout_infonce", temperature=0.05, m=0.9),
        objective(DCL, 0.1, temperature=5.0, normalization="code"),
    ], metadata=CSEConfig.__dataclass_fields__["objectives"].metadata)
    off_dropout: bool = field(default=True, metadata=CSEConfig.__dataclass_fields__["off_dropout"].metadata)


class ImSimCSEModel(CSEPreTrainedModel):
    """SimCSE with ImSimCSE's off-dropout negatives and DCL on by default (each switchable)."""

    references = (IMSIMCSE, SIMCSE)  # the method's paper first (hf_cse.references)

    config_class = ImSimCSEConfig
