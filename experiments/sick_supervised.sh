#!/usr/bin/env bash
# One cell of the supervised demonstration (experiments/SUPERVISED.md): the comparison table's budget
# (experiments/regimes.json, the cls regime) on SICK (anchor, entailment, contradiction) triplets, then the STS 7-task test.
#   experiments/sick_supervised.sh LOSS SEED WORKDIR [loss flags...]
#   e.g. experiments/sick_supervised.sh infonce 42 /tmp/sick --temperature 0.05
set -euo pipefail
loss=$1 seed=$2 work=$3
shift 3
cd "$(dirname "$0")/.."
data=../shared/data
mkdir -p "$work"
[ -f "$work/sick_triplets.tsv" ] || python experiments/sick_triplets.py "$work/sick_triplets.tsv"
run="$work/${loss}__seed${seed}"
python run_unsup.py --method simcse --loss "$loss" "$@" --seed "$seed" \
    --train_file "$work/sick_triplets.tsv" --text_column anchor --pair_column entailment \
    --negative_column contradiction \
    --max_steps 100 --per_device_train_batch_size 64 --max_seq_length 32 --learning_rate 3e-5 \
    --lr_scheduler_type linear --warmup_steps 0 --pooler_type cls \
    --senteval_data_dir "$data/senteval" --eval_strategy steps --eval_steps 50 --save_strategy steps \
    --save_steps 50 --save_total_limit 1 --load_best_model_at_end true --metric_for_best_model stsb_spearman \
    --logging_steps 10 --disable_tqdm true --report_to none --output_dir "$run"
python run_eval.py --model_name_or_path "$run" --senteval_data_dir "$data/senteval" --tasks sts \
    --output_dir "$run/eval" --disable_tqdm true
