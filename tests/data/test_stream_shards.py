"""A stream of several shards wrapped by hf_cse (tokenized on the fly, read checked) is read whole by the DataLoader
worker that reads the wrapper (a stream of one shard, which datasets gives to one worker): every row once a pass.
Inside that worker the stream read only the shards of that worker's number: 16 rows in 2 shards, read with 2
workers, trained on 8 a pass."""

from __future__ import annotations

from collections import Counter

import datasets
import pytest
import torch
from helpers import collator, tiny_args
from transformers import AutoTokenizer

from hf_cse.models import SimCSEModel
from hf_cse.stream_rows import read_checked
from hf_cse.streaming import tokenize_stream
from hf_cse.trainer import ContrastiveTrainer


def _rows(shards):
    for shard in shards:
        for i in range(8):
            yield {"text": f"shard {shard} sentence {i}"}


def _two_shard_stream():
    stream = datasets.IterableDataset.from_generator(_rows, gen_kwargs={"shards": [0, 1]})
    assert stream.num_shards == 2
    return stream


def _read(stream, workers: int) -> list:
    loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=workers, collate_fn=lambda row: row)
    return list(loader)


@pytest.mark.slow  # DataLoader worker processes
@pytest.mark.parametrize("workers", [0, 2, 3])
def test_a_wrapped_stream_of_two_shards_is_read_whole_by_any_number_of_workers(workers, tiny_bert_dir):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    checked = read_checked(_two_shard_stream(), lambda read, err: None)
    assert Counter(row["text"] for row in _read(checked, workers)) == Counter(row["text"] for row in _rows([0, 1]))
    tokenized = tokenize_stream(_two_shard_stream(), tok)
    expected = Counter(tuple(tok(row["text"], truncation=True, max_length=32)["input_ids"]) for row in _rows([0, 1]))
    assert Counter(tuple(row["input_ids"]) for row in _read(tokenized, workers)) == expected


def test_a_wrapped_stream_keeps_the_order_of_its_rows_in_one_process(tiny_bert_dir):
    """Read in the training process (no workers), the rows come in the stream's own order, shard after shard."""
    rows = list(read_checked(_two_shard_stream(), lambda read, err: None))
    assert [row["text"] for row in rows] == [row["text"] for row in _rows([0, 1])]


@pytest.mark.slow  # two workers, a pass of training
def test_a_trainer_with_two_workers_trains_on_every_row_of_a_two_shard_stream(tiny_bert_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    trained: list[tuple] = []
    original = ContrastiveTrainer.compute_loss

    def recording(self, model, inputs, *args, **kwargs):  # in the training process: the collator runs in workers
        for ids, mask in zip(inputs["input_ids"], inputs["attention_mask"], strict=True):
            tokens = ids[mask.bool()].tolist()  # the row's views, each from [CLS] on
            starts = [i for i, t in enumerate(tokens) if t == tok.cls_token_id] + [len(tokens)]
            trained.extend(tuple(tokens[a:b]) for a, b in zip(starts, starts[1:]))
        return original(self, model, inputs, *args, **kwargs)

    torch.manual_seed(0)
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)),
                                 args=tiny_args(tmp_path / "out", per_device_train_batch_size=4, max_steps=4,
                                                dataloader_num_workers=2),
                                 train_dataset=_two_shard_stream(), data_collator=collator(tok), processing_class=tok)
    trainer.compute_loss = recording.__get__(trainer)
    trainer.train()
    expected = Counter(tuple(tok(row["text"], truncation=True, max_length=32)["input_ids"]) for row in _rows([0, 1]))
    assert Counter(trained) == {ids: 2 for ids in expected}  # 4 steps of 4 rows: one pass, each row once (two views)
