"""The library speaks in its own terms (issue 33, must-have 2): no library module outside ``hf_cse/cli/`` names a
command-line flag, every hf_cse error is a :class:`hf_cse.errors.CSEError`, a refusal names the field a Python caller
set, and the command line alone prints it with the flag (``hf_cse/cli/flags.py``), catching nothing but
``CSEError``."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest
from transformers import AutoTokenizer, HfArgumentParser

from hf_cse.cli import evaluate as hf_cse_eval
from hf_cse.cli import export as hf_cse_export
from hf_cse.cli import run_cli
from hf_cse.cli import train as hf_cse_train
from hf_cse.cli.flags import in_flag_terms, use_parser
from hf_cse.errors import CSEError

PACKAGE = Path(hf_cse_train.__file__).resolve().parents[1]
FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9_]*)")
# a line that shows or names a command may show its flags
COMMAND = re.compile(r"hf-cse-(train|eval|export)|run_unsup\.py|run_eval\.py|python -m hf_cse|\bcommand\b")


def command_flags(tmp_path) -> set[str]:
    """The flags of hf-cse-train, hf-cse-eval and hf-cse-export, read from their parsers."""
    from hf_cse.cli import flags

    hf_cse_train.parse_args(["--output_dir", str(tmp_path / "out"), "--use_cpu"])  # records its parser (use_parser)
    names = {flag[2:] for flag in flags._command_flags.values()}
    for parser in (HfArgumentParser(hf_cse_eval.EvalArguments), hf_cse_export.build_parser()):
        names |= {option[2:] for action in parser._actions for option in action.option_strings
                  if option.startswith("--")}
    return names - {"help"}


def library_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "cli" not in p.relative_to(PACKAGE).parts)


def test_no_library_string_names_a_flag(tmp_path):
    flags = command_flags(tmp_path)
    assert {"cached_minibatch_size", "streaming", "train_file", "tasks", "backend"} <= flags
    found = []
    for path in library_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for line in node.value.splitlines():
                    named = [name for name in FLAG.findall(line) if name in flags]
                    if named and not COMMAND.search(line):
                        found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {line.strip()}")
    assert not found, "\n".join(found)


def test_every_error_class_of_the_library_derives_from_the_root():
    classes = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        # classes whose bases are named as exceptions are (read as text: importing every module would be slow)
        names = [node.name for node in tree.body if isinstance(node, ast.ClassDef)
                 and any(ast.unparse(base).endswith(("Error", "Exception", "Interrupt")) for base in node.bases)]
        if names:
            module = importlib.import_module(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
                                             .removesuffix(".__init__"))
            classes += [getattr(module, name) for name in names]
    assert all(inspect.isclass(c) and issubclass(c, BaseException) for c in classes)
    assert len(classes) >= 17  # InputError, DataError, ExportError, HubPushError, LossInputError, ...
    # a stop signal (hf_cse.cli.stop_signals.Terminated, a KeyboardInterrupt) is no error: no ValueError catches it
    stops = [c for c in classes if issubclass(c, KeyboardInterrupt)]
    assert [c.__qualname__ for c in stops] == ["Terminated"]
    assert [c.__qualname__ for c in classes if not issubclass(c, CSEError) and c not in stops] == []
    assert issubclass(CSEError, ValueError)  # callers catching ValueError keep seeing every hf_cse error


def test_a_python_refusal_names_the_field_and_the_command_line_names_the_flag(tiny_bert_dir, tmp_path, capsys,
                                                                              monkeypatch):
    from datasets import Dataset

    from hf_cse.data import tokenize_dataset
    from hf_cse.models import SimCSEModel
    from hf_cse.trainer import ContrastiveTrainer
    from hf_cse.training_args import ContrastiveTrainingArguments

    args = ContrastiveTrainingArguments(str(tmp_path / "api"), cached_minibatch_size=-3, use_cpu=True,
                                        per_device_train_batch_size=8,
                                        report_to="none")
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    with pytest.raises(CSEError) as err:  # tokenized: untokenized text is refused first (hf_cse.data_checks)
        ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=args,
                           train_dataset=tokenize_dataset(Dataset.from_dict({"text": ["a b", "c d"] * 4}), tok),
                           processing_class=tok)
    assert str(err.value).startswith("cached_minibatch_size must be a positive integer") and "--" not in str(err.value)

    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    train = tmp_path / "train.txt"
    train.write_text("\n".join(f"sentence number {i} of the corpus" for i in range(32)) + "\n")
    common = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train), "--use_cpu",
              "--per_device_train_batch_size", "8", "--max_steps", "1"]
    capsys.readouterr()
    assert hf_cse_train.main([*common, "--output_dir", str(tmp_path / "a"), "--cached_minibatch_size", "-3"]) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("hf-cse-train: error: --cached_minibatch_size must be a positive integer"), line
    # a refusal that names a one-word field as name=value: printed as its flag and value
    assert hf_cse_train.main([*common, "--output_dir", str(tmp_path / "b"), "--cached_minibatch_size", "4",
                              "--method", "diffcse"]) == 1
    line = capsys.readouterr().err.strip()
    assert "--cached_minibatch_size is incompatible with --method 'diffcse'" in line, line
    assert "Drop --cached_minibatch_size" in line and len(line.splitlines()) == 1


def test_the_flag_table_rewrites_only_the_fields_a_message_names():
    import argparse

    parser = argparse.ArgumentParser()
    for flag in ("--train_file", "--device", "--streaming", "--loss", "--encoder_dtype"):
        parser.add_argument(flag)
    parser.add_argument("--no_streaming", dest="streaming", action="store_false")
    parser.add_argument("--torch_dtype", dest="encoder_dtype")
    use_parser(parser._actions)
    assert in_flag_terms("train_file a/train_file.txt: no such file") == "--train_file a/train_file.txt: no such file"
    assert in_flag_terms("streaming=True needs max_steps; drop streaming=True.") == \
        "--streaming needs max_steps; drop --streaming."
    assert in_flag_terms("loss='nce' is unknown; the loss diverged") == "--loss 'nce' is unknown; the loss diverged"
    # a one-word field is rewritten where the error lists it, never as the noun after an article
    assert in_flag_terms("device 'x' is not a device", ("device",)) == "--device 'x' is not a device"
    assert in_flag_terms("encoder_dtype int8 is unknown") == "--encoder_dtype int8 is unknown"  # not its alias
    # the command line's own checks already speak in flags: left as they are
    own = "--output_dir x holds a run (max_steps: 2 then)"
    assert in_flag_terms(own) == own
    # the export's positional arguments are named as its usage writes them
    assert in_flag_terms("checkpoint is missing", ("checkpoint",)) == "CHECKPOINT is missing"


def test_the_command_line_catches_only_the_root_error(capsys, monkeypatch):
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)

    def refuses():
        raise CSEError("device 'x' is not a device", fields=("device",))

    assert run_cli(refuses, "hf-cse-eval") == 1
    assert capsys.readouterr().err.startswith("hf-cse-eval: error: --device 'x' is not a device")

    def has_a_bug():
        raise KeyError("a bug, not a refusal")

    with pytest.raises(KeyError):  # its traceback is shown: no one-line message hides a bug
        run_cli(has_a_bug, "hf-cse-eval")
    monkeypatch.setenv("HF_CSE_DEBUG", "1")
    with pytest.raises(CSEError):  # the debug switch shows the traceback of a refusal too
        run_cli(refuses, "hf-cse-eval")


def test_the_senteval_data_fix_names_each_commands_own_flag(tmp_path):
    """The library names the evaluation's senteval_source; a training run words it as its eval_source
    (in_training_terms), and each command prints its own flag (run_eval had both, garbled: issue firsthour 6)."""
    from hf_cse.evaluation import data
    from hf_cse.evaluation.rowcheck import in_training_terms

    with pytest.raises(data.SentEvalDataError) as missing:
        data.load_sts("STSBenchmark", tmp_path / "none", "dev")
    err = missing.value
    use_parser(HfArgumentParser(hf_cse_eval.EvalArguments)._actions)
    assert in_flag_terms(str(err), err.fields).endswith(
        "pass that data/downstream folder as --senteval_data_dir, or read the tasks from the Hugging Face Hub "
        "(--senteval_source hub).")
    trained = in_training_terms(err)
    assert isinstance(trained, data.SentEvalDataError) and "senteval_source" not in str(trained)
    use_parser(hf_cse_train.argument_parser()._actions)
    assert in_flag_terms(str(trained), trained.fields).endswith(
        "as --senteval_data_dir, or read the tasks from the Hugging Face Hub (--eval_source hub).")
