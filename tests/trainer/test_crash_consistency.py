"""A kill at any moment leaves a folder the same command resumes or finishes (never one taken for finished, never a
traceback on relaunch): real processes killed with SIGKILL at chosen points (tests/kill_driver.py) during a checkpoint
save, the final save, the export and an evaluation, then the same command run again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from eval_helpers import write_toy_senteval
from helpers import hang_timeout, random_sentences

from hf_cse.checkpoints import checkpoint_problem, last_complete_checkpoint, safetensors_problem
from hf_cse.models import SimCSEModel

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).parents[1] / "kill_driver.py"


def _env():
    env = {k: v for k, v in os.environ.items() if k != "HF_CSE_DEBUG"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT))
    return env


def _run(*args, kill: tuple[str, int] | None = None):
    prefix = [str(DRIVER), kill[0], str(kill[1])] if kill else []
    return subprocess.run([sys.executable, *prefix, *args], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=hang_timeout(600))


def _train(encoder, tmp_path, out):
    train = tmp_path / "train.txt"
    if not train.exists():
        train.write_text("\n".join(random_sentences(32)) + "\n")
    return ["run_unsup.py", "--model_name_or_path", str(encoder), "--train_file", str(train), "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--output_dir", str(out), "--use_cpu", "--disable_tqdm", "true",
            "--save_strategy", "steps", "--save_steps", "1"]


# ------------------------------------------------------------------------------------------------ unit
def test_cut_short_files_make_a_checkpoint_incomplete(tiny_bert_dir, tmp_path, caplog):
    for step in (1, 2):
        folder = tmp_path / f"checkpoint-{step}"
        SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(folder)
        (folder / "trainer_state.json").write_text('{"global_step": %d}' % step)
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    weights = tmp_path / "checkpoint-2" / "model.safetensors"
    os.truncate(weights, weights.stat().st_size - 10)
    assert "cut short" in safetensors_problem(weights)
    with caplog.at_level("WARNING", logger="hf_cse.checkpoints"):
        assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-1")
    assert "skipping the incomplete checkpoint" in caplog.text and "model.safetensors is cut short" in caplog.text
    (tmp_path / "checkpoint-1" / "trainer_state.json").write_text('{"global_st')
    assert checkpoint_problem(tmp_path / "checkpoint-1") == "trainer_state.json is cut short"
    (tmp_path / "checkpoint-1" / "optimizer.pt").write_bytes(b"PK\x03\x04 cut")
    (tmp_path / "checkpoint-1" / "trainer_state.json").write_text("{}")
    assert "optimizer.pt is cut short" in checkpoint_problem(tmp_path / "checkpoint-1")
    assert last_complete_checkpoint(tmp_path) is None


# A checkpoint whose weights file was missing (removed, or never written) was taken for complete: the resume named it,
# then transformers stopped on "Can't find a valid checkpoint" with a traceback.
def test_a_checkpoint_without_weights_is_incomplete(tiny_bert_dir, tmp_path, caplog):
    from hf_cse.output_folder import OutputFolderError
    from hf_cse.trainer_folder import checkpoint_to_resume

    for step in (1, 2):
        folder = tmp_path / f"checkpoint-{step}"
        SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(folder)
        (folder / "trainer_state.json").write_text('{"global_step": %d}' % step)
    (tmp_path / "checkpoint-2" / "model.safetensors").unlink()
    assert "no weights file (model.safetensors is missing" in checkpoint_problem(tmp_path / "checkpoint-2")
    with caplog.at_level("WARNING", logger="hf_cse.checkpoints"):
        assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-1")
    assert f"skipping the incomplete checkpoint {tmp_path / 'checkpoint-2'}: no weights file" in caplog.text
    with pytest.raises(OutputFolderError, match="checkpoint-2 is incomplete: no weights file"):
        checkpoint_to_resume(str(tmp_path / "checkpoint-2"), tmp_path / "new", "simcse")
    (tmp_path / "checkpoint-2" / "adapter").mkdir()  # a LoRA adapter's weights alone: the Trainer loads them
    (tmp_path / "checkpoint-2" / "adapter" / "adapter_model.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")
    assert checkpoint_problem(tmp_path / "checkpoint-2") is None


@pytest.mark.slow
def test_an_interrupted_run_whose_last_checkpoint_lost_its_weights_resumes_the_one_before(tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    args = _train(tiny_bert_dir, tmp_path, out)
    assert _run(*args, kill=("curves", 1)).returncode == -signal.SIGKILL  # after the last step, before the final save
    (out / "checkpoint-2" / "model.safetensors").unlink()
    named = _run(*args, "--resume_from_checkpoint", str(out / "checkpoint-2"))
    assert named.returncode == 1 and "Traceback" not in named.stderr
    assert "checkpoint-2 is incomplete: no weights file" in named.stderr.strip().splitlines()[-1]
    again = _run(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"skipping the incomplete checkpoint {out / 'checkpoint-2'}: no weights file" in again.stderr
    assert f"from {out / 'checkpoint-1'}" in again.stderr
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2


# ------------------------------------------------------------------------------------------------ killed runs
# The run is finished from its last checkpoint, taken at --max_steps: ContrastiveTrainer.train loads it as it is
# (transformers' own loop would train one step more, to step 3 of 2).
@pytest.mark.slow
@pytest.mark.parametrize("kill, resumed_from, log", [
    (("weights", 2), "checkpoint-1", "skipping the incomplete checkpoint"),  # mid checkpoint-2's weights
    (("trainer_state", 2), "checkpoint-1", "trainer_state.json is cut short"),  # checkpoint-2's last file
    (("weights", 3), "checkpoint-2", "final save of the run"),  # mid final save
    (("export", 1), "checkpoint-2", "final save of the run"),  # mid export
], ids=["checkpoint-weights", "checkpoint-state", "final-save", "export"])
def test_a_training_run_killed_mid_save_is_finished_by_the_same_command(kill, resumed_from, log, tiny_bert_dir,
                                                                        tmp_path):
    out = tmp_path / "out"
    args = _train(tiny_bert_dir, tmp_path, out)
    killed = _run(*args, kill=kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (out / "training_info.json").exists()

    again = _run(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert log in again.stderr and f"from {out / resumed_from}" in again.stderr
    assert (out / "training_info.json").is_file() and (out / "sentence-transformers" / "modules.json").is_file()
    assert checkpoint_problem(out / "checkpoint-2") is None and safetensors_problem(out / "model.safetensors") is None
    assert not list(out.glob(".*partial*")) and not list(tmp_path.glob(".*.lock"))

    finished = _run(*args)  # now it is finished, and said so
    assert finished.returncode == 1 and "already holds a finished run" in finished.stderr
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2  # no step past --max_steps


# A kill between an atomic write's partial file and its rename leaves the partial file (.<name>.partial-<pid>): the
# same command removes it and goes on, where it used to refuse it as a file no run writes (and the only way it named,
# --overwrite_output_dir, threw the checkpoints away and kept the partial file).
@pytest.mark.slow
@pytest.mark.parametrize("name, resumed", [("hf_cse_run.json", False),  # the run record, while claiming the folder
                                           ("training_curves.png", True)],  # the curves, after the last step
                         ids=["run-record", "curves"])
def test_a_run_killed_mid_atomic_write_is_finished_by_the_same_command(name, resumed, tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    args = [*_train(tiny_bert_dir, tmp_path, out), "--logging_steps", "1"]
    assert _run(*args, kill=(f"partial:{name}", 1)).returncode == -signal.SIGKILL
    assert [p.name for p in out.glob(f".{name}.partial-*")]
    again = _run(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"removed .{name}.partial-" in again.stderr
    assert (f"from {out / 'checkpoint-2'}" in again.stderr) == resumed
    assert (out / "training_info.json").is_file() and (out / "sentence-transformers" / "modules.json").is_file()
    assert not list(out.glob(".*partial*")) and not list(tmp_path.glob(".*.lock"))
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2


@pytest.mark.slow
def test_a_run_killed_while_probing_its_folder_is_started_by_the_same_command(tiny_bert_dir, tmp_path):
    out = tmp_path / "out"  # the probe file of the folder's write check, killed before it is removed
    args = _train(tiny_bert_dir, tmp_path, out)
    assert _run(*args, kill=("probe", 1)).returncode == -signal.SIGKILL
    assert [p.name for p in out.glob(".write-probe-*")]
    again = _run(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "removed .write-probe-" in again.stderr and not list(out.glob(".write-probe-*"))
    assert (out / "training_info.json").is_file()


@pytest.mark.slow
def test_a_run_killed_mid_atomic_write_is_started_over_without_its_partial_file(tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    args = _train(tiny_bert_dir, tmp_path, out)
    assert _run(*args, kill=("partial:hf_cse_run.json", 1)).returncode == -signal.SIGKILL
    again = _run(*args, "--overwrite_output_dir")
    assert again.returncode == 0, again.stderr[-3000:]
    assert not list(out.glob(".*partial*")) and (out / "training_info.json").is_file()


@pytest.mark.slow
def test_a_final_save_cut_short_without_checkpoints_is_not_taken_for_finished(tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    args = [a for a in _train(tiny_bert_dir, tmp_path, out)][:-4]  # no checkpoints
    assert _run(*args, kill=("weights", 1)).returncode == -signal.SIGKILL
    again = _run(*args)
    assert again.returncode == 1 and "final save was cut short" in again.stderr and "Traceback" not in again.stderr
    assert "--overwrite_output_dir deletes it" in again.stderr and "(try hf-cse-export)" in again.stderr
    assert " ... " not in again.stderr.strip().splitlines()[-1]  # whole: not cut to the line's length


@pytest.mark.slow
def test_an_export_killed_before_its_rename_is_finished_by_the_same_command(tiny_bert_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(ckpt)
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "notes.txt").write_text("mine")
    args = ["-m", "hf_cse.export", str(ckpt), str(tmp_path / "st"), "--tokenizer", str(tiny_bert_dir), "--overwrite"]
    assert _run(*args, kill=("export", 1)).returncode == -signal.SIGKILL
    assert list(tmp_path.glob(".st.partial-*")) and not (tmp_path / "st" / "modules.json").exists()
    again = _run(*args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (tmp_path / "st" / "modules.json").is_file() and (tmp_path / "st" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "st"]  # the killed export's leftovers are gone


@pytest.mark.slow
def test_a_corrupt_checkpoint_given_to_the_export_is_one_line(tiny_bert_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    SimCSEModel.from_encoder(str(tiny_bert_dir)).save_pretrained(ckpt)
    os.truncate(ckpt / "model.safetensors", 1000)
    proc = _run("-m", "hf_cse.export", str(ckpt), str(tmp_path / "st"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "model.safetensors is cut short" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_an_evaluation_killed_after_a_task_is_finished_by_the_same_command(tiny_bert_dir, tmp_path):
    senteval = write_toy_senteval(tmp_path / "senteval")
    out = tmp_path / "eval"
    args = ["run_eval.py", "--model_name_or_path", str(tiny_bert_dir), "--senteval_data_dir", str(senteval),
            "--tasks", "STSB,MR,CR", "--mode", "fast", "--output_dir", str(out), "--disable_tqdm"]
    assert _run(*args, kill=("eval", 2)).returncode == -signal.SIGKILL  # after MR's save
    first = json.loads((out / "results.json").read_text())
    assert first["unfinished_tasks"] == ["CR"]
    # killed again as it finishes the evaluation, after its first save: what either run finished is there (the
    # first run's results were deleted as the second began)
    assert _run(*args, kill=("eval", 1)).returncode == -signal.SIGKILL
    second = json.loads((out / "results.json").read_text())
    assert second["unfinished_tasks"] == ["plots"] and isinstance(second["CR"], float)
    assert [second[k] for k in ("STSBenchmark", "MR")] == [first[k] for k in ("STSBenchmark", "MR")]
    assert second["details"]["transfer"]["MR"] == first["details"]["transfer"]["MR"]  # kept, timings included
    again = _run(*args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "partial results of the same evaluation" in again.stderr
    saved = json.loads((out / "results.json").read_text())
    assert "unfinished_tasks" not in saved and saved["details"]["transfer"] == second["details"]["transfer"]
    assert (out / "stsb_cosine_buckets.png").is_file() and not list(out.glob(".*"))
    other = _run(*args[:-5], "--tasks", "STSB", "--output_dir", str(out), "--disable_tqdm")  # a finished one is kept
    assert other.returncode == 1 and "already holds the results" in other.stderr


# The last task's results used to be saved as a finished record (no unfinished_tasks), and the final report wrote
# results.json first: a kill after it (while results.md or the plots are written) left a folder that looked finished,
# which the same command refused ("already holds the results"), without the plots and with a stale results.md.
@pytest.mark.slow
@pytest.mark.parametrize("kill", [("partial:stsb_cosine_buckets.png", 1), ("partial:results.md", 4)],
                         ids=["final-plot", "final-results-md"])
def test_an_evaluation_killed_in_its_final_report_is_finished_by_the_same_command(kill, tiny_bert_dir, tmp_path):
    senteval = write_toy_senteval(tmp_path / "senteval")
    out = tmp_path / "eval"
    args = ["run_eval.py", "--model_name_or_path", str(tiny_bert_dir), "--senteval_data_dir", str(senteval),
            "--tasks", "STSB,MR,CR", "--mode", "fast", "--output_dir", str(out), "--disable_tqdm"]
    assert _run(*args, kill=kill).returncode == -signal.SIGKILL
    assert json.loads((out / "results.json").read_text()).get("unfinished_tasks")  # not taken for finished
    again = _run(*args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "partial results of the same evaluation" in again.stderr
    saved = json.loads((out / "results.json").read_text())
    assert "unfinished_tasks" not in saved and isinstance(saved["CR"], float)
    assert (out / "stsb_cosine_buckets.png").is_file() and "not finished" not in (out / "results.md").read_text()
    assert not list(out.glob(".*partial*"))


# --overwrite_output_dir removed the earlier run's files in the folder's listing order: a kill meanwhile could leave
# training_info.json (the mark of a finished run) beside a model missing files, a folder taken for finished.
@pytest.mark.slow
def test_a_start_over_killed_while_removing_leaves_no_finished_looking_run(tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    args = _train(tiny_bert_dir, tmp_path, out)
    assert _run(*args).returncode == 0
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    assert _run(*args, "--overwrite_output_dir", kill=("unlink", 3)).returncode == -signal.SIGKILL
    left = sorted(p.name for p in out.iterdir() if p.is_file())
    assert len(left) == len(files) - 2 and not (out / "training_info.json").exists()
    plain = _run(*args)  # an interrupted run now (finished from its checkpoints if any are left), never "finished"
    assert "already holds a finished run" not in plain.stderr and "Traceback" not in plain.stderr
    again = _run(*args, "--overwrite_output_dir")  # and the command that was killed finishes its work
    assert again.returncode == 0, again.stderr[-3000:]
    assert (out / "training_info.json").is_file() and sorted(p.name for p in out.iterdir() if p.is_file()) == files


# --resume_from_checkpoint True (what the refusal of a missing checkpoint offers, and the Trainer's True) was taken for
# a folder named True: refused after the model was loaded, by a message offering True again.
@pytest.mark.slow
def test_resume_from_checkpoint_true_resumes_the_last_complete_checkpoint(tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    args = _train(tiny_bert_dir, tmp_path, out)
    none = _run(*args, "--resume_from_checkpoint", "True")  # nothing to resume yet: one line, before any work
    assert none.returncode == 1 and "Traceback" not in none.stderr and not out.exists()
    assert "holds no complete checkpoint to resume from" in none.stderr.strip().splitlines()[-1]
    assert _run(*args, kill=("weights", 2)).returncode == -signal.SIGKILL  # mid checkpoint-2's weights
    again = _run(*args, "--resume_from_checkpoint", "true")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "skipping the incomplete checkpoint" in again.stderr
    assert (out / "training_info.json").is_file()
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2


@pytest.mark.parametrize(("config", "shapes", "refused"), [
    # MobileBERT: word embeddings embedding_size wide, positions hidden_size wide -- a valid model
    ({"vocab_size": 100, "embedding_size": 16, "hidden_size": 64, "max_position_embeddings": 40},
     {"embeddings.word_embeddings.weight": [100, 16], "embeddings.position_embeddings.weight": [40, 64]}, None),
    # LayoutLM: h_position_embeddings is a box coordinate's table, not the sentence positions
    ({"vocab_size": 100, "hidden_size": 16, "max_position_embeddings": 40},
     {"embeddings.word_embeddings.weight": [100, 16], "embeddings.h_position_embeddings.weight": [1024, 16]}, None),
    ({"vocab_size": 100, "hidden_size": 48, "max_position_embeddings": 40},
     {"embeddings.word_embeddings.weight": [100, 16]}, "word_embeddings.weight is [100, 16] in model.safetensors, "
                                                       "but config.json gives vocab_size 100 and hidden_size 48"),
])
def test_embedding_shapes_are_checked_against_every_size_the_config_gives(tmp_path, config, shapes, refused):
    from safetensors.torch import save_file

    from hf_cse.checkpoints import weights_problem

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", **config}))
    save_file({name: torch.zeros(shape) for name, shape in shapes.items()}, str(tmp_path / "model.safetensors"))
    problem = weights_problem(tmp_path)
    assert problem is None if refused is None else refused in problem
