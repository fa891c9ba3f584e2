"""Which registry losses a model's config asks for, and how they combine into one scalar.

The trainer gathers the model's embeddings across processes, then calls :func:`compute_objectives`;
tests call it directly to compare a model's loss with a hand-computed one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .losses import ContrastiveLoss, build_loss
from .losses.base import HARD_NEGATIVE_INPUT, hard_negative_refusal
from .models.config import CSEConfig


@dataclass(frozen=True)
class ObjectiveSpec:
    """One objective as the configuration states it: its loss's registry name, weight and hyperparameters
    (only those given; the loss's defaults fill the rest). ``name`` prefixes its logged metrics."""

    name: str
    loss: str
    weight: float
    hyperparameters: dict


def objective_specs(config: CSEConfig) -> list[ObjectiveSpec]:
    """The objectives a config asks for, the main contrastive one first (read by model cards and reports)."""
    specs = [ObjectiveSpec("contrastive", config.loss, 1.0, dict(config.loss_kwargs))]
    if config.dcl_weight > 0:
        specs.append(ObjectiveSpec("dcl", "dcl", config.dcl_weight,
                                   {"temperature": config.dcl_temperature, "normalization": config.dcl_normalization}))
    return specs


@dataclass
class Objective:
    name: str  # prefix of its logged metrics
    weight: float
    loss: ContrastiveLoss


def build_objectives(config: CSEConfig) -> list[Objective]:
    """The contrastive loss of the config, plus DCL when ``dcl_weight > 0``; checks they fit together."""
    main = build_loss(config.loss, **config.loss_kwargs)
    takes_nodropout = "z_nodropout" in main.extra_inputs
    if config.off_dropout and not takes_nodropout:
        raise ValueError(
            f"off_dropout=True makes no-dropout negatives, but loss {config.loss!r} does not use them. "
            "Use --loss off_dropout_infonce, or turn off --off_dropout."
        )
    if takes_nodropout and not config.off_dropout:
        raise ValueError(
            f"loss {config.loss!r} needs no-dropout embeddings: add --off_dropout (or use --method imsimcse)."
        )
    objectives = [Objective("contrastive", 1.0, main)]
    if config.dcl_weight > 0:
        dcl = build_loss("dcl", temperature=config.dcl_temperature, normalization=config.dcl_normalization)
        objectives.append(Objective("dcl", config.dcl_weight, dcl))
    return objectives


def compute_objectives(
    objectives: list[Objective], embeddings: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weighted sum of the objectives on (already gathered) embeddings, and their metrics (detached device tensors:
    reading them is left to logging steps, :mod:`hf_cse.metrics`).

    Hard negatives (``z_neg``, from triplet data) go to the main contrastive loss, which must take them;
    auxiliary objectives (DCL) are defined on the two views only and never see them.
    """
    total = None
    metrics: dict[str, torch.Tensor] = {}
    has_negatives = embeddings.get(HARD_NEGATIVE_INPUT) is not None
    for obj in objectives:
        extra = {k: embeddings[k] for k in obj.loss.extra_inputs if k in embeddings}
        if has_negatives and obj.name == "contrastive":
            if not obj.loss.takes_hard_negatives:
                raise ValueError(hard_negative_refusal(obj.loss.name))
            extra[HARD_NEGATIVE_INPUT] = embeddings[HARD_NEGATIVE_INPUT]
        out = obj.loss(embeddings["z1"], embeddings["z2"], **extra)
        term = obj.weight * out.loss
        total = term if total is None else total + term
        metrics[f"{obj.name}_loss"] = out.loss.detach()
        if obj.name == "contrastive":
            metrics.update(out.metrics)
    return total, metrics
