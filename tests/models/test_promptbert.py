"""PromptBERT against the authors' computation (kongds/Prompt-BERT), restated below step by step in float64 on a tiny
random BERT: the template views, the [MASK] representation, template denoising, the test-time representation and
the training loss; plus the templates' checks and the RoBERTa position numbering."""

import logging

import pytest
import torch
from helpers import random_sentences
from transformers import AutoConfig, AutoModel, AutoTokenizer

from hf_cse.data import TwoViewCollator
from hf_cse.errors import CSEError
from hf_cse.evaluation.dev import scoring_dev
from hf_cse.losses import build_loss
from hf_cse.models import PromptBERTConfig, PromptBERTModel
from hf_cse.models.promptbert.config import BERT_TEMPLATES, ROBERTA_TEMPLATES
from hf_cse.models.promptbert.templates import TemplateIds, empty_template_batch

PROMPTEOL = 'This sentence : "{sentence}" means in one word:"'
# the authors' run.sh unsup-bert templates, in their own syntax
AUTHORS_T1 = '*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*'
AUTHORS_T2 = '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'
# and its unsup-roberta ones
AUTHORS_ROBERTA = ("*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*",
                   "*cls*_The_sentence_:_'_*sent_0*_'_means*mask*.*sep+*")


# ------------------------------------------------------------------ the authors' steps, restated
def authors_bs_es(template, tokenizer, roberta=False):
    """train.py, 'if model_args.mask_embedding_sentence:': the template's text before / after the sentence (for a
    model named roberta, the text before is stripped: 'remove empty block')."""
    t = (template.replace("*mask*", tokenizer.mask_token).replace("*sep+*", "").replace("*cls*", "")
         .replace("*sent_0*", " "))
    before, after = t.split(" ")
    before = before.replace("_", " ")
    return before.strip() if roberta else before, after.replace("_", " ")


def authors_rows(sentences, template, tokenizer, max_seq_length=32):
    """train.py prepare_features: bs + sentence tokens (cut at max_seq_length) + es."""
    bs_text, es_text = authors_bs_es(template, tokenizer)
    bs, es = tokenizer.encode(bs_text)[:-1], tokenizer.encode(es_text)[1:]
    return [bs + tokenizer.encode(s, add_special_tokens=False)[:max_seq_length] + es for s in sentences]


def authors_delta(encoder, template, tokenizer, length=50):
    """models.py cl_forward.get_delta: the template with no sentence, 'length' rows, the positions after bs shifted
    by the row's index; the [MASK] vectors and the template's length."""
    bs_text, es_text = authors_bs_es(template, tokenizer)
    template_ids = tokenizer.encode(bs_text + es_text)
    n_bs = len(tokenizer.encode(bs_text, add_special_tokens=False))  # model.bs in train.py
    d_input_ids = torch.tensor([template_ids]).repeat(length, 1)
    d_position_ids = torch.arange(d_input_ids.shape[1]).unsqueeze(0).repeat(length, 1)
    d_position_ids[:, n_bs + 1:] += torch.arange(length).unsqueeze(-1)
    hidden = encoder(input_ids=d_input_ids, position_ids=d_position_ids, return_dict=True).last_hidden_state
    return hidden[d_input_ids == tokenizer.mask_token_id], d_input_ids.shape[1]


def authors_views(encoder, sentences, tokenizer, delta=True):
    """models.py cl_forward with --mask_embedding_sentence(_delta, _different_template): both views padded together
    (OurDataCollatorWithPadding), the [MASK] vectors, minus delta[sentence length] of each view's template."""
    rows1, rows2 = authors_rows(sentences, AUTHORS_T1, tokenizer), authors_rows(sentences, AUTHORS_T2, tokenizer)
    flat = [r for pair in zip(rows1, rows2) for r in pair]
    width = max(map(len, flat))
    input_ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in flat])
    attention_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in flat])
    hidden = encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state
    pooled = hidden[input_ids == tokenizer.mask_token_id].view(len(sentences), 2, -1).clone()
    if delta:
        mask = attention_mask.view(len(sentences), 2, -1)
        d1, len1 = authors_delta(encoder, AUTHORS_T1, tokenizer)
        d2, len2 = authors_delta(encoder, AUTHORS_T2, tokenizer)
        pooled[:, 0] -= d1[mask.sum(-1)[:, 0] - len1]
        pooled[:, 1] -= d2[mask.sum(-1)[:, 1] - len2]
    return pooled


def authors_test_embedding(encoder, sentences, tokenizer, delta=False, rows=40):
    """evaluation.py batcher with --mask_embedding_sentence (and _delta: its get_delta, with 256 rows there; 40 here,
    as the tiny encoder has 64 positions) on sentences that end in '.', so that no period is appended."""
    text = AUTHORS_T1.replace("*mask*", tokenizer.mask_token).replace("_", " ")
    text = text.replace("*sep+*", "").replace("*cls*", "")
    batch = tokenizer([text.replace("*sent 0*", s).strip() for s in sentences], padding=True, return_tensors="pt")
    hidden = encoder(**batch, return_dict=True).last_hidden_state
    out = hidden[batch["input_ids"] == tokenizer.mask_token_id]
    if delta:
        t = AUTHORS_T1.replace("*mask*", tokenizer.mask_token).replace("*sep+*", "").replace("*cls*", "").replace(
            "*sent_0*", " ")
        bs_length = len(tokenizer.encode(t.split(" ")[0].replace("_", " ").strip())) - 2 + 1
        d = tokenizer([t.replace("_", " ").strip().replace("   ", " ")], return_tensors="pt")
        d["position_ids"] = torch.arange(d["input_ids"].shape[1]).unsqueeze(0)
        d = {k: v.repeat(rows, 1) for k, v in d.items()}
        d["position_ids"][:, bs_length:] += torch.arange(rows).unsqueeze(-1)
        dh = encoder(**d, return_dict=True).last_hidden_state[d["input_ids"] == tokenizer.mask_token_id]
        out = out - dh[batch["attention_mask"].sum(-1) - d["input_ids"].shape[1]]
    return out


# ------------------------------------------------------------------ fixtures
@pytest.fixture(params=["tiny_bert_dir", "tiny_roberta_dir"])
def setup(request):
    """A tiny random BERT, or RoBERTa (positions from 2; the empty template's from 0, as get_delta gives them)."""
    folder = request.getfixturevalue(request.param)
    tok = AutoTokenizer.from_pretrained(folder)
    model = PromptBERTModel.from_encoder(str(folder)).double().eval()
    encoder = AutoModel.from_pretrained(folder, dtype=torch.float64).eval()  # the authors' BertModel / RobertaModel
    sentences = random_sentences(6, seed=3)
    return tok, model, encoder, sentences


def two_views(tok, sentences):
    return TwoViewCollator(tok)([tok(s, truncation=True, max_length=34) for s in sentences])


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_the_shipped_templates_are_the_authors_run_sh_ones_token_for_token(tiny_bert_dir, kind):
    """BERT_TEMPLATES / ROBERTA_TEMPLATES against run.sh's unsup-bert / unsup-roberta templates as train.py makes
    token ids of them (bs: the text before the sentence with [CLS], es: the text after with [SEP]); RoBERTa on a
    byte-level BPE tokenizer, where the stripped space before the sentence matters."""
    from tiny_models import bpe_tokenizer

    tok = bpe_tokenizer() if kind == "roberta" else AutoTokenizer.from_pretrained(tiny_bert_dir)
    ours, authors = (ROBERTA_TEMPLATES, AUTHORS_ROBERTA) if kind == "roberta" else (BERT_TEMPLATES,
                                                                                    (AUTHORS_T1, AUTHORS_T2))
    for template, theirs in zip(ours, authors, strict=True):
        bs, es = authors_bs_es(theirs, tok, roberta=kind == "roberta")
        ids = TemplateIds.build(tok, template)
        assert list(ids.prefix) == tok.encode(bs)[:-1] and list(ids.suffix) == tok.encode(es)[1:], template
        assert ids.suffix[ids.mask_at] == tok.mask_token_id


def test_views_and_template_denoising_match_the_authors_code(setup):
    tok, model, encoder, sentences = setup
    batch = two_views(tok, sentences)
    with torch.no_grad():
        pooled, z = model.two_view_embeddings(batch["input_ids"], batch["attention_mask"])
        want = authors_views(encoder, sentences, tok)
    assert torch.allclose(pooled, want, rtol=0, atol=1e-12)
    # the training loss: SimCSE's MLP on the denoised vectors, cross-entropy of cos / 0.05 (cl_forward)
    mlp = model.projector(want.view(-1, want.shape[-1])).view_as(want)
    cos = torch.nn.functional.cosine_similarity(mlp[:, 0].unsqueeze(1), mlp[:, 1].unsqueeze(0), dim=-1) / 0.05
    authors = torch.nn.functional.cross_entropy(cos, torch.arange(len(sentences)))
    ours = build_loss("infonce", temperature=0.05)(z[:, 0], z[:, 1]).loss
    assert ours.item() == pytest.approx(authors.item(), rel=1e-12)


def test_without_denoising_the_views_are_the_mask_vectors(setup):
    tok, model, encoder, sentences = setup
    model.config.template_denoising = False
    batch = two_views(tok, sentences)
    with torch.no_grad():
        pooled, _ = model.two_view_embeddings(batch["input_ids"], batch["attention_mask"])
        want = authors_views(encoder, sentences, tok, delta=False)
    assert torch.allclose(pooled, want, rtol=0, atol=1e-12)
    assert not torch.allclose(pooled, authors_views(encoder, sentences, tok), atol=1e-3)  # denoising changes them


@pytest.mark.parametrize("denoise", [False, True])
def test_test_embedding_matches_the_authors_evaluation(setup, denoise):
    tok, model, encoder, sentences = setup
    sentences = [s + "." for s in sentences]
    model.config.test_template_denoising = denoise
    batch = tok(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = model.sentence_embedding(batch["input_ids"], batch["attention_mask"])
        want = authors_test_embedding(encoder, sentences, tok, delta=denoise)
    assert torch.allclose(ours, want, rtol=0, atol=1e-12)


def test_dev_scoring_denoises_as_the_authors_trainer(setup):
    """The authors' trainer scores dev through sentemb_forward, which subtracts the empty template's vector (their
    best checkpoint is chosen on denoised embeddings); their final test does not. Before, dev was scored as the
    test, so another checkpoint could be kept."""
    tok, model, encoder, sentences = setup
    batch = tok(sentences, truncation=True, max_length=34, padding=True, return_tensors="pt")
    with torch.no_grad():
        test = model.sentence_embedding(batch["input_ids"], batch["attention_mask"])
        with scoring_dev(model):
            dev = model.sentence_embedding(batch["input_ids"], batch["attention_mask"])
        assert model.scoring_dev is False  # over once scored
        want = authors_views(encoder, sentences, tok)[:, 0]  # view 1's template, denoised, dropout off
        assert torch.allclose(dev, want, rtol=0, atol=1e-12)
        assert torch.allclose(test, authors_views(encoder, sentences, tok, delta=False)[:, 0], rtol=0, atol=1e-12)
        model.config.dev_template_denoising = False
        with scoring_dev(model):
            assert torch.equal(model.sentence_embedding(batch["input_ids"], batch["attention_mask"]), test)


def test_the_trainer_scores_dev_as_the_method_does(tiny_bert_dir, sentences, tmp_path):
    from helpers import collator, tiny_args, tiny_train_dataset

    from hf_cse.trainer import ContrastiveTrainer

    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    model = PromptBERTModel.from_encoder(str(tiny_bert_dir))
    seen = []
    trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "o"), train_dataset=ds,
                                 data_collator=collator(tok), processing_class=tok,
                                 evaluator=lambda encoder: {"x": float(seen.append(encoder.model.scoring_dev) or 1)})
    assert trainer.evaluate()["eval_x"] == 1.0
    assert seen == [True] and model.scoring_dev is False


def test_denoising_gradient_follows_denoising_grad(setup):
    tok, model, _, _ = setup
    ids = model.template_ids(0)
    for grad in (True, False):
        model.config.denoising_grad = grad
        model.zero_grad()
        noise = model.template_noise(ids, torch.tensor([3, 5]))
        assert noise.requires_grad is grad


def test_roberta_positions_authors_code_from_zero_encoder_from_two(tiny_roberta_dir):
    """authors_code numbers the empty template from 0 (get_delta); encoder as RoBERTa numbers the sentence's row
    (padding_idx + 1 = 2 onwards), so its suffix tokens sit where they sit around a real sentence."""
    tok = AutoTokenizer.from_pretrained(tiny_roberta_dir)
    ids = TemplateIds.build(tok, PromptBERTConfig().template)
    _, from_zero = empty_template_batch(ids, [4], 0, "cpu")
    _, from_two = empty_template_batch(ids, [4], 2, "cpu")
    row = [*ids.prefix, *tok("a man is here", add_special_tokens=False)["input_ids"][:4], *ids.suffix]
    assert len(row) == len(ids) + 4
    sentence_positions = torch.arange(len(row)) + 2  # RoBERTa's create_position_ids_from_input_ids, no padding
    suffix = sentence_positions[len(ids.prefix) + 4:]
    assert from_two[0, len(ids.prefix):].tolist() == suffix.tolist()
    assert from_zero[0, len(ids.prefix):].tolist() == (suffix - 2).tolist()


@pytest.mark.parametrize("template, said", [
    ("no sentence here {mask}", "template must be text with {sentence} exactly once"),
    ("{sentence} {sentence} {mask}", "template must be text with {sentence} exactly once"),
    ("{sentence} {x}", "and no other {placeholder}"), ("{mask} {sentence}", "template '{mask} {sentence}' puts {mask} "
                                                                           "before {sentence}; put it after")])
def test_bad_templates_fail_in_one_line(tiny_bert_dir, template, said):
    with pytest.raises(CSEError, match="^promptbert: ") as err:
        PromptBERTModel.from_encoder(str(tiny_bert_dir), template=template)
    assert said in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("template, said", [('This sentence : "{sentence}" means [MASK].', "typed out"),
                                             ('This sentence : "{sentence}" means.', "has no {mask}"),
                                             ('This [MASK] : "{sentence}" means{mask}.', "typed out")])
def test_an_encoder_template_must_say_where_the_mask_is_read(tiny_bert_dir, template, said):
    """With a mask token in the tokenizer, no {mask} (or a [MASK] typed out) would be read at the last token."""
    with pytest.raises(CSEError, match=said) as err:
        PromptBERTModel.from_encoder(str(tiny_bert_dir), template2=template)
    assert err.value.fields == ("template2",) and "write {mask}" in str(err.value)


def test_a_decoder_template_without_mask_is_still_read_at_its_last_token(tiny_llama_dir):
    """The tiny decoder's tokenizer has a [MASK]; the decoder still reads PromptEOL's template at its last token."""
    promptbert = PromptBERTModel.from_encoder(str(tiny_llama_dir), template=PROMPTEOL, template2=PROMPTEOL)
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    assert promptbert.template_ids(0) == TemplateIds.build(tok, PROMPTEOL, decoder=True)


def test_a_template_that_fills_the_positions_is_refused_early(tiny_bert_dir):
    """64 positions: 70 words of template leave none for the sentence (the first step failed inside BERT)."""
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    config = PromptBERTConfig(template=" ".join(["word"] * 70) + ' "{sentence}" means{mask}.')
    with pytest.raises(CSEError, match="template takes 81 tokens .* 64 positions.*shorten template") as err:
        PromptBERTModel.check_with_tokenizer(config, tok, AutoConfig.from_pretrained(tiny_bert_dir))
    assert err.value.fields == ("template",)


def test_little_room_and_cut_sentences_are_said(tiny_bert_dir, caplog):
    """A template that leaves 7 of 64 positions is warned when tokenized; training sentences cut inside a template,
    once, naming max_seq_length; at test time (the export's check, run_eval) the flag would not apply: not said."""
    with caplog.at_level(logging.WARNING, logger="hf_cse.models.promptbert.model"):
        PromptBERTModel.from_encoder(str(tiny_bert_dir), template=" ".join(["word"] * 50) + ' "{sentence}" x{mask}.')
    assert "takes 57 tokens of the encoder's 64 positions and leaves 7 token(s)" in caplog.text
    caplog.clear()
    model, tok = PromptBERTModel.from_encoder(str(tiny_bert_dir)).eval(), AutoTokenizer.from_pretrained(tiny_bert_dir)
    short = tok(random_sentences(2), padding=True, return_tensors="pt")
    long = tok(["word " * 70] * 2, truncation=True, max_length=64, return_tensors="pt")
    caplog.clear()  # building the model logs its pooling (INFO, where an earlier test left hf_cse at INFO)
    with caplog.at_level(logging.WARNING, logger="hf_cse.models.promptbert.model"), torch.no_grad():
        model.sentence_embedding(short["input_ids"], short["attention_mask"])
        model.sentence_embedding(long["input_ids"], long["attention_mask"])
        assert not caplog.text
        model.train()
        for _ in range(2):
            model.sentence_embedding(long["input_ids"], long["attention_mask"])
    assert caplog.text.count("sentences of up to 62 tokens are cut to 50 inside template") == 1
    assert "max_seq_length 52 or less" in caplog.text


def test_saved_model_reloads_with_its_templates(tiny_bert_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = PromptBERTModel.from_encoder(str(tiny_bert_dir), template2='The sentence : "{sentence}" means{mask}.')
    model.save_pretrained(tmp_path)
    again = AutoModel.from_pretrained(tmp_path).eval()
    assert again.config.template_token_ids == model.config.template_token_ids
    batch = tok(random_sentences(4), padding=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(again.sentence_embedding(**batch), model.eval().sentence_embedding(**batch))


def test_an_encoder_saved_without_its_tokenizer_leaves_the_templates_to_the_runs(tiny_bert_dir, tmp_path):
    """From a folder of weights only, the templates were tokenized with the stand-in tokenizer transformers loads
    there (each word an [UNK]); now they wait for the tokenizer of the run, which tokenizes them as from the full
    folder."""
    AutoModel.from_pretrained(tiny_bert_dir).save_pretrained(tmp_path / "weights_only")
    model = PromptBERTModel.from_encoder(str(tmp_path / "weights_only"))
    with pytest.raises(ValueError, match="the templates are not tokenized yet"):
        model.template_ids(0)
    model.use_tokenizer(AutoTokenizer.from_pretrained(tiny_bert_dir))
    assert model.config.template_token_ids == PromptBERTModel.from_encoder(str(tiny_bert_dir)).config.template_token_ids


def test_template_without_mask_is_read_at_its_own_last_token(tiny_llama_dir):
    """PromptEOL's template on a decoder: the representation is the closing quote, not the [SEP] the tokenizer adds."""
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    ids = TemplateIds.build(tok, 'This sentence : "{sentence}" means in one word:"', decoder=True)
    assert ids.suffix[ids.mask_at] == tok.convert_tokens_to_ids('"')
    assert ids.suffix[-1] == tok.sep_token_id and ids.mask_at == len(ids.suffix) - 2


def test_cached_mode_gives_the_full_batch_gradient(tiny_bert_dir):
    """GradCache (--cached_minibatch_size) on PromptBERT views, denoising included, dropout 0: the plain step's
    loss and gradient (each row's denoising depends on its own length only)."""
    from hf_cse.cached import cached_step
    from hf_cse.objectives import build_objectives, compute_objectives

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = PromptBERTModel.from_encoder(str(tiny_bert_dir), dropout=0.0).double().train()
    batch = two_views(tok, random_sentences(12, seed=5))
    objectives = build_objectives(model.config)
    loss_fn = lambda emb: compute_objectives(objectives, emb)  # noqa: E731

    def grads():
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    model.zero_grad()
    plain, _ = loss_fn(model(**batch).embeddings)
    plain.backward()
    want = grads()
    model.zero_grad()
    loss, _ = cached_step(model, batch, 4, loss_fn, backward=lambda s: s.backward())
    got = grads()
    assert loss.item() == pytest.approx(plain.item(), rel=1e-10)
    assert got.keys() == want.keys() and want
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("preset, authors", [
    ("promptbert_bert_base", (AUTHORS_T1, AUTHORS_T2)),
    ("promptbert_roberta_base", ("*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*",
                                 "*cls*_The_sentence_:_'_*sent_0*_'_means*mask*.*sep+*")),
])
def test_presets_hold_the_authors_run_sh_settings(preset, authors):
    """run.sh unsup-bert / unsup-roberta: batch 256, lr 1e-5, 1 epoch, temperature 0.05, the MLP in training only,
    32 sentence tokens; the templates' text before and after the sentence is the authors' bs / es (train.py; RoBERTa's
    bs stripped), with the mask token in place of {mask}."""
    from types import SimpleNamespace

    from hf_cse.presets import PRESETS

    values = PRESETS[preset]
    assert (values["per_device_train_batch_size"], values["learning_rate"], values["num_train_epochs"],
            values["temperature"], values["mlp_only_train"], values["max_seq_length"]) == (256, 1e-5, 1, 0.05, True,
                                                                                          34)
    config = PromptBERTConfig(**{k: values[k] for k in ("template", "template2") if k in values})
    fake = SimpleNamespace(mask_token="<mask>")
    roberta = "roberta" in preset  # byte-level BPE: spaces are tokens, so the text must agree exactly
    for ours, theirs in zip((config.template, config.template2), authors):
        bs, es = authors_bs_es(theirs, fake)
        before, after = ours.split("{sentence}")
        after = after.replace("{mask}", "<mask>")
        if roberta:
            assert (before, after) == (bs.strip(), es)
        else:  # BERT's tokenizer splits on whitespace: equal up to spaces
            assert (before.split(), after.split()) == (bs.split(), es.split())


@pytest.mark.parametrize("kind, differ", [("tiny_bert_dir", False), ("tiny_roberta_dir", True)])
def test_denoising_positions_matter_for_roberta_only(request, kind, differ):
    folder = request.getfixturevalue(kind)
    model = PromptBERTModel.from_encoder(str(folder)).double().eval()
    ids, lengths = model.template_ids(0), torch.tensor([2, 6])
    with torch.no_grad():
        authors = model.template_noise(ids, lengths)
        model.config.denoising_positions = "encoder"
        encoder = model.template_noise(ids, lengths)
    assert torch.equal(authors, encoder) is not differ


def test_untrained_model_is_a_prompt_pooling_for_the_evaluator(tiny_bert_dir):
    """Without training, PromptBERTModel.from_encoder is the encoder's prompt representation, and hf_cse's evaluation
    encoder (STS, transfer, MTEB) scores exactly that: view 1's template at [MASK], no denoising."""
    import numpy as np

    from hf_cse.evaluation.encoder import SentenceEncoder

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = PromptBERTModel.from_encoder(str(tiny_bert_dir)).eval()
    encoder = AutoModel.from_pretrained(tiny_bert_dir).eval()
    sentences = [s + "." for s in random_sentences(5, seed=2)]
    got = SentenceEncoder(model, tok, show_progress_bar=False).encode(sentences)
    with torch.no_grad():
        want = authors_test_embedding(encoder, sentences, tok)
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-5)


# ------------------------------------------------------------------ decoders: the pooler
def test_a_decoders_pooler_is_last_by_the_methods_rule_and_cls_is_refused_in_promptberts_words(tiny_llama_dir):
    """PromptBERT reads the template's token; the pooler decides only whether the head applies at test time. A
    decoder gets last where none is given; an explicit first-token pooler is refused without the words 'reads the
    first token' (SimCSE's reason, untrue for PromptBERT)."""
    from hf_cse.models.pooling import choose_pooling

    llama = AutoConfig.from_pretrained(tiny_llama_dir)
    papers = choose_pooling(None)
    assert PromptBERTModel.pooling_when_unset(papers, llama).pooler_type == "last"
    assert PromptBERTModel.pooling_when_unset(papers, AutoConfig.for_model("bert")).pooler_type == "cls"
    with pytest.raises(CSEError, match="PromptBERT reads the template's token") as err:
        PromptBERTConfig(encoder_config=llama, pooler_type="cls")
    assert "reads the first token" not in str(err.value) and err.value.fields == ("pooler_type",)


@pytest.mark.slow
def test_the_command_line_trains_promptbert_on_a_decoder_with_the_methods_pooler(tiny_llama_dir, tmp_path):
    """run_unsup.py --method promptbert on a decoder was refused ("pooler 'cls' reads the first token"): the command
    line now takes the pooler from_encoder takes (PromptBERTModel.pooling_when_unset)."""
    from hf_cse.cli import train as train_cli

    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(40)) + "\n")
    out = tmp_path / "out"
    train_cli.train_from_args(["--model_name_or_path", str(tiny_llama_dir), "--train_file", str(train),
                               "--method", "promptbert", "--max_steps", "1", "--per_device_train_batch_size", "8",
                               "--output_dir", str(out), "--use_cpu", "--disable_tqdm", "true", "--precision", "fp32"])
    config = PromptBERTConfig.from_pretrained(out)
    assert config.pooler_type == "last" and config.pooler_source.startswith("PromptBERT reads the template's token")


def test_the_pooling_line_names_the_token_a_decoder_reads(tiny_llama_dir, caplog):
    """The log said "the template's [MASK] token" for PromptEOL on a decoder, which is read at its last token."""
    with caplog.at_level(logging.INFO, logger="hf_cse.models.base"):
        PromptBERTModel.from_encoder(str(tiny_llama_dir), template=PROMPTEOL, template2=PROMPTEOL)
    [said] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pooling: ")]
    assert said.startswith("pooling: the template's last token (PromptBERT);")
    assert PromptBERTModel.own_representation({"template": PROMPTEOL}) == "the template's last token (PromptBERT)"
    assert PromptBERTModel.own_representation(PromptBERTConfig()) == "the template's [MASK] token (PromptBERT)"


def test_the_cards_pooler_source_row_says_the_pooler_decides_only_the_head(tiny_bert_dir):
    """The card's hyperparameter table said `pooler_source | the papers' [CLS] pooling` for a plain BERT, whose
    PromptBERT embedding is the template's [MASK] token."""
    from hf_cse.model_card.sections import hyperparameters_section

    config = PromptBERTModel.from_encoder(str(tiny_bert_dir)).config
    [row] = [line for line in hyperparameters_section(config, {}).splitlines() if line.startswith("| `pooler_source`")]
    assert ("| PromptBERT reads the template's token; pooler_type cls (from the papers' [CLS] pooling" in row
            and "decides only whether the projection head applies at test time |" in row)


@pytest.mark.parametrize("text,tested", [
    ("a man plays", "a man plays."), ("a man plays.", "a man plays."), ("does he play?", "does he play?"),
    ('he said "play"', 'he said "play"'), ("the players'", "the players'"), ("a man plays  ", "a man plays."),
    ("", ""), ("   ", "   "), ("he plays!", "he plays!."),
])
def test_a_test_sentence_ends_with_a_period_as_in_the_authors_evaluation(text, tested):
    """evaluation.py: ``if len(s) > 0 and s[-1] not in '.?"\\'': s += '.'`` (an exclamation mark is not among them)."""
    from hf_cse.models.promptbert.templates import ended_with_period

    assert ended_with_period(text) == tested
