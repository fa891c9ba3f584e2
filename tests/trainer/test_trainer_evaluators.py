"""ContrastiveTrainer's pluggable evaluation: hf_cse evaluators and sentence-transformers evaluators."""

import pytest
import torch
from helpers import collator, random_sentences, tiny_args, tiny_train_dataset

from hf_cse.evaluation import SentenceEncoder, load_sts
from hf_cse.evaluation.evaluators import STModelAdapter, STSDevEvaluator, run_evaluator
from hf_cse.models import SimCSEModel
from hf_cse.trainer import ContrastiveTrainer


def _trainer(folder, sentences, tmp_path, repeat=1, model=None, **kwargs):
    ds, tok = tiny_train_dataset(folder, sentences, tmp_path, repeat)
    args = {k: kwargs.pop(k) for k in list(kwargs) if k not in ("evaluator", "senteval_data_dir")}
    torch.manual_seed(0)
    model = model or SimCSEModel.from_encoder(str(folder))
    return ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out", **args), train_dataset=ds,
                              data_collator=collator(tok), processing_class=tok, **kwargs)


def _st_sts_dev_evaluator(senteval_dir):
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    pairs = load_sts("STSBenchmark", str(senteval_dir), "dev")["dev"]
    return EmbeddingSimilarityEvaluator(list(pairs.sentences1), list(pairs.sentences2), pairs.scores.tolist(),
                                        batch_size=128, main_similarity="cosine", name="sts-dev", write_csv=False)


@pytest.mark.slow
def test_st_evaluator_matches_hf_cse_dev_score_and_selects_the_same_checkpoint(minilm_dir, senteval_dir, sentences,
                                                                                 tmp_path):
    st_eval = _st_sts_dev_evaluator(senteval_dir)
    hf_eval = STSDevEvaluator(senteval_dir, tasks=("STSBenchmark",))
    trainer = _trainer(minilm_dir, sentences, tmp_path, repeat=4, evaluator=[st_eval, hf_eval], max_steps=4,
                       learning_rate=3e-4, eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2,
                       metric_for_best_model="sts-dev_spearman_cosine", load_best_model_at_end=True,
                       save_total_limit=None)
    trainer.train()
    evals = [h for h in trainer.state.log_history if "eval_stsb_spearman" in h]
    # before the first step (the untrained encoder) and at each evaluation step; the selected checkpoint was scored
    # at its step, so it is not scored again at the end (the model in memory is checked below)
    assert [h["step"] for h in evals] == [0, 2, 4]
    for h in evals:
        # same pairs, same embeddings; sentence-transformers' cosine is float32, hf_cse's float64: ranks of
        # near-equal cosines may swap, which moves Spearman x 100 by far less than 0.01
        assert h["eval_sts-dev_spearman_cosine"] * 100 == pytest.approx(h["eval_stsb_spearman"], abs=0.01)
    during = evals[1:3]
    scores = [h["eval_stsb_spearman"] for h in during]
    assert max(scores) - min(scores) > 0.05  # the checkpoints differ, so selecting one means something
    best_step = max(during, key=lambda h: h["eval_stsb_spearman"])["step"]
    assert trainer.state.best_global_step == best_step
    best = max(during, key=lambda h: h["eval_stsb_spearman"])
    assert trainer.dev.after == best[f"eval_{trainer.dev.metric}"]  # the selected checkpoint's, logged at its step
    # the model in memory (the one saved) is the best of the selected checkpoint and the untrained encoder
    untrained = evals[0]["eval_stsb_spearman"]
    assert trainer.dev.kept_step == (0 if untrained > max(scores) else best_step)
    enc = SentenceEncoder(trainer.model, trainer.processing_class, show_progress_bar=False)
    final = STSDevEvaluator(senteval_dir, tasks=("STSBenchmark",))(enc)["stsb_spearman"]
    assert final == pytest.approx(max(untrained, *scores), abs=1e-4)


def test_information_retrieval_evaluator_runs_through_the_trainer(tiny_bert_dir, sentences, tmp_path):
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    docs = random_sentences(12, seed=3)
    corpus = {f"d{i}": s for i, s in enumerate(docs)}
    queries = {f"q{i}": s for i, s in enumerate(docs[:4])}  # each query is its own document: found at rank 1
    relevant = {f"q{i}": {f"d{i}"} for i in range(4)}
    ir = InformationRetrievalEvaluator(queries, corpus, relevant, name="toy", write_csv=False)
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, evaluator=ir)
    metrics = trainer.evaluate()
    assert metrics["eval_toy_cosine_accuracy@1"] == 1.0
    assert trainer.state.log_history[-1]["eval_toy_cosine_accuracy@1"] == 1.0
    # the epoch is logged once, as transformers' "epoch", not also as a score named eval_epoch
    assert "eval_epoch" not in metrics and "eval_epoch" not in trainer.state.log_history[-1]
    assert "epoch" in trainer.state.log_history[-1]


def test_adapter_encodes_with_the_test_time_embedding(tiny_bert_dir, sentences):
    from transformers import AutoTokenizer

    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    enc = SentenceEncoder(model, AutoTokenizer.from_pretrained(tiny_bert_dir), show_progress_bar=False)
    adapter = STModelAdapter(enc)
    ref = enc.encode(sentences[:3])
    assert torch.allclose(adapter.encode(sentences[:3], convert_to_tensor=True), torch.from_numpy(ref))
    unit = adapter.encode(sentences[:3], normalize_embeddings=True)
    assert unit.shape == ref.shape and abs(float((unit**2).sum(1).mean()) - 1.0) < 1e-5
    assert adapter.encode(sentences[0]).shape == ref[0].shape
    assert adapter.encode(sentences[:3], truncate_dim=4).shape == (3, 4)


def test_hf_cse_callable_evaluators_merge(tiny_bert_dir, sentences):
    from transformers import AutoTokenizer

    enc = SentenceEncoder(SimCSEModel.from_encoder(str(tiny_bert_dir)), AutoTokenizer.from_pretrained(tiny_bert_dir),
                          show_progress_bar=False)
    out = run_evaluator([lambda e: {"a": 1}, lambda e: {"b": e.encode(["x y"]).shape[0]}], enc)
    assert out == {"a": 1.0, "b": 1.0}
    with pytest.raises(TypeError, match="neither"):
        run_evaluator(object(), enc)


@pytest.mark.slow  # three trainers built (~1.5 s)
def test_an_evaluator_that_cannot_run_is_refused_when_the_trainer_is_built(tiny_bert_dir, sentences, tmp_path):
    """evaluator="stsb" was taken, and failed with a TypeError at the score before the first step."""
    from hf_cse.errors import CSEError

    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    for evaluator in ("stsb", ["stsb"], [lambda e: {"a": 1.0}, 3]):
        with pytest.raises(CSEError, match="is neither a sentence-transformers evaluator nor a callable taking a "
                                           "SentenceEncoder: pass e.g."):
            ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "o"), train_dataset=ds, processing_class=tok,
                               evaluator=evaluator)


def test_eval_dataset_and_evaluation_without_evaluator_are_rejected(tiny_bert_dir, sentences, tmp_path):
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    with pytest.raises(ValueError, match="evaluator="):
        ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "o"), train_dataset=ds, eval_dataset=ds,
                           data_collator=collator(tok), processing_class=tok)
    with pytest.raises(ValueError, match="eval_strategy=steps needs something to evaluate"):
        ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "o", eval_strategy="steps", eval_steps=1),
                           train_dataset=ds, data_collator=collator(tok), processing_class=tok)


def test_a_trainer_without_a_model_is_refused_in_one_line():
    """model=None reached the method's checks against the run (an AttributeError on None) before transformers'."""
    from hf_cse.errors import CSEError

    with pytest.raises(CSEError, match=r"^ContrastiveTrainer needs model= \(a built hf_cse method model\)"):
        ContrastiveTrainer(model=None, args=tiny_args("unused"))



@pytest.mark.parametrize("keyword, said", [
    ("compute_loss_func", r"^ContrastiveTrainer computes the loss its model's objectives name, never "
                          r"compute_loss_func=: register your loss"),
    ("compute_metrics", r"^ContrastiveTrainer scores sentence embeddings, so compute_metrics= would never be called: "
                        r"pass evaluator="),
    ("preprocess_logits_for_metrics", r"so preprocess_logits_for_metrics= would never be called"),
])
def test_a_loss_or_metrics_function_the_trainer_would_never_call_is_refused(keyword, said):
    """compute_loss_func= and compute_metrics= were taken and never called: a user's own loss function that raised
    trained the model's objectives without a word."""
    from hf_cse.errors import CSEError

    def never(*args, **kwargs):
        raise AssertionError("called")

    with pytest.raises(CSEError, match=said):
        ContrastiveTrainer(model=object(), args=tiny_args("unused"), **{keyword: never})

@pytest.mark.slow  # two trainers built (~1.4 s)
def test_what_a_contrastive_trainer_cannot_do_is_refused_in_one_line(tiny_bert_dir, sentences, tmp_path):
    """model_init failed at the first step blaming the data (or inside transformers); predict() failed inside the
    tokenizer; evaluate(eval_dataset=...) silently scored the dev data instead of the set given."""
    from hf_cse.errors import CSEError

    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    with pytest.raises(CSEError, match=r"takes model= .*not model_init=, so hyperparameter_search is not supported"):
        ContrastiveTrainer(model_init=lambda: SimCSEModel.from_encoder(str(tiny_bert_dir)), train_dataset=ds,
                           args=tiny_args(tmp_path / "o"), processing_class=tok)
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=tiny_args(tmp_path / "o"),
                                 train_dataset=ds, processing_class=tok, evaluator=lambda encoder: {"x": 1.0})
    with pytest.raises(CSEError, match=r"^ContrastiveTrainer has no predict\(\): embed sentences with "
                                       r"hf_cse\.evaluation\.SentenceEncoder"):
        trainer.predict(ds)
    with pytest.raises(CSEError, match=r"evaluate\(\) scores the trainer's evaluator, .* takes no eval_dataset"):
        trainer.evaluate(eval_dataset=ds)
    assert trainer.evaluate()["eval_x"] == 1.0


@pytest.mark.slow
def test_a_sentence_transformers_evaluator_alone_is_compared_before_and_after(tiny_bert_dir, senteval_dir, sentences,
                                                                               tmp_path):
    """Without metric_for_best_model, the evaluator's own primary metric judges the run (not "no dev data")."""
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, repeat=2, evaluator=_st_sts_dev_evaluator(senteval_dir),
                       max_steps=2)
    trainer.train()
    step0 = next(h for h in trainer.state.log_history if h.get("step") == 0 and "eval_sts-dev_spearman_cosine" in h)
    assert trainer.dev is not None and trainer.dev.metric == "sts-dev_spearman_cosine"
    assert trainer.dev.before == step0["eval_sts-dev_spearman_cosine"]


@pytest.mark.slow
def test_a_misspelt_metric_for_best_model_is_refused_before_the_first_step(tiny_bert_dir, senteval_dir, sentences,
                                                                            tmp_path):
    from hf_cse.errors import CSEError

    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, senteval_data_dir=str(senteval_dir), max_steps=2,
                       metric_for_best_model="stsb_spearmann")
    with pytest.raises(CSEError, match="metric_for_best_model='stsb_spearmann' is not among the dev metrics"):
        trainer.train()
    assert trainer.state.global_step == 0


@pytest.mark.slow
def test_a_lower_is_better_metric_of_ones_own_keeps_the_checkpoint_it_chose_over_the_untrained(tiny_bert_dir, sentences,
                                                                                                tmp_path):
    """greater_is_better=False with one's own lower-is-better metric: the best checkpoint was the lowest, but the
    comparison with the untrained encoder after training read higher as better, and put back the untrained weights
    whenever training had lowered the metric, i.e. made the model better."""
    scripted = iter([1.0, 0.4, 0.6])  # before the first step, at step 2, at step 4

    def distance(encoder):  # a stand-in for a loss on held-out pairs
        return {"distance": next(scripted)}

    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, repeat=2, evaluator=distance, max_steps=4,
                       eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2,
                       metric_for_best_model="distance", greater_is_better=False, load_best_model_at_end=True)
    untrained = {name: t.clone() for name, t in trainer.model.state_dict().items()}
    trainer.train()
    assert trainer.state.best_global_step == 2
    dev = trainer.dev
    assert (dev.before, dev.after, dev.kept_step, dev.greater_is_better, dev.worse) == (1.0, 0.4, 2, False, False)
    assert any(not torch.equal(untrained[name], t) for name, t in trainer.model.state_dict().items())




@pytest.mark.slow
def test_untrained_weights_put_back_after_train_are_said_at_once_and_by_evaluate(tiny_bert_dir, sentences, tmp_path,
                                                                                caplog):
    """train() put the untrained weights back into trainer.model (training scored lower on dev) without a word: only
    save_run's last line said it, so train() then save_model() saved them silently, and a later evaluate() logged
    'scoring the model of step 2' for the untrained weights."""
    import logging

    scripted = iter([0.8, 0.5, 0.8])  # before the first step, after the last (step 2), evaluate() after train()

    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, evaluator=lambda encoder: {"x": next(scripted)},
                       max_steps=2, metric_for_best_model="x")
    untrained = {name: t.clone() for name, t in trainer.model.state_dict().items()}
    with caplog.at_level(logging.INFO, logger="hf_cse"):
        trainer.train()
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert trainer.dev.kept_step == 0 and all(torch.equal(untrained[n], t)
                                                  for n, t in trainer.model.state_dict().items())
        assert any("holds the untrained weights again, and save_run / save_model save those" in m for m in said)
        trainer.evaluate()
    assert "dev: scoring the untrained encoder (held again after step 2)" in caplog.text


@pytest.mark.slow
def test_the_dev_before_and_after_line_is_said_once_when_the_untrained_encoder_is_kept(tiny_bert_dir, sentences,
                                                                                      tmp_path, caplog):
    """train() said "dev: before X -> after Y ..." where it put the untrained weights back, and save_run's last line
    said it again (a 1- or 2-process hf-cse-train run printed it twice, 0.6 s apart)."""
    import itertools
    import logging

    scores = itertools.chain([0.8, 0.5], itertools.repeat(0.5))  # before the first step, after the last (step 2)
    trainer = _trainer(tiny_bert_dir, sentences, tmp_path, evaluator=lambda encoder: {"x": next(scores)},
                       max_steps=2, metric_for_best_model="x")
    with caplog.at_level(logging.INFO, logger="hf_cse"):
        trainer.train()
        trainer.save_run()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("hf_cse")]
    assert trainer.dev.kept_step == 0
    assert [m for m in said if "dev: before" in m] == said[-1:]  # the run's last line, once
    assert any("holds the untrained weights again" in m for m in said[:-1])  # said at once by train() too

#: the forms eval_pairs takes, as its refusal names them
EVAL_PAIRS_FORMS = ("pass hf_cse.evaluation.data.STSPairs (e.g. hf_cse.evaluation.custom_dev.read_pair_file(path)) "
                    "or a list of (sentence1, sentence2, score) tuples; or give the pairs as eval_file= (a CSV/TSV "
                    "file) or an evaluator=.")


@pytest.mark.slow  # a dev score (~0.9 s)
def test_eval_pairs_takes_scored_tuples(tiny_bert_dir, sentences, tmp_path):
    """eval_pairs, a documented keyword, passed construction with a list of (sentence1, sentence2, score) and failed
    with an AttributeError inside hf_cse at the first dev score."""
    from hf_cse.evaluation.evaluators import PairsEvaluator

    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    dev = random_sentences(20, 9)
    rows = [(dev[i], dev[i + 1], float(i % 5)) for i in range(0, 20, 2)]
    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=tiny_args(tmp_path / "o"),
                                 train_dataset=ds, processing_class=tok, eval_pairs=rows)
    [pairs] = [e for e in trainer.evaluator if isinstance(e, PairsEvaluator)]
    assert list(zip(pairs.pairs.sentences1, pairs.pairs.sentences2, pairs.pairs.scores.tolist(), strict=True)) == [
        (" ".join(a.split()), " ".join(b.split()), s) for a, b, s in rows]
    assert "eval_custom_spearman" in trainer.evaluate()


@pytest.mark.parametrize("bad, start", [
    ({"sentence1": ["a"]}, "eval_pairs is dict "), ("dev.tsv", "eval_pairs is str 'dev.tsv'"),
    ([("a b", "c d")], "eval_pairs row 0: tuple ('a b', 'c d') of 2 items, not (sentence1, sentence2, score)"),
    # the element at fault named whole, however long the sentences before it (a score read from a file as text)
    ([("a b " * 40, "c d " * 40, "4.0")], "eval_pairs row 0: its score is str '4.0', not "),
    ([("a b", "c d", float("nan"))], "eval_pairs row 0: its score is float nan, not "),
    ([("a b", {"text": "c d"}, 1.0)], "eval_pairs row 0: its sentence2 is dict {'text': 'c d'}, not "),
    ([{"sentence1": "a", "sentence2": "b", "score": 1.0}], "eval_pairs row 0: dict {'sentence1': 'a', "),
])
def test_eval_pairs_of_another_form_is_refused_when_the_trainer_is_built(tiny_bert_dir, sentences, tmp_path, bad,
                                                                          start):
    from hf_cse.errors import CSEError

    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    with pytest.raises(CSEError) as refused:
        ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)), args=tiny_args(tmp_path / "o"),
                           train_dataset=ds, processing_class=tok, eval_pairs=bad)
    assert str(refused.value).startswith(start) and str(refused.value).endswith(EVAL_PAIRS_FORMS)
