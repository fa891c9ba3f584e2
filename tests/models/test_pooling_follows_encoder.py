"""Pooling follows the encoder: a sentence-transformers model trains, tests and exports with its own pooling (and
Normalize) unless a flag says otherwise; a plain Hugging Face encoder keeps the papers' [CLS]. And a run with dev
data says how the dev score moved (before the first step -> after the last)."""

import json
import logging

import pytest
import torch
from helpers import random_sentences, scored_pairs_file
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
from transformers import AutoTokenizer

from hf_cse.cli import train as train_cli
from hf_cse.encoders import own_pooling
from hf_cse.evaluation.before_after import DevChange, dev_change, primary_metric
from hf_cse.models import SimCSEModel
from hf_cse.models.pooling import choose_pooling, resolve_pooling

SENTENCES = ["A man plays a guitar on the stage.", "Two dogs run.", "The quick brown fox jumps over the lazy dog.",
             "Rain."]


def _st_folder(encoder_dir, out, mode, normalize):
    transformer = Transformer(str(encoder_dir))
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=mode)]
    SentenceTransformer(modules=modules + ([Normalize()] if normalize else []), device="cpu").save(str(out))
    return out


@pytest.fixture(scope="module")
def st_mean_dir(tiny_bert_dir, tmp_path_factory):
    return _st_folder(tiny_bert_dir, tmp_path_factory.mktemp("st_mean"), "mean", normalize=True)


def _train(folder, tmp_path, *extra):
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(24)) + "\n")
    out = tmp_path / "out"
    train_cli.train_from_args(["--model_name_or_path", str(folder), "--train_file", str(train), "--max_steps", "2",
                    "--per_device_train_batch_size", "8", "--output_dir", str(out), "--use_cpu",
                    "--disable_tqdm", "true", *extra])
    return out


def _hf_cse_embeddings(model, tok):
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model.eval().sentence_embedding(batch["input_ids"], batch["attention_mask"],
                                               batch.get("token_type_ids"))


def test_reads_the_pooling_of_both_sentence_transformers_config_formats(st_mean_dir, tiny_bert_dir, tmp_path):
    assert own_pooling(st_mean_dir).mode == "mean" and own_pooling(st_mean_dir).normalize
    assert own_pooling(tiny_bert_dir) is None  # a plain Hugging Face folder
    legacy = tmp_path / "legacy"
    (legacy / "1_Pooling").mkdir(parents=True)
    (legacy / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]))
    (legacy / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_max_tokens": True}))
    own = own_pooling(legacy)
    assert (own.mode, own.normalize, own.unsupported_modules) == ("max", False, ("Dense",))
    choice = choose_pooling(own)
    assert choice.pooler_type == "max" and "Dense module(s) after pooling are not trained" in choice.source


def test_choice_rules(st_mean_dir, tiny_bert_dir):
    assert resolve_pooling(str(tiny_bert_dir)).pooler_type == "cls"  # the papers' default for a plain encoder
    own = resolve_pooling(str(st_mean_dir))
    assert (own.pooler_type, own.normalize) == ("avg", True) and "encoder's own" in own.source
    asked = resolve_pooling(str(st_mean_dir), "cls", given_by="--pooler_type")
    assert (asked.pooler_type, asked.normalize) == ("cls", True)  # its Normalize stays unless --normalize says
    assert resolve_pooling(str(st_mean_dir), "cls", normalize=False).normalize is False
    assert resolve_pooling(str(tiny_bert_dir), "avg").normalize is False
    assert "set by --pooler_type" in asked.source and "own sentence-transformers pooling is mean" in asked.source
    kept = resolve_pooling(str(st_mean_dir), normalize=False)
    assert (kept.pooler_type, kept.normalize) == ("avg", False)
    by_flag = resolve_pooling(str(st_mean_dir), normalize=False, normalize_given_by="--normalize")
    assert by_flag.source.endswith("(mean + Normalize), normalize set to False by --normalize")
    # the choices named are poolers (they were sentence-transformers' modes: mean, lasttoken)
    with pytest.raises(ValueError, match=r"pools by 'weightedmean'.*pooler_type \(cls, cls_before_pooler, avg, "):
        choose_pooling(type(own_pooling(st_mean_dir))("weightedmean", False))


def test_python_api_follows_the_encoder(st_mean_dir, tiny_bert_dir, caplog):
    with caplog.at_level(logging.INFO, logger="hf_cse.models.base"):
        model = SimCSEModel.from_encoder(str(st_mean_dir))
    assert (model.config.pooler_type, model.config.test_pooler, model.config.normalize) == ("avg", "avg", True)
    assert any("pooling: avg + normalize" in r.getMessage() for r in caplog.records)
    plain = SimCSEModel.from_encoder(str(tiny_bert_dir))
    assert (plain.config.pooler_type, plain.config.test_pooler, plain.config.normalize) == (
        "cls", "cls_before_pooler", False)


@pytest.mark.slow
def test_a_presets_pooling_in_place_of_the_encoders_own_is_a_warning(st_mean_dir, tiny_bert_dir, senteval_dir,
                                                                     tmp_path, caplog):
    """A paper's preset pools as its BERT-base runs ([CLS]): on a sentence-transformers encoder that replaces the
    pooling its users measured (all-MiniLM-L6-v2's STS-B fell from 82.05 to 76.01), said as a warning naming the
    preset and how to keep the encoder's own; the preset's pooling on a plain encoder, or the caller's own choice, is
    no warning."""
    from hf_cse.presets import from_preset

    with caplog.at_level(logging.INFO, logger="hf_cse"):
        model, _ = from_preset("simcse_bert", str(st_mean_dir), str(tmp_path / "st"),
                               senteval_data_dir=str(senteval_dir))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "pooling" in r.getMessage()]
    assert warned == ["pooling: cls + normalize (set by preset simcse_bert; the encoder's own sentence-transformers "
                      "pooling is mean + Normalize); the preset pools as its paper's BERT-base runs: "
                      "pooler_type='avg' keeps the encoder's own"]
    assert model.config.pooler_source.startswith("set by preset simcse_bert")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hf_cse"):
        kept, _ = from_preset("simcse_bert", str(st_mean_dir), str(tmp_path / "kept"), pooler_type="avg",
                              senteval_data_dir=str(senteval_dir))
        from_preset("simcse_bert", str(tiny_bert_dir), str(tmp_path / "plain"), senteval_data_dir=str(senteval_dir))
    assert kept.config.pooler_type == "avg"
    assert not [r for r in caplog.records if r.levelno == logging.WARNING and "pooling" in r.getMessage()]


def test_untrained_model_embeds_as_the_sentence_transformers_model(st_mean_dir):
    """Before any step, hf_cse's test embedding IS the encoder's own (pooling and Normalize): training starts from
    the model users measured, not from its unused [CLS]."""
    model = SimCSEModel.from_encoder(str(st_mean_dir))
    got = _hf_cse_embeddings(model, AutoTokenizer.from_pretrained(st_mean_dir))
    want = SentenceTransformer(str(st_mean_dir), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(got.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("asked, pooler, st_mode", [(None, "avg", "mean"), ("cls", "cls", "cls")])
def test_st_encoder_trains_tests_and_exports_its_pooling(st_mean_dir, tmp_path, asked, pooler, st_mode):
    out = _train(st_mean_dir, tmp_path, *(["--pooler_type", asked] if asked else []))
    model = SimCSEModel.from_pretrained(out)
    assert model.config.pooler_type == pooler and model.config.normalize  # the encoder's Normalize either way
    export = SentenceTransformer(str(out / "sentence-transformers"), device="cpu")
    assert export[1].get_config_dict()["pooling_mode"] == st_mode
    assert any(isinstance(m, Normalize) for m in export)
    want = _hf_cse_embeddings(model, AutoTokenizer.from_pretrained(out))
    assert torch.allclose(export.encode(SENTENCES, convert_to_tensor=True), want, atol=1e-5)
    card = (out / "sentence-transformers" / "README.md").read_text()
    assert model.config.pooler_source in card
    assert model.config.pooler_source.startswith("set by --pooler_type" if asked else "the encoder's own")


@pytest.mark.slow
def test_plain_encoder_keeps_the_papers_cls(tiny_bert_dir, tmp_path):
    out = _train(tiny_bert_dir, tmp_path)
    model = SimCSEModel.from_pretrained(out)
    assert (model.config.pooler_type, model.config.test_pooler) == ("cls", "cls_before_pooler")
    export = SentenceTransformer(str(out / "sentence-transformers"), device="cpu")
    assert export[1].get_config_dict()["pooling_mode"] == "cls"
    want = _hf_cse_embeddings(model, AutoTokenizer.from_pretrained(out))
    assert torch.allclose(export.encode(SENTENCES, convert_to_tensor=True), want, atol=1e-5)


@pytest.mark.slow
def test_dev_score_before_and_after_in_the_log_and_training_info(st_mean_dir, tmp_path, caplog):
    pairs = scored_pairs_file(tmp_path / "dev.tsv", n_pairs=40, score_levels=5, seed=0)
    with caplog.at_level(logging.INFO):  # the dev line is the trainer's (hf_cse.trainer)
        out = _train(st_mean_dir, tmp_path, "--eval_file", str(pairs))
    info = json.loads((out / "training_info.json").read_text())
    dev = info["dev"]
    assert dev["metric"] == "custom_spearman" and dev["delta"] == pytest.approx(dev["after"] - dev["before"])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dev: ")]
    # a line as each scoring starts (the untrained encoder, the kept model), then the before -> after line, once
    assert lines[-1] == DevChange(dev["metric"], dev["before"], dev["after"], dev["kept_step"], dev["precision"]).line()
    assert [line for line in lines if line.startswith("dev: before")] == lines[-1:]
    assert lines[0].startswith("dev: scoring the untrained encoder (step 0)")
    card = (out / "sentence-transformers" / "README.md").read_text()
    assert f"went from {dev['before']:.2f} before" in card and f"Both were scored in {dev['precision']}." in card
    # the untrained score is the encoder's own: scoring the folder we started from gives the same number
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [e["step"] for e in history if "eval_custom_spearman" in e][0] == 0


@pytest.mark.slow
def test_without_dev_data_the_run_says_nothing_checked_it(tiny_bert_dir, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="run_unsup"):
        out = _train(tiny_bert_dir, tmp_path)
    assert "dev" not in json.loads((out / "training_info.json").read_text())
    assert any(r.getMessage().startswith("dev: no dev data") for r in caplog.records)


def test_dev_change_reads_step_zero_and_the_preferred_metric():
    history = [{"eval_stsb_spearman": 80.0, "eval_sickr_spearman": 70.0, "step": 0}, {"loss": 1.0, "step": 5},
               {"eval_stsb_spearman": 81.0, "step": 10}]
    final = {"eval_stsb_spearman": 79.0, "eval_sickr_spearman": 72.0, "eval_epoch": 1.0}
    assert primary_metric(final) == "stsb_spearman" and primary_metric(final, "sickr_spearman") == "sickr_spearman"
    change = dev_change(history, final)
    assert (change.before, change.after, change.worse) == (80.0, 79.0, True)
    assert dev_change(history, final, "eval_sickr_spearman").delta == pytest.approx(2.0)
    assert dev_change(history[1:], final) is None  # nothing scored before the first step


def test_promptbert_says_it_embeds_its_template_token_not_the_pooler(st_mean_dir, caplog):
    """Its log said "pooling: avg + normalize (the encoder's own ...)" while it embeds the template's [MASK]."""
    from hf_cse.models import PromptBERTModel

    with caplog.at_level(logging.INFO, logger="hf_cse.models.base"):
        PromptBERTModel.from_encoder(str(st_mean_dir))
    [said] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pooling: ")]
    assert said == ("pooling: the template's [MASK] token (PromptBERT) + normalize; pooler_type avg decides only "
                    "whether the projection head applies at test time")
