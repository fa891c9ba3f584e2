"""The export itself: an hf_cse model written as a sentence-transformers folder with its model card
(what the folder holds, and how it is checked and committed: :mod:`hf_cse.export`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..checks import check_path_given
from ..encoders import encoder_max_length
from ..folder_lock import hold_folder, releases_folder_locks
from ..model_card import read_eval_results, render_model_card
from ..models.lora import merged_encoder
from ..models.pooling import ST_POOLING_MODES, applies_projector, exported_pooler
from ..tokenizer_match import check_room_for_text
from .card import card_title, record_card_inputs
from .checkpoint import load_model, load_tokenizer
from .errors import ExportError
from .folders import atomic_output_dir, check_export_folder, recover_leftovers, repoint_run_folder
from .modules import (
    HF_CSE_CONFIG_FILE,
    describe,
    describe_adapters,
    projector_to_dense,
    public_config_dict,
    write_modules,
)
from .onnx import check_onnx_backend, describe_onnx, write_onnx
from .sources import (
    MAX_EXPORT_LENGTH,
    check_clear_of_source,
    check_export_length,
    check_onnx_head,
    check_results_export_weights,
    check_results_length,
    check_results_model,
    check_results_pooler,
    export_length,
    source_config,
    unexportable_pooler,
)
from .training_info import for_checkpoint
from .verify import verify_export

logger = logging.getLogger(__name__)

#: the card's line for an export with a method's own modules (sentence-transformers imports them only when trusted)
OWN_CODE_NOTE = ("* **Custom modules**: the input and pooling modules are this folder's own code (`modules.json`); "
                 "load with `SentenceTransformer(folder, trust_remote_code=True)` -- sentence-transformers imports no "
                 "module outside its package without it. They need torch and sentence-transformers only.")
#: the card's line for an encoder given the pooler layer it was trained without (modules.fill_unused_pooler)
POOLER_NOTE = ("* **Pooler layer**: the encoder's `pooler` layer (`pooler_output`; `AutoModel` builds one for this "
               "architecture) was not trained and is no part of the embedding; it holds fixed weights (identity "
               "matrix, zero bias), so that every load finds all weights.")
#: the card's line for a bidirectional decoder pinned to eager attention (modules.pin_eager_where_needed)
EAGER_NOTE = ("* **Attention**: this bidirectional encoder loads with eager attention (`model_kwargs` of "
              "`sentence_bert_config.json`): the transformers it was exported with attends causally on a batch "
              "without padding under SDPA / flash attention, whatever `is_causal: false` in `config.json` says. "
              "sentence-transformers does not keep `model_kwargs` when it saves a copy: load a copy with "
              "`SentenceTransformer(copy, model_kwargs={\"attn_implementation\": \"eager\"})` (hf_cse's own loaders "
              "need nothing).")


@releases_folder_locks
def to_sentence_transformer(
    model_or_path,
    out_dir,
    tokenizer=None,
    keep_projector: bool = False,
    max_seq_length: int | None = None,
    overwrite: bool = False,
    eval_results: Mapping[str, Any] | str | Path | None = None,
    training_info: Mapping[str, Any] | None = None,
    *,
    repo_id: str | None = None,
    verify: bool = True,
    backend: str = "torch",
    quantize: str | None = None,
) -> Path:
    """Write an hf_cse model as a sentence-transformers folder with a model card; returns the folder.

    Args:
        model_or_path: an hf_cse model, or a folder / Hub id of a saved one.
        out_dir: the folder to create (must be empty or absent unless ``overwrite``).
        tokenizer: tokenizer object or name; default: the checkpoint's, else the base encoder's.
        keep_projector: also keep a training-only projection head (the export then gives SimCSE's ``cls``
            embedding, MLP included). Heads used at test time (``mlp_only_train=False``) are always kept.
        max_seq_length: truncation length of the export, in [2, the encoder's position limit]; default: the
            sentence-transformers encoder's own length (``config.encoder_max_seq_length``), else the encoder's
            limit, at most 512 (see module doc).
        overwrite: replace a non-empty ``out_dir``.
        eval_results: ``run_eval.py``'s ``results.json`` (path or dict), shown in the card and its metadata; the
            model it names must be the exported checkpoint or ``out_dir``, or an export whose recorded weights are
            those this export writes (``<run>/sentence-transformers``) (:mod:`hf_cse.export.sources`).
        training_info: what the run recorded (see :func:`training_info_from_run`), shown in the card; for one of
            the run's ``checkpoint-<step>`` folders only what is true of it (:func:`.training_info.for_checkpoint`).
        repo_id: Hub repo the card's usage snippet names (default: ``out_dir``); a push to another repo renders
            the card again for it.
        verify: reload the export and compare with the model before committing it.
        backend: ``"onnx"`` also writes ``onnx/model.onnx`` for ``SentenceTransformer(out_dir, backend="onnx")``
            (:mod:`hf_cse.export.onnx`; checked against the PyTorch module); ``quantize="int8"`` adds its dynamic
            int8 quantisation.
    """
    check_path_given(out_dir if isinstance(out_dir, str) else str(out_dir), "out_dir")
    check_onnx_backend(backend, quantize)  # a missing package fails before anything is loaded
    out_dir = Path(out_dir).expanduser()
    hold_folder(out_dir, "out_dir")  # one export at a time into a folder; released when this function ends
    recover_leftovers(out_dir)
    source = source_config(model_or_path)
    check_onnx_head(backend, source, keep_projector)
    check_clear_of_source(out_dir, model_or_path, source)
    check_export_folder(out_dir, overwrite)  # fail before loading anything
    check_export_length(max_seq_length, source.get("encoder_config"), source.get("base_encoder") or "")
    eval_results = read_eval_results(eval_results)
    check_results_model(eval_results, model_or_path, out_dir)
    check_results_length(eval_results, export_length(max_seq_length, source.get("encoder_config"),
                                                     source.get("encoder_max_seq_length")))
    training_info = for_checkpoint(training_info, model_or_path)  # a run's checkpoint-<step>: not its final scores
    model = load_model(model_or_path)
    tokenizer = load_tokenizer(tokenizer, model_or_path, model)
    config = model.config
    test_pooler = config.test_pooler
    limit = encoder_max_length(model.encoder.config, cap=MAX_EXPORT_LENGTH)
    own = model.sentence_transformers_modules(limit)  # a method's own modules (PromptBERT's template), or None
    problem = own is None and unexportable_pooler(type(model), test_pooler)
    if problem:
        raise ExportError(f"{problem}. Train with pooler_type cls, avg or max to export it, or use the hf_cse "
                          "checkpoint directly (hf_cse.evaluation accepts it).")
    if own is not None and backend == "onnx":
        raise ExportError(f"backend='onnx' exports a plain Transformer + Pooling encoder; this {config.method} model's "
                          "sentence-transformers modules are its own code (e.g. PromptBERT's template). Export it "
                          "without backend='onnx'.")
    pooling_mode = ST_POOLING_MODES.get(test_pooler, "cls")  # with own modules: only the reference's head rule
    uses_projector = applies_projector(test_pooler) and model.projector is not None  # the test embedding uses it
    if keep_projector and model.projector is None:
        raise ExportError("keep_projector=True, but this model has no projection head (projector='none'); "
                          "drop keep_projector.")
    with_projector = uses_projector or keep_projector
    check_results_pooler(eval_results, exported_pooler(test_pooler, keep_projector))
    # again with the loaded encoder's own limit (a loaded model, or a config.json that names none)
    check_export_length(max_seq_length, model.encoder.config, getattr(config, "base_encoder", None) or "")
    if max_seq_length is None:  # the length the encoder was served with (MiniLM: 256), else its position limit
        max_seq_length = min(limit, getattr(config, "encoder_max_seq_length", None) or limit)
    check_results_length(eval_results, int(max_seq_length))
    # training's rule: a length the special tokens and the prompt fill would give every sentence the same embedding
    check_room_for_text(tokenizer, int(max_seq_length), config.prompt if own is None else None, prompt_fixed=True)

    with atomic_output_dir(out_dir, overwrite) as tmp:
        dense = projector_to_dense(model.projector) if with_projector else []
        encoder = merged_encoder(model.encoder)  # LoRA adapters merged: a plain model that loads without peft
        dim, pooler_filled, eager_pinned = write_modules(tmp, encoder, tokenizer, pooling_mode, dense,
                                                         int(max_seq_length), config.prompt, config.normalize, own)
        check_results_export_weights(eval_results, model_or_path, tmp)  # results of an export: of these weights?
        (tmp / HF_CSE_CONFIG_FILE).write_text(json.dumps(public_config_dict(config), indent=2, sort_keys=True) + "\n")
        if verify:
            verify_export(tmp, model, tokenizer, pooling_mode, with_projector, int(max_seq_length),
                          trust_remote_code=own is not None)
        onnx_files = [p.relative_to(tmp).as_posix() for p in write_onnx(tmp, quantize)] if backend == "onnx" else []
        export = {
            "embedding_dimension": dense[-1].out_features if dense else dim,
            "max_seq_length": int(max_seq_length),
            "modules": ([f"Transformer({type(encoder).__name__}, max_seq_length={int(max_seq_length)})",
                         f"Pooling(pooling_mode={pooling_mode!r})"] if own is None else
                        [m["type"] for m in json.loads((tmp / "modules.json").read_text())[:2]])
                       + [f"Dense({d.in_features} -> {d.out_features}, {type(d.activation_function).__name__})"
                          for d in dense] + (["Normalize()"] if config.normalize else []),
            **describe(config, pooling_mode, dense, keep_projector, own and own.pooling_words),
            "adapter_description": describe_adapters(config),
            "custom_code": own is not None,
            "onnx_description": describe_onnx(onnx_files),
            "limitations_extra": "\n".join(line for line in (
                "* **Projection head kept**: these embeddings include the training-time head; the papers report "
                "unsupervised results without it (`cls_before_pooler`)."
                if keep_projector and not uses_projector else "",
                OWN_CODE_NOTE if own is not None else "",
                POOLER_NOTE if pooler_filled else "",
                EAGER_NOTE if eager_pinned else "") if line),
        }
        card_inputs = {"model_id": repo_id or str(out_dir.resolve()), "export": export, "eval_results": eval_results,
                       "training_info": training_info, "title": card_title(repo_id)}
        card = render_model_card(config, **card_inputs)
        (tmp / "README.md").write_text(card, encoding="utf-8")
        record_card_inputs(tmp, config, **card_inputs)
    repoint_run_folder(out_dir)  # <run>/sentence-transformers: the run folder serves what is there now
    logger.info("exported %s model to %s (sentence-transformers)", getattr(config, "method", "hf_cse"), out_dir)
    return out_dir

