"""SimCSE (Gao et al., EMNLP 2021): InfoNCE over two dropout views of each sentence; the method every other one
extends (they share :class:`hf_cse.models.base.CSEPreTrainedModel`)."""

from __future__ import annotations

from ..references import SIMCSE
from .base import CSEPreTrainedModel
from .config import CSEConfig


class SimCSEConfig(CSEConfig):
    model_type = "hf_cse_simcse"
    method = "simcse"


class SimCSEModel(CSEPreTrainedModel):
    """Unsupervised SimCSE (InfoNCE over two dropout views), or any registry loss on the same views.

    Example::

        from hf_cse.objectives import objective

        model = SimCSEModel.from_encoder("bert-base-uncased", objectives=[objective("infonce", temperature=0.05)])
        # the same, in the keywords of older versions
        model = SimCSEModel.from_encoder("bert-base-uncased", loss="infonce", loss_kwargs={"temperature": 0.05})
    """

    references = (SIMCSE,)  # the method's paper first (hf_cse.references)

    config_class = SimCSEConfig
