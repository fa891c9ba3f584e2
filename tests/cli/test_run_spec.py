"""The typed run description (hf_cse.cli.run_spec.RunSpec) on its own: built from real command lines (the script's
checks and data reading run; no model is loaded, nothing trains), its resume fingerprint is the settings record the
script wrote before it existed, and its data facts are what the card reads."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from helpers import fake_checkpoint, random_sentences
from transformers import AutoConfig

from hf_cse.checks import InputError
from hf_cse.cli import older_runs, train
from hf_cse.cli.arguments import DataArguments
from hf_cse.cli.output_dir import RUN_RECORD_FILE, prepare_output_dir
from hf_cse.cli.run_spec import LATER_CONFIG_FIELDS, DataSpec, RunSpec, SpeedSpec, dev_and_selection, training_arguments
from hf_cse.encoders import default_encoder
from hf_cse.export.training_info import training_info_from_run
from hf_cse.model_card import render_model_card
from hf_cse.models import METHODS
from hf_cse.precision import describe
from hf_cse.run_files import DEV_AND_SELECTION, TRAIN_FILE_CONTENT, TRAINING_ARGUMENTS
from hf_cse.training_args import ContrastiveTrainingArguments
from hf_cse.writing import json_safe

NO_DEV = ["--eval_strategy", "no", "--load_best_model_at_end", "false"]  # presets score STS-B dev otherwise


# ----------------------------------------------------------------------- the references: the code before RunSpec
def todays_settings(encoder, method, config_kwargs, data_args, stream_args, training_args) -> dict:
    """``hf_cse_run.json``'s settings as ``train_from_args`` built them inline before RunSpec (commit 2b97101)."""
    run_defining_training_args = ("seed", "per_device_train_batch_size", "gradient_accumulation_steps",
                                  "learning_rate", "weight_decay", "num_train_epochs", "max_steps", "lr_scheduler_type",
                                  "warmup_steps", "world_size")
    generator = config_kwargs.get("generator_name_or_path")
    streamed = stream_args.streaming
    train_file = data_args.train_file and str(Path(data_args.train_file).resolve())
    settings = {"encoder": encoder, "method": method, **config_kwargs, "generator": generator,
                **vars(data_args), "train_file": train_file,
                "max_seq_length": training_args.max_seq_length,  # a data flag then, the trainer's argument now
                **{k: getattr(training_args, k, None) for k in run_defining_training_args}}
    settings.pop("preprocessing_num_workers", None)
    settings.pop("padding_free", None)  # a speed-only config field added after that commit: never recorded
    settings.pop("generator_name_or_path", None)  # recorded twice then, as typed beside "generator": now once
    for name, earlier in LATER_CONFIG_FIELDS.items():  # added after that commit: recorded only when set otherwise
        if settings.get(name) == earlier:
            del settings[name]
    if streamed or stream_args.train_files:
        settings.update(streaming=streamed, train_weights=stream_args.train_weights,
                        train_files=[str(Path(f).resolve()) for f in stream_args.train_files or []])
    if not config_kwargs.get("do_mlm"):
        settings = {k: v for k, v in settings.items() if k not in ("do_mlm", "mlm_weight", "mlm_probability")}
    return settings


def todays_data_facts(fields: dict, num_sentences=None) -> dict:
    """``training_info.json``'s ``data`` as ``hf_cse.export.training_info.data_facts`` made it (commit 2b97101) from
    the data and streaming flags."""
    train_file = fields.get("train_file")
    data = {
        "source": Path(train_file).name if train_file else fields.get("dataset_name") or "hf_cse demo corpus",
        "dataset_name": fields.get("dataset_name"),
        "dataset_config_name": fields.get("dataset_config_name"),
        "num_sentences": num_sentences,
        "max_seq_length": fields.get("max_seq_length"),
        "max_train_samples": fields.get("max_train_samples"),
    }
    if fields.get("train_files"):
        weights = fields.get("train_weights") or [1.0] * len(fields["train_files"])
        data["source"] = " + ".join(f"{Path(f).name} (weight {w:g})" for f, w in zip(fields["train_files"], weights))
    if fields.get("streaming"):
        data["streamed"] = True
    if fields.get("pair_column"):
        kind = "triplets" if fields.get("negative_column") else "pairs"
        data["pair_data"] = {"kind": kind, "anchor": fields.get("text_column") or "text",
                             "positive": fields["pair_column"], "hard_negative": fields.get("negative_column")}
        data["num_rows"], data["num_sentences"] = data.pop("num_sentences", None), None
    return {k: v for k, v in data.items() if v is not None}


# today's code wrote these (``python -c`` on commit 2b97101: train_from_args with the flags of the key, the packaged
# encoder and the demo corpus, stopped after step 3); "encoder" is the packaged encoder's folder on that machine
RECORDED = {
    (): json.loads("""{"bidirectional": false, "dataset_config_name": null, "dataset_name": null,
      "encoder": "ENCODER", "encoder_dtype": "fp32", "fast_dropout": true, "generator": null,
      "gradient_accumulation_steps": 1, "learning_rate": 3e-05, "lora_dropout": 0.05, "lora_r": 0,
      "lr_scheduler_type": "linear", "max_seq_length": 32, "max_steps": -1, "max_train_samples": null,
      "method": "simcse", "mlp_only_train": true, "negative_column": null, "normalize": true, "num_train_epochs": 1,
      "objectives": [{"hyperparameters": {}, "loss": "infonce", "weight": 1.0}], "off_dropout_grad": true,
      "pair_column": null, "per_device_train_batch_size": 64,
      "pooler_source": "the encoder's own sentence-transformers pooling (mean + Normalize)", "pooler_type": "avg",
      "seed": 42, "text_column": null, "train_file": null, "warmup_steps": 0, "weight_decay": 0.0,
      "world_size": 1}"""),
    ("--preset", "simcse_bert", "--do_mlm", *NO_DEV, "--seed", "7"): json.loads("""{"bidirectional": false,
      "dataset_config_name": null, "dataset_name": null, "do_mlm": true, "encoder": "ENCODER",
      "encoder_dtype": "fp32", "fast_dropout": true, "generator": null, "gradient_accumulation_steps": 1,
      "learning_rate": 3e-05, "lora_dropout": 0.05, "lora_r": 0, "lr_scheduler_type": "linear",
      "max_seq_length": 32, "max_steps": -1, "max_train_samples": null, "method": "simcse", "mlm_probability": 0.15,
      "mlm_weight": 0.1, "mlp_only_train": true, "negative_column": null, "normalize": true, "num_train_epochs": 1,
      "objectives": [{"hyperparameters": {"temperature": 0.05}, "loss": "infonce", "weight": 1.0}],
      "off_dropout_grad": true, "pair_column": null, "per_device_train_batch_size": 64,
      "pooler_source": "set by --preset simcse_bert; the encoder's own sentence-transformers pooling is \
mean + Normalize",
      "pooler_type": "cls", "seed": 7, "text_column": null, "train_file": null, "warmup_steps": 0,
      "weight_decay": 0.0, "world_size": 1}"""),
}


# ----------------------------------------------------------------------------------------------- building
class _Built(Exception):
    pass


@pytest.fixture
def build(monkeypatch, tmp_path):
    """``build(*flags)``: the RunSpec ``train_from_args`` builds for those flags, the arguments it was built from and
    the settings the script hands to the output-folder check (which stops the run: no model is loaded)."""
    def run(*flags):
        seen = {}
        original = RunSpec.from_args.__func__

        def spy(cls, **kwargs):
            seen["inputs"], seen["spec"] = kwargs, original(cls, **kwargs)
            return seen["spec"]

        def stop(output_dir, settings, **kwargs):
            seen["settings"] = settings
            raise _Built

        monkeypatch.setattr(RunSpec, "from_args", classmethod(spy))
        monkeypatch.setattr(train, "prepare_output_dir", stop)
        out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
        with pytest.raises(_Built):
            train.train_from_args(["--output_dir", str(out), "--use_cpu", *flags])
        return seen["spec"], seen["inputs"], seen["settings"]
    return run


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def command_lines(tmp_path, tiny_bert_dir):
    """Command lines of each kind of run: default, a preset, streaming files, triplets, MLM on / off, DiffCSE."""
    texts = random_sentences(96)
    corpus = _write(tmp_path / "corpus.txt", texts[:64])
    other = _write(tmp_path / "other.txt", texts[64:])
    triplets = _write(tmp_path / "t.tsv", ["anchor\tpos\tneg"] + ["\t".join(texts[i:i + 3]) for i in range(0, 96, 3)])
    tiny = ["--model_name_or_path", str(tiny_bert_dir), "--per_device_train_batch_size", "8"]
    return {
        "default": [],
        "preset": ["--preset", "gs_infonce_bert", *NO_DEV, "--train_file", corpus, *tiny],
        "streaming": ["--train_files", corpus, other, "--train_weights", "1", "3", "--streaming", "--max_steps", "4",
                      *tiny],
        "mixed files": ["--train_files", corpus, other, "--max_train_samples", "40", *tiny],
        "triplets": ["--train_file", triplets, "--text_column", "anchor", "--pair_column", "pos", "--negative_column",
                     "neg", *tiny],
        "mlm on": ["--train_file", corpus, "--do_mlm", "--mlm_weight", "0.2", *tiny],
        "mlm off": ["--train_file", corpus, *tiny],
        "imsimcse": ["--method", "imsimcse", "--train_file", corpus, "--dcl_weight", "0.2", *tiny],
        "diffcse": ["--method", "diffcse", "--generator_name_or_path", "unigram", "--train_file", corpus, *tiny],
    }


# ----------------------------------------------------------------------------------------------- fingerprint
KINDS = ["default", "preset", "streaming", "mixed files", "triplets", "mlm on", "mlm off", "imsimcse", "diffcse"]


@pytest.mark.parametrize("kind", KINDS)
def test_fingerprint_is_the_settings_record_of_the_code_before_it(build, command_lines, kind):
    spec, inputs, settings = build(*command_lines[kind])
    reference = todays_settings(inputs["encoder"], inputs["method"], inputs["config_kwargs"], inputs["data_args"],
                                inputs["stream_args"], inputs["training_args"])
    # the settings of the code before, and the content of each local training file, which it did not record
    fingerprint = spec.fingerprint()
    content = fingerprint.pop(TRAIN_FILE_CONTENT, {})
    assert fingerprint == reference
    assert json_safe(fingerprint) == json_safe(reference)  # as hf_cse_run.json holds it
    files = [inputs["data_args"].train_file, *(inputs["stream_args"].train_files or ())]
    assert sorted(content) == sorted(Path(f).name for f in files if f)
    # what the script checks the folder with, and beside it how the run is scored and its checkpoint chosen and its
    # other training arguments
    assert settings == {**spec.fingerprint(), DEV_AND_SELECTION: dev_and_selection(inputs["training_args"]),
                        TRAINING_ARGUMENTS: training_arguments(inputs["training_args"],
                                                                   inputs["stream_args"].streaming)}
    # a stream's loader workers order its rows: recorded for a rerun from the record (which its checkpoints compare)
    assert settings[TRAINING_ARGUMENTS].get("dataloader_num_workers") == (0 if kind == "streaming" else None)


def test_fingerprint_holds_the_mlm_settings_only_with_do_mlm(build, command_lines):
    on, off = build(*command_lines["mlm on"])[0].fingerprint(), build(*command_lines["mlm off"])[0].fingerprint()
    assert on["do_mlm"] is True and on["mlm_weight"] == 0.2
    assert not {"do_mlm", "mlm_weight", "mlm_probability"} & set(off)


def test_fingerprint_records_paths_resolved_and_streaming_only_when_used(build, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "train.txt", random_sentences(70))
    fingerprint = build("--train_file", "train.txt")[0].fingerprint()
    assert fingerprint["train_file"] == str((tmp_path / "train.txt").resolve())
    assert not {"streaming", "train_files", "train_weights"} & set(fingerprint)
    streamed = build("--train_files", "train.txt", "--streaming", "--max_steps", "2")[0].fingerprint()
    assert streamed["train_files"] == [str((tmp_path / "train.txt").resolve())] and streamed["streaming"] is True


@pytest.mark.parametrize("flags, recorded", [((), None), (("--precision", "auto"), None),
                                             (("--precision", "fp32"), "fp32")])
def test_a_precision_asked_for_is_recorded_and_auto_is_not(build, flags, recorded):
    """auto is resolved anew on each machine (a replay on a GPU trains in bf16 where a CPU ran fp32): recording
    what it resolved to here would pin it."""
    settings = build(*flags)[2]
    assert settings[TRAINING_ARGUMENTS].get("precision") == recorded


def test_a_local_encoder_is_recorded_resolved_and_an_older_relative_record_read_so(build, tiny_bert_dir, tmp_path,
                                                                                   monkeypatch):
    """A record's encoder is reached from any folder (``--config <run>/hf_cse_run.json`` elsewhere), as its data
    paths are; a record an older hf_cse wrote with the path as typed is read resolved, from the folder the command is
    run in (the same command, relaunched there, resumes it); a Hub id stays as it is."""
    from hf_cse.cli.older_runs import record_in_objectives_form

    shutil.copytree(tiny_bert_dir, tmp_path / "enc")
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "train.txt", random_sentences(70))
    fingerprint = build("--model_name_or_path", "enc", "--train_file", "train.txt")[0].fingerprint()
    assert fingerprint["encoder"] == str((tmp_path / "enc").resolve())
    older = {"encoder": "enc", "generator": "some/hub-model", "objectives": []}
    assert record_in_objectives_form(older) == {**older, "encoder": fingerprint["encoder"]}


@pytest.mark.parametrize("flags", RECORDED)
def test_a_record_written_by_the_code_before_it_resumes(build, tmp_path, flags):
    """The folder of an interrupted run whose hf_cse_run.json the code before RunSpec wrote: the same command line
    resumes it; another seed is refused."""
    recorded = {**RECORDED[flags], "encoder": default_encoder()}
    spec = build(*flags)[0]
    assert json_safe({k: v for k, v in spec.fingerprint().items() if k != TRAIN_FILE_CONTENT}) == recorded
    out = tmp_path / "interrupted"
    fake_checkpoint(out / "checkpoint-2")
    (out / RUN_RECORD_FILE).write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    read = older_runs.record_in_objectives_form
    assert prepare_output_dir(out, spec.fingerprint(), read_record=read) == str(out / "checkpoint-2")
    other_seed = build(*flags, "--seed", "123")[0]
    with pytest.raises(InputError, match="other settings"):
        prepare_output_dir(out, other_seed.fingerprint(), read_record=read)


@pytest.mark.parametrize("kind", ["mlm off", "streaming"])
def test_an_interrupted_run_whose_training_file_changed_is_not_resumed_silently(build, command_lines, tmp_path, kind):
    out = tmp_path / "interrupted"
    prepare_output_dir(out, build(*command_lines[kind])[0].fingerprint())
    fake_checkpoint(out / "checkpoint-2")
    assert prepare_output_dir(out, build(*command_lines[kind])[0].fingerprint()) == str(out / "checkpoint-2")
    corpus = tmp_path / "corpus.txt"
    lines = corpus.read_text().splitlines(keepends=True)
    corpus.write_text("".join([lines[1], lines[0], *lines[2:]]))  # the same size, other sentences in their places
    with pytest.raises(InputError, match=r"other settings \(corpus.txt was edited \(sha256 \w+ then, sha256 \w+ "
                                         r"now\)\): rerun with its settings"):
        prepare_output_dir(out, build(*command_lines[kind])[0].fingerprint())
    corpus.write_text("".join(lines[1:]))
    with pytest.raises(InputError, match=r"corpus.txt was edited \(\d+ bytes then, \d+ bytes now\)"):
        prepare_output_dir(out, build(*command_lines[kind])[0].fingerprint())
    # the user names the checkpoint: the run goes on with the file as it is now
    assert prepare_output_dir(out, build(*command_lines[kind])[0].fingerprint(),
                              resume_from_checkpoint=str(out / "checkpoint-2")) == str(out / "checkpoint-2")


@pytest.mark.slow
def test_an_interrupted_run_on_a_folder_whose_files_changed_is_not_resumed_silently(build, tmp_path, tiny_bert_dir):
    """--dataset_name FOLDER: each of its train files' content is recorded (keyed by the folder's name), so that an
    edited, added or removed file is refused as an edited --train_file is; a record written before it resumes."""
    folder = tmp_path / "wiki"
    folder.mkdir()
    texts = random_sentences(96)
    first, second = folder / "train-00000.txt", folder / "train-00001.txt"
    _write(first, texts[:48])
    _write(second, texts[48:])
    flags = ["--dataset_name", str(folder), "--model_name_or_path", str(tiny_bert_dir),
             "--per_device_train_batch_size", "8"]
    out, checkpoint = tmp_path / "interrupted", str(tmp_path / "interrupted" / "checkpoint-2")
    fingerprint = build(*flags)[0].fingerprint()
    assert sorted(fingerprint[TRAIN_FILE_CONTENT]) == ["wiki/train-00000.txt", "wiki/train-00001.txt"]
    prepare_output_dir(out, fingerprint)
    fake_checkpoint(out / "checkpoint-2")
    assert prepare_output_dir(out, build(*flags)[0].fingerprint()) == checkpoint
    lines = first.read_text().splitlines(keepends=True)
    first.write_text("".join([lines[1], lines[0], *lines[2:]]))  # the same size, other sentences in their places
    with pytest.raises(InputError, match=r"other settings \(wiki/train-00000.txt was edited \(sha256 \w+ then, "
                                         r"sha256 \w+ now\)\): rerun with its settings"):
        prepare_output_dir(out, build(*flags)[0].fingerprint())
    first.write_text("".join(lines))
    _write(folder / "train-00002.txt", texts[:8])
    with pytest.raises(InputError, match=r"\(wiki/train-00002.txt: no file then, a file now\)"):
        prepare_output_dir(out, build(*flags)[0].fingerprint())
    (folder / "train-00002.txt").unlink()
    second.unlink()
    with pytest.raises(InputError, match=r"\(wiki/train-00001.txt: a file then, no file now\)"):
        prepare_output_dir(out, build(*flags)[0].fingerprint())
    # a record written before the folder's files were recorded resumes as it did, whatever they hold now
    record = json.loads((out / RUN_RECORD_FILE).read_text())
    del record[TRAIN_FILE_CONTENT]
    (out / RUN_RECORD_FILE).write_text(json.dumps(record))
    assert prepare_output_dir(out, build(*flags)[0].fingerprint()) == checkpoint


def test_an_interrupted_run_relaunched_on_another_training_file_names_the_path_whole(build, command_lines, tmp_path):
    """Another --train_file is another path (said whole, not cut), not an edit of the file the run was trained on."""
    out = tmp_path / "interrupted"
    prepare_output_dir(out, build(*command_lines["mlm off"])[0].fingerprint())
    fake_checkpoint(out / "checkpoint-2")
    flags = [tmp_path / "other.txt" if f == str(tmp_path / "corpus.txt") else f for f in command_lines["mlm off"]]
    with pytest.raises(InputError) as refused:
        prepare_output_dir(out, build(*map(str, flags))[0].fingerprint())
    message = str(refused.value)
    assert f"(train_file: '{tmp_path / 'corpus.txt'}' then, '{tmp_path / 'other.txt'}' now): rerun" in message
    assert "edited" not in message and "..." not in message


@pytest.mark.parametrize("kind", ["streaming", "triplets", "mlm on"])
def test_a_folder_recorded_by_the_code_before_it_resumes(build, command_lines, tmp_path, kind):
    spec, inputs, _ = build(*command_lines[kind])
    out = tmp_path / "interrupted"
    prepare_output_dir(out, todays_settings(inputs["encoder"], inputs["method"], inputs["config_kwargs"],
                                            inputs["data_args"], inputs["stream_args"], inputs["training_args"]))
    fake_checkpoint(out / "checkpoint-4")
    assert prepare_output_dir(out, spec.fingerprint(), read_record=older_runs.record_in_objectives_form) == str(
        out / "checkpoint-4")


CHANGES_THE_RUN = {
    "seed": ["--seed", "1"],
    "learning rate": ["--learning_rate", "1e-5"],
    "method": ["--method", "imsimcse"],
    "loss": ["--loss", "gs_infonce"],
    "loss hyperparameter": ["--temperature", "0.1"],
    "DCL objective": ["--dcl_weight", "0.1"],
    "batch": ["--per_device_train_batch_size", "16"],
    "steps": ["--max_steps", "3"],
    "length": ["--max_seq_length", "16"],
    "pooling": ["--pooler_type", "cls"],
    "data cut": ["--max_train_samples", "50"],
}
SAME_RUN = {
    "tokenizing workers": ["--preprocessing_num_workers", "2"],
    "logging": ["--logging_steps", "1"],
    "saving": ["--save_strategy", "steps", "--save_steps", "3"],
    "precision": ["--precision", "fp32"],
    "padding-free": ["--padding_free", "false"],
}


def test_what_changes_the_fingerprint_and_what_does_not(build, command_lines):
    base_flags = command_lines["mlm off"]
    base = build(*base_flags)[0].fingerprint()
    for what, flags in CHANGES_THE_RUN.items():
        changed = build(*base_flags, *flags)[0].fingerprint()
        assert changed != base, what
    for what, flags in SAME_RUN.items():
        assert build(*base_flags, *flags)[0].fingerprint() == base, what
    # each build has its own --output_dir: the folder is where a run is kept, not what it is
    assert build(*base_flags)[0].fingerprint() == base and "output_dir" not in base


def test_matryoshka_settings_change_the_fingerprint(build, command_lines):
    base_flags = [*command_lines["mlm off"], "--projector", "none"]
    base = build(*base_flags)[0].fingerprint()
    dims = build(*base_flags, "--matryoshka_dims", "32,16")[0].fingerprint()
    weighted = build(*base_flags, "--matryoshka_dims", "32,16", "--matryoshka_weights", "1,2")[0].fingerprint()
    assert "matryoshka_dims" not in base  # a run recorded before the flag existed still resumes
    assert dims["matryoshka_dims"] == [32, 16] and len({json.dumps(f, sort_keys=True)
                                                        for f in (base, dims, weighted)}) == 3


# ----------------------------------------------------------------------------------------------- training_info
@pytest.mark.parametrize("kind", KINDS)
def test_the_data_facts_are_what_the_code_before_it_recorded(build, command_lines, kind):
    """training_info.json's ``data`` (written by ContrastiveTrainer.save_run from ``spec.data.card_facts``)."""
    spec, inputs, _ = build(*command_lines[kind])
    flags = {**vars(inputs["data_args"]), **vars(inputs["stream_args"]),
             "max_seq_length": inputs["training_args"].max_seq_length}  # a data flag in the code before
    assert spec.data.card_facts(64) == todays_data_facts(flags, 64)
    assert json.loads(json.dumps(spec.data.card_facts(64))) == spec.data.card_facts(64)  # JSON as it stands


def test_the_card_shows_the_runs_facts(build, command_lines, tiny_bert_dir):
    spec, inputs, _ = build(*command_lines["triplets"])
    info = training_info_from_run(inputs["training_args"], data=spec.data.card_facts(32),
                                  train_metrics={"train_loss": 0.25}, precision=describe(spec.precision))
    encoder = AutoConfig.from_pretrained(tiny_bert_dir).to_dict()
    config = METHODS[spec.method].config_class(encoder_config=encoder, **spec.model_config())
    export = {"embedding_dimension": 32, "max_seq_length": 64, "pooling_description": "CLS token",
              "projector_description": "none", "modules": ["Transformer(BertModel)", "Pooling('cls')"]}
    card = render_model_card(config, model_id="someone/model", export=export, training_info=info)
    for text in ("| Trained on | triplets (anchor `anchor`, positive `pos`, hard negative `neg`)",
                 "| Training triplets | 32 |", "| `train_loss` | 0.25 |", info["precision"]):
        assert text in card, text


# ----------------------------------------------------------------------------------------------- the type
def test_spec_is_frozen_and_its_outputs_are_copies(build):
    spec, inputs, _ = build()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.method = "diffcse"
    with pytest.raises(TypeError):
        spec.config["pooler_type"] = "cls"
    before = spec.fingerprint()
    inputs["config_kwargs"]["objectives"][0]["loss"] = "changed after"  # the caller's dict is not the spec's
    spec.fingerprint()["objectives"][0]["loss"] = "changed by a reader"
    spec.objectives[0]["loss"] = "changed by a reader"
    assert spec.fingerprint() == before and spec.objectives[0]["loss"] == "infonce"


def test_data_spec_takes_every_data_flag():
    """A flag added to DataArguments is a DataSpec field (or, speed only, a SpeedSpec one) without being written
    twice; the trainer's max_seq_length, where the data is cut, is one too."""
    names = [f.name for f in dataclasses.fields(DataArguments)]
    data, speed = [f.name for f in dataclasses.fields(DataSpec)], [f.name for f in dataclasses.fields(SpeedSpec)]
    assert data[:len(names)] == [n for n in names if n != "preprocessing_num_workers"] + ["max_seq_length"]
    assert "preprocessing_num_workers" in speed and "padding_free" in speed
    stream = type("Stream", (), {"streaming": False, "train_files": None, "train_weights": None})()
    spec = DataSpec.from_args(DataArguments(train_file="x.txt"), stream, max_seq_length=48)
    assert spec.source == "x.txt" and spec.max_seq_length == 48 and spec.fingerprint()["max_seq_length"] == 48


def test_messages_name_the_data_as_given():
    args = ContrastiveTrainingArguments("unused", use_cpu=True, report_to="none")
    stream = type("Stream", (), {"streaming": False, "train_files": ["a.txt", "b.txt"], "train_weights": None})()
    spec = RunSpec.from_args(encoder="enc", method="simcse", config_kwargs={}, stream_args=stream,
                             data_args=DataArguments(max_train_samples=10), training_args=args)
    assert spec.data.source == "a.txt + b.txt cut to max_train_samples 10"
    assert spec.training.global_batch == args.per_device_train_batch_size * args.world_size
    assert spec.generator is None and spec.training.lr_scheduler_type == "linear"


def test_a_local_data_set_folder_is_no_hub_data_set_on_the_card(build, tiny_bert_dir, tmp_path):
    """--dataset_name of a folder saved here: the card's Source row names the folder, its metadata lists no data set
    (a machine path, or after a push its folder name taken for a Hub id)."""
    from datasets import Dataset

    folder = tmp_path / "mycorpus"
    Dataset.from_dict({"text": random_sentences(32)}).save_to_disk(str(folder))
    spec, _, _ = build("--model_name_or_path", str(tiny_bert_dir), "--dataset_name", str(folder),
                       "--per_device_train_batch_size", "8")
    facts = spec.data.card_facts(32)
    assert facts["source"] == "local folder mycorpus" and "dataset_name" not in facts



@pytest.mark.slow
def test_a_presets_pooling_in_place_of_the_encoders_own_is_a_warning(tmp_path, monkeypatch, caplog):
    """The default encoder pools by mean + Normalize; --preset simcse_bert pools by [CLS] (its paper's BERT-base
    runs): a warning naming the flag that keeps the encoder's own; the same preset with that flag warns of nothing."""
    import logging

    from hf_cse.models import CSEPreTrainedModel

    def stop(cls, name_or_path, **config_kwargs):
        raise _Built

    monkeypatch.setattr(CSEPreTrainedModel, "from_encoder", classmethod(stop))
    train_file = _write(tmp_path / "train.txt", random_sentences(96))

    def warnings_of(*flags):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="run_unsup"), pytest.raises(_Built):
            train.train_from_args(["--output_dir", str(tmp_path / f"out{len(flags)}"), "--use_cpu", "--train_file",
                                   train_file, "--preset", "simcse_bert", *NO_DEV, *flags])
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "pooling" in r.getMessage()]

    assert warnings_of() == ["pooling: cls + normalize (set by --preset simcse_bert; the encoder's own "
                             "sentence-transformers pooling is mean + Normalize); the preset pools as its paper's "
                             "BERT-base runs: --pooler_type 'avg' keeps the encoder's own"]
    assert warnings_of("--pooler_type", "avg") == []


def test_a_whole_warmup_is_recorded_as_the_same_number_however_it_was_given():
    """A run's record said warmup_steps 0 and the rerun from it (a JSON number read as float) 0.0: the one line two
    records of the same run differed by."""
    from types import SimpleNamespace

    from hf_cse.cli.run_spec import TrainingSpec

    base = dict(seed=1, per_device_train_batch_size=8, gradient_accumulation_steps=1, learning_rate=3e-5,
                weight_decay=0.0, num_train_epochs=1.0, max_steps=2, lr_scheduler_type="linear", world_size=1)
    specs = [TrainingSpec.from_args(SimpleNamespace(**base, warmup_steps=w)) for w in (0, 0.0, 10, 10.0, 0.1)]
    recorded = [json.dumps(spec.fingerprint()["warmup_steps"]) for spec in specs]
    assert recorded == ["0", "0", "10", "10", "0.1"]
