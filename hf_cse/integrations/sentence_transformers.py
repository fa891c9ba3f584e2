"""Every hf_cse registry loss as a sentence-transformers loss, for ``SentenceTransformerTrainer``.

    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from hf_cse.integrations.sentence_transformers import CSELoss

    model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
    loss = CSELoss(model, "focal_infonce", temperature=0.07, m=0.3)
    SentenceTransformerTrainer(model=model, train_dataset=train, loss=loss).train()

The data set's text columns are the views, in order:

* ``(sentence, sentence)`` -- the same text twice: unsupervised SimCSE. Each column gets its own forward in
  train mode, so the two embeddings differ by their dropout masks (sentence-transformers' own unsupervised
  SimCSE recipe).
* ``(anchor, positive)`` -- pairs, e.g. an NLI premise and an entailed hypothesis; every loss works on them.
* ``(anchor, positive, negative)`` -- triplets: the third column's embeddings join every anchor's candidates
  (supervised SimCSE) for the losses that take hard negatives (``takes_hard_negatives``); the others refuse.

Losses that need no-dropout embeddings (``off_dropout_infonce``, ImSimCSE) get them from one more forward of
the first column with every module of the model in eval mode (gradients flow through it, as in
:meth:`hf_cse.models.base.CSEPreTrainedModel.no_dropout_embeddings`).

Across processes the embeddings are all-gathered with gradients before the loss (hf_cse's
:func:`~hf_cse.distributed.gather_with_grad`, as its trainer does): each process computes the loss of the
global batch and receives the single-process gradient. The losses see the model's ``sentence_embedding``:
the pooled output (plus any Dense / Normalize modules of the model), not hf_cse's training-only projector.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import Tensor, nn

from ..distributed import gather_with_grad
from ..losses import build_loss, loss_hyperparameters
from ..losses.base import HARD_NEGATIVE_INPUT
from ..losses.errors import HardNegativesNotTakenError
from ..models.modes import eval_mode
from ..references import SIMCSE

NO_DROPOUT_INPUT = "z_nodropout"



class CSELoss(nn.Module):
    """An hf_cse registry loss (``hf_cse.losses.available_losses()``) as a sentence-transformers loss.

    Args:
        model: the ``SentenceTransformer`` being trained.
        loss: registry name, e.g. ``"infonce"``, ``"focal_infonce"``, ``"gs_infonce"``, ``"m_mhs"``.
        gather_across_devices: all-gather the embeddings (with gradients) across processes so every process
            uses the global batch as negatives, as hf_cse's trainer does (default True; a no-op on one process).
        **hyperparameters: the loss's own hyperparameters (``temperature=0.07, m=0.3``...); unknown names raise.

    ``forward(sentence_features, labels)`` takes 2 or 3 text columns (labels are not used). The loss carries
    ``citation`` (the BibTeX of the loss's ``references`` and SimCSE's) and ``get_config_dict()`` (loss name and every
    hyperparameter), which sentence-transformers writes into the model card. ``last_metrics`` holds the hf_cse
    diagnostics (``pos_cos``, ``neg_cos``, ...) of the latest batch.
    """

    def __init__(self, model: nn.Module, loss: str = "infonce", gather_across_devices: bool = True,
                 **hyperparameters: Any) -> None:
        super().__init__()
        self.model = model
        self.loss_name = loss
        self.loss_fn = build_loss(loss, **hyperparameters)
        self.gather_across_devices = gather_across_devices
        unsupported = set(self.loss_fn.extra_inputs) - {NO_DROPOUT_INPUT}
        if unsupported:  # pragma: no cover - no registry loss needs other inputs today
            raise ValueError(f"CSELoss: loss {loss!r} needs inputs {sorted(unsupported)} that a "
                             "SentenceTransformer does not provide.")
        self.last_metrics: dict[str, float] = {}

    # ------------------------------------------------------------------ sentence-transformers' loss API
    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        features = list(sentence_features)
        if len(features) not in (2, 3):
            raise ValueError(f"CSELoss({self.loss_name!r}) takes 2 text columns (sentence twice, or anchor and "
                             f"positive) or 3 (anchor, positive, hard negative); the data set has {len(features)}.")
        if len(features) == 3 and not self.loss_fn.takes_hard_negatives:
            raise HardNegativesNotTakenError(self.loss_name, "a third column")
        embeddings = [self.model(f)["sentence_embedding"] for f in features]  # one forward each: own dropout masks
        no_dropout = None
        if NO_DROPOUT_INPUT in self.loss_fn.extra_inputs:
            with eval_mode(self.model):
                no_dropout = self.model(dict(features[0]))["sentence_embedding"]
        return self.compute_loss_from_embeddings(embeddings, labels, no_dropout)

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None = None,
                                     no_dropout: Tensor | None = None) -> Tensor:
        """The loss on given embeddings ``[z1, z2(, z_neg)]`` (gathered across processes first)."""
        gather = gather_with_grad if self.gather_across_devices else (lambda t: t)
        z = [gather(e) for e in embeddings]
        extra = {HARD_NEGATIVE_INPUT: z[2]} if len(z) == 3 else {}
        if no_dropout is not None:
            extra[NO_DROPOUT_INPUT] = gather(no_dropout)
        out = self.loss_fn(z[0], z[1], **extra)
        self.last_metrics = out.metrics
        return out.loss

    def get_config_dict(self) -> dict[str, Any]:
        params = {k: getattr(self.loss_fn, k) for k in loss_hyperparameters(self.loss_name) if hasattr(self.loss_fn, k)}
        return {"loss": self.loss_name, **params, "gather_across_devices": self.gather_across_devices}

    @property
    def citation(self) -> str:
        """BibTeX of the papers behind the loss (its ``references``, the defining paper first, then SimCSE's, whose
        dropout-view training this is)."""
        papers = dict.fromkeys([*self.loss_fn.references, SIMCSE])
        return "\n\n".join(paper.bibtex for paper in papers)
