#!/usr/bin/env bash
# Reproduces the Pollux artifact's simulator experiments (docs/REPRODUCTION.md).
#
#   cargo build --release --no-default-features
#   examples/configs/pollux-artifact/reproduce.sh results/pollux-artifact [load|interval|interference]...
#
# Runs every (experiment, policy, workload) as one `blox sim`, JOBS at a time
# (default: all cores), then prints the average JCT per workload and the mean
# over the 8 workloads, in hours, as Markdown tables (also in OUT/summary.md).
set -euo pipefail
cd "$(dirname "$0")/../../.."
BLOX=${BLOX:-target/release/blox}
OUT=${1:-results/pollux-artifact}
shift || true
EXPERIMENTS=${*:-load interval interference}
JOBS=${JOBS:-$(nproc)}
CFG=examples/configs/pollux-artifact
mkdir -p "$OUT"
plan="$OUT/plan.txt"
: > "$plan"
aliases=()
same_as() { # name existing-name: the same run under a second name
  aliases+=("$1=$2")
}
add() { # name config workload-dir [--set k=v]...
  local name=$1 cfg=$2 dir=$3 w; shift 3
  for w in 1 2 3 4 5 6 7 8; do
    echo "$OUT/$name/workload-$w|$CFG/$cfg.toml|data/pollux/$dir/workload-$w.csv|$*" >> "$plan"
  done
}
for e in $EXPERIMENTS; do
  case $e in
    load)
      # Baselines first: they take seconds; Pollux takes about a minute a run.
      for p in tiresias optimus-oracle pollux; do
        add "load-1.0/$p" $p workloads
        add "load-0.5/$p" $p workloads-0.5
      done ;;
    interval)
      for s in 30 60 120 240 480; do
        # 60 s is the load-1.0 Pollux run itself.
        if [ "$s" = 60 ] && [[ " $EXPERIMENTS " == *" load "* ]]; then same_as "interval/60" "load-1.0/pollux"; continue; fi
        add "interval/$s" pollux workloads "--set run.round_s=$s"
      done ;;
    interference)
      for i in 0 0.25 0.5; do
        if [ "$i" = 0 ] && [[ " $EXPERIMENTS " == *" load "* ]]; then
          same_as "interference/avoid-0" "load-1.0/pollux"
        else
          add "interference/avoid-$i" pollux workloads "--set sim.interference=$i"
        fi
        add "interference/off-$i" pollux workloads "--set sim.interference=$i --set scheduling.interference_avoidance=false"
      done ;;
    *) echo "unknown experiment $e (load, interval, interference)" >&2; exit 2 ;;
  esac
done
export BLOX
# Skip runs that already finished (the script can be resumed).
grep -v '^$' "$plan" | while IFS='|' read -r out cfg wl extra; do
  [ -f "$out/jobs.csv" ] || echo "$out|$cfg|$wl|$extra"
done | RAYON_NUM_THREADS=1 xargs -P "$JOBS" -I{} bash -c '
  IFS="|" read -r out cfg wl extra <<< "{}"
  mkdir -p "$(dirname "$out")"
  $BLOX sim "$cfg" --workload "$wl" --out "$out" $extra > /dev/null 2> "$out.log" || echo "FAILED: $out (see $out.log)" >&2'
for a in "${aliases[@]}"; do
  mkdir -p "$(dirname "$OUT/${a%%=*}")"
  ln -sfn "$(realpath "$OUT/${a#*=}")" "$OUT/${a%%=*}"
  for w in 1 2 3 4 5 6 7 8; do echo "$OUT/${a%%=*}/workload-$w|alias" >> "$plan"; done
done
# Average JCT (h) per workload and their mean.
avg() { awk -F, 'NR==1{for(i=1;i<=NF;i++) if($i=="jct_s") c=i; next} {s+=$c; n++} END{printf "%.3f", s/n/3600}' "$1"; }
{
  printf "| run | w1 | w2 | w3 | w4 | w5 | w6 | w7 | w8 | mean |\n|---|---|---|---|---|---|---|---|---|---|\n"
  cut -d'|' -f1 "$plan" | xargs -n1 dirname | awk '!seen[$0]++' | while read -r d; do
    row="| ${d#$OUT/} |"; sum=0
    for i in 1 2 3 4 5 6 7 8; do
      a=$(avg "$d/workload-$i/jobs.csv"); row="$row $a |"; sum=$(awk -v s=$sum -v a=$a 'BEGIN{print s+a}')
    done
    echo "$row $(awk -v s=$sum 'BEGIN{printf "%.3f", s/8}') |"
  done
} | tee "$OUT/summary.md"
