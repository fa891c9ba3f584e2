"""One epoch of ContrastiveTrainer's training loader on this process, dumped for tests/data/test_sampler.py.

Launched as ``torchrun --nproc_per_node 2 tests/sampler_worker.py MODEL_DIR TEXTS_JSON OUT``: every process writes
``OUT/rank{R}.json``, the ``[row, text]`` pairs of each of its batches in order.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import datasets  # noqa: E402
from helpers import collator, tiny_args  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from hf_cse.data import tokenize_dataset  # noqa: E402
from hf_cse.models import SimCSEModel  # noqa: E402
from hf_cse.trainer import ContrastiveTrainer  # noqa: E402


def main(model_dir: str, texts_file: str, out: str) -> None:
    texts = json.loads(Path(texts_file).read_text())
    tok = AutoTokenizer.from_pretrained(model_dir)
    ds = datasets.Dataset.from_dict({"text": texts, "row": list(range(len(texts)))})
    ds = tokenize_dataset(ds, tok, keep_text=True).add_column("row", list(range(len(texts))))
    plain = collator(tok)
    seen: list[list] = []

    def recording(features):
        seen.append([[f["row"], f["text"]] for f in features])
        return plain(features)

    trainer = ContrastiveTrainer(model=SimCSEModel.from_encoder(model_dir), args=tiny_args(Path(out) / "run",
                                 per_device_train_batch_size=4), train_dataset=ds, data_collator=recording,
                                 processing_class=tok)
    assert trainer.args.world_size == 2, trainer.args.world_size
    for _ in trainer.get_train_dataloader():
        pass
    Path(out, f"rank{trainer.args.process_index}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main(*sys.argv[1:4])
