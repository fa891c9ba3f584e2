"""``hf-cse-eval``'s checks of a model before it is loaded: a local folder's tokenizer files are there (else
transformers would score it with a stand-in tokenizer), a sentence-transformers folder's encoder config too, and
``--max_seq_length`` fits its position embeddings (a Hub model's too, from its config alone), ``--truncate_dims`` its
embeddings' width, where its files give it; and that the models of one command go to different places of
``--mteb_results_dir``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..checks import InputError
from ..encoders import embedding_width, read_model_json, transformer_module_path
from ..output_folder import TOKENIZER_MARKERS, matching
from ..run_files import WEIGHT_FILES
from ..unusable_models import model_folder_problem
from .preflight import check_max_seq_length


def _folder_json(folder: Path, filename: str):
    """:func:`hf_cse.encoders.read_model_json` of a local folder; None for a file that cannot be read (loading the
    model then says what is wrong with it)."""
    if not folder.is_dir():  # never a Hub id here: a folder missing from a sentence-transformers model
        return None
    try:
        return read_model_json(str(folder), filename)
    except (OSError, ValueError):
        return None


def transformer_folder(folder: Path) -> Path:
    """The folder holding the encoder's config and tokenizer: a sentence-transformers model's Transformer module
    (``modules.json``), else the folder itself."""
    return folder / (transformer_module_path(_folder_json(folder, "modules.json")) or "")


def _the_encoders(config) -> dict | None:
    if not isinstance(config, dict):
        return None
    nested = config.get("encoder_config")  # an hf_cse model: its encoder's own config
    return nested if isinstance(nested, dict) else config


def _encoder_config(folder: Path) -> dict | None:
    return _the_encoders(_folder_json(folder, "config.json"))


def _hub_encoder_config(name: str) -> dict | None:
    """The encoder's config of a Hub model, its JSON files read alone (small downloads, no weights); None offline or
    where there is none."""
    sub = transformer_module_path(read_model_json(name, "modules.json"))
    return _the_encoders(read_model_json(name, f"{sub}/config.json" if sub else "config.json"))


def check_st_encoder_files(name: str, path: Path) -> None:
    """A sentence-transformers folder (one scored as such: not a training run's, whose own config.json is its model's)
    whose Transformer module holds no config.json: sentence-transformers would fail on a model_type key of a file
    that is not there."""
    sub = transformer_module_path(_folder_json(path, "modules.json"))
    root = _folder_json(path, "config.json")
    if sub is None or isinstance(root, dict) and str(root.get("model_type", "")).startswith("hf_cse"):
        return
    encoder = path / sub
    if (encoder / "config.json").is_file():
        return
    if encoder.is_dir():
        weights = matching([p.name for p in encoder.iterdir() if p.is_file()], WEIGHT_FILES)
        missing = (f"{f'its Transformer module {sub}' if sub else 'the folder'} holds no config.json"
                   f"{'' if weights else ' and no weights (model.safetensors or pytorch_model.bin)'}")
    else:
        missing = f"the folder of its Transformer module, {sub}, is not there"
    raise InputError(f"--model_name_or_path {name} is a sentence-transformers model (modules.json) without its "
                     f"encoder: {missing}. Save the model into it again (model.save), or give a complete model folder.")


def check_model_folder(name: str, max_seq_length: int | None) -> None:
    """A local model folder: its tokenizer files, and ``max_seq_length`` within the encoder's position limit; a Hub
    id: ``max_seq_length`` within the limit its config states, read before the weights are downloaded (the rest is
    left to loading)."""
    path = Path(name).expanduser()
    if not path.is_dir():
        config = _hub_encoder_config(name) if max_seq_length is not None else None
        if config is not None:
            check_max_seq_length(max_seq_length, config, name)
        return
    unloadable = model_folder_problem(path, "evaluate")
    if unloadable:
        raise InputError(f"--model_name_or_path {unloadable}")
    check_st_encoder_files(name, path)
    encoder = transformer_folder(path)
    if not any((encoder / marker).is_file() for marker in TOKENIZER_MARKERS):
        raise InputError(f"--model_name_or_path {name} holds no tokenizer files ({' or '.join(TOKENIZER_MARKERS)}"
                         f"{f' in {encoder.name}' if encoder != path else ''}): it would be scored with a stand-in "
                         "tokenizer. Save the model's tokenizer into it (tokenizer.save_pretrained), or give a "
                         "complete model folder.")
    config = _encoder_config(encoder)
    if max_seq_length is not None and config is not None:
        check_max_seq_length(max_seq_length, config, name)


def check_truncate_dims_fit(name: str, dims: Sequence[int], pooler: str | None) -> None:
    """``--truncate_dims`` within the width of the embeddings ``name`` gives, where its files tell it (its own
    sentence-transformers modules', or the encoder's hidden size for a pooler of hf_cse's): refused before any model
    is loaded, not once the models before it were scored (the width measured then stays the check of the rest)."""
    read = embedding_width(name, own_modules=pooler is None) if dims else None
    if read is None:
        return
    width, source = read
    too_large = [d for d in dims if d > width]
    if too_large:
        raise InputError(f"--truncate_dims {too_large}: --model_name_or_path {name} gives {width}-dimensional "
                         f"embeddings ({source}); choose dimensions up to {width}.")


def check_distinct_mteb_names(models: Sequence[str], meta_of: Callable[[str], dict]) -> None:
    """Two different models of one command would be saved under the same MTEB name and revision in
    ``--mteb_results_dir`` (two runs' ``checkpoint-500`` or ``sentence-transformers`` folders are both
    ``local/<folder name>``): the second's results would replace the first's there."""
    seen: dict[tuple, str] = {}
    for model in models:
        meta = meta_of(model)
        key = (meta.get("name"), meta.get("revision"))
        other = seen.setdefault(key, model)
        if other != model and Path(other).expanduser().resolve() != Path(model).expanduser().resolve():
            raise InputError(f"--model_name_or_path {other} and {model} would both be saved as {key[0]} (revision "
                             f"{key[1]}) in --mteb_results_dir, the second's results replacing the first's; evaluate "
                             "them one at a time, each with its own --mteb_model_name.")
