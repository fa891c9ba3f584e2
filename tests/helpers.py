"""Small builders shared by the trainer tests."""

from __future__ import annotations

import os
import random
import signal

from tiny_models import WORDS
from transformers import AutoTokenizer, TrainingArguments

from hf_cse.data import TwoViewCollator, load_train_dataset, tokenize_dataset


def package_methods() -> list[str]:
    """The methods hf_cse's own modules register, in registry order (not a method a test registers): the tests that
    run every method take a new one without naming it."""
    from hf_cse.models import METHODS

    return [name for name, cls in METHODS.items() if cls.__module__.startswith("hf_cse.models")]


def package_losses() -> list[str]:
    """The losses hf_cse's own modules register, sorted as the registry lists them (not a loss a test registers)."""
    from hf_cse.losses.registry import available_losses, get_loss_class

    return [name for name in available_losses() if get_loss_class(name).__module__.startswith("hf_cse.losses")]


def hang_timeout(seconds: float) -> float:
    """A subprocess's time limit in a test: a guard against a hang, never a speed check. ``seconds`` is what an idle
    machine needs, with a wide margin; it is scaled by the load per core (a shared 2-core machine at load 7 runs a
    process several times slower), so that no test fails because the machine is busy."""
    return seconds * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def answer_ctrl_c_as_in_a_terminal() -> None:
    """``preexec_fn`` of a subprocess a test sends SIGINT: a process started with SIGINT ignored (a background job
    of a shell, so the test run's children too) keeps it ignored, and the Ctrl-C under test would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def random_sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct random word sequences over the tiny vocab (duplicates would be false negatives)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out[" ".join(rng.choices(WORDS, k=rng.randint(4, 12)))] = None
    return list(out)


def long_sentences(n: int, words: int, seed: int = 0) -> list[str]:
    """``n`` distinct sentences of ``words`` tiny-vocab words, one token each (``words + 2`` with [CLS], [SEP]): rows
    of a chosen length, e.g. at or past an encoder's position limit."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out[" ".join(rng.choices(WORDS, k=words))] = None
    return list(out)


def scored_pairs_file(path, n_pairs: int, score_levels: int, seed: int):
    """A ``sentence1 / sentence2 / score`` .tsv of ``n_pairs`` random pairs with ``score_levels`` distinct scores
    (own evaluation data for --eval_file / MTEB tests); returns its path."""
    sents = random_sentences(2 * n_pairs, seed=seed)
    rows = ["sentence1\tsentence2\tscore"] + [f"{sents[i]}\t{sents[i + n_pairs]}\t{i % score_levels}"
                                                for i in range(n_pairs)]
    path.write_text("\n".join(rows) + "\n")
    return path


def hub_style_folder(folder, files: dict[str, str]):
    """``folder`` laid out as a Hub data set's repository: ``files`` (name -> text) and a dataset card whose
    ``configs`` make them the train split. ``datasets`` reads it by its card, as it reads a Hub data set (a local
    folder of plain data files is read as a list of train files instead), so that tests of data sets need no
    network."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    paths = "".join(f"    - {name}\n" for name in files)
    (folder / "README.md").write_text(f"---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
                                      f"    path:\n{paths}---\n# a data set\n")
    return folder


def tiny_train_dataset(folder, sentences, tmp_path, repeat: int = 1):
    """The toy sentences, plus distinct random ones so the data set has ``len(sentences) * repeat`` rows."""
    rows = list(sentences) + random_sentences(len(sentences) * (repeat - 1))
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "train.txt"
    path.write_text("\n".join(rows) + "\n")
    tok = AutoTokenizer.from_pretrained(folder)
    return tokenize_dataset(load_train_dataset(str(path)), tok, 32), tok


def tiny_args(out, **overrides) -> TrainingArguments:
    kwargs = dict(output_dir=str(out), per_device_train_batch_size=8, learning_rate=1e-3, max_steps=4,
                  logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
                  remove_unused_columns=False, seed=0, dataloader_drop_last=True)
    kwargs.update(overrides)
    return TrainingArguments(**kwargs)


def collator(tok):
    return TwoViewCollator(tok)


def train_args(encoder, tmp_path, out, *extra) -> list[str]:
    """Flags of a 2-step CPU training run of ``encoder`` into ``out`` on 32 random sentences (written once to
    ``tmp_path/train.txt``), then ``extra``."""
    train = tmp_path / "train.txt"
    if not train.exists():
        train.write_text("\n".join(random_sentences(32)) + "\n")
    return ["--model_name_or_path", str(encoder), "--train_file", str(train), "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--output_dir", str(out), "--use_cpu", "--disable_tqdm", "true",
            *extra]


def fake_checkpoint(folder, state: str = "{}"):
    """A checkpoint folder as complete as tests of the output-folder policy need: its trainer_state.json (``state``;
    the Trainer writes it last) and a weights file holding no tensors (a checkpoint without weights is incomplete,
    hf_cse.checkpoints.checkpoint_problem); returns the folder."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainer_state.json").write_text(state)
    (folder / "model.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")
    return folder


def cut_short_run(folder) -> str:
    """A training run's folder whose final save was cut short (its config and Trainer state written, no weights, no
    tokenizer, no training_info.json), with a complete checkpoint-2 (:func:`fake_checkpoint`) and a cut-short
    checkpoint-4; returns checkpoint-2's path."""
    from pathlib import Path

    folder = Path(folder)
    (folder / "checkpoint-2").mkdir(parents=True)
    (folder / "checkpoint-4").mkdir()
    for name in ("hf_cse_run.json", "trainer_state.json"):
        (folder / name).write_text("{}")
    fake_checkpoint(folder / "checkpoint-2")
    (folder / "config.json").write_text('{"model_type": "hf_cse_simcse", "method": "simcse"}')
    return str(folder / "checkpoint-2")


def saved_run(encoder, run, checkpoint: str, info: dict):
    """A finished run's folder ``run``: an untrained SimCSE model of ``encoder`` with its tokenizer, a copy as its
    ``checkpoint`` folder, its curves image and ``info`` as its training_info.json; returns ``run``."""
    import json
    import shutil

    from transformers import AutoTokenizer

    from hf_cse.models import SimCSEModel

    SimCSEModel.from_encoder(str(encoder)).save_pretrained(run)
    AutoTokenizer.from_pretrained(str(encoder)).save_pretrained(run)
    shutil.copytree(run, run / checkpoint)
    (run / "training_curves.png").write_bytes(b"png")
    (run / "training_info.json").write_text(json.dumps(info))
    return run


def fast_classifier(args) -> list[str]:
    """``--mode fast`` (SentEval's fast transfer classifier) where the evaluation ``args`` name a transfer task; the
    command refuses it otherwise, as a setting that does nothing."""
    from hf_cse.task_names import TRANSFER_TASKS, tasks_of

    args = list(map(str, args))
    tasks = args[args.index("--tasks") + 1] if "--tasks" in args else "sts"
    return ["--mode", "fast"] if set(tasks_of(tasks)[0]) & set(TRANSFER_TASKS) else []
