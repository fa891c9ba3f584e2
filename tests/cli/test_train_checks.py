"""The training command checks every flag before the work starts and names it in one line: every argument before a
model is loaded or data are tokenized (the optimizer's values, output folders, --max_train_samples, a changed
--max_steps, presets combined with explicit flags, several GPUs without a launcher); bad input, a divergence after
the last logging step and Ctrl-C end in one line, not a traceback."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from eval_helpers import write_toy_senteval
from helpers import (
    answer_ctrl_c_as_in_a_terminal,
    fake_checkpoint,
    hang_timeout,
    long_sentences,
    random_sentences,
    scored_pairs_file,
)
from transformers import TrainingArguments

from hf_cse.checks import InputError
from hf_cse.cli import evaluate as eval_cli
from hf_cse.cli import train as train_cli
from hf_cse.cli.flags import in_flag_terms
from hf_cse.cli.output_dir import prepare_output_dir
from hf_cse.cli.preflight import check_eval_data
from hf_cse.folder_lock import lock_file
from hf_cse.metrics import DivergedError
from hf_cse.models import CSEOutput, CSEPreTrainedModel, SimCSEModel
from hf_cse.presets import PRESETS

# ------------------------------------------------------------------------------------------ before the model is loaded
ROOT = str(Path(__file__).resolve().parents[2])  # the checkout: run_unsup.py is at its top


class ModelLoaded(Exception):
    """Raised by the patched model loader: every check before it passed."""

    def __init__(self, config_kwargs, config):
        super().__init__("model loaded")
        self.config_kwargs = config_kwargs
        self.config = config  # the method's config the model would have been built with


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(cls, name_or_path, **config_kwargs):
        raise ModelLoaded(config_kwargs, cls.config_class(**config_kwargs))

    monkeypatch.setattr(CSEPreTrainedModel, "from_encoder", classmethod(refuse))
    monkeypatch.setattr(train_cli, "tokenize_dataset", lambda *a, **k: pytest.fail("data were tokenized"))


@pytest.fixture
def train_file(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("\n".join(random_sentences(24)) + "\n")
    return str(path)


def _args(encoder, train_file, out, *extra):
    return ["--model_name_or_path", str(encoder), "--train_file", train_file, "--max_steps", "1",
            "--per_device_train_batch_size", "8", "--output_dir", str(out), "--use_cpu", "--disable_tqdm", "true",
            *extra]


BAD = [
    (["--max_seq_length", "65"], "--max_seq_length 65 exceeds .* \\(64 positions"),
    (["--max_seq_length", "0"], "max_seq_length must be at least 2"),
    (["--max_seq_length", "1"], "max_seq_length must be at least 2"),
    (["--max_seq_length", "-5"], "max_seq_length must be at least 2"),
    (["--gradient_accumulation_steps", "0"], "gradient_accumulation_steps must be at least 1"),
    (["--per_device_train_batch_size", "1"], "at least 2 sentences"),
    (["--max_steps", "0"], "max_steps 0 trains nothing"),
    (["--max_steps", "-1", "--num_train_epochs", "0"], "num_train_epochs 0.0 trains nothing"),
    (["--loss", "infonce", "--temperature", "-1"], "temperature must be a number >= 0.0001"),
    (["--loss", "nce"], "Unknown loss 'nce'"),
    (["--method", "diffcse", "--cached_minibatch_size", "4"], "incompatible with method='diffcse'"),
    (["--cuda_graphs", "on"], "cuda_graphs=on cannot apply: the step runs on cpu, not a CUDA GPU"),
    (["--loss", "off_dropout_infonce"], "needs no-dropout embeddings"),
    (["--eval_strategy", "steps", "--eval_steps", "1"], "no --senteval_data_dir was given"),
    (["--preset", "simcse_bert"], "--preset simcse_bert evaluates on STS-B dev .* --senteval_data_dir"),
    (["--eval_source", "web"], "--eval_source 'web': use local"),
    (["--senteval_data_dir", "/no/such/senteval", "--eval_strategy", "steps"], "/no/such/senteval does not exist"),
    (["--model_name_or_path", "/no/such/model"], "no such folder"),
    (["--generator_name_or_path", "/no/such/mlm", "--method", "diffcse"], "generator_name_or_path .* no such"),
    (["--save_steps", "100"], "save_steps=100 saves nothing: .* add save_strategy='steps'"),
    (["--eval_steps", "10"], "eval_steps=10 scores nothing during training: .* add eval_strategy='steps'"),
    # typed: refused whatever the value, also --logging_steps' (the arguments' own check takes it for transformers')
    (["--eval_steps", "5"], "eval_steps=5 scores nothing during training: .* add eval_strategy='steps'"),
    (["--eval_steps", "7", "--logging_steps", "7"], "eval_steps=7 scores nothing during training"),
    (["--load_best_model_at_end", "true"], "load_best_model_at_end=True keeps the checkpoint that scored best on the "
                                           "dev data, and eval_strategy='no' scores none during training: add "
                                           "eval_strategy='steps' and save_strategy='steps'"),
    (["--save_strategy", "no", "--save_steps", "100"], "save_steps=100 saves nothing"),  # the contradiction typed
    (["--resume_from_checkpoint", "/no/such/checkpoint-5"], "resume_from_checkpoint /no/such/checkpoint-5 is not a "
                                                            "folder; name a checkpoint folder"),
    (["--max_steps", "-1", "--num_train_epochs", "nan"], "num_train_epochs must be a finite number > 0, got nan"),
    (["--max_steps", "-1", "--num_train_epochs", "inf"], "num_train_epochs must be a finite number > 0, got inf"),
    (["--loss", "infonce", "--m", "0.3"], "--loss infonce does not take --m"),
    (["--method", "imsimcse", "--dcl_weight", "nan"], "dcl_weight must be a finite number >= 0"),
]


@pytest.mark.parametrize("extra,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_arguments_fail_before_the_model_is_loaded(tiny_bert_dir, train_file, tmp_path, no_model_load, extra,
                                                       message):
    with pytest.raises((ValueError, OSError), match=message):  # SentEval's missing data is a FileNotFoundError
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", *extra))
    assert not (tmp_path / "out").exists()


def test_an_interval_without_its_strategy_is_refused_in_flag_terms(tiny_bert_dir, train_file, tmp_path,
                                                                   no_model_load):
    """The one check of the training arguments (hf_cse.training_values.check_step_intervals), said with the flags."""
    with pytest.raises(InputError) as refused:
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--eval_steps", "10"))
    assert in_flag_terms(str(refused.value), refused.value.fields) == (
        "--eval_steps 10 scores nothing during training: the dev data is scored before the first step and after the "
        "last only (with --eval_strategy 'no'); add --eval_strategy 'steps', or drop --eval_steps.")


def test_a_presets_interval_goes_with_its_strategy_turned_off(tiny_bert_dir, train_file, tmp_path, no_model_load):
    """The preset's eval_steps / save_steps are defaults: with their strategy typed off they are left out, not refused
    as the contradiction they would be if typed."""
    with pytest.raises(ModelLoaded):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--preset", "simcse_bert",
                                        "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end",
                                        "false"))


@pytest.fixture
def no_senteval_near(tmp_path, monkeypatch):
    """A user's project folder: no SentEval data in the folders looked at by default (the checkout's root has some)."""
    monkeypatch.delenv("HF_CSE_SENTEVAL_DATA", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def selection(monkeypatch):
    """The training arguments the dev data are checked with (once the metric to select checkpoints by is set)."""
    seen = []

    def spy(training_args, *args, **kwargs):
        seen.append(training_args)
        return check_eval_data(training_args, *args, **kwargs)

    monkeypatch.setattr(train_cli, "check_eval_data", spy)
    return seen


def test_own_eval_pairs_are_scored_during_training_without_senteval(tiny_bert_dir, train_file, tmp_path,
                                                                   no_senteval_near, no_model_load):
    """docs/evaluation.md's --eval_file command, from a folder with no SentEval data near it: refused for want of
    SentEval (found from the checkout's root, and read for nothing there). The trainer scores only the pairs."""
    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 12, 4, seed=0)
    with pytest.raises(ModelLoaded):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--eval_file", str(pairs),
                                        "--eval_name", "mydev", "--eval_strategy", "steps", "--eval_steps", "1",
                                        "--save_strategy", "steps", "--save_steps", "1", "--metric_for_best_model",
                                        "mydev_spearman", "--load_best_model_at_end", "true"))
    with pytest.raises(ValueError, match="no --senteval_data_dir was given"):  # nothing to score: still refused
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--eval_strategy", "steps"))


def test_a_presets_sts_metric_follows_the_users_own_pairs(tiny_bert_dir, train_file, tmp_path, no_senteval_near,
                                                          no_model_load, selection, caplog):
    """The preset's refusal offers --eval_file; the run was then refused for the preset's stsb_spearman, a metric the
    user never typed (after the stack had loaded). With SentEval data the preset's metric stays."""
    pairs = str(scored_pairs_file(tmp_path / "pairs.tsv", 12, 4, seed=0))
    with caplog.at_level(logging.INFO, logger="run_unsup"), pytest.raises(ModelLoaded):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--preset", "simcse_bert",
                                        "--eval_file", pairs, "--eval_name", "mydev"))
    assert (selection[-1].metric_for_best_model, selection[-1].greater_is_better) == ("mydev_spearman", True)
    [said] = [r.getMessage() for r in caplog.records if "selected by" in r.getMessage()]
    assert said == ("--preset simcse_bert selects by stsb_spearman, but this run scores no STS dev data, only your "
                    "own pairs: checkpoints are selected by mydev_spearman; --metric_for_best_model chooses another")
    senteval = str(write_toy_senteval(tmp_path / "senteval"))
    with pytest.raises(ModelLoaded):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--preset", "simcse_bert",
                                        "--eval_file", pairs, "--senteval_data_dir", senteval))
    assert selection[-1].metric_for_best_model == "stsb_spearman"
    with pytest.raises(ValueError, match=r"metric_for_best_model stsb_spearman is not a score this run logs "
                                         r"\(custom_spearman\)"):  # typed: the user's choice, refused
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--preset", "simcse_bert",
                                        "--eval_file", pairs, "--metric_for_best_model", "stsb_spearman"))


@pytest.mark.parametrize("dev", ["senteval", "pairs"])
@pytest.mark.parametrize("selector", ["--load_best_model_at_end", "--save_strategy best"])
def test_a_run_selecting_checkpoints_without_a_metric_selects_by_the_dev_score(tiny_bert_dir, train_file, tmp_path,
                                                                              no_senteval_near, no_model_load,
                                                                              selection, caplog, dev, selector):
    """transformers sets metric_for_best_model 'loss' where none is given, which no contrastive run logs: the run
    was refused for a flag the user never typed, and --save_strategy best without one stopped in a transformers
    traceback; it selects by its dev score now, and says so."""
    given = (["--senteval_data_dir", str(write_toy_senteval(tmp_path / "senteval"))] if dev == "senteval" else
             ["--eval_file", str(scored_pairs_file(tmp_path / "pairs.tsv", 12, 4, seed=0))])
    selecting = (["--save_strategy", "steps", "--load_best_model_at_end", "true"] if selector.startswith("--load")
                 else ["--save_strategy", "best"])
    with caplog.at_level(logging.INFO, logger="run_unsup"), pytest.raises(ModelLoaded):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", *given, "--eval_strategy",
                                        "steps", *selecting))
    metric = "stsb_spearman" if dev == "senteval" else "custom_spearman"
    assert (selection[-1].metric_for_best_model, selection[-1].greater_is_better) == (metric, True)
    assert f"{selector} without --metric_for_best_model (transformers' default, 'loss', is never " \
           f"logged by a contrastive run): checkpoints are selected by {metric}" in caplog.text


def test_good_arguments_reach_the_model(tiny_bert_dir, train_file, tmp_path, no_model_load):
    with pytest.raises(ModelLoaded):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--max_seq_length", "64"))


def test_the_demo_corpus_is_said_once_the_run_is_set_up(tiny_bert_dir, train_file, tmp_path, no_model_load, caplog):
    """Without --train_file the packaged demo corpus trains: one log line says so (after the checks, so a refused
    command stays one line), and a run with its own text says nothing of it."""
    with caplog.at_level("INFO", logger="run_unsup"), pytest.raises(ModelLoaded):
        train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--max_steps", "2", "--output_dir",
                                   str(tmp_path / "demo"), "--use_cpu", "--per_device_train_batch_size", "8"])
    [said] = [r.getMessage() for r in caplog.records if "demo corpus" in r.getMessage()]
    assert said.startswith("no --train_file or --dataset_name: training on hf_cse's packaged demo corpus "
                           "(demo_corpus.txt, 1,241 sentences written for the project)")
    caplog.clear()
    with caplog.at_level("INFO", logger="run_unsup"), pytest.raises(ModelLoaded):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "own"))
    assert not [r for r in caplog.records if "demo corpus" in r.getMessage()]


def test_sequence_limit_subtracts_robertas_position_offset(tiny_roberta_dir, train_file, tmp_path, no_model_load):
    """RoBERTa's positions start after the padding index: 80 position embeddings hold 78 tokens."""
    with pytest.raises(ValueError, match="--max_seq_length 79 exceeds .* \\(78 positions"):
        train_cli.train_from_args(_args(tiny_roberta_dir, train_file, tmp_path / "out", "--max_seq_length", "79"))
    with pytest.raises(ModelLoaded):
        train_cli.train_from_args(_args(tiny_roberta_dir, train_file, tmp_path / "out", "--max_seq_length", "78"))


def test_output_folder_is_checked_before_the_model_is_loaded(tiny_bert_dir, train_file, tmp_path, no_model_load):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.csv").write_text("x")
    with pytest.raises(ValueError, match="--overwrite_output_dir"):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out"))
    with pytest.raises(ValueError, match="encoder's folder"):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tiny_bert_dir))


# ----------------------------------------------------------------------------------------------- presets
@pytest.mark.parametrize("preset,extra,expected", [
    ("focal_infonce_bert", ["--loss", "infonce"], {"loss": "infonce", "loss_kwargs": {"temperature": 0.07}}),
    ("gs_infonce_bert", ["--loss", "infonce"], {"loss": "infonce", "loss_kwargs": {"temperature": 0.05}}),
    ("diffcse_bert", ["--method", "simcse"], {"loss": "infonce", "projector": "batchnorm"}),
    ("simcse_bert", ["--loss", "gs_infonce", "--num_noise", "8"],
     {"loss": "gs_infonce", "loss_kwargs": {"temperature": 0.05, "num_noise": 8}}),
])
def test_preset_values_the_chosen_loss_or_method_does_not_take_are_dropped(
        tiny_bert_dir, train_file, tmp_path, no_model_load, senteval_dir, caplog, preset, extra, expected):
    with pytest.raises(ModelLoaded) as loaded, caplog.at_level(logging.INFO, logger="run_unsup"):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--preset", preset,
                             "--senteval_data_dir", str(senteval_dir), *extra))
    kwargs, config = loaded.value.config_kwargs, loaded.value.config
    assert {k: getattr(config, k) for k in expected} == expected
    assert not {"masking_ratio", "lambda_rtd"} & set(kwargs)
    if preset != "simcse_bert":
        assert f"--preset {preset}: dropped" in caplog.text


@pytest.mark.parametrize("extra, expected", [
    (["--loss", "off_dropout_infonce", "--off_dropout"], {"off_dropout": True}),  # the bare form the messages write
    (["--method", "imsimcse", "--loss", "infonce", "--off_dropout", "false"], {"off_dropout": False}),
    (["--method", "imsimcse", "--dcl_temperature", "3"], {"off_dropout": True}),  # its DCL objective takes it
    (["--dcl_weight", "0.1", "--dcl_eps", "0.01"], {"off_dropout": False}),
    (["--eval_file", "PAIRS", "--eval_name", "mydev", "--eval_score_column", "score"], {}),
    (["--save_strategy", "steps", "--save_steps", "1", "--save_total_limit", "2"], {}),
])
def test_settings_of_a_feature_that_is_on_reach_the_model(tiny_bert_dir, train_file, tmp_path, no_model_load, extra,
                                                           expected):
    """The refusals of settings that would do nothing (hf_cse.cli.flags_in_use) leave those that act alone."""
    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 12, 4, seed=0)
    extra = [str(pairs) if arg == "PAIRS" else arg for arg in extra]
    with pytest.raises(ModelLoaded) as loaded:
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", *extra))
    assert {k: getattr(loaded.value.config, k) for k in expected} == expected


@pytest.mark.parametrize("setting", [("--eval_dataset_split", "test"), ("--eval_dataset_config_name", "en")])
def test_a_hub_data_sets_pair_settings_with_an_eval_file_are_refused(setting, tiny_bert_dir, train_file, tmp_path,
                                                                      no_model_load):
    """The split and config of --eval_dataset_name's pairs read nothing from an --eval_file: refused, not ignored."""
    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 12, 4, seed=0)
    with pytest.raises(InputError) as refused:
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--eval_file", str(pairs),
                                        *setting))
    assert str(refused.value) == (f"{setting[0]} {setting[1]} does nothing with --eval_file (it sets which Hub data "
                                  f"set's pairs --eval_dataset_name reads): drop {setting[0]}.")


FEATURES_OFF = ["--dcl_weight", "0", "--save_strategy", "no", "--eval_strategy", "no", "--load_best_model_at_end",
                "false"]


@pytest.mark.parametrize("preset, off", [(preset, off) for preset in sorted(PRESETS) for off in (False, True)])
def test_a_presets_own_settings_are_not_refused_as_doing_nothing(preset, off, tiny_bert_dir, train_file, tmp_path,
                                                                 no_model_load, senteval_dir):
    """A preset sets --dcl_temperature (imsimcse_bert), --save_total_limit... with their features on, and with the
    chosen loss it drops what that loss does not take: none of its values is refused as a setting that does nothing,
    even with the features typed off."""
    generator = ["--generator_name_or_path", str(tiny_bert_dir)] if PRESETS[preset]["method"] == "diffcse" else []
    with pytest.raises(ModelLoaded):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--preset", preset,
                                        "--senteval_data_dir", str(senteval_dir), *generator,
                                        *(FEATURES_OFF if off else [])))


def test_a_config_files_setting_that_does_nothing_names_the_file(tiny_bert_dir, train_file, tmp_path, no_model_load):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"dcl_temperature": 2.0}))
    with pytest.raises(InputError) as refused:
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--config", str(config)))
    assert str(refused.value) == (f"--config {config}: 'dcl_temperature' does nothing while --dcl_weight is 0 (no DCL "
                                  f"objective): add --dcl_weight 0.1, or remove 'dcl_temperature' from --config "
                                  f"{config}.")


def test_preset_value_typed_by_the_user_is_still_an_error(tiny_bert_dir, train_file, tmp_path, no_model_load,
                                                          senteval_dir):
    with pytest.raises(ValueError, match="--loss infonce does not take --m"):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out", "--preset", "focal_infonce_bert",
                             "--loss", "infonce", "--m", "0.3", "--senteval_data_dir", str(senteval_dir)))


# ----------------------------------------------------------------------------------------------- one line
def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, f"{ROOT}/run_unsup.py", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.slow
def test_cli_errors_are_one_line_without_traceback(tiny_bert_dir, tmp_path):
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("text,label\na sentence,1\nan extra,column,1\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "n.txt").write_text("x")
    base = ["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(tmp_path / "out")]
    cases = [
        ([*base, "--max_seq_length", "0"], "--max_seq_length"),
        (["--model_name_or_path", str(tmp_path / "missing"), "--output_dir", str(tmp_path / "o")], "no such folder"),
        ([*base[:2], "--output_dir", str(tiny_bert_dir)], "encoder's folder"),
        ([*base[:2], "--output_dir", str(tmp_path / "notes")], "--overwrite_output_dir"),
        ([*base, "--train_file", str(bad_csv)], "line 3"),
    ]
    for args, needle in cases:
        proc = _cli(*args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1, proc.stderr
        assert len(lines) == 1 and lines[0].startswith("run_unsup.py: error:") and needle in lines[0], proc.stderr


# ----------------------------------------------------------------------------------------------- several GPUs
def test_dataparallel_gather_cannot_merge_the_models_output():
    """Why several GPUs in one process are refused: nn.DataParallel's gather fails on CSEOutput (and each replica's
    loss would see only its slice of the batch as negatives)."""
    from torch.nn.parallel.scatter_gather import gather

    outputs = [CSEOutput(embeddings={"z1": torch.zeros(2, 3)}), CSEOutput(embeddings={"z1": torch.ones(2, 3)})]
    with pytest.raises(TypeError, match="'CSEOutput' object is not iterable"):
        gather(outputs, "cpu")


def test_several_gpus_in_one_process_are_refused(tiny_bert_dir, train_file, tmp_path, monkeypatch, no_model_load):
    from hf_cse.models import SimCSEModel
    from hf_cse.trainer import ContrastiveTrainer

    monkeypatch.setattr(TrainingArguments, "n_gpu", property(lambda self: 2))
    with pytest.raises(ValueError, match="2 GPUs are visible to one process.*accelerate launch"):
        train_cli.train_from_args(_args(tiny_bert_dir, train_file, tmp_path / "out"))
    monkeypatch.undo()  # also restores the model loader of no_model_load
    tiny = SimCSEModel.from_encoder(str(tiny_bert_dir))
    monkeypatch.setattr(TrainingArguments, "n_gpu", property(lambda self: 2))
    with pytest.raises(ValueError, match="accelerate launch"):
        ContrastiveTrainer(model=tiny, args=TrainingArguments(str(tmp_path / "t"), use_cpu=True, report_to="none"))


# ----------------------------------------------------------------------------------------------- training data
def test_hub_data_set_while_offline_names_the_fix(monkeypatch):
    import datasets

    from hf_cse.data import DataError, load_train_dataset

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'someone/data' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="HF_HUB_OFFLINE .* or give a local train_file"):
        load_train_dataset(dataset_name="someone/data")



# -------------------------------------------------------------------- the Trainer's flags, folders, divergence, Ctrl-C
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_corpus_read(monkeypatch):
    def refuse(cls, *args, **kwargs):
        pytest.fail("the encoder was loaded although a flag was bad")

    monkeypatch.setattr(CSEPreTrainedModel, "from_encoder", classmethod(refuse))
    monkeypatch.setattr(train_cli, "load_train_dataset", lambda *a, **k: pytest.fail("the corpus was read"))


def _run_args(encoder, tmp_path, *extra):
    train = tmp_path / "train.txt"
    if not train.exists():
        train.write_text("\n".join(random_sentences(32)) + "\n")
    return ["--model_name_or_path", str(encoder), "--train_file", str(train), "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "out"), "--use_cpu",
            "--disable_tqdm", "true", *extra]


@pytest.mark.parametrize("flag, value, message", [
    ("--learning_rate", "0", "learning_rate 0.0 must be a finite number > 0.*trains nothing"),
    ("--learning_rate", "-1e-5", "learning_rate -1e-05 must be a finite number > 0"),
    ("--learning_rate", "nan", "learning_rate nan must be a finite number > 0"),
    ("--warmup_steps", "nan", "warmup_steps nan must be >= 0"),  # < 0: TrainingArguments refuses it
    ("--weight_decay", "-0.01", "weight_decay -0.01 must be a finite number >= 0"),
    ("--weight_decay", "inf", "weight_decay inf must be"),
    ("--adam_beta2", "1.0", "adam_beta2 1.0 must be in \\[0, 1\\)"),
    ("--max_grad_norm", "nan", "max_grad_norm nan must be"),
])
def test_optimizer_flags_are_checked_before_the_encoder_is_loaded(flag, value, message, tiny_bert_dir, tmp_path,
                                                                  no_corpus_read):
    with pytest.raises(InputError, match=message) as err:
        train_cli.train_from_args(_run_args(tiny_bert_dir, tmp_path, f"{flag}={value}"))
    assert len(str(err.value)) < 300
    assert in_flag_terms(str(err.value), err.value.fields).startswith(flag)  # as the command prints it
    assert not (tmp_path / "out").exists()


def test_report_to_without_its_package_is_refused_before_the_encoder_is_loaded(tiny_bert_dir, tmp_path,
                                                                              no_corpus_read, monkeypatch):
    """--report_to tensorboard on a machine without tensorboard: one line naming the flag and the fix, before the
    weights are loaded and the text is read (transformers itself fails only when the Trainer starts)."""
    from transformers.integrations import integration_utils

    monkeypatch.setattr(integration_utils, "is_tensorboard_available", lambda: False)
    with pytest.raises(InputError, match=r"--report_to tensorboard: its package is not installed.*pip install "
                                         r"tensorboard\) or drop --report_to tensorboard") as err:
        train_cli.train_from_args(_run_args(tiny_bert_dir, tmp_path, "--report_to", "tensorboard"))
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


def test_max_train_samples_is_named_as_the_cause(tiny_bert_dir, tmp_path, capsys):
    """The command names it as a flag, and the batch size beside it too (a message naming one flag was left as it
    was, so the batch size stayed a field name)."""
    with pytest.raises(ValueError, match="train.txt cut to max_train_samples 4 has 4 sentences, fewer than one "
                                         "global batch of 8"):
        train_cli.train_from_args(_run_args(tiny_bert_dir, tmp_path, "--max_train_samples", "4"))
    assert train_cli.main(_run_args(tiny_bert_dir, tmp_path, "--max_train_samples", "4")) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "cut to --max_train_samples 4" in line and "--per_device_train_batch_size" in line, line


def test_a_larger_max_steps_for_an_interrupted_run_names_resume_from_checkpoint(tmp_path):
    prepare_output_dir(tmp_path, {"max_steps": 2})
    fake_checkpoint(tmp_path / "checkpoint-2")
    with pytest.raises(InputError, match="max_steps: 2 then, 4 now.*--resume_from_checkpoint "
                                         f"{tmp_path / 'checkpoint-2'} to go on with these") as err:
        prepare_output_dir(tmp_path, {"max_steps": 4})
    assert len(str(err.value).replace(str(tmp_path), "DIR")) < 300  # short, whatever the length of the user's paths


def test_a_run_folder_without_tokenizer_files_says_so(tiny_bert_dir, tmp_path, no_corpus_read):
    encoder = tmp_path / "encoder"
    shutil.copytree(tiny_bert_dir, encoder)
    for path in encoder.glob("*"):
        if path.name.startswith(("tokenizer", "vocab", "special_tokens")):
            path.unlink()
    with pytest.raises(InputError, match="holds no tokenizer files.*tokenizer.save_pretrained"):
        train_cli.train_from_args(_run_args(encoder, tmp_path))


def test_a_run_folder_whose_tokenizer_files_hold_no_vocabulary_says_so(tiny_bert_dir, tmp_path, no_model_load):
    """tokenizer_config.json without tokenizer.json / vocab.txt passes the file check, and transformers loads a
    stand-in of BERT's 5 special tokens from it: the run trained on [UNK]s. Refused in one line, before the output
    folder is made."""
    encoder = tmp_path / "encoder"
    shutil.copytree(tiny_bert_dir, encoder)
    for path in encoder.glob("*"):
        if path.name.startswith(("tokenizer.json", "vocab", "special_tokens")):
            path.unlink()
    assert (encoder / "tokenizer_config.json").is_file()
    with pytest.raises(InputError) as err:
        train_cli.train_from_args(_run_args(encoder, tmp_path))
    assert str(err.value) == (
        f"--model_name_or_path {encoder} holds no tokenizer (what transformers loads from it is a stand-in "
        "BertTokenizer of only 5 special token(s)): save the encoder's tokenizer into it (tokenizer.save_pretrained), "
        "or give the encoder folder or Hub id it was trained from.")
    assert not (tmp_path / "out").exists()


def test_from_pretrained_of_a_plain_encoder_points_at_from_encoder(tiny_bert_dir):
    with pytest.raises(ValueError, match=r"plain bert model, not an hf_cse one.*SimCSEModel.from_encoder\("):
        SimCSEModel.from_pretrained(str(tiny_bert_dir))


def test_an_unwritable_run_eval_output_dir_fails_before_any_encoding(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(eval_cli.SentenceEncoder, "from_pretrained",
                        lambda *a, **k: pytest.fail("a model was loaded before the output folder was checked"))
    (tmp_path / "file.txt").write_text("x")
    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 8, 3, seed=0)
    code = eval_cli.main(["--tasks", "none", "--eval_file", str(pairs),
                          "--output_dir", str(tmp_path / "file.txt" / "o")])
    err = capsys.readouterr().err
    assert code == 1 and "--output_dir" in err and "choose a folder you can write to" in err


@pytest.mark.slow
def test_a_divergence_after_the_last_logging_step_is_one_clear_error(tiny_bert_dir, tmp_path):
    """Before: with fewer steps than --logging_steps, a learning rate of 1e30 trained and exported a broken model."""
    with pytest.raises(DivergedError, match="lower the learning rate"):
        train_cli.train_from_args(_run_args(tiny_bert_dir, tmp_path, "--learning_rate", "1e30", "--max_steps", "3",
                             "--logging_steps", "5"))
    out = tmp_path / "out"
    assert not (out / "config.json").exists() and not (out / "sentence-transformers").exists()


@pytest.mark.slow
def test_rerunning_a_diverged_run_refuses_its_nan_checkpoint(tiny_bert_dir, tmp_path, capsys):
    """Before: the same command run again resumed the diverged run's checkpoint-6 (NaN weights), "finished" it and
    exported the NaN model. It is refused in one line naming the checkpoint and the ways on; nothing is deleted."""
    args = _run_args(tiny_bert_dir, tmp_path, "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "6",
                     "--learning_rate", "1e6", "--lr_scheduler_type", "constant", "--logging_steps", "100")
    assert train_cli.main(args) == 1
    first = capsys.readouterr().err.strip().splitlines()[-1]
    assert "became NaN or Inf" in first and "checkpoint-6 in --output_dir" in first, first
    out = tmp_path / "out"
    kept = sorted(p.name for p in out.rglob("*"))
    assert train_cli.main(args) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"hf-cse-train: error: --output_dir {out}: its last checkpoint, checkpoint-6, holds "), line
    assert "not finite (NaN or inf)" in line and "diverged at or before step 6" in line
    assert "lower --learning_rate in another --output_dir" in line and "--overwrite_output_dir" in line
    assert sorted(p.name for p in out.rglob("*")) == kept and not (out / "sentence-transformers").exists()


@pytest.mark.slow
def test_a_divergence_line_keeps_the_whole_path_of_the_checkpoint_to_resume(tiny_bert_dir, tmp_path, capsys,
                                                                           monkeypatch):
    """Before: with a long --output_dir the divergence line was over 600 characters, and its middle was cut out
    where the path of the last finite checkpoint stood ("--resume_from_checkpoint '/tmp/. ... goes on from")."""
    from hf_cse.losses.infonce import InfoNCELoss

    original, calls = InfoNCELoss.compute, []

    def nan_after_four_steps(self, z1, z2, **extra):
        if self.training:
            calls.append(1)
        return original(self, z1 * float("nan") if len(calls) > 4 else z1, z2, **extra)

    monkeypatch.setattr(InfoNCELoss, "compute", nan_after_four_steps)
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    deep = tmp_path.joinpath(*(f"experiments_of_the_week_{i}" for i in range(3)), "simcse-bert-base-lr3e-5")
    args = _run_args(tiny_bert_dir, tmp_path, "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2",
                     "--logging_steps", "100")
    args[args.index("--output_dir") + 1] = str(deep)
    assert train_cli.main(args) == 1  # checkpoint-6 saved with NaN weights, found at the end of training
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert len(line) <= 600 and "became NaN or Inf" in line and "checkpoint-6 in --output_dir" in line, line
    assert f"--resume_from_checkpoint '{deep / 'checkpoint-4'}'" in line, line


@pytest.mark.slow
@pytest.mark.parametrize("err, fix", [
    (OSError(errno.EROFS, "Read-only file system"), "remount its file system read-write (or copy the folder to "
                                                    "one that is)"),
    (FileExistsError(errno.EEXIST, "File exists"), "move aside what takes that path"),
])
def test_an_output_dir_unwritable_mid_run_is_one_line_naming_the_checkpoint_kept(err, fix, tiny_bert_dir, tmp_path,
                                                                                 capsys, monkeypatch):
    """Before: the folder remounted read-only (or a file where checkpoint-4 goes) ended the run in a 23-frame
    traceback, not saying that checkpoint-2 is kept and that the same command resumes from it."""
    from hf_cse.trainer import ContrastiveTrainer

    original = ContrastiveTrainer.save_model

    def refused_at_step_4(self, output_dir=None, _internal_call=False):
        if str(output_dir).endswith("checkpoint-4"):
            raise type(err)(err.errno, err.strerror, output_dir)
        return original(self, output_dir, _internal_call)

    monkeypatch.setattr(ContrastiveTrainer, "save_model", refused_at_step_4)
    monkeypatch.delenv("HF_CSE_DEBUG", raising=False)
    args = _run_args(tiny_bert_dir, tmp_path, "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2")
    assert train_cli.main(args) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    out = tmp_path / "out"
    assert lines[-1] == (f"hf-cse-train: error: the save could not write its files ({type(err).__name__}: [Errno "
                         f"{err.errno}] {err.strerror}: '{out / 'checkpoint-4'}'): {fix}; "
                         f"{out / 'checkpoint-2'} is kept: the same command resumes from it."), lines[-1]
    assert not any(line.startswith("Traceback") for line in lines)


@pytest.mark.slow
def test_esimcse_at_the_encoders_position_limit_trains(tiny_bert_dir, tmp_path):
    """--max_seq_length 64 is the tiny encoder's limit, which the command allows; ESimCSE's repetition lengthened such
    rows past it (its tokenizer, built from a vocab, has no model_max_length) and the first step ended in torch's
    IndexError. The method's collator caps them at the limit, for the command and the Python API alike."""
    (tmp_path / "train.txt").write_text("\n".join(long_sentences(32, 62)) + "\n")  # 64 tokens each
    train_cli.train_from_args(_run_args(tiny_bert_dir, tmp_path, "--method", "esimcse", "--max_seq_length", "64"))
    assert (tmp_path / "out" / "training_info.json").is_file()


def test_a_stopped_run_says_what_it_keeps(tmp_path, monkeypatch):
    """The line after Ctrl-C names the checkpoint the same command resumes from, or says that none was saved and how
    to have them, instead of promising kept work that is not there."""
    from hf_cse import checkpoints

    args = SimpleNamespace(output_dir=str(tmp_path / "out"), save_strategy="no", resume_from_checkpoint=None)
    assert train_cli.kept_when_stopped(args).startswith("no checkpoint was saved")
    assert "--save_strategy steps --save_steps N" in train_cli.kept_when_stopped(args)
    args.save_strategy = "steps"
    assert train_cli.kept_when_stopped(args).startswith("no checkpoint was complete yet")
    (tmp_path / "out" / "checkpoint-7").mkdir(parents=True)
    monkeypatch.setattr(checkpoints, "last_complete_checkpoint", lambda out: str(out / "checkpoint-7"))
    # saved with --save_only_model: no optimizer, scheduler or RNG state, so no run resumes from it
    assert train_cli.kept_when_stopped(args) == f"{tmp_path / 'out' / 'checkpoint-7'} holds the model only " \
                                                "(--save_only_model): no run resumes from it."
    (tmp_path / "out" / "checkpoint-7" / "rng_state.pth").touch()
    assert train_cli.kept_when_stopped(args) == f"{tmp_path / 'out' / 'checkpoint-7'} is kept: the same command " \
                                                "resumes from it."
    # gone on from another run's checkpoint: naming it again would train from it again, over checkpoint-7
    args.resume_from_checkpoint = str(tmp_path / "other" / "checkpoint-4")
    assert train_cli.kept_when_stopped(args) == f"{tmp_path / 'out' / 'checkpoint-7'} is kept: the same command " \
                                                "without --resume_from_checkpoint resumes from it."


@pytest.mark.slow
def test_ctrl_c_during_training_is_one_line_and_exit_code_130(tiny_bert_dir, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HF_CSE_DEBUG"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
               TOKENIZERS_PARALLELISM="false")
    args = _run_args(tiny_bert_dir, tmp_path, "--max_steps", "100000", "--logging_steps", "1")
    proc = subprocess.Popen([sys.executable, "run_unsup.py", *args], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=answer_ctrl_c_as_in_a_terminal)
    lines = []
    for line in proc.stdout:  # wait until it trains
        lines.append(line)
        if "'loss'" in line:
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=hang_timeout(300))[0]
    assert proc.returncode == 130, "".join(lines) + rest
    assert "Traceback" not in rest and "run_unsup.py: interrupted (Ctrl-C)" in rest.strip().splitlines()[-1]
    # what it keeps, truly: this run saved no checkpoint (the command's default), and the line says how to keep them
    assert "no checkpoint was saved" in rest.strip().splitlines()[-1]
    assert not lock_file(tmp_path / "out").exists()
    assert json.loads((tmp_path / "out" / "hf_cse_run.json").read_text())["max_steps"] == 100000

