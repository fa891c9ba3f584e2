"""Run an entry point in this process and kill it with SIGKILL at a chosen point, as a crash, a power cut or an
out-of-memory kill would (no clean-up runs): the crash-consistency tests (tests/trainer/test_crash_consistency.py).

    python tests/kill_driver.py POINT N run_unsup.py ARGS...
    python tests/kill_driver.py POINT N -m hf_cse.export ARGS...

POINT, at its N-th occurrence:
  weights        a .safetensors file is written, then cut to half its size (a save killed mid-write)
  trainer_state  a trainer_state.json is written half (the Trainer writes it last in a checkpoint)
  export         an export's files are written, before it is renamed into place
  eval           run_eval's results are written (after a task)
  curves         training_curves.png is written (after the last step, before the final save)
  tokenizer      a tokenizer is about to be saved (after the model, and a LoRA run's adapter/, in that save)
  probe          the probe file of an output folder's write check (hf_cse.checks.check_writable) is created, before
                 it is removed (the probe file is left behind)
  unlink         a file whose name does not begin with "." is about to be deleted (Path.unlink), e.g. by
                 --overwrite_output_dir
  partial:NAME   an atomic write of a file named NAME (hf_cse.writing) has written its partial file, before the
                 rename into place (the partial file is left behind, as a kill there leaves it)
"""

from __future__ import annotations

import os
import runpy
import signal
import sys

point, nth, target, *rest = sys.argv[1:]
count = 0


def due() -> bool:
    global count
    count += 1
    return count == int(nth)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def cut_in_half_when_due(path) -> None:
    """A file just written is cut to its first half and the process killed: a save killed mid-write."""
    if due():
        os.truncate(path, os.path.getsize(path) // 2)
        die()


if point == "weights":
    import transformers.modeling_utils as modeling_utils

    real_save = modeling_utils.safe_save_file

    def cut_weights(tensors, filename, *args, **kwargs):
        real_save(tensors, filename, *args, **kwargs)
        cut_in_half_when_due(filename)

    modeling_utils.safe_save_file = cut_weights
elif point == "trainer_state":
    from transformers.trainer_callback import TrainerState

    real_state = TrainerState.save_to_json

    def cut_state(self, json_path):
        real_state(self, json_path)
        cut_in_half_when_due(json_path)

    TrainerState.save_to_json = cut_state
elif point == "export":
    import hf_cse.export.sentence_transformers as export  # where to_sentence_transformer looks it up

    real_verify = export.verify_export

    def kill_in_export(*args, **kwargs):
        real_verify(*args, **kwargs)
        if due():
            die()

    export.verify_export = kill_in_export
elif point == "eval":
    import hf_cse.evaluation as evaluation

    real_report = evaluation.write_report

    def kill_after_report(*args, **kwargs):
        written = real_report(*args, **kwargs)
        if due():
            die()
        return written

    evaluation.write_report = kill_after_report
elif point == "curves":
    import hf_cse.plots as plots  # where ContrastiveTrainer.save_run looks it up

    real_plot = plots.plot_training_curves

    def kill_after_curves(*args, **kwargs):
        written = real_plot(*args, **kwargs)
        if due():
            die()
        return written

    plots.plot_training_curves = kill_after_curves
elif point == "tokenizer":
    from transformers import PreTrainedTokenizerBase

    real_tokenizer_save = PreTrainedTokenizerBase.save_pretrained

    def kill_before_tokenizer(self, *args, **kwargs):
        if due():
            die()
        return real_tokenizer_save(self, *args, **kwargs)

    PreTrainedTokenizerBase.save_pretrained = kill_before_tokenizer
elif point == "probe":
    import tempfile

    real_named = tempfile.NamedTemporaryFile

    def probe_then_die(*args, **kwargs):
        made = real_named(*args, **kwargs)
        if str(kwargs.get("prefix", "")).startswith(".write-probe") and due():
            die()
        return made

    tempfile.NamedTemporaryFile = probe_then_die
elif point == "unlink":
    from pathlib import Path

    real_unlink = Path.unlink

    def kill_before_unlink(self, *args, **kwargs):
        if not self.name.startswith(".") and due():
            die()
        return real_unlink(self, *args, **kwargs)

    Path.unlink = kill_before_unlink
elif point.startswith("partial:"):
    import types

    import hf_cse.writing as writing

    name = point.split(":", 1)[1]

    def replace_unless_due(src, dst, *args, **kwargs):
        if os.path.basename(dst) == name and due():
            die()
        return os.replace(src, dst, *args, **kwargs)

    writing.os = types.SimpleNamespace(**{**vars(os), "replace": replace_unless_due})
else:
    raise SystemExit(f"unknown kill point {point!r}")

if target == "-m":
    sys.argv = [rest[0], *rest[1:]]
    runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = [target, *rest]
    runpy.run_path(target, run_name="__main__")
