#!/usr/bin/env bash
# Forecast accuracy after a burst (docs/RUNTIME.md, "When will it start"):
# 24 toy jobs of 1-4 GPUs and 3-20 s (run time given) submitted within ~3 s
# to 3 workers x 4 logical GPUs under POLICY (default las), 1 s rounds;
# one `blox status --start` taken after the last submission, then each
# job's predicted finish against its actual one. Nothing is submitted later,
# so every error is the forecast's own. Run from a scratch folder:
# BLOX=path/to/blox TOY=path/to/blox-toy-job POLICY=las path/to/burst.sh
# (uses ports 50071-50072 and python3).
set -euo pipefail
B=${BLOX:-blox}; TOY=${TOY:-blox-toy-job}
sed "s/POLICY/${POLICY:-las}/" "$(dirname "$0")/live.toml.in" > live-run.toml
rm -rf state.redb events.jsonl w-* submits.txt ckpt; mkdir -p ckpt
RUST_LOG=${SCHED_LOG:-warn} $B scheduler --config live-run.toml > sched.log 2>&1 & S=$!
trap 'kill $S 2>/dev/null; pkill -f "blox worker --scheduler 127.0.0.1:50071" || true' EXIT
sleep 1
for w in a b c; do $B worker --scheduler 127.0.0.1:50071 --gpus 4 --workdir w-$w --name $w --allow-root-jobs > w-$w.log 2>&1 & done
sleep 2
RANDOM=${SEED:-11}
for i in $(seq 1 24); do
  g=$(( RANDOM % 4 + 1 )); d=$(( RANDOM % 18 + 3 ))
  echo "j$i $(date +%s.%N)" >> submits.txt
  $B submit --scheduler 127.0.0.1:50071 --gpus $g --name j$i --duration-s $d -- $TOY --duration-s $d --iteration-s 0.05 >/dev/null
done
sleep 1.5
$B status --scheduler 127.0.0.1:50071 --start > start.txt
echo "taken $(date +%s.%N)" >> submits.txt
while $B status --scheduler 127.0.0.1:50071 | grep -qE " (queued|running|submitted) "; do sleep 1; done
python3 - <<'PY'
import json, re
unix = {}
taken = None
for l in open("submits.txt"):
    k, v = l.split()
    if k == "taken": taken = float(v)
    else: unix[k] = float(v)
def secs(s):
    m = re.fullmatch(r"(?:(\d+)m)?(\d+)(?: )?s", s)
    return int(m.group(1) or 0) * 60 + int(m.group(2))
pred = {}
for l in open("start.txt"):
    m = re.match(r"\d+\s+(j\d+)\s", l)
    f = re.findall(r"(?:in ((?:\d+m)?\d+(?: s|s))|now) \(", l)
    if m and len(f) >= 1: pred[m.group(1)] = taken + (secs(f[-1]) if f[-1] else 0)
sub, fin, launches = {}, {}, 0
for l in open("events.jsonl"):
    e = json.loads(l)
    if e["event"] == "submitted": sub[e["name"]] = e["unix_s"] - e["time_s"] + e["spec"]["arrival_s"]
    if e["event"] == "launched": launches += 1
    if e["event"] == "finished": fin[e["name"]] = e["unix_s"]
errs, jcts = [], []
for name in sorted(fin, key=lambda n: int(n[1:])):
    jcts.append(fin[name] - sub[name])
    if name in pred: errs.append(pred[name] - fin[name])
    if "VERBOSE" in __import__("os").environ:
        print(f"{name}: predicted finish {pred.get(name, float('nan')) - taken:+.0f} s, actual {fin[name] - taken:+.1f} s")
errs = [abs(e) for e in errs]
mj = sum(jcts) / len(jcts)
print(f"policy jobs={len(jcts)} launches={launches} mean JCT {mj:.1f} s; finish error mean {sum(errs)/len(errs):.1f} s max {max(errs):.1f} s over {len(errs)} jobs ({100*sum(errs)/len(errs)/mj:.0f} % of the mean JCT)")
PY
