"""Helpers shared by the evaluation tests (no tests here): a tiny random BERT, a toy SentEval folder,
a deterministic fake encoder. Everything is built in tmp folders; nothing is downloaded."""

from __future__ import annotations

import os
import string
import zlib
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_SENTEVAL = REPO.parent / "shared" / "data" / "senteval"

WORDS = (
    "the a man woman dog cat is are plays playing runs running eats eating on in with ball park food "
    "car red blue green big small good bad happy sad movie film great awful love hate what who where "
    "when how many city river music water tree book song old young fast slow house road school"
).split()


def write_vocab(folder: Path) -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    tokens = list(
        dict.fromkeys(specials + chars + ["##" + c for c in string.ascii_lowercase + string.digits] + WORDS)
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n")
    return tokens


def make_tiny_bert(folder: Path, seed: int = 0) -> Path:
    """A random 2-layer, 32-d BERT with a WordPiece vocab that can spell any lowercase text."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = Path(folder)
    tokens = write_vocab(folder)
    tok = BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokens),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
    )
    BertModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def random_sentence(rng: np.random.Generator, lo: int = 3, hi: int = 12) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(lo, hi + 1))))


def _write(path: Path, lines, encoding: str = "utf-8") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\n".join(lines) + "\n").encode(encoding))


def write_toy_senteval(root: Path, seed: int = 0, n_sts: int = 12, n_cls: int = 24) -> Path:
    """A complete but tiny SentEval ``data/downstream`` folder (every file the readers open)."""
    from hf_cse.evaluation.data import STS_SUBSETS

    rng = np.random.default_rng(seed)
    root = Path(root)

    def pairs(n):
        return [
            (random_sentence(rng), random_sentence(rng), float(np.round(rng.uniform(0, 5), 2)))
            for _ in range(n)
        ]

    for year, subsets in STS_SUBSETS.items():
        for sub in subsets:
            rows = pairs(n_sts)
            folder = root / "STS" / f"{year}-en-test"
            _write(folder / f"STS.input.{sub}.txt", [f"{a}\t{b}" for a, b, _ in rows])
            gold = [f"{s:.2f}" for _, _, s in rows]
            gold[0] = ""  # an unscored pair
            _write(folder / f"STS.gs.{sub}.txt", gold)
    for split in ("train", "dev", "test"):
        rows = pairs(30)
        rows[0] = (rows[0][0], rows[0][0], 5.0)  # a gold-5 pair for retrieval
        rows[1] = (rows[1][0], rows[1][1], 5.0)
        _write(
            root / "STS" / "STSBenchmark" / f"sts-{split}.csv",
            [
                f"main-captions\tMSRvid\t2012test\t{i:04d}\t{s:.3f}\t{a}\t{b}"
                for i, (a, b, s) in enumerate(rows)
            ],
        )
    for fname in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
        rows = pairs(20)
        lines = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
        lines += [f"{i}\t{a}\t{b}\t{1 + s * 0.8:.1f}\tNEUTRAL" for i, (a, b, s) in enumerate(rows)]
        _write(root / "SICK" / fname, lines)

    def labelled(cue_pos, cue_neg, n):
        pos = [f"{random_sentence(rng)} {cue_pos}" for _ in range(n)]
        neg = [f"{random_sentence(rng)} {cue_neg}" for _ in range(n)]
        return pos, neg

    for folder, pos_name, neg_name in (
        ("MR", "rt-polarity.pos", "rt-polarity.neg"),
        ("CR", "custrev.pos", "custrev.neg"),
        ("SUBJ", "subj.objective", "subj.subjective"),
        ("MPQA", "mpqa.pos", "mpqa.neg"),
    ):
        pos, neg = labelled("great good love", "awful bad hate", n_cls)
        _write(root / folder / pos_name, pos, "latin-1")
        _write(root / folder / neg_name, neg, "latin-1")
    for split, n in (("train", 40), ("dev", 12), ("test", 12)):
        pos, neg = labelled("great good", "awful bad", n // 2)
        _write(
            root / "SST" / "binary" / f"sentiment-{split}",
            [f"{s} \t1" for s in pos] + [f"{s} \t0" for s in neg],
        )
    classes = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
    for fname, n in (("train_5500.label", 6), ("TREC_10.label", 2)):
        lines = [f"{c}:fine {random_sentence(rng)} ?" for c in classes for _ in range(n)]
        _write(root / "TREC" / fname, lines, "latin-1")
    for split, n in (("train", 30), ("test", 12)):
        lines = ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(n):
            a = random_sentence(rng)
            b = a if i % 2 == 0 else random_sentence(rng)
            lines.append(f"{int(i % 2 == 0)}\t{i}\t{i + 1000}\t{a}\t{b}")
        _write(root / "MRPC" / f"msr_paraphrase_{split}.txt", lines)
    return root


class FakeEncoder:
    """Deterministic embeddings from a lookup table (unknown sentences get a seeded random vector)."""

    def __init__(self, table: dict[str, np.ndarray] | None = None, dim: int = 8, seed: int = 0):
        self.table = dict(table or {})
        self.dim = dim
        self.seed = seed
        self.calls: list[list[str]] = []

    def vector(self, s: str) -> np.ndarray:
        if s not in self.table:
            h = zlib.crc32(f"{self.seed}:{s}".encode())
            self.table[s] = np.random.default_rng(h).normal(size=self.dim).astype(np.float32)
        return self.table[s]

    def encode(self, sentences):
        sentences = list(sentences)
        self.calls.append(sentences)
        return np.stack([self.vector(s) for s in sentences]).astype(np.float32)
