"""The no-duplicates batch sampler: no text twice in a global batch, on one process and on two (gloo)."""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import datasets
import pytest
import torch
from dist_helpers import _env, _free_port
from helpers import collator, hang_timeout, tiny_args
from transformers import AutoTokenizer

from hf_cse.data import DataError, tokenize_dataset, tokenize_pair_dataset
from hf_cse.errors import CSEError
from hf_cse.models import SimCSEModel
from hf_cse.sampler import EpochPlan, NoDuplicatesBatchSampler, check_distinct_texts, normalise_text, row_keys, text_key
from hf_cse.trainer import ContrastiveTrainer

WORKER = (Path(__file__).parents[1] / "sampler_worker.py")


def duplicated_texts(n: int, distinct: int, seed: int = 0) -> list[str]:
    """``n`` rows drawn from ``distinct`` texts, a third of the copies in another case / spacing (the same text
    after normalisation), a few texts far more frequent than the others (Zipf-like)."""
    rng = random.Random(seed)
    base = [f"sentence number {i} about the river" for i in range(distinct)]
    weights = [1.0 / (i + 1) for i in range(distinct)]
    out = []
    for text in rng.choices(base, weights, k=n):
        variant = rng.randrange(3)
        out.append(text.upper() if variant == 1 else text.replace(" ", "  ") + " " if variant == 2 else text)
    return out


def assert_no_duplicates(global_batches, keys_of) -> None:
    for batch in global_batches:
        keys = [k for i in batch for k in keys_of(i)]
        assert len(keys) == len(set(keys)), Counter(keys).most_common(2)


def test_normalisation_is_nfkc_casefold_and_white_space():
    assert normalise_text("  The\tCAT  sat.\n") == "the cat sat."
    assert text_key("ﬁne Straße") == text_key("fine STRASSE")  # NFKC ligature, case folding (ß -> ss)
    assert text_key("the cat") != text_key("the cats")


@pytest.mark.parametrize("world_size", [1, 2])
def test_heavily_duplicated_corpus_gives_batches_without_duplicates(world_size):
    texts = duplicated_texts(600, 60)
    keys = [text_key(t) for t in texts]
    sampler = NoDuplicatesBatchSampler(keys, batch_size=8, world_size=world_size, seed=3)
    chunks = list(sampler)
    assert len(chunks) == len(sampler) and len(chunks) % world_size == 0
    assert all(len(c) == 8 for c in chunks)
    global_batches = [sum(chunks[g:g + world_size], []) for g in range(0, len(chunks), world_size)]
    assert_no_duplicates(global_batches, lambda i: [keys[i]])
    used = [i for c in chunks for i in c]
    assert len(used) == len(set(used))  # every row at most once per epoch
    plan = sampler.plan()
    assert plan.dropped == len(texts) - len(used) and plan.deferred > 0
    # a plain random order would have put copies together: the sampler did work here
    shuffled = random.Random(0).sample(range(len(texts)), len(texts))
    size = 8 * world_size
    assert any(len({keys[i] for i in shuffled[g:g + size]}) < size for g in range(0, len(shuffled) - size + 1, size))


def test_rows_are_dropped_only_where_a_text_outnumbers_the_batches():
    """600 rows of which 300 are one text: at most one copy per batch, so most copies of it are left out; every
    other row finds a batch (deferred, not dropped) up to the last incomplete batch."""
    texts = ["the same line"] * 300 + [f"line {i}" for i in range(300)]
    sampler = NoDuplicatesBatchSampler([text_key(t) for t in texts], batch_size=10, seed=0)
    chunks = list(sampler)
    used = [texts[i] for c in chunks for i in c]
    assert used.count("the same line") == len(chunks)  # one copy in every batch
    assert len(chunks) == 300 // 9  # each batch: the frequent text + 9 others
    assert sampler.plan().dropped == 600 - 10 * len(chunks)


def test_plan_is_deterministic_per_seed_and_epoch():
    keys = [text_key(t) for t in duplicated_texts(200, 30)]
    a, b = (NoDuplicatesBatchSampler(keys, 4, seed=1) for _ in range(2))
    assert list(a) == list(b)
    b.set_epoch(1)
    assert list(a) != list(b)
    c = NoDuplicatesBatchSampler(keys, 4, seed=1)
    c.set_epoch(1)
    assert list(c) == list(b)
    assert list(NoDuplicatesBatchSampler(keys, 4, seed=2)) != list(a)



def test_every_epoch_has_epoch_0s_number_of_batches():
    """36 rows of 4 texts in batches of 2: the greedy plan gave 18, 17 and 18 batches to epochs 0-2, and under
    gradient accumulation the Trainer (which sizes every epoch by epoch 0) merged the last batch of epoch 1 into the
    first step of epoch 2 and ended short of max_steps. Rows of 3 views of which one clashes with both others gave some
    epochs no batch at all."""
    keys = [0, 3, 0, 1, 3, 2, 0, 0, 3, 0, 2, 2, 1, 3, 0, 1, 0, 3, 0, 3, 2, 3, 3, 0, 3, 0, 1, 3, 1, 1, 2, 3, 2, 3, 1, 2]
    views = [(1, 2, 99), (3, 4, 98), (1, 3, 5)]
    for rows, size in ((keys, 2), (views, 2), ([text_key(t) for t in duplicated_texts(300, 12)], 4)):
        sampler = NoDuplicatesBatchSampler(rows, batch_size=size, seed=0)
        first = len(sampler)
        for epoch in range(8):
            sampler.set_epoch(epoch)
            chunks = list(sampler)
            assert len(chunks) == len(sampler) == first > 0, epoch
            assert_no_duplicates(chunks, lambda i: sampler._row(i))
            used = [i for c in chunks for i in c]
            assert len(used) == len(set(used)) and sampler.plan().dropped == len(rows) - len(used)
        resumed = NoDuplicatesBatchSampler(rows, batch_size=size, seed=0)  # a run resumed in epoch 7
        resumed.set_epoch(7)
        assert len(resumed) == first and list(resumed) == chunks


def test_an_epoch_that_cannot_reach_epoch_0s_length_is_refused_in_one_line(monkeypatch):
    sampler = NoDuplicatesBatchSampler(list(range(40)), batch_size=4, seed=0)
    assert len(sampler) == 10
    make_plan = sampler._make_plan
    monkeypatch.setattr(sampler, "_make_plan", lambda epoch, attempt: (
        make_plan(epoch, attempt) if epoch == 0 else EpochPlan(make_plan(epoch, attempt).batches[:9], 0, 4, 0.0)))
    sampler.set_epoch(1)
    with pytest.raises(CSEError) as refused:
        list(sampler)
    assert str(refused.value) == (
        "no_duplicates_in_batch: epoch 1 fits only 9 of epoch 0's 10 global batches of 4 without a repeated text (17 "
        "shuffles tried): the data repeats its texts too often for batches of this size. Deduplicate it, use a smaller "
        "per_device_train_batch_size, or allow repeats (no_duplicates_in_batch false).")


def test_pair_rows_keep_every_view_unique(tiny_bert_dir):
    """NLI-like triplets: a premise with several hypotheses, hypotheses that recur as other rows' anchors."""
    rng = random.Random(0)
    premises = [f"premise {i}" for i in range(20)]
    rows = [(p, f"hypothesis {rng.randrange(30)}", f"contradiction {rng.randrange(30)}")
            for p in premises for _ in range(4)]
    rows += [(f"hypothesis {i}", f"premise {i % 20}", f"contradiction {i}") for i in range(30)]
    ds = datasets.Dataset.from_dict({"text": [r[0] for r in rows], "positive": [r[1] for r in rows],
                                     "negative": [r[2] for r in rows]})
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    tokenized = tokenize_pair_dataset(ds, tok, keep_text=True)
    keys, source = row_keys(tokenized)
    assert source == "normalised text" and len(keys[0]) == 3
    sampler = NoDuplicatesBatchSampler(keys, batch_size=4, world_size=2, seed=0)
    chunks = list(sampler)
    assert chunks
    assert_no_duplicates([chunks[g] + chunks[g + 1] for g in range(0, len(chunks), 2)], lambda i: keys[i])
    # without the text columns, rows are compared by their token ids
    assert row_keys(tokenize_pair_dataset(ds, tok))[1] == "token ids"


def _trainer(tiny_bert_dir, tmp_path, texts, **kwargs):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    ds = tokenize_dataset(datasets.Dataset.from_dict({"text": texts}), tok, keep_text=True)
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    args = tiny_args(tmp_path / "out", per_device_train_batch_size=4, **kwargs.pop("args", {}))
    return ContrastiveTrainer(model=model, args=args, train_dataset=ds, data_collator=collator(tok),
                              processing_class=tok, **kwargs), ds, tok


def test_trainer_loader_uses_it_by_default_and_the_flag_turns_it_off(tiny_bert_dir, tmp_path):
    texts = duplicated_texts(80, 8)
    trainer, ds, tok = _trainer(tiny_bert_dir, tmp_path, texts)
    loader = trainer.get_train_dataloader()
    assert isinstance(trainer._batch_sampler, NoDuplicatesBatchSampler)
    seen = 0
    for batch in loader:
        ids = batch["input_ids"][:, 0]
        rows = {tuple(r[r != tok.pad_token_id].tolist()) for r in ids}
        assert len(rows) == ids.shape[0]  # no two identical inputs in a batch
        seen += 1
    assert seen == len(loader) > 0
    # the texts were read for the keys: hf_cse's collator is handed token rows only; a collator of one's own all
    assert trainer._batch_sampler._row(0)[0] == text_key(texts[0]) and "text" in ds.column_names
    fetched = []
    plain = trainer.data_collator
    trainer.data_collator = lambda features: fetched.append(set(features[0])) or plain(features)
    next(iter(trainer.get_train_dataloader()))
    assert "text" in fetched[-1]
    trainer.data_collator = plain
    assert trainer.get_train_dataloader().dataset.column_names == ["input_ids", "token_type_ids", "attention_mask"]
    off, *_ = _trainer(tiny_bert_dir, tmp_path, texts, no_duplicates_in_batch=False)
    off.get_train_dataloader()
    assert off._batch_sampler is None


@pytest.mark.slow
def test_resumed_run_sees_the_batches_of_the_uninterrupted_one(tiny_bert_dir, tmp_path):
    """Resumed inside the second epoch: the Trainer skips the batches already trained and the next ones are
    those the uninterrupted run trained on (the plan is fixed by seed and epoch)."""
    texts = duplicated_texts(40, 20)
    common = {"max_steps": 14, "save_strategy": "steps", "save_steps": 11}
    batches: dict[str, list] = {"full": [], "resumed": []}

    def run(name, folder, resume=None):
        trainer, _, tok = _trainer(tiny_bert_dir, folder, texts, args=common)
        plain = trainer.data_collator

        def recording(features):
            batches[name].append(sorted(tuple(f["input_ids"]) for f in features))
            return plain(features)

        trainer.data_collator = recording
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    full = run("full", tmp_path / "a")
    epoch_at = {h["step"]: h["epoch"] for h in full.state.log_history if "loss" in h}
    assert 1 < epoch_at[11] < epoch_at[14] < 2  # the checkpoint is inside the second epoch
    run("resumed", tmp_path / "a", resume=str(tmp_path / "a" / "out" / "checkpoint-11"))
    # (the loader collates one batch ahead: both runs also recorded the batch after step 14)
    assert len(batches["resumed"]) == 4 and batches["resumed"] == batches["full"][11:15]


@pytest.mark.slow
def test_two_processes_never_share_a_text_in_a_global_batch(tiny_bert_dir, tmp_path):
    """torchrun, 2 gloo processes: each dumps the texts of its batches; batch k of rank 0 and of rank 1 together
    (the global batch) hold no text twice, and the ranks use disjoint rows."""
    texts = duplicated_texts(300, 40)
    corpus = tmp_path / "texts.json"
    corpus.write_text(json.dumps(texts))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), str(WORKER), str(tiny_bert_dir), str(corpus), str(tmp_path)]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=hang_timeout(240), cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) > 0
    for b0, b1 in zip(*ranks, strict=True):
        assert len(b0) == len(b1) == 4
        keys = [normalise_text(text) for _, text in b0 + b1]
        assert len(keys) == len(set(keys)), keys
    rows = [[row for b in batches for row, _ in b] for batches in ranks]
    assert len(set(rows[0] + rows[1])) == len(rows[0]) + len(rows[1])  # no row twice, within or across ranks


def test_too_few_distinct_texts_for_one_batch_is_one_line(tiny_bert_dir, tmp_path):
    trainer, *_ = _trainer(tiny_bert_dir, tmp_path, ["one line", "One  line", "another line"] * 10)
    with pytest.raises(DataError, match=r"no global batch of 4 rows without a repeated text can be made from the 30 "
                                         r"training rows \(2 distinct texts; the most frequent \('one line'\) is in "
                                         r"20 rows\).*no_duplicates_in_batch=False") as err:
        trainer.get_train_dataloader()
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_no_batch_refused_at_train_leaves_no_output_folder(tiny_bert_dir, tmp_path):
    """Refused at train() before anything is written: the output folder the trainer made is removed again (it was
    left behind, empty)."""
    trainer, *_ = _trainer(tiny_bert_dir, tmp_path, ["one line", "One  line", "another line"] * 10)
    assert (tmp_path / "out").is_dir()
    with pytest.raises(DataError, match="no global batch of 4 rows"):
        trainer.train()
    assert not (tmp_path / "out").exists()


def test_distinct_texts_are_counted_across_chunks_until_there_are_enough():
    """The check before tokenizing reads a few rows at a time and stops at a global batch's worth of distinct
    texts: distinct texts found late (after chunks of copies) pass; too few in all rows are refused with the count
    over every row, views of pair rows included."""
    late = datasets.Dataset.from_dict({"text": ["the same line"] * 9 + ["cat", "dog", "river"]})
    check_distinct_texts(late, 4, "late.txt", chunk_rows=4)
    with pytest.raises(DataError, match=r"^late.txt has 4 distinct text\(s\) in 12 rows: no global batch of 5 rows"):
        check_distinct_texts(late, 5, "late.txt", chunk_rows=4)
    pairs = datasets.Dataset.from_dict({"text": ["a", "d", "e"], "positive": ["b", "c", "b"]})
    check_distinct_texts(pairs, 2, "pairs.csv", chunk_rows=1)  # counted over both views, and a batch can be made
    with pytest.raises(DataError, match="has 5 distinct"):
        check_distinct_texts(pairs, 6, "pairs.csv", chunk_rows=2)
    # enough distinct texts, but every row holds "a": the first epoch's plan (the trainer's check) finds no batch;
    # it was found only once the model was loaded and the trainer built
    anchored = datasets.Dataset.from_dict({"text": ["a"] * 20, "positive": [f"p{i}" for i in range(20)]})
    with pytest.raises(DataError) as err:
        check_distinct_texts(anchored, 4, "pairs.csv")
    assert str(err.value) == ("pairs.csv: no global batch of 4 rows without a repeated text can be made from its 20 "
                              "rows, whose views share their texts too often (a batch holds each text once). Use more "
                              "varied data, a smaller per_device_train_batch_size, or allow repeats "
                              "(no_duplicates_in_batch false).")


def test_one_distinct_text_is_refused_even_with_repeats_allowed_and_few_are_said(caplog):
    """Repeats allowed (no_duplicates_in_batch off), one distinct text trained silently: every in-batch negative was
    the positive's own text. Fewer distinct texts than a global batch: one warning (none where the caller says it)."""
    same = datasets.Dataset.from_dict({"text": ["the cat sat on the mat."] * 40})
    for allowed in (False, True):
        with pytest.raises(DataError, match=r"^same.txt holds one distinct text in its 40 rows: every in-batch "
                                            r"negative would be the positive's own text"):
            check_distinct_texts(same, 8, "same.txt", repeats_allowed=allowed)
    few = datasets.Dataset.from_dict({"text": ["cat", "dog", "river"] * 10})
    with caplog.at_level(logging.WARNING, logger="hf_cse.sampler"):
        check_distinct_texts(few, 8, "few.txt", repeats_allowed=True, warn_if_few=False)
        assert caplog.records == []
        check_distinct_texts(few, 8, "few.txt", repeats_allowed=True)
    assert [r.getMessage() for r in caplog.records] == [
        "few.txt has 3 distinct texts in 30 rows, fewer than one global batch of 8: every batch holds copies of a "
        "text, each the others' in-batch negative. Use more varied data or a smaller per_device_train_batch_size."]
    check_distinct_texts(few, 3, "few.txt", repeats_allowed=True)  # a batch's worth: nothing to say


@pytest.mark.slow  # builds a trainer
def test_the_trainer_refuses_one_distinct_text_with_repeats_allowed(tiny_bert_dir, tmp_path):
    with pytest.raises(DataError, match="^the training set holds one distinct text in its 40 rows"):
        _trainer(tiny_bert_dir, tmp_path, ["the cat sat on the mat."] * 40, no_duplicates_in_batch=False)


def test_rows_left_out_for_their_copies_are_told_once(tiny_bert_dir, tmp_path, caplog):
    """A corpus of repeated lines: most copies find no batch of their own and are not trained on; one warning says
    how many, and how often the most frequent text occurs. A few copies that fit the batches say nothing."""
    heavy = ["the same line"] * 60 + [f"line {i}" for i in range(20)]
    trainer, *_ = _trainer(tiny_bert_dir, tmp_path, heavy)
    with caplog.at_level(logging.WARNING, logger="hf_cse.trainer"):
        trainer.get_train_dataloader()
    dropped = trainer._batch_sampler.plan().dropped
    assert dropped > 40
    assert (f"no-duplicates batches: {dropped} of the 80 training rows are left out of each epoch" in caplog.text
            and "the most frequent 60 times ('the same line')" in caplog.text
            and "no_duplicates_in_batch=False" in caplog.text)
    caplog.clear()
    light, *_ = _trainer(tiny_bert_dir, tmp_path, duplicated_texts(80, 40))
    with caplog.at_level(logging.WARNING, logger="hf_cse.trainer"):
        light.get_train_dataloader()
    assert "left out" not in caplog.text


def test_the_distinct_text_check_leaves_out_rows_that_tokenizing_drops(tmp_path):
    """6 sentences and 10 rows of zero-width spaces were refused as "7 distinct text(s) in 16 rows ... or allow
    repeats"; with repeats allowed the run failed next on its 6 sentences, too few for a batch of 8."""
    from helpers import random_sentences
    from tiny_models import tiny_tokenizer

    tokenizer = tiny_tokenizer(tmp_path)
    rows = datasets.Dataset.from_dict({"text": random_sentences(6) + ["\u200b"] * 10})
    for repeats_allowed in (False, True):
        with pytest.raises(DataError, match=r"without its 10 rows that tokenize to special tokens only \(dropped when "
                                            r"tokenized\) has 6 sentences, fewer than one global batch of 8"):
            check_distinct_texts(rows, 8, "train.txt", repeats_allowed=repeats_allowed, tokenizer=tokenizer)
    with pytest.raises(DataError, match=r"has 5 distinct text\(s\) in 6 rows: no global batch of 6 rows"):
        check_distinct_texts(datasets.Dataset.from_dict({"text": random_sentences(5) * 2 + ["\u200b"] * 4})
                             .select(range(4, 14)), 6, "train.txt", tokenizer=tokenizer)
    check_distinct_texts(rows, 6, "train.txt", tokenizer=tokenizer)  # 6 sentences left: a batch of 6
    check_distinct_texts(rows, 6, "train.txt", tokenizer=tokenizer, prompt="say: ")  # the prompt's words: all kept
