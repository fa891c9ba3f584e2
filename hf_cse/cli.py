"""What every command-line entry point shares: one line per foreseeable failure (the traceback behind
``HF_CSE_DEBUG=1``), and checks of a model path before anything is loaded.

    if __name__ == "__main__":
        sys.exit(run_cli(main, "run_unsup.py"))
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

DEBUG_ENV = "HF_CSE_DEBUG"


class InputError(ValueError):
    """Bad input found by a check before any work; the message names the problem and the fix."""


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


# Failures a user can cause and fix. Other exceptions are bugs and keep their traceback.
FORESEEABLE: tuple[type[BaseException], ...] = (ValueError, OSError, RuntimeError, ImportError)


def flag_advice(err: BaseException) -> str:
    """The flags to change for an error a loss raised in its own terms (:mod:`hf_cse.losses.errors`); "" otherwise."""
    errors = sys.modules.get("hf_cse.losses.errors")
    if errors is None:  # no loss was imported, so none raised
        return ""
    if isinstance(err, errors.BatchTooSmallError):
        return "Increase --per_device_train_batch_size (or the number of processes)."
    if isinstance(err, errors.MissingInputsError) and "z_nodropout" in err.missing:
        return "Use --method imsimcse (or --off_dropout) so the model provides them."
    if isinstance(err, errors.HardNegativesNotTakenError):
        return "Drop --negative_column or pick one of those losses."
    return ""


def run_cli(main: Callable[[], int | None], prog: str) -> int:
    """Run ``main()``; a foreseeable failure becomes ``prog: error: <one line>`` on stderr and exit code 1 (with the
    flags to change where a loss said what is wrong in its own terms: :func:`flag_advice`).

    Ctrl-C (``KeyboardInterrupt``) is one line too, with exit code 130 (128 + SIGINT, as a shell reports it).
    ``RuntimeError`` is included for hf_cse's own error types (e.g. ``HubPushError``) and torch's device errors
    ("CUDA is not available"); set ``HF_CSE_DEBUG=1`` to get the traceback of any of them.
    """
    try:
        return int(main() or 0)
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's code for SIGINT, not a traceback
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"{prog}: interrupted (Ctrl-C); what was saved so far is kept.", file=sys.stderr)
        return 130
    except FORESEEABLE as err:
        if os.environ.get(DEBUG_ENV):
            raise
        advice = flag_advice(err)
        message = f"{_one_line(err)} {advice}" if advice else _one_line(err)
        print(f"{prog}: error: {message} (set {DEBUG_ENV}=1 to see the traceback)", file=sys.stderr)
        return 1


#: flags that name a file or folder besides those ending in _dir, _file or _path (e.g. _or_path)
PATH_FLAGS = ("resume_from_checkpoint", "checkpoint", "tokenizer", "training_info", "eval_results", "deepspeed")


def is_path_flag(name: str) -> bool:
    return name.endswith(("_dir", "_file", "_path")) or name in PATH_FLAGS


def check_path_given(value, flag: str) -> None:
    """An empty or blank path (``--output_dir "$OUT"`` with ``OUT`` unset) would be read as the current folder, or
    silently replaced by a default; refuse it."""
    if isinstance(value, str) and not value.strip():
        raise InputError(f"{flag} is empty ({value!r}): an unset shell variable? Give a path.")


def check_writable(folder: Path, flag: str) -> None:
    """Create ``folder`` and write (then remove) a probe file in it, so that a read-only output folder fails now,
    not when the first result is saved, possibly hours in."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-"):
            pass
    except OSError as err:
        raise InputError(f"{flag} {folder} cannot be written ({err.strerror}); choose a folder you can write to."
                         ) from None


def refuse_empty_paths(parser, argv: list[str] | None) -> None:
    """:func:`check_path_given` for every path flag (:func:`is_path_flag`) of an argparse ``parser`` in ``argv``,
    before anything else reads them."""
    given = vars(parser.parse_known_args(argv)[0])
    for name, value in given.items():
        if is_path_flag(name):
            for item in value if isinstance(value, list) else [value]:
                check_path_given(item, f"--{name}" if name not in ("checkpoint", "out_dir") else name.upper())


def check_model_source(name_or_path: str, flag: str = "--model_name_or_path",
                       markers: tuple[str, ...] = ("config.json",), what: str = "model") -> None:
    """Fail early and clearly for a model reference that cannot load: a path that is a file, a folder without any of
    ``markers`` (default ``config.json``), or (with the Hub offline) a name that is neither a local folder nor in the
    Hub cache. ``what`` names the thing in the messages (e.g. "tokenizer")."""
    path = Path(name_or_path).expanduser()
    files = " or ".join(markers)
    if path.exists():
        if not path.is_dir():
            raise InputError(f"{flag} {name_or_path} is a file; give a {what} folder (holding {files}) or a "
                             f"Hub {what} id.")
        if not any((path / marker).is_file() for marker in markers):
            raise InputError(f"{flag} {name_or_path} is a folder without {files}, so it holds no {what}; give the "
                             f"folder a {what} was saved to (save_pretrained, run_unsup.py's --output_dir) or Hub id.")
        from .checkpoints import weights_problem

        problem = weights_problem(path)
        if problem:  # a save that was killed, or a copy cut short: loading would end in a traceback
            raise InputError(f"{flag} {name_or_path}: {problem}; save or copy the {what} again, or give another one.")
        return
    looks_local = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1
    if looks_local:
        raise InputError(f"{flag} {name_or_path}: no such folder. Check the path.")
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE:
        try:
            cached = [try_to_load_from_cache(name_or_path, marker) for marker in markers]
        except ValueError:  # not a valid repo id either
            cached = []
        if not any(isinstance(c, str) for c in cached):
            raise InputError(f"{flag} {name_or_path} is not a local folder, and the Hugging Face Hub is offline "
                             f"(HF_HUB_OFFLINE=1) with no cached copy of it. Give a local {what} folder, or unset "
                             "HF_HUB_OFFLINE to download it.")


def check_device(device: str | None, flag: str = "--device") -> None:
    """Fail early for a device torch cannot use here: not a device name, or CUDA / MPS that this machine lacks."""
    if device is None:
        return
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError:
        raise InputError(f"{flag} {device!r} is not a device; use cpu, cuda, cuda:N or mps.") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InputError(f"{flag} {device}: torch sees no CUDA GPU here (torch.cuda.is_available() is False); "
                             f"use {flag} cpu, or install a CUDA build of torch.")
        if dev.index is not None and dev.index >= count:
            raise InputError(f"{flag} {device}: torch sees {count} CUDA GPU(s), numbered 0-{count - 1}.")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"{flag} mps: the Apple MPS backend is not available here; use {flag} cpu.")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise InputError(f"{flag} {device}: hf_cse runs on cpu, cuda or mps.")
