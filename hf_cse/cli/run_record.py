"""The record (``hf_cse_run.json``) of a resumed run, above all one that goes on from a checkpoint named by
``--resume_from_checkpoint``.

A new run records its settings when it claims its folder (:func:`hf_cse.cli.output_dir.prepare_output_dir`); a run
going on from a named checkpoint (a finished run trained further with a larger ``--max_steps``, another run's
checkpoint in a new folder, a checkpoint resumed with other settings) records its own once it has saved a checkpoint,
finished training or (finished from its last checkpoint as it is) been saved, not before: until then the folder's
newest checkpoint, model and record are the earlier run's, which its own command still resumes. From then the
record is this run's, so the same command without ``--resume_from_checkpoint`` resumes it, and ``--config`` of the
record runs it again (where no setting but the total of steps changed on the way: the record holds the last
settings only). A run resumed by the folder (the same settings) writes the record it was compared with again, in
today's form.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..errors import saving_files
from ..run_files import RUN_RECORD_FILE
from ..writing import json_safe, write_json_atomic


class RecordWhenSaved(TrainerCallback):
    """Writes ``settings`` (the run's, as :func:`~hf_cse.cli.output_dir.prepare_output_dir` records a new run's)
    into ``output_dir``'s record on the main process, at each checkpoint and when training ends."""

    def __init__(self, output_dir, settings: dict[str, Any]):
        self.record, self.settings = Path(output_dir) / RUN_RECORD_FILE, json_safe(settings)

    def write(self, main_process: bool) -> None:
        """The record, written by the ``main_process`` (the command calls it once the run is saved, too: a run
        finished from its last checkpoint as it is trains no step and ends no training)."""
        if main_process:
            with saving_files():  # a refused write is one line (hf_cse.cli.run_cli)
                write_json_atomic(self.record, self.settings, sort_keys=True)

    def on_save(self, args, state, control, **kwargs):
        self.write(state.is_world_process_zero)

    def on_train_end(self, args, state, control, **kwargs):
        self.write(state.is_world_process_zero)
