"""Whether a saved model or checkpoint folder is complete, without loading it: a process killed while saving
leaves files cut short (a ``.safetensors`` file shorter than its header says, a ``torch.save`` archive without its
end record, a ``trainer_state.json`` half written) or missing. Resuming from such a folder, or exporting it, would
crash with a traceback (or, worse, resume from a state that was never complete).

The Trainer writes ``trainer_state.json`` last in a checkpoint (``Trainer._save_checkpoint``), so a checkpoint
without a readable one was cut short; the weight and optimizer files are checked too, as a copy or a full disk can
cut them short after the fact.
"""

from __future__ import annotations

import json
import logging
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

from .run_files import CHECKPOINT_PREFIX, RUN_RECORD_FILE, TRAINING_INFO_FILE, WEIGHT_FILES

logger = logging.getLogger(__name__)

TRAINER_STATE_FILE = "trainer_state.json"
#: the name of the temporary file safetensors writes a weights file through before renaming it into place
#: (``safetensors.torch.save_file``, which transformers' ``save_pretrained`` and checkpoint saves call: the Rust
#: ``tempfile`` crate's ``NamedTempFile`` beside the file, ``.tmp`` and 6 random letters or digits); a process killed
#: before the rename leaves it, as large as the weights written so far
_SAFETENSORS_TEMP = re.compile(r"\.tmp[A-Za-z0-9]{6}")


def is_checkpoint_name(name: str) -> bool:
    """Whether ``name`` is a Trainer checkpoint's: ``checkpoint-<step>``, digits only."""
    return name.startswith(f"{CHECKPOINT_PREFIX}-") and name[len(CHECKPOINT_PREFIX) + 1:].isdigit()


def taken_for_checkpoints(folder: Path) -> list[str]:
    """The folders in ``folder`` that are no checkpoints of an hf_cse run but that transformers' checkpoint rotation
    (``trainer_utils.sort_checkpoints``: ``checkpoint-*`` folders whose name starts with ``checkpoint-<digits>``)
    counts among them and may delete: ``checkpoint-3-eval``, ``checkpoint-3.bak``, and a ``checkpoint-N`` holding a
    model another tool saved (:func:`other_model`), which a run's own checkpoint of step N would also write over."""
    if not Path(folder).is_dir():
        return []
    return sorted(p.name for p in Path(folder).glob(f"{CHECKPOINT_PREFIX}-*") if p.is_dir()
                  and p.name[len(CHECKPOINT_PREFIX) + 1:][:1].isdigit()
                  and (not is_checkpoint_name(p.name) or other_model(p)))


def training_run_files(folder: Path) -> list[str]:
    """The entries of ``folder`` that only a training run writes (its checkpoints, its run record): a folder
    holding them is a run's, finished or not, and no other job may write into it."""
    if not Path(folder).is_dir():
        return []
    return sorted(p.name for p in Path(folder).iterdir()
                  if p.name == RUN_RECORD_FILE or (is_checkpoint_name(p.name) and p.is_dir()))


def run_marks(folder: Path) -> list[str]:
    """:func:`training_run_files` and a finished run's record (``training_info.json``): the entries that make
    ``folder`` a training run's folder."""
    return training_run_files(folder) + [TRAINING_INFO_FILE] * (Path(folder) / TRAINING_INFO_FILE).is_file()


def is_killed_weights_write(path: Path) -> bool:
    """Whether ``path`` is the temporary file of a safetensors save that was killed (:data:`_SAFETENSORS_TEMP`): a
    plain file of that name holding nothing yet or the start of a safetensors file (an 8-byte header length, then the
    header's JSON object), so that a dot-file of the user's of another content is never taken for one."""
    path = Path(path)
    if not _SAFETENSORS_TEMP.fullmatch(path.name) or path.is_symlink() or not path.is_file():
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(9)
    except OSError:
        return False
    return len(head) < 9 or head[8:9] == b"{"


def killed_weights_writes(folder: Path) -> list[str]:
    """The temporary files of killed safetensors saves (:func:`is_killed_weights_write`) in ``folder`` and in its
    ``checkpoint-N`` folders (a checkpoint save killed: the checkpoint is saved again, the file would stay), as paths
    relative to ``folder``. Only the process holding the folder removes them (no save of its is running then)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    checkpoints = [p for p in folder.iterdir() if is_checkpoint_name(p.name) and p.is_dir() and not p.is_symlink()]
    places = [folder, *checkpoints]
    return sorted(str(p.relative_to(folder)) for place in places for p in place.iterdir() if is_killed_weights_write(p))


def _safetensors_header(path: Path) -> tuple[dict | None, str | None]:
    """A ``.safetensors`` file's header (tensor name -> dtype, shape, offsets), or what is wrong with the file (its
    header unreadable, or the file shorter than the tensors its header lists)."""
    size = path.stat().st_size
    try:
        with path.open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if length > size - 8:
                return None, f"{path.name} is cut short ({size} bytes, its header alone needs {length + 8})"
            header = json.loads(fh.read(length))
    except (struct.error, UnicodeDecodeError, json.JSONDecodeError):
        return None, f"{path.name} is not a readable safetensors file"
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + length + end > size:
        return None, f"{path.name} is cut short ({size} bytes of {8 + length + end})"
    return header, None


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with a ``.safetensors`` file (:func:`_safetensors_header`), or None."""
    return _safetensors_header(path)[1]


#: embedding matrices by their names' last parts, and the config.json fields their rows and columns may equal: their
#: shapes are what a config.json edited by hand, or copied from another model, gets wrong. A column may be any of its
#: fields present (ALBERT's and ELECTRA's word embeddings have embedding_size columns, MobileBERT's positions
#: hidden_size)
EMBEDDING_SHAPES = (
    (("word_embeddings.weight", "embed_tokens.weight", "wte.weight"), ("vocab_size",),
     ("embedding_size", "hidden_size", "n_embd", "dim")),
    (("position_embeddings.weight", "wpe.weight"), ("max_position_embeddings", "n_positions"),
     ("embedding_size", "hidden_size", "n_embd", "dim")),
)


def _named(key: str, ends: tuple[str, ...]) -> bool:
    """Whether a weight's name ends with one of ``ends`` at a name boundary (not LayoutLM's h_position_...)."""
    return any(key == end or key.endswith("." + end) for end in ends)


def weights_problem(folder: Path) -> str | None:
    """What is wrong with the weight files of a saved model folder (the first found), or None: one cut short or
    unreadable, or an embedding matrix whose shape fits none of the sizes its config.json gives
    (:data:`EMBEDDING_SHAPES`; transformers would print a table of every weight and fail)."""
    config = saved_config(folder) or {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        header, problem = _safetensors_header(path)
        if problem:
            return problem
        for ends, row_fields, column_fields in EMBEDDING_SHAPES:
            name = next((k for k in header if _named(k, ends)), None)
            rows = next((f for f in row_fields if isinstance(config.get(f), int)), None)
            columns = [f for f in column_fields if isinstance(config.get(f), int)]
            shape = list(header[name].get("shape", [])) if name else []
            if rows is None or not columns or len(shape) != 2:
                continue
            if shape[0] != config[rows] or shape[1] not in {config[f] for f in columns}:
                sizes = " / ".join(f"{f} {config[f]}" for f in columns)
                return (f"its weights do not fit its config.json: {name} is {shape} in {path.name}, but config.json "
                        f"gives {rows} {config[rows]} and {sizes} (a config from another model, or edited)")
    return None


def read_json(path: Path) -> tuple[Any, str | None]:
    """A model folder's JSON file, read once: ``(its value, None)``, or ``(None, what makes it unreadable)`` (missing
    or not readable, not UTF-8, not JSON: cut short, edited by hand)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8")), None
    except OSError as err:
        return None, f"{Path(path).name} cannot be read ({err.strerror or err})"
    except UnicodeDecodeError:
        return None, f"{Path(path).name} is not UTF-8 text"
    except json.JSONDecodeError as err:
        return None, f"{Path(path).name} is not valid JSON ({err.msg} at line {err.lineno})"


def config_problem(folder: Path) -> str | None:
    """What is wrong with the config.json of a saved model folder (unreadable: :func:`read_json`, or no JSON
    object), or None (also where there is none)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    config, problem = read_json(path)
    if problem:
        return problem
    kinds = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}
    return None if isinstance(config, dict) else f"config.json holds {kinds.get(type(config), 'null')}, not an object"


def saved_files_problem(folder: Path, json_files: tuple[str, ...] = ("config.json",)) -> str | None:
    """What is wrong with a saved model folder's files, or None: the first of its ``json_files`` there that is
    broken (:func:`config_problem`, :func:`read_json`), else its weights (:func:`weights_problem`)."""
    for name in json_files:
        path = Path(folder) / name
        problem = config_problem(folder) if name == "config.json" else path.is_file() and read_json(path)[1]
        if problem:
            return problem
    return weights_problem(folder)


def json_object(path: Path) -> dict | None:
    """The JSON object a file holds, or None where it is missing, unreadable (:func:`read_json`) or holds no
    object."""
    value, problem = read_json(path)
    return value if problem is None and isinstance(value, dict) else None


def saved_config(folder: Path) -> dict | None:
    """The config.json of a saved model folder, or None where there is none or it cannot be read as a JSON object."""
    return json_object(Path(folder) / "config.json")


def other_model(folder: Path) -> str | None:
    """``"a bert model's"`` where a folder (a ``checkpoint-N``, a folder to save into) holds a model another tool
    saved: its config.json names no hf_cse method (``"an unnamed model's"`` where it names no model_type), else None
    (no config.json, or one that cannot be read: a save cut short, see :func:`checkpoint_problem`). No hf_cse run
    resumes such a checkpoint, removes it or saves over it."""
    config = saved_config(folder)
    if config is None:
        return None
    model_type = config.get("model_type")
    if str(model_type).startswith("hf_cse"):
        return None
    return f"a {model_type} model's" if model_type else "an unnamed model's"


#: the weights of a checkpoint that transformers' ``Trainer._load_from_checkpoint`` loads besides
#: :data:`~hf_cse.run_files.WEIGHT_FILES`: a peft adapter's (in the folder or a folder of it, as a LoRA run's
#: ``adapter/``), FSDP's (``pytorch_model_fsdp_0/`` or ``pytorch_model_fsdp.bin``) and DeepSpeed's (``global_step<N>/``,
#: which its engine loads)
_OTHER_CHECKPOINT_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin", "*/adapter_model.safetensors",
                             "*/adapter_model.bin", "pytorch_model_fsdp*", "global_step[0-9]*")


def has_weights(folder: Path) -> bool:
    """Whether a checkpoint folder holds weights the Trainer can resume from (a weight file, an adapter's, FSDP's or
    DeepSpeed's); one without any was cut short before its weights were written, or they were removed."""
    patterns = (*WEIGHT_FILES, *_OTHER_CHECKPOINT_WEIGHTS)
    return any(next(Path(folder).glob(pattern), None) is not None for pattern in patterns)


#: the encoder config fields that define its weights' names and shapes (under each architecture's names: BERT's and
#: Llama's, DistilBERT's, GPT-2's): a checkpoint trained from an encoder differing in one loads into no model of this
#: one (transformers' missing and unexpected keys, then torch's size mismatch or the optimizer's group sizes)
ENCODER_SHAPE_FIELDS = ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size",
                        "num_attention_heads", "num_key_value_heads", "head_dim", "embedding_size",
                        "max_position_embeddings", "type_vocab_size", "dim", "n_layers", "n_heads", "hidden_dim",
                        "n_embd", "n_layer", "n_head", "n_inner", "n_positions")


def encoder_change(checkpoint, encoder_config) -> str | None:
    """How ``encoder_config`` (a transformers config, or its dict) differs from the encoder config the model of
    ``checkpoint`` was trained from (its config.json's ``encoder_config``) in :data:`ENCODER_SHAPE_FIELDS`, as
    ``"model_type bert then, llama now"``; None where they agree, or either is unknown."""
    saved = (saved_config(Path(checkpoint)) or {}).get("encoder_config")
    if not isinstance(saved, dict) or encoder_config is None:
        return None
    now = encoder_config if isinstance(encoder_config, dict) else encoder_config.to_dict()
    changed = [f"{field} {saved[field]} then, {now[field]} now" for field in ENCODER_SHAPE_FIELDS
               if saved.get(field) is not None and now.get(field) is not None and saved[field] != now[field]]
    return "; ".join(changed) or None


def trained_from(checkpoint) -> str | None:
    """The encoder the model of ``checkpoint`` was built from, as its config.json names it (``base_encoder``)."""
    base = (saved_config(Path(checkpoint)) or {}).get("base_encoder")
    return base if isinstance(base, str) and base else None


def checkpoint_problem(folder: Path) -> str | None:
    """What makes a Trainer checkpoint incomplete (see the module doc), or None."""
    state = Path(folder) / TRAINER_STATE_FILE
    if not state.is_file():
        return f"no {TRAINER_STATE_FILE} (its save was cut short)"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return f"{TRAINER_STATE_FILE} is cut short"
    if not has_weights(folder):
        return f"no weights file ({WEIGHT_FILES[0]} is missing: removed, or never written)"
    archives = [p for pattern in ("*.pt", "*.pth", "*.bin") for p in sorted(Path(folder).glob(pattern))]
    for path in archives:  # optimizer, scheduler, RNG, the arguments (and weights saved as pytorch_model.bin)
        if not zipfile.is_zipfile(path):  # the Trainer's torch.save archives end with their directory
            return f"{path.name} is cut short (not a complete torch.save archive)"
    return weights_problem(folder)


def holds_model_only(folder) -> bool:
    """Whether a checkpoint was saved with ``save_only_model=True``: transformers then writes no optimizer,
    scheduler or RNG state into it (its RNG file, one per process, is in every other checkpoint of a run)."""
    return next(Path(folder).glob("rng_state*.pth"), None) is None and \
        next(Path(folder).glob("optimizer*"), None) is None and next(Path(folder).glob("global_step*"), None) is None


def checkpoint_step(folder: Path) -> int:
    """The step of a folder named ``checkpoint-<step>``, -1 for any other name."""
    return int(folder.name[len(CHECKPOINT_PREFIX) + 1:]) if is_checkpoint_name(folder.name) else -1


def complete_checkpoints(output_dir) -> list[Path]:
    """The complete ``checkpoint-<step>`` folders of ``output_dir`` (:func:`checkpoint_problem` finds nothing),
    newest first."""
    folders = [p for p in Path(output_dir).glob(f"{CHECKPOINT_PREFIX}-*") if p.is_dir() and checkpoint_step(p) >= 0
               and checkpoint_problem(p) is None]
    return sorted(folders, key=checkpoint_step, reverse=True)


def last_complete_checkpoint(output_dir, say_skipped: bool = True) -> str | None:
    """The checkpoint with the highest step that is complete; each incomplete one after it is skipped with one log
    line naming what is wrong (``say_skipped``: where a message names the checkpoint found instead)."""
    folders = [p for p in Path(output_dir).glob(f"{CHECKPOINT_PREFIX}-*") if p.is_dir() and checkpoint_step(p) >= 0]
    for folder in sorted(folders, key=checkpoint_step, reverse=True):
        problem = checkpoint_problem(folder)
        if problem is None:
            return str(folder)
        if say_skipped:
            logger.warning("skipping the incomplete checkpoint %s: %s", folder, problem)
    return None


def finished_run_step(output_dir) -> int | None:
    """The step the finished run ``output_dir`` holds (its ``training_info.json``) was trained to, as its
    ``trainer_state.json`` says; None where it holds no finished run or that step cannot be read."""
    out = Path(output_dir)
    if not (out / TRAINING_INFO_FILE).is_file():
        return None
    state, _ = read_json(out / TRAINER_STATE_FILE)
    step = state.get("global_step") if isinstance(state, dict) else None
    return step if isinstance(step, int) else None


def going_on_from_finished_run(output_dir) -> str | None:
    """The last complete checkpoint of ``output_dir`` where it lies past the step of the finished run the folder
    holds (its ``training_info.json``, and its ``trainer_state.json``'s step) and was saved after that run finished:
    a run going on from that run's last checkpoint (a larger ``max_steps``) saved it and stopped before it finished.
    None for anything else, e.g. a later checkpoint of an earlier run that the finished one went on from an earlier
    checkpoint of (its steps are past, its time before)."""
    out = Path(output_dir)
    info = out / TRAINING_INFO_FILE
    finished_at = finished_run_step(out)
    last = last_complete_checkpoint(out, say_skipped=False)
    if not isinstance(finished_at, int) or last is None or checkpoint_step(Path(last)) <= finished_at:
        return None
    saved = Path(last) / TRAINER_STATE_FILE  # the Trainer writes it last in a checkpoint
    return last if saved.stat().st_mtime_ns > info.stat().st_mtime_ns else None
