"""A user's own script with ContrastiveTrainer, run as ``torchrun --nproc_per_node 2 tests/dist_api_worker.py``
(tests/trainer/test_distributed_runs.py): each process writes what happened to it to ``OUT/rank<R>.json``.

Modes: ``train`` trains a few steps with checkpoints (process 1 saves its RNG states late, so that process 0 reaches
``trainer_state.json`` first) and records, at each checkpoint, whether every process's files were there when process 0
marked the checkpoint complete; ``again`` starts a second, new run into the same folder, which every process must
refuse (an error on process 0 alone would leave process 1 training by itself, waiting for the other forever);
``export_fails`` trains and saves, and the export after training (process 0's) fails; ``stream`` trains on a stream
of 20 rows of 4 to 8 tokens (per pass, 2 whole global batches of 8 and 4 rows over) and records each step's rows
(their first view's token ids, without padding) on each process (``--batch_size 8`` without torchrun: the single
process with the global batch);
``killed`` trains with process 1 killed (SIGKILL) after checkpoint-2, and ``resume`` resumes such a run
(``resume_from_checkpoint=True``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer, TrainerCallback, set_seed  # noqa: E402

from hf_cse.data import tokenize_dataset  # noqa: E402
from hf_cse.errors import CSEError  # noqa: E402
from hf_cse.models import SimCSEModel  # noqa: E402
from hf_cse.trainer import ContrastiveTrainer  # noqa: E402
from hf_cse.training_args import ContrastiveTrainingArguments  # noqa: E402


class SlowRngTrainer(ContrastiveTrainer):
    """Process 1 writes its RNG states a moment after process 0 (as a slower disk or a busier process would)."""

    def _save_rng_state(self, output_dir):
        if self.args.process_index == 1:
            time.sleep(1.0)
        super()._save_rng_state(output_dir)


class KillProcess1(TrainerCallback):
    """Process 1 is killed (SIGKILL: no clean-up runs) as step 3 begins, after checkpoint-2."""

    def on_step_begin(self, args, state, control, **kwargs):
        if args.process_index == 1 and state.global_step == 2:
            os.kill(os.getpid(), signal.SIGKILL)


class CheckpointFiles(TrainerCallback):
    """On process 0, right after each checkpoint is saved: were the other process's RNG files there?"""

    def __init__(self):
        self.seen: dict[str, bool] = {}

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        self.seen[folder.name] = all((folder / f"{name}_{rank}.pth").is_file() for rank in range(args.world_size)
                                     for name in ("rng_state", "log_window_state"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--train_file", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--mode", choices=("train", "again", "export_fails", "stream", "killed", "resume"),
                        required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", 0))
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    texts = [line for line in Path(args.train_file).read_text().splitlines() if line.strip()]
    train = tokenize_dataset(Dataset.from_dict({"text": texts}), tokenizer, 32)
    if args.mode == "stream":  # tokenized by the trainer
        from helpers import long_sentences

        # each per-device batch of 4 rows longer than the one before: the collator pads each batch to its own length
        texts = [long_sentences(1, 2 + i // 4, seed=i)[0] for i in range(20)]
        train = Dataset.from_dict({"text": texts}).to_iterable_dataset()
    set_seed(7)  # the projection head's initial weights: the same in every launch (hf-cse-train seeds here too)
    model = SimCSEModel.from_encoder(args.model_dir)
    training_args = ContrastiveTrainingArguments(
        output_dir=args.output_dir, use_cpu=True, per_device_train_batch_size=args.batch_size, max_steps=4,
        save_strategy="steps", save_steps=2, logging_steps=1, report_to="none", disable_tqdm=True, seed=7)
    files = CheckpointFiles()
    result: dict = {"rank": rank}
    if args.mode == "export_fails":  # the export, on process 0, refuses (as a full disk or a Hub push would fail)
        import hf_cse.export

        def refuse(*_, **__):
            raise CSEError("the export refused (a test's stand-in for a failed export)")

        hf_cse.export.export_after_training = refuse
    try:
        callbacks = [files, KillProcess1()] if args.mode == "killed" else [files]
        trainer = SlowRngTrainer(model=model, args=training_args, train_dataset=train, processing_class=tokenizer,
                                 callbacks=callbacks)
        if args.mode == "stream":
            steps = result["rows_per_step"] = []
            compute_loss = trainer.compute_loss
            trainer.compute_loss = lambda model, inputs, *rest, **kw: (
                steps.append(_rows(inputs)) or compute_loss(model, inputs, *rest, **kw))
        trainer.train(resume_from_checkpoint=args.mode == "resume" or None)
        trainer.save_run()
        result["complete_when_marked"] = files.seen
        result["losses"] = {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}
    except Exception as err:  # what each process raised, for the test to compare
        result["error"] = f"{type(err).__name__}: {err}"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"rank{rank}.json").write_text(json.dumps(result))


def _rows(inputs: dict) -> list[list[int]]:
    """A batch's rows: the token ids of each one's first view, without its padding."""
    return [ids[mask.bool()].tolist() for ids, mask in zip(inputs["input_ids"][:, 0], inputs["attention_mask"][:, 0])]


if __name__ == "__main__":
    main()
    # as docs/distributed.md advises a script of one's own: gloo can abort a process at the interpreter's exit
    from hf_cse.distributed import leave_process_group_process

    leave_process_group_process(0)
