"""Loading what an export is made from: the hf_cse model (object, folder or Hub id) and its tokenizer, with the
checks that refuse a tokenizer made for another model (its ids would silently read the wrong embedding rows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from ..divergence import check_finite_weights
from ..tokenizer_match import check_not_stand_in, is_stand_in, vocabulary_difference
from ..unusable_models import model_folder_problem
from .errors import ExportError


def load_model(model_or_path):
    """An hf_cse model object, loaded from a folder / Hub id when a path is given."""
    from ..models import CSEPreTrainedModel, check_method_registered, is_cse_checkpoint

    if isinstance(model_or_path, CSEPreTrainedModel):
        return model_or_path
    if isinstance(model_or_path, nn.Module):
        raise ExportError(
            f"to_sentence_transformer needs an hf_cse model (CSEPreTrainedModel), got {type(model_or_path).__name__}. "
            "A plain encoder can be packaged with sentence-transformers directly."
        )
    path = Path(str(model_or_path)).expanduser()
    unloadable = model_folder_problem(path, "export")
    if unloadable:
        raise ExportError(unloadable)
    if path.exists() and not is_cse_checkpoint(path):
        raise ExportError(
            f"{path} is not an hf_cse checkpoint (its config.json is missing or its model_type does not start with "
            "'hf_cse'). Give the output_dir of run_unsup.py or a folder saved with model.save_pretrained()."
        )
    if path.exists():
        check_method_registered(path)
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(path) if path.exists() else str(model_or_path))
    if not isinstance(model, CSEPreTrainedModel):
        raise ExportError(f"{model_or_path} loaded as {type(model).__name__}, not an hf_cse model.")
    check_finite_weights(model, model_or_path)  # a diverged run's checkpoint: NaN embeddings
    return model


def _model_tokenizer(model_or_path, model) -> tuple[Any, str | None, list[str]]:
    """The tokenizer saved with the checkpoint, else the base encoder's: ``(tokenizer, its name, errors)``; a folder
    whose tokenizer is a stand-in (:func:`~hf_cse.tokenizer_match.is_stand_in`) holds none."""
    from transformers import AutoTokenizer

    candidates = [model_or_path] if isinstance(model_or_path, (str, Path)) else []
    candidates += [model.config.base_encoder, getattr(model.encoder.config, "name_or_path", None)]
    errors = []
    for name in dict.fromkeys(str(c) for c in candidates if c):
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError) as err:
            errors.append(f"{name}: {type(err).__name__}")
            continue
        if is_stand_in(tokenizer):  # a folder of weights only: the next candidate holds the tokenizer
            errors.append(f"{name}: no tokenizer files")
            continue
        return tokenizer, name, errors
    return None, None, errors


def load_tokenizer(tokenizer, model_or_path, model):
    """The tokenizer: the one given (an object, or a folder / Hub id that must load: no silent fall-back), else the
    checkpoint's, else the base encoder's; checked against the encoder (:func:`check_tokenizer_fits`)."""
    from transformers import AutoTokenizer

    if tokenizer is None:
        tok, _, errors = _model_tokenizer(model_or_path, model)
        if tok is None:
            raise ExportError(
                f"no tokenizer found for the export (tried {', '.join(errors) or 'nothing'}). Pass tokenizer= "
                "(an object or a folder/Hub id), e.g. the encoder the model was trained from."
            )
        check_tokenizer_fits(tok, model.encoder)
        return tok
    if not isinstance(tokenizer, (str, Path)):
        check_tokenizer_fits(tokenizer, model.encoder)
        return tokenizer
    try:
        tok = AutoTokenizer.from_pretrained(str(tokenizer))
    except (OSError, ValueError) as err:
        raise ExportError(f"tokenizer {tokenizer} could not be loaded ({type(err).__name__}: {err}); give a folder "
                          "holding a saved tokenizer or a Hub id, or leave it out to use the checkpoint's.") from err
    check_not_stand_in(tok, f"tokenizer {tokenizer}", "give a folder holding a saved tokenizer or a Hub id, or leave "
                       "it out to use the checkpoint's", ExportError)
    reference, reference_name, _ = _model_tokenizer(model_or_path, model)
    check_tokenizer_fits(tok, model.encoder, reference, reference_name)
    return tok


def check_tokenizer_fits(tokenizer, encoder, reference=None, reference_name: str | None = None) -> None:
    """Refuse a tokenizer made for another model (its ids would read the wrong embedding rows, silently): more tokens
    than the encoder's embedding matrix has rows, a padding / begin / end id other than the encoder config's, or
    (with ``reference``, the tokenizer saved with the model) another token -> id mapping."""
    embeddings = encoder.get_input_embeddings()
    rows = getattr(embeddings, "base_layer", embeddings).weight.shape[0]  # LoRA's Embedding wraps the layer
    fix = "use the tokenizer the model was trained with (leave the tokenizer out to take the checkpoint's)"
    if len(tokenizer) > rows:
        raise ExportError(f"the tokenizer has {len(tokenizer)} tokens but the encoder's embedding matrix only {rows} "
                          f"rows, so it belongs to another model; {fix}.")
    for attr in ("pad_token_id", "bos_token_id", "eos_token_id"):
        want, got = getattr(encoder.config, attr, None), getattr(tokenizer, attr, None)
        if attr == "pad_token_id" and got is not None and got == getattr(tokenizer, "eos_token_id", None):
            continue  # padding with the end-of-text token: hf_cse's choice for a tokenizer without one (data.py)
        if isinstance(want, int) and isinstance(got, int) and want != got:
            raise ExportError(f"the tokenizer's {attr} is {got} but the encoder's config says {want}, so it belongs "
                              f"to another model; {fix}.")
    if reference is None:
        return
    difference = vocabulary_difference(tokenizer, reference, reference_name)
    if difference:
        raise ExportError(f"the tokenizer does not fit the model: {difference}; {fix}.")
