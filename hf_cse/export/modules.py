"""The sentence-transformers modules of an export: Transformer (the trained encoder and its tokenizer), Pooling
(the method's test pooler) and, when the head is kept, the projector's own Dense form
(``to_sentence_transformers()`` in :mod:`hf_cse.models.heads`); plus the published hf_cse config."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..model_card import resolve_base_model
from ..models.loading import follows_saved_is_causal, without_load_reports
from ..models.lora import adapter_settings
from ..padding import without_unread_segment_ids
from .errors import ExportError

HF_CSE_CONFIG_FILE = "hf_cse_config.json"


def projector_to_dense(projector: nn.Module) -> list[nn.Module]:
    """The projection head as sentence-transformers ``Dense`` modules (same function in eval mode)."""
    to_modules = getattr(projector, "to_sentence_transformers", None)
    if to_modules is None:
        raise ExportError(f"no sentence-transformers equivalent for projector {type(projector).__name__}; "
                          "export without keep_projector.")
    try:
        return to_modules()
    except ValueError as err:  # e.g. a BatchNorm head without running statistics
        raise ExportError(str(err)) from err


def write_modules(folder: Path, encoder, tokenizer, pooling_mode: str, dense: list, max_seq_length: int,
                  prompt: str | None = None, normalize: bool = False,
                  own=None) -> tuple[int, list[str], bool]:
    """Save Transformer + Pooling (+ Dense) (+ Normalize) as a sentence-transformers model in ``folder``; returns the
    Transformer's dimension, the names of the pooler weights it added (:func:`fill_unused_pooler`) and whether it
    pinned a bidirectional decoder to eager attention (:func:`pin_eager_where_needed`). The encoder goes
    through a staging folder because sentence-transformers builds its Transformer module from a path. ``encoder``
    must be a plain transformers model (LoRA adapters merged: :func:`hf_cse.models.lora.merged_encoder`); ``prompt``
    becomes the export's default prompt. ``own``: the method's own input and pooling modules
    (:class:`hf_cse.models.outputs.OwnExportModules`) in place of Transformer + Pooling; their code files go into the
    folder, and ``modules.json`` names them there (``file.Class``)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    staging = folder / ".encoder"
    encoder.save_pretrained(staging)
    without_unread_segment_ids(tokenizer, encoder.config).save_pretrained(staging)
    # built as every later load builds it, a copy sentence-transformers saves included (AutoModel with transformers'
    # default attention: BERT's with the pooler layer hf_cse trains without, whose weights are missing here, as
    # expected, and filled below)
    with without_load_reports():
        if own is None:
            transformer = Transformer(str(staging), max_seq_length=max_seq_length)
        else:
            transformer = own.build_transformer(str(staging), max_seq_length, {})
    filled = fill_unused_pooler(transformer.auto_model, encoder)
    model_kwargs = pin_eager_where_needed(transformer.auto_model)
    dim = transformer.get_embedding_dimension()
    pooling = Pooling(dim, pooling_mode=pooling_mode) if own is None else own.pooling
    modules = [transformer, pooling, *dense, *([Normalize()] if normalize else [])]
    prompts = {"query": prompt, "document": prompt} if prompt else None
    st = SentenceTransformer(modules=modules, device="cpu", similarity_fn_name="cosine", prompts=prompts,
                             default_prompt_name="query" if prompt else None)
    st.save(str(folder), create_model_card=False)
    del st, transformer
    shutil.rmtree(staging)
    if own is not None:
        ship_own_code(folder, own.code_files)
    if model_kwargs:  # sentence-transformers does not save model_kwargs (nor keeps them when it saves a copy)
        st_config = folder / "sentence_bert_config.json"
        data = json.loads(st_config.read_text())
        data["model_kwargs"] = model_kwargs
        st_config.write_text(json.dumps(data, indent=4) + "\n")
    return dim, filled, bool(model_kwargs)


def pin_eager_where_needed(loaded) -> dict:
    """The ``model_kwargs`` a bidirectional decoder's export needs: none where transformers follows the
    ``is_causal: false`` of its ``config.json`` on batches without padding (transformers 5.24: every architecture
    hf_cse turns bidirectional), so the export and every copy sentence-transformers saves of it load alike;
    otherwise eager attention, which follows the (bidirectional) mask alone (:func:`follows_saved_is_causal`),
    set on ``loaded`` too. A copy loses that setting: the card says so (``EAGER_NOTE``)."""
    if getattr(loaded.config, "is_causal", True) is not False or follows_saved_is_causal(loaded):
        return {}
    loaded.set_attn_implementation("eager")
    return {"attn_implementation": "eager"}


def fill_unused_pooler(loaded: nn.Module, trained: nn.Module) -> list[str]:
    """Give ``loaded`` (the encoder as ``AutoModel`` builds it) fixed values for the weights ``trained`` lacks -- BERT's
    and RoBERTa's pooler layer, which hf_cse trains without and no export embedding uses: an identity matrix for a
    square weight, zeros for the rest (``pooler_output`` is then tanh of the [CLS] vector). The export thus holds
    every weight its architecture has: a plain load, and a load of a copy sentence-transformers saves again, reports
    none missing and initialises none at random (``model_kwargs`` leaving the pooler out would not survive that
    copy). Returns their names (none for DistilBERT, which has no pooler)."""
    have = {name for name, _ in trained.named_parameters()}
    filled = [name for name, _ in loaded.named_parameters() if name not in have]
    with torch.no_grad():
        for name in filled:
            weight = loaded.get_parameter(name)
            square = weight.dim() == 2 and weight.shape[0] == weight.shape[1]
            weight.copy_(torch.eye(weight.shape[0], dtype=weight.dtype) if square else torch.zeros_like(weight))
    return filled


def ship_own_code(folder: Path, code_files) -> None:
    """Copy a method's module code into the export and name its classes in ``modules.json`` by file (``file.Class``),
    so that sentence-transformers loads them from the folder (``trust_remote_code=True``), without hf_cse."""
    stems = {Path(f).stem for f in code_files}
    for code in code_files:
        shutil.copy(code, folder / Path(code).name)
    listing = folder / "modules.json"
    modules = json.loads(listing.read_text())
    for entry in modules:
        module_path, _, cls = entry["type"].rpartition(".")
        if module_path.rpartition(".")[2] in stems:
            entry["type"] = f"{module_path.rpartition('.')[2]}.{cls}"
    listing.write_text(json.dumps(modules, indent=2) + "\n")


#: the card's words for each sentence-transformers Pooling mode an export writes
POOLING_WORDS = {"cls": "CLS token of the last layer (hf_cse `cls_before_pooler`)",
                 "mean": "mean of the last layer over non-padding tokens (hf_cse `avg`)",
                 "max": "element-wise maximum of the last layer over non-padding tokens (hf_cse `max`)",
                 "lasttoken": "last non-padding token of the last layer (hf_cse `last`)"}


def describe(config, pooling_mode: str, dense_modules: list, keep_projector: bool,
             pooling_words: str | None = None) -> dict[str, str]:
    """The card's one-line descriptions of the pooling (and why the model pools so; ``pooling_words``: a method's own
    pooling) and of the projection head."""
    pooling = pooling_words or POOLING_WORDS[pooling_mode]
    if dense_modules:
        pooling += f", then the trained `{config.projector}` projection head"
    if config.normalize:
        pooling += ", L2-normalised"
    if config.pooler_source and not pooling_words:
        pooling += f" ({config.pooler_source})"
    if dense_modules:
        why = "kept on request (keep_projector)" if keep_projector and config.mlp_only_train else "used at test time"
        projector = f"`{config.projector}` head as {len(dense_modules)} Dense module(s), {why}"
    elif config.projector == "none":
        projector = "none (the method has no head)"
    else:
        projector = f"none: the training-only `{config.projector}` head was dropped (mlp_only_train)"
    return {"pooling_description": pooling, "projector_description": projector}


def describe_adapters(config) -> str | None:
    """The card's line on LoRA adapters (None without them)."""
    settings = adapter_settings(config)
    if settings is None:
        return None
    targets = settings["target_modules"]
    return (f"trained with LoRA (r={settings['r']}, alpha={settings['alpha']:g}, dropout={settings['dropout']:g}, "
            f"target modules: {targets if isinstance(targets, str) else ', '.join(targets)}); the adapters are "
            "merged into these weights in fp32 (no peft needed)"
            + (f"; the weights are saved in fp32, though the encoder trained with {config.encoder_dtype} weights "
               "(merged into those, the update would be rounded away in part)"
               if getattr(config, "encoder_dtype", "fp32") != "fp32" else ""))


def without_local_paths(value: Any, name_of=lambda path: Path(path).name) -> Any:
    """``value`` with every absolute path (a string, at any depth of dicts and lists) replaced by ``name_of(path)``:
    by default the folder's name; nothing machine-local is published."""
    if isinstance(value, Mapping):
        return {k: without_local_paths(v, name_of) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [without_local_paths(v, name_of) for v in value]
    if isinstance(value, str) and len(value) > 1 and Path(value).is_absolute():
        return name_of(value)
    return value


def public_config_dict(config) -> dict[str, Any]:
    """The hf_cse config for publishing: local paths (base encoder, generator...) become Hub ids or folder names."""
    data = without_local_paths(config.to_dict(), lambda path: resolve_base_model(path) or Path(path).name)
    if data.get("base_encoder_local") and resolve_base_model(config.base_encoder, local=True):
        data["base_encoder_local"] = False  # published as its Hub id (the packaged encoder, a Hub-cache snapshot)
    return data
