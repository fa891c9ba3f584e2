"""The order of a stream's batches (shuffled through a buffer, each pass its own order; under several processes and
loader workers the same), and the repeats of a mixture of sources by weight."""

from __future__ import annotations

import json
import logging
from functools import partial
from itertools import islice
from types import SimpleNamespace

import datasets
import pytest
from helpers import random_sentences, tiny_args
from transformers import AutoTokenizer

from hf_cse.errors import CSEError
from hf_cse.models import SimCSEModel
from hf_cse.output_folder import OutputFolderError
from hf_cse.run_files import RUN_SETTINGS_FILE
from hf_cse.run_settings import run_settings, settings_changed_since
from hf_cse.stream_order import DEFAULT_STREAM_SHUFFLE_BUFFER, source_reads
from hf_cse.streaming import load_training_text
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.training_args import ContrastiveTrainingArguments


def _trainer(tiny_bert_dir, tmp_path, rows, args=None, stream=None, **keywords):
    """A ContrastiveTrainer (batches of 4) handed ``rows`` as a stream (``stream``: that one), ``args`` overriding
    its training arguments."""
    stream = datasets.IterableDataset.from_generator(partial(_rows, rows)) if stream is None else stream
    return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), train_dataset=stream,
                              processing_class=AutoTokenizer.from_pretrained(tiny_bert_dir),
                              args=tiny_args(tmp_path / "out", **{"per_device_train_batch_size": 4, "seed": 3,
                                                                  **(args or {})}), **keywords)


def _rows(rows):
    yield from ({"text": text} for text in rows)


def _passes(trainer, rows, count):
    """The first ``count`` passes of the trainer's training loader (``len(rows) // 4`` batches each), each a list of
    batches of texts."""
    tok, per_pass = trainer.processing_class, len(rows) // 4
    batches = islice(trainer.get_train_dataloader(), count * per_pass)
    texts = [[tok.decode(ids, skip_special_tokens=True) for ids in batch["input_ids"][:, 0]] for batch in batches]
    return [texts[i:i + per_pass] for i in range(0, len(texts), per_pass)]


def test_a_stream_is_shuffled_each_pass_in_an_order_of_its_own(tiny_bert_dir, tmp_path):
    """A stream trained in file order, the same batches every pass, the same rows after the last whole batch left
    out of every pass (data held in memory is shuffled again each epoch)."""
    rows = random_sentences(14)  # 3 batches of 4 a pass, 2 rows left out
    trainer = _trainer(tiny_bert_dir, tmp_path, rows)
    assert trainer.stream_shuffle_buffer == DEFAULT_STREAM_SHUFFLE_BUFFER
    passes = _passes(trainer, rows, 4)
    for batches in passes:
        trained = [text for batch in batches for text in batch]
        assert len(trained) == 12 and len(set(trained)) == 12 and set(trained) <= set(rows)
    assert len({tuple(map(tuple, batches)) for batches in passes}) == 4  # each pass its own batches
    left_out = {frozenset(set(rows) - {t for b in batches for t in b}) for batches in passes}
    assert len(left_out) > 1  # not the same rows left out of every pass
    assert _passes(_trainer(tiny_bert_dir, tmp_path, rows), rows, 4) == passes  # seeded: read again, the same
    in_file_order = _passes(_trainer(tiny_bert_dir, tmp_path, rows, stream_shuffle_buffer=0), rows, 2)
    assert in_file_order == 2 * [[rows[0:4], rows[4:8], rows[8:12]]]


def test_two_processes_read_the_shuffled_stream_alike(tiny_bert_dir, tmp_path):
    """Each process that reads the stream itself (Accelerate without dispatching) shuffles it alike and keeps its
    own batches of it: together they train on the batches one process reads, no row twice in a pass."""
    from accelerate.data_loader import prepare_data_loader

    rows = random_sentences(16)
    one = [batch for batches in _passes(_trainer(tiny_bert_dir, tmp_path, rows), rows, 2) for batch in batches]
    assert all(len({t for batch in one[i:i + 4] for t in batch}) == 16 for i in (0, 4))
    shares = []
    for process in (0, 1):  # each process's loader, as that process of 2 gets it
        trainer = _trainer(tiny_bert_dir, tmp_path, rows)
        trainer.accelerator.prepare = partial(prepare_data_loader, num_processes=2, process_index=process,
                                              put_on_device=False, dispatch_batches=False)
        shares.append([batch for batches in _passes(trainer, rows, 1) for batch in batches])
    assert [batch for pair in zip(*shares, strict=True) for batch in pair] == one


def test_the_shuffle_buffer_is_checked_and_recorded(tiny_bert_dir, tmp_path):
    """A negative buffer is refused in one line; a stream's run records its buffer (a resumed run compares it), a
    run on data held in memory none."""
    rows = random_sentences(8)
    with pytest.raises(CSEError, match=r"^stream_shuffle_buffer must be a whole number of rows >= 0 \(0: no "
                                       r"shuffle, file order\), got -1\.$"):
        _trainer(tiny_bert_dir, tmp_path, rows, stream_shuffle_buffer=-1)
    with pytest.raises(CSEError, match=r"^stream_shuffle_buffer must be a whole number of rows >= 0 .* got -1\.$"):
        ContrastiveTrainingArguments(str(tmp_path / "out"), stream_shuffle_buffer=-1)  # before any data is read
    assert run_settings(_trainer(tiny_bert_dir, tmp_path, rows, stream_shuffle_buffer=50))["stream_shuffle_buffer"] \
        == 50
    whole = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=tiny_args(tmp_path / "out"),
                               processing_class=AutoTokenizer.from_pretrained(tiny_bert_dir),
                               train_dataset=datasets.Dataset.from_dict({"text": rows}))
    assert run_settings(whole)["stream_shuffle_buffer"] is None


@pytest.mark.slow
def test_loader_workers_read_a_shuffled_stream_the_same_each_time(tiny_bert_dir, tmp_path):
    """Read by two loader workers (one holds the stream's only shard; datasets seeds a worker's shuffle from the
    stream's seed and the worker's number), each pass has its own order, whole batches of distinct rows, and reading
    again with as many workers gives the same batches (what a resumed run's skip relies on)."""
    rows = random_sentences(16)

    def read():
        trainer = _trainer(tiny_bert_dir, tmp_path, rows)
        trainer.args.dataloader_num_workers = 2
        return _passes(trainer, rows, 3)

    passes = read()
    assert all(len({t for batch in batches for t in batch}) == 16 for batches in passes)
    assert len({tuple(map(tuple, batches)) for batches in passes}) == 3
    assert read() == passes


def test_the_loader_workers_are_recorded_where_they_order_the_stream(tiny_bert_dir, tmp_path):
    """A stream's run records its loader workers (a resumed run compares them): datasets shifts each worker's shuffle
    seed by its number and gives each worker shards of its own, which the trainer's tokenized stream hides; in file
    order too. A run on data held in memory does not (its sampler orders it in the training process)."""
    rows = random_sentences(8)
    workers = {"dataloader_num_workers": 2}
    assert run_settings(_trainer(tiny_bert_dir, tmp_path, rows, workers))["dataloader_num_workers"] == 2
    shards = datasets.Dataset.from_dict({"text": rows}).to_iterable_dataset(num_shards=2)
    in_file_order = _trainer(tiny_bert_dir, tmp_path, rows, workers, stream=shards, stream_shuffle_buffer=0)
    assert run_settings(in_file_order)["dataloader_num_workers"] == 2
    whole = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)),
                               args=tiny_args(tmp_path / "out", **workers),
                               processing_class=AutoTokenizer.from_pretrained(tiny_bert_dir),
                               train_dataset=datasets.Dataset.from_dict({"text": rows}))
    assert "dataloader_num_workers" not in run_settings(whole)


@pytest.mark.slow
def test_a_shuffled_stream_resumed_with_other_loader_workers_is_refused(tiny_bert_dir, tmp_path):
    """Other workers read a shuffled stream in other batches: its run resumed with another worker count is refused
    in one line naming it and the ways on, before any step; a checkpoint saved before the count was recorded
    resumes as it did."""
    rows = random_sentences(16)
    save = {"max_steps": 2, "save_strategy": "steps", "save_steps": 2, "lr_scheduler_type": "constant"}
    _trainer(tiny_bert_dir, tmp_path, rows, save).train()
    checkpoint = tmp_path / "out" / "checkpoint-2"
    resumed = _trainer(tiny_bert_dir, tmp_path, rows, {**save, "max_steps": 4, "dataloader_num_workers": 1})
    with pytest.raises(OutputFolderError, match=r"other settings \(dataloader_num_workers: 0 then, 1 now\): resume "
                                                r"it with its run's settings, .* or start a new run") as refused:
        resumed.train(resume_from_checkpoint=True)
    assert "\n" not in str(refused.value) and resumed.state.global_step == 0
    same = _trainer(tiny_bert_dir, tmp_path, rows, {**save, "max_steps": 4})
    assert settings_changed_since(checkpoint, same) == []
    saved = json.loads((checkpoint / RUN_SETTINGS_FILE).read_text())
    del saved["dataloader_num_workers"]
    (checkpoint / RUN_SETTINGS_FILE).write_text(json.dumps(saved))
    assert settings_changed_since(checkpoint, resumed) == []


def _write(path, count: int, word: str):
    path.write_text("".join(f"{word} sentence {i}\n" for i in range(count)))
    return str(path)


def _mixed(files, weights, streaming=False):
    args = SimpleNamespace(streaming=streaming, train_files=files, train_weights=weights)
    data = SimpleNamespace(train_file=None, dataset_name=None, dataset_config_name=None, text_column=None)
    return load_training_text(args, data, seed=0)


def test_a_mixture_that_reads_a_source_again_says_how_often(tmp_path, caplog):
    """0.95 / 0.05 on two files of 40 lines: one "epoch" of about 800 rows, each line of the first read about 19
    times, said nowhere (the docs spoke of the smaller sources read again)."""
    a, b = _write(tmp_path / "a.txt", 40, "alpha"), _write(tmp_path / "b.txt", 40, "beta")
    assert source_reads([40, 40], [0.95, 0.05]) == pytest.approx([19, 1])
    assert source_reads([100, 300], [1, 1]) == pytest.approx([3, 1])
    with caplog.at_level(logging.WARNING, logger="hf_cse.streaming"):
        mixed = _mixed([a, b], [0.95, 0.05])
    said = [r.getMessage() for r in caplog.records if "train_weights" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0] and "--" not in said[0]
    alpha = sum(text.startswith("alpha") for text in mixed["text"])
    assert alpha > 10 * 40  # read over and over in one pass
    assert said[0].startswith("train_weights: the mixture ends once every source has been read once, so a source of "
                              "more weight per row is read again meanwhile, about (w_i/size_i)/(w_min/size_min) "
                              "times: a.txt about 19 times (40 rows, weight 0.95), b.txt once (40 rows, weight 0.05); "
                              f"{len(mixed):,} rows in one pass (epoch) from the sources' 80.")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_cse.streaming"):
        proportional = _mixed([a, _write(tmp_path / "c.txt", 120, "gamma")], [1, 3])
        _mixed([a, b], [0.95, 0.05], streaming=True)  # sizes unknown up front: nothing to say
    assert len(proportional) >= 160 and "train_weights" not in caplog.text  # each source read about once


@pytest.mark.slow  # two steps trained
def test_the_readmes_python_way_to_stream_and_mix_files_trains(tiny_bert_dir, tmp_path):
    """README's Python API names load_training_text, with the command's argument classes, for what hf-cse-train
    reads of training files (a stream, files mixed by weight): its data set trains as the trainer's train_dataset."""
    from hf_cse.cli.arguments import DataArguments, StreamingArguments
    from hf_cse.streaming import check_streaming_arguments

    files = [_write(tmp_path / "a.txt", 40, "alpha"), _write(tmp_path / "b.txt", 40, "beta")]
    stream_args, data_args = StreamingArguments(streaming=True, train_files=files, train_weights=[0.7, 0.3]), \
        DataArguments()
    check_streaming_arguments(stream_args, data_args, max_steps=2, method="simcse")
    train = load_training_text(stream_args, data_args, seed=0)
    assert {row["text"].split()[0] for row in islice(train, 40)} == {"alpha", "beta"}
    trainer = _trainer(tiny_bert_dir, tmp_path, [], args={"max_steps": 2}, stream=train)
    assert trainer.train().global_step == 2
