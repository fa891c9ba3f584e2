"""What a method model hands the others: the trainer, one batch's embeddings, loss terms and metrics
(:class:`CSEOutput`); the sentence-transformers export, the method's own modules where its test embedding is no
``Pooling`` of the encoder's tokens (:class:`OwnExportModules`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import nn


@dataclass
class CSEOutput:
    """What a method model hands the trainer for one batch.

    embeddings: tensors the losses need, gathered across processes by the trainer
        (``z1``, ``z2`` = projector outputs of the two dropout views -- or of anchor and positive with pair
        data --, ``z_neg`` of the hard negatives with triplet data, ``z_nodropout`` with off-dropout).
    aux_losses: weighted per-process loss terms already computed by the model (e.g. DiffCSE's RTD).
    metrics: floats to log.
    """

    embeddings: dict[str, torch.Tensor] | None = None
    aux_losses: dict[str, torch.Tensor] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class OwnExportModules:
    """A method's own sentence-transformers modules, for a test embedding that is no ``Pooling`` of the encoder's
    tokens (:meth:`hf_cse.models.base.CSEPreTrainedModel.sentence_transformers_modules`).

    build_transformer: ``(encoder folder, max_seq_length, model_kwargs) -> input module`` in place of
        sentence-transformers' ``Transformer``.
    pooling: the module after it, in place of ``Pooling``.
    code_files: the files of their code, shipped in the folder (loaded with ``trust_remote_code=True``).
    pooling_words: the card's description of the pooling.
    """

    build_transformer: Callable[[str, int, dict], nn.Module]
    pooling: nn.Module
    code_files: tuple[Path, ...]
    pooling_words: str
