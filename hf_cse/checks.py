"""Checks of user input that the library and the command line share, each failing with one :class:`InputError`
line that names the problem and the fix: an empty path, an unwritable folder, a model reference that cannot load,
a device torch cannot use."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import CSEError


class InputError(CSEError):
    """Bad input found by a check before any work; the message names the problem and the fix."""


def check_path_given(value, flag: str) -> None:
    """An empty or blank path (``output_dir "$OUT"`` with ``OUT`` unset) would be read as the current folder, or
    silently replaced by a default; refuse it."""
    if isinstance(value, str) and not value.strip():
        raise InputError(f"{flag} is empty ({value!r}): an unset shell variable? Give a path.")


def resolved_path(path):
    """``path`` made absolute (against the current folder, links resolved), as a run records and compares the folders
    and files it was given: one given relative once and absolute once, or reached from another folder, is the same.
    None and an empty path are returned as they are (:func:`check_path_given` refuses the latter)."""
    return str(Path(path).resolve()) if isinstance(path, (str, Path)) and str(path).strip() else path


def local_resolved(model):
    """``model`` (an encoder, generator or evaluated model as given) resolved where it names a local folder; a Hub
    id, ``unigram``, None as it is: a folder given relative once and absolute once is the same model."""
    return resolved_path(model) if isinstance(model, str) and Path(model).expanduser().is_dir() else model


#: the name of :func:`check_writable`'s probe file begins so (a kill can leave one: the next run removes it)
WRITE_PROBE_PREFIX = ".write-probe-"


def check_writable(folder: Path, flag: str) -> None:
    """Create ``folder`` and write (then remove) a probe file in it, so that a read-only output folder fails now,
    not when the first result is saved, possibly hours in."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=WRITE_PROBE_PREFIX):
            pass
    except OSError as err:
        raise InputError(f"{flag} {folder} cannot be written ({err.strerror}); choose a folder you can write to."
                         ) from None


def broken_model_error(where: str, problem: str, what: str = "model") -> InputError:
    """The one line for a saved model whose files are broken (a save that was killed, a copy cut short, a hand
    edit): loading it would end in a traceback."""
    return InputError(f"{where}: {problem}; save or copy the {what} again, or give another one.")


#: the files one of which a model folder holds: a transformers model's config, a sentence-transformers model's modules
MODEL_FOLDER_MARKERS = ("config.json", "modules.json")


def model_list(values) -> list[str]:
    """The models of a flag that may be repeated and may hold a comma-separated list in each value."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def looks_like_local_path(name: str) -> bool:
    """``name``, which names nothing here, is a mistyped local path rather than a Hub id ("name" or "org/name"):
    it starts with ".", "/" or "~", has more than one "/", or its first part is a folder here ("runs/nosuch" beside
    a folder runs/). Asked of such a name, the Hub would be retried for a minute and the network blamed."""
    return (name.startswith((".", "/", "~")) or name.count("/") > 1
            or ("/" in name and Path(name.split("/")[0]).is_dir()))


def check_model_source(name_or_path: str | os.PathLike, flag: str = "model_name_or_path",
                       markers: tuple[str, ...] = ("config.json",), what: str = "model") -> None:
    """Fail early and clearly for a model reference that cannot load: a path that is a file, a folder without any of
    ``markers`` (default ``config.json``), or (with the Hub offline) a name that is neither a local folder nor in the
    Hub cache. ``what`` names the thing in the messages (e.g. "tokenizer"). Anything but a str or path (a loaded
    tokenizer or model) is refused first, by its type: its repr can run to many lines."""
    if not isinstance(name_or_path, str | os.PathLike):
        raise InputError(f"{flag} must be a path or Hub id (str), got a {type(name_or_path).__name__}: pass the "
                         f"{what}'s folder or Hub id.")
    name_or_path = os.fspath(name_or_path)
    path = Path(name_or_path).expanduser()
    files = " or ".join(markers)
    if path.exists():
        if not path.is_dir():
            raise InputError(f"{flag} {name_or_path} is a file; give a {what} folder (holding {files}) or a "
                             f"Hub {what} id.")
        from .checkpoints import last_complete_checkpoint, saved_files_problem

        if not any((path / marker).is_file() for marker in markers):
            if last_complete_checkpoint(path) is not None:  # a training run's folder before its model is saved
                from .unusable_models import checkpoint_offered

                offered, described = checkpoint_offered(path)
                give = (f"give one of them, e.g. {offered} ({described}), or the folder once the run has finished"
                        if offered else f"{described}; train it again with a lower learning_rate")
                raise InputError(f"{flag} {name_or_path} is a training run's folder that holds no saved {what} yet, "
                                 f"only its checkpoints: {give}.")
            if (path / "adapter_config.json").is_file():  # a LoRA run's adapter/ (peft's files): not the whole model
                raise InputError(f"{flag} {name_or_path} holds a LoRA adapter alone (adapter_config.json), not a "
                                 f"{what}; give the training run's folder (or one of its checkpoints), which holds the "
                                 "model the adapter belongs to.")
            raise InputError(f"{flag} {name_or_path} is a folder without {files}, so it holds no {what}; give the "
                             f"folder a {what} was saved to (save_pretrained, a training run's output_dir) or Hub id.")

        problem = saved_files_problem(path, markers)
        if problem:  # a save that was killed, or a copy cut short: loading would end in a traceback
            raise broken_model_error(f"{flag} {name_or_path}", problem, what)
        return
    if looks_like_local_path(name_or_path):
        raise InputError(f"{flag} {name_or_path}: no such folder. Check the path.")
    from huggingface_hub import constants, try_to_load_from_cache

    from .hub_reach import hub_unreachable, work_offline

    unreachable = hub_unreachable()  # None where the Hub is off already
    if constants.HF_HUB_OFFLINE or unreachable:
        try:
            cached = [try_to_load_from_cache(name_or_path, marker) for marker in markers]
        except ValueError:  # not a valid repo id either
            cached = []
        if not any(isinstance(c, str) for c in cached):
            why = (f"the Hugging Face Hub cannot be reached ({unreachable}) and no copy of it is cached here. Give a "
                   f"local {what} folder, or check the network." if unreachable else
                   "the Hugging Face Hub is offline (HF_HUB_OFFLINE=1) with no cached copy of it. Give a local "
                   f"{what} folder, or unset HF_HUB_OFFLINE to download it.")
            raise InputError(f"{flag} {name_or_path} is not a local folder, and {why}")
        if unreachable:
            work_offline(unreachable)


def check_device(device: str | None, flag: str = "device") -> None:
    """Fail early for a device torch cannot use here: not a device name, or CUDA / MPS that this machine lacks."""
    if device is None:
        return
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError:
        raise InputError(f"{flag} {device!r} is not a device; use cpu, cuda, cuda:N or mps.", fields=(flag,)) from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InputError(f"{flag} {device}: torch sees no CUDA GPU here (torch.cuda.is_available() is False); "
                             f"use {flag} cpu, or install a CUDA build of torch.", fields=(flag,))
        if dev.index is not None and dev.index >= count:
            raise InputError(f"{flag} {device}: torch sees {count} CUDA GPU(s), numbered 0-{count - 1}.",
                             fields=(flag,))
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"{flag} mps: the Apple MPS backend is not available here; use {flag} cpu.",
                         fields=(flag,))
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise InputError(f"{flag} {device}: hf_cse runs on cpu, cuda or mps.", fields=(flag,))
