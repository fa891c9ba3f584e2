"""Streamed training text (--streaming), several sources mixed by weight, resume of a streamed run, bad input."""

from __future__ import annotations

import json
import logging
import shutil
from functools import partial
from itertools import islice
from types import SimpleNamespace

import pytest
import torch
from helpers import collator, hub_style_folder, random_sentences, tiny_args
from transformers import AutoTokenizer

from hf_cse.cli import train as train_cli
from hf_cse.cli.arguments import StreamingArguments
from hf_cse.data import DataError
from hf_cse.models import SimCSEModel
from hf_cse.streaming import load_training_text, tokenize_stream
from hf_cse.trainer import ContrastiveTrainer


def _data_args(**kwargs):
    base = dict(train_file=None, dataset_name=None, dataset_config_name=None, text_column=None, pair_column=None,
                negative_column=None)
    return SimpleNamespace(**{**base, **kwargs})


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_sources_mix_by_weight_streamed_and_in_memory(tmp_path):
    a = _write(tmp_path / "a.txt", [f"alpha {i}" for i in range(300)])
    b = _write(tmp_path / "b.txt", [f"beta {i}" for i in range(300)] + ["", "   "])
    for streaming in (True, False):
        args = StreamingArguments(streaming=streaming, train_files=[str(a), str(b)], train_weights=[3.0, 1.0])
        ds = load_training_text(args, _data_args(), seed=0)
        first = [row["text"] for _, row in zip(range(200), ds)]
        share = sum(t.startswith("alpha") for t in first) / len(first)
        assert 0.65 < share < 0.85, share  # 0.75 expected
        assert all(t.strip() == t and t for t in first)
    assert type(ds).__name__ == "Dataset"  # without --streaming: in memory


def _write_pairs(path, rows):
    header = (" anchor", "pos ", "neg")[:len(rows[0])]  # a row of fewer fields than its header is refused
    path.write_text("".join("\t".join(row) + "\n" for row in [header, *rows]))
    return path


def test_a_stream_of_pairs_is_collated_as_pairs_by_the_trainer(tiny_bert_dir, tmp_path):
    """Streamed pair rows, tokenized by tokenize_pair_dataset, keep known columns, so the trainer reads every view
    (a stream mapped without declared columns was taken for sentences, and refused at its first batch)."""
    from hf_cse.data import PairCollator, tokenize_pair_dataset
    from hf_cse.streaming import load_pair_stream

    texts = random_sentences(48)
    rows = [(f" {texts[i]} ", texts[i + 1], texts[i + 2]) for i in range(0, 48, 3)]
    path = _write_pairs(tmp_path / "t.tsv", rows)
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    stream = load_pair_stream(_data_args(train_file=str(path), text_column="anchor", pair_column="pos",
                                         negative_column="neg"))
    assert list(next(iter(stream)).values()) == [texts[0], texts[1], texts[2]]  # column names and cells stripped
    tokenized = tokenize_pair_dataset(stream, tok)
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir), loss="infonce"),
                                 args=tiny_args(tmp_path / "out", max_steps=1), train_dataset=tokenized,
                                 processing_class=tok)
    assert isinstance(getattr(trainer.data_collator, "collator", trainer.data_collator), PairCollator)
    batch = trainer.data_collator(list(tokenized.take(2)))
    assert batch["input_ids"].shape[:2] == (2, 3)
    assert [tok.decode(ids, skip_special_tokens=True) for ids in batch["input_ids"][1]] == list(texts[3:6])


def test_pairs_stream_from_a_data_set_by_name(tmp_path):
    """dataset_name (a Hub id; here a local data set folder, read by the same datasets call) streams its rows."""
    from hf_cse.streaming import load_pair_stream

    texts = random_sentences(8)
    (tmp_path / "pairs").mkdir()
    _write_pairs(tmp_path / "pairs" / "train.tsv", [(texts[i], texts[i + 1], texts[i]) for i in range(0, 8, 2)])
    args = _data_args(dataset_name=str(tmp_path / "pairs"), text_column=" anchor", pair_column="pos ")
    assert [tuple(row.values()) for row in load_pair_stream(args)] == [(texts[i], texts[i + 1]) for i in range(0, 8, 2)]
    with pytest.raises(DataError, match=r"data set .*pairs: no column 'sent1' for pair_column"):
        load_pair_stream(_data_args(dataset_name=str(tmp_path / "pairs"), text_column=" anchor", pair_column="sent1"))


def test_a_streamed_pair_row_with_an_empty_cell_is_refused_by_its_number(tmp_path):
    """The first rows are checked up front, as a file read whole is; a row further on when the stream reaches it."""
    from hf_cse.streaming import HEAD_ROWS, load_pair_stream

    texts = random_sentences(2 * HEAD_ROWS)
    rows = [(texts[i], texts[-1 - i]) for i in range(len(texts))]
    args = _data_args(train_file=str(tmp_path / "t.tsv"), text_column="anchor", pair_column="pos")
    _write_pairs(tmp_path / "t.tsv", [*rows[:3], (texts[0], " "), *rows[3:]])
    with pytest.raises(DataError, match=r"1 row\(s\) with an empty 'pos' cell \(pair_column\), data rows 4\."):
        load_pair_stream(args)
    late = HEAD_ROWS + 20
    _write_pairs(tmp_path / "t.tsv", [*rows[:late - 1], (texts[0], ""), *rows[late:]])
    stream = load_pair_stream(args)
    with pytest.raises(DataError, match=rf"t\.tsv: data row {late} has an empty 'pos' cell \(pair_column\), found as "
                                        rf"the stream was read \(its first {HEAD_ROWS} rows are checked up front\)"):
        list(stream)


@pytest.mark.slow
def test_a_streamed_run_trains_max_steps(tiny_bert_dir, tmp_path):
    corpus = _write(tmp_path / "c.txt", random_sentences(64))
    out = tmp_path / "out"
    train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--train_files", str(corpus), "--streaming",
                    "--max_steps", "3", "--per_device_train_batch_size", "4", "--output_dir", str(out), "--use_cpu",
                    "--logging_steps", "1", "--disable_tqdm", "true"])
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    info = json.loads((out / "training_info.json").read_text())
    assert info["data"]["source"] == "c.txt (weight 1)"
    assert info["data"]["streamed"] and "num_sentences" not in info["data"]  # unknown for a stream
    # the no-duplicates sampler never sees a stream: the record and the card say it was not applied (not the default)
    assert info["training_args"]["no_duplicates_in_batch"] is False
    assert "| `no_duplicates_in_batch` | false |" in (out / "sentence-transformers" / "README.md").read_text()
    assert info["training_args"]["stream_shuffle_buffer"] == 10_000


def test_the_record_names_a_stream_shuffle_buffer_only_for_a_stream():
    """Every run on data held in memory recorded and carded the arguments' default buffer, as if it shuffled a
    stream."""
    from hf_cse.trainer_options import TrainingOptions

    options = TrainingOptions(stream_shuffle_buffer=50)
    fields = {"stream_shuffle_buffer": 50, "no_duplicates_in_batch": True}
    assert options.recorded({"training_args": dict(fields)}, streamed=True)["training_args"] == {
        "stream_shuffle_buffer": 50, "no_duplicates_in_batch": False}
    assert options.recorded({"training_args": dict(fields)})["training_args"] == {"no_duplicates_in_batch": True}


@pytest.mark.slow
def test_a_shuffle_of_ones_own_resumed_from_a_later_pass_is_the_same_training_set(tiny_bert_dir, tmp_path):
    """The review's case: with stream_shuffle_buffer=0 the trainer sets each pass's epoch on the user's own seeded
    shuffle, whose first rows then change; described at the first checkpoint (pass 2), the stream was refused as
    another training set by the resume, which described pass 0. It is described once, when the trainer is built."""
    import datasets

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    rows = random_sentences(16, seed=3)

    def trainer():
        stream = datasets.Dataset.from_dict({"text": rows}).to_iterable_dataset(num_shards=2)
        torch.manual_seed(0)
        return ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), processing_class=tok,
                                  args=tiny_args(tmp_path / "out", max_steps=8, save_strategy="steps", save_steps=5),
                                  train_dataset=tokenize_stream(stream, tok).shuffle(seed=7, buffer_size=8),
                                  stream_shuffle_buffer=0)

    trainer().train()
    shutil.rmtree(tmp_path / "out" / "checkpoint-8")  # stopped after checkpoint-5, in the stream's third pass
    resumed = trainer()
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 8


@pytest.mark.slow
def test_resumed_streamed_run_continues_with_the_next_batches(tiny_bert_dir, tmp_path):
    """The Trainer re-reads the stream and drops the batches already trained: the resumed run then trains on the
    batches the uninterrupted run trained on after the checkpoint."""
    a = _write(tmp_path / "a.txt", random_sentences(40, seed=1))
    b = _write(tmp_path / "b.txt", random_sentences(40, seed=2))
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    batches: dict[str, list] = {"full": [], "resumed": []}

    def run(name, resume=None):
        stream = load_training_text(StreamingArguments(True, [str(a), str(b)], [0.5, 0.5]), _data_args(), seed=0)
        plain = collator(tok)

        def recording(features):
            batches[name].append([tuple(f["input_ids"]) for f in features])
            return plain(features)

        torch.manual_seed(0)
        trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)),
                                     args=tiny_args(tmp_path / "out", per_device_train_batch_size=4, max_steps=6,
                                                    save_strategy="steps", save_steps=3),
                                     train_dataset=tokenize_stream(stream, tok), data_collator=recording)
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    run("full")
    resumed = run("resumed", resume=str(tmp_path / "out" / "checkpoint-3"))
    assert resumed.state.global_step == 6
    after = batches["full"][3:6]
    assert len(after) == 3 and len(set(map(tuple, after))) == 3
    start = batches["resumed"].index(after[0])
    assert batches["resumed"][start:start + 3] == after


@pytest.mark.slow
def test_a_resumed_streamed_run_masks_its_batches_as_the_uninterrupted_one(tiny_mlm_dir, tmp_path):
    """The masked-LM collator draws its masks as the loader fetches a batch: the resumed loader re-reads (and masks)
    the stream's trained batches to drop them, which must change neither the later batches' masks nor the training
    process's random state (hf_cse.collator_rng)."""
    a = _write(tmp_path / "a.txt", random_sentences(40, seed=1))
    b = _write(tmp_path / "b.txt", random_sentences(40, seed=2))
    tok = AutoTokenizer.from_pretrained(tiny_mlm_dir)

    def run(out, resume=None):
        stream = load_training_text(StreamingArguments(True, [str(a), str(b)], [0.5, 0.5]), _data_args(), seed=0)
        torch.manual_seed(0)
        trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_mlm_dir), do_mlm=True),
                                     args=tiny_args(tmp_path / out, per_device_train_batch_size=4, max_steps=6,
                                                    save_strategy="steps", save_steps=3, learning_rate=1e-2),
                                     train_dataset=tokenize_stream(stream, tok), processing_class=tok)
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    full = run("full")
    run("cut")
    resumed = run("cut", resume=str(tmp_path / "cut" / "checkpoint-3"))
    losses = lambda t: [(h["step"], h["loss"]) for h in t.state.log_history if "loss" in h][-3:]  # noqa: E731
    assert losses(resumed) == losses(full)
    for (key, x), y in zip(full.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(x, y), key


@pytest.mark.slow
@pytest.mark.parametrize(("batch", "accumulation", "max_steps", "checkpoint"), [(8, 1, 12, 8), (8, 2, 6, 3)],
                         ids=["second_pass", "accumulated_across_passes"])
def test_a_run_resumed_in_a_later_pass_of_the_stream_ends_as_the_uninterrupted_one(tiny_bert_dir, tmp_path, batch,
                                                                                   accumulation, max_steps,
                                                                                   checkpoint):
    """40 lines in batches of 8: 5 batches a pass. transformers takes a stream's epoch for max_steps steps long, so a
    run resumed past the first pass skipped more batches than a pass holds, ran it dry and began the next pass from
    its start (other batches than the uninterrupted run's). With 2 batches a step, a step straddles two passes."""
    corpus = _write(tmp_path / "c.txt", random_sentences(40, seed=3))
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    batches: dict[str, list] = {"full": [], "cut": []}

    def run(out, resume=None):
        stream = load_training_text(StreamingArguments(True, [str(corpus)], None), _data_args(), seed=0)
        plain = collator(tok)

        def recording(features):
            batches["full" if out == "full" else "cut"].append([tuple(f["input_ids"]) for f in features])
            return plain(features)

        torch.manual_seed(0)
        trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)),
                                     args=tiny_args(tmp_path / out, per_device_train_batch_size=batch,
                                                    gradient_accumulation_steps=accumulation, max_steps=max_steps,
                                                    save_strategy="steps", save_steps=checkpoint,
                                                    learning_rate=1e-2),
                                     train_dataset=tokenize_stream(stream, tok), data_collator=recording)
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    full = run("full")
    passes = [batches["full"][i:i + 5] for i in range(0, 10, 5)]
    # every pass reads the shuffled stream in an order of its own: the resumed run's skip reads those orders again
    assert passes[0] != passes[1] and sorted(map(sorted, passes[0])) != sorted(map(sorted, passes[1]))
    run("cut")
    batches["cut"].clear()
    resumed = run("cut", resume=str(tmp_path / "cut" / f"checkpoint-{checkpoint}"))
    assert resumed.state.global_step == max_steps
    trained = checkpoint * accumulation
    assert batches["cut"][trained:trained + 2] == batches["full"][trained:trained + 2]  # after the skipped ones
    losses = lambda t: [(h["step"], h["loss"]) for h in t.state.log_history if "loss" in h]  # noqa: E731
    assert len(losses(resumed)) == max_steps and losses(resumed) == losses(full)
    for (key, x), y in zip(full.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(x, y), key


@pytest.fixture
def no_model_load(monkeypatch):
    monkeypatch.setattr(SimCSEModel, "from_encoder", classmethod(lambda *a, **k: pytest.fail("model loaded")))


@pytest.mark.parametrize(("files", "extra", "message"), [
    (["empty"], ["--streaming", "--max_steps", "2"], r"empty\.txt is empty \(or starts with blank lines only\)"),
    (["a", "b"], ["--train_weights", "0.7"], r"train_weights has 1 weight\(s\) for 2 train_files"),
    (["a", "b"], ["--train_weights", "0.7", "-1"], r"train_weights must be finite numbers > 0"),
    (["a"], ["--streaming"], r"streaming=True reads a data set of unknown length: give max_steps"),
    (["a"], ["--streaming", "--max_steps", "2", "--method", "diffcse"], r"does not work with method='diffcse'"),
], ids=["empty_stream", "weights_count", "negative_weight", "no_max_steps", "diffcse"])
def test_bad_streaming_input_is_one_line_before_any_model(tiny_bert_dir, tmp_path, no_model_load, files, extra,
                                                          message):
    paths = {"a": _write(tmp_path / "a.txt", ["one line", "two lines"]),
             "b": _write(tmp_path / "b.txt", ["three", "four"]), "empty": _write(tmp_path / "empty.txt", ["", " "])}
    with pytest.raises(DataError, match=message) as err:
        train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(tmp_path / "out"),
                        "--use_cpu", "--train_files", *[str(paths[f]) for f in files], *extra])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("lines", "extra", "message"), [
    (10, ["--max_train_samples", "0"], r"--max_train_samples must be at least 1, got 0\."),
    (10, ["--max_train_samples", "3"], r"a\.txt cut to max_train_samples 3 has 3 sentences, fewer than one global "
                                       r"batch of 4"),
    (3, [], r"a\.txt has 3 sentences, fewer than one global batch of 4"),
], ids=["no_samples", "cut_below_a_batch", "shorter_than_a_batch"])
def test_a_stream_of_less_than_one_batch_is_one_line_before_any_model(tiny_bert_dir, tmp_path, no_model_load, lines,
                                                                      extra, message):
    """A stream's length is unknown, so these trained on batches smaller than asked for (a batch of 1 failed in the
    loss, advising a larger batch), or failed inside datasets (max_train_samples 0 or less)."""
    path = _write(tmp_path / "a.txt", random_sentences(lines))
    with pytest.raises(ValueError, match=message) as err:
        train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--output_dir", str(tmp_path / "out"),
                                   "--use_cpu", "--train_file", str(path), "--streaming", "--max_steps", "2",
                                   "--per_device_train_batch_size", "4", *extra])
    assert "\n" not in str(err.value)


BAD_FILES = {"empty": (b"", "is empty"), "binary": (b"a\x00b\n", "binary file"),
             "latin-1": ("caf\xe9\n".encode("latin-1"), "not valid UTF-8"), "gzip": (b"\x1f\x8b\x08\x00", "gzip")}


@pytest.mark.parametrize("kind", BAD_FILES)
def test_files_read_lazily_are_checked_like_a_train_file(kind, tmp_path):
    """Mixed files and a streamed file are read by datasets as the run goes: their start is checked up front, in
    one line naming the file, instead of a traceback from inside datasets."""
    from hf_cse.streaming import check_streaming_arguments

    good, bad = tmp_path / "good.txt", tmp_path / f"{kind}.txt"
    good.write_text("\n".join(random_sentences(8)) + "\n")
    data, words = BAD_FILES[kind]
    bad.write_bytes(data)
    mixed = SimpleNamespace(streaming=False, train_files=[str(good), str(bad)], train_weights=None)
    streamed = SimpleNamespace(streaming=True, train_files=None, train_weights=None)
    no_file = SimpleNamespace(train_file=None, dataset_name=None, pair_column=None, text_column=None)
    with pytest.raises(DataError, match=f"train_files {bad}.*{words}"):
        check_streaming_arguments(mixed, no_file, 4, "simcse")
    with pytest.raises(DataError, match=f"train_file {bad}.*{words}"):
        check_streaming_arguments(streamed, SimpleNamespace(**{**vars(no_file), "train_file": str(bad)}), 4, "simcse")


TABLES = {
    # a .tsv is split on tabs only: quote characters are text, never a quoted field swallowing lines
    "quotes.tsv": ('id\ttext\n1\t"so" he said\n2\tplain words\n3\tshe said "no"\n',
                   ['"so" he said', "plain words", 'she said "no"']),
    # a header with spaces after its commas names its columns without them; cells are the text they are
    "spaced.csv": ("id, text\n1,NA\n2,None\n3,plain words\n4,\n", ["NA", "None", "plain words"]),
}


@pytest.mark.parametrize("name", TABLES)
def test_a_table_is_read_alike_whole_mixed_and_streamed(name, tmp_path):
    """Every reader of a .csv/.tsv train file reads the same sentences: the checks (read_sentences), the in-memory
    data set, a train_files source and a stream (datasets' CSV reader, set up as hf_cse.files.table_records reads)."""
    from hf_cse.data import load_train_dataset, read_sentences

    content, expected = TABLES[name]
    path = tmp_path / name
    path.write_text(content)
    assert read_sentences(path) == expected
    assert load_train_dataset(str(path))["text"] == expected
    for streaming in (False, True):
        args = StreamingArguments(streaming=streaming, train_files=None, train_weights=None)
        assert [row["text"] for row in load_training_text(args, _data_args(train_file=str(path)), 0)] == expected
        mixed = StreamingArguments(streaming=streaming, train_files=[str(path)], train_weights=None)
        assert [row["text"] for row in load_training_text(mixed, _data_args(), 0)] == expected


def test_a_byte_order_mark_is_no_part_of_the_first_sentence_whole_or_streamed(tmp_path):
    """A .txt saved with a UTF-8 byte-order mark (Windows editors) trains on the same first sentence read whole,
    mixed or streamed: the mark is not text."""
    from hf_cse.data import load_train_dataset

    path = tmp_path / "bom.txt"
    path.write_bytes("\ufefffirst sentence here\nsecond one\n".encode())
    expected = ["first sentence here", "second one"]
    assert load_train_dataset(str(path))["text"] == expected
    for streaming in (False, True):
        args = StreamingArguments(streaming=streaming, train_files=None, train_weights=None)
        assert [row["text"] for row in load_training_text(args, _data_args(train_file=str(path)), 0)] == expected


@pytest.mark.parametrize("streaming", [False, True])
def test_a_stream_or_mix_checks_its_csv_column_like_a_train_file(streaming, tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,sentence\n" + "".join(f"{i},{s}\n" for i, s in enumerate(random_sentences(6))))
    args = StreamingArguments(streaming=streaming, train_files=[str(path)], train_weights=None)
    with pytest.raises(DataError, match=r"no column 'text'; columns are \['id', 'sentence'\]\. Pass text_column"):
        load_training_text(args, _data_args(), 0)
    numbers = tmp_path / "n.csv"
    numbers.write_text("id,text\n" + "".join(f"{i},{i * 3}\n" for i in range(6)))
    args = StreamingArguments(streaming=streaming, train_files=[str(numbers)], train_weights=None)
    with pytest.raises(DataError, match="column 'text' holds (only )?numbers, not sentences"):
        load_training_text(args, _data_args(), 0)


@pytest.mark.slow  # 10,001 rows through datasets' CSV reader (~1 s)
def test_a_text_column_starting_with_a_chunk_of_numbers_is_read_as_text(tmp_path):
    """pandas guesses a type per chunk of 10,000 rows: numbers, then words, failed deep in datasets."""
    from hf_cse.data import load_train_dataset

    path = tmp_path / "t.csv"
    path.write_text("text\n" + "".join(f"{i}\n" for i in range(10_001)) + "a real sentence\n")
    assert load_train_dataset(str(path))["text"][-2:] == ["10000", "a real sentence"]


@pytest.mark.parametrize("where", ["missing", "folder"])
def test_a_streamed_train_file_that_is_no_file_is_one_line(where, tmp_path):
    from hf_cse.streaming import check_streaming_arguments

    path = tmp_path / "nosuch.txt" if where == "missing" else tmp_path
    streamed = SimpleNamespace(streaming=True, train_files=None, train_weights=None)
    data = SimpleNamespace(train_file=str(path), dataset_name=None, pair_column=None, text_column=None)
    said = ("does not exist \\(or is not a file\\)" if where == "missing"
            else "is a folder, not a file: pass the folder as")
    with pytest.raises(DataError, match=f"train_file {path} {said}"):
        check_streaming_arguments(streamed, data, 4, "simcse")


@pytest.mark.parametrize("streamed_as", ["train_file", "train_files"])
def test_a_streamed_json_record_without_the_text_field_is_one_line(streamed_as, tmp_path):
    """Read whole, such a record is refused with its line; a stream read it as null and dropped it without a word."""
    from hf_cse.streaming import check_streaming_arguments

    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "a sentence"}\n{"txt": "a typo in the field"}\n{"text": "another"}\n')
    files = [str(path), str(path)] if streamed_as == "train_files" else None
    streamed = SimpleNamespace(streaming=True, train_files=files, train_weights=None)
    data = SimpleNamespace(train_file=None if files else str(path), dataset_name=None, pair_column=None,
                           text_column=None)
    with pytest.raises(DataError, match=r"s\.jsonl: line 2 has no field 'text'; its fields are \['txt'\]"):
        check_streaming_arguments(streamed, data, 4, "simcse")
    data.text_column = "txt"  # the other records lack it then
    with pytest.raises(DataError, match=r"line 1 has no field 'txt'"):
        check_streaming_arguments(streamed, data, 4, "simcse")


def _past_the_head(path, bad: bytes, row=lambda s: s, kib: int = 80):
    """``path`` holding ``kib`` KiB of good lines (``row`` of a sentence), then the line ``bad``, then more good
    lines: its head (the first 64 KiB, checked up front) reads. Returns the bad line's number."""
    good = [row(s).encode() + b"\n" for s in random_sentences(3000, seed=4)]
    cut = next(i for i in range(len(good)) if sum(map(len, good[:i])) > kib << 10)
    path.write_bytes(b"".join(good[:cut]) + bad + b"\n" + b"".join(good[cut:cut + 50]))
    return cut + 1


STREAM_BREAKS = {  # file, bad line, what the refusal says (after "line N is" where the line is known)
    "latin1.txt": (b"caf\xe9 au lait", r"not valid UTF-8 \(invalid continuation byte\), met mid-stream \(only the "
                   r"first 64 KiB are checked up front\)\. Convert the file \(e\.g\. iconv -f latin1 -t utf-8 "
                   r"latin1\.txt > fixed\.txt\) or fix the line \(sed -n '{line}p' latin1\.txt shows it\)\.$"),
    "broken.jsonl": (b'{"text": "an unclosed string}', r"not valid JSON \(Unterminated string starting at\), met "
                     r"mid-stream .*Fix or delete the line \(sed -n '{line}p' broken\.jsonl shows it\)\.$"),
    "latin1.jsonl": (b'{"text": "caf\xe9"}', r"not valid UTF-8 \(invalid continuation byte\), met mid-stream"),
    "ragged.tsv": (b"7\tone field\ttoo many", r"line {line} has 3 fields, the header has 2\. A \.tsv is split on every "
                   r"tab \(no quoting\): fix the row\.$"),
    # datasets' CSV reader filled the missing cell with "": the row passed as a blank one
    "short.csv": (b"a sentence without its id", r"line {line} has 1 fields, the header has 2\. Quote fields that hold "
                  r"the delimiter, or fix the row\.$"),
    # the rest of the file was read as one cell, without a word
    "unclosed.csv": (b'1,"an unclosed quote', r"line {line} opens a quoted field that is never closed, so every line "
                     r"after it would be one cell\."),
    # valid JSON but no record: a traceback from pyarrow ("Column() changed from object to string in row 0")
    "list.jsonl": (b"[1, 2, 3]", r"a JSON list, not an object with a 'text' field, met mid-stream \(only the "
                   r"first 64 KiB are checked up front\)\. Fix or delete the line \(sed -n '{line}p' list\.jsonl "
                   r"shows it\)\.$"),
    "string.jsonl": (b'"just a string"', r"a JSON string, not an object with a 'text' field, met mid-stream"),
    # "'int' object has no attribute 'strip'" mid-run, or (in a later chunk of datasets' reader) trained on as "5"
    "number.jsonl": (b'{"text": 5}', r"line {line}: field 'text' holds int 5, not a sentence \(a string\), met "
                     r"mid-stream .*The field 'text' must hold sentences \(text\): fix or delete the line, or pass "
                     r"text_column NAME of the field that holds them \(sed -n '{line}p' number\.jsonl shows it\)\.$"),
    "list_text.jsonl": (b'{"text": ["a", "list"]}', r"line {line}: field 'text' holds list \['a', 'list'\], not a "
                        r"sentence"),
}


def test_a_streamed_csv_cell_past_the_csv_modules_limit_is_read(tmp_path):
    """A cell over 131,072 characters (the csv module's default limit) failed mid-run with a traceback."""
    from hf_cse.streaming import load_training_text

    path = tmp_path / "long.csv"
    path.write_text("text\n" + "".join(s + "\n" for s in random_sentences(20)) + "word " * 30_000 + "\nlast one\n")
    args = StreamingArguments(streaming=True, train_files=None, train_weights=None)
    read = [row["text"] for row in load_training_text(args, _data_args(train_file=str(path)), 0)]
    assert len(read) == 22 and len(max(read, key=len)) == len("word " * 30_000) - 1


@pytest.mark.parametrize("name", STREAM_BREAKS)
def test_a_stream_that_breaks_past_its_head_fails_in_one_line_naming_the_line(name, tmp_path, monkeypatch):
    """Only a stream's first 64 KiB are checked before training; a line after them that is no UTF-8 or no JSON, or
    a row pandas cannot split, failed inside datasets, mid-run, with a traceback naming neither file nor line."""
    from hf_cse import streaming
    from hf_cse.streaming import check_streaming_arguments

    monkeypatch.setattr(streaming, "STREAM_CHUNK", 16 << 10)  # datasets reads 10 MiB at a time: the break mid-stream
    bad, message = STREAM_BREAKS[name]
    path = tmp_path / name
    header = {".tsv": b"id\ttext\n", ".csv": b"id,text\n"}.get(path.suffix, b"")
    row = {".jsonl": lambda s: json.dumps({"text": s}), ".tsv": lambda s: f"1\t{s}",
           ".csv": lambda s: f"1,{s}"}.get(path.suffix, lambda s: s)
    line = _past_the_head(path, bad, row) + bool(header)
    path.write_bytes(header + path.read_bytes())  # the header, then the rows
    args = StreamingArguments(streaming=True, train_files=None, train_weights=None)
    data = _data_args(train_file=str(path))
    check_streaming_arguments(args, data, 4, "simcse")  # the head reads
    read = []
    with pytest.raises(DataError, match=rf"{name}: (line {line} is )?{message.format(line=line)}") as err:
        read.extend(row["text"] for row in load_training_text(args, data, 0))
    assert "\n" not in str(err.value)
    assert read  # the rows before it were trained on


@pytest.mark.parametrize("chunk", [16 << 10, 10 << 20])
def test_a_streamed_json_text_that_is_no_string_is_refused_by_its_line_in_any_chunk(chunk, tmp_path, monkeypatch):
    """datasets' JSON reader passed a number in the text field on where its chunk held the start of the file (the
    run died mid-way: 'int' object has no attribute 'strip'), and in a later chunk read it as the text "5"."""
    from hf_cse import streaming

    monkeypatch.setattr(streaming, "STREAM_CHUNK", chunk)
    path = tmp_path / "n.jsonl"
    line = _past_the_head(path, b'{"text": 5}', lambda s: json.dumps({"text": s}))
    args = StreamingArguments(streaming=True, train_files=None, train_weights=None)
    read = []
    with pytest.raises(DataError, match=rf"n\.jsonl: line {line}: field 'text' holds int 5, not a sentence"):
        read.extend(row["text"] for row in load_training_text(args, _data_args(train_file=str(path)), 0))
    assert "5" not in read and len(read) >= line - 1000  # read up to it (the map takes 1,000 rows at a time)


@pytest.mark.parametrize(("name", "empty", "row"), [
    ("null.jsonl", b'{"text": null}', lambda s: json.dumps({"text": s})),
    ("other.jsonl", b'{"other": "x"}', lambda s: json.dumps({"text": s})),
    ("blank.jsonl", b'{"text": "   "}', lambda s: json.dumps({"text": s})),
    ("empty_cell.tsv", b"7\t", lambda s: f"1\t{s}"),
])
def test_a_streamed_empty_row_is_left_out_and_said_once(name, empty, row, tmp_path, caplog):
    """Read whole, a file's empty rows are counted in one line ("left out 1 of 1401 rows as empty"); streamed, they
    were dropped without a word. A stream cannot count ahead: the first one is said, once per source, naming the
    file; the text null stays a dropped row (not refused as a text of no string is)."""
    path = tmp_path / name
    _past_the_head(path, empty + b"\n" + empty, row, kib=8)  # two of them: said once
    if path.suffix == ".tsv":
        path.write_bytes(b"id\ttext\n" + path.read_bytes())
    args = StreamingArguments(streaming=True, train_files=[str(path), str(path)], train_weights=None)
    with caplog.at_level(logging.INFO, logger="hf_cse"):
        read = [r["text"] for r in load_training_text(args, _data_args(), 0)]
    said = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(said) == 2 and all(m.startswith(f"{path}: left out a row as empty") for m in said), said  # 1 a source
    good = random_sentences(3000, seed=4)[:path.read_text().count("\n") - 2 - bool(path.suffix == ".tsv")]
    assert set(read) == {s.strip() for s in good}  # all the others read (the two sources mixed, oversampled)


def test_a_streamed_data_set_whose_text_is_no_string_fails_in_one_line(tmp_path):
    """A data set's row whose text is a number, past the rows checked up front, failed mid-run with
    "'int' object has no attribute 'strip'"."""
    rows = [{"text": s} for s in random_sentences(300, seed=6)] + [{"text": 5}]
    folder = hub_style_folder(tmp_path / "my_dataset", {"train.jsonl": "".join(json.dumps(r) + "\n" for r in rows)})
    args = StreamingArguments(streaming=True, train_files=None, train_weights=None)
    with pytest.raises(DataError, match=rf"^data set {folder}: column 'text' holds int 5, not a sentence \(a "
                                        r"string\), met mid-stream .* The column must hold sentences \(text\)"):
        list(load_training_text(args, _data_args(dataset_name=str(folder)), 0))


def test_a_streamed_data_set_that_breaks_mid_stream_fails_in_one_line(tmp_path):
    """A data set (``dataset_name``: the Hub's, here a local folder laid out as one) is read as training goes: a row
    it cannot read failed inside datasets with a traceback; now one line names the data set and the rows read. A
    dropped connection (an ``OSError`` while reading) says to resume."""
    good = random_sentences(300, seed=5)
    folder = hub_style_folder(tmp_path / "my_dataset", {
        "train-00000.jsonl": "".join(json.dumps({"text": s}) + "\n" for s in good),
        "train-00001.jsonl": '{"text": "fine"}\n{"text": "an unclosed string}\n'})
    args = StreamingArguments(streaming=True, train_files=None, train_weights=None)
    read = []
    with pytest.raises(DataError, match=rf"^data set {folder}: reading it failed after \d+ rows, mid-stream "
                                        r"\(\w+: .*\)\. A broken row: train on a copy without it") as err:
        for row in load_training_text(args, _data_args(dataset_name=str(folder)), 0):
            read.append(row["text"])
    # the first file's rows were read (the stripping map takes 1,000 rows at a time: none reached the loop)
    assert "\n" not in str(err.value) and read == []
    assert err.value.args[0].startswith(f"data set {folder}: reading it failed after {len(good)} rows")
    from hf_cse import stream_rows

    def dropped(*args, **kwargs):
        yield {"text": "one sentence"}
        raise ConnectionResetError("Connection reset by peer")

    with pytest.raises(DataError, match=r"after 1 rows, mid-stream \(ConnectionResetError: Connection reset by peer\)"
                                        r".* a dropped connection: resume_from_checkpoint once it is back"):
        list(stream_rows._checked_rows(dropped(), partial(stream_rows.dataset_unreadable, "org/data")))


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_a_run_whose_stream_breaks_keeps_its_checkpoints(workers, tiny_bert_dir, tmp_path, monkeypatch, capsys):
    """The refusal ends the run as any error does: the checkpoints saved before the bad line stay, and the command
    prints one line. Read by DataLoader workers, the line came wrapped in torch's re-raise (the worker's traceback
    squeezed into it, cut short before the line number)."""
    from hf_cse import streaming

    monkeypatch.setattr(streaming, "STREAM_CHUNK", 4 << 10)
    path = tmp_path / "c.txt"
    # ~2,500 rows: the setup reads the first 1,000 (a batched map's first batch), the run the next in batches of 64
    line = _past_the_head(path, b"caf\xe9 au lait", kib=100)
    out = tmp_path / "out"
    code = train_cli.main(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(path), "--streaming",
                           "--max_steps", "100", "--per_device_train_batch_size", "64", "--save_strategy", "steps",
                           "--save_steps", "10", "--output_dir", str(out), "--use_cpu", "--disable_tqdm", "true",
                           "--dataloader_num_workers", str(workers),
                           "--stream_shuffle_buffer", "0"])  # in file order: a buffer reads the bad line up front
    assert code == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("hf-cse-train: error: ") and f"c.txt: line {line} is not valid UTF-8 (invalid " \
        "continuation byte), met mid-stream" in last and f"(sed -n '{line}p' c.txt shows it)." in last
    assert "Traceback" not in err and "Caught" not in last and "worker" not in last, last
    assert line > 2000 and (out / "checkpoint-10").is_dir() and (out / "checkpoint-20").is_dir()
    assert not (out / "checkpoint-100").exists()


@pytest.mark.slow
def test_a_stream_read_by_dataloader_workers_fails_from_python_with_its_own_line(tiny_bert_dir, tmp_path,
                                                                                 monkeypatch):
    """torch re-raises a worker's error as a new one of its type whose message is the worker's whole traceback; the
    trainer raises the refusal as the stream raised it (the worker's error is its cause)."""
    from hf_cse import streaming

    monkeypatch.setattr(streaming, "STREAM_CHUNK", 4 << 10)
    path = tmp_path / "c.txt"
    line = _past_the_head(path, b"caf\xe9 au lait")
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    stream = load_training_text(StreamingArguments(True, None, None), _data_args(train_file=str(path)), seed=0)
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)),
                                 args=tiny_args(tmp_path / "out", per_device_train_batch_size=64, max_steps=100,
                                                dataloader_num_workers=1),
                                 train_dataset=tokenize_stream(stream, tok), processing_class=tok)
    with pytest.raises(DataError) as refused:
        trainer.train()
    assert str(refused.value).startswith(f"{path}: line {line} is not valid UTF-8 (invalid continuation byte), met "
                                         "mid-stream (only the first 64 KiB are checked up front). Convert the file")
    assert "\n" not in str(refused.value)
    assert "Caught DataError in DataLoader worker process 0." in str(refused.value.__cause__)


def _trainer_on(model, rows, tmp_path, tok, read: list | None = None, **keywords):
    """A ContrastiveTrainer (batches of 8) handed ``rows`` as a stream made from a generator (columns unknown); each row
    the stream yields is added to ``read``."""
    import datasets

    read = [] if read is None else read

    def generate():
        for text in rows:
            read.append(text)
            yield {"text": text}

    return ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out"), processing_class=tok,
                              train_dataset=datasets.IterableDataset.from_generator(generate), **keywords)


@pytest.mark.parametrize("processes", [1, 2])
def test_each_pass_over_a_stream_has_whole_batches_only(processes, tiny_bert_dir, tmp_path):
    """20 rows in batches of 8: transformers gives the loader of a map-style set drop_last alone, so each pass over a
    stream ended in a batch of 4 (half the in-batch negatives), and under 2 processes Accelerate's
    IterableDatasetShard filled the last global batch up with rows of the first one (false negatives)."""
    from accelerate.data_loader import prepare_data_loader

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    rows = random_sentences(20)
    # in file order, to name the rows (shuffled: tests/data/test_stream_order.py)
    trainer = _trainer_on(SimCSEModel.from_encoder(str(tiny_bert_dir)), rows, tmp_path, tok, stream_shuffle_buffer=0)
    if processes == 2:  # the loader as process 1 of 2 gets it (each process reads the stream, keeps its share)
        trainer.accelerator.prepare = partial(prepare_data_loader, num_processes=2, process_index=1,
                                              put_on_device=False, dispatch_batches=False)
    # the loader reads pass after pass without end (StreamPasses): its first two passes
    batches = [batch["input_ids"][:, 0] for batch in islice(trainer.get_train_dataloader(), 2 * (3 - processes))]
    assert [len(batch) for batch in batches] == [8] * 2 * (3 - processes)
    firsts = [tok.decode(ids, skip_special_tokens=True) for batch in batches for ids in batch]
    # each pass's remainder is left out, nothing repeated within a pass
    assert firsts == 2 * (rows[:16] if processes == 1 else rows[8:16])


@pytest.mark.parametrize("rows", [0, 5])
def test_a_stream_of_less_than_one_global_batch_is_refused_as_a_data_set_is(rows, tiny_bert_dir, tmp_path):
    """It trained every step on the rows it had (5: batches of 5 instead of 8), or (0 rows) failed inside datasets
    with a bare StopIteration; refused when the trainer is built, in the words of the data set's refusal."""
    import datasets

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    texts = random_sentences(max(rows, 1))[:rows]
    with pytest.raises(DataError) as streamed:
        _trainer_on(SimCSEModel.from_encoder(str(tiny_bert_dir)), texts, tmp_path, tok)
    with pytest.raises(DataError) as whole:
        ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), processing_class=tok,
                           args=tiny_args(tmp_path / "out"), train_dataset=datasets.Dataset.from_dict({"text": texts}))
    assert str(streamed.value) == str(whole.value)
    assert ("is empty (no rows)" if rows == 0 else "has 5 rows, fewer than one global batch of 8") in str(whole.value)


def test_a_stream_of_one_text_is_refused_and_repeats_are_said(tiny_bert_dir, tmp_path, caplog):
    """40 copies of one line trained without a word when streamed (every negative the anchor's twin); the same file
    read whole is refused. Streams are not de-duplicated: repeats in the first global batch are said."""
    import logging

    from hf_cse.errors import CSEError

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    with pytest.raises(CSEError, match=r"^the training stream's first 8 rows are all one text"):
        _trainer_on(model, ["the same line"] * 40, tmp_path, tok)
    with caplog.at_level(logging.WARNING, logger="hf_cse.trainer_options"):
        _trainer_on(model, random_sentences(7) + random_sentences(7)[:1] + random_sentences(30), tmp_path, tok)
    assert "the training stream repeats texts (7 distinct in its first 8 rows)" in caplog.text


def test_settings_a_stream_cannot_honour_or_only_a_stream_reads_are_refused_from_python(tiny_bert_dir, tmp_path):
    """As the command line refuses them: the no-duplicates sampler asked for a stream (it trained without it, not a
    word), checkpoints or dev scores each epoch of a stream (one epoch however many passes: kept only at the end),
    and a stream shuffle buffer for data that is no stream (recorded as if it shuffled)."""
    import datasets

    from hf_cse.training_args import ContrastiveTrainingArguments

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    with pytest.raises(DataError, match="^no_duplicates_in_batch true needs the whole data set, which a stream never"):
        _trainer_on(model, random_sentences(40), tmp_path, tok, no_duplicates_in_batch=True)
    stream = datasets.Dataset.from_dict({"text": random_sentences(40)}).to_iterable_dataset()
    with pytest.raises(DataError, match="^save_strategy='epoch' would save a checkpoint only when the run ends"):
        ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out", save_strategy="epoch"), processing_class=tok,
                           train_dataset=stream)
    whole = datasets.Dataset.from_dict({"text": random_sentences(40)})
    asked = ContrastiveTrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none",
                                         per_device_train_batch_size=8, max_steps=2, stream_shuffle_buffer=5)
    for args, keywords in ((tiny_args(tmp_path / "out"), {"stream_shuffle_buffer": 5}), (asked, {})):
        with pytest.raises(DataError, match="^stream_shuffle_buffer shuffles a stream, and the training set is not"):
            ContrastiveTrainer(model=model, args=args, processing_class=tok, train_dataset=whole, **keywords)
    assert not (tmp_path / "out").exists()


def test_a_method_that_cannot_stream_is_refused_a_stream_before_it_is_read(tiny_bert_dir, tiny_mlm_dir, tmp_path):
    """DiffCSE's unigram generator counted the tokens of the whole stream when the trainer was built (a stream
    larger than memory never ended); refused as the command line refuses streaming=True, no row read."""
    from hf_cse.models import DiffCSEModel
    from hf_cse.streaming import check_streaming_arguments

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    read: list[str] = []
    why = ("no DiffCSE generator is supported on a stream; the default one, unigram replacements, counts the whole "
           "corpus")
    # a Python caller handed the trainer a stream, and set no streaming=True to drop; with a masked-LM generator too
    for generator in (None, "unigram", str(tiny_mlm_dir)):
        with pytest.raises(DataError) as refused:
            _trainer_on(DiffCSEModel.from_encoder(str(tiny_bert_dir), generator_name_or_path=generator),
                        random_sentences(64), tmp_path, tok, read)
        assert read == []
        assert str(refused.value) == (
            f"train_dataset is a stream (IterableDataset), which method='diffcse' does not train from ({why}): pass a "
            "datasets.Dataset, e.g. hf_cse.data.load_train_dataset(path) or datasets.Dataset.from_list(list(stream)).")
    with pytest.raises(DataError) as on_the_command_line:
        check_streaming_arguments(SimpleNamespace(streaming=True, train_files=None, train_weights=None),
                                  _data_args(), 2, "diffcse")
    assert str(on_the_command_line.value) == (
        f"streaming=True does not work with method='diffcse' ({why}); drop streaming=True.")


UNREADABLE = "\u2663\u2603 \u2606\u2665"  # [UNK] [UNK] to a BERT tokenizer: special tokens only


def test_a_stream_says_the_sentences_of_special_tokens_only_it_drops(tiny_bert_dir, tmp_path, caplog):
    """In memory such sentences are dropped with one warning (an example and the count); streamed, silently."""
    corpus = _write(tmp_path / "c.txt", [*random_sentences(12), UNREADABLE, *random_sentences(6, seed=4),
                                         UNREADABLE + " \u2606"])
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    stream = tokenize_stream(load_training_text(StreamingArguments(True, None, None),
                                                _data_args(train_file=str(corpus)), seed=0), tok)
    with caplog.at_level("WARNING", logger="hf_cse.streaming"):
        assert len(list(stream)) == 18 and len(list(stream)) == 18  # two passes
    said = [r.getMessage() for r in caplog.records if r.name == "hf_cse.streaming"]
    assert len(said) == 2, said  # once each, not once a pass
    assert said[0].startswith(f"dropping streamed training sentences that tokenize to special tokens only, e.g. "
                              f"{UNREADABLE!r}")
    assert said[1] == ("dropped 2 of 20 streamed training sentences that tokenize to special tokens only (in one pass "
                       "over the stream)")
    assert all("text" not in row for row in stream)


def test_a_stream_of_special_tokens_only_is_refused_by_its_cause(tiny_bert_dir, tmp_path):
    """It was refused as 'the training set is empty (no rows)', for a stream of 100 non-blank lines."""
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    rows = [f"{UNREADABLE} {chr(0x2600 + i)}" for i in range(100)]  # distinct: a stream of one text is refused so
    assert all(set(ids) <= set(tok.all_special_ids) for ids in tok(rows)["input_ids"])
    stream = load_training_text(StreamingArguments(True, None, None),
                                _data_args(train_file=str(_write(tmp_path / "c.txt", rows))), seed=0)
    with pytest.raises(DataError, match=rf"^all 100 streamed sentences tokenize to special tokens only \(e\.g\. "
                                        rf"{rows[0]!r}\): the tokenizer cannot read this text\. Check the text's "
                                        "encoding"):  # as the command line hands it over, tokenized
        ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=tiny_args(tmp_path / "out"),
                           train_dataset=tokenize_stream(stream, tok), processing_class=tok)


@pytest.mark.parametrize("odd, message", [
    # the 9th record of the list (it was said to be on "line 1", the list's line, wherever it stood)
    ({"text": 12345}, r"list\.json: record 9: field 'text' holds int 12345, not a sentence \(a string\)\.$"),
    ({"title": "no text"}, r"list\.json: record 9 has no field 'text'"),
])
def test_a_streamed_json_list_is_refused_as_the_whole_file_reader_refuses_it(odd, message, tmp_path):
    """A .json list is read whole by any reader; streamed, datasets' JSON reader made a text column holding one number
    into strings of JSON: every sentence trained on in literal quotes, and the number as a sentence, exit 0."""
    from hf_cse.data import load_train_dataset

    path = tmp_path / "list.json"
    rows = [{"text": s} for s in random_sentences(8)]
    args = StreamingArguments(streaming=True, train_files=None, train_weights=None)
    path.write_text(json.dumps(rows))
    assert [row["text"] for row in load_training_text(args, _data_args(train_file=str(path)), 0)] == \
        [row["text"] for row in rows]  # as they are: no quotes
    path.write_text(json.dumps([*rows, odd]))
    for read in (lambda: list(load_training_text(args, _data_args(train_file=str(path)), 0)),
                 lambda: load_train_dataset(str(path))):
        with pytest.raises(DataError, match=message):
            read()
