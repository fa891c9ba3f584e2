"""Pair and triplet training data: collation, the 3-view forward, hard negatives in the losses (supervised
SimCSE, Gao et al. 2021 §5), cached mode, run_unsup.py's options, bad inputs and the exported data facts."""

from __future__ import annotations

import csv
import json
import math
import re

import pytest
import torch
from helpers import random_sentences
from transformers import AutoTokenizer, TrainingArguments

from hf_cse.cached import cached_step
from hf_cse.cli import train as train_cli
from hf_cse.cli.preflight import check_pair_training
from hf_cse.data import (
    PAIR_VIEWS,
    DataError,
    PairCollator,
    load_pair_dataset,
    tokenize_pair_dataset,
)
from hf_cse.losses import available_losses, build_loss, get_loss_class
from hf_cse.models import SimCSEModel
from hf_cse.objectives import build_objectives, compute_objectives
from hf_cse.trainer import ContrastiveTrainer

TAKERS = ("infonce", "focal_infonce", "gs_infonce")


def _write_tsv(path, rows, header=("anchor", "pos", "neg")):
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _triplet_rows(sentences, n):
    texts = (sentences * 8)[: n + 2]
    return [(texts[i], texts[i + 1], texts[i + 2]) for i in range(n)]


def _triplet_batch(model_dir, sentences, n=8, negatives=True):
    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = _triplet_rows(sentences, n)
    views = PAIR_VIEWS if negatives else PAIR_VIEWS[:2]
    feats = [{p + k: v for p, text in zip(views, row) for k, v in tok(text, truncation=True, max_length=32).items()}
             for row in rows]
    return PairCollator(tok)(feats), rows, tok


# ------------------------------------------------------------------ collation and the 3-view forward
def test_pair_collator_stacks_anchor_positive_negative(tiny_bert_dir, sentences):
    batch, rows, tok = _triplet_batch(tiny_bert_dir, sentences, n=5)
    assert batch["input_ids"].shape[:2] == (5, 3)
    for i, row in enumerate(rows):
        for v, text in enumerate(row):
            ids = batch["input_ids"][i, v][batch["attention_mask"][i, v].bool()].tolist()
            assert ids == tok(text, truncation=True, max_length=32)["input_ids"]
    pairs, _, _ = _triplet_batch(tiny_bert_dir, sentences, n=5, negatives=False)
    assert pairs["input_ids"].shape[:2] == (5, 2)


def test_tokenize_pair_dataset_columns(tiny_bert_dir, sentences, tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", _triplet_rows(sentences, 6))
    ds = load_pair_dataset("pos", train_file=str(path), text_column="anchor", negative_column="neg")
    assert ds.column_names == ["text", "positive", "negative"] and ds[0]["negative"] == sentences[2]
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    tokenized = tokenize_pair_dataset(ds, tok, max_seq_length=8)
    assert {"input_ids", "positive_input_ids", "negative_input_ids"} <= set(tokenized.column_names)
    assert all(len(ids) <= 8 for ids in tokenized["negative_input_ids"])


def test_three_view_forward_hands_z_neg(tiny_bert_dir, sentences):
    batch, _, _ = _triplet_batch(tiny_bert_dir, sentences, n=6)
    model = SimCSEModel.from_encoder(tiny_bert_dir, dropout=0.0).eval()
    emb = model(**batch).embeddings
    assert set(emb) == {"z1", "z2", "z_neg"} and emb["z_neg"].shape == emb["z1"].shape
    # with dropout off each view is its own sentence's embedding: the hard negative of row i is the anchor of i+2
    torch.testing.assert_close(emb["z_neg"][:4], emb["z1"][2:6], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="got 4"):
        model(**{k: torch.cat([v, v[:, :1]], dim=1) for k, v in batch.items()})


# ------------------------------------------------------------------ hard negatives in the losses
def _float64_embeddings(n=6, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, d, generator=g, dtype=torch.float64) for _ in range(3)]


def test_hard_negative_infonce_equals_supervised_simcse_closed_form():
    z1, z2, z3 = _float64_embeddings()
    tau = 0.05
    cos = lambda a, b: float(torch.dot(a, b) / (a.norm() * b.norm()))  # noqa: E731
    n = z1.shape[0]
    expected = 0.0
    for i in range(n):  # Gao et al. 2021 eq. 5: the positive over all positives and all hard negatives
        denom = sum(math.exp(cos(z1[i], z2[j]) / tau) + math.exp(cos(z1[i], z3[j]) / tau) for j in range(n))
        expected += -math.log(math.exp(cos(z1[i], z2[i]) / tau) / denom)
    out = build_loss("infonce", temperature=tau)(z1, z2, z_neg=z3)
    assert out.loss.dtype == torch.float64
    assert abs(out.loss.item() - expected / n) < 1e-10
    assert out.loss.item() > build_loss("infonce", temperature=tau)(z1, z2).loss.item()  # more candidates


def test_hard_negative_focal_infonce_closed_form():
    z1, z2, z3 = _float64_embeddings(seed=1)
    tau, m = 0.07, 0.3
    cos = lambda a, b: float(torch.dot(a, b) / (a.norm() * b.norm()))  # noqa: E731
    n = z1.shape[0]
    expected = 0.0
    for i in range(n):
        pos = cos(z1[i], z2[i]) ** 2 / tau
        negs = [cos(z1[i], z2[j]) * (cos(z1[i], z2[j]) + m) / tau for j in range(n) if j != i]
        negs += [cos(z1[i], z3[j]) * (cos(z1[i], z3[j]) + m) / tau for j in range(n)]
        expected += -pos + math.log(math.exp(pos) + sum(math.exp(x) for x in negs))
    out = build_loss("focal_infonce", temperature=tau, m=m)(z1, z2, z_neg=z3)
    assert abs(out.loss.item() - expected / n) < 1e-10


def test_gs_infonce_without_noise_equals_infonce_with_hard_negatives():
    z1, z2, z3 = _float64_embeddings(seed=2)
    gs = build_loss("gs_infonce", temperature=0.05, num_noise=0)(z1, z2, z_neg=z3).loss
    assert gs.item() == build_loss("infonce", temperature=0.05)(z1, z2, z_neg=z3).loss.item()


@pytest.mark.parametrize("loss", sorted(set(available_losses()) - set(TAKERS)))
def test_losses_without_hard_negatives_refuse_them_in_one_line(loss):
    assert not get_loss_class(loss).takes_hard_negatives
    z1, z2, z3 = _float64_embeddings(n=6, d=8)
    extra = {"z_nodropout": z1} if "z_nodropout" in get_loss_class(loss).extra_inputs else {}
    with pytest.raises(ValueError, match=r"no defined use for hard negatives.*focal_infonce, gs_infonce, infonce"):
        build_loss(loss)(z1, z2, z_neg=z3, **extra)


def test_hard_negative_shape_is_checked():
    z1, z2, z3 = _float64_embeddings()
    with pytest.raises(ValueError, match="z_neg must have the shape of z1"):
        build_loss("infonce")(z1, z2, z_neg=z3[:3])


@pytest.mark.parametrize("loss", [name for name in available_losses() if name != "dcl"])
def test_every_loss_trains_on_pairs(tiny_bert_dir, sentences, loss):
    """Pairs are just z1 / z2 from different texts: every loss takes a step on them."""
    batch, _, _ = _triplet_batch(tiny_bert_dir, sentences, n=8, negatives=False)
    config = {"off_dropout": True} if loss == "off_dropout_infonce" else {}
    model = SimCSEModel.from_encoder(tiny_bert_dir, loss=loss, **config)
    total, _ = compute_objectives(build_objectives(model.config), model(**batch).embeddings)
    total.backward()
    grads = [p.grad for p in model.encoder.parameters() if p.grad is not None]
    assert torch.isfinite(total) and grads and any(g.abs().sum() > 0 for g in grads)


# ------------------------------------------------------------------ cached mode and the trainer
def test_cached_mode_gives_the_plain_gradient_with_hard_negatives(tiny_bert_dir, sentences):
    """float64 and dropout 0, so the comparison does not depend on float32 summation order (thread count)."""
    batch, _, _ = _triplet_batch(tiny_bert_dir, sentences, n=12)

    def fresh():
        torch.manual_seed(0)
        return SimCSEModel.from_encoder(tiny_bert_dir, dropout=0.0, loss="focal_infonce").double().train()

    objectives = build_objectives(fresh().config)
    plain = fresh()
    loss, _ = compute_objectives(objectives, plain(**batch).embeddings)
    loss.backward()
    cached = fresh()
    cached_loss, _ = cached_step(cached, batch, 5, lambda e: compute_objectives(objectives, e),
                                 backward=lambda s: s.backward())
    assert abs(cached_loss.item() - loss.item()) < 1e-10
    for (name, p), q in zip(plain.named_parameters(), cached.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, atol=1e-12, rtol=1e-9)


@pytest.mark.slow
def test_trainer_trains_on_triplets(tiny_bert_dir, sentences, tmp_path):
    path = _write_tsv(tmp_path / "t.tsv", _triplet_rows(sentences, 16))
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    ds = tokenize_pair_dataset(load_pair_dataset("pos", train_file=str(path), text_column="anchor",
                                                 negative_column="neg"), tok)
    model = SimCSEModel.from_encoder(tiny_bert_dir, loss="infonce")
    before = [p.detach().clone() for p in model.encoder.parameters()]
    args = TrainingArguments(str(tmp_path / "out"), per_device_train_batch_size=8, max_steps=2, use_cpu=True,
                             report_to="none", save_strategy="no", disable_tqdm=True, remove_unused_columns=False,
                             logging_steps=1, learning_rate=1e-3)
    # the rows overlap by construction (sentence i is the negative of row i, the positive of row i + 1...)
    trainer = ContrastiveTrainer(model=model, args=args, train_dataset=ds, data_collator=PairCollator(tok),
                                 no_duplicates_in_batch=False)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.encoder.parameters()))


# ------------------------------------------------------------------ run_unsup.py: training, export, bad input
def _run_args(model_dir, path, tmp_path, *extra):
    return ["--model_name_or_path", str(model_dir), "--train_file", str(path), "--text_column", "anchor",
            "--pair_column", "pos", "--max_steps", "2", "--per_device_train_batch_size", "8", "--output_dir",
            str(tmp_path / "out"), "--use_cpu", "--disable_tqdm", "true", *extra]


@pytest.mark.slow
def test_run_unsup_on_triplets_records_the_data_in_the_export(tiny_bert_dir, sentences, tmp_path):
    texts = random_sentences(48)  # distinct texts: the no-duplicates batches can use every row
    path = _write_tsv(tmp_path / "t.tsv", [tuple(texts[i:i + 3]) for i in range(0, 48, 3)])
    train_cli.train_from_args(_run_args(tiny_bert_dir, path, tmp_path, "--negative_column", "neg", "--loss", "infonce"))
    info = json.loads((tmp_path / "out" / "training_info.json").read_text())
    assert info["data"]["pair_data"] == {"kind": "triplets", "anchor": "anchor", "positive": "pos",
                                         "hard_negative": "neg"}
    assert info["data"]["num_rows"] == 16 and "num_sentences" not in info["data"]
    card = (tmp_path / "out" / "sentence-transformers" / "README.md").read_text()
    assert "| Trained on | triplets (anchor `anchor`, positive `pos`, hard negative `neg`)" in card
    assert "| Training triplets | 16 |" in card
    assert "anchor and positive and hard negative are encoded in one forward pass (supervised SimCSE)" in card
    assert "Two dropout views" not in card


@pytest.mark.slow
def test_run_unsup_streams_triplets(tiny_bert_dir, tmp_path):
    """--streaming with --pair_column was refused; the rows are now read as training goes, each view its own."""
    texts = random_sentences(48)
    path = _write_tsv(tmp_path / "t.tsv", [tuple(texts[i:i + 3]) for i in range(0, 48, 3)])
    train_cli.train_from_args(_run_args(tiny_bert_dir, path, tmp_path, "--negative_column", "neg", "--loss", "infonce",
                                        "--streaming", "--logging_steps", "1"))
    out = tmp_path / "out"
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    info = json.loads((out / "training_info.json").read_text())
    assert info["data"]["pair_data"]["kind"] == "triplets" and info["data"]["streamed"]
    assert "num_rows" not in info["data"]  # unknown for a stream


@pytest.fixture
def no_model_load(monkeypatch):
    """Bad input must fail before any model is loaded: loading one fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(SimCSEModel, "from_encoder", classmethod(refuse))


@pytest.mark.parametrize(
    ("rows", "extra", "message"),
    [
        (None, ["--pair_column", "nope"],
         r"no column 'nope' for pair_column; columns are \['anchor', 'pos', 'neg'\]"),
        (None, ["--negative_column", "nah"], r"no column 'nah' for negative_column"),
        ([("a b", "", "c")] * 9, [],
         r"9 row\(s\) with an empty 'pos' cell \(pair_column\), data rows 1, 2, 3, 4, 5 and 4 more"),
        ([("a b", "b", "c")] * 3, [], r"has 3 rows, fewer than one global batch of 8"),
        # read whole, the stray field was cut off without a word
        ([("a b", "b", "c")] * 9 + [("an anchor", "a positive", "a negative", "a stray field")], [],
         r"t\.tsv: line 11 has 4 fields, the header has 3\. A \.tsv is split on every tab \(no quoting\)"),
        (None, ["--negative_column", "neg", "--loss", "mpt"],
         r"loss 'mpt' has no defined use for hard negatives.*infonce"),
        (None, ["--method", "diffcse"], r"--pair_column does not work with --method diffcse"),
    ],
    ids=["missing_pair_column", "missing_negative_column", "empty_cells", "under_one_batch", "extra_field",
         "negatives_for_a_loss_without_them", "diffcse"],
)
@pytest.mark.parametrize("streamed", [False, True], ids=["read_whole", "streamed"])
def test_bad_pair_input_is_one_line_before_any_model(tiny_bert_dir, sentences, tmp_path, no_model_load,
                                                     rows, extra, message, streamed):
    path = _write_tsv(tmp_path / "t.tsv", rows or _triplet_rows(sentences, 16))
    args = _run_args(tiny_bert_dir, path, tmp_path, *extra, *(["--streaming"] if streamed else []))
    if "--pair_column" in extra:  # replace the default pair column
        i = args.index("--pair_column")
        del args[i : i + 2]
    with pytest.raises(DataError, match=message) as err:
        train_cli.train_from_args(args)
    assert "\n" not in str(err.value)


def test_negative_column_needs_a_pair_column():
    with pytest.raises(DataError, match="--negative_column needs --pair_column"):
        check_pair_training("simcse", "infonce", None, "neg")


def test_pair_column_needs_a_table(tmp_path):
    path = tmp_path / "plain.txt"
    path.write_text("one\ntwo\n")
    with pytest.raises(DataError, match="needs a .csv or .tsv file"):
        load_pair_dataset("pos", train_file=str(path))


@pytest.mark.parametrize("streamed", [False, True], ids=["read_whole", "streamed"])
@pytest.mark.parametrize(("data", "message"), [
    ([], "pair_column needs pair data: train_file a .csv/.tsv file (or dataset_name)"),
    (["--train_file", "{tmp}/pairs.txt"], "pair_column needs a .csv or .tsv file with named columns; got pairs.txt."),
    (["--train_file", "{tmp}/none.tsv"], "none.tsv does not exist (or is not a file)."),
], ids=["no_data", "txt", "missing_file"])
def test_pair_data_from_nowhere_is_refused_alike_streamed_or_not(data, message, streamed, tiny_bert_dir, tmp_path,
                                                                 no_model_load):
    """Streamed, no training data was a TypeError from inside pathlib, and a .txt of pairs was refused as a text
    file with columns; both now read as the rows read whole do."""
    (tmp_path / "pairs.txt").write_text("anchor\tpos\na b\tc d\n")
    args = ["--model_name_or_path", str(tiny_bert_dir), "--pair_column", "pos", "--max_steps", "2", "--output_dir",
            str(tmp_path / "out"), "--use_cpu", *[arg.format(tmp=tmp_path) for arg in data]]
    with pytest.raises(DataError, match=re.escape(message)):
        train_cli.train_from_args(args + (["--streaming"] if streamed else []))


def test_supervised_simcse_preset(tiny_bert_dir):
    args = train_cli.parse_args(["--preset", "sup_simcse_bert", "--model_name_or_path", str(tiny_bert_dir),
                                 "--learning_rate", "1e-5"])
    by_name = {type(a).__name__: a for a in args}
    model_args, method_args, loss_args = by_name["ModelArguments"], by_name["MethodArguments"], by_name["LossArguments"]
    training_args = by_name["ContrastiveTrainingArguments"]
    assert (method_args.loss, loss_args.temperature, model_args.mlp_only_train) == ("infonce", 0.05, False)
    assert (training_args.per_device_train_batch_size, training_args.num_train_epochs) == (512, 3)
    assert training_args.learning_rate == 1e-5  # an explicit flag wins over the preset's 5e-5


@pytest.mark.parametrize("source", ["file", "data_set"])
def test_a_label_column_named_as_the_positives_is_refused(source, tmp_path):
    """pair_column naming the label column of NLI-style data trained (sentence, "1") pairs without a word."""
    sentences = random_sentences(6)
    if source == "file":
        path = tmp_path / "pairs.csv"
        path.write_text("text,label,positive\n" + "".join(f"{s},{i % 3},{s} too\n" for i, s in enumerate(sentences)))
        kwargs, what = {"train_file": str(path)}, "only numbers"
    else:
        (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": s, "label": i % 3, "positive": s + " too"})
                                                      + "\n" for i, s in enumerate(sentences)))
        kwargs, what = {"dataset_name": str(tmp_path)}, r"int values \(0\)"
    with pytest.raises(DataError, match=f"column 'label' \\(pair_column\\) holds {what}, not sentences; pass "
                                        "pair_column NAME of a text column"):
        load_pair_dataset("label", **kwargs)
    assert load_pair_dataset("positive", **kwargs)["positive"][0] == sentences[0] + " too"


@pytest.mark.parametrize("source", ["file", "data_set"])
def test_missing_values_written_out_in_a_pair_column_are_refused_as_empty_cells_are(source, tmp_path):
    """A positive column exported with pandas' 'nan' for its empty cells (df.astype(str)) trained each of those
    anchors against the "sentence" nan, while an empty cell in the same place was refused; one stray 'None' is a
    text and passes."""
    anchors, positives = random_sentences(20, seed=3), random_sentences(20, seed=4)
    rows = [(a, "nan" if i % 5 == 1 else p) for i, (a, p) in enumerate(zip(anchors, positives))]
    few = [(a, "None" if i == 3 else p) for i, (a, p) in enumerate(zip(anchors, positives))]

    def write(name: str, data: list[tuple[str, str]]) -> dict[str, str]:
        if source == "file":
            path = tmp_path / f"{name}.csv"
            with path.open("w", newline="") as fh:
                csv.writer(fh).writerows([("text", "positive"), *data])
            return {"train_file": str(path)}
        folder = tmp_path / name
        folder.mkdir()
        (folder / "train.jsonl").write_text("".join(json.dumps({"text": a, "positive": b}) + "\n" for a, b in data))
        return {"dataset_name": str(folder)}

    with pytest.raises(DataError, match=r"4 row\(s\) whose 'positive' cell \(pair_column\) is 'nan', how pandas "
                                        r"writes a missing value, not a text; data rows 2, 7, 12, 17\. Every row "
                                        "needs all its texts"):
        load_pair_dataset("positive", **write("exported", rows))
    assert load_pair_dataset("positive", **write("stray", few))["positive"][3] == "None"


@pytest.mark.slow  # pair rows read whole and streamed (~1 s)
def test_a_view_that_copies_another_on_every_row_is_refused_and_on_most_rows_said(tmp_path, caplog):
    """sent1 == sent0 on every row (a wrong column named) trained silently, read whole or streamed: each pair is one
    sentence twice."""
    import logging
    from types import SimpleNamespace

    from hf_cse.streaming import load_pair_stream

    anchors, others = random_sentences(12, seed=1), random_sentences(12, seed=2)

    def write(name: str, positives: list[str], negatives: list[str]) -> str:
        path = tmp_path / name
        with path.open("w", newline="") as fh:
            csv.writer(fh).writerows([("sent0", "sent1", "hard_neg"), *zip(anchors, positives, negatives)])
        return str(path)

    copied = write("copied.csv", anchors, others)
    negative_copied = write("negative.csv", others, others)
    for path, said in ((copied, r"column 'sent1' \(pair_column\) equals column 'sent0' \(text_column\) on "),
                       (negative_copied, r"column 'hard_neg' \(negative_column\) equals column 'sent1' "
                                         r"\(pair_column\) on ")):
        with pytest.raises(DataError, match=said + r"all 12 rows: almost surely a wrong column"):
            load_pair_dataset("sent1", path, text_column="sent0", negative_column="hard_neg")
        with pytest.raises(DataError, match=said + r"its first 12 rows"):
            load_pair_stream(SimpleNamespace(train_file=path, dataset_name=None, dataset_config_name=None,
                                             text_column="sent0", pair_column="sent1", negative_column="hard_neg"))
    mostly = write("mostly.csv", anchors[:8] + others[8:], others[::-1])
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        assert len(load_pair_dataset("sent1", mostly, text_column="sent0", negative_column="hard_neg")) == 12
    assert "equals column 'sent0' (text_column) on 8 of all 12 rows, which train on one text twice" in caplog.text
