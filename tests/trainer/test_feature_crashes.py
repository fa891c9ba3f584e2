"""The promises of the fault work (nothing lost or mixed; the same command finishes a run cut short) kept by the
features added since: LoRA runs (adapter/), the training curves, the dev score, --train_files, resuming a finished
run further. Real processes, killed with SIGKILL at chosen points (tests/kill_driver.py) where a kill is the case."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
from test_crash_consistency import _run, _train

from hf_cse.checkpoints import checkpoint_problem
from hf_cse.run_files import ADAPTER_FOLDER, CURVES_FILE, RUN_RECORD_FILE

pytestmark = pytest.mark.slow

LORA = ["--lora_r", "2", "--precision", "fp32"]


def _steps(out: Path) -> int:
    return json.loads((out / "trainer_state.json").read_text())["global_step"]


def _finished(out: Path) -> bool:
    return (out / "training_info.json").is_file() and (out / "sentence-transformers" / "modules.json").is_file()


@pytest.fixture(scope="module")
def lora_run(tiny_bert_dir, tmp_path_factory):
    """A finished 2-step LoRA run (r = 2) with a checkpoint at each step."""
    root = tmp_path_factory.mktemp("lora_run")
    out = root / "out"
    proc = _run(*_train(tiny_bert_dir, root, out), *LORA)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / ADAPTER_FOLDER / "adapter_config.json").is_file() and _finished(out)
    return out


@pytest.mark.parametrize("kill, lora", [
    (("curves", 1), False),  # after the last step, with training_curves.png and *_results.json written
    (("tokenizer", 3), True),  # the final save: model and adapter/ written, tokenizer, export and record not
    (("export", 1), True),  # the export of a LoRA run: its whole model saved, the export not yet in place
], ids=["after-curves", "lora-before-tokenizer", "lora-mid-export"])
def test_a_run_killed_after_writing_its_own_files_is_finished_by_the_same_command(kill, lora, tiny_bert_dir,
                                                                                   tmp_path):
    out = tmp_path / "out"
    args = [*_train(tiny_bert_dir, tmp_path, out), "--logging_steps", "1", *(LORA if lora else [])]
    killed = _run(*args, kill=kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (out / CURVES_FILE).is_file() and not (out / "training_info.json").exists()
    if lora:
        assert (out / ADAPTER_FOLDER).is_dir() and (out / "tokenizer.json").exists() == (kill[0] == "export")

    again = _run(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "final save of the run" in again.stderr and f"from {out / 'checkpoint-2'}" in again.stderr
    assert _finished(out) and _steps(out) == 2 and (out / "tokenizer.json").is_file()
    assert (out / ADAPTER_FOLDER / "adapter_model.safetensors").is_file() == lora


def test_overwriting_a_lora_run_without_lora_leaves_no_adapter_beside_the_new_model(lora_run, tiny_bert_dir,
                                                                                    tmp_path):
    out = tmp_path / "out"
    shutil.copytree(lora_run, out)
    (out / "notes.txt").write_text("mine")
    proc = _run(*_train(tiny_bert_dir, tmp_path, out), "--overwrite_output_dir")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (out / ADAPTER_FOLDER).exists() and not (out / "checkpoint-2" / ADAPTER_FOLDER).exists()
    assert _finished(out) and (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "config.json").read_text())["lora_r"] == 0


def test_resuming_a_lora_checkpoint_with_another_rank_is_one_line_before_loading(lora_run, tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    args = _train(tiny_bert_dir, tmp_path, out)[:-4]
    proc = _run(*args, "--lora_r", "4", "--resume_from_checkpoint", str(lora_run / "checkpoint-1"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "--lora_r 2 then, 4 now" in lines[-1] and len(lines[-1]) < 300, lines[-1]
    assert "padding-free:" not in proc.stderr  # refused before the model was built


def test_a_finished_run_resumed_with_more_steps_trains_them(tiny_bert_dir, tmp_path):
    first = tmp_path / "first"
    # a constant learning rate: a schedule that follows the total of steps cannot be extended (trainer_resume)
    args = [*_train(tiny_bert_dir, tmp_path, first), "--lr_scheduler_type", "constant"]
    args[args.index("--max_steps") + 1] = "3"
    assert _run(*args).returncode == 0 and _steps(first) == 3
    assert checkpoint_problem(first / "checkpoint-3") is None

    more = tmp_path / "more"
    args[args.index("--max_steps") + 1] = "5"
    args[args.index("--output_dir") + 1] = str(more)
    proc = _run(*args, "--resume_from_checkpoint", str(first / "checkpoint-3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no further step" not in proc.stderr
    assert _steps(more) == 5 and (more / "checkpoint-5").is_dir() and _finished(more)


def test_dev_data_whose_score_is_undefined_warns_and_the_run_still_finishes(tiny_bert_dir, tmp_path):
    pairs = tmp_path / "unknown.csv"  # Cyrillic: every word an unknown token of the tiny vocabulary
    pairs.write_text("sentence1,sentence2,score\n" + "".join(f"жжж{i} ффф,ццц щщщ{i},{i % 5}\n" for i in range(10)))
    out = tmp_path / "out"
    proc = _run(*_train(tiny_bert_dir, tmp_path, out), "--eval_file", str(pairs), "--eval_strategy", "steps",
                "--eval_steps", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the dev score is undefined" in proc.stderr
    assert _finished(out) and (out / "sentence-transformers" / "README.md").is_file()


def test_train_files_of_three_formats_train_in_memory(tiny_bert_dir, tmp_path):
    from helpers import random_sentences

    texts = random_sentences(36, seed=5)
    (tmp_path / "a.txt").write_text("\n".join(texts[:12]) + "\n")
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[12:24]))
    (tmp_path / "c.csv").write_text("text\n" + "\n".join(texts[24:]) + "\n")
    out = tmp_path / "out"
    args = [a for a in _train(tiny_bert_dir, tmp_path, out)]
    at = args.index("--train_file")
    args[at:at + 2] = ["--train_files", *(str(tmp_path / n) for n in ("a.txt", "b.jsonl", "c.csv"))]
    proc = _run(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _finished(out) and _steps(out) == 2
    assert "b.jsonl" in (out / RUN_RECORD_FILE).read_text()  # the run record names its sources (resume check)
