"""A run interrupted and resumed from its checkpoint ends as the uninterrupted run: its collator's masks drawn in the
loader's worker processes (hf_cse.collator_rng) and every logged value, the logging window that spans the checkpoint
included (hf_cse.log_window)."""

import pytest
import torch
from helpers import random_sentences, tiny_args, tiny_train_dataset
from transformers import AutoTokenizer

from hf_cse.models import SimCSEModel
from hf_cse.trainer import ContrastiveTrainer
from hf_cse.trainer_resume import RESUMED_STEPS_LOSS

pytestmark = pytest.mark.slow  # each test trains several tiny runs


def _mlm_trainer(tiny_mlm_dir, folder, **overrides):
    """SimCSE with the masked-LM objective: its collator draws the masks from torch's generator. 32 rows, 4 batches
    an epoch: checkpoint-3 is mid-epoch and the resumed run crosses into the next epoch."""
    ds, tok = tiny_train_dataset(tiny_mlm_dir, random_sentences(8, seed=1), folder, repeat=4)
    args = dict(max_steps=6, save_strategy="steps", save_steps=3, learning_rate=1e-2, **overrides)
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tiny_mlm_dir), do_mlm=True)
    return ContrastiveTrainer(model=model, args=tiny_args(folder / "out", **args), train_dataset=ds,
                              processing_class=AutoTokenizer.from_pretrained(tiny_mlm_dir))


def _resumed(tiny_mlm_dir, folder, **overrides) -> ContrastiveTrainer:
    _mlm_trainer(tiny_mlm_dir, folder, **overrides).train()
    resumed = _mlm_trainer(tiny_mlm_dir, folder, **overrides)
    resumed.train(resume_from_checkpoint=str(folder / "out" / "checkpoint-3"))
    return resumed


def _logged(trainer, since: int = 0) -> list[dict]:
    """The training log lines from step ``since`` on, without the wall-clock ones."""
    return [{k: v for k, v in h.items() if "seconds" not in k} for h in trainer.state.log_history
            if "loss" in h and h["step"] >= since]


def _assert_same_weights(a, b):
    for (key, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values(), strict=True):
        assert torch.equal(x, y), key


def test_a_resumed_run_with_loader_workers_masks_as_the_uninterrupted_one(tiny_mlm_dir, tmp_path):
    """The loader's worker processes collate (and mask) the batches with generators of their own, which no checkpoint
    holds: each batch's masks come from (seed, epoch, its rows) instead, the same in a worker, in the training process
    and in a resumed run."""
    full = _mlm_trainer(tiny_mlm_dir, tmp_path / "full", dataloader_num_workers=2)
    full.train()
    resumed = _resumed(tiny_mlm_dir, tmp_path / "cut", dataloader_num_workers=2)
    assert resumed.state.global_step == 6
    assert _logged(resumed, since=4) == _logged(full, since=4)  # mlm_loss included: the same masks
    _assert_same_weights(full, resumed)
    # the workers drew what the training process draws itself
    alone = _mlm_trainer(tiny_mlm_dir, tmp_path / "alone", dataloader_num_workers=0)
    alone.train()
    assert _logged(alone) == _logged(full)
    _assert_same_weights(full, alone)


def test_the_logging_window_across_a_checkpoint_logs_as_the_uninterrupted_run(tiny_mlm_dir, tmp_path, caplog):
    """Logs at steps 2, 4, 6 and a checkpoint at step 3: the resumed run's line at step 4 averages steps 3 and 4 (the
    loss and every metric), as the uninterrupted run's does, not step 4 alone; its train_loss is the mean over the
    run's 6 steps, as the uninterrupted run's (before: over the steps since the resume). A checkpoint without the
    window (an earlier hf_cse's) says so in one line, and its run's mean loss is not known: the mean of the steps
    after the resume is recorded under its own name, said in one line."""
    full = _mlm_trainer(tiny_mlm_dir, tmp_path / "full", logging_steps=2)
    full.train()
    resumed = _resumed(tiny_mlm_dir, tmp_path / "cut", logging_steps=2)
    assert [h["step"] for h in _logged(full)] == [2, 4, 6]
    assert _logged(resumed) == _logged(full)
    _assert_same_weights(full, resumed)
    assert resumed.train_metrics["train_loss"] == pytest.approx(full.train_metrics["train_loss"], rel=1e-6)
    assert resumed.state.log_history[-1]["train_loss"] == resumed.train_metrics["train_loss"]  # the final log too
    losses = [h["loss"] for h in _logged(full)]
    assert full.train_metrics["train_loss"] == pytest.approx(sum(losses) / 3, rel=1e-6)  # windows of 2 steps each

    checkpoint = tmp_path / "cut" / "out" / "checkpoint-3"
    (checkpoint / "log_window_state.pth").unlink()
    again = _mlm_trainer(tiny_mlm_dir, tmp_path / "cut", logging_steps=2)
    with caplog.at_level("WARNING", logger="hf_cse.log_window"):
        again.train(resume_from_checkpoint=str(checkpoint))
    said = [r.getMessage() for r in caplog.records if r.name == "hf_cse.log_window"]
    assert said == [f"{checkpoint} holds no running loss of step 3 (it predates hf_cse's saving of it): the first "
                    "loss and metrics logged after the resume average only the steps from 4 on"]
    assert _logged(again)[-1] == _logged(full)[-1] and _logged(again)[-2]["loss"] != _logged(full)[-2]["loss"]
    # the losses of steps 1-3 are not all known: the mean of steps 4-6 (windows 4 and 5-6), under its own name
    assert "train_loss" not in again.train_metrics
    after = again.train_metrics[RESUMED_STEPS_LOSS]
    assert after == pytest.approx((_logged(again)[-1]["loss"] * 2 + _logged(again, since=4)[0]["loss"]) / 3, rel=1e-6)
    assert [r.getMessage() for r in caplog.records if r.name == "hf_cse.trainer_resume"] == [
        f"train_loss: the checkpoint resumed at step 3 kept no running loss of the logging window open at it, so the "
        f"run's mean loss is not known; recorded instead: {RESUMED_STEPS_LOSS}, over steps 4-6"]
    # saved by two processes (one window file each), resumed by one: said as such, not as an old checkpoint
    for rank in (0, 1):
        torch.save({"loss_sum": torch.tensor(1.0), "last_logged_step": 2, "world_size": 2, "metrics": {}},
                   checkpoint / f"log_window_state_{rank}.pth")
    caplog.clear()
    with caplog.at_level("WARNING", logger="hf_cse.log_window"):
        _mlm_trainer(tiny_mlm_dir, tmp_path / "cut", logging_steps=2).train(resume_from_checkpoint=str(checkpoint))
    said = [r.getMessage() for r in caplog.records if r.name == "hf_cse.log_window"]
    assert said == [f"{checkpoint} holds no running loss of step 3 (it was saved by 2 processes, not 1: each "
                    "process's window is its own): the first loss and metrics logged after the resume average only "
                    "the steps from 4 on"]


def test_a_run_finished_from_its_last_checkpoint_records_the_runs_metrics(tiny_mlm_dir, tmp_path, caplog):
    """A run stopped after its last checkpoint (during its final save or export) and run again is finished from that
    checkpoint, no step trained: it recorded only the epoch (train_metrics {'epoch': ...}). Its train_loss comes from
    the checkpoint (the window logged at step 4 and the one open at step 6, saved with it), total_flos from its state,
    the runtime from what the stopped run's save wrote; a stop before that save records no runtime."""
    full = _mlm_trainer(tiny_mlm_dir, tmp_path / "full", logging_steps=4)
    full.train()
    full.save_run()
    assert [h["step"] for h in _logged(full)] == [4]  # steps 5 and 6: only in the checkpoint's open window
    finished = _mlm_trainer(tiny_mlm_dir, tmp_path / "full", logging_steps=4)
    finished.train(resume_from_checkpoint=True)
    # total_flos: the state's (transformers' printer, with disable_tqdm, pops it from the uninterrupted run's metrics)
    assert finished.train_metrics.pop("total_flos") == full.state.total_flos > 0
    assert finished.train_metrics["train_loss"] == pytest.approx(full.train_metrics["train_loss"], rel=1e-6)
    assert {k: v for k, v in finished.train_metrics.items() if k != "train_loss"} == {
        k: v for k, v in full.train_metrics.items() if k not in ("train_loss", "total_flos")}
    assert "train_runtime" in finished.train_metrics
    # stopped before its save: the checkpoint's loss and flos, no runtime of another run's
    (tmp_path / "full" / "out" / "trainer_state.json").unlink()
    again = _mlm_trainer(tiny_mlm_dir, tmp_path / "full", logging_steps=4)
    again.train(resume_from_checkpoint=True)
    assert sorted(again.train_metrics) == ["epoch", "total_flos", "train_loss"]
    assert again.train_metrics["train_loss"] == finished.train_metrics["train_loss"]
