"""SentenceEncoder on a tiny random BERT: batching == naive encoding, state restore, every model kind."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from eval_helpers import WORDS, make_tiny_bert, write_toy_senteval
from transformers import AutoConfig, AutoModel, AutoTokenizer

from hf_cse.evaluation import data as D
from hf_cse.evaluation import dev_metrics, evaluate_sts
from hf_cse.evaluation.encoder import SentenceEncoder, detect_kind

SENTS = [
    "the dog runs in the park",
    "a man plays",
    "the dog runs in the park",  # duplicate
    "what is the old river",
    "xylophone quizzically",  # word-pieces
    " ".join(WORDS),  # long
    "a man plays",
    "blue",
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert_eval"))


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return AutoModel.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir)


def naive(model, tok, sentences, pooler, max_length=512):
    """One sentence at a time, no padding, pooling written out by hand."""
    was = model.training
    model.eval()
    out = []
    with torch.no_grad():
        for s in sentences:
            f = tok([s], return_tensors="pt", truncation=True, max_length=max_length)
            o = model(**f, output_hidden_states=True)
            hs = o.hidden_states
            if pooler == "cls":
                v = o.pooler_output[0]
            elif pooler == "cls_before_pooler":
                v = hs[-1][0, 0]
            elif pooler == "avg":
                v = hs[-1][0].mean(0)
            elif pooler == "avg_first_last":
                v = ((hs[1][0] + hs[-1][0]) / 2).mean(0)
            else:
                v = ((hs[-2][0] + hs[-1][0]) / 2).mean(0)
            out.append(v.numpy())
    model.train(was)
    return np.stack(out)


@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2"])
def test_batched_equals_naive(tiny, pooler):
    model, tok = tiny
    enc = SentenceEncoder(model, tok, pooler=pooler, batch_size=3, show_progress_bar=False)
    got = enc.encode(SENTS)
    assert got.dtype == np.float32 and got.shape == (len(SENTS), 32)
    np.testing.assert_allclose(got, naive(model, tok, SENTS, pooler), atol=1e-5)


@pytest.mark.parametrize("copy_bytes", [1, 32 * 4 * 3])  # a copy to the host after each batch / every 3 rows
def test_embeddings_copied_to_the_host_in_pieces_land_in_their_rows(tiny, monkeypatch, copy_bytes):
    """Embeddings wait on the device until HOST_COPY_BYTES of them gathered (one copy, one wait on a GPU): copied
    after every batch or every few, each row is its sentence's, as encoding them in one copy gives. A waiting
    embedding holds only its own memory (a view of the CLS pooler's rows would keep all hidden states alive)."""
    from hf_cse.evaluation import encoding_batches

    model, tok = tiny
    whole = SentenceEncoder(model, tok, pooler="cls_before_pooler", batch_size=2, show_progress_bar=False).encode(
        SENTS)
    copies, views = [], []
    copy = encoding_batches.copy_to_host

    def counted_copy(pending, out, n_texts):
        copies.append(len(pending))
        views.extend(emb.untyped_storage().nbytes() > emb.numel() * 4 for _, emb in pending)
        return copy(pending, out, n_texts)

    monkeypatch.setattr(encoding_batches, "copy_to_host", counted_copy)
    monkeypatch.setattr(encoding_batches, "HOST_COPY_BYTES", copy_bytes)
    got = SentenceEncoder(model, tok, pooler="cls_before_pooler", batch_size=2, show_progress_bar=False).encode(SENTS)
    assert len(views) == sum(copies) and not any(views)
    np.testing.assert_array_equal(got, whole)
    batches = -(-len(set(SENTS)) // 2)
    assert sum(copies) == batches and len([c for c in copies if c]) == (batches if copy_bytes == 1 else 2)


def test_dedup_sort_and_default_pooler(tiny):
    model, tok = tiny
    enc = SentenceEncoder(model, tok, batch_size=2, show_progress_bar=False)
    assert enc.kind == "hf" and enc.effective_pooler == "cls_before_pooler" and enc.max_length == 512
    calls = []
    orig = model.forward

    def spy(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape)
        return orig(*args, **kwargs)

    model.forward = spy
    try:
        got = enc.encode(SENTS)
    finally:
        del model.forward
    assert sum(s[0] for s in calls) == len(set(SENTS))  # every distinct sentence encoded once
    assert [s[1] for s in calls] == sorted((s[1] for s in calls), reverse=True)  # length-sorted batches
    np.testing.assert_array_equal(got[0], got[2])
    np.testing.assert_allclose(got, naive(model, tok, SENTS, "cls_before_pooler"), atol=1e-5)


def test_no_short_truncation_and_max_length(tiny):
    model, tok = tiny
    long = [" ".join(WORDS * 2)]  # > 100 tokens
    assert len(tok(long[0])["input_ids"]) > 64
    full = SentenceEncoder(model, tok, pooler="avg", show_progress_bar=False).encode(long)
    np.testing.assert_allclose(full, naive(model, tok, long, "avg"), atol=1e-5)
    cut = SentenceEncoder(model, tok, pooler="avg", max_length=32, show_progress_bar=False).encode(long)
    np.testing.assert_allclose(cut, naive(model, tok, long, "avg", max_length=32), atol=1e-5)
    assert np.abs(full - cut).max() > 1e-3


def test_mpnet_limit_has_the_position_offset_and_gets_no_segment_ids(tiny):
    """MPNet reserves two position ids (as RoBERTa) and its forward takes no token_type_ids, though a BERT-style
    tokenizer returns them: the limit is max_position_embeddings - 2 and the encoding runs."""
    from transformers import MPNetConfig, MPNetModel

    _, tok = tiny
    torch.manual_seed(0)
    model = MPNetModel(MPNetConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=64, max_position_embeddings=40, pad_token_id=0))
    enc = SentenceEncoder(model, tok, pooler="avg", show_progress_bar=False)
    assert enc.max_length == 38
    long = [" ".join(WORDS * 2)]  # longer than the limit: truncated, not an index error
    got = enc.encode(long + SENTS[:2])
    assert got.shape == (3, 32) and np.isfinite(got).all()
    with pytest.raises(ValueError, match=r"max_length must be in \[1, 38\]"):
        SentenceEncoder(model, tok, max_length=39, show_progress_bar=False)


def test_restores_train_state_and_disables_dropout(tiny):
    model, tok = tiny
    model.train()
    model.encoder.layer[0].eval()  # a mixed state must come back exactly
    before = {name: m.training for name, m in model.named_modules()}
    enc = SentenceEncoder(model, tok, pooler="avg", show_progress_bar=False)
    first, second = enc.encode(SENTS), enc.encode(SENTS)
    np.testing.assert_array_equal(first, second)  # dropout was off during encoding
    assert {name: m.training for name, m in model.named_modules()} == before
    model.eval()


def test_sentence_transformers_folder(tiny_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tiny_dir), device="cpu")  # Transformer + mean pooling
    st_dir = tmp_path / "st"
    st.save(str(st_dir))
    assert detect_kind(str(st_dir)) == "sentence_transformers"
    enc = SentenceEncoder.from_pretrained(st_dir, show_progress_bar=False, device="cpu")
    # its Pooling module's mean, in hf_cse's name (was "model": mean and CLS looked alike in the results)
    assert enc.kind == "sentence_transformers" and enc.effective_pooler == "avg (sentence-transformers Pooling)"
    assert enc.describe()["pooler"] == enc.effective_pooler
    np.testing.assert_allclose(enc.encode(SENTS), st.encode(SENTS, convert_to_numpy=True), atol=1e-5)
    short = SentenceEncoder(enc.model, max_length=4, show_progress_bar=False)
    got_short = short.encode(SENTS)
    assert enc.model.max_seq_length == st.max_seq_length  # restored
    st.max_seq_length = 4
    np.testing.assert_allclose(got_short, st.encode(SENTS, convert_to_numpy=True), atol=1e-5)
    assert np.abs(got_short - enc.encode(SENTS)).max() > 1e-3
    over = SentenceEncoder.from_pretrained(
        st_dir, pooler="cls_before_pooler", show_progress_bar=False, device="cpu"
    )
    model, tok = AutoModel.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir)
    np.testing.assert_allclose(over.encode(SENTS), naive(model, tok, SENTS, "cls_before_pooler"), atol=1e-5)


def test_a_sentence_transformers_models_own_pooling_is_recorded_as_what_it_computes(tiny_dir, tmp_path):
    """CLS pooling is recorded as the raw [CLS] pooler it equals (what a plain checkpoint's cls_before_pooler scores
    are labelled), with the modules after it; a module of its own without a Pooling module, by its class name."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    word = Transformer(str(tiny_dir))
    SentenceTransformer(modules=[word, Pooling(32, pooling_mode="cls"), Normalize()], device="cpu").save(
        str(tmp_path / "cls"))
    enc = SentenceEncoder.from_pretrained(tmp_path / "cls", show_progress_bar=False, device="cpu")
    assert enc.describe()["pooler"] == "cls_before_pooler (sentence-transformers Pooling, Normalize)"
    raw = naive(AutoModel.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir), SENTS,
                "cls_before_pooler")
    np.testing.assert_allclose(enc.encode(SENTS), raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-5)

    class FirstToken(torch.nn.Module):
        def forward(self, features):
            return {**features, "sentence_embedding": features["token_embeddings"][:, 0]}

    own = SentenceEncoder(SentenceTransformer(modules=[word, FirstToken()], device="cpu"), show_progress_bar=False)
    assert own.effective_pooler == "sentence-transformers modules FirstToken"


def test_hf_cse_checkpoint(tiny_dir, tmp_path):
    from hf_cse.models import SimCSEModel

    cse = SimCSEModel.from_encoder(str(tiny_dir))
    out = tmp_path / "cse"
    cse.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(out)
    assert detect_kind(str(out)) == "hf_cse"
    enc = SentenceEncoder.from_pretrained(out, show_progress_bar=False, device="cpu")
    assert enc.kind == "hf_cse" and enc.effective_pooler == "cls_before_pooler"
    model, tok = AutoModel.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir)
    raw = naive(model, tok, SENTS, "cls_before_pooler")
    np.testing.assert_allclose(enc.encode(SENTS), raw, atol=1e-5)
    # pooler "cls" applies the trained MLP of the hf_cse model
    mlp = SentenceEncoder.from_pretrained(out, pooler="cls", show_progress_bar=False, device="cpu")
    with torch.no_grad():
        expected = enc.model.projector(torch.from_numpy(raw)).numpy()
    np.testing.assert_allclose(mlp.encode(SENTS), expected, atol=1e-5)
    # the live (in-memory) model the trainer passes
    live = SentenceEncoder(cse, tok, show_progress_bar=False)
    assert live.kind == "hf_cse"
    np.testing.assert_allclose(live.encode(SENTS), raw, atol=1e-5)


def test_bad_model_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SentenceEncoder.from_pretrained(tmp_path / "no_such_model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a model folder"):
        SentenceEncoder.from_pretrained(tmp_path / "empty")
    with pytest.raises(ValueError, match="Valid poolers"):
        SentenceEncoder(torch.nn.Linear(2, 2), object(), pooler="maximum")


def test_an_encoder_folder_without_its_tokenizer_is_refused_not_scored_with_a_stand_in(tiny_dir, tmp_path):
    """A folder of weights only: transformers loads a stand-in tokenizer of BERT's 5 special tokens from it, and every
    sentence was scored as [CLS] [UNK]... [SEP]. The tokenizer passed in is scored with."""
    from hf_cse.checks import InputError

    AutoModel.from_pretrained(tiny_dir).save_pretrained(tmp_path / "weights_only")
    with pytest.raises(InputError) as err:
        SentenceEncoder.from_pretrained(tmp_path / "weights_only", device="cpu")
    assert str(err.value) == (
        f"{tmp_path / 'weights_only'} holds no tokenizer (what transformers loads from it is a stand-in BertTokenizer "
        "of only 5 special token(s)): save the model's tokenizer into it (tokenizer.save_pretrained), or pass the "
        "tokenizer: SentenceEncoder(model, tokenizer).")
    model = AutoModel.from_pretrained(tmp_path / "weights_only")
    given = SentenceEncoder(model, AutoTokenizer.from_pretrained(tiny_dir), show_progress_bar=False)
    assert given.encode(["the dog runs"]).shape == (1, 32)


def test_another_models_tokenizer_of_a_larger_vocabulary_is_refused_in_one_line(tiny_dir, tmp_path):
    """A folder of the tiny model's weights beside the packaged MiniLM's tokenizer (30,522 tokens for 189 embedding
    rows): scoring failed with torch's IndexError deep in the embedding layer."""
    from hf_cse.checks import InputError
    from hf_cse.encoders import default_encoder

    mixed = tmp_path / "mixed"
    AutoModel.from_pretrained(tiny_dir).save_pretrained(mixed)
    AutoTokenizer.from_pretrained(default_encoder()).save_pretrained(mixed)
    encoder = SentenceEncoder.from_pretrained(mixed, device="cpu", show_progress_bar=False)
    rows = AutoConfig.from_pretrained(tiny_dir).vocab_size
    with pytest.raises(InputError, match=rf"^{encoder.name}: its tokenizer gives token id \d+, past the model's {rows} "
                                         r"token embeddings \(the rows of its embedding matrix\): the tokenizer "
                                         r"is another model's\. Save the model's own tokenizer beside its weights"):
        encoder.encode(["the weather is lovely today"])


def test_pooler_cls_of_an_encoder_saved_without_its_pooler_layer_is_refused(tiny_dir, tmp_path):
    """transformers drew the missing layer at random: the score changed from one run to the next, without a word."""
    from transformers import BertModel

    BertModel(AutoConfig.from_pretrained(tiny_dir), add_pooling_layer=False).save_pretrained(tmp_path / "no_pooler")
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(tmp_path / "no_pooler")
    with pytest.raises(ValueError, match=r"pooler cls reads the pooler layer of .*no_pooler, whose weights it does not "
                                         r"hold \(pooler\.dense\.bias, \.\.\..*use pooler cls_before_pooler"):
        SentenceEncoder.from_pretrained(tmp_path / "no_pooler", pooler="cls", device="cpu")
    for pooler in (None, "cls_before_pooler", "avg"):
        assert SentenceEncoder.from_pretrained(tmp_path / "no_pooler", pooler=pooler, device="cpu").encode(["a"]).size
    assert SentenceEncoder.from_pretrained(tiny_dir, pooler="cls", device="cpu").effective_pooler == "cls"


def test_dev_metrics(tiny_dir, tmp_path):
    from hf_cse.models import SimCSEModel

    D.clear_cache()
    root = write_toy_senteval(tmp_path / "se")
    cse = SimCSEModel.from_encoder(str(tiny_dir))
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    cse.train()
    out = dev_metrics(cse, tok, root)
    assert cse.training and all(m.training for m in cse.modules())
    assert set(out) == {"stsb_spearman", "sickr_spearman", "avg_sts"}
    ref = evaluate_sts(SentenceEncoder(cse, tok, show_progress_bar=False), None, root, mode="dev")
    assert out["stsb_spearman"] == pytest.approx(ref["STSBenchmark"])
    assert out["sickr_spearman"] == pytest.approx(ref["SICKRelatedness"])
    assert out["avg_sts"] == pytest.approx((out["stsb_spearman"] + out["sickr_spearman"]) / 2)
    assert -100 <= out["stsb_spearman"] <= 100
    hits = D.load_sts.cache_info().hits
    assert dev_metrics(cse, tok, root, tasks=("STSBenchmark",)).keys() == {"stsb_spearman", "avg_sts"}
    assert D.load_sts.cache_info().hits > hits  # parsed dev data re-used
    with pytest.raises(ValueError, match="no dev split"):
        dev_metrics(cse, tok, root, tasks=("STS12",))


def test_a_method_embedding_its_own_token_is_described_by_it(tiny_dir, tmp_path):
    """PromptBERT's results said pooler cls_before_pooler only, though its embedding is the template's [MASK] token
    (the pooler decides only whether the head applies): the results name the representation too."""
    from hf_cse.models import PromptBERTModel, SimCSEModel

    for cls, out in ((PromptBERTModel, tmp_path / "prompt"), (SimCSEModel, tmp_path / "simcse")):
        cls.from_encoder(str(tiny_dir)).save_pretrained(out)
        AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(out)
    described = SentenceEncoder.from_pretrained(tmp_path / "prompt", show_progress_bar=False, device="cpu").describe()
    assert described["representation"] == PromptBERTModel.own_representation() == \
        "the template's [MASK] token (PromptBERT)"
    assert described["pooler"] == "cls_before_pooler"  # what run_eval's pooler and the export's check compare
    plain = SentenceEncoder.from_pretrained(tmp_path / "simcse", show_progress_bar=False, device="cpu").describe()
    assert "representation" not in plain


def test_a_left_padding_tokenizer_scores_a_gpt2_as_each_sentence_alone(tmp_path, caplog):
    """GPT-2 numbers its learned positions from the start of the padded row: with the user's left-padding tokenizer
    a sentence's embedding depended on the longest other sentence of its batch (by 2.3 on a tiny GPT-2). The encoder
    pads its own copy of the tokenizer on the right (said once); the caller's tokenizer is left as given."""
    from tiny_models import make_tiny_gpt2

    folder = make_tiny_gpt2(tmp_path / "gpt2", padding_side="left")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    backend = tokenizer.backend_tokenizer.padding
    encoder = SentenceEncoder(AutoModel.from_pretrained(folder), tokenizer, pooler="avg", show_progress_bar=False)
    alone = encoder.encode(["the cat sat"])
    beside = encoder.encode(["the cat sat", "a much longer sentence is here with many many words in it"])
    assert np.allclose(alone[0], beside[0], atol=1e-5)
    assert "padding on the right" in caplog.text
    assert tokenizer.padding_side == "left" and tokenizer.init_kwargs.get("padding_side") == "left"
    assert tokenizer.backend_tokenizer.padding == backend  # its backend too (a fast tokenizer pads there)


def test_a_pooler_that_changes_nothing_on_a_promptbert_model_is_refused_and_its_token_is_recorded(tiny_dir):
    """PromptBERT embeds its template's [MASK] whatever the pooler: --pooler avg scored the same to every digit and
    results.json recorded pooler avg, without the representation (a review found it)."""
    from hf_cse.errors import CSEError
    from hf_cse.models.promptbert import PromptBERTModel

    model = PromptBERTModel.from_encoder(str(tiny_dir))
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model.use_tokenizer(tok)
    with pytest.raises(CSEError, match=r"embeds the template's \[MASK\] token \(PromptBERT\) whatever the pooler"):
        SentenceEncoder(model, tok, pooler="avg", show_progress_bar=False)
    raw = SentenceEncoder(model, tok, pooler="cls_before_pooler", show_progress_bar=False)
    headed = SentenceEncoder(model, tok, pooler="cls", show_progress_bar=False)
    assert "[MASK]" in raw.describe()["representation"] and raw.describe()["pooler"] == "cls_before_pooler"
    assert not np.allclose(raw.encode(SENTS), headed.encode(SENTS))  # the two it takes differ: the head or none


def test_a_promptbert_test_sentence_ends_with_a_period_but_not_while_the_trainer_scores_dev(tiny_dir):
    """PromptBERT's authors' evaluation.py ends a test sentence with '.', their trainer scores dev on the sentence as
    it is: the encoder does the first (run_eval, MTEB), in scoring_dev the second; the results record the edit, and
    sentences prepared one way are prepared again for the other."""
    from hf_cse.evaluation.dev import scoring_dev
    from hf_cse.models.promptbert import PromptBERTModel

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = PromptBERTModel.from_encoder(str(tiny_dir), dev_template_denoising=False).eval()  # only the text differs
    model.use_tokenizer(tok)
    encoder = SentenceEncoder(model, tok, show_progress_bar=False)
    bare, ended = "the cat sat on the mat", "the cat sat on the mat."
    tested = encoder.encode([bare, ended])
    assert np.allclose(tested[0], tested[1], atol=1e-6) and encoder.describe()["text_edit"] == "ended_with_period"
    prepared = encoder.prepare([bare, ended])
    with scoring_dev(model):
        scored = encoder.encode([bare, ended])
        assert not prepared.fits(encoder)
    assert not np.allclose(scored[0], scored[1], atol=1e-3) and np.allclose(scored[1], tested[1], atol=1e-6)
    model.config.test_sentence_period = False
    assert np.allclose(encoder.encode([bare]), scored[:1], atol=1e-6) and "text_edit" not in encoder.describe()


def test_a_pooler_on_a_sentence_transformers_model_says_which_of_its_modules_it_skips(tiny_dir, caplog):
    """A pooler pools the encoder's output in place of the model's modules after it: a Dense head was skipped without
    a word, and cls then read BERT's own pooler layer, not that head (which cls applies on the run's folder)."""
    from sentence_transformers import SentenceTransformer, models

    from hf_cse.errors import CSEError

    word = models.Transformer(str(tiny_dir))
    width = word.get_word_embedding_dimension()
    st = SentenceTransformer(modules=[word, models.Pooling(width, pooling_mode="cls"), models.Dense(width, width),
                                      models.Normalize()], device="cpu")
    with pytest.raises(CSEError, match=r"pooler cls .* own pooling layer \(pooler_output\), not its Dense module, "
                                       r"which a pooler skips"):
        SentenceEncoder(st, pooler="cls", show_progress_bar=False)
    with caplog.at_level("WARNING", logger="hf_cse.evaluation.model_kind"):
        SentenceEncoder(st, pooler="avg", show_progress_bar=False)
    assert "pooler avg pools the encoder's output in place of the model's own modules: its Dense, Normalize are not " \
           "applied" in caplog.text
    caplog.clear()
    plain = SentenceTransformer(modules=[word, models.Pooling(width, pooling_mode="mean")], device="cpu")
    with caplog.at_level("WARNING", logger="hf_cse.evaluation.model_kind"):
        SentenceEncoder(plain, pooler="cls", show_progress_bar=False)  # only its Pooling, which the pooler replaces
    assert "not applied" not in caplog.text
