"""Tiny random encoders and tokenizers built inside the tests (no downloads)."""

from __future__ import annotations

import string
from pathlib import Path

from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertModel,
    BertTokenizerFast,
    DistilBertConfig,
    DistilBertModel,
    RobertaConfig,
    RobertaModel,
)

WORDS = (
    "the a an of to in and is are was were it this that for on with as by at from be has have had "
    "not but or which one two three city river music water food team game year people time first new "
    "model sentence cat dog bird tree sun rain train car book song word language small large old young "
    "red blue green fast slow good bad happy sad house road school work play run walk eat drink see"
).split()


def write_vocab(folder: Path, pad_token_id: int = 0) -> Path:
    """A WordPiece vocab that can spell any lowercase word (letters and ##letters as fall-back); [PAD] at
    ``pad_token_id`` (0 or 1: 1 swaps it with [UNK], a RoBERTa-style pad id)."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    specials.insert(pad_token_id, specials.pop(0))
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    tokens = specials + chars + ["##" + c for c in string.ascii_lowercase + string.digits] + WORDS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "vocab.txt"
    path.write_text("\n".join(dict.fromkeys(tokens)) + "\n")
    return path


def tiny_tokenizer(folder: Path, pad_token_id: int = 0) -> BertTokenizerFast:
    tokens = write_vocab(folder, pad_token_id).read_text().split()
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True)


def make_tiny_encoder(folder: Path, kind: str = "bert", hidden: int = 32, layers: int = 2, seed: int = 0,
                      pad_token_id: int = 0) -> Path:
    """Save a random ``kind`` encoder (bert, roberta, distilbert) and a matching tokenizer in ``folder``;
    ``pad_token_id=1`` (roberta only) makes RoBERTa's own pad id, which is not 0."""
    import torch

    if pad_token_id and kind != "roberta":
        raise ValueError(f"pad_token_id {pad_token_id} is for kind='roberta' only")
    torch.manual_seed(seed)
    folder = Path(folder)
    tok = tiny_tokenizer(folder, pad_token_id)
    vocab = len(tok)
    common = dict(vocab_size=vocab, max_position_embeddings=64)
    if kind == "bert":
        model = BertModel(BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                                     intermediate_size=2 * hidden, **common))
    elif kind == "roberta":
        model = RobertaModel(RobertaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                                           intermediate_size=2 * hidden, pad_token_id=pad_token_id, bos_token_id=2,
                                           eos_token_id=3, type_vocab_size=1, vocab_size=vocab,
                                           max_position_embeddings=80))
    elif kind == "distilbert":
        model = DistilBertModel(DistilBertConfig(dim=hidden, n_layers=layers, n_heads=2, hidden_dim=2 * hidden,
                                                 pad_token_id=0, **common))
    else:
        raise ValueError(kind)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def make_tiny_mlm(folder: Path, hidden: int = 32, layers: int = 1, seed: int = 1) -> Path:
    """A random BERT masked-LM sharing the tiny vocab (a stand-in for DiffCSE's generator)."""
    import torch

    torch.manual_seed(seed)
    folder = Path(folder)
    tok = tiny_tokenizer(folder)
    model = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers,
                                       num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=64))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


SENTENCES = [
    "the cat sat on the old red mat",
    "a dog runs fast in the green park",
    "rain falls on the city and the river",
    "the team won the first game of the year",
    "people eat food and drink water at school",
    "a young bird sings a happy song in the tree",
    "the slow train was late for work",
    "this book has one large word on each page",
    "music and language are old and new at the same time",
    "the blue car is on the road to the house",
    "two small dogs play with a young cat",
    "the sun is good for the green tree",
    "three people walk to the river in the rain",
    "a new model reads the sentence word by word",
    "the sad song was not played by the team",
    "it was a bad year for the large city",
]


def make_tiny_llama(folder: Path, hidden: int = 32, layers: int = 2, seed: int = 0,
                    attention_dropout: float = 0.1) -> Path:
    """A random Llama-style decoder (RoPE, RMSNorm, SwiGLU, grouped-query attention) with the tiny WordPiece
    tokenizer, whose [SEP] ends every sentence as an end-of-sequence token would."""
    import torch
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(seed)
    folder = Path(folder)
    tok = tiny_tokenizer(folder)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                         attention_dropout=attention_dropout)
    LlamaModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def make_tiny_gpt2(folder: Path, n_positions: int = 64, padding_side: str = "right", pad_token: bool = True,
                   config_pad_token_id: int | None = None, seed: int = 0) -> Path:
    """A random GPT-2 (learned absolute positions, ``n_positions`` of them) with the tiny WordPiece tokenizer padding
    on ``padding_side``; ``pad_token=False``: a tokenizer without a padding token, as GPT-2's own (its [SEP] is the
    end-of-text token); ``config_pad_token_id``: the pad id the model's config names."""
    import torch
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(seed)
    folder = Path(folder)
    tok = tiny_tokenizer(folder)
    tok.padding_side = tok.init_kwargs["padding_side"] = padding_side
    tok.eos_token = "[SEP]"
    # no segment ids, as GPT-2's own tokenizer (GPT2Model would add the embedding of token 0 to every position)
    tok.model_input_names = tok.init_kwargs["model_input_names"] = ["input_ids", "attention_mask"]
    if not pad_token:
        tok.pad_token = None
    config = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=n_positions,
                        bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
                        pad_token_id=config_pad_token_id)
    GPT2Model(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def bert_layout_tokenizer(folder: Path) -> BertTokenizerFast:
    """The tiny vocab laid out as bert-base-uncased's: [PAD] 0, [unused0]..[unused98], [UNK] 100, [CLS] 101,
    [SEP] 102, [MASK] 103, then the rest (the special ids of the stand-in transformers builds without tokenizer
    files, 0-4, are other ones)."""
    tokens = write_vocab(folder).read_text().split()
    specials = ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    layout = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + specials
    layout += [t for t in tokens if t not in layout]
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(layout)}, do_lower_case=True)


def save_weights_only(folder: Path, tokenizer, masked_lm: bool = False, seed: int = 0) -> Path:
    """A random BERT of ``tokenizer``'s vocabulary (a masked LM with ``masked_lm``) saved in ``folder`` without its
    tokenizer: config.json and the weights only, as ``model.save_pretrained`` leaves a folder."""
    import torch

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    (BertForMaskedLM if masked_lm else BertModel)(config).save_pretrained(folder)
    return Path(folder)


def bpe_tokenizer(vocab_size: int = 300):
    """A byte-level BPE tokenizer laid out as RoBERTa's (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2: ``<s> ... </s>`` around
    each sentence), trained on :data:`SENTENCES`: ids and special tokens other than the tiny WordPiece vocab's."""
    from tokenizers import ByteLevelBPETokenizer, processors
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(SENTENCES * 4, vocab_size=vocab_size, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", mask_token="<mask>", cls_token="<s>", sep_token="</s>")


def make_tiny_bpe_roberta(folder: Path, seed: int = 0) -> Path:
    """A random RoBERTa saved with :func:`bpe_tokenizer` in ``folder``: a vocabulary of 300 ids, so the tiny
    WordPiece vocab's ids (189) all fit its embedding matrix while meaning other tokens."""
    import torch

    torch.manual_seed(seed)
    folder = Path(folder)
    tok = bpe_tokenizer()
    config = RobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
                           max_position_embeddings=80)
    RobertaModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
