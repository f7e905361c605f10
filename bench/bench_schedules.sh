#!/usr/bin/env bash
# Memory benchmark of the distributed aggregation schedules (sequential, keep_halo, one_shot).
#
# Builds a planted-partition graph, writes METIS partition stores for P = 1, 2, 4, 8 with
# sar-partition, trains GCN, GraphSAGE (mean) and GAT with sar-train under every schedule on
# P MPI ranks of this machine, and collects the JSON metrics of each run (peak memory of the
# largest rank, median epoch time, halo bytes sent per epoch summed over ranks) into
# OUT/results.csv and OUT/results.json. Then run bench/plot_schedules.py to draw the plot.
#
# Re-runnable: a run whose metrics file already exists is skipped (use --force to redo it),
# and a partition store is rewritten only if its dataset spec changed.
set -euo pipefail

usage() {
  cat <<EOF
usage: bench/bench_schedules.sh [options]

Every option can also be given as the environment variable in brackets.
  --dataset SPEC     graph to partition [SAR_BENCH_DATASET]
                     (default planted:nodes=200000,degree=20,features=128)
  --ranks "LIST"     rank counts P [SAR_BENCH_RANKS] (default "1 2 4 8")
  --models "LIST"    gcn sage gat [SAR_BENCH_MODELS] (default "gcn sage gat")
  --schedules "LIST" sequential keep_halo one_shot [SAR_BENCH_SCHEDULES]
                     (default "sequential keep_halo one_shot")
  --skip "LIST"      model:schedule:P triples not to run, e.g. "gat:keep_halo:8"
                     [SAR_BENCH_SKIP] (default none)
  --epochs E         epochs per run; memory peaks in the first [SAR_BENCH_EPOCHS] (default 3)
  --threads T        TBB threads per rank; "auto" = max(1, nproc / P) so P ranks share the
                     cores instead of oversubscribing them [SAR_BENCH_THREADS] (default auto)
  --gcn-args "ARGS"  model options for GCN [SAR_BENCH_GCN_ARGS] (default "--hidden 256 --layers 3")
  --sage-args "ARGS" for GraphSAGE [SAR_BENCH_SAGE_ARGS]
                     (default "--aggregator mean --hidden 256 --layers 3")
  --gat-args "ARGS"  for GAT [SAR_BENCH_GAT_ARGS] (default "--hidden 32 --heads 4 --layers 3")
  --extra "ARGS"     appended to every sar-train command [SAR_BENCH_EXTRA] (default none;
                     dropout stays at each model's default, it is the same in every run)
  --build DIR        build directory with tools/sar-train and sar-partition
                     [SAR_BENCH_BUILD] (default build)
  --out DIR          scratch and result directory [SAR_BENCH_OUT] (default bench/out/schedules)
  --force            rewrite the partition stores and rerun runs whose metrics exist
  --dry-run          print the commands, run nothing
  -h, --help         this help

Runs are ordered so the ones that answer the targets come first: P = 1 and 4 under
sequential and one_shot for every model, then the rest of the matrix.
Output: OUT/parts/pP (partition stores), OUT/runs/M-S-pP.{json,log}, OUT/results.{csv,json}.
Needs: mpirun (Open MPI: as root set OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1),
jq. About 30-40 min for the full matrix on 2 cores; P = 1 needs about 2.6 GiB (GCN/SAGE).
EOF
}

cd "$(dirname "$0")/.."
dataset=${SAR_BENCH_DATASET:-planted:nodes=200000,degree=20,features=128}
ranks=${SAR_BENCH_RANKS:-1 2 4 8}
models=${SAR_BENCH_MODELS:-gcn sage gat}
schedules=${SAR_BENCH_SCHEDULES:-sequential keep_halo one_shot}
skip=${SAR_BENCH_SKIP:-}
epochs=${SAR_BENCH_EPOCHS:-3}
threads=${SAR_BENCH_THREADS:-auto}
gcn_args=${SAR_BENCH_GCN_ARGS:---hidden 256 --layers 3}
sage_args=${SAR_BENCH_SAGE_ARGS:---aggregator mean --hidden 256 --layers 3}
gat_args=${SAR_BENCH_GAT_ARGS:---hidden 32 --heads 4 --layers 3}
extra=${SAR_BENCH_EXTRA:-}
build=${SAR_BENCH_BUILD:-build}
out=${SAR_BENCH_OUT:-bench/out/schedules}
force=0
dry=0

while (($#)); do
  case $1 in
    --dataset) dataset=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --schedules) schedules=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --gcn-args) gcn_args=$2; shift 2 ;;
    --sage-args) sage_args=$2; shift 2 ;;
    --gat-args) gat_args=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --force) force=1; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_schedules.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

train=$build/tools/sar-train
partition=$build/tools/sar-partition
for program in "$train" "$partition"; do
  [[ -x $program ]] || { echo "bench_schedules.sh: $program not found; build it with" \
    "ninja -C $build tools/sar-train tools/sar-partition" >&2; exit 1; }
done
command -v jq >/dev/null || { echo "bench_schedules.sh: needs jq (apt-get install jq)" >&2; exit 1; }
ncores=$(nproc)
mkdir -p "$out/parts" "$out/runs"

run() {  # prints and runs a command (or only prints it with --dry-run)
  echo "+ $*"
  ((dry)) || "$@"
}

# 1. Partition stores, one per P (the P = 1 store is the whole graph as one part).
for p in $ranks; do
  store=$out/parts/p$p
  if [[ -f $store/.bench-spec && $(cat "$store/.bench-spec") == "$dataset" && $force == 0 ]]; then
    continue
  fi
  run "$partition" --dataset "$dataset" --parts "$p" --method metis --out "$store" \
    > >(tee "$out/parts/p$p.log")
  ((dry)) || echo "$dataset" > "$store/.bench-spec"
done

# 2. Training runs: the target runs first (P = 1 and 4, sequential and one_shot), then the rest.
model_args() {
  case $1 in gcn) echo "$gcn_args" ;; sage) echo "$sage_args" ;; gat) echo "$gat_args" ;; esac
}
in_list() { [[ " $2 " == *" $1 "* ]]; }
order=()
for m in $models; do for s in sequential one_shot; do for p in 1 4; do
  in_list "$s" "$schedules" && in_list "$p" "$ranks" && order+=("$m:$s:$p")
done; done; done
for p in $ranks; do for m in $models; do for s in $schedules; do
  in_list "$m:$s:$p" "${order[*]}" || order+=("$m:$s:$p")
done; done; done

for item in "${order[@]}"; do
  IFS=: read -r m s p <<<"$item"
  if in_list "$item" "$skip"; then echo "skipping $item (--skip)"; continue; fi
  name=$m-$s-p$p
  metrics=$out/runs/$name.json
  [[ -f $metrics && $force == 0 ]] && { echo "have $name"; continue; }
  t=$threads
  [[ $t == auto ]] && t=$(( ncores / p > 1 ? ncores / p : 1 ))
  read -ra margs <<<"$(model_args "$m")"  # the argument strings split into words
  read -ra xargs_ <<<"$extra"
  cmd=(mpirun -np "$p" --oversubscribe "$train" --partitions "$out/parts/p$p" --schedule "$s"
       --model "$m" "${margs[@]}" --epochs "$epochs" --threads "$t" --quiet
       --metrics-out "$metrics.tmp" "${xargs_[@]}")
  start=$(date +%s%N)
  if ((dry)); then echo "+ ${cmd[*]}"; continue; fi
  echo "+ ${cmd[*]}"
  if "${cmd[@]}" > "$out/runs/$name.log" 2>&1; then
    wall=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
    jq --arg cmd "${cmd[*]}" --argjson wall "$wall" --argjson threads "$t" \
      '. + {command: $cmd, wall_seconds: $wall, threads_per_rank: $threads}' \
      "$metrics.tmp" > "$metrics" && rm -f "$metrics.tmp"
    tail -n 1 "$out/runs/$name.log"
  else
    echo "FAILED $name (see $out/runs/$name.log):" >&2
    tail -n 5 "$out/runs/$name.log" >&2
  fi
done
((dry)) && exit 0

# 3. Collect every run into one CSV and one JSON array.
shopt -s nullglob
files=("$out"/runs/*.json)
if ((${#files[@]} == 0)); then echo "no results in $out/runs" >&2; exit 1; fi
jq -s 'sort_by(.model, .schedule, .ranks)' "${files[@]}" > "$out/results.json"
{
  echo "model,schedule,ranks,peak_memory_bytes,peak_mib,epoch_seconds_median,bytes_sent_per_epoch,mib_sent_per_epoch,epochs,threads_per_rank,wall_seconds"
  jq -r '.[] | [.model, .schedule, .ranks, .peak_memory_bytes,
      (.peak_memory_bytes / 1048576 * 10 | round / 10), .epoch_seconds_median,
      .bytes_sent_per_epoch, (.bytes_sent_per_epoch / 1048576 * 10 | round / 10), .epochs,
      .threads_per_rank, (.wall_seconds * 10 | round / 10)] | @csv' "$out/results.json"
} > "$out/results.csv"
echo "wrote $out/results.csv and $out/results.json (${#files[@]} runs)"
column -s, -t < "$out/results.csv" || cat "$out/results.csv"
