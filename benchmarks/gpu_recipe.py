#!/usr/bin/env python
"""SimCSE's one-epoch recipe end to end through ``hf-cse-train`` (gpu_check part ``recipe``; issue 37, must-have 3):

    python benchmarks/gpu_recipe.py --out DIR --encoder PATH                  # 15,625 steps (a GPU)
    python benchmarks/gpu_recipe.py --out DIR --encoder PATH --steps 1000     # shortened, the full one projected
    python benchmarks/gpu_recipe.py --out DIR --dry-run                       # any machine: tiny encoder, 8 steps

The recipe (SimCSE's ``run_unsup_example.sh``, hf_cse's ``--preset simcse_bert``): batch 64, length 32, lr 3e-5,
STS-B (and SICK-R) dev scored every 125 steps and at the start, a checkpoint saved at every evaluation with
``save_total_limit 1``, the best one (``stsb_spearman``) loaded at the end; then what every run does after training:
the model saved, dev scored once more, the sentence-transformers export. It runs through
``hf_cse.cli.train.train_from_args``, what ``hf-cse-train`` runs, on the encoder given (gpu_check's random BERT-base).

Data: the shared Wikipedia corpus (``../shared/data/unsup/wiki_sentences.txt``, 80,035 sentences, which the Trainer's
epochs repeat up to the steps) and the shared SentEval dev sets when they are beside the repository; otherwise (the
GPU machine gets the repository only) demo-corpus sentences (``gpu_check_plan.benchmark_sentences``) and a stand-in
STS-B dev (1,500 pairs) and SICK-R dev (500 pairs) of demo-corpus sentences with random scores, written in SentEval's
layout and file format: the arithmetic and the I/O are what is measured, not the scores. ``recipe.json`` says which.

``--fast``: the options a long GPU run would take, each a flag of ``hf-cse-train`` (:data:`FAST`): ``torch_compile``
(its fused kernels inside hf_cse's CUDA-graph step), a checkpoint saved only when the dev score improves (SimCSE's
own trainer saves only an improved model), dev sentences encoded in batches of 512 instead of 128, the loss logged
every 125 steps instead of hf-cse-train's 5 (a logging step reads the loss from the GPU, so the host waits for the
step to finish before it queues the next; SimCSE's script logs every 500, transformers' default).

Timing (a ``TrainerCallback`` and the trainer's ``evaluate``, CUDA synchronised at every boundary it times):
startup (to the first step), the training steps, each dev evaluation, each checkpoint save, the end of training
(loading the best checkpoint) and what follows it (final save, dev, export). A shortened run (``--steps``, or one
stopped by ``--budget-s``) also reports a projection of the full 15,625-step recipe from the measured rates, labelled
as such. Checks: the best checkpoint is the model saved at the end, the dev sentences were tokenized once.
Exit status 0 when the run and its checks passed.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_train_common import step_paths  # noqa: E402
from gpu_check_plan import BERT_BASE, TINY, benchmark_sentences, make_encoder  # noqa: E402
from gpu_profile import kernel_summary  # noqa: E402
from gpu_recipe_clock import RecipeClock, clocked_trainers, now_synced  # noqa: E402

ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "data"
FULL_STEPS, EVAL_STEPS, BATCH, LENGTH, LR = 15_625, 125, 64, 32, 3e-5
STSB_DEV_PAIRS, SICK_DEV_PAIRS = 1_500, 500  # the real dev sets' sizes
#: ``--fast``'s flags of hf-cse-train (with ``--save_strategy best``)
FAST = ["--torch_compile", "true", "--per_device_eval_batch_size", "512", "--logging_steps", "125"]
#: the profiled steps (5) start after this one (mid-window: no evaluation or save among them)
PROFILED_AFTER_STEP = 510
#: seconds a budget keeps for what follows training (loading the best checkpoint, the final save, dev, export)
END_RESERVE_S = 45


# ------------------------------------------------------------------ data

def training_text(folder: Path, data: str, rows: int) -> tuple[Path, str]:
    """The training sentences' file and what it is."""
    wiki = SHARED / "unsup" / "wiki_sentences.txt"
    if data != "stand-in" and wiki.is_file():
        return wiki, f"shared Wikipedia corpus ({wiki})"
    if data == "shared":
        raise SystemExit(f"gpu_recipe: --data shared, but {wiki} is not there.")
    path = folder / "train.txt"
    path.write_text("\n".join(benchmark_sentences(rows, seed=0, text="natural")) + "\n", encoding="utf-8")
    return path, f"demo-corpus stand-in ({rows} sentences of 8-30 words, gpu_check_plan.benchmark_sentences)"


def dev_sets(folder: Path, data: str) -> tuple[Path, str]:
    """A SentEval ``data/downstream`` folder with STS-B dev and SICK-R dev, and what it is."""
    shared = SHARED / "senteval"
    if data != "stand-in" and (shared / "STS" / "STSBenchmark" / "sts-dev.csv").is_file():
        return shared, f"shared SentEval data ({shared}): STS-B dev 1,500 pairs, SICK-R dev 500 pairs"
    if data == "shared":
        raise SystemExit(f"gpu_recipe: --data shared, but {shared} has no STS-B dev.")
    return write_stand_in_dev(folder / "senteval"), (
        "stand-in: STS-B dev 1,500 and SICK-R dev 500 pairs of demo-corpus sentences with RANDOM scores, in "
        "SentEval's layout (the scores mean nothing; the arithmetic and the I/O are the real ones)")


def write_stand_in_dev(root: Path, seed: int = 1) -> Path:
    """STS-B dev (``STS/STSBenchmark/sts-dev.csv``: genre, file, year, id, score, sentence1, sentence2; no header)
    and SICK-R dev (``SICK/SICK_trial.txt``: a header, then pair_ID, sentence_A, sentence_B, relatedness_score,
    entailment_judgment), tab-separated, distinct sentences, random scores in each set's range."""
    n = 2 * (STSB_DEV_PAIRS + SICK_DEV_PAIRS)
    sentences = list(dict.fromkeys(benchmark_sentences(3 * n, seed=seed, text="natural")))[:n]
    if len(sentences) < n:
        raise SystemExit(f"gpu_recipe: only {len(sentences)} distinct demo-corpus sentences for {n} dev sentences.")
    rng = random.Random(seed)
    stsb, sick = sentences[:2 * STSB_DEV_PAIRS], sentences[2 * STSB_DEV_PAIRS:]
    rows = [f"main-captions\tMSRvid\t2012dev\t{i:04d}\t{rng.uniform(0, 5):.3f}\t{stsb[2 * i]}\t{stsb[2 * i + 1]}"
            for i in range(STSB_DEV_PAIRS)]
    (root / "STS" / "STSBenchmark").mkdir(parents=True, exist_ok=True)
    (root / "STS" / "STSBenchmark" / "sts-dev.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    rows = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
    rows += [f"{i}\t{sick[2 * i]}\t{sick[2 * i + 1]}\t{rng.uniform(1, 5):.1f}\tNEUTRAL" for i in range(SICK_DEV_PAIRS)]
    (root / "SICK").mkdir(parents=True, exist_ok=True)
    (root / "SICK" / "SICK_trial.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


# ------------------------------------------------------------------ the run

def recipe_argv(encoder: Path, train: Path, senteval: Path, out: Path, steps: int, eval_steps: int, batch: int,
                rows: int, cuda: bool, save_strategy: str, fast: bool = False, more: str = "") -> list[str]:
    save = ["--save_strategy", "steps", "--save_steps", str(eval_steps)] if save_strategy == "steps" else [
        "--save_strategy", "best"]
    return ["--preset", "simcse_bert", "--model_name_or_path", str(encoder), "--train_file", str(train),
            "--max_train_samples", str(rows), "--senteval_data_dir", str(senteval), "--output_dir", str(out),
            "--max_steps", str(steps), "--per_device_train_batch_size", str(batch), "--max_seq_length", str(LENGTH),
            "--learning_rate", str(LR), "--eval_strategy", "steps", "--eval_steps", str(eval_steps), *save,
            "--save_total_limit", "1", "--metric_for_best_model", "stsb_spearman", "--load_best_model_at_end", "true",
            "--precision", "bf16" if cuda else "fp32", "--disable_tqdm", "true", "--seed", "42",
            *([] if cuda else ["--use_cpu"]), *(FAST if fast else []), *shlex.split(more)]


def best_checkpoint_kept(out: Path, encoder: Path, kept_step: int | None) -> dict:
    """The run's ``trainer_state.json`` names a best checkpoint, it is still there, and the model saved at the end
    holds its weights -- or, where the untrained encoder scored better on dev before the first step
    (``kept_step`` 0: hf_cse then saves it instead), the untrained encoder's weights."""
    from safetensors.torch import load_file

    state = json.loads((out / "trainer_state.json").read_text())
    best = state.get("best_model_checkpoint")
    res = {"best_model_checkpoint": best and Path(best).name, "best_metric": state.get("best_metric"),
           "checkpoints_left": sorted(p.name for p in out.glob("checkpoint-*")), "kept_step": kept_step}
    if not best or not (Path(best) / "model.safetensors").is_file():
        return {**res, "ok": False, "why": "no best checkpoint with model.safetensors"}
    final = load_file(out / "model.safetensors")
    if kept_step == 0:  # the encoder's own names, without the method model's prefix
        untrained = load_file(encoder / "model.safetensors")
        pairs = [(final[k], untrained[k.split(".", 1)[1]]) for k in final
                 if k.startswith("encoder.") and k.split(".", 1)[1] in untrained]
        needed = [k for k in untrained if not k.startswith("pooler.")]  # BERT's pooler: not in a CLS-pooled model
        same = len(pairs) >= len(needed) > 0 and all(bool((a == b).all()) for a, b in pairs)
        return {**res, "ok": same, "why": "the untrained encoder scored better and was kept" if same else
                "the untrained encoder was to be kept, but the final model's encoder differs from it"}
    kept = load_file(Path(best) / "model.safetensors")
    same = final.keys() == kept.keys() and all(bool((final[k] == kept[k]).all()) for k in final)
    return {**res, "ok": same, "why": "" if same else "the final model differs from the best checkpoint"}


def projection(clock: RecipeClock, startup_s: float, steps_s: float, end_s: float, after_s: float, eval_steps: int,
               save_strategy: str) -> dict:
    """The full recipe's wall time (15,625 steps, dev and, with ``steps``, a save every 125) from this run's
    rates: steady-state step time (after the first evaluation boundary), mean dev evaluation and save, and this
    run's startup and end. ``eval_steps``: this run's interval (for the share of evaluations that saved)."""
    steps_done = clock.steps
    b_step, b_time, b_evals = clock.boundary or (0, clock.train_begin, 0)
    later_evals = [e["s"] for e in clock.evaluations[b_evals:] if e["phase"] == "training"]
    later_saves = [s["s"] for s in clock.saves if s["step"] >= b_step]
    window = (clock.mark - b_time) - sum(later_evals) - sum(s for s in later_saves)
    steady = steps_done > b_step  # else (stopped before the first boundary): the mean over every step
    step_s = window / (steps_done - b_step) if steady else steps_s / max(1, steps_done)
    during = [e["s"] for e in clock.evaluations if e["phase"] == "training"] or [
        e["s"] for e in clock.evaluations if e["phase"] == "start"]
    eval_s = sum(during) / len(during) if during else 0.0
    save_s = sum(s["s"] for s in clock.saves) / len(clock.saves) if clock.saves else 0.0
    n_evals = FULL_STEPS // EVAL_STEPS
    n_saves = n_evals if save_strategy == "steps" else len(clock.saves) * n_evals / max(1, steps_done // eval_steps)
    start_eval = next((e["s"] for e in clock.evaluations if e["phase"] == "start"), 0.0)
    total = startup_s + start_eval + FULL_STEPS * step_s + n_evals * eval_s + n_saves * save_s + end_s + after_s
    return {"label": "PROJECTION of the full recipe from this shortened run's rates, not a measurement",
            "steps": FULL_STEPS, "evaluations": n_evals, "saves": round(n_saves, 1),
            "step_s": step_s, "step_s_from": f"steps {b_step + 1}-{steps_done}" if steady else "every step",
            "eval_s": eval_s, "save_s": save_s, "steps_total_s": FULL_STEPS * step_s,
            "evals_total_s": n_evals * eval_s, "saves_total_s": n_saves * save_s, "total_s": total,
            "total_min": total / 60}


def run(args, record) -> bool:
    import torch

    cuda = torch.cuda.is_available() and not args.dry_run
    steps, eval_steps, batch = args.steps, args.eval_steps, args.batch_size
    with tempfile.TemporaryDirectory(prefix="gpu_recipe_", dir=args.work_dir) as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        encoder = args.encoder or make_encoder(tmp / "encoder", TINY if args.dry_run else BERT_BASE)
        rows = min(steps * batch, 80_035)  # one pass over at most the Wikipedia file; the epochs repeat it
        train, train_source = training_text(tmp, args.data, rows)
        senteval, dev_source = dev_sets(tmp, args.data)
        record("data", {"training_text": train_source, "training_rows": rows, "dev": dev_source,
                        "prepared_s": time.perf_counter() - t0})
        out = tmp / "run"
        argv = recipe_argv(encoder, train, senteval, out, steps, eval_steps, batch, rows, cuda, args.save_strategy,
                           args.fast, args.train_args)
        record("command", "hf-cse-train " + " ".join(argv))
        from hf_cse.cli.train import train_from_args

        start = time.perf_counter()
        clock = RecipeClock(cuda, start, max(0.75 * args.budget_s, args.budget_s - END_RESERVE_S)
                            if args.budget_s else None)
        first = min(PROFILED_AFTER_STEP, steps // 2)
        clock.profile_steps = (first, min(first + 5, steps))
        with clocked_trainers(clock):
            train_from_args(argv)
        done = now_synced(cuda)
        if clock.train_begin is None:
            raise RuntimeError("the timing callback saw no training: hf-cse-train no longer builds a "
                               "ContrastiveTrainer here")
        evals_in = [e for e in clock.evaluations if e["phase"] != "after training"]
        after = [e for e in clock.evaluations if e["phase"] == "after training"]
        loop_s = clock.mark - clock.train_begin
        steps_s = loop_s - sum(e["s"] for e in evals_in) - sum(s["s"] for s in clock.saves)
        parts = {"startup_s": clock.train_begin - start, "steps_s": steps_s,
                 "dev_evaluations_s": sum(e["s"] for e in evals_in), "saves_s": sum(s["s"] for s in clock.saves),
                 "end_of_training_s": clock.train_end - clock.mark,
                 "after_training_s": done - clock.train_end, "total_s": done - start}
        during = [e["s"] for e in evals_in if e["phase"] == "training"]
        dev = {"count": len(evals_in), "first_s": evals_in[0]["s"] if evals_in else None,
               "mean_s_after_the_first": sum(during) / len(during) if during else None,
               "max_s_after_the_first": max(during) if during else None,
               "after_training_s": after[0]["s"] if after else None,
               "tokenized_once": len(set(clock.prepared_ids)) == 1 and clock.prepared_ids[0] is not None,
               "evaluations": clock.evaluations}
        saves = {"count": len(clock.saves), "mean_s": parts["saves_s"] / len(clock.saves) if clock.saves else None,
                 "saves": clock.saves}
        record("run", {"steps_requested": steps, "steps_done": clock.steps, "eval_steps": eval_steps,
                       "batch_size": batch, "save_strategy": args.save_strategy,
                       "stopped_by_budget_at_step": clock.stopped_at, "step_s_mean": steps_s / max(1, clock.steps),
                       "sentences_per_s": batch * clock.steps / steps_s if steps_s > 0 else None,
                       "fast": args.fast, **step_paths(clock.trainer),
                       "torch_compile": bool(clock.trainer.args.torch_compile), "windows": clock.windows})
        record("parts", parts)
        record("startup", clock.startup_parts())
        record("profile", kernel_summary(clock.profiled, "cuda" if cuda else "cpu"))
        record("dev", dev)
        record("saves", saves)
        kept_step = getattr(getattr(clock.trainer, "dev", None), "kept_step", None)  # 0: the untrained encoder
        kept = best_checkpoint_kept(out, Path(encoder), kept_step) if clock.saves or not clock.stopped_at else {
            "ok": True, "skipped": "the budget stopped training before the first save"}
        checks = {"best_checkpoint_kept": kept,
                  "dev_tokenized_once": dev["tokenized_once"],
                  "evaluations_as_scheduled": len(evals_in) == 1 + clock.steps // eval_steps,
                  "export_written": (out / "sentence-transformers" / "modules.json").is_file()}
        record("checks", checks)
        if clock.steps < FULL_STEPS:
            record("projection", projection(clock, parts["startup_s"], steps_s, parts["end_of_training_s"],
                                            parts["after_training_s"], eval_steps, args.save_strategy))
        ok = checks["best_checkpoint_kept"]["ok"] and all(v for k, v in checks.items() if k != "best_checkpoint_kept")
        budget = f" (stopped by --budget-s at step {clock.stopped_at} of {steps})" if clock.stopped_at else ""
        record("status", ("ok" + budget) if ok else "failed: " + ", ".join(
            k for k, v in checks.items() if not (v["ok"] if isinstance(v, dict) else v)))
        return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for recipe.json (created)")
    ap.add_argument("--encoder", type=Path, help="encoder folder (default: a random BERT-base, tiny with --dry-run)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny encoder, 8 steps of 8, dev every 2 steps")
    ap.add_argument("--steps", type=int, help=f"training steps (default {FULL_STEPS}; dry run 8)")
    ap.add_argument("--eval-steps", type=int, help=f"dev evaluation and save interval (default {EVAL_STEPS}; dry 2)")
    ap.add_argument("--batch-size", type=int, help=f"default {BATCH} (dry run 8)")
    ap.add_argument("--save-strategy", choices=("steps", "best"),
                    help="steps: a checkpoint at every evaluation, save_total_limit 1 (hf_cse's preset; the default); "
                         "best: only when the dev score improves (SimCSE's own trainer; the default with --fast)")
    ap.add_argument("--fast", action="store_true", help="torch.compile, the best model saved, dev batches of 512 "
                                                        f"({' '.join(FAST)} --save_strategy best)")
    ap.add_argument("--data", choices=("auto", "shared", "stand-in"), default="auto",
                    help="auto: the shared corpus and SentEval data when beside the repository, else stand-ins")
    ap.add_argument("--train-args", default="",
                    help="more hf-cse-train flags, one string, appended to the recipe's (e.g. \"--encoder_attention "
                         "eager\"): a variant a gpu_check part measured faster, run whole")
    ap.add_argument("--budget-s", type=float, help=f"stop training when this many seconds less {END_RESERVE_S} "
                                                   "(at least 75%%) have passed; the rest is projected")
    ap.add_argument("--work-dir", type=Path, help="where the run's temporary folder goes (checkpoints: GBs)")
    args = ap.parse_args(argv)
    pick = lambda given, dry, full: given if given is not None else dry if args.dry_run else full  # noqa: E731
    args.steps = pick(args.steps, 8, FULL_STEPS)
    args.eval_steps = pick(args.eval_steps, 2, EVAL_STEPS)
    args.batch_size = pick(args.batch_size, 8, BATCH)
    args.save_strategy = args.save_strategy or ("best" if args.fast else "steps")
    if min(args.steps, args.eval_steps, args.batch_size) < 1:
        ap.error("--steps, --eval-steps and --batch-size must be positive.")
    if args.encoder and not (args.encoder / "config.json").is_file():
        ap.error(f"--encoder {args.encoder}: no config.json there.")
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        ap.error("no CUDA GPU is visible to torch: on a CPU-only machine run with --dry-run.")
    from gpu_check import device_info

    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"part": "recipe", "dry_run": args.dry_run, "device": device_info(),
               "started": time.strftime("%H:%M:%S"), "status": "running"}
    path = args.out / "recipe.json"

    def record(key, value):
        payload[key] = value
        path.write_text(json.dumps(payload, indent=2, default=str, allow_nan=True) + "\n")

    t0 = time.perf_counter()
    try:
        ok = run(args, record)
    except Exception as exc:  # recorded for gpu_check's summary, then the traceback as usual
        record("status", f"error: {type(exc).__name__}: {exc}"[:2000])
        raise
    finally:
        record("part_wall_s", time.perf_counter() - t0)
    print(f"[recipe] {payload['status']}: {payload['parts']['total_s']:.1f} s for {payload['run']['steps_done']} "
          f"steps" + (f"; full recipe projected at {payload['projection']['total_min']:.1f} min"
                      if "projection" in payload and math.isfinite(payload["projection"]["total_s"]) else ""),
          flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
