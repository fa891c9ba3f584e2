"""The hf_cse parts of a model card: the papers behind a config, the method and its objectives, the training data,
every hyperparameter, the training curves and the citations. Each reads what defines the run: the method model's
and the losses' ``references`` (:mod:`hf_cse.references`), :func:`hf_cse.objectives.objective_specs`, the config
fields (their meaning is the field's ``help`` metadata) and what ``run_unsup.py`` records (``training_info``)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..presets import DEFAULT_METHOD
from ..references import Paper
from ..training_args import global_batch_size
from ..zero_loss import ZERO_LOSS_KEY
from .results import dev_change_line
from .text import fmt, is_number, kv_table, table

# TrainingArguments shown in the main table, in this order; every other set argument goes below it.
MAIN_TRAINING_ARGS = (
    "learning_rate",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_train_epochs",
    "max_steps",
    "lr_scheduler_type",
    "warmup_steps",
    "warmup_ratio",
    "weight_decay",
    "optim",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "seed",
    "fp16",
    "bf16",
    "eval_strategy",
    "eval_steps",
    "metric_for_best_model",
    "load_best_model_at_end",
)
# Machine-local or secret values that do not describe the training and must not be published.
_PRIVATE_ARG = re.compile(r"(^|_)token$|_dir$|^hub_model_id$|^push_to_hub|^resume_from_checkpoint$|^eval_file$")
# training_info keys shown in their own sections (or the metadata), not under "Other training information".
_INFO_SHOWN_ELSEWHERE = {"training_args", "data", "train_metrics", "world_size", "datasets", "language", "license",
                         "base_model", "training_curves", ZERO_LOSS_KEY}


# --------------------------------------------------------------------------------------------- papers
def _loss_class(loss: str):
    """The registered loss class, or None (a saved model may name a loss this installation lacks)."""
    from ..losses import get_loss_class

    try:
        return get_loss_class(loss)
    except ValueError:
        return None


def cited_papers(method: str, losses: Iterable[str]) -> list[Paper]:
    """Papers behind a method trained with ``losses``, the defining one first: the method's own papers (its
    ``references`` beyond what it ``builds_on``: DiffCSE, ImSimCSE), then each loss's papers, then the training
    pipeline the method builds on (its ``builds_on``: SimCSE). Each paper once."""
    from ..models import METHODS

    method_cls = METHODS.get(method)
    pipeline = method_cls.builds_on if method_cls is not None else ()
    own = [paper for paper in (method_cls.references if method_cls is not None else ()) if paper not in pipeline]
    loss_refs = [paper for loss in losses for paper in getattr(_loss_class(loss), "references", ())]
    return list(dict.fromkeys([*own, *loss_refs, *pipeline]))


def papers_for(config) -> list[Paper]:
    """Papers behind a config (see :func:`cited_papers`), and Matryoshka training's where it trained with it."""
    from ..matryoshka import MATRYOSHKA
    from ..objectives import objective_specs

    papers = cited_papers(getattr(config, "method", DEFAULT_METHOD), [spec.loss for spec in objective_specs(config)])
    return [*papers, MATRYOSHKA] if getattr(config, "matryoshka_dims", None) else papers


def citations_section(papers: Iterable[Paper]) -> str:
    return "\n\n".join(f"{paper.name} — [{paper.title}]({paper.url}) ({paper.short}):\n\n```bibtex\n{paper.bibtex}\n```"
                       for paper in papers)


# --------------------------------------------------------------------------------------------- method
def loss_summary(loss: str) -> str:
    """The first line of the loss class's docstring, up to its reference parenthesis (the card cites the paper
    itself); empty for a loss this installation lacks."""
    cls = _loss_class(loss)
    doc = (inspect.getdoc(cls) or "").strip() if cls is not None else ""
    if not doc:
        return ""
    # even chunks are prose, odd ones code (``...``): the reference parenthesis is in prose
    chunks = doc.splitlines()[0].split("``")
    for i in range(0, len(chunks), 2):
        if " (" in chunks[i]:
            chunks = [*chunks[:i], chunks[i].split(" (", 1)[0]]
            break
    summary = "`".join(chunks).rstrip(" .")
    words = summary.split()
    # it continues a card sentence: lower-case an ordinary first word ("Dimension-wise contrastive loss"), keep
    # names ("InfoNCE with...", "Barlow Twins with...")
    if len(words) > 1 and words[0][1:].islower() and words[1][:1].islower():
        summary = summary[0].lower() + summary[1:]
    return summary


def loss_hyperparameters_of(loss: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every hyperparameter of ``loss``: the given ones over the loss's defaults."""
    from ..losses import loss_defaults

    try:
        values = loss_defaults(loss)
    except ValueError:  # not registered in this installation: show what the config holds
        return dict(given)
    values.update(given)
    return values


def _paper_link(paper: Paper) -> str:
    return f"[{paper.name}]({paper.url}) ({paper.short})"


def _method_class(config):
    """The config's method model class, whose declarations the card reads; the base class's for a method this
    installation lacks."""
    from ..models import CSEPreTrainedModel, method_of

    return method_of(config) or CSEPreTrainedModel


def _training_only_parts(config) -> str:
    """The method's ``training_only_parts`` in words ("projection head, RTD discriminator and generator"), without the
    projection head of a model that had none (``projector="none"``); "" when nothing is left."""
    parts = [part for part in _method_class(config).training_only_parts
             if not (part == "projection head" and getattr(config, "projector", None) == "none")]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def method_section(config, papers: list[Paper], pair_data: Mapping[str, Any] | None = None) -> str:
    from ..objectives import objective_specs

    main = papers[0]
    code = f", [code]({main.code})" if main.code else ""  # a paper whose authors published no code
    lines = [f"**{main.name}** — {', '.join(main.authors)}, *{main.title}*, {main.venue} ([paper]({main.url}){code})."]
    specs = objective_specs(config)
    lines += ["", "Training objective" + (f": the weighted sum of {len(specs)} objectives." if len(specs) > 1 else ":")]
    for spec in specs:
        cls = _loss_class(spec.loss)
        summary = loss_summary(spec.loss)
        source = f", from {_paper_link(cls.references[0])}" if cls is not None and cls.references else ""
        weight = f" with weight {spec.weight:g}" if len(specs) > 1 else ""
        lines += ["", f"* `{spec.name}`: loss `{spec.loss}`{weight}" + (f" — {summary}" if summary else "")
                  + source + "."]
        hyperparameters = loss_hyperparameters_of(spec.loss, spec.hyperparameters)
        if hyperparameters:
            lines += ["", kv_table(("Loss hyperparameter", "Value"), hyperparameters)]
    lines += [line for term in getattr(config, "card_training_terms", []) for line in ("", f"* {term}")]
    if getattr(config, "off_dropout", False):
        lines += ["", "Negatives come from a third, dropout-free encoder pass (ImSimCSE's off-dropout sampling)."]
    hard = bool(pair_data and pair_data.get("hard_negative"))
    views = (f"{_method_class(config).training_views} are encoded in one forward pass (SimCSE); the other "
             "sentences of the batch are the negatives.") if not pair_data else (
        "Each training row's anchor and positive" + (" and hard negative" if hard else "")
        + " are encoded in one forward pass (supervised SimCSE); the other rows' positives"
        + (" and every row's hard negative" if hard else "") + " are the negatives.")
    parts = _training_only_parts(config)
    lines += ["", views + (f" Training-only parts ({parts}) are not part of this model unless listed in the module "
                           "stack above." if parts else "")]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- training
def training_data_section(info: Mapping[str, Any]) -> str:
    data = info.get("data") or {}
    if not data:
        return "Not recorded for this export (no training information was given)."
    rows = []
    source = data.get("dataset_name") or data.get("source")
    if source:
        rows.append(("Source", fmt(source) + (f" (config `{data['dataset_config_name']}`)"
                                             if data.get("dataset_config_name") else "")))
    pair = data.get("pair_data")
    if pair:  # supervised rows: anchor, positive[, hard negative] columns
        views = f"anchor `{pair['anchor']}`, positive `{pair['positive']}`" + (
            f", hard negative `{pair['hard_negative']}`" if pair.get("hard_negative") else "")
        rows.append(("Trained on", f"{pair['kind']} ({views}); each row's texts are encoded together, the other "
                                   "rows' positives" + (" and hard negatives" if pair.get("hard_negative") else "")
                     + " are the negatives"))
        if data.get("num_rows") is not None:
            rows.append((f"Training {pair['kind']}", f"{int(data['num_rows']):,}"))
    if data.get("num_sentences") is not None:
        count = int(data["num_sentences"])
        epoch = (info.get("train_metrics") or {}).get("epoch")
        part = (f" (the run trained {epoch:.3g} of an epoch: about {round(epoch * count):,} of them)"
                if isinstance(epoch, (int, float)) and 0 < epoch < 1 else "")
        rows.append(("Training sentences", f"{count:,}{part}"))
    if data.get("max_seq_length") is not None:
        rows.append(("Training truncation length", f"{data['max_seq_length']} tokens"))
    rows += [(k.replace("_", " ").capitalize(), fmt(v)) for k, v in sorted(data.items())
             if k not in ("source", "dataset_name", "dataset_config_name", "num_sentences", "max_seq_length",
                          "pair_data", "num_rows")
             and v is not None]
    return table(("Property", "Value"), rows)


def method_fields(config) -> dict[str, tuple[Any, str]]:
    """The hf_cse fields of a config (declared by CSEConfig and its method subclasses, not by ``PretrainedConfig``)
    in declaration order, as ``name -> (value, meaning)``; the meaning is the field's ``help`` metadata (the bare
    name where a field has none). The objectives are left out: :func:`method_section` lists them."""
    from transformers import PretrainedConfig

    # the encoder's own config is the "Model details" section; the objectives are the method section's
    generic = {f.name for f in dataclasses.fields(PretrainedConfig)} | {"encoder_config", "objectives"}
    return {f.name: (getattr(config, f.name), f.metadata.get("help") or f.name)
            for f in dataclasses.fields(config) if f.name not in generic}


def hyperparameters_section(config, info: Mapping[str, Any]) -> str:
    rows = [(f"`{name}`", fmt(value), " ".join(str(meaning).split()).replace("|", "\\|"))
            for name, (value, meaning) in method_fields(config).items()
            if name not in ("base_encoder", "base_encoder_local")]
    parts = ["Method configuration (`config.json` of the hf_cse checkpoint; the objectives are listed above):", "",
             table(("Field", "Value", "Meaning"), rows)]
    args = {k: v for k, v in (info.get("training_args") or {}).items() if not _PRIVATE_ARG.search(k)}
    if args:
        world = int(info.get("world_size") or args.get("world_size") or 1)
        main = [(f"`{k}`", fmt(args[k])) for k in MAIN_TRAINING_ARGS if k in args]
        if "per_device_train_batch_size" in args:
            total = global_batch_size(args["per_device_train_batch_size"], world) * int(
                args.get("gradient_accumulation_steps") or 1)
            main.insert(2, ("global batch size", f"{total} ({world} process{'es' if world != 1 else ''})"))
        rest = [(f"`{k}`", fmt(v)) for k, v in sorted(args.items())
                if k not in MAIN_TRAINING_ARGS and v is not None and v != "" and v != [] and v != {}]
        parts += ["", "Training arguments (`transformers.TrainingArguments`):", "", table(("Argument", "Value"), main)]
        if rest:
            # every value the run used, defaults and those the trainer sets itself (e.g. eval_on_start) included
            parts += ["", "<details><summary>All other training arguments of the run</summary>", "",
                      table(("Argument", "Value"), rest), "", "</details>"]
    else:
        parts += ["", "Training arguments were not recorded for this export."]
    metrics = {k: v for k, v in (info.get("train_metrics") or {}).items() if is_number(v)}
    if metrics:
        parts += ["", "Training run:", "", kv_table(("Metric", "Value"), metrics)]
    shown = _INFO_SHOWN_ELSEWHERE | ({"dev"} if dev_change_line(info.get("dev")) else set())  # in words, above
    other = {k: v for k, v in info.items() if k not in shown and v is not None}
    if other:
        parts += ["", "Other training information:", "", kv_table(("Key", "Value"), other)]
    return "\n".join(parts)


def training_curves_section(info: Mapping[str, Any]) -> str:
    """A link to the curves image copied beside the card (``info["training_curves"]``: its file name)."""
    name = info.get("training_curves")
    if not name:
        return ""
    return (f"### Training curves\n\n![Loss terms, positive/negative cosine, gradient diagnostics and dev metrics "
            f"over the training steps]({name})")
