"""The ``hf-cse-export`` command (``python -m hf_cse export``): export an hf_cse checkpoint as a sentence-transformers
model with a model card, optionally pushed to the Hub. Every input (checkpoint, output folder, tokenizer, JSON files)
is checked before the model is loaded; a foreseeable failure is one line naming the problem and the fix."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from transformers.hf_argparser import string_to_bool

from ..checks import InputError, check_model_source
from ..export import to_sentence_transformer
from ..export.folders import check_export_folder
from ..export.hub import check_can_push, check_repo_id, push_export
from ..export.onnx import BACKENDS, INT8_FILE, QUANTIZATIONS, check_onnx_backend
from ..export.sources import (
    check_clear_of_source,
    check_export_length,
    check_onnx_head,
    check_results_length,
    check_results_model,
    check_results_pooler,
    export_length,
    exported_pooler_of,
    source_config,
)
from ..export.training_info import (
    TRAINING_INFO_FILE,
    for_checkpoint,
    is_evaluation_results,
    run_record_problem,
    training_info_problem,
)
from ..model_card import read_eval_results
from ..output_folder import TOKENIZER_MARKERS
from ..unusable_models import model_folder_problem
from . import run_cli
from .console import VERBOSE_HELP, setup_console
from .help import EXPORT_EXAMPLE, add_short_help, all_flags_layout
from .launch import check_one_process
from .parsing import PARSER_OPTIONS, one_line_errors, refuse_empty_paths, refuse_unknown_flags
from .user_modules import FLAG, HELP, import_user_modules


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hf-cse-export",
        description="Export an hf_cse checkpoint as a sentence-transformers model with a model card "
                    "(optionally pushed to the Hugging Face Hub).",
        **PARSER_OPTIONS,
    )
    p.add_argument("checkpoint", help="hf_cse checkpoint folder (run_unsup.py's output_dir) or Hub id")
    p.add_argument("out_dir", help="folder to write the sentence-transformers model to")
    p.add_argument("--keep_projector", action="store_true", help="keep the training-only projection head")
    p.add_argument("--overwrite", "--overwrite_output_dir", dest="overwrite", action="store_true",
                   help="replace the export files in a non-empty out_dir (other files are kept); the training and "
                        "evaluation commands' --overwrite_output_dir, under the export's shorter name")
    p.add_argument("--eval_results", help="results.json written by run_eval.py (scores for the card)")
    p.add_argument("--training_info", help=f"training info JSON (default: CHECKPOINT/{TRAINING_INFO_FILE} if present)")
    p.add_argument("--tokenizer", help="tokenizer folder or Hub id (default: the checkpoint's)")
    p.add_argument("--max_seq_length", type=int,
                   help="truncation length, from 2 to the encoder's position limit (default: the length a "
                        "sentence-transformers encoder was served with, config.encoder_max_seq_length: 256 for "
                        "all-MiniLM-L6-v2; else the position limit, at most 512)")
    p.add_argument("--backend", choices=BACKENDS, default="torch",
                   help="onnx: also write onnx/model.onnx (pip install 'hf_cse[onnx]'), served without PyTorch by "
                        "hf_cse.export.onnx.OnnxEncoder(OUT_DIR); SentenceTransformer(OUT_DIR, backend='onnx') reads "
                        "the same file but needs optimum-onnx, which does not install beside transformers 5 today")
    p.add_argument("--quantize", choices=QUANTIZATIONS,
                   help=f"with --backend onnx: also write its dynamic int8 quantisation ({INT8_FILE})")
    p.add_argument("--push_to_hub", metavar="REPO", help="push the export to this Hub repo (user/name)")
    p.add_argument("--private", action="store_true", help="create the Hub repo as private")
    p.add_argument("--token", help="Hub token (default: the stored login or HF_TOKEN)")
    # as hf-cse-train's and hf-cse-eval's (a dataclass field there): --verbose, --verbose true or --verbose false
    p.add_argument("--verbose", type=string_to_bool, nargs="?", const=True, default=False, help=VERBOSE_HELP)
    p.add_argument(FLAG, nargs="+", action="extend", default=[], metavar="MODULE", help=HELP)
    return one_line_errors(add_short_help(p, all_flags_layout(p, p.description, EXPORT_EXAMPLE)))


def _read_json_object(path: str | Path, what: str) -> dict[str, Any]:
    """A JSON file holding an object, or one line saying what is wrong with it."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputError(f"{what} {path}: no such file." if not path.exists() else f"{what} {path} is a folder; "
                         "give the JSON file.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{what} {path} is not a UTF-8 text file; give the JSON file run_unsup.py wrote.") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{what} {path} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
                         "fix it or give the JSON file run_unsup.py wrote.") from None
    if not isinstance(data, dict):
        raise InputError(f"{what} {path} must hold a JSON object ({{...}}), not a {type(data).__name__}.")
    return data


def check_push_flags(args) -> None:
    """``--private`` and ``--token`` set the Hub push: without ``--push_to_hub`` they would do nothing."""
    given = [flag for flag, value in (("--private", args.private), ("--token", args.token)) if value]
    if given and not args.push_to_hub:
        raise InputError(f"{' and '.join(given)} set{'s' * (len(given) == 1)} the push to the Hub, and nothing is "
                         "pushed without --push_to_hub: "
                         f"add --push_to_hub USER/NAME, or drop {' and '.join(given)}.")


def export_from_args(argv: list[str] | None = None) -> int:
    """The command line's work; every input is checked before the model is loaded."""
    parser = build_parser()
    refuse_unknown_flags(parser, argv)
    args = parser.parse_args(argv)
    refuse_empty_paths(parser, argv)
    setup_console(args.verbose)
    import_user_modules(args.import_module)  # a method of the user's own: the checkpoint's class
    check_onnx_backend(args.backend, args.quantize)  # a missing package: one line before anything is read
    check_push_flags(args)
    check_model_source(args.checkpoint, "CHECKPOINT")
    if args.push_to_hub:  # the flags' own checks, before the folder's files are read
        check_repo_id(args.push_to_hub, "--push_to_hub")  # before the export it would end
        check_can_push(args.push_to_hub, args.token, "token", "push the export later")
    unloadable = model_folder_problem(args.checkpoint, "export")  # before anything is written (the export says it too)
    if unloadable:
        raise InputError(unloadable)
    out_dir = Path(args.out_dir).expanduser()
    checkpoint_config = source_config(args.checkpoint)
    check_onnx_head(args.backend, checkpoint_config, args.keep_projector)
    check_clear_of_source(out_dir, args.checkpoint, checkpoint_config)
    check_export_folder(out_dir, args.overwrite)
    check_export_length(args.max_seq_length, checkpoint_config.get("encoder_config"),
                        checkpoint_config.get("base_encoder") or "")
    if args.tokenizer:
        check_model_source(args.tokenizer, "--tokenizer", markers=TOKENIZER_MARKERS, what="tokenizer")
    if args.training_info:
        info = _read_json_object(args.training_info, "--training_info")
    elif (Path(args.checkpoint) / TRAINING_INFO_FILE).is_file():
        info = _read_json_object(Path(args.checkpoint) / TRAINING_INFO_FILE, "the checkpoint's")
    else:
        info = None
    if args.training_info and info and is_evaluation_results(info):
        raise InputError(f"--training_info {args.training_info} holds evaluation results (run_eval.py's results.json), "
                         "not a training record: give it as --eval_results, and the run's training_info.json as "
                         "--training_info.")
    problem = info and training_info_problem(info)
    if problem:
        source = args.training_info or Path(args.checkpoint) / TRAINING_INFO_FILE
        raise InputError(f"{source}: {problem}; fix it (or leave the key out), or give another --training_info.")
    other_run = args.training_info and run_record_problem(info, args.training_info, args.checkpoint)
    if other_run:
        raise InputError(f"--training_info {args.training_info} {other_run}; give the training_info.json its run "
                         "wrote, or leave --training_info out.")
    info = for_checkpoint(info, args.checkpoint)  # a checkpoint-<step>: not the run's final dev scores, metrics
    info, curves = _curves_of(info, args)
    eval_results = read_eval_results(args.eval_results)
    check_results_model(eval_results, args.checkpoint, out_dir, source=f"eval_results {args.eval_results}")
    check_results_pooler(eval_results, exported_pooler_of(checkpoint_config, args.keep_projector),
                         source=f"eval_results {args.eval_results}")
    check_results_length(eval_results, export_length(args.max_seq_length, checkpoint_config.get("encoder_config"),
                                                     checkpoint_config.get("encoder_max_seq_length")),
                         source=f"eval_results {args.eval_results}")
    out = to_sentence_transformer(
        args.checkpoint, args.out_dir, tokenizer=args.tokenizer, keep_projector=args.keep_projector,
        max_seq_length=args.max_seq_length, overwrite=args.overwrite, eval_results=eval_results or None,
        training_info=info, repo_id=args.push_to_hub, backend=args.backend, quantize=args.quantize,
    )
    if curves is not None:
        shutil.copy2(curves, out / curves.name)
    print(f"sentence-transformers model written to {out}")
    if args.push_to_hub:
        url = push_export(out, args.push_to_hub, token=args.token, private=args.private)
        print(f"pushed to {url}")
    return 0


def _curves_of(info: dict | None, args) -> tuple[dict | None, Path | None]:
    """The run's curves image that the card links (``info["training_curves"]``: a file beside the training info),
    to copy beside the export's card; where it is not there, the info without the link (no broken image)."""
    name = (info or {}).get("training_curves")
    if not name:
        return info, None
    path = (Path(args.training_info).parent if args.training_info else Path(args.checkpoint)) / str(name)
    if Path(str(name)).name == name and path.is_file():
        return info, path
    return {key: value for key, value in info.items() if key != "training_curves"}, None


def main(argv: list[str] | None = None, prog: str = "hf-cse-export") -> int:
    """``hf-cse-export`` / ``python -m hf_cse export``: a foreseeable failure is one line on stderr naming the
    problem and the fix, exit code 1 (``HF_CSE_DEBUG=1`` shows the traceback)."""
    # one process: several would each export into the same folder (check_one_process)
    return run_cli(lambda: check_one_process(prog, "exports") or export_from_args(argv), prog)


if __name__ == "__main__":  # python -m hf_cse.cli.export: as python -m hf_cse export (it ran nothing, exit 0)
    from .commands import main as command_main

    sys.exit(command_main(["export", *sys.argv[1:]]))
