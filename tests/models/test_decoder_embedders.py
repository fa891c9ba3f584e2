"""Decoder (LLM) embedders: last-token pooling with either padding side, bidirectional attention through
transformers' ``is_causal`` (LLM2Vec), an instruction prompt in training, evaluation and export, and a tiny
Llama trained with LoRA + last-token pooling + bf16 weights whose export matches hf_cse in sentence-transformers."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from helpers import random_sentences
from transformers import AutoTokenizer, MambaConfig

from hf_cse.cli import train as train_cli
from hf_cse.evaluation.encoder import SentenceEncoder
from hf_cse.models import SimCSEModel
from hf_cse.models.pooling import pool


def test_last_pooling_reads_the_last_real_token_with_either_padding_side():
    hidden = torch.arange(2 * 5 * 3, dtype=torch.float32).view(2, 5, 3)
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    torch.testing.assert_close(pool("last", right, hidden), hidden[[0, 1], [2, 4]])
    torch.testing.assert_close(pool("last", left, hidden), hidden[[0, 1], [4, 4]])


@pytest.mark.parametrize("bidirectional", [False, True])
def test_llama_left_and_right_padding_give_the_same_embedding(tiny_llama_dir, bidirectional):
    """RoPE attends by relative position, so the padding side leaves a sentence's vector unchanged."""
    model = SimCSEModel.from_encoder(str(tiny_llama_dir), pooler_type="last", bidirectional=bidirectional).eval()
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    texts = ["the cat sat on the old red mat today", "two dogs"]
    out = {}
    for side in ("right", "left"):
        tok.padding_side = side
        batch = tok(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            out[side] = model.sentence_embedding(batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(out["left"], out["right"], atol=1e-5, rtol=1e-4)


def _tiny_decoder_config(model_type: str):
    from transformers import AutoConfig

    common = dict(vocab_size=100, max_position_embeddings=64, pad_token_id=0)
    if model_type == "gpt2":
        return AutoConfig.for_model("gpt2", n_embd=32, n_layer=2, n_head=2, **common)
    return AutoConfig.for_model(model_type, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=8, **common)


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "gemma", "gpt2"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_bidirectional_lets_the_first_token_see_the_rest(model_type, attention):
    """Through transformers' own config.is_causal and the attention modules' is_causal flags (no model code)."""
    from transformers import AutoModel

    from hf_cse.models.loading import check_bidirectional, make_bidirectional

    config = _tiny_decoder_config(model_type)
    check_bidirectional(config)
    ids = torch.tensor([[5, 40, 41, 42, 43], [5, 40, 50, 51, 52]])  # same first two tokens, then different
    for bidirectional in (False, True):
        torch.manual_seed(0)
        encoder = AutoModel.from_config(config, attn_implementation=attention).eval()
        if bidirectional:
            assert make_bidirectional(encoder) > 0
        with torch.no_grad():  # no padding: the path where SDPA would rely on its is_causal flag alone
            first = encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[:, 0]
        assert torch.allclose(first[0], first[1], atol=1e-6) is (not bidirectional)


def test_bidirectional_and_first_token_pooling_are_refused_where_they_do_not_apply(tiny_llama_dir, tiny_bert_dir):
    with pytest.raises(ValueError, match="already attends in both directions. Drop bidirectional=True"):
        SimCSEModel.from_encoder(str(tiny_bert_dir), bidirectional=True)
    mamba = MambaConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1)
    with pytest.raises(ValueError, match="bidirectional attention is not available for 'mamba'"):
        SimCSEModel.config_class(encoder_config=mamba, pooler_type="last", bidirectional=True)
    with pytest.raises(ValueError, match="Use pooler_type avg or last"):
        SimCSEModel.from_encoder(str(tiny_llama_dir), pooler_type="cls")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")
@pytest.mark.parametrize("bidirectional", [False, True])
def test_tiny_llama_trains_with_lora_last_token_bf16_and_exports_the_same_embeddings(tiny_llama_dir, tmp_path,
                                                                                    bidirectional):
    from sentence_transformers import SentenceTransformer

    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(40)) + "\n")
    prompt = "retrieve a paraphrase : "
    out = tmp_path / "out"
    train_cli.train_from_args(["--model_name_or_path", str(tiny_llama_dir), "--train_file", str(train),
                    "--max_steps", "2",
                    "--per_device_train_batch_size", "8", "--output_dir", str(out), "--use_cpu", "--disable_tqdm",
                    "true", "--precision", "fp32", "--pooler_type", "last", "--lora_r", "4", "--torch_dtype", "bf16",
                    "--prompt", prompt, *(["--bidirectional"] if bidirectional else [])])
    model = SimCSEModel.from_pretrained(out)
    assert model.config.pooler_type == "last" and model.config.prompt == prompt
    assert next(model.encoder.parameters()).dtype == torch.bfloat16
    assert any(".lora_B." in n and p.abs().sum() > 0 for n, p in model.named_parameters())  # adapters trained
    export = out / "sentence-transformers"
    assert json.loads((export / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "lasttoken"
    st = SentenceTransformer(str(export), device="cpu")
    assert st.prompts["query"] == prompt and st.default_prompt_name == "query"
    sentences = random_sentences(5, seed=7)
    ours = SentenceEncoder.from_pretrained(str(out), device="cpu", show_progress_bar=False)
    for batch in (sentences, sentences[:1]):  # with padding, and one sentence (no padding: the causal-flag path)
        want = torch.from_numpy(ours.encode(batch))
        got = st.encode(batch, convert_to_tensor=True).float()
        cos = torch.nn.functional.cosine_similarity(got, want, dim=-1)
        assert cos.min().item() > 0.999, cos  # bf16 weights: the merged adapters are rounded to bf16
    # the prompt is part of what hf_cse encodes: without it the vectors differ
    ours.model.config.prompt = None
    assert not torch.allclose(torch.from_numpy(ours.encode(sentences[:1])), want, atol=1e-3)


def test_fast_dropout_attention_handles_grouped_query_attention():
    """Llama's 2 key/value heads for 4 query heads through hf_cse_sdpa's CPU dropout path (a dropout probability
    below 1/65536 keeps every element, so the result must be plain attention)."""
    from types import SimpleNamespace

    from hf_cse.models.fast_dropout import fast_dropout_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 5, 8, generator=g) for h in (4, 2, 2))
    module = SimpleNamespace(num_key_value_groups=2, is_causal=False, training=True)
    got, _ = fast_dropout_attention(module, q, k, v, None, dropout=1e-9)
    want = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    torch.testing.assert_close(got, want.transpose(1, 2), atol=1e-5, rtol=1e-5)


def test_gpt2s_position_limit_is_read_under_its_own_name(tmp_path):
    """GPT-2 stores its position limit as n_positions (max_position_embeddings through attribute_map): a length past it
    is refused in one line, and embedding a long sentence cuts it at the limit instead of an IndexError in torch."""
    from tiny_models import make_tiny_gpt2

    from hf_cse.checks import InputError
    from hf_cse.cli.preflight import check_max_seq_length
    from hf_cse.encoders import encoder_max_length

    folder = make_tiny_gpt2(tmp_path / "gpt2", n_positions=16)
    model = SimCSEModel.from_encoder(str(folder), pooler_type="last").eval()
    config = model.config.encoder_config
    assert encoder_max_length(config) == encoder_max_length(config.to_dict()) == 16
    with pytest.raises(InputError, match="max_seq_length 128 exceeds what the encoder .*16 positions"):
        check_max_seq_length(128, config, str(folder))
    encoder = SentenceEncoder(model, AutoTokenizer.from_pretrained(folder), show_progress_bar=False)
    long_sentence = " ".join(["the cat sat on the mat"] * 10)
    assert encoder.encode([long_sentence, "a dog"]).shape == (2, 32)


def test_cls_pooling_reads_the_first_real_token_of_a_left_padded_row():
    hidden = torch.arange(2 * 5 * 3, dtype=torch.float32).view(2, 5, 3)
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    for pooler in ("cls", "cls_before_pooler"):
        torch.testing.assert_close(pool(pooler, left, hidden), hidden[[0, 1], [2, 0]])
        torch.testing.assert_close(pool(pooler, right, hidden), hidden[:, 0])


@pytest.mark.parametrize("padding_free", [False, True])
def test_cls_embedding_of_a_left_padded_sentence_is_its_own(tiny_roberta_dir, padding_free):
    """RoBERTa numbers positions from the attention mask: with [CLS] read where the row starts, a left-padded
    sentence's embedding is the one it has alone (padded: 0.80 cosine before; padding-free: all zeros)."""
    model = SimCSEModel.from_encoder(str(tiny_roberta_dir), pooler_type="cls_before_pooler",
                                     padding_free=padding_free).eval()
    tok = AutoTokenizer.from_pretrained(tiny_roberta_dir)
    tok.padding_side = "left"
    texts = ["the cat sat on the old red mat today", "two dogs"]
    batch = tok(texts, padding=True, return_tensors="pt")
    assert batch["attention_mask"][1, 0] == 0  # the short one is padded on the left
    with torch.no_grad():
        together = model.sentence_embedding(batch["input_ids"], batch["attention_mask"])
        alone = model.sentence_embedding(**{k: v for k, v in tok(texts[1:], return_tensors="pt").items()
                                            if k in ("input_ids", "attention_mask")})
    torch.testing.assert_close(together[1:], alone, atol=1e-5, rtol=1e-4)


def test_training_pads_on_the_right_where_the_positions_count_the_padding(tmp_path):
    """GPT-2 numbers its learned positions from the padded row's start: the trainer's tokenizer (saved with the
    checkpoints and the export) pads on the right, and a sentence's last-token embedding no longer depends on its
    batch (0.33 cosine with left padding)."""
    from datasets import Dataset
    from helpers import tiny_args
    from tiny_models import make_tiny_gpt2

    from hf_cse.trainer import ContrastiveTrainer

    folder = make_tiny_gpt2(tmp_path / "gpt2", padding_side="left")
    model = SimCSEModel.from_encoder(str(folder), pooler_type="last")
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.padding_side == "left"
    ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out"), processing_class=tok,
                       train_dataset=Dataset.from_dict({"text": random_sentences(16)}))
    assert tok.padding_side == "right"
    tok.save_pretrained(tmp_path / "saved")
    assert AutoTokenizer.from_pretrained(tmp_path / "saved").padding_side == "right"
    encoder = SentenceEncoder(model.eval(), tok, show_progress_bar=False)
    texts = ["the cat sat on the old red mat today", "two dogs"]
    together, alone = encoder.encode(texts), encoder.encode(texts[1:])
    assert torch.nn.functional.cosine_similarity(torch.from_numpy(together[1:]), torch.from_numpy(alone)) > 0.9999
