"""``--config run.json`` (hf_cse.cli.run_config): a run's settings from a file in the one format of presets,
experiments configs and the ``hf_cse_run.json`` a run writes. A run started from its own record is the same run;
flags win over the file and the file over its preset; a bad file is one line before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_run_spec
import torch
from helpers import fake_checkpoint, random_sentences
from safetensors.torch import load_file

from hf_cse.checks import InputError
from hf_cse.cli import older_runs, train
from hf_cse.cli.output_dir import RUN_RECORD_FILE, prepare_output_dir
from hf_cse.cli.run_config import check_file_hyperparameters, check_settings, read_run_config, settings_from_record
from hf_cse.cli.run_spec import dev_and_selection
from hf_cse.objectives import objective
from hf_cse.presets import PRESETS
from hf_cse.run_files import DEV_AND_SELECTION, TRAINING_ARGUMENTS
from hf_cse.run_settings import setting_differences
from hf_cse.writing import json_safe

KINDS, NO_DEV = test_run_spec.KINDS, test_run_spec.NO_DEV
build, command_lines = test_run_spec.build, test_run_spec.command_lines  # fixtures: the spec a command line builds
ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT_CONFIGS = sorted((ROOT / "experiments" / "configs").glob("*.json"))


def _file(path: Path, data) -> str:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_started_from_its_record_is_the_same_run(build, command_lines, kind, tmp_path):
    by_flags = build(*command_lines[kind])[0]
    record = _file(tmp_path / "hf_cse_run.json", json_safe(by_flags.fingerprint()))
    # how a run is evaluated is no setting of the record: the preset run is started again without dev data
    by_file = build("--config", record, *(NO_DEV if kind == "preset" else ()))[0]
    assert by_file.fingerprint() == by_flags.fingerprint()
    assert by_file.data == by_flags.data and by_file.speed == by_flags.speed and by_file.preset == by_flags.preset
    # so an interrupted run relaunched with --config <its folder>/hf_cse_run.json resumes
    out = tmp_path / "interrupted"
    prepare_output_dir(out, by_flags.fingerprint())
    fake_checkpoint(out / "checkpoint-2")
    assert prepare_output_dir(out, by_file.fingerprint(), read_record=older_runs.record_in_objectives_form) == str(
        out / "checkpoint-2")


def test_a_run_from_its_record_is_scored_and_chosen_as_it_was(build, command_lines, senteval_dir, tmp_path):
    """The record holds the dev data and checkpoint selection too (beside the fingerprint, which they are not part
    of): --config <run>/hf_cse_run.json reruns the run as it was watched, and a relaunch that watches it otherwise
    still resumes it."""
    scored = ["--senteval_data_dir", str(senteval_dir), "--eval_strategy", "steps", "--eval_steps", "7",
              "--save_strategy", "steps", "--save_steps", "7", "--save_total_limit", "2",
              "--metric_for_best_model", "stsb_spearman", "--load_best_model_at_end", "true"]
    preset = [f for f in command_lines["preset"] if f not in NO_DEV[1::2] and f not in NO_DEV[::2]]
    _, inputs, settings = build(*preset, *scored)
    dev = settings[DEV_AND_SELECTION]
    assert dev == dev_and_selection(inputs["training_args"])
    assert dev["senteval_data_dir"] == str(senteval_dir.resolve()) and dev["eval_steps"] == 7
    assert dev["eval_strategy"] == "steps" and dev["load_best_model_at_end"] is True
    record = _file(tmp_path / "hf_cse_run.json", json_safe(settings))
    _, again, rerun = build("--config", record)
    assert rerun == json.loads(json.dumps(json_safe(settings)))  # the same run, watched the same way
    assert setting_differences(rerun, {**rerun, DEV_AND_SELECTION: {"eval_steps": 50}}) == []


@pytest.mark.parametrize("kind", ["default", "imsimcse", "diffcse", "triplets"])
def test_the_record_as_settings_names_the_flags(build, command_lines, kind):
    settings = settings_from_record(json_safe(build(*command_lines[kind])[0].fingerprint()))
    assert not {"encoder", "generator", "objectives", "pooler_source", "world_size"} & set(settings)
    assert settings["model_name_or_path"] and settings["loss"] in ("infonce", "off_dropout_infonce")
    if kind == "imsimcse":
        assert settings["dcl_weight"] == 0.2 and settings["m"] == 0.9
    if kind == "default":  # the encoder's own pooling is found again, not fixed by the file
        assert "pooler_type" not in settings


def test_flags_win_over_the_file_and_the_file_over_its_preset(build, tmp_path):
    config = _file(tmp_path / "run.json", {"preset": "simcse_bert", "temperature": 0.1, "learning_rate": 1e-5,
                                           "eval_strategy": "no", "load_best_model_at_end": False,
                                           "about": {"paper": "notes for the reader, not a setting"}})
    spec = build("--config", config, "--learning_rate", "2e-5")[0]
    assert spec.training.learning_rate == 2e-5  # the flag
    assert spec.config["objectives"][0]["hyperparameters"]["temperature"] == 0.1  # the file, not the preset's 0.05
    assert spec.config["pooler_type"] == "cls" and spec.preset == "simcse_bert"  # the preset, under the file
    assert spec.data.max_seq_length == PRESETS["simcse_bert"]["max_seq_length"]


BAD_FILES = {
    "not json": ("{'loss': 'infonce'}", "is not JSON"),
    "not an object": ("[1, 2]", "a JSON object of settings"),
    "unknown key": ({"temperatur": 0.05}, "unknown key 'temperatur'; did you mean 'temperature'?"),
    "a usual shorthand": ({"lr": 1e-5}, "unknown key 'lr'; did you mean 'learning_rate'?"),  # not LoRA's 'r'
    "number as text": ({"learning_rate": "3e-5"}, "'learning_rate' must be a number, got \"3e-5\"; write 3e-5 "
                                                  "without quotes"),
    "boolean as text": ({"do_mlm": "yes"}, "'do_mlm' must be true or false"),
    "not a choice": ({"method": "simcsee"}, "'method' must be one of \"simcse\""),
    "fraction for a count": ({"seed": 1.5}, "'seed' must be a whole number"),
    "null for a default": ({"max_seq_length": None}, "'max_seq_length' cannot be null"),
    "text for a list": ({"train_files": "a.txt"}, "'train_files' must be a list of strings"),
    "a file in a file": ({"config": "other.json"}, "'config' cannot be a setting"),
    "the user's modules": ({"import_module": ["my_losses"]}, "'import_module' cannot be a setting of a run "
                           "description (the command imports them before it reads any file"),
    "empty path": ({"train_file": " "}, "'train_file' is empty"),
    "dev settings not an object": ({"loss": "infonce", "dev_and_selection": [125]},
                                   "'dev_and_selection' must be an object of flags"),
    "a dev setting of the wrong type": ({"dev_and_selection": {"eval_steps": "125"}}, "'eval_steps' must be a number"),
    "no such file": (None, "no such file"),
    # named by the file and key, not as flags nobody typed ("--loss infonce does not take --m")
    "a hyperparameter the loss does not take": ({"loss": "infonce", "m": 0.3},
                                                "run.json: loss infonce does not take m. Its hyperparameters: "
                                                "temperature, hard_negative_weight. Remove 'm' from the file"),
    "a hyperparameter the method's loss does not take": ({"method": "simcse", "num_noise": 8},
                                                         "run.json: loss infonce does not take num_noise."),
    "a setting that would do nothing": ({"eval_name": "mydev"},
                                        "run.json: 'eval_name' does nothing without --eval_file or "
                                        "--eval_dataset_name"),
    # a run whose loss or method came from --import_module: its record names the module (before: "Unknown loss" only)
    "a loss of a module not imported": (
        {"encoder": "enc", "objectives": [{"loss": "users_gone_loss", "weight": 1.0}],
         "user_modules": ["/work/my_losses.py"]},
        "Unknown loss 'users_gone_loss'. Available losses: "),
    "a method of a module not imported": (
        {"encoder": "enc", "method": "users_gone_method", "objectives": [{"loss": "infonce"}],
         "user_modules": ["my_methods"]},
        "unknown method 'users_gone_method'; methods: "),
}
#: what the refusal of a record naming the modules its run imported ends with
MODULES_HINT = {"a loss of a module not imported": "The run imported /work/my_losses.py: give --import_module "
                                                   "/work/my_losses.py too.",
                "a method of a module not imported": "The run imported my_methods: give --import_module my_methods "
                                                     "too."}


@pytest.mark.parametrize("what", BAD_FILES)
def test_a_bad_file_is_one_line_naming_the_key_before_any_model_loads(what, tmp_path, capsys, monkeypatch):
    content, expected = BAD_FILES[what]
    path = str(tmp_path / "missing.json") if content is None else _file(tmp_path / "run.json", content)

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(train, "encoder_config", no_model)
    assert train.main(["--config", path, "--output_dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err and f"--config {path}" in err, err
    assert MODULES_HINT.get(what, "") in err
    assert not (tmp_path / "out").exists()


def test_another_methods_setting_in_a_file_is_refused_naming_the_file_and_key(tmp_path, capsys):
    path = _file(tmp_path / "run.json", {"method": "simcse", "dup_rate": 0.3})
    assert train.main(["--config", path, "--output_dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert (f"--config {path}: 'dup_rate' only applies to --method esimcse (got --method simcse): remove 'dup_rate' "
            f"from --config {path}, or choose that method.") in err, err


def test_a_record_with_objectives_no_flag_sets_is_refused(tmp_path):
    record = {"method": "simcse", "objectives": [{"loss": "infonce", "weight": 2.0, "hyperparameters": {}}]}
    with pytest.raises(ValueError, match="main objective's weight 2.0"):
        read_run_config(_file(tmp_path / "r.json", record), train.argument_parser())


def _file_hyperparameters_with_loss(path, settings, parser, loss):
    """check_file_hyperparameters for a command line that types --loss ``loss`` over the file."""
    return check_file_hyperparameters(path, settings, parser, parser.parse_known_args(["--loss", loss])[0], {"loss"})


def test_a_files_hyperparameter_goes_with_the_loss_typed(tmp_path, monkeypatch):
    """The file's loss hyperparameters are checked against the run's loss: a typed --loss that takes them is no
    refusal (the file's m is focal_infonce's), one that does not names the file's key."""
    path = _file(tmp_path / "run.json", {"loss": "infonce", "m": 0.3})
    parser = train.argument_parser()
    settings = read_run_config(path, parser)
    parser.set_defaults(**settings)
    assert _file_hyperparameters_with_loss(path, settings, parser, "focal_infonce") == []
    with pytest.raises(InputError, match=r"run\.json: loss arccon does not take m\."):  # nor does the file's loss
        _file_hyperparameters_with_loss(path, settings, parser, "arccon")


def test_a_typed_loss_leaves_out_the_files_loss_hyperparameters_it_does_not_take(tmp_path):
    """--config <a focal_infonce run's record> --loss infonce was refused ("loss infonce does not take m ... Remove
    'm' from the file"), though flags win over the file and a preset's m is left out the same way."""
    path = _file(tmp_path / "run.json", {"loss": "focal_infonce", "temperature": 0.1, "m": 0.25})
    parser = train.argument_parser()
    settings = read_run_config(path, parser)
    parser.set_defaults(**settings)
    assert _file_hyperparameters_with_loss(path, settings, parser, "infonce") == ["m"]
    spec = train.parse_args(["--config", path, "--loss", "infonce", "--output_dir", str(tmp_path / "out")])
    loss_args, chosen = spec[3], spec[-1]
    assert loss_args.m is None and loss_args.temperature == 0.1 and "m" not in chosen
    assert chosen.dropped_from_file == "'m' (not taken by --loss infonce)"


def test_a_typed_method_over_another_methods_record_trains_its_own_objectives(tmp_path):
    """--config <an ImSimCSE run's record> --method simcse was refused ("loss 'off_dropout_infonce' needs no-dropout
    embeddings: add --off_dropout"): the record's objectives were ImSimCSE's own, which the user never chose. What
    the user chose in that run (a temperature other than the method's) stays."""
    from hf_cse.models import ImSimCSEConfig, SimCSEConfig

    record = {"method": "imsimcse", "objectives": ImSimCSEConfig().objectives, "max_seq_length": 16}
    spec = train.parse_args(["--config", _file(tmp_path / "run.json", record), "--method", "simcse",
                             "--output_dir", str(tmp_path / "out")])
    method_args, loss_args, chosen = spec[2], spec[3], spec[-1]
    assert method_args.loss is None and loss_args.m is None and spec[4].dcl_weight is None  # simcse's own
    assert chosen.dropped_from_file.endswith("(the file's --method imsimcse's own, not --method simcse's)")
    assert "max_seq_length" in chosen and "loss" not in chosen
    chosen_temperature = [{**ImSimCSEConfig().objectives[0], "hyperparameters": {"m": 0.9, "temperature": 0.1}}]
    spec = train.parse_args(["--config", _file(tmp_path / "t.json", {**record, "objectives": chosen_temperature}),
                             "--method", "simcse", "--output_dir", str(tmp_path / "out")])
    assert spec[3].temperature == 0.1 and spec[2].loss is None and SimCSEConfig().loss == "infonce"


def test_what_a_typed_method_drops_falls_back_to_a_typed_presets_and_a_record_without_a_method_is_simcses(
        tmp_path):
    """A review of the above: with --preset focal_infonce_bert typed too, the record's dropped loss and
    hyperparameters were unset over the preset's (plain infonce at 0.05 trained); an older record with no "method"
    (a simcse run's) was not judged simcse's, and --method imsimcse was refused on its infonce; a setting the file
    leaves at None (DiffCSE's generator) was said to be dropped."""
    from hf_cse.models import DiffCSEConfig, ImSimCSEConfig

    out = ["--output_dir", str(tmp_path / "out")]
    record = _file(tmp_path / "ims.json", {"method": "imsimcse", "objectives": ImSimCSEConfig().objectives})
    spec = train.parse_args(["--config", record, "--method", "simcse", "--preset", "focal_infonce_bert", *out])
    assert (spec[2].loss, spec[3].temperature, spec[3].m) == ("focal_infonce", 0.07, 0.3)
    older = _file(tmp_path / "old.json", {"objectives": [objective("infonce")], "max_seq_length": 16})
    spec = train.parse_args(["--config", older, "--method", "imsimcse", *out])
    assert spec[2].loss is None and "'loss' (the file's --method simcse's own" in spec[-1].dropped_from_file
    diffcse = {"method": "diffcse", "objectives": DiffCSEConfig().objectives, "generator_name_or_path": None}
    spec = train.parse_args(["--config", _file(tmp_path / "d.json", diffcse), "--method", "simcse", *out])
    assert "generator_name_or_path" not in (spec[-1].dropped_from_file or "")


@pytest.mark.parametrize("settings, typed, dropped", [
    ({"method": "esimcse", "queue_size": 16, "momentum": 0.9}, ["--queue_size", "0"], "momentum"),
    ({"loss": "paradigm", "temperature": 0.1}, ["--weight", "hardest"], "temperature"),
    ({"lora_r": 4, "lora_alpha": 8.0}, ["--lora_r", "0"], "lora_alpha"),  # was refused, naming --lora_alpha
])
def test_a_files_setting_a_typed_flag_leaves_with_nothing_to_do_is_left_out(tmp_path, settings, typed, dropped):
    """--config <an ESimCSE preset run's record> --queue_size 0 was refused ("'momentum' does nothing while
    --queue_size is 0 ... remove 'momentum' from --config") where --preset esimcse_bert_base --queue_size 0 ran."""
    path = _file(tmp_path / "run.json", settings)
    spec = train.parse_args(["--config", path, *typed, "--output_dir", str(tmp_path / "out")])
    chosen = spec[-1]
    assert dropped not in chosen and chosen.dropped_from_file == \
        f"{dropped!r} (nothing to do with {typed[0]} typed)"
    assert all(getattr(args, dropped, None) is None for args in spec[:-1] if hasattr(args, dropped))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_is_a_run_description(preset, tmp_path):
    parser = train.argument_parser()
    checked = check_settings(PRESETS[preset], parser, f"--preset {preset}")
    assert checked == read_run_config(_file(tmp_path / "p.json", PRESETS[preset]), parser)


@pytest.mark.parametrize("path", EXPERIMENT_CONFIGS, ids=lambda p: p.stem)
def test_every_experiments_config_is_a_run_description(path):
    settings = read_run_config(str(path), train.argument_parser())
    assert settings["method"] and settings["loss"]
    assert "paper" in json.loads(path.read_text())["about"]


@pytest.mark.slow  # two training runs, end to end
def test_a_run_from_the_record_of_a_run_trains_the_same_weights(tmp_path, tiny_bert_dir):
    corpus = _file(tmp_path / "corpus.txt", "\n".join(random_sentences(64)) + "\n")
    first, again = tmp_path / "first", tmp_path / "again"
    flags = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", corpus, "--per_device_train_batch_size", "8",
             "--max_steps", "3", "--seed", "7", "--loss", "focal_infonce", "--temperature", "0.07", "--m", "0.3",
             "--dcl_weight", "0.1", "--pooler_type", "avg", "--learning_rate", "1e-4", "--use_cpu", *NO_DEV,
             # the training arguments the record keeps beside its fingerprint (training_arguments)
             "--adam_beta2", "0.98", "--max_grad_norm", "0.5", "--data_seed", "5", "--no_duplicates_in_batch", "false",
             "--precision", "bf16"]  # chosen, so recorded (auto is resolved anew on each machine)
    assert train.main([*flags, "--output_dir", str(first)]) == 0
    record = first / RUN_RECORD_FILE
    assert json.loads(record.read_text())["training_arguments"]["precision"] == "bf16"
    assert train.main(["--config", str(record), "--output_dir", str(again), "--use_cpu"]) == 0
    assert json.loads((again / RUN_RECORD_FILE).read_text()) == json.loads(record.read_text())
    info = json.loads((again / "training_info.json").read_text())
    assert [info["training_args"][k] for k in ("adam_beta2", "max_grad_norm", "data_seed", "no_duplicates_in_batch")
            ] == [0.98, 0.5, 5, False], info
    assert info["precision"].startswith("bf16"), info["precision"]
    weights, reproduced = load_file(first / "model.safetensors"), load_file(again / "model.safetensors")
    assert weights.keys() == reproduced.keys()
    for name, weight in weights.items():
        torch.testing.assert_close(reproduced[name], weight, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("flags, source", [
    (["--pooler_type", "avg", "--normalize", "true"], "set by --pooler_type; normalize set by --normalize"),
    (["--pooler_type", "avg"], "set by --pooler_type"),
    (["--preset", "simcse_bert", *NO_DEV, "--normalize", "true"],
     "set by --preset simcse_bert; normalize set by --normalize"),
    (["--normalize", "true"], "the papers' [CLS] pooling (a plain Hugging Face encoder has no pooling of its own); "
                              "normalize set by --normalize"),
])
def test_the_pooling_source_names_what_set_the_pooler_and_the_normalisation(build, command_lines, flags, source):
    """The card's Pooling row shows the config's pooler_source: it names the flag (or preset) that set the pooler and,
    apart, the one that set normalize; read back as settings, the record keeps the normalize it was given."""
    from types import SimpleNamespace

    from hf_cse.export.modules import describe

    tiny = command_lines["mlm off"]
    spec = build(*tiny, *flags)[0]
    assert spec.config["pooler_source"] == source
    config = SimpleNamespace(normalize=spec.config["normalize"], pooler_source=source, projector="mlp",
                             mlp_only_train=True)
    assert describe(config, "mean", [], False)["pooling_description"].endswith(f"L2-normalised ({source})") \
        == ("--normalize" in flags)
    settings = settings_from_record(json_safe(spec.fingerprint()))
    if "--normalize" in flags:
        assert settings["normalize"] is True
    if "--preset" in flags:
        assert settings["preset"] == "simcse_bert" and "pooler_type" not in settings


def test_a_record_keeps_the_trainer_flags_that_change_what_is_trained(build, command_lines, tmp_path):
    """NEFTune's noise and the sampling strategy changed what a run trained but were left out of hf_cse_run.json:
    --config <run>/hf_cse_run.json reran another run without a word, and a resume compared neither (a review found
    it: losses 5.57 / 7.92 with --neftune_noise_alpha 50, 2.60 / 2.32 from its record)."""
    flags = ["--neftune_noise_alpha", "5", "--train_sampling_strategy", "sequential"]
    settings = build(*command_lines["default"], *flags)[2]
    recorded = settings[TRAINING_ARGUMENTS]
    assert recorded["neftune_noise_alpha"] == 5 and recorded["train_sampling_strategy"] == "sequential"
    rerun = build("--config", _file(tmp_path / "hf_cse_run.json", json_safe(settings)))[2]
    assert rerun == json.loads(json.dumps(json_safe(settings)))


def test_a_record_with_scheduler_arguments_starts_again(build, command_lines, tmp_path):
    """A run given --lr_scheduler_kwargs records them as a JSON object; --config of its record refused them
    ("'lr_scheduler_kwargs' must be a string") because the flag takes the object as text."""
    flags = ["--lr_scheduler_type", "cosine_with_min_lr", "--lr_scheduler_kwargs", '{"min_lr": 1e-06}']
    settings = build(*command_lines["default"], *flags)[2]
    assert settings[TRAINING_ARGUMENTS]["lr_scheduler_kwargs"] == {"min_lr": 1e-06}
    rerun = build("--config", _file(tmp_path / "hf_cse_run.json", json_safe(settings)))[2]
    assert rerun == json.loads(json.dumps(json_safe(settings)))


def test_only_the_trainers_object_flags_take_an_object_in_a_file(tmp_path):
    parser = train.argument_parser()
    typed = check_settings({"lr_scheduler_kwargs": {"min_lr": 1e-06}}, parser, "run.json")
    assert json.loads(typed["lr_scheduler_kwargs"]) == {"min_lr": 1e-06}
    with pytest.raises(InputError, match="'optim_args' must be a string"):
        check_settings({"optim_args": {"betas": 1}}, parser, "run.json")


@pytest.mark.parametrize("settings, line", [
    ({"method": "esimcse", "queue_size": 0, "momentum": 0.9},
     "'momentum' does nothing while --queue_size is 0: it acts only with --queue_size > 0. Set that, or remove "
     "'momentum' from --config"),
    ({"loss": "vicreg", "variance_weight": 2.0}, "'variance_weight' does nothing while --surrogate is true"),
])
def test_a_files_setting_that_would_do_nothing_is_refused_naming_the_file(tmp_path, tiny_bert_dir, capsys,
                                                                        monkeypatch, settings, line):
    """The needs of a method's field or a loss's hyperparameter hold for a --config file's values too, named by
    the file and key (the typed flags are refused before torch)."""
    from hf_cse.models import base

    monkeypatch.setattr(base, "load_encoder", lambda *a, **k: pytest.fail("the weights were loaded"))
    corpus = tmp_path / "train.txt"
    corpus.write_text("\n".join(random_sentences(40)) + "\n")
    path = _file(tmp_path / "run.json", {"model_name_or_path": str(tiny_bert_dir), "train_file": str(corpus),
                                         **settings})
    assert train.main(["--config", path, "--output_dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--config {path}: {line}" in err, err


def test_a_files_setting_without_what_it_needs_in_the_file_names_the_file(tmp_path, tiny_bert_dir, capsys,
                                                                          monkeypatch):
    """A file with lora_alpha and no lora_r was refused as '--lora_alpha / --lora_target_modules are set but
    --lora_r is 0', flags the user never typed."""
    from hf_cse.models import base

    monkeypatch.setattr(base, "load_encoder", lambda *a, **k: pytest.fail("the weights were loaded"))
    corpus = tmp_path / "train.txt"
    corpus.write_text("\n".join(random_sentences(40)) + "\n")
    path = _file(tmp_path / "run.json", {"model_name_or_path": str(tiny_bert_dir), "train_file": str(corpus),
                                         "lora_alpha": 8.0})
    assert train.main(["--config", path, "--output_dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert f"--config {path}: 'lora_alpha' does nothing while --lora_r is 0" in err and \
        f"remove 'lora_alpha' from --config {path}." in err, err


def test_a_record_of_a_relative_local_generator_reruns_from_another_folder(build, tiny_bert_dir, tiny_mlm_dir,
                                                                             tmp_path, monkeypatch):
    """The record held DiffCSE's generator twice: resolved ("generator") and as typed (its config field), and its
    sorted keys put the one as typed last, which --config read: a rerun from another folder lost the generator.
    It is recorded once, resolved; an older record holding both still reruns and resumes."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(random_sentences(32)) + "\n")
    monkeypatch.chdir(tiny_mlm_dir.parent)
    flags = ["--method", "diffcse", "--generator_name_or_path", tiny_mlm_dir.name, "--train_file", str(corpus),
             "--model_name_or_path", str(tiny_bert_dir), "--per_device_train_batch_size", "8"]
    by_flags = build(*flags)[0]
    fingerprint = by_flags.fingerprint()
    assert fingerprint["generator"] == str(tiny_mlm_dir.resolve()) and "generator_name_or_path" not in fingerprint
    older = {**json_safe(fingerprint), "generator_name_or_path": tiny_mlm_dir.name}  # as runs recorded it before
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for record in (json_safe(fingerprint), older):
        path = tmp_path / "hf_cse_run.json"
        path.write_text(json.dumps(record, sort_keys=True))  # as the run writes it
        assert build("--config", str(path))[0].fingerprint() == fingerprint
    assert older_runs.record_in_objectives_form(older) == json_safe(fingerprint)  # so the older run resumes
