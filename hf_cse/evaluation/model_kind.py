"""Which kind of model a folder or Hub id holds -- an hf_cse model, a sentence-transformers model or a plain encoder --
and how each kind loads for scoring (:func:`load_model`)."""

from __future__ import annotations

import logging
from pathlib import Path

from ..encoders import read_model_json
from ..errors import CSEError, PathNotFoundError

logger = logging.getLogger(__name__)


def detect_kind(name_or_path: str, revision: str | None = None) -> str:
    """``"hf_cse"``, ``"sentence_transformers"`` or ``"hf"`` for a folder or Hub id."""
    name_or_path = str(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.exists():
        if (
            not path.is_dir()
            or not (path / "config.json").is_file()
            and not (path / "modules.json").is_file()
        ):
            raise PathNotFoundError(f"{name_or_path} is not a model folder (no config.json or modules.json).")
    elif path.is_absolute() or name_or_path.startswith((".", "~")) or name_or_path.count("/") > 1:
        raise PathNotFoundError(f"Model path {name_or_path} does not exist.")
    config = read_model_json(str(path) if path.exists() else name_or_path, "config.json", revision)
    if config is not None and str(config.get("model_type", "")).startswith("hf_cse"):
        return "hf_cse"
    if read_model_json(str(path) if path.exists() else name_or_path, "modules.json", revision) is not None:
        return "sentence_transformers"
    return "hf"


def check_pooler_layer_loaded(name_or_path: str, pooler: str | None, missing_keys) -> None:
    """A plain encoder scored with pooler ``cls`` (its ``pooler_output``) must hold the pooler layer's weights:
    transformers initialises a missing one at random, and the score would change from one run to the next."""
    from ..models.pooling import applies_projector

    missing = sorted(key for key in missing_keys if ".pooler." in f".{key}")
    if pooler is not None and applies_projector(pooler) and missing:
        raise CSEError(f"pooler cls reads the pooler layer of {name_or_path}, whose weights it does not hold "
                       f"({missing[0]}, ...: they would be drawn at random, a score of no model): use pooler "
                       "cls_before_pooler (the [CLS] vector itself) or another pooler.")


#: the fix where a model folder holds no tokenizer
EVALUATE_WITH_TOKENIZER = ("save the model's tokenizer into it (tokenizer.save_pretrained), or pass the tokenizer: "
                           "SentenceEncoder(model, tokenizer)")


def load_model(name_or_path: str, kind: str, device, pooler: str | None, revision: str | None,
               trust_remote_code: bool):
    """The model of ``kind`` (:func:`detect_kind`) at ``name_or_path`` on ``device``, and its tokenizer (None for a
    sentence-transformers model, which brings its own); a folder without its tokenizer, a tokenizer with nothing to pad
    with and a first-token ``pooler`` on a causal decoder are refused before the weights load, a plain encoder without
    the pooler layer ``pooler`` reads is refused."""
    from ..padding import check_can_pad
    from ..tokenizer_match import check_not_stand_in

    if kind == "sentence_transformers":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(
            name_or_path, device=str(device), revision=revision, trust_remote_code=trust_remote_code
        )
        check_not_stand_in(getattr(model, "tokenizer", None), name_or_path, EVALUATE_WITH_TOKENIZER)
        tokenizer = None
    else:
        from transformers import AutoModel, AutoTokenizer

        if kind == "hf_cse":
            from ..models import check_method_registered  # (registers the hf_cse classes with AutoModel)

            if Path(name_or_path).is_dir():
                check_method_registered(name_or_path)
        tokenizer = AutoTokenizer.from_pretrained(
            name_or_path, revision=revision, trust_remote_code=trust_remote_code
        )
        check_not_stand_in(tokenizer, name_or_path, EVALUATE_WITH_TOKENIZER)  # before the weights load
        check_can_pad(tokenizer)
        if kind == "hf" and pooler is not None:  # from its config.json (SentenceEncoder checks it again)
            from transformers import AutoConfig

            from ..models.config import check_first_token_pooler

            config = AutoConfig.from_pretrained(name_or_path, revision=revision, trust_remote_code=trust_remote_code)
            check_first_token_pooler(pooler, config, field="pooler")
        model, loading = AutoModel.from_pretrained(
            name_or_path, revision=revision, trust_remote_code=trust_remote_code, output_loading_info=True)
        if kind == "hf":
            check_pooler_layer_loaded(name_or_path, pooler, loading.get("missing_keys", ()))
        model.to(device)
    return model, tokenizer


def check_st_modules_encode(model, hf_model) -> None:
    """A sentence-transformers model scored with its own modules: a tokenizer without a padding token (a decoder's,
    which sentence-transformers cannot pad a batch with either: transformers' traceback at the first batch) and a
    first-token Pooling on a causal decoder (every sentence the same vector: NaN scores, without a word) refused in one
    line, as the same model scored with a ``pooler`` of hf_cse's is."""
    from ..models.config import attends_causally

    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None and getattr(tokenizer, "pad_token", "") is None:
        token = repr(tokenizer.eos_token) if getattr(tokenizer, "eos_token", None) else "<a token of its vocabulary>"
        raise CSEError(f"the sentence-transformers model's tokenizer has no padding token, so no batch of it can be "
                       f"encoded: set it and save the model again (model.tokenizer.pad_token = {token}; "
                       "model.save(folder)), or give a pooler of hf_cse's (last, avg), which pads with the end-of-text "
                       "token.", fields=("pooler",))
    config = getattr(hf_model, "config", None)
    first_token = any(getattr(module, "pooling_mode_cls_token", False) or getattr(module, "pooling_mode", "") == "cls"
                      for module in model)
    if first_token and attends_causally(config):
        raise CSEError(f"the sentence-transformers model pools the first token (its Pooling module's cls mode), "
                       f"which a causal (decoder-only) encoder such as {config.model_type!r} computes without seeing "
                       "the rest of the sentence: every sentence would get the same vector. Give pooler last (or avg) "
                       "to score it with that pooling instead.", fields=("pooler",))


def check_pooler_replaces_modules(model, pooler: str) -> None:
    """A ``pooler`` given for a sentence-transformers model pools its Transformer's output itself, in place of every
    module after it: said in the log where that leaves out more than its Pooling (a Normalize, a Dense head), and
    ``cls`` refused where a head follows, since ``cls`` would read the encoder's own pooler layer, not that head (an
    hf_cse run's folder scored with ``cls`` applies its trained head: the two would mean different heads)."""
    later = [type(module).__name__ for module in list(model)[1:] if type(module).__name__ != "Pooling"]
    heads = [name for name in later if name != "Normalize"]
    if pooler == "cls" and heads:
        raise CSEError(f"pooler cls on this sentence-transformers model would read its encoder's own pooling layer "
                       f"(pooler_output), not its {', '.join(heads)} module, which a pooler skips: leave pooler out to "
                       "score it with its own modules, or give cls_before_pooler for the raw [CLS] (the run's folder "
                       "with pooler cls applies the trained head).", fields=("pooler",))
    if later:
        logger.warning("pooler %s pools the encoder's output in place of the model's own modules: its %s not applied",
                       pooler, ", ".join(later) + (" is" if len(later) == 1 else " are"))


def check_pooler_on_own_representation(model, pooler: str | None) -> None:
    """An hf_cse model that embeds a token of its own (PromptBERT's template [MASK]: ``own_representation``) reads it
    whatever the pooler, which decides there only whether its head applies: another pooler would be recorded as used
    and change nothing."""
    own = model.own_representation(model.config)
    if own and pooler not in (None, "cls", "cls_before_pooler", model.config.test_pooler):
        raise CSEError(f"this model embeds {own} whatever the pooler: pooler only decides there whether its head "
                       f"applies (cls: with it; cls_before_pooler: without), got {pooler!r}; leave pooler out, or "
                       "give one of those two.", fields=("pooler",))


def own_modules_pooling(model) -> str:
    """The pooling a sentence-transformers model's own modules apply, as results record it: its Pooling module's
    mode(s) under hf_cse's pooler names where there is one (``mean`` -> ``avg``, ``cls`` -> ``cls_before_pooler``: the
    raw [CLS]), then the modules after the encoder, e.g. ``avg (sentence-transformers Pooling, Normalize)``; without a
    Pooling module (one of its own, e.g. a PromptBERT export's), those modules' class names."""
    from ..encoders import pooling_modes
    from ..models.pooling import POOLER_OF_ST_MODE

    modules = [type(module).__name__ for module in list(model)[1:]]  # after the Transformer
    pooling = next((module for module in model if type(module).__name__ == "Pooling"), None)
    if pooling is None:
        return f"sentence-transformers modules {', '.join(modules) or type(model).__name__}"
    mode = "+".join(POOLER_OF_ST_MODE.get(m, m) for m in pooling_modes(pooling)) or "mean"
    return f"{mode} (sentence-transformers {', '.join(modules)})"
