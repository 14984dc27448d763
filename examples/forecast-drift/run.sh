#!/usr/bin/env bash
# Forecast drift on a live run (docs/RUNTIME.md, "When will it start"): 30
# toy jobs (1 or 2 GPUs, 2-12 s; their run time given unless KNOWN=0)
# submitted over ~15 s to 2 workers x 2 GPUs under POLICY (default fifo),
# 1 s rounds; then the prediction error the scheduler measured. Run from a
# scratch folder: BLOX=path/to/blox TOY=path/to/blox-toy-job POLICY=las
# KNOWN=1 path/to/run.sh (uses ports 50071-50072 and curl, python3).
set -euo pipefail
B=${BLOX:-blox}; TOY=${TOY:-blox-toy-job}
sed "s/POLICY/${POLICY:-fifo}/" "$(dirname "$0")/live.toml.in" > live-run.toml
rm -rf state.redb events.jsonl w-a w-b ckpt; mkdir -p ckpt
$B scheduler --config live-run.toml > sched.log 2>&1 & S=$!
sleep 1
for w in a b; do $B worker --scheduler 127.0.0.1:50071 --gpus 2 --workdir w-$w --name $w --allow-root-jobs > w-$w.log 2>&1 & done
sleep 2
RANDOM=7
for i in $(seq 1 30); do
  g=$(( RANDOM % 2 + 1 )); d=$(( RANDOM % 11 + 2 ))
  DUR=""; [ "${KNOWN:-1}" = 1 ] && DUR="--duration-s $d"
  $B submit --scheduler 127.0.0.1:50071 --gpus $g --name j$i $DUR -- $TOY --duration-s $d --iteration-s 0.05 >/dev/null
  sleep 0.$(( RANDOM % 9 + 1 ))
done
$B status --scheduler 127.0.0.1:50071 --start > start.txt
while $B status --scheduler 127.0.0.1:50071 | grep -qE " (queued|running|submitted) "; do sleep 1; done
curl -s 127.0.0.1:50072/metrics | grep -E "^blox_prediction_error_seconds_(sum|count)|^blox_forecast_duration_seconds_(sum|count)" > metrics.txt
$B status --scheduler 127.0.0.1:50071 > final.txt
kill $S; pkill -f "blox worker --scheduler 127.0.0.1:50071" || true
python3 - <<'PY'
import json
sub, start = {}, {}
for l in open("events.jsonl"):
    e = json.loads(l)
    j = e.get("job")
    if e["event"] == "submitted": sub[j] = e["time_s"]
    if e["event"] == "launched" and j not in start: start[j] = e["time_s"]
w = [start[j] - sub[j] for j in start if j in sub]
m = {}
for l in open("metrics.txt"):
    k, v = l.split()
    m[k] = float(v)
def mean(what):
    c = m.get(f'blox_prediction_error_seconds_count{{what="{what}"}}', 0)
    return (m.get(f'blox_prediction_error_seconds_sum{{what="{what}"}}', 0) / c if c else float("nan")), int(c)
print(f"mean wait {sum(w)/len(w):.2f} s over {len(w)} jobs; start error {mean('start')[0]:.3f} s ({mean('start')[1]} jobs); finish error {mean('finish')[0]:.3f} s ({mean('finish')[1]} jobs); forecasts {int(m['blox_forecast_duration_seconds_count'])}, mean {1000*m['blox_forecast_duration_seconds_sum']/m['blox_forecast_duration_seconds_count']:.2f} ms")
PY
