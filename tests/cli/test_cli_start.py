"""Commands answer at once what needs no model (issue 38): ``python -m hf_cse --help`` and ``config NAME`` never
import torch; ``--help`` and the refusals of bad flags and paths do not either, from the parser description shipped
in the package or, where that is not valid, the one a command's first start writes (hf_cse.cli.parser_cache).
Checked on what a process has imported, not on a clock (the timings are benchmarks/bench_cli_start.py's). The
rebuilt parser must parse and show its help as the command's own does."""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from helpers import package_losses, package_methods

from hf_cse.checks import InputError
from hf_cse.cli import entry_points, evaluate, export, parser_cache, run_cli, train
from hf_cse.cli.help import full_help
from hf_cse.cli.parsing import is_path_flag
from hf_cse.errors import CSEError
from hf_cse.files import DataError
from hf_cse.output_folder import OutputFolderError

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "transformers.modeling_utils", "sentence_transformers", "datasets", "accelerate")
#: runs ``python -m hf_cse ARGS`` in this process, then prints which heavy modules it imported; with
#: ``HIDE_SHIPPED`` set, as if the package shipped no valid parser description
CHILD = f"""
import json, os, runpy, sys
if os.environ.get("HIDE_SHIPPED"):
    import hf_cse.cli.parser_cache as parser_cache
    parser_cache.shipped_path = lambda command: parser_cache.Path(os.devnull, command)
sys.argv = ["hf_cse", *sys.argv[1:]]
try:
    runpy.run_module("hf_cse", run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as end:
    code = end.code
print(json.dumps({{"code": code, "imported": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""


def python_m_hf_cse(args: list[str], cache: Path, hide_shipped: bool = False) -> tuple[int, list[str], str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_CSE_CACHE": str(cache), "COLUMNS": "100",
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HIDE_SHIPPED": "1" if hide_shipped else ""}
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=cache, env=env, capture_output=True, text=True)
    *shown, report = proc.stdout.splitlines()
    result = json.loads(report)
    return result["code"], result["imported"], "\n".join(shown), proc.stderr


@pytest.mark.slow
def test_help_config_and_no_model_refusals_import_no_torch(tmp_path):
    for args in (["--help"], ["config", "cpu_2proc"], ["config"]):
        code, imported, out, err = python_m_hf_cse(args, tmp_path)
        assert code == 0 and imported == [], (args, imported, err)
    assert out.splitlines()[0].startswith("cpu_2proc")

    shipped = parser_cache.shipped_parser("train") is not None  # False where Python, transformers or torch differ
    if shipped:  # a fresh install's first start: from the description shipped in the package
        code, imported, shipped_help, err = python_m_hf_cse(["train", "--help"], tmp_path)
        assert code == 0 and imported == [] and "--learning_rate" in shipped_help, (imported, err)
        assert shipped_help.startswith("usage: hf-cse-train [options]") and "--help_all" in shipped_help
        assert not (tmp_path / "parsers").exists()

    code, imported, first_help, err = python_m_hf_cse(["train", "--help"], tmp_path, hide_shipped=True)
    assert code == 0 and "torch" in imported and "--learning_rate" in first_help, err  # built, then written down
    assert not shipped or first_help == shipped_help
    assert list((tmp_path / "parsers").glob("train-*.json")), "the first start wrote no parser down"
    code, imported, help_text, err = python_m_hf_cse(["train", "--help"], tmp_path, hide_shipped=True)
    assert code == 0 and imported == [] and help_text == first_help, (imported, err)
    code, imported, all_help, err = python_m_hf_cse(["train", "--help_all"], tmp_path, hide_shipped=True)
    assert code == 0 and imported == [] and "--adam_beta2" in all_help, (imported, err)  # every flag, before torch

    notes = tmp_path / "notes_folder"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine\n")
    (tmp_path / "corpus.txt").write_text("a sentence\n")
    refusals = {  # argv -> (exit code, what stderr says)
        ("train", "--train_file", str(tmp_path / "missing.txt")): (1, "missing.txt does not exist"),
        ("train", "--lerning_rate", "1e-5"): (1, "unknown flag --lerning_rate; did you mean --learning_rate?"),
        ("train", "--max_seq_length", "abc"): (2, "argument --max_seq_length: invalid int value"),
        ("train", "--output_dir", ""): (1, "--output_dir is empty"),
        ("train", "--model_name_or_path", "./missing"): (1, "--model_name_or_path ./missing: no such folder"),
        ("train", "--dataset_name", "./missing"): (1, "--dataset_name ./missing: no such folder"),
        ("train", "--preset", "simcse_bert", "--learning_rate", "0"): (1, "--learning_rate 0.0 must be a finite"),
        ("train", "--output_dir", str(notes)): (1, "holds files that are not checkpoints of a run (notes.txt)"),
        ("train", "--per_device_train_batch_size", "0"): (1, "a contrastive batch needs at least 2 sentences"),
        ("train", "--max_steps", "0"): (1, "--max_steps 0 trains nothing"),
        ("train", "--train_file", str(tmp_path / "corpus.txt"), "--text_column", "s"): (1, "is read as plain text"),
        ("train", "--train_file", str(tmp_path / "corpus.txt")): (1, "corpus.txt has 1 sentence, fewer than one global "
                                                                     "batch of 64"),
        ("train", "--temperature", "0"): (1, "infonce: --temperature must be a number >= 0.0001 (the papers"),
        ("train", "--loss", "nce"): (1, "Unknown loss 'nce' (did you mean 'infonce'?). Available losses: "
                                        f"{', '.join(package_losses())}."),
        ("train", "--method", "imsimcse", "--m", "-1"): (1, "off_dropout_infonce: --m must be a finite number > 0"),
        ("train", "--method", "esimcse", "--queue_size", "-3"): (1, "esimcse: --queue_size must be an integer >= 0"),
        ("train", "--mlm_weight", "0.2"): (1, "--mlm_weight 0.2 does nothing while --do_mlm is false"),
        ("train", "--loss", "infonce", "--margin", "1"): (1, "--loss infonce does not take --margin."),
        ("train", "--matryoshka_dims", "16,16"): (1, "--matryoshka_dims: [16, 16] repeats a dimension"),
    }
    (tmp_path / "empty").mkdir()  # a cache with no description: the shipped one answers (else the one written above)
    for args, (want_code, message) in refusals.items():
        code, imported, _, err = python_m_hf_cse(list(args), tmp_path / "empty" if shipped else tmp_path)
        assert (code, imported) == (want_code, []) and message in err, (args, code, imported, err)
        assert "Traceback" not in err


@pytest.mark.slow
@pytest.mark.parametrize("command, module, args, message", [
    ("eval", evaluate, ["--model_name_or_path", "./missing"], "--model_name_or_path ./missing: no such folder"),
    ("export", export, ["./missing", "out"], "CHECKPOINT ./missing: no such folder"),
])
def test_eval_and_export_refuse_a_missing_model_before_importing_torch(command, module, args, message, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("HF_CSE_CACHE", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setattr(sys, "argv", [f"hf-cse-{command}"])  # as python -m hf_cse names it: the cache's key
    build_parser = getattr(module, entry_points.PARSER_BUILDERS[command])
    parser_cache.remember_parser(command, build_parser())  # what a first start writes
    code, imported, _, err = python_m_hf_cse([command, *args], tmp_path)
    assert (code, imported) == (1, []) and message in err, (code, imported, err)


@pytest.fixture(scope="module")
def train_parsers():
    parser = train.argument_parser()
    return parser, parser_cache.rebuild(json.loads(json.dumps(parser_cache.describe(parser))))


def outcome(parser, argv: list[str], capsys) -> tuple:
    """What ``parser`` makes of ``argv``: the values it read, or its exit code and output."""
    try:
        return ("read", vars(parser.parse_known_args(argv)[0]))
    except SystemExit as end:
        out = capsys.readouterr()
        return ("exit", end.code, out.out, out.err)


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["--max_seq_length", "abc"],
    ["--method", "nope"],
    ["--lerning_rate", "1e-5", "--output_dir", "x"],
    ["--train_fil", "a.txt"],  # the start of --train_file and --train_files: unknown (no abbreviations)
    ["--dataset_nam", "d", "--no_mlp_only_train", "--model_name_or_path", "m"],  # a prefix (unknown), a --no_ form
    ["--matryoshka_dims", "8,4", "--report_to", "none", "tensorboard", "--torch_dtype", "bfloat16"],
    # a boolean flag's word: was read as text before torch and refused 17 s later by the command's parser
    ["--method", "diffcse", "--generator_sampling", "maybe"],
    ["--normalize", "Yes", "--bf16", "0"],
])
def test_the_cached_train_parser_reads_what_the_command_reads(train_parsers, argv, capsys):
    parser, cached = train_parsers
    own, from_cache = outcome(parser, argv, capsys), outcome(cached, argv, capsys)
    if own[0] == "exit":  # --help, argparse's errors: the same text
        assert from_cache == own
    else:  # the values the early checks read (paths and the flags that choose how data is read) are the same
        names = [n for n in own[1] if is_path_flag(n) or n in ("dataset_name", "pair_column")]
        assert {n: from_cache[1][n] for n in names} == {n: own[1][n] for n in names}
        assert from_cache[1].keys() == own[1].keys()


@pytest.mark.parametrize("command", list(entry_points.MODULES))
def test_a_rebuilt_parser_shows_the_commands_help_at_any_width(command, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["run_unsup.py"])  # the program name argparse shows, as the command's process
    description = json.loads(json.dumps(parser_cache.describe(entry_points.build_parser(command))))
    for width in ("60", "200"):
        monkeypatch.setenv("COLUMNS", width)
        own, rebuilt = entry_points.build_parser(command), parser_cache.rebuild(description)
        assert rebuilt.format_help() == own.format_help()  # --help (hf_cse.cli.help)
        assert full_help(rebuilt) == full_help(own)  # argparse's own: train's --help_all


def test_a_parser_description_round_trips_and_is_found_by_its_key(tmp_path, monkeypatch):
    parser = argparse.ArgumentParser(prog="tool", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("src")
    parser.add_argument("--n", type=int, default=3, help="how many (at most %(default)s)")
    parser.add_argument("--mode", choices=["a", "b"], default="a", help="50%% of it")
    parser.add_argument("--items", nargs="+", default=[])
    parser.add_argument("--quiet", action="store_true", help="say less")
    monkeypatch.setenv("HF_CSE_CACHE", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "100")
    assert parser_cache.cached_parser("tool") is None
    parser_cache.remember_parser("tool", parser)
    cached = parser_cache.cached_parser("tool")
    argv = ["in", "--n", "5", "--mode", "b", "--items", "x", "y", "--qu"]
    assert vars(cached.parse_args(argv)) == vars(parser.parse_args(argv))
    assert cached.format_help() == parser.format_help() and "how many (at most 3)\n" in cached.format_help()
    monkeypatch.setenv("COLUMNS", "60")  # the same description, laid out for another width
    assert parser_cache.cached_parser("tool").format_help() == parser.format_help()
    parts = parser_cache.key_parts()
    monkeypatch.setattr(parser_cache, "key_parts", lambda: {**parts, "hf_cse": "edited"})  # hf_cse changed since
    assert parser_cache.cached_parser("tool") is None
    monkeypatch.setattr(parser_cache, "key_parts", lambda: parts)
    next((tmp_path / "parsers").glob("tool-*.json")).write_text("{not json")  # a damaged file: the slow path
    assert parser_cache.cached_parser("tool") is None
    for edit in range(parser_cache.KEEP + 2):  # one description per key; the oldest beyond KEEP go
        monkeypatch.setattr(parser_cache, "key_parts", lambda edit=edit: {**parts, "hf_cse": str(edit)})
        parser_cache.remember_parser("tool", parser)
    assert len(list((tmp_path / "parsers").glob("tool-*.json"))) == parser_cache.KEEP
    assert parser_cache.cached_parser("tool") is not None  # the newest is kept


def test_an_occupied_output_folder_is_refused_early_unless_the_command_may_use_it(train_parsers, tmp_path):
    _, cached = train_parsers
    finished = tmp_path / "finished"
    finished.mkdir()
    for name in ("training_info.json", "config.json", "model.safetensors"):
        (finished / name).write_text("{}")
    interrupted = tmp_path / "interrupted"
    (interrupted / "checkpoint-5").mkdir(parents=True)
    (interrupted / "hf_cse_run.json").write_text("{}")
    check = partial(entry_points.check_command_line, "train", copy.deepcopy(cached))
    with pytest.raises(OutputFolderError, match=r"already holds a finished run\. Choose another --output_dir, or "
                                                r"pass --overwrite_output_dir to start over"):
        check(["--output_dir", str(finished)])
    for given in (["--overwrite_output_dir"], ["--overwrite_output_dir", "false"], ["--config", "run.json"],
                  ["--resume_from_checkpoint", str(finished)]):  # the command decides, after reading them
        check(["--output_dir", str(finished), *given])
    check(["--output_dir", str(interrupted)])  # resumed (or refused for other settings) by the command
    check(["--output_dir", str(tmp_path / "new")])


def test_a_local_dataset_name_that_names_no_folder_is_refused_early_and_a_hub_id_is_left_to_the_command(
        train_parsers, tmp_path):
    """A mistyped --dataset_name folder and a file failed with datasets' traceback after the model was loaded."""
    _, cached = train_parsers
    check = partial(entry_points.check_command_line, "train", copy.deepcopy(cached))
    (tmp_path / "corpus.txt").write_text("a sentence\n")
    with pytest.raises(DataError, match=r"^dataset_name .*nosuch: no such folder\. Check the path"):
        check(["--dataset_name", str(tmp_path / "nosuch")])
    with pytest.raises(DataError, match=r"corpus.txt is a file, not a folder: give it as train_file"):
        check(["--dataset_name", str(tmp_path / "corpus.txt")])
    check(["--dataset_name", "org/sentences"])  # a Hub id: read (or refused) by the command
    check(["--dataset_name", str(tmp_path)])  # a folder: its files are checked as they are read


def test_a_saved_dataset_name_without_rows_is_refused_before_torch(train_parsers, tmp_path):
    """A save_to_disk folder of 0 rows as --dataset_name ended, seconds later, in datasets' IndexError traceback."""
    _, cached = train_parsers
    check = partial(entry_points.check_command_line, "train", copy.deepcopy(cached))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "state.json").write_text('{"_data_files": [], "_split": null}')  # as datasets writes it
    with pytest.raises(DataError, match=r"^dataset_name .*empty is empty \(0 rows\): Dataset.save_to_disk wrote"):
        check(["--dataset_name", str(tmp_path / "empty")])
    (tmp_path / "splits" / "train").mkdir(parents=True)
    (tmp_path / "splits" / "dataset_dict.json").write_text('{"splits": ["train"]}')
    (tmp_path / "splits" / "train" / "state.json").write_text('{"_data_files": []}')
    with pytest.raises(DataError, match=r"is empty \(0 rows in its 'train' split\)"):
        check(["--dataset_name", str(tmp_path / "splits")])
    (tmp_path / "splits" / "train" / "state.json").write_text('{"_data_files": [{"filename": "data.arrow"}]}')
    check(["--dataset_name", str(tmp_path / "splits")])  # rows: read by the command


def test_the_early_count_checks_leave_to_the_command_what_needs_the_processes_or_a_config(train_parsers, tmp_path):
    _, cached = train_parsers
    check = partial(entry_points.check_command_line, "train", copy.deepcopy(cached))
    with pytest.raises(ValueError, match="gradient_accumulation_steps must be at least 1, got 0"):
        check(["--gradient_accumulation_steps", "0"])
    check(["--per_device_train_batch_size", "1"])  # enough with a second process: the command knows how many
    check(["--num_train_epochs", "0", "--config", str(tmp_path / "run.json")])  # the file may give --max_steps


def test_a_typed_eval_steps_or_best_metric_the_run_cannot_use_is_refused_early(train_parsers, tmp_path):
    """--eval_steps typed while --eval_strategy is no, whatever its value (5, --logging_steps' default, passed as if
    transformers had filled it in), and a typed --metric_for_best_model the run's dev data will not log (refused once
    the stack had loaded); a preset's interval and metric, and what a --config file may change, are the command's."""
    _, cached = train_parsers

    def check(*argv):
        entry_points.check_command_line("train", copy.deepcopy(cached), list(argv))

    with pytest.raises(ValueError, match=r"^eval_steps=5 scores nothing during training: .* add eval_strategy='steps'"):
        check("--eval_steps", "5")
    check("--eval_steps", "5", "--eval_strategy", "steps")
    check("--preset", "simcse_bert", "--eval_steps", "50")  # the preset's strategy is steps
    check("--eval_steps", "5", "--config", str(tmp_path / "run.json"))  # the file may give --eval_strategy
    (tmp_path / "p.tsv").write_text("sentence1\tsentence2\tscore\na\tb\t1\nc\td\t2\ne\tf\t3\n")  # read early too
    own = ("--eval_file", str(tmp_path / "p.tsv"), "--eval_name", "mine", "--eval_strategy", "steps")
    with pytest.raises(ValueError, match=r"^metric_for_best_model stsb_spearman is not a score this run logs "
                                         r"\(mine_spearman\): use metric_for_best_model='mine_spearman'\.$"):
        check(*own, "--metric_for_best_model", "stsb_spearman")
    check(*own, "--metric_for_best_model", "eval_mine_spearman")
    check(*own, "--metric_for_best_model", "stsb_spearman", "--senteval_data_dir", str(tmp_path))
    check(*own, "--preset", "simcse_bert")  # its stsb_spearman: the command selects by the pairs instead


def test_the_early_loss_checks_read_the_chosen_loss_rules_and_leave_the_rest_to_the_command(train_parsers,
                                                                                              tmp_path, monkeypatch):
    _, cached = train_parsers
    cached.facts = entry_points.train_facts()  # as the description holds them
    check = partial(entry_points.check_command_line, "train", copy.deepcopy(cached))
    with pytest.raises(ValueError, match=r"^gs_infonce: --noise_std must be a finite number > 0, got -0.5\.$"):
        check(["--loss", "gs_infonce", "--noise_std", "-0.5"])
    with pytest.raises(ValueError, match="arccon: --u must be an angle in degrees in"):
        check(["--loss", "arccon", "--u", "180"])
    check(["--loss", "gs_infonce", "--noise_std", "0.5", "--temperature", "0.1"])
    # the DCL objective's flags (refused 6 s in, as "dcl: temperature ...", before)
    with pytest.raises(ValueError, match=r"^dcl: --dcl_temperature must be a number >= 0\.0001 \(.*\), got 0\.0\.$"):
        check(["--dcl_weight", "0.1", "--dcl_temperature", "0"])
    with pytest.raises(ValueError, match=r"^--dcl_weight must be a finite number >= 0, got -1\.0\.$"):
        check(["--dcl_weight", "-1"])
    check(["--dcl_weight", "0.1", "--dcl_temperature", "0.05"])
    check(["--temperature", "0", "--config", str(tmp_path / "run.json")])  # the file may choose another loss
    from hf_cse.losses.registry import available_losses

    def listing(losses):  # every one: a loss added to the package is listed too
        return re.escape(f"Unknown loss 'nce' (did you mean 'infonce'?). Available losses: {', '.join(losses)}.")

    known = available_losses()  # those of the facts above
    with pytest.raises(ValueError, match=listing(known)):
        check(["--loss", "nce"])  # this process's registry (the caller may have registered its own losses)
    monkeypatch.delitem(sys.modules, "hf_cse.losses.registry")  # a command's process: the description's losses
    with pytest.raises(ValueError, match=listing(known)):
        check(["--loss", "nce"])


@pytest.mark.parametrize("argv, line", [
    (["--dup_rate", "0.1"], "--dup_rate only applies to --method esimcse (got --method simcse): drop --dup_rate, or "
                            "choose that method."),
    (["--method", "diffcse", "--queue_size", "4", "--template", "*sent_0*"],
     "--queue_size, --template only apply to --method esimcse / promptbert (got --method diffcse): drop "
     "--queue_size, or choose that method."),
])
def test_the_early_check_refuses_another_methods_setting_as_the_command_does(train_parsers, argv, line, tmp_path,
                                                                             monkeypatch):
    """Refused only after torch was imported (seconds), while a loss's hyperparameters were refused at once."""
    from hf_cse.cli.arguments import config_kwargs_from

    parser, _ = train_parsers
    facts = entry_points.train_facts()  # as the description holds them

    def check(argv):  # as a command's start: a parser of its own (a preset sets its defaults)
        start = parser_cache.rebuild(json.loads(json.dumps(parser_cache.describe(parser))))
        start.facts = facts
        entry_points.check_command_line("train", start, argv)

    argv = [*argv, "--output_dir", str(tmp_path / "out")]
    with pytest.raises(InputError) as early:
        check(argv)
    assert str(early.value) == line
    model_args = parser.parse_args_into_dataclasses(argv)[0]  # the command's own check, once the model is read
    with pytest.raises(InputError) as late:
        config_kwargs_from(model_args.method, model_args)
    assert str(late.value) == line
    check(["--method", "esimcse", "--dup_rate", "0.1"])
    check(["--dup_rate", "0.1", "--config", str(tmp_path / "r.json")])
    # a preset's own method settings with another method: the command drops them (README), so none is refused
    for preset in ("diffcse_bert", "esimcse_bert_base", "promptbert_roberta_base"):
        check(["--preset", preset, "--method", "simcse"])
    with pytest.raises(InputError, match=r"^--dup_rate only applies to --method esimcse \(got --method simcse\)"):
        check(["--preset", "esimcse_bert_base", "--method", "simcse", "--dup_rate", "0.3"])  # typed: it alone


@pytest.mark.parametrize("flag", ["bf16", "fp16"])
def test_a_typed_bf16_or_fp16_false_is_refused_early_naming_the_precision_flag(train_parsers, flag, tmp_path):
    """--bf16 false trained in bf16 all the same (auto picks it on a CPU that computes it), and the card said bf16
    true: false is the flag's default, so it cannot say 'not bf16' (a review found it)."""
    _, cached = train_parsers
    out = ["--output_dir", str(tmp_path / "out")]
    with pytest.raises(InputError, match=rf"^--{flag} false does not turn {flag} off: .*Pass --precision fp32"):
        entry_points.check_command_line("train", copy.deepcopy(cached), [f"--{flag}", "false", *out])
    entry_points.check_command_line("train", copy.deepcopy(cached), ["--bf16", "true", *out])
    entry_points.check_command_line("train", copy.deepcopy(cached), ["--precision", "fp32", *out])
    entry_points.check_command_line("train", copy.deepcopy(cached), [f"--{flag}", "false", "--precision", "fp32", *out])


@pytest.mark.parametrize("flag", ["eval_on_start", "logging_nan_inf_filter", "hub_strategy", "hub_always_push"])
def test_a_trainer_flag_the_trainer_decides_is_refused_when_typed(train_parsers, flag, tmp_path):
    """--eval_on_start false still scored at step 0, and --logging_nan_inf_filter true was turned off: the trainer
    sets both itself (a review found them accepted and overwritten without a word). --hub_strategy checkpoint pushed
    no checkpoint: a run pushes its export once."""
    _, cached = train_parsers
    with pytest.raises(InputError, match=rf"^--{flag} is hf_cse's to decide: .* Drop --{flag}\.$"):
        value = "checkpoint" if flag == "hub_strategy" else "false"
        entry_points.check_command_line("train", copy.deepcopy(cached), [f"--{flag}", value, "--output_dir",
                                                                         str(tmp_path / "out")])


def test_use_liger_kernel_is_refused_early(train_parsers, tmp_path):
    """--use_liger_kernel stopped after the model was loaded, in transformers' ImportError's stack trace."""
    _, cached = train_parsers
    out = ["--output_dir", str(tmp_path / "out")]
    with pytest.raises(InputError, match=r"^--use_liger_kernel: Liger patches .* would patch nothing\. Drop "
                                         r"--use_liger_kernel\.$") as raised:
        entry_points.check_command_line("train", copy.deepcopy(cached), ["--use_liger_kernel", *out])
    assert raised.value.fields == ("use_liger_kernel",)  # said as the flag, --use_liger_kernel
    entry_points.check_command_line("train", copy.deepcopy(cached), ["--use_liger_kernel", "false", *out])


@pytest.mark.parametrize("flag", ["hub_model_id", "hub_token", "hub_private_repo", "hub_revision"])
def test_a_hub_push_setting_without_push_to_hub_is_refused(train_parsers, flag, tmp_path):
    """--hub_model_id someone/run without --push_to_hub trained and pushed nothing, without a word; typed early, or
    set by a --config file once the command has read it."""
    _, cached = train_parsers
    value = ["true"] if flag == "hub_private_repo" else ["someone/run"]
    out = ["--output_dir", str(tmp_path / "out")]
    with pytest.raises(InputError, match=rf"^--{flag} sets the Hub push .* add --push_to_hub, or drop --{flag}\.$"):
        entry_points.check_command_line("train", copy.deepcopy(cached), [f"--{flag}", *value, *out])
    entry_points.check_command_line("train", copy.deepcopy(cached), [f"--{flag}", *value, "--push_to_hub", *out])
    config = tmp_path / "run.json"
    config.write_text(json.dumps({flag: True if flag == "hub_private_repo" else "someone/run"}))
    with pytest.raises(InputError, match=rf"run\.json: '{flag}' sets the Hub push .* remove '{flag}' from --config"):
        train.parse_args(["--config", str(config), *out])


def test_the_hub_push_and_the_trainers_own_flags_from_a_config_file(tmp_path):
    """A review: --push_to_hub false typed over a file that pushes was refused (the file's hub_model_id "sets the Hub
    push"), where a typed flag that idles a file's setting leaves it out; a file's hub_strategy was ignored, its
    use_liger_kernel refused only once the model was loaded, naming a flag never typed; --hub_private_repo false
    (a public repo, as unset) was refused as setting the push."""
    out = ["--output_dir", str(tmp_path / "out")]
    pushes = tmp_path / "push.json"
    pushes.write_text(json.dumps({"push_to_hub": True, "hub_model_id": "me/x", "hub_private_repo": True}))
    spec = train.parse_args(["--config", str(pushes), "--push_to_hub", "false", *out])
    assert spec[6].hub_model_id is None and not spec[6].hub_private_repo
    assert spec[-1].dropped_from_file == ("'hub_model_id' (nothing to do with --push_to_hub typed); "
                                          "'hub_private_repo' (nothing to do with --push_to_hub typed)")
    for key, value in (("hub_strategy", "checkpoint"), ("use_liger_kernel", True)):
        config = tmp_path / f"{key}.json"
        config.write_text(json.dumps({key: value}))
        with pytest.raises(InputError, match=rf"^--config .*{key}\.json: '{key}'.* Remove '{key}' from --config"):
            train.parse_args(["--config", str(config), *out])
    train.parse_args(["--hub_private_repo", "false", *out])


def test_a_setting_without_its_switch_is_refused_early_unless_a_flag_the_preset_or_the_method_turns_it_on(
        train_parsers, tmp_path):
    """--mlm_weight without --do_mlm (the brief's own example) was refused 6 s in, once the encoder's config was
    read: its switch is on by a flag, a preset or the method's default, which the command line knows."""
    _, cached = train_parsers
    cached.facts = entry_points.train_facts()  # as the description holds them

    def check(*argv):
        entry_points.check_command_line("train", copy.deepcopy(cached), [*argv, "--output_dir", str(tmp_path / "o")])

    for argv, line in ((["--mlm_weight", "0.2"], "--mlm_weight 0.2 does nothing while --do_mlm is false: it acts "
                                                  "only with --do_mlm true. Set that, or drop --mlm_weight."),
                       (["--mlm_weight", "0.2", "--do_mlm", "false"], "--mlm_weight 0.2 does nothing while --do_mlm"),
                       (["--lora_dropout", "0.1"], "--lora_dropout 0.1 does nothing while --lora_r is 0"),
                       (["--off_dropout_grad", "false"], "--off_dropout_grad false does nothing while --off_dropout is "
                                                         "false"),
                       # typed off, over the method's own default
                       (["--method", "imsimcse", "--off_dropout", "false", "--off_dropout_grad", "false"],
                        "--off_dropout_grad false does nothing while --off_dropout is false")):
        with pytest.raises(InputError) as refused:
            check(*argv)
        assert str(refused.value).startswith(line), (argv, str(refused.value))
    check("--mlm_weight", "0.2", "--do_mlm")
    check("--lora_r", "4", "--lora_dropout", "0.1")
    check("--method", "imsimcse", "--off_dropout_grad", "false")  # the method's own off-dropout


#: settings a method's config field or a loss declares it acts only with (their ``needs``), typed without them: the
#: command line, the refusal's start; a review found each accepted and ignored
DOES_NOTHING = {
    "esimcse momentum without a queue": (["--method", "esimcse", "--queue_size", "0", "--momentum", "0.9"],
                                         "--momentum 0.9 does nothing while --queue_size is 0: it acts only with "
                                         "--queue_size > 0. Set that, or drop --momentum."),
    "promptbert denoising settings without denoising": (
        ["--method", "promptbert", "--template_denoising", "false", "--denoising_positions", "encoder"],
        "--denoising_positions encoder does nothing while --template_denoising is false"),
    "diffcse generator sampling with the unigram generator": (
        ["--method", "diffcse", "--generator_sampling", "true"],
        "--generator_sampling true does nothing while --generator_name_or_path is unset: it acts only with "
        "--generator_name_or_path set to other than unigram."),
    "diffcse RTD settings without the RTD loss": (
        ["--method", "diffcse", "--lambda_rtd", "0", "--masking_ratio", "0.5"],
        "--masking_ratio 0.5 does nothing while --lambda_rtd is 0"),
    "diffcse generator with delete edits": (
        ["--method", "diffcse", "--edit_operation", "delete", "--generator_name_or_path", "gen"],
        "--generator_name_or_path gen does nothing while --edit_operation is delete"),
    "vicreg's variance settings with its surrogate": (["--loss", "vicreg", "--gamma", "2"],
                                                      "--gamma 2.0 does nothing while --surrogate is true"),
    "paradigm margin without GD": (["--loss", "paradigm", "--gd", "none", "--m", "0.5"],
                                   "--m 0.5 does nothing while --gd is none: it acts only with --gd indicator"),
    "gs_infonce noise settings without noise": (["--loss", "gs_infonce", "--lam", "0", "--noise_std", "2"],
                                                "--noise_std 2.0 does nothing while --lam is 0"),
}


@pytest.mark.parametrize("case", sorted(DOES_NOTHING))
def test_a_setting_that_would_do_nothing_in_this_run_is_refused_before_torch(train_parsers, tmp_path, case):
    argv, line = DOES_NOTHING[case]
    _, cached = train_parsers
    cached.facts = entry_points.train_facts()
    with pytest.raises(InputError) as refused:
        entry_points.check_command_line("train", copy.deepcopy(cached), [*argv, "--output_dir", str(tmp_path / "o")])
    assert str(refused.value).startswith(line), str(refused.value)


#: a typed value that breaks each rule a method's setting may have (hf_cse.hyperparameter_rules.RULES)
BREAKS_RULE = {"positive": "0", "non_negative": "-1", "fraction": "1", "open_fraction": "1", "unit_interval": "2",
               "size": "-1", "edit_share": "0", "template": "no placeholder"}


def test_the_early_check_refuses_a_methods_setting_that_breaks_its_rule_as_the_command_does(train_parsers,
                                                                                            tmp_path):
    """A bad value of a method's setting (``--queue_size -3``, ``--dropout 1.5``) was refused only once torch was
    imported and the encoder read (6-9 s), while a loss's hyperparameters were refused at once. Every rule of every
    method's config is checked, so a method added to the package is covered too."""
    from hf_cse.cli.arguments import config_kwargs_from
    from hf_cse.cli.flags import in_flag_terms
    from hf_cse.models import METHODS
    from hf_cse.models.config import field_rule_owners

    parser, _ = train_parsers
    facts = entry_points.train_facts()  # as the description holds them
    start = parser_cache.rebuild(json.loads(json.dumps(parser_cache.describe(parser))))
    start.facts = facts
    checked = set()
    for method in package_methods():
        config_cls = METHODS[method].config_class
        for name, (rule, _) in field_rule_owners(config_cls).items():
            argv = ["--method", method, f"--{name}", BREAKS_RULE[rule], "--output_dir", str(tmp_path / "out")]
            with pytest.raises(CSEError) as early:
                entry_points.check_command_line("train", copy.deepcopy(start), argv)
            model_args = parser.parse_args_into_dataclasses(argv)[0]  # the command's own check: its config
            with pytest.raises(CSEError) as late:
                config_cls(**config_kwargs_from(method, model_args))
            assert str(early.value) == in_flag_terms(str(late.value), late.value.fields), (method, name)
            assert f"--{name} must be" in str(early.value)
            checked.add(name)
    assert {"dropout", "lora_r", "queue_size", "masking_ratio", "template", "template2"} <= checked
    entry_points.check_command_line("train", copy.deepcopy(start), ["--method", "esimcse", "--queue_size", "0",
                                                                     "--dup_rate", "0", "--dropout", "0"])
    entry_points.check_command_line("train", copy.deepcopy(start), ["--method", "esimcse", "--momentum", "1",
                                                                     "--mlm_probability", "0.5", "--do_mlm"])
    entry_points.check_command_line("train", copy.deepcopy(start), ["--queue_size", "-3", "--config",
                                                                     str(tmp_path / "r.json")])  # the file's method


SENTENCE_FILE_MISTAKES = {  # name, content, flags: what the reader refuses at the file's start
    "corpus.txt": ("a sentence\nanother one\n", ["--text_column", "sentence"]),
    "table.csv": ("id,sentence\n1,a sentence\n2,another one\n", []),
    "named.tsv": ("id\tsentence\n1\ta sentence\n", ["--text_column", "text"]),
    "records.txt": ('{"text": "a sentence"}\n{"text": "another one"}\n', []),
    "packed.txt": (b"\x1f\x8b\x08\x00 compressed", []),
    "blank.txt": ("\n \n", []),  # these two were refused ~20 s in, after torch was imported
    "fields.jsonl": ('{"sentence": "a sentence"}\n', []),
    "shifted.csv": ("id,text\n1,a sentence\n2,one, unquoted\n", []),  # were refused only once the stack was up
    "twice.csv": ("text,text\na,b\n", []),
    "table.txt": ("id,sentence\n0,a sentence\n1,another one\n", []),
}


@pytest.mark.parametrize("name", SENTENCE_FILE_MISTAKES)
def test_a_sentences_file_that_its_start_shows_unreadable_is_refused_early_as_the_reader_refuses_it(
        train_parsers, name, tmp_path):
    from hf_cse.data import load_pair_dataset, read_sentences
    from hf_cse.files import DataError

    content, flags = SENTENCE_FILE_MISTAKES[name]
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(DataError) as by_reader:
        read_sentences(path, flags[1] if flags else None)
    check = partial(entry_points.check_command_line, "train", copy.deepcopy(train_parsers[1]))
    with pytest.raises(DataError) as early:
        check(["--train_file", str(path), *flags])
    assert str(early.value) == str(by_reader.value)
    with pytest.raises(DataError) as by_pair_reader:  # pair rows: their own reader's refusal, early too
        load_pair_dataset("positive", str(path), text_column=flags[1] if flags else None)
    with pytest.raises(DataError) as pairs_early:
        check(["--train_file", str(path), *flags, "--pair_column", "positive"])
    assert str(pairs_early.value) == str(by_pair_reader.value)


def test_the_early_sentences_file_check_passes_what_the_reader_reads(train_parsers, tmp_path):
    from hf_cse.data import read_sentences

    check = partial(entry_points.check_command_line, "train", copy.deepcopy(train_parsers[1]))
    files = {"plain.txt": "a b\n", "one.csv": "sentence\na b\n", "two.csv": "id,text\n1,a b\n",
             "named.tsv": "id\tsentence\n1\ta b\n", "rows.jsonl": '{"text": "a b"}\n'}
    for name, content in files.items():
        (tmp_path / name).write_text(content)
        flags = ["--text_column", "sentence"] if name == "named.tsv" else []
        assert read_sentences(tmp_path / name, flags[1] if flags else None) == ["a b"]
        # (one sentence: enough for a batch of one, as a plain text file is counted before torch)
        check(["--train_file", str(tmp_path / name), *flags, "--per_device_train_batch_size", "1"])


def test_a_small_sentences_file_is_counted_against_one_global_batch_before_torch(train_parsers, tmp_path,
                                                                                 monkeypatch):
    """It took the command ~7 s of imports to say a file of 2 sentences makes no batch of 4: counted as the reader
    counts (non-blank lines), against these processes' global batch and max_train_samples; a --config file may set
    the batch, so it is left to the command."""
    from hf_cse.files import DataError

    path = tmp_path / "few.txt"
    path.write_text("one sentence\n\n   \nanother one\n")
    check = partial(entry_points.check_command_line, "train", copy.deepcopy(train_parsers[1]))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))} has 2 sentences, fewer than one global batch of 4 "
                                        r"\(per-device batch size x processes\)"):
        check(["--train_file", str(path), "--per_device_train_batch_size", "4"])
    check(["--train_file", str(path), "--per_device_train_batch_size", "2"])
    with pytest.raises(DataError, match=r"few\.txt cut to max_train_samples 1 has 1 sentence, fewer than one global "
                                        r"batch of 2"):
        check(["--train_file", str(path), "--per_device_train_batch_size", "2", "--max_train_samples", "1"])
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(DataError, match="has 2 sentences, fewer than one global batch of 4"):
        check(["--train_file", str(path), "--per_device_train_batch_size", "2"])
    check(["--train_file", str(path), "--per_device_train_batch_size", "4", "--config", str(tmp_path / "run.json")])


def test_a_hyperparameter_flag_the_chosen_loss_does_not_take_is_refused_early(train_parsers, tmp_path):
    """It took the command ~10 s of imports to say so; a preset's own values for another loss are not typed flags
    (the command drops them), and a --config file may choose another loss."""
    cached = copy.deepcopy(train_parsers[1])
    cached.facts = entry_points.train_facts()  # as the description holds them
    check = partial(entry_points.check_command_line, "train", cached)
    with pytest.raises(ValueError, match=r"^--loss infonce does not take --margin, --noise_std\. Its hyperparameters: "
                                         r"--temperature, --hard_negative_weight\.$"):
        check(["--loss", "infonce", "--margin", "1", "--noise_std", "2"])
    with pytest.raises(ValueError, match=r"^--loss off_dropout_infonce does not take --margin\."):
        check(["--method", "imsimcse", "--margin", "1"])  # the method's own loss
    check(["--preset", "gs_infonce_bert", "--loss", "barlow_twins"])  # the preset's temperature and noise_std
    check(["--loss", "infonce", "--margin", "1", "--config", str(tmp_path / "run.json")])


#: (method, --projector, --pooler_type, --mlp_only_train) given with --matryoshka_dims 16,8; None: not given
MATRYOSHKA_HEADS = [(method, projector, pooler, head_only)
                    for method in ("simcse", "diffcse") for projector in (None, "mlp", "none")
                    for pooler in (None, "cls", "avg") for head_only in (None, "False", "True")]


@pytest.mark.parametrize("method, projector, pooler, head_only", MATRYOSHKA_HEADS)
def test_matryoshka_through_a_head_the_export_skips_is_refused_early_only_where_every_encoder_refuses_it(
        train_parsers, tiny_bert_dir, method, projector, pooler, head_only):
    """It took the command ~10 s (the model loaded) to refuse --matryoshka_dims with the method's default head. The
    early check refuses exactly where the config refuses it whatever pooling the encoder brings (pooler_type None
    follows the encoder: cls for BERT, avg for MiniLM)."""
    from transformers import AutoConfig

    from hf_cse.models import METHODS

    cached = copy.deepcopy(train_parsers[1])
    cached.facts = entry_points.train_facts()
    given = {"--method": method, "--projector": projector, "--pooler_type": pooler, "--mlp_only_train": head_only}
    argv = ["--matryoshka_dims", "16,8", *[str(v) for flag, value in given.items() if value for v in (flag, value)]]
    try:
        entry_points.check_command_line("train", cached, argv)
        early = None
    except ValueError as refusal:
        early = str(refusal)
    config_class = METHODS[method].config_class
    fields = {"projector": projector, "mlp_only_train": head_only != "False" if head_only else None}
    refusals = set()
    for pooling in ([pooler] if pooler else ["cls", "avg"]):
        try:
            config_class(encoder_config=AutoConfig.from_pretrained(tiny_bert_dir), matryoshka_dims=[16, 8],
                         pooler_type=pooling, **{k: v for k, v in fields.items() if v is not None})
        except ValueError as refusal:
            refusals.add(str(refusal))
        else:
            refusals.add(None)
    assert (early is not None) == (None not in refusals), (early, refusals)
    assert early is None or early.startswith("matryoshka_dims trains prefixes of the training embedding")


@pytest.mark.parametrize("argv, said", [
    (["--matryoshka_dims", "16,16"], "repeats a dimension"),
    (["--matryoshka_dims", "16,0"], r"\[0\] out of range"),
    (["--matryoshka_dims", "16,8", "--matryoshka_weights", "1,2,3"], "has 3 values for 2 dimensions"),
    (["--matryoshka_weights", "1"], "is set without matryoshka_dims"),
])
def test_matryoshka_values_that_need_no_encoder_are_refused_early_by_the_librarys_rule(train_parsers, argv, said):
    """A repeat, a 0 or a count of weights unlike the dimensions' came ~22 s in (torch, transformers, the encoder);
    the early check applies the config's own rule (matryoshka_rules.check_matryoshka) to the flags."""
    from hf_cse.models.config import CSEConfig

    cached = copy.deepcopy(train_parsers[1])
    cached.facts = entry_points.train_facts()
    with pytest.raises(ValueError, match=said) as early:
        entry_points.check_command_line("train", cached, [*argv, "--projector", "none"])
    values = dict(zip(argv[::2], argv[1::2]))
    with pytest.raises(ValueError) as late:
        CSEConfig(matryoshka_dims=values.get("--matryoshka_dims"),
                  matryoshka_weights=values.get("--matryoshka_weights"), projector="none")
    assert str(early.value) == str(late.value)


def test_a_presets_values_are_the_defaults_of_the_early_checks(train_parsers):
    from hf_cse.presets import PRESETS

    preset = next(name for name, values in PRESETS.items() if values.get("learning_rate", 3e-5) != 3e-5)
    _, cached = train_parsers
    values = entry_points._train_values(copy.deepcopy(cached), ["--preset", preset])
    assert values["learning_rate"] == PRESETS[preset]["learning_rate"]
    typed = entry_points._train_values(copy.deepcopy(cached), ["--preset", preset, "--learning_rate", "0.5"])
    assert typed["learning_rate"] == 0.5
    with pytest.raises(ValueError, match="adam_beta2 1.0 must be in"):
        entry_points.check_command_line("train", copy.deepcopy(cached), ["--preset", preset, "--adam_beta2", "1"])


def test_ctrl_c_while_the_command_starts_is_one_line(monkeypatch, capsys):
    """Ctrl-C in the seconds the training stack takes to import (before the command's own Ctrl-C handling) ends
    with one line and the shell's code for SIGINT, not a traceback of the import."""
    from hf_cse.cli import entry_points

    def interrupted(command, argv, prog):
        raise KeyboardInterrupt

    monkeypatch.setattr(entry_points, "_run_command", interrupted)
    assert entry_points.train(["--max_steps", "1"]) == 130
    assert capsys.readouterr().err == "hf-cse-train: interrupted (Ctrl-C) while starting; nothing was done.\n"


#: bad ``--truncate_dims`` values: none names a dimension, a size under 1, a size twice, not a number
BAD_TRUNCATE_DIMS = [",", "", "0", "64,64", "abc"]


def late_refusal(argv: list[str], capsys) -> str:
    """The line the evaluation command itself (torch imported) ends ``argv`` with, after its ``error: ``."""
    assert evaluate.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0].split("error: ", 1)[1]


@pytest.mark.parametrize("value", BAD_TRUNCATE_DIMS)
def test_the_early_eval_check_refuses_bad_truncate_dims_as_the_command_does(value, tmp_path, capsys):
    cached = parser_cache.rebuild(json.loads(json.dumps(parser_cache.describe(evaluate.argument_parser()))))
    argv = ["--truncate_dims", value, "--output_dir", str(tmp_path / "ev")]
    early = partial(entry_points.check_command_line, "eval", copy.deepcopy(cached), argv)
    with pytest.raises(ValueError, match="truncate_dims"):
        early()
    assert run_cli(early, "hf-cse-eval") == 1  # as the command's start prints it
    early_line = capsys.readouterr().err.strip().split("error: ", 1)[1]
    assert early_line == late_refusal(argv, capsys)
    entry_points.check_command_line("eval", copy.deepcopy(cached), ["--truncate_dims", "64, 256,128"])  # valid


@pytest.mark.parametrize("tasks", ["STSB_nope", "sts,none", "sts,mteb:", ""])
def test_the_early_eval_check_refuses_bad_tasks_as_the_command_does(tasks, tmp_path, capsys):
    cached = parser_cache.rebuild(json.loads(json.dumps(parser_cache.describe(evaluate.argument_parser()))))
    argv = ["--tasks", tasks, "--output_dir", str(tmp_path / "ev")]
    early = partial(entry_points.check_command_line, "eval", copy.deepcopy(cached), argv)
    assert run_cli(early, "hf-cse-eval") == 1  # as the command's start prints it, before a model is read
    early_line = capsys.readouterr().err.strip().split("error: ", 1)[1]
    assert early_line == late_refusal(argv, capsys) and "task" in early_line
    assert not (tmp_path / "ev").exists()
    entry_points.check_command_line("eval", copy.deepcopy(cached), ["--tasks", "STS-B,mr,mteb:STS22"])  # valid


#: evaluation settings that would be accepted, recorded and ignored (a review found each), and mistakes of the
#: command line alone that were refused only after torch (9-12 s): argv -> what the line says
EVAL_SETTINGS_REFUSED = {
    ("--tasks", "STSB", "--mrpc_features", "full"): "--mrpc_features sets MRPC's features",
    ("--tasks", "STSB", "--sts_aggregation", "mean"): "--sts_aggregation aggregates the subsets of STS12-16",
    ("--tasks", "STSB", "--mode", "fast"): "--mode fast changes only the transfer tasks' classifier",
    ("--tasks", "STSB", "--mteb_model_name", "me/it"): "--mteb_model_name names the model in MTEB's results",
    ("--tasks", "STSB", "--mteb_model_revision", "a/b"): "--mteb_model_revision 'a/b': it must be one folder name",
    ("--tasks", "none", "--eval_file", "p.tsv", "--senteval_data_dir", "d"): "--senteval_data_dir is read for SentEval",
    ("--senteval_source", "hub", "--senteval_data_dir", "d"): "--senteval_data_dir is not read with --senteval_source",
    ("--tasks", "none"): "--tasks 'none' leaves nothing to evaluate",
    ("--batch_size", "0"): "--batch_size must be >= 1, got 0.",
    ("--tasks", "MR", "--truncate_dims", "16"): "--truncate_dims scores the STS and MTEB tasks of --tasks",
}


@pytest.mark.parametrize("argv", EVAL_SETTINGS_REFUSED)
def test_the_early_eval_check_refuses_settings_that_do_nothing_as_the_command_does(argv, tmp_path, capsys):
    cached = parser_cache.rebuild(json.loads(json.dumps(parser_cache.describe(evaluate.argument_parser()))))
    argv = [*argv, "--output_dir", str(tmp_path / "ev")]
    early = partial(entry_points.check_command_line, "eval", copy.deepcopy(cached), argv)
    assert run_cli(early, "hf-cse-eval") == 1
    early_line = capsys.readouterr().err.strip().split("error: ", 1)[1]
    assert EVAL_SETTINGS_REFUSED[tuple(argv[:-2])] in early_line
    assert early_line == late_refusal(argv, capsys)
    assert not (tmp_path / "ev").exists()


def test_the_eval_settings_a_task_uses_pass(tmp_path):
    cached = parser_cache.rebuild(json.loads(json.dumps(parser_cache.describe(evaluate.argument_parser()))))
    for argv in (["--tasks", "sts,MRPC", "--mrpc_features", "full", "--sts_aggregation", "mean", "--mode", "fast"],
                 ["--tasks", "STSB", "--mode", "dev", "--senteval_data_dir", str(tmp_path)],
                 ["--tasks", "none", "--eval_file", "p.tsv", "--mteb_model_revision", "local"]):  # typed default
        entry_points.check_command_line("eval", copy.deepcopy(cached), [*argv, "--output_dir", str(tmp_path / "e")])


@pytest.mark.slow
def test_eval_refuses_bad_truncate_dims_before_importing_torch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_CSE_CACHE", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setattr(sys, "argv", ["hf-cse-eval"])  # as python -m hf_cse names it: the cache's key
    parser_cache.remember_parser("eval", evaluate.argument_parser())  # what a first start writes
    for value in BAD_TRUNCATE_DIMS:
        argv = ["--truncate_dims", value, "--output_dir", str(tmp_path / "ev")]
        code, imported, _, err = python_m_hf_cse(["eval", *argv], tmp_path)
        assert (code, imported) == (1, []) and "Traceback" not in err, (value, code, imported, err)
        assert err.strip().split("error: ", 1)[1] == late_refusal(argv, capsys), value


def _folders_another_evaluation_owns(root: Path) -> dict[str, Path]:
    """Output folders the evaluation command refuses whatever its settings: another model's results, a training
    run's folder, a model's folder."""
    other = root / "other_results"
    other.mkdir()
    (other / "results.json").write_text(json.dumps({"model": "someone/else", "STSBenchmark": 80.0}))
    run = root / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "hf_cse_run.json").write_text("{}")
    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return {"already holds the results of an evaluation": other, "unfinished training run": run,
            "holds a model": model}


def test_the_early_eval_check_refuses_another_evaluations_folder_as_the_command_does(minilm_dir, senteval_dir,
                                                                                   tmp_path, capsys):
    cached = parser_cache.rebuild(json.loads(json.dumps(parser_cache.describe(evaluate.argument_parser()))))
    given = ["--model_name_or_path", str(minilm_dir), "--tasks", "STSBenchmark", "--senteval_data_dir",
             str(senteval_dir)]
    for message, folder in _folders_another_evaluation_owns(tmp_path).items():
        argv = [*given, "--output_dir", str(folder)]
        early = partial(entry_points.check_command_line, "eval", copy.deepcopy(cached), argv)
        assert run_cli(early, "hf-cse-eval") == 1  # as the command's start prints it
        early_line = capsys.readouterr().err.strip().split("error: ", 1)[1]
        assert message in early_line and early_line == late_refusal(argv, capsys), folder
    partial_results = tmp_path / "partial"  # the same model's, stopped: its settings are compared by the command
    partial_results.mkdir()
    (partial_results / "results.json").write_text(json.dumps({"model": str(minilm_dir), "STSBenchmark": 80.0,
                                                              "unfinished_tasks": ["STS12"]}))
    check = partial(entry_points.check_command_line, "eval", copy.deepcopy(cached))
    check([*given, "--output_dir", str(partial_results)])
    check([*given, "--output_dir", str(tmp_path / "other_results"), "--overwrite_output_dir"])  # replaced later
    check([*given, "--output_dir", str(tmp_path / "new")])


@pytest.mark.slow
def test_eval_refuses_another_evaluations_folder_before_importing_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_CSE_CACHE", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setattr(sys, "argv", ["hf-cse-eval"])  # as python -m hf_cse names it: the cache's key
    parser_cache.remember_parser("eval", evaluate.argument_parser())  # what a first start writes
    for message, folder in _folders_another_evaluation_owns(tmp_path).items():
        code, imported, _, err = python_m_hf_cse(["eval", "--tasks", "STSBenchmark", "--output_dir", str(folder)],
                                                 tmp_path)
        assert (code, imported) == (1, []) and message in err and "Traceback" not in err, (folder, code, err)
    code, imported, _, err = python_m_hf_cse(["eval", "--tasks", "STSB_nope"], tmp_path)  # a mistyped task too
    assert (code, imported) == (1, []) and "Unknown task 'STSB_nope'" in err and "Traceback" not in err, err


@pytest.mark.slow
def test_data_mistakes_the_files_show_are_refused_without_importing_torch(tmp_path):
    """An --eval_file score that is no number, a pair column the file lacks, a .csv of a header alone, a small
    .jsonl short of one batch and --max_train_samples 0 were refused 7-20 s in, after torch was imported."""
    (tmp_path / "dev.csv").write_text("sentence1,sentence2,score\na,b,1\nc,d,high\ne,f,3\n")
    (tmp_path / "pairs.csv").write_text("text,positive\na,b\nc,d\n")
    (tmp_path / "header.csv").write_text("text\n")
    (tmp_path / "one.jsonl").write_text('{"text": "a sentence"}\n')
    out = ["--output_dir", str(tmp_path / "out")]
    python_m_hf_cse(["train", "--help"], tmp_path, hide_shipped=True)  # the first start writes its parser down
    for args, line in [
        (["--eval_file", "dev.csv"], "dev.csv, line 3: score 'high' is not a number"),
        (["--train_file", "pairs.csv", "--pair_column", "nope"], "no column 'nope' for --pair_column"),
        (["--train_file", "header.csv"], "header.csv contains no sentences"),
        (["--train_file", "one.jsonl", "--per_device_train_batch_size", "8"], "has 1 sentence, fewer than one global"),
        (["--max_train_samples", "0"], "--max_train_samples must be at least 1, got 0."),
    ]:
        code, imported, _, err = python_m_hf_cse(["train", *args, *out], tmp_path, hide_shipped=True)
        assert code == 1 and imported == [] and line in err, (args, imported, err)
