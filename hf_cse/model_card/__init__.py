"""Model cards (README.md) for exported sentence-transformers folders, rendered through ``huggingface_hub``.

The metadata header is a ``huggingface_hub.ModelCardData`` (with ``EvalResult`` entries for the ``model-index``);
the text is ``ModelCard.from_template`` on the jinja template ``resources/model_card_template.md``.
sentence-transformers' own card machinery supplies the usage snippet and the library versions; the method,
objectives, hyperparameters, evaluation results and citations are hf_cse's (:mod:`.sections`, :mod:`.results`,
:mod:`.extra_scores`), read from what defines the run:

* the hf_cse config (method, pooler, projector, objectives and every method field, including fields that
  subclasses such as DiffCSE add),
* ``training_info``: what ``run_unsup.py`` records about the run (see :func:`render_model_card`),
* ``eval_results``: ``run_eval.py``'s ``results.json`` (Spearman x 100 per STS task, accuracy per transfer task, MTEB
  main scores, the user's own scored pairs),
* the papers of the method model and of its losses (their ``references``, :mod:`hf_cse.references`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from ..encoders import DEFAULT_ENCODER_HUB_ID, is_packaged_encoder
from ..presets import DEFAULT_METHOD
from ..seams import with_snippet_dimension
from ..zero_loss import ZERO_LOSS_KEY
from .results import (
    KEPT_UNTRAINED,
    ZERO_LOSS,
    ModelCardError,
    eval_scores,
    eval_settings,
    evaluation_section,
    kept_untrained,
    model_index_results,
    read_eval_results,
)
from .sections import (
    citations_section,
    cited_papers,
    hyperparameters_section,
    loss_hyperparameters_of,
    method_fields,
    method_section,
    papers_for,
    training_curves_section,
    training_data_section,
)
from .text import fmt, table

__all__ = [
    "ModelCardError",
    "base_encoder_unknown",
    "card_metadata",
    "cited_papers",
    "eval_scores",
    "eval_settings",
    "loss_hyperparameters_of",
    "method_fields",
    "papers_for",
    "read_eval_results",
    "render_model_card",
    "resolve_base_model",
]

TEMPLATE = Path(__file__).resolve().parent.parent / "resources" / "model_card_template.md"
_HUB_ID = r"[\w.-]+(/[\w.-]+)?"


def resolve_base_model(base_encoder: str | None, local: bool | None = None) -> str | None:
    """The Hub id of the encoder training started from, when there is one.

    ``local``: the config's ``base_encoder_local``, what the training recorded (None: a checkpoint from before it
    was). Hub ids pass through; a local Hub-cache snapshot (``models--org--name/snapshots/...``) and the packaged
    default encoder map to their repos; other local folders have no Hub id (None), found or not. An older record
    that is neither a folder from here nor an absolute path (``models/stbert``: a folder relative to where training
    ran, or a Hub id) counts as a Hub id only where this machine's Hub cache holds that repo; else None.
    """
    if not base_encoder:
        return None
    path = Path(base_encoder).expanduser()
    if local is False or _older_relative_record(base_encoder, local):
        hub_id = base_encoder if re.fullmatch(_HUB_ID, base_encoder) else None
        return hub_id if local is False or (hub_id and _in_hub_cache(hub_id)) else None
    match = re.search(r"models--([^/\\]+)--([^/\\]+)[/\\]snapshots", str(path.resolve()))
    if match:
        return f"{match.group(1)}/{match.group(2)}"
    return DEFAULT_ENCODER_HUB_ID if path.exists() and is_packaged_encoder(path) else None


def base_encoder_unknown(config) -> bool:
    """Whether the card cannot tell a local encoder from a Hub id: an older record, shaped like a Hub id, that
    :func:`resolve_base_model` does not find in the Hub cache."""
    base, local = config.base_encoder, getattr(config, "base_encoder_local", None)
    return bool(base) and _older_relative_record(base, local) and re.fullmatch(_HUB_ID, base) is not None \
        and not _in_hub_cache(base)


def _older_relative_record(base_encoder: str, local: bool | None) -> bool:
    """A record from before ``base_encoder_local`` that is neither a folder from here nor an absolute path."""
    path = Path(base_encoder).expanduser()
    return local is None and not path.exists() and not path.is_absolute()


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # a name the Hub client refuses as a repo id
        return False


def card_metadata(text: str) -> dict[str, Any]:
    """The YAML header of a model card as a dict."""
    from huggingface_hub import ModelCard

    return ModelCard(text, ignore_metadata_errors=False).data.to_dict()


# ------------------------------------------------------------------------------- from sentence-transformers
@functools.cache
def _export_card_data_class():
    """sentence-transformers' card data that knows the export's dimension without loading the export."""
    from sentence_transformers import SentenceTransformerModelCardData

    @dataclass
    class ExportCardData(SentenceTransformerModelCardData):
        embedding_dimension: int | None = None

    return with_snippet_dimension(ExportCardData)


def _sentence_transformers_card(model_id: str, embedding_dimension: int, model=None):
    """sentence-transformers' card data, for its usage snippet (with the similarities of its example sentences
    when the exported ``model`` is given) and its library versions."""
    card = _export_card_data_class()(local_files_only=True, generate_widget_examples=model is not None,
                                     embedding_dimension=embedding_dimension)
    card.model_id = model_id  # after construction: sentence-transformers keeps only "org/name" ids, a folder is fine
    if model is not None:
        card.register_model(model)
    card.run_usage_snippet()  # sets the example sentences (and, with a model, their similarities)
    return card


def _versions_section(versions: Mapping[str, str]) -> str:
    from .. import __version__

    rows = [("hf_cse", __version__)] + [(name.replace("_", "-"), version) for name, version in versions.items()]
    try:
        rows.append(("huggingface_hub", metadata.version("huggingface_hub")))
    except metadata.PackageNotFoundError:  # pragma: no cover - a dependency of sentence-transformers
        pass
    return table(("Library", "Version"), rows)


# --------------------------------------------------------------------------------------------- hf_cse sections
def _card_data(config, model_id: str, base_model: str | None, results: list, info: Mapping[str, Any],
               examples: list[str]):
    from huggingface_hub import ModelCardData

    from ..objectives import objective_specs

    tags = ["sentence-transformers", "sentence-similarity", "feature-extraction", "hf_cse", "contrastive-learning",
            "unsupervised", getattr(config, "method", DEFAULT_METHOD), *(spec.loss for spec in objective_specs(config))]
    data = info.get("data") or {}
    datasets = info.get("datasets") or ([data["dataset_name"]] if data.get("dataset_name") else None)
    return ModelCardData(
        library_name="sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=list(dict.fromkeys(tags)),
        base_model=base_model,
        datasets=datasets,
        language=info.get("language"),
        license=info.get("license"),
        model_name=model_id if results else None,
        eval_results=results or None,
        widget=[{"source_sentence": examples[0], "sentences": examples[1:]}] if len(examples) > 1 else None,
    )


def _summary(config, papers, embedding_dim: int, base_label: str) -> str:
    from ..objectives import objective_specs

    main = papers[0]
    names = [f"`{spec.loss}`" for spec in objective_specs(config)]
    losses = ("loss " if len(names) == 1 else "losses ") + " + ".join(names)
    return (
        f"A [sentence-transformers](https://www.sbert.net) model that maps sentences to a {embedding_dim}-dimensional "
        f"dense vector space. It was trained without labels with **{main.name}** ([{main.title}]({main.url}), "
        f"{main.short}) — method `{getattr(config, 'method', 'simcse')}`, {losses} — starting from "
        f"{base_label}, with hf_cse (unsupervised contrastive sentence embeddings on the Hugging Face Trainer)."
    )


def _model_details(config, export: Mapping[str, Any], base_label: str, untrained: bool = False) -> str:
    """The model-details table; ``untrained``: the run kept the untrained encoder (:func:`kept_untrained`), so no
    row may say what training gave these weights."""
    enc = config.encoder_config
    enc = enc if isinstance(enc, Mapping) else enc.to_dict()
    rows = [
        ("Base encoder", base_label),
        ("Architecture", fmt(enc.get("model_type"))),
        ("Layers", fmt(enc.get("num_hidden_layers", enc.get("n_layers")))),
        ("Hidden size", fmt(config.hidden_size)),
        ("Output dimension", fmt(export["embedding_dimension"])),
        ("Maximum sequence length", f"{export['max_seq_length']} tokens"),
        ("Similarity function", "cosine"),
        ("Pooling", export["pooling_description"]),
        ("Projection head", export["projector_description"]),
    ]
    if export.get("adapter_description"):
        rows.append(("Adapters", "none in effect: the LoRA training was discarded with the rest of training (these "
                     "are the untrained encoder's weights)" if untrained else export["adapter_description"]))
    if export.get("onnx_description"):
        rows.append(("ONNX", export["onnx_description"]))
    if getattr(config, "matryoshka_dims", None):
        dims, weights = config.matryoshka_dims, config.matryoshka_weights
        if untrained:
            rows.append(("Matryoshka dimensions", f"not trained: the training at {', '.join(map(str, dims))} was "
                         "discarded with the rest of training (these are the untrained encoder's weights), so its "
                         "leading coordinates were never trained as an embedding of their own; serve the whole "
                         "embedding"))
        else:
            rows.append(("Matryoshka dimensions", f"trained at {', '.join(map(str, dims))} (loss weights "
                         f"{', '.join(f'{w:g}' for w in weights)}): the first d coordinates are an embedding on their "
                         f"own; `SentenceTransformer(..., truncate_dim={dims[-1]})` serves them, not normalised "
                         "again: compare them by cosine similarity (the model's own), not by dot product"
                         + _untrained_tail(dims[0], export["embedding_dimension"])))
    modules = "\n".join(f"  ({i}): {m}" for i, m in enumerate(export["modules"]))
    return table(("Property", "Value"), rows) + f"\n\nModule stack:\n\n```\nSentenceTransformer(\n{modules}\n)\n```"


def _untrained_tail(widest: int, width) -> str:
    """What the Matryoshka row adds where the widest trained prefix is narrower than the served embedding."""
    if not isinstance(width, int) or widest >= width:
        return ""
    return (f". The coordinates past the first {widest} were given no training signal (the full {width} were not "
            f"among the dimensions trained), yet the model serves all {width} by default: load it with "
            f"`truncate_dim={widest}`")


# --------------------------------------------------------------------------------------------- rendering
def _is_local_folder(model_id: str) -> bool:
    """Whether ``model_id`` names a folder here rather than a Hub repo (``user/name``): a path that is absolute, starts
    with ``.`` or ``~``, has no or several ``/``, or whose first part is a folder here (``outputs/st``)."""
    path = Path(model_id).expanduser()
    return (path.is_absolute() or model_id.startswith((".", "~")) or model_id.count("/") != 1
            or path.exists() or Path(model_id.split("/")[0]).is_dir())


def _usage_snippet(st_card, model_id: str, export: Mapping[str, Any]) -> str:
    """sentence-transformers' usage snippet; with ``trust_remote_code=True`` where the folder ships its own code
    (``export["custom_code"]``), ``revision=`` where it is pushed to a branch (``export["revision"]``), and for an
    export made for no Hub repo, loading from its folder (a push renders the card again for its repo)."""
    snippet = st_card.generate_usage_snippet()
    if _is_local_folder(model_id):
        snippet = snippet.replace("# Download from the 🤗 Hub", "# Load it from its folder (pushed to the Hub: by its "
                                  "repo id)")
    extra = (f', revision="{export["revision"]}"' if export.get("revision") else "") + \
        (", trust_remote_code=True" if export.get("custom_code") else "")
    return snippet.replace(f'SentenceTransformer("{model_id}")', f'SentenceTransformer("{model_id}"{extra})')


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
            ``projector_description``, ``modules`` (one line per sentence-transformers module); optional
            ``limitations_extra`` (a Markdown bullet) and ``model`` (the exported ``SentenceTransformer``: the
            usage snippet then shows its similarities for the example sentences); ``custom_code`` (the folder
            ships its own module code: the snippet loads it with ``trust_remote_code=True``); ``revision`` (the
            branch of the repo it is pushed to: the snippet loads that).
        eval_results: ``run_eval.py``'s ``results.json`` (path, dict or ``EvalResults``).
        training_info: what run_unsup.py records: ``training_args`` (``TrainingArguments.to_dict()``), ``data``
            (``source``, ``dataset_name``, ``num_sentences``, ``max_seq_length``), ``train_metrics``,
            ``world_size``, ``training_curves``; optional ``base_model`` / ``datasets`` / ``language`` /
            ``license`` for the metadata. Other keys are listed as they are.
        title: the card's heading (default: method and base encoder).
    """
    from huggingface_hub import ModelCard

    info = dict(training_info or {})
    results = read_eval_results(eval_results)
    untrained = kept_untrained(info.get("dev"))
    if untrained:  # the kept head, if any, is the untrained encoder's too: every section says the pooling so
        export = {**export, "pooling_description": export["pooling_description"].replace(
            ", then the trained `", ", then the untrained `")}
    papers = papers_for(config)
    base_model = info.get("base_model") or resolve_base_model(config.base_encoder,
                                                              getattr(config, "base_encoder_local", None))
    if base_model:
        base_label = f"[{base_model}](https://huggingface.co/{base_model})"
    elif base_encoder_unknown(config):
        base_label = (f"an encoder recorded as `{config.base_encoder}` (a folder relative to where training ran, or "
                      "a Hub id: this checkpoint does not say which)")
    elif config.base_encoder:
        base_label = f"a local encoder (`{Path(config.base_encoder).name}`)"
    else:
        base_label = "an encoder that was not recorded"
    base_name = Path(config.base_encoder).name if config.base_encoder else "an unrecorded encoder"
    train_len = (info.get("data") or {}).get("max_seq_length")
    st_card = _sentence_transformers_card(model_id, export["embedding_dimension"], export.get("model"))
    card_data = _card_data(config, model_id, base_model, model_index_results(results), info,
                           list(st_card.usage_examples))
    try:
        card = ModelCard.from_template(
            card_data,
            template_path=str(TEMPLATE),
            title=title or f"{papers[0].name} sentence embeddings from {base_model or base_name}",
            summary=_summary(config, papers, export["embedding_dimension"], base_label)
            + (f"\n\n{KEPT_UNTRAINED}" if untrained else "")
            + (f"\n\n{ZERO_LOSS}" if info.get(ZERO_LOSS_KEY) is True else ""),
            usage_snippet=_usage_snippet(st_card, model_id, export),
            loading=("the folder's own module code (see the limitations) loads with `trust_remote_code=True`"
                     if export.get("custom_code") else "the model loads without custom code"),
            model_details=_model_details(config, export, base_label, untrained),
            method=method_section(config, papers, (info.get("data") or {}).get("pair_data")),
            training_data=training_data_section(info),
            hyperparameters=hyperparameters_section(config, info),
            training_curves=training_curves_section(info),
            evaluation=evaluation_section(results, export["pooling_description"], info.get("dev"),
                                          getattr(config, "dev_scoring_note", None)),
            max_seq_length=export["max_seq_length"],
            training_length=f"sentences truncated to {train_len} tokens" if train_len else "short sentences",
            limitations_extra=export.get("limitations_extra", ""),
            versions=_versions_section(st_card.version),
            citations=citations_section(papers),
        )
    except ValueError as err:  # the header did not parse back as card metadata
        raise ModelCardError(f"the rendered model card is not valid ({err}); this is a bug in hf_cse.model_card.") \
            from err
    return card.content
