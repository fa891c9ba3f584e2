"""Matryoshka training (Kusupati et al., "Matryoshka Representation Learning", NeurIPS 2022, arXiv 2205.13147; the
objective of its section 3):
every objective is applied to each leading prefix ``z[:, :d]`` of the one embedding, for each ``d`` of
``matryoshka_dims``, and the weighted per-prefix losses are summed, so that the first ``d`` coordinates of the
shipped embedding are a usable ``d``-dimensional embedding on their own.

The prefixes are slices of the embeddings of ONE forward (the encoder runs once per batch, whatever the number of
dimensions); only the losses run once per dimension. Every registry loss normalises its inputs itself where its
definition does (cosine similarities: :func:`hf_cse.losses.base.unit`), so each prefix is normalised on its own.
The wrapper sits where the objectives are built (:func:`hf_cse.objectives.build_objectives`, and the
sentence-transformers adapter's :class:`~hf_cse.integrations.sentence_transformers.CSELoss`); it sees the gathered
embeddings, so several processes and the gradient cache work unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .errors import CSEError
from .losses.base import LossOutput
from .matryoshka_rules import check_matryoshka
from .number_lists import DIMS_FIELD, WEIGHTS_FIELD, parse_float_list, parse_int_list
from .references import Paper, register_paper
from .said_once import first_time

logger = logging.getLogger(__name__)

#: cited by the model card of a run trained with ``matryoshka_dims``
MATRYOSHKA = register_paper(Paper(
    key="kusupati2022matryoshka",
    name="Matryoshka Representation Learning",
    title="Matryoshka Representation Learning",
    authors=("Aditya Kusupati", "Gantavya Bhatt", "Aniket Rege", "Matthew Wallingford", "Aditya Sinha",
             "Vivek Ramanujan", "William Howard-Snyder", "Kaifeng Chen", "Sham Kakade", "Prateek Jain",
             "Ali Farhadi"),
    venue="NeurIPS 2022",
    year=2022,
    arxiv="2205.13147",
    code="https://github.com/RAIVNLab/MRL",
    bibtex="""@inproceedings{kusupati2022matryoshka,
  title     = {Matryoshka Representation Learning},
  author    = {Kusupati, Aditya and Bhatt, Gantavya and Rege, Aniket and Wallingford, Matthew and Sinha, Aditya and
               Ramanujan, Vivek and Howard-Snyder, William and Chen, Kaifeng and Kakade, Sham and Jain, Prateek and
               Farhadi, Ali},
  booktitle = {Advances in Neural Information Processing Systems (NeurIPS)},
  year      = {2022},
  eprint    = {2205.13147},
  archivePrefix = {arXiv}
}""",
))


def say_reordered(given_dims: Any, given_weights: Any, dims: list[int] | None, weights: list[float] | None) -> None:
    """One info line, once, where :func:`check_matryoshka` put the dimensions given (``given_dims``, as typed) largest
    first, the weights following their dimensions: the run's record keeps the typed order, the config the sorted."""
    typed = parse_int_list(given_dims)
    if not dims or typed == dims:
        return
    if not first_time("matryoshka re-ordered", tuple(typed),
                      None if given_weights is None else tuple(parse_float_list(given_weights))):
        return
    following = f"; {WEIGHTS_FIELD} follow their dimensions: {weights}" if given_weights is not None else ""
    logger.info("%s %s re-ordered largest first: %s%s", DIMS_FIELD, typed, dims, following)


def warn_untrained_width(dims: list[int] | None, width: int) -> None:
    """Dimensions that leave out the embedding's full ``width`` (0 = unknown) train only its leading ``dims[0]``
    values: the rest get no training signal, yet the export serves them (as sentence-transformers'
    ``MatryoshkaLoss`` with such a list does). Said, with the fix, rather than refused: serving the prefix alone
    (``truncate_dim``) is a use of its own."""
    if dims and width and dims[0] < width and first_time("matryoshka untrained width", tuple(dims), width):
        logger.warning("%s %s leave out the embedding's full width %d: its values past %d get no training signal but "
                       "are served in full by the export (load it with truncate_dim=%d to use what was trained); list "
                       "%d first to train the whole embedding too", DIMS_FIELD, dims, width, dims[0], dims[0], width)


class MatryoshkaLoss(nn.Module):
    """One objective's loss applied to each leading prefix of its inputs: ``sum_d w_d * loss(z1[:, :d],
    z2[:, :d], **{k: x[:, :d]})`` (every extra input -- hard negatives, no-dropout embeddings -- is cut the same
    way). It stands in for the loss it wraps (same ``name``, inputs and references). Metrics: the wrapped loss's
    diagnostics at the largest dimension, and each dimension's unweighted loss as ``loss_dim<d>``."""

    def __init__(self, loss: nn.Module, dims: Sequence[int], weights: Sequence[float] | None = None):
        super().__init__()
        self.loss = loss
        self.dims, self.weights = check_matryoshka(list(dims), None if weights is None else list(weights))
        self.name = loss.name
        self.extra_inputs = loss.extra_inputs
        self.takes_hard_negatives = loss.takes_hard_negatives
        self.references = loss.references

    def forward(self, z1: torch.Tensor, z2: torch.Tensor, **extra: torch.Tensor) -> LossOutput:
        width = z1.shape[-1] if isinstance(z1, torch.Tensor) and z1.dim() == 2 else None
        if width is not None and self.dims[0] > width:
            raise CSEError(f"{DIMS_FIELD} {self.dims} needs embeddings of at least {self.dims[0]} dimensions; "
                           f"these have {width}. Choose dimensions up to {width}.")
        total = None
        metrics: dict[str, Any] = {}
        for i, (d, w) in enumerate(zip(self.dims, self.weights, strict=True)):
            cut = {k: (v[:, :d] if isinstance(v, torch.Tensor) and v.dim() == 2 else v) for k, v in extra.items()}
            try:
                out = self.loss(z1[:, :d], z2[:, :d], **cut)
            except CSEError as err:  # e.g. rows whose leading d values are all 0: the whole rows may be fine
                raise CSEError(f"{err} (Matryoshka: in the embeddings' first {d} dimensions, {DIMS_FIELD} {d})"
                               ) from None
            term = w * out.loss
            total = term if total is None else total + term
            if i == 0:
                metrics.update(out.metrics)
            metrics[f"loss_dim{d}"] = out.loss.detach()
        return LossOutput(loss=total, metrics=metrics)

    def extra_repr(self) -> str:
        return f"dims={self.dims}, weights={self.weights}"
