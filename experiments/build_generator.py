#!/usr/bin/env python
"""Pretrain a small BERT masked LM on the shared corpus with the encoder's own tokenizer: DiffCSE's generator.

    python experiments/build_generator.py --out experiments/generator          # the committed generator
    python run_unsup.py --method diffcse --generator_name_or_path experiments/generator ...

DiffCSE (Chuang et al., NAACL 2022, §3 and Table 6) fills the masked copy of each sentence with a frozen
pretrained masked LM that shares the encoder's vocabulary (DistilBERT for BERT-base). The packaged
all-MiniLM-L6-v2 has no masked-LM head and no offline companion MLM, so this builds one: a BERT masked LM of a
few layers (``BertForMaskedLM``, input and output embeddings tied) trained with BERT's recipe (Devlin et al.,
2019: 15% of the tokens selected, 80% [MASK] / 10% random / 10% kept) on ``wiki_sentences.txt``, tokenized by
the encoder's tokenizer. Its word, position and segment embeddings start from the encoder's own, projected on
their first ``hidden_size`` principal directions (one linear map for all three, so their sum is projected
consistently), which gives the small model the encoder's token geometry for free.

Deterministic for a given torch version: the held-out slice, the data order and the masks come from ``--seed``;
one thread (``--threads``); ``torch.use_deterministic_algorithms``. The output folder is a standard
``AutoModelForMaskedLM`` folder (weights in bf16 safetensors) plus the encoder's tokenizer files and
``build_info.json`` (the arguments, the loss curve and the held-out accuracies of the SAVED weights).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from hf_cse.encoders import default_encoder  # noqa: E402
from hf_cse.masking import masked_lm_inputs  # noqa: E402

DEFAULT_TRAIN_FILE = ROOT.parent / "shared" / "data" / "unsup" / "wiki_sentences.txt"
EmbeddingInit = Literal["encoder_pca", "random"]
Precision = Literal["bf16", "fp32"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (refused if it holds files, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace the files of an existing --out")
    p.add_argument("--encoder", default=None, help="encoder whose tokenizer (and embeddings) to use; default: the "
                                                  "packaged all-MiniLM-L6-v2")
    p.add_argument("--train_file", default=str(DEFAULT_TRAIN_FILE), help="one sentence per line")
    p.add_argument("--hidden_size", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--embedding_init", choices=get_args(EmbeddingInit), default="encoder_pca")
    p.add_argument("--max_seq_length", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--max_steps", type=int, default=1200)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--warmup_ratio", type=float, default=0.05)
    p.add_argument("--weight_decay", type=float, default=0.01)
    p.add_argument("--mlm_probability", type=float, default=0.15)
    p.add_argument("--heldout", type=int, default=2000, help="sentences held out for the accuracy")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1, help="torch threads (fixed: part of the determinism)")
    p.add_argument("--precision", choices=get_args(Precision), default="bf16", help="autocast dtype of training")
    p.add_argument("--logging_steps", type=int, default=50)
    args = p.parse_args(argv)
    if args.hidden_size % args.heads:
        p.error(f"--hidden_size {args.hidden_size} is not divisible by --heads {args.heads}; pick e.g. --heads 2.")
    if not 0 < args.mlm_probability < 1:
        p.error(f"--mlm_probability must be in (0, 1), got {args.mlm_probability}.")
    if not Path(args.train_file).is_file():
        p.error(f"--train_file {args.train_file} not found; give a text file with one sentence per line.")
    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        p.error(f"--out {out} already holds files; pick a new folder or pass --overwrite to replace them.")
    return args


# ----------------------------------------------------------------------------------------------- data
def tokenized_splits(path: str, tokenizer, max_length: int, heldout: int, seed: int):
    """(train, held-out) lists of token-id rows; held-out = ``heldout`` distinct sentences picked by ``seed``,
    and every copy of them is removed from the training rows."""
    lines = [s.strip() for s in Path(path).read_text(encoding="utf-8").splitlines()]
    lines = [s for s in lines if s]
    unique = list(dict.fromkeys(lines))
    if heldout >= len(unique):
        raise SystemExit(f"--heldout {heldout} leaves no training sentences ({len(unique)} distinct lines).")
    order = np.random.default_rng(seed).permutation(len(unique))
    held = {unique[i] for i in order[:heldout]}
    held_lines = [unique[i] for i in sorted(order[:heldout])]
    train_lines = [s for s in lines if s not in held]
    encode = lambda texts: tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]  # noqa: E731
    return encode(train_lines), encode(held_lines)


def pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return ids, ids != pad_id


# ----------------------------------------------------------------------------------------------- model
def build_model(args, tokenizer, encoder_path: str):
    from transformers import AutoModel, BertConfig, BertForMaskedLM

    encoder = AutoModel.from_pretrained(encoder_path)
    enc_cfg = encoder.config
    config = BertConfig(vocab_size=enc_cfg.vocab_size, hidden_size=args.hidden_size, num_hidden_layers=args.layers,
                        num_attention_heads=args.heads, intermediate_size=4 * args.hidden_size,
                        max_position_embeddings=enc_cfg.max_position_embeddings,
                        type_vocab_size=getattr(enc_cfg, "type_vocab_size", 2), pad_token_id=tokenizer.pad_token_id,
                        tie_word_embeddings=True)
    model = BertForMaskedLM(config)
    if args.embedding_init == "encoder_pca":
        emb = encoder.get_input_embeddings().weight.detach().double()
        if args.hidden_size > emb.shape[1]:
            raise SystemExit(f"--hidden_size {args.hidden_size} exceeds the encoder's width {emb.shape[1]}; "
                             "use --embedding_init random or a smaller --hidden_size.")
        # principal directions of the word embeddings (eigh of the covariance: exact, no random sketch)
        centred = emb - emb.mean(0)
        _, vecs = torch.linalg.eigh(centred.T @ centred / len(emb))
        proj = vecs[:, -args.hidden_size:].flip(1)  # (d_enc, hidden), largest variance first
        src = encoder.embeddings
        dst = model.bert.embeddings
        with torch.no_grad():
            dst.word_embeddings.weight.copy_((centred @ proj).float())
            dst.position_embeddings.weight.copy_((src.position_embeddings.weight.double() @ proj).float())
            if getattr(src, "token_type_embeddings", None) is not None:
                dst.token_type_embeddings.weight.copy_((src.token_type_embeddings.weight.double() @ proj).float())
    del encoder
    return model


def mlm_loss(model, ids: torch.Tensor, attention: torch.Tensor, labels: torch.Tensor, selected: torch.Tensor):
    """Cross-entropy at the selected positions only (the vocabulary projection is the costly part; BERT's loss
    ignores the other positions anyway)."""
    hidden = model.bert(input_ids=ids, attention_mask=attention).last_hidden_state
    logits = model.cls(hidden[selected])
    return F.cross_entropy(logits.float(), labels[selected])


@torch.no_grad()
def heldout_accuracy(model, rows, tokenizer, ratio: float, seed: int, batch_size: int = 256) -> dict:
    """Masked-token accuracy on the held-out rows with BERT's 80/10/10 masking at ``ratio``: at every selected
    position (``selected``), at the [MASK] positions only (``masked``), and how often the prediction copies an
    unselected input token (``copy``: what DiffCSE's ``generator_fill="all"`` keeps unchanged)."""
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    hits = {"selected": [0, 0], "masked": [0, 0], "copy": [0, 0]}
    for start in range(0, len(rows), batch_size):
        ids, attention = pad(rows[start: start + batch_size], tokenizer.pad_token_id)
        masked_ids, labels = masked_lm_inputs(ids, tokenizer, ratio, generator=gen)
        selected = labels != -100
        pred = model(input_ids=masked_ids, attention_mask=attention).logits.argmax(-1)
        ordinary = attention & ~torch.isin(ids, torch.tensor(tokenizer.all_special_ids))
        for key, where in (("selected", selected), ("masked", masked_ids == tokenizer.mask_token_id),
                           ("copy", ordinary & ~selected)):
            hits[key][0] += int((pred[where] == ids[where]).sum())
            hits[key][1] += int(where.sum())
    return {k: round(h / max(n, 1), 4) for k, (h, n) in hits.items()} | {"positions": hits["selected"][1]}


# ----------------------------------------------------------------------------------------------- training
def train(model, rows, tokenizer, args, log=print) -> list[dict]:
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=args.learning_rate,
                                  betas=(0.9, 0.98), eps=1e-6)
    warmup = max(1, int(args.warmup_ratio * args.max_steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (args.max_steps - s) / max(1, args.max_steps - warmup))))
    order_gen = torch.Generator().manual_seed(args.seed)
    mask_gen = torch.Generator().manual_seed(args.seed + 1)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")
    per_epoch = len(rows) // args.batch_size
    if per_epoch == 0:
        raise SystemExit(f"--batch_size {args.batch_size} exceeds the {len(rows)} training sentences.")
    curve, running, t0 = [], [], time.time()
    order = None
    model.train()
    for step in range(args.max_steps):
        if step % per_epoch == 0:
            order = torch.randperm(len(rows), generator=order_gen).tolist()
        idx = order[(step % per_epoch) * args.batch_size: (step % per_epoch + 1) * args.batch_size]
        ids, attention = pad([rows[i] for i in idx], tokenizer.pad_token_id)
        masked_ids, labels = masked_lm_inputs(ids, tokenizer, args.mlm_probability, generator=mask_gen)
        selected = labels != -100
        with autocast:
            loss = mlm_loss(model, masked_ids, attention, ids, selected)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        running.append(loss.item())
        if (step + 1) % args.logging_steps == 0 or step + 1 == args.max_steps:
            entry = {"step": step + 1, "loss": round(sum(running) / len(running), 4),
                     "lr": round(schedule.get_last_lr()[0], 7), "elapsed_s": round(time.time() - t0, 1)}
            curve.append(entry)
            running = []
            log(json.dumps(entry))
    return curve


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    try:
        return build(args, argv)
    finally:  # a caller in the same process (a test) gets its settings back
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def build(args: argparse.Namespace, argv: list[str] | None) -> dict:
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    torch.manual_seed(args.seed)
    encoder_path = args.encoder or default_encoder()
    tokenizer = AutoTokenizer.from_pretrained(encoder_path)
    if tokenizer.mask_token_id is None:
        raise SystemExit(f"the tokenizer of {encoder_path} has no mask token: a masked LM cannot be trained with it.")
    train_rows, held_rows = tokenized_splits(args.train_file, tokenizer, args.max_seq_length, args.heldout, args.seed)
    print(f"{len(train_rows)} training sentences, {len(held_rows)} held out; tokenizer of {encoder_path}", flush=True)
    model = build_model(args, tokenizer, encoder_path)
    print(f"BertForMaskedLM {args.layers} layers x {args.hidden_size}: "
          f"{sum(p.numel() for p in model.parameters()):,} parameters", flush=True)
    t0 = time.time()
    curve = train(model, train_rows, tokenizer, args, log=lambda s: print(s, flush=True))
    train_seconds = time.time() - t0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    # the accuracies of what DiffCSE will load: the saved weights through the standard loading path, in their
    # saved dtype (bf16), as the generator runs in DiffCSE
    saved = AutoModelForMaskedLM.from_pretrained(out)
    accuracy = {f"mlm_{ratio}": heldout_accuracy(saved, held_rows, tokenizer, ratio, args.seed + 2)
                for ratio in (args.mlm_probability, 0.3)}
    info = {
        "command": "python experiments/build_generator.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "args": {k: v for k, v in vars(args).items() if k not in ("out", "overwrite")},
        "encoder": "packaged all-MiniLM-L6-v2" if args.encoder is None else args.encoder,
        "torch_version": torch.__version__,
        "train_sentences": len(train_rows),
        "heldout_sentences": len(held_rows),
        "parameters": sum(p.numel() for p in saved.parameters()),
        "train_seconds": round(train_seconds, 1),
        "loss_curve": curve,
        "heldout_accuracy": accuracy,
    }
    (out / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"held-out masked-token accuracy: {json.dumps(accuracy)}", flush=True)
    print(f"saved to {out} ({sum(f.stat().st_size for f in out.iterdir()) / 2**20:.1f} MiB)", flush=True)
    return info


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
