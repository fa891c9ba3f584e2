"""The objectives of a model: a list in its configuration, each a registry loss with a weight and hyperparameters,
and how they combine into one scalar.

A configuration's ``objectives`` is plain data (saved in config.json)::

    [{"loss": "infonce", "weight": 1.0, "hyperparameters": {"temperature": 0.05}},
     {"loss": "dcl", "weight": 0.1, "hyperparameters": {"temperature": 5.0, "normalization": "code"}}]

(a loss name alone, ``"infonce"``, stands for ``{"loss": "infonce"}``; a loss object, ``build_loss(...)``, computes a
loss on its own and is refused here, with the entry to write for it).

The first is the main contrastive objective (it alone sees hard negatives; its metrics are logged unprefixed, its
value as ``contrastive_loss``); every other one is logged as ``<loss name>_loss`` (``dcl_loss``). Each entry is
built by the loss registry (:func:`hf_cse.losses.build_loss`) when the configuration is created, so an unknown loss
or a bad value fails there with the registry's message.

The trainer gathers the model's embeddings across processes, then calls :func:`compute_objectives`; tests call it
directly to compare a model's loss with a hand-computed one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .errors import CSEError
from .hyperparameter_rules import plain_number
from .losses import ContrastiveLoss, build_loss, loss_hyperparameters
from .losses.base import HARD_NEGATIVE_INPUT, NO_DROPOUT_INPUT, QUEUE_INPUT
from .losses.errors import HardNegativesNotTakenError
from .losses.registry import available_losses, get_loss_class
from .matryoshka import MatryoshkaLoss
from .said_once import first_time

logger = logging.getLogger(__name__)

#: metric prefix of the first (main) objective
MAIN_OBJECTIVE = "contrastive"
#: the loss that makes the dimension-wise contrastive objective (ImSimCSE)
DCL = "dcl"
#: config fields of checkpoints saved before objectives were a list; still accepted and converted
LEGACY_FIELDS = ("loss", "loss_kwargs", "dcl_weight", "dcl_temperature", "dcl_normalization")


class HasObjectives(Protocol):
    """What this module reads of a model configuration (:class:`hf_cse.models.config.CSEConfig`, which builds on
    this module to check its ``objectives``)."""

    objectives: list[dict]
    off_dropout: bool
    matryoshka_dims: list[int] | None
    matryoshka_weights: list[float] | None


def objective(loss: str, weight: float = 1.0, /, **hyperparameters: Any) -> dict:
    """One entry of a configuration's ``objectives`` list. ``loss`` and ``weight`` are positional: a loss may have a
    hyperparameter named ``weight`` (the paradigm loss's negative weighting, ``objective("paradigm", 1.0,
    weight="hardest")``)."""
    return {"loss": loss, "weight": float(weight),
            "hyperparameters": {name: plain_number(value) for name, value in hyperparameters.items()}}


@dataclass(frozen=True)
class ObjectiveSpec:
    """One objective as the configuration states it: its loss's registry name, weight and hyperparameters
    (only those given; the loss's defaults fill the rest). ``name`` prefixes its logged metrics."""

    name: str
    loss: str
    weight: float
    hyperparameters: dict


def loss_object_refusal(value: Any, field: str, writes: str = "{!r}", beside: Mapping | None = None) -> CSEError | None:
    """The refusal of a loss object (``build_loss(...)``) given as ``field`` (``loss``, ``objectives[0]``), which
    takes loss names: a model's objectives are configuration data, saved in config.json. It shows the entry to write
    instead (with the rest of the entry ``beside`` it; ``writes`` wraps it: ``"objectives=[{!r}]"``); None where
    ``value`` is no loss object."""
    if not isinstance(value, ContrastiveLoss):
        return None
    cls = type(value)
    said = (f"{field} takes a loss name, not a loss object ({cls.__name__}): a model's objectives are configuration "
            "data, saved in config.json")
    fields = (field.split("[")[0],)
    name = getattr(cls, "name", None)
    if name not in available_losses() or get_loss_class(name) is not cls:  # not registered (a subclass inherits name)
        return CSEError(f"{said}; register its class with @register_loss('my_loss') (hf_cse.losses) and write "
                        "{'loss': 'my_loss', 'hyperparameters': {...}}.", fields=fields)
    hyperparameters = {k: plain_number(getattr(value, k)) for k in cls.hyperparameters() if hasattr(value, k)}
    entry = {**(beside or {}), "loss": name, "hyperparameters": hyperparameters}
    return CSEError(f"{said}; for this one write {writes.format(entry)}.", fields=fields)


def _entry(value: Any, index: int) -> dict:
    """A checked copy of one ``objectives`` entry (shape and weight; the registry checks the rest); a loss name alone
    stands for ``{"loss": name}``."""
    if isinstance(value, str):
        value = {"loss": value}
    refusal = loss_object_refusal(value, f"objectives[{index}]")
    if refusal is None and isinstance(value, Mapping):
        refusal = loss_object_refusal(value.get("loss"), f"objectives[{index}]['loss']", beside=value)
    if refusal is not None:
        raise refusal
    if not isinstance(value, Mapping) or not isinstance(value.get("loss"), str):
        raise CSEError(f"objectives[{index}] must be a dict with a registry 'loss' name, an optional 'weight' and "
                       f"'hyperparameters', got {value!r}.")
    unknown = sorted(set(value) - {"loss", "weight", "hyperparameters"})
    if unknown:
        raise CSEError(f"objectives[{index}] has unknown keys {unknown}; it takes loss, weight, hyperparameters.")
    weight = plain_number(value.get("weight", 1.0))
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight <= 0:
        raise CSEError(f"objectives[{index}] ({value['loss']}): weight must be a finite number > 0, got {weight!r} "
                       "(leave an objective out of the list to turn it off).")
    hyperparameters = value.get("hyperparameters") or {}
    if not isinstance(hyperparameters, Mapping):
        raise CSEError(f"objectives[{index}] ({value['loss']}): hyperparameters must be a dict, got "
                       f"{hyperparameters!r}.")
    return objective(value["loss"], weight, **hyperparameters)


def objective_names(objectives: list[dict]) -> list[str]:
    """The metric prefix of each objective: ``contrastive`` for the first, the loss name for the others."""
    names = [MAIN_OBJECTIVE] + [entry["loss"] for entry in objectives[1:]]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise CSEError(f"objectives: {', '.join(repeated)} appear(s) twice; each auxiliary loss may appear once "
                       "(their metrics are logged under the loss name).")
    return names


def normalise_objectives(objectives: Any, legacy: Mapping[str, Any] | None = None) -> list[dict]:
    """Checked copies of the entries (dicts; a loss name alone is read as ``{"loss": name}``), with the fields of
    older configs (``loss``, ``loss_kwargs``, ``dcl_*``: :data:`LEGACY_FIELDS`) applied on top: ``loss`` /
    ``loss_kwargs`` replace the main objective's, ``dcl_weight`` > 0 sets (0 removes) the DCL objective,
    ``dcl_temperature`` / ``dcl_normalization`` set its hyperparameters. A loss object (``build_loss(...)``) is
    refused, showing the entry to write (:func:`loss_object_refusal`)."""
    if not isinstance(objectives, list | tuple) or not objectives:
        raise CSEError(f"objectives must be a non-empty list (the main contrastive objective first), got "
                       f"{objectives!r}.")
    entries = [_entry(value, i) for i, value in enumerate(objectives)]
    legacy = {k: v for k, v in (legacy or {}).items() if k in LEGACY_FIELDS}
    if not legacy:
        return entries
    main = entries[0]
    refusal = loss_object_refusal(legacy.get("loss"), "loss", "objectives=[{!r}]")
    if refusal is not None:
        raise refusal
    if "loss" in legacy:
        main["loss"] = legacy["loss"]
    if "loss_kwargs" in legacy:
        main["hyperparameters"] = objective(main["loss"], **(legacy["loss_kwargs"] or {}))["hyperparameters"]
    dcl_keys = {"dcl_weight", "dcl_temperature", "dcl_normalization"} & legacy.keys()
    if dcl_keys:
        current = next((e for e in entries[1:] if e["loss"] == DCL), None)
        weight = legacy.get("dcl_weight", current["weight"] if current else 0.0)
        check_dcl_weight(weight)
        hyperparameters = dict(current["hyperparameters"]) if current else {}
        for key in ("temperature", "normalization"):
            if f"dcl_{key}" in legacy:
                hyperparameters[key] = legacy[f"dcl_{key}"]
        entries = [e for e in entries if e is main or e["loss"] != DCL]
        if weight > 0:
            entries.append(objective(DCL, weight, **dcl_defaults(hyperparameters)))
    return entries


def check_dcl_weight(weight, owner: str = "") -> None:
    """The weight of the DCL objective is a finite number >= 0 (0: none); NaN fails both >= 0 and > 0, so it would
    drop the objective without a word, and inf would train on inf. ``owner``: who was given it, as a prefix."""
    weight = plain_number(weight)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not (weight >= 0 and math.isfinite(weight)):
        raise CSEError(f"{owner}dcl_weight must be a finite number >= 0 (0 = no DCL objective), got {weight!r}.",
                       fields=("dcl_weight",))


def dcl_defaults(hyperparameters: Mapping[str, Any]) -> dict:
    """DCL's temperature and normalisation as older configs always stored them (the loss's defaults where not
    given), and any other hyperparameter given."""
    params = loss_hyperparameters(DCL)
    return {"temperature": params["temperature"].default, "normalization": params["normalization"].default,
            **hyperparameters}



def objectives_for(defaults: list[dict], loss: str, hyperparameters: Mapping[str, Any] | None = None,
                   dcl_weight: float | None = None, dcl_hyperparameters: Mapping[str, Any] | None = None) -> list[dict]:
    """A method's objectives (``defaults``: its config's) trained with ``loss``: the main one is ``loss`` with
    ``hyperparameters`` over the method's own (kept where ``loss`` is the method's loss, e.g. ImSimCSE's m = 0.9);
    ``dcl_weight`` > 0 (None: the method's own, 0 = none) with ``dcl_hyperparameters`` over the method's makes the
    DCL one; the method's other objectives are kept."""
    main = defaults[0]
    params = dict(main["hyperparameters"]) if loss == main["loss"] else {}
    params.update(hyperparameters or {})
    objectives = [objective(loss, main["weight"], **params)]
    method_dcl = next((o for o in defaults[1:] if o["loss"] == DCL), None)
    weight = dcl_weight if dcl_weight is not None else (method_dcl or {}).get("weight", 0.0)
    check_dcl_weight(weight)
    if weight > 0 and loss == DCL:  # (a saved config with both still loads: this builds a new one)
        whose = " (the method's own)" if dcl_weight is None else ""
        raise CSEError(f"the main loss is {DCL}, and dcl_weight {weight:g}{whose} would add the {DCL} objective a "
                       "second time: set dcl_weight 0, or choose another main loss.", fields=("loss", "dcl_weight"))
    if weight > 0:
        objectives.append(objective(DCL, weight, **dcl_defaults({**(method_dcl or {}).get("hyperparameters", {}),
                                                                  **(dcl_hyperparameters or {})})))
    return objectives + [o for o in defaults[1:] if o["loss"] != DCL]

def takes_no_dropout(loss: str) -> bool:
    """Whether the registry loss ``loss`` reads no-dropout embeddings (``z_nodropout`` among its ``extra_inputs``):
    it needs off-dropout, and off-dropout is of use to it only."""
    return NO_DROPOUT_INPUT in get_loss_class(loss).extra_inputs


def no_dropout_losses() -> list[str]:
    """The registry losses that read no-dropout embeddings (:func:`takes_no_dropout`)."""
    return [name for name in available_losses() if takes_no_dropout(name)]


def check_objectives(objectives: list[dict], off_dropout: bool, loading: bool = False) -> list[ContrastiveLoss]:
    """Build every objective's loss (the registry checks names and values) and check that the off-dropout switch
    matches the losses' inputs; returns the losses. ``loading``: a saved configuration being read, where a loss name
    this process has not registered (a user's own loss) only warns, so the model still loads for inference."""
    objective_names(objectives)
    if loading:
        unknown = [e["loss"] for e in objectives if e["loss"] not in available_losses()]
        if unknown:
            if first_time("unregistered losses", *unknown):  # loading a model reads its config more than once
                logger.warning("this model was trained with loss(es) %s, not registered in this process: it loads "
                               "for inference; to train it, import the module that registers them first.", unknown)
            return []
    losses = [build_loss(entry["loss"], **entry["hyperparameters"]) for entry in objectives]
    main = objectives[0]["loss"]
    takes_nodropout = any(NO_DROPOUT_INPUT in loss.extra_inputs for loss in losses)
    if off_dropout and not takes_nodropout:
        raise CSEError(
            f"off_dropout=True makes no-dropout negatives, but loss {main!r} does not use them. "
            f"Use a loss that takes them ({', '.join(no_dropout_losses())}), or turn off off_dropout."
        )
    if takes_nodropout and not off_dropout:
        raise CSEError(
            f"loss {main!r} needs no-dropout embeddings: add off_dropout=True (or train ImSimCSEModel, method "
            "imsimcse)."
        )
    return losses


def objective_specs(config: HasObjectives) -> list[ObjectiveSpec]:
    """The objectives a config asks for, the main contrastive one first (read by model cards and reports)."""
    names = objective_names(config.objectives)
    return [ObjectiveSpec(name, e["loss"], e["weight"], dict(e["hyperparameters"]))
            for name, e in zip(names, config.objectives, strict=True)]


@dataclass
class Objective:
    name: str  # prefix of its logged metrics
    weight: float
    loss: ContrastiveLoss | MatryoshkaLoss


def build_objectives(config: HasObjectives) -> list[Objective]:
    """The config's objectives with their losses built (checked again: a config may change after construction);
    with ``matryoshka_dims`` each loss is applied to every prefix (:class:`hf_cse.matryoshka.MatryoshkaLoss`)."""
    losses = check_objectives(config.objectives, config.off_dropout)
    objectives = [Objective(spec.name, spec.weight, loss)
                  for spec, loss in zip(objective_specs(config), losses, strict=True)]
    return with_matryoshka(objectives, getattr(config, "matryoshka_dims", None),
                           getattr(config, "matryoshka_weights", None))


def with_matryoshka(objectives: list[Objective], dims: list[int] | None,
                    weights: list[float] | None = None) -> list[Objective]:
    """The objectives, each applied to every leading prefix of ``dims`` (none: unchanged). The one place where
    Matryoshka training enters: every caller of :func:`compute_objectives` (the trainer, the gradient cache,
    the sentence-transformers adapter) gets it from here."""
    if not dims:
        return objectives
    return [Objective(obj.name, obj.weight, MatryoshkaLoss(obj.loss, dims, weights)) for obj in objectives]


def compute_objectives(
    objectives: list[Objective], embeddings: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weighted sum of the objectives on (already gathered) embeddings, and their metrics (detached device tensors:
    reading them is left to logging steps, :mod:`hf_cse.metrics`).

    Hard negatives (``z_neg``, from triplet data) go to the main contrastive loss, which must take them;
    auxiliary objectives (DCL) are defined on the two views only and never see them. So does a queue of earlier
    batches' embeddings (``z_queue``, ESimCSE's), which the trainer does not gather (every process holds it whole).
    """
    total = None
    metrics: dict[str, torch.Tensor] = {}
    has_negatives = embeddings.get(HARD_NEGATIVE_INPUT) is not None
    for obj in objectives:
        extra = {k: embeddings[k] for k in obj.loss.extra_inputs if k in embeddings}
        if has_negatives and obj.name == MAIN_OBJECTIVE:
            if not obj.loss.takes_hard_negatives:
                raise HardNegativesNotTakenError(obj.loss.name)
            extra[HARD_NEGATIVE_INPUT] = embeddings[HARD_NEGATIVE_INPUT]
        if obj.name == MAIN_OBJECTIVE and embeddings.get(QUEUE_INPUT) is not None:
            extra[QUEUE_INPUT] = embeddings[QUEUE_INPUT]  # the loss refuses it in one line if it has no use for it
        out = obj.loss(embeddings["z1"], embeddings["z2"], **extra)
        term = obj.weight * out.loss
        total = term if total is None else total + term
        metrics[f"{obj.name}_loss"] = out.loss.detach()
        if obj.name == MAIN_OBJECTIVE:
            metrics.update(out.metrics)
    return total, metrics
