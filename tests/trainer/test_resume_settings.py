"""``resume_from_checkpoint=True`` continues the interrupted run, so from Python as from the command line a checkpoint
is not continued with settings that define another run (hf_cse.run_settings, hf_cse.trainer_folder.check_same_run):
refused in one line before any step, naming what changed and the two ways out; a checkpoint named by its path goes on
with the new settings, but for those its optimizer and scheduler state restore; the same settings with a larger
max_steps train the steps added."""

from __future__ import annotations

import json

import pytest
import torch
from datasets import Dataset
from helpers import collator, random_sentences, tiny_args, tiny_train_dataset
from safetensors.torch import load_file
from transformers import AutoTokenizer

from hf_cse.data import tokenize_dataset
from hf_cse.models import SimCSEModel
from hf_cse.objectives import objective
from hf_cse.output_folder import OutputFolderError
from hf_cse.run_files import RUN_SETTINGS_FILE, TRAIN_FILE_CONTENT
from hf_cse.run_settings import data_description, in_brief, setting_differences
from hf_cse.trainer import ContrastiveTrainer

# the interrupted run is a shorter one resumed to a larger max_steps: a schedule that does not follow the total
# (another total under a linear one is refused: tests/trainer/test_resume_schedule_and_selection.py)
SAVE = dict(save_strategy="steps", save_steps=2, lr_scheduler_type="constant")


def _trainer(encoder, sentences, tmp_path, out, model_kwargs=None, data=None, cached_minibatch_size=None,
             **args) -> ContrastiveTrainer:
    ds, tok = tiny_train_dataset(encoder, sentences, tmp_path / "data", repeat=4)
    torch.manual_seed(0)
    return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(encoder), **(model_kwargs or {})),
                              args=tiny_args(out, **{**SAVE, **args}), train_dataset=ds if data is None else data,
                              data_collator=collator(tok), processing_class=tok,
                              cached_minibatch_size=cached_minibatch_size)


def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*"))


def _interrupted_run(tiny_bert_dir, sentences, tmp_path):
    """A run of 4 steps stopped after its checkpoint at step 2."""
    out = tmp_path / "out"
    _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=2).train()
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    return out, out / "checkpoint-2"


def _refused(trainer, words):
    """``trainer.train(resume_from_checkpoint=True)`` refused in one line naming ``words``, before any step and before
    the checkpoint's weights are loaded."""
    weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with pytest.raises(OutputFolderError, match=words) as refused:
        trainer.train(resume_from_checkpoint=True)
    message = str(refused.value)
    assert "\n" not in message and "--" not in message, message
    assert trainer.state.global_step == 0
    for name, weight in trainer.model.state_dict().items():
        torch.testing.assert_close(weight, weights[name], rtol=0, atol=0, msg=name)
    return message


@pytest.mark.slow
def test_resume_true_with_another_learning_rate_is_refused_and_the_named_checkpoint_goes_on(tiny_bert_dir, sentences,
                                                                                           tmp_path, caplog):
    out, checkpoint = _interrupted_run(tiny_bert_dir, sentences, tmp_path)
    assert json.loads((checkpoint / RUN_SETTINGS_FILE).read_text())["learning_rate"] == 1e-3
    before = _snapshot(out)
    changed = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, learning_rate=2e-3)
    message = _refused(changed, r"learning_rate: 0\.001 then, 0\.002 now")
    assert message.startswith(f"resume_from_checkpoint=True: {checkpoint} is a checkpoint of a run with other "
                              "settings (learning_rate: 0.001 then, 0.002 now): ")
    # no way out that the named checkpoint's rule refuses in turn (below): only those that work
    assert "learning_rate cannot change when resuming" in message and "pass resume_from_checkpoint" not in message
    assert message.endswith("resume it with its run's settings, or start a new run in another output_dir.")
    assert _snapshot(out) == before  # nothing written, nothing removed
    # the checkpoint named by its path: the learning rate still cannot change, as the checkpoint's optimizer and
    # scheduler state bring back its run's (before, the new one was logged and recorded, and not used) ...
    with pytest.raises(OutputFolderError, match=r"learning_rate: 0\.001 then, 0\.002 now cannot change when "
                                                r"resuming: the checkpoint's optimizer and scheduler state"):
        changed.train(resume_from_checkpoint=str(checkpoint))
    assert _snapshot(out) == before
    # so do Adam's betas and epsilon; another optimizer's state does not load at all (fused AdamW is AdamW)
    for setting, words in (({"adam_beta2": 0.99}, r"adam_beta2: 0\.999 then, 0\.99 now cannot change"),
                           ({"optim": "adafactor"}, "optim: 'adamw_torch' then, 'adafactor' now cannot change")):
        with pytest.raises(OutputFolderError, match=words):
            _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, **setting).train(
                resume_from_checkpoint=str(checkpoint))
    assert _snapshot(out) == before
    # ... the run goes on with the other new settings (offered where only they changed), and says which changed
    warmed = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, warmup_steps=2)
    assert f"pass resume_from_checkpoint='{checkpoint}' to go on from it with these settings" in _refused(
        warmed, r"warmup_steps: 0 then, 2 now")
    # not offered where the new schedule follows the total and the total changed: the named checkpoint is refused
    linear = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, lr_scheduler_type="linear")
    message = _refused(linear, "lr_scheduler_type: 'constant' then, 'linear' now")
    assert "its run trains 2 steps and this one 4" in message and "pass resume_from_checkpoint" not in message
    with caplog.at_level("WARNING", logger="hf_cse.trainer_folder"):
        warmed.train(resume_from_checkpoint=str(checkpoint))
    assert warmed.state.global_step == 4
    assert f"resuming {checkpoint} with other settings than its run's (warmup_steps: 0 then, 2 now)" in caplog.text
    assert json.loads((out / "checkpoint-4" / RUN_SETTINGS_FILE).read_text())["warmup_steps"] == 2


@pytest.mark.slow
def test_a_named_checkpoint_is_refused_where_later_checkpoints_would_be_overwritten(tiny_bert_dir, sentences,
                                                                                     tmp_path):
    """Going on from checkpoint-2 with other settings in a folder holding checkpoint-4 would overwrite it with another
    run's and leave the folder's last checkpoint another run's; elsewhere it goes on (with the same settings, the
    same run is trained again: tests/trainer/test_trainer_folder.py)."""
    out = tmp_path / "out"
    _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4).train()
    before = _snapshot(out)
    again = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, warmup_steps=1)
    with pytest.raises(OutputFolderError) as refused:
        again.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert str(refused.value) == (
        f"resume_from_checkpoint {out / 'checkpoint-2'}: output_dir {out} holds later checkpoints (checkpoint-4), "
        f"which going on from step 2 with other settings there would overwrite one by one. Resume from "
        f"{out / 'checkpoint-4'}, or go on from checkpoint-2 in another output_dir.")
    assert _snapshot(out) == before
    elsewhere = _trainer(tiny_bert_dir, sentences, tmp_path, tmp_path / "elsewhere", max_steps=4, warmup_steps=1)
    elsewhere.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert elsewhere.state.global_step == 4 and _snapshot(out) == before


@pytest.mark.slow
def test_the_same_settings_with_a_larger_max_steps_resume_and_train_the_steps_added(tiny_bert_dir, sentences,
                                                                                   tmp_path, caplog):
    out, checkpoint = _interrupted_run(tiny_bert_dir, sentences, tmp_path)
    # what watches or feeds the run may change, and the gradient cache (the same update in less memory)
    resumed = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, logging_steps=1, report_to="none",
                       dataloader_num_workers=0, cached_minibatch_size=4)
    with caplog.at_level("WARNING", logger="hf_cse.trainer_folder"):
        resumed.train(resume_from_checkpoint=True)
    assert "other settings" not in caplog.text
    assert resumed.state.global_step == 4
    assert [e["step"] for e in resumed.state.log_history if "loss" in e] == [1, 2, 3, 4]
    saved = load_file(out / "checkpoint-4" / "model.safetensors")
    for name, weight in resumed.model.state_dict().items():
        torch.testing.assert_close(weight, saved[name], rtol=0, atol=0, msg=name)


@pytest.mark.slow
def test_resume_true_with_other_objectives_a_batch_or_data_is_refused(tiny_bert_dir, sentences, tmp_path):
    out, checkpoint = _interrupted_run(tiny_bert_dir, sentences, tmp_path)
    hotter = [objective("infonce", temperature=0.1)]
    message = _refused(_trainer(tiny_bert_dir, sentences, tmp_path, out, {"objectives": hotter}, max_steps=4),
                       r"objectives: infonce temperature: 0\.05 then, 0\.1 now")
    assert len(message.replace(str(checkpoint), "")) < 400
    _refused(_trainer(tiny_bert_dir, sentences, tmp_path, out, {"objectives": [objective("gs_infonce")]},
                      max_steps=4), "objectives: infonce then, gs_infonce now")
    _refused(_trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, per_device_train_batch_size=4),
             "per_device_train_batch_size: 8 then, 4 now")
    _refused(_trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, gradient_accumulation_steps=2),
             "gradient_accumulation_steps: 1 then, 2 now")
    _, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path / "data", repeat=4)
    other = tokenize_dataset(Dataset.from_dict({"text": random_sentences(len(sentences) * 4, seed=7)}), tok, 32)
    _refused(_trainer(tiny_bert_dir, sentences, tmp_path, out, data=other, max_steps=4),
             r"train_dataset: '\d+ rows, the longest \d+ tokens, sampled token ids \w+' then, .* now")
    # two settings changed: both named
    _refused(_trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, learning_rate=2e-3, seed=1),
             "learning_rate: 0.001 then, 0.002 now; seed: 0 then, 1 now")


@pytest.mark.slow
def test_a_checkpoint_saved_before_the_settings_file_compares_what_it_holds(tiny_bert_dir, sentences, tmp_path):
    """A checkpoint of an earlier hf_cse (no hf_cse_settings.json): its config.json and trainer_state.json's batch
    size are compared; what it does not hold is not (it resumes)."""
    out, checkpoint = _interrupted_run(tiny_bert_dir, sentences, tmp_path)
    (checkpoint / RUN_SETTINGS_FILE).unlink()
    _refused(_trainer(tiny_bert_dir, sentences, tmp_path, out, {"objectives": [objective("gs_infonce")]},
                      max_steps=4), "objectives: infonce then, gs_infonce now")
    _refused(_trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, per_device_train_batch_size=4),
             "per_device_train_batch_size: 8 then, 4 now")
    _refused(_trainer(tiny_bert_dir, sentences, tmp_path, out, {"projector": "linear"}, max_steps=4),
             "projector: 'mlp' then, 'linear' now")
    resumed = _trainer(tiny_bert_dir, sentences, tmp_path, out, max_steps=4, learning_rate=2e-3)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 4


def test_the_training_set_is_described_by_its_rows_not_where_it_was_read(tiny_bert_dir, tmp_path):
    """The same rows read again (a file written anew: datasets' fingerprint changes) are the same data; other rows,
    fewer rows or rows cut shorter are not."""
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    rows = random_sentences(40)
    same = [tokenize_dataset(Dataset.from_dict({"text": rows}), tok, 32) for _ in range(2)]
    assert data_description(same[0]) == data_description(same[1])
    assert data_description(same[0]).startswith("40 rows, the longest ")
    for other in (tokenize_dataset(Dataset.from_dict({"text": random_sentences(40, seed=1)}), tok, 32),
                  tokenize_dataset(Dataset.from_dict({"text": rows}), tok, 6),  # another max_seq_length
                  same[0].select(range(39))):
        assert data_description(other) != data_description(same[0])
    assert data_description(Dataset.from_dict({"text": rows})) is None  # no token ids: not the trainer's data
    assert data_description([{"input_ids": [1, 2]}]) is None


def test_a_stream_is_described_by_its_first_rows(tiny_bert_dir):
    """A stream cannot be read ahead in full: its first rows stand for it (a resumed run on another corpus, or one
    cut shorter, went on with no word from Python), read again the same; a stream of other rows or cut at another
    length differs."""
    from hf_cse.streaming import tokenize_stream

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    rows = random_sentences(40)

    def stream(texts, length=32):
        return tokenize_stream(Dataset.from_dict({"text": texts}).to_iterable_dataset(), tok, max_seq_length=length)

    described = data_description(stream(rows))
    assert described == data_description(stream(rows))
    assert described.startswith("a stream, its first 16 rows: the longest ")
    assert data_description(stream(random_sentences(40, seed=1))) != described
    assert data_description(stream(rows, 6)) != described
    assert data_description(Dataset.from_dict({"text": rows}).to_iterable_dataset()) is None  # no token ids


def test_matryoshka_settings_typed_in_another_order_are_the_same_run():
    """The config sorts the dimensions (largest first, the weights following): the same training retyped in another
    order was refused a resume as other settings."""
    then = {"matryoshka_dims": [8, 32, 16], "matryoshka_weights": [1, 2, 3]}
    assert setting_differences(then, {"matryoshka_dims": [32, 16, 8], "matryoshka_weights": [2, 3, 1]}) == []
    assert setting_differences({"matryoshka_dims": [32, 16], "matryoshka_weights": None},
                               {"matryoshka_dims": [16, 32], "matryoshka_weights": [1, 1]}) == []  # 1 each
    assert setting_differences(then, {"matryoshka_dims": [32, 16, 8], "matryoshka_weights": [1, 2, 3]}) == [
        "matryoshka_weights: [2.0, 3.0, 1.0] then, [1.0, 2.0, 3.0] now"]


def test_setting_differences_are_named_then_and_now_and_shown_whole():
    changed = setting_differences({"learning_rate": 1e-3, "seed": 0, "pooler_source": "a"},
                                  {"learning_rate": 2e-3, "seed": 1, "pooler_source": "b"})
    assert changed == ["learning_rate: 0.001 then, 0.002 now", "seed: 0 then, 1 now"]
    assert in_brief(changed) == "learning_rate: 0.001 then, 0.002 now; seed: 0 then, 1 now"
    long = "train_file: '/data/" + "a" * 100 + "/wiki2k.txt' then, '/data/" + "a" * 100 + "/wiki400.txt' now"
    assert in_brief([long, "seed: 0 then, 1 now", "x: 1 then, 2 now"], 120) == long + "; and 2 more"  # never cut


def test_a_method_setting_typed_at_its_default_is_the_same_run_and_a_change_names_the_value_used():
    """The command line's record leaves out a method field whose flag was not given: ESimCSE's dup_rate 0.32 and
    queue_size 160 typed out continue that run; another queue_size is refused naming 160, not None."""
    from hf_cse.cli.run_spec import method_config_defaults

    then = {"method": "esimcse", "learning_rate": 3e-5}
    typed = {**then, "dup_rate": 0.32, "queue_size": 160}
    assert setting_differences(then, typed, method_config_defaults) == []
    assert setting_differences(typed, then, method_config_defaults) == []
    assert setting_differences(then, {**typed, "queue_size": 128}, method_config_defaults) == [
        "queue_size: 160 then, 128 now"]
    # another method: its own fields, as recorded (the method's change says it)
    assert setting_differences(then, {**then, "method": "simcse"}, method_config_defaults) == [
        "method: 'esimcse' then, 'simcse' now"]
    # without the defaults (records compared by other commands), as before
    assert setting_differences(then, typed) == ["dup_rate: None then, 0.32 now", "queue_size: None then, 160 now"]


def test_another_training_file_is_said_as_its_path_not_as_an_edit_of_the_old_one():
    """The content is recorded by file name: the old file's fingerprint is not the new file's, which says nothing
    of the old file (it was never edited); the same path's content that changed is an edit."""
    old, new = "278827 bytes, sha256 aaaaaaaaaaaa", "40000 bytes, sha256 bbbbbbbbbbbb"
    then = {"train_file": "/d/wiki2k.txt", TRAIN_FILE_CONTENT: {"wiki2k.txt": old}}
    assert setting_differences(then, {"train_file": "/d/wiki400.txt", TRAIN_FILE_CONTENT: {"wiki400.txt": new}}) \
        == ["train_file: '/d/wiki2k.txt' then, '/d/wiki400.txt' now"]
    # another folder's file of the same name: another file, not an edit
    assert setting_differences(then, {"train_file": "/e/wiki2k.txt", TRAIN_FILE_CONTENT: {"wiki2k.txt": new}}) \
        == ["train_file: '/d/wiki2k.txt' then, '/e/wiki2k.txt' now"]
    assert setting_differences(then, {"train_file": "/d/wiki2k.txt", TRAIN_FILE_CONTENT: {"wiki2k.txt": new}}) \
        == ["wiki2k.txt was edited (278827 bytes then, 40000 bytes now)"]
    files = {"train_files": ["/d/a.txt", "/d/b.txt"], TRAIN_FILE_CONTENT: {"a.txt": old, "b.txt": old}}
    assert setting_differences(files, {"train_files": ["/d/a.txt", "/d/c.txt"],
                                       TRAIN_FILE_CONTENT: {"a.txt": new, "c.txt": new}}) \
        == ["train_files: ['/d/a.txt', '/d/b.txt'] then, ['/d/a.txt', '/d/c.txt'] now",
            "a.txt was edited (278827 bytes then, 40000 bytes now)"]



def test_a_dataset_folder_s_files_are_compared_by_their_path_in_it():
    """A dataset_name folder's files are recorded as "<folder>/<path>" (no train_file's name holds a "/"): an edit,
    a file added or removed is said; a record written before them (no such key) resumes; another folder is said as
    its name, not as its files' edits."""
    old, new = "278827 bytes, sha256 aaaaaaaaaaaa", "40000 bytes, sha256 bbbbbbbbbbbb"
    then = {"dataset_name": "/d/wiki", TRAIN_FILE_CONTENT: {"wiki/train.txt": old, "wiki/data/train-1.txt": old}}
    assert setting_differences(then, then) == []
    assert setting_differences(then, {**then, TRAIN_FILE_CONTENT: {"wiki/train.txt": new,
                                                                   "wiki/data/train-1.txt": old}}) \
        == ["wiki/train.txt was edited (278827 bytes then, 40000 bytes now)"]
    added = {**then[TRAIN_FILE_CONTENT], "wiki/train-2.txt": new}
    assert setting_differences(then, {**then, TRAIN_FILE_CONTENT: added}) \
        == ["wiki/train-2.txt: no file then, a file now"]
    assert setting_differences(then, {**then, TRAIN_FILE_CONTENT: {"wiki/train.txt": old}}) \
        == ["wiki/data/train-1.txt: a file then, no file now"]
    earlier = {"dataset_name": "/d/wiki", "train_files": ["/d/a.txt"], TRAIN_FILE_CONTENT: {"a.txt": old}}
    assert setting_differences(earlier, {**earlier, TRAIN_FILE_CONTENT: {"a.txt": old, "wiki/train.txt": new}}) == []
    assert setting_differences({"dataset_name": "/d/wiki"}, then) == []
    assert setting_differences(then, {"dataset_name": "/d/books", TRAIN_FILE_CONTENT: {"books/train.txt": new}}) \
        == ["dataset_name: '/d/wiki' then, '/d/books' now"]


def test_a_dataset_folder_s_content_is_the_files_datasets_reads(tmp_path):
    """A folder of train files: the files of the train split; a folder datasets reads by its own rules (one
    save_to_disk wrote): every file in it but hidden ones. A Hub id: nothing."""
    from hf_cse.data_sources import folder_content

    folder = tmp_path / "wiki"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train-00000.txt").write_text("one\n")
    (folder / "test.txt").write_text("two\n")
    assert list(folder_content(str(folder))) == ["wiki/data/train-00000.txt"]
    saved = tmp_path / "saved"
    Dataset.from_dict({"text": ["a", "b"]}).save_to_disk(str(saved))
    (saved / ".cache").mkdir()
    (saved / ".cache" / "x").write_text("x")
    content = folder_content(str(saved))
    assert "saved/state.json" in content and any(k.endswith(".arrow") for k in content)
    assert not any("/." in k for k in content)
    assert folder_content("some-org/some-data") == {}


def test_lora_alpha_spelled_out_as_its_default_is_the_same_run():
    """lora_alpha not set builds the adapters with 2 * lora_r: giving that value on resume changed nothing, yet the
    run was refused as one with other settings; another alpha, or the rank, still counts."""
    then = {"lora_r": 8, "lora_alpha": None, "seed": 0}
    assert setting_differences(then, {**then, "lora_alpha": 16}) == []
    assert setting_differences(then, {**then, "lora_alpha": 32}) == ["lora_alpha: 16 then, 32 now"]
    assert setting_differences(then, {**then, "lora_r": 4}) == ["lora_alpha: 16 then, 8 now", "lora_r: 8 then, 4 now"]
    assert setting_differences({"lora_r": 0, "lora_alpha": None}, {"lora_r": 0, "lora_alpha": None}) == []

def test_fused_adamw_is_the_same_optimizer_to_a_resumed_run():
    """optim's default follows the torch version (fused AdamW from torch 2.8): the same update and state."""
    from transformers.training_args import OptimizerNames

    from hf_cse.run_settings import optimizer_kind

    assert optimizer_kind(OptimizerNames.ADAMW_TORCH_FUSED) == optimizer_kind("adamw_torch") == "adamw_torch"
    assert optimizer_kind("adafactor") == "adafactor"


@pytest.mark.slow
def test_a_checkpoint_named_by_its_path_is_refused_with_settings_that_shape_its_weights(tiny_bert_dir, sentences,
                                                                                        tmp_path):
    """A LoRA checkpoint named by its path, resumed without LoRA or with another rank: "going on with these", then
    every encoder weight missing and unexpected, then torch's optimizer traceback (resume_from_checkpoint=True and the
    command line refused it already). Now one line, before any weight is loaded."""
    out = tmp_path / "out"
    _trainer(tiny_bert_dir, sentences, tmp_path, out, model_kwargs={"lora_r": 4}, max_steps=2).train()
    checkpoint = out / "checkpoint-2"
    before = _snapshot(out)
    for lora in ({}, {"lora_r": 8}):
        trainer = _trainer(tiny_bert_dir, sentences, tmp_path, out, model_kwargs=lora, max_steps=4)
        weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        with pytest.raises(OutputFolderError, match=r"lora_r: 4 then, (0|8) now.* cannot change when resuming: the "
                                                    r"checkpoint's weights would not load") as refused:
            trainer.train(resume_from_checkpoint=str(checkpoint))
        assert "\n" not in str(refused.value) and trainer.state.global_step == 0
        for name, weight in trainer.model.state_dict().items():
            torch.testing.assert_close(weight, weights[name], rtol=0, atol=0, msg=name)
    assert _snapshot(out) == before
