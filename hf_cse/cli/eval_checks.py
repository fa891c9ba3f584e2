"""``hf-cse-eval``'s checks of a local model folder, before it is loaded: its tokenizer files are there (else
transformers would score it with a stand-in tokenizer), and ``--max_seq_length`` fits its position embeddings."""

from __future__ import annotations

import json
from pathlib import Path

from ..checks import InputError
from ..output_folder import TOKENIZER_MARKERS
from .preflight import check_max_seq_length


def transformer_folder(folder: Path) -> Path:
    """The folder holding the encoder's config and tokenizer: a sentence-transformers model's Transformer module
    (``modules.json``), else the folder itself."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return folder
    for module in modules if isinstance(modules, list) else []:
        if isinstance(module, dict) and str(module.get("type", "")).endswith("Transformer"):
            return folder / str(module.get("path") or "")
    return folder


def _encoder_config(folder: Path) -> dict | None:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    nested = config.get("encoder_config")  # an hf_cse model: its encoder's own config
    return nested if isinstance(nested, dict) else config


def check_model_folder(name: str, max_seq_length: int | None) -> None:
    """A local model folder (a Hub id is left to loading): its tokenizer files, and ``max_seq_length`` within the
    encoder's position limit."""
    path = Path(name).expanduser()
    if not path.is_dir():
        return
    encoder = transformer_folder(path)
    if not any((encoder / marker).is_file() for marker in TOKENIZER_MARKERS):
        raise InputError(f"--model_name_or_path {name} holds no tokenizer files ({' or '.join(TOKENIZER_MARKERS)}"
                         f"{f' in {encoder.name}' if encoder != path else ''}): it would be scored with a stand-in "
                         "tokenizer. Save the model's tokenizer into it (tokenizer.save_pretrained), or give a "
                         "complete model folder.")
    config = _encoder_config(encoder)
    if max_seq_length is not None and config is not None:
        check_max_seq_length(max_seq_length, config, name)
