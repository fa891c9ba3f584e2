"""Which kind of model a folder or Hub id holds: an hf_cse model, a sentence-transformers model or a plain encoder."""

from __future__ import annotations

from pathlib import Path

from ..encoders import read_model_json
from ..errors import CSEError, PathNotFoundError


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
