#!/usr/bin/env bash
# An operator's first day, rerun (docs/RUNTIME.md, "An operator's first day"):
# a scheduler with 1 s rounds and 3 workers x 4 logical GPUs on 127.0.0.1
# with a shared checkpoint_dir, 24 toy jobs of 1, 2 and 4 GPUs and 3-20 s
# (run times given), then `blox whatif` over the scheduler's event log under
# its own config. MODE: plain (default), worker-kill (kill -9 a worker 6 s
# in, start it again 1 s later) or scheduler-kill (kill -9 the scheduler
# 8 s in, start it again GAP seconds later).
#
#   examples/operator-trial/run.sh fifo [MODE]      # or las; OUT=DIR, B=DIR of the binaries
set -u
POL=${1:-fifo}
MODE=${2:-plain}
B=${B:-target/release}
B=$(cd "$B" && pwd)
OUT=${OUT:-/tmp/blox-operator-trial}/$POL-$MODE
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rm -rf "$OUT"
mkdir -p "$OUT/ckpt"
cd "$OUT" || exit 1
cat > sched.toml <<TOML
[run]
round_s = 1.0

[scheduling]
policy = "$POL"

[placement]
policy = "consolidated"

[runtime]
listen = "127.0.0.1:$PORT"
state = "state.redb"
checkpoint_dir = "ckpt"
grace_s = 3
heartbeat_s = 0.5
worker_timeout_s = ${WTO:-3}
lease_s = ${LEASE:-1.5}
fence_grace_s = ${FENCE:-1}
TOML
export BLOX_SCHEDULER=127.0.0.1:$PORT
"$B/blox" scheduler --config sched.toml --log info > sched.log 2>&1 &
SP=$!
sleep 1
declare -A WP
worker() {
  "$B/blox" worker --gpus 4 --name "$1" --workdir "$OUT/w-$1" --allow-root-jobs --cgroup off \
    --log info >> "worker-$1.log" 2>&1 &
  WP[$1]=$!
}
for w in a b c; do worker $w; done
sleep 2
# 24 jobs (GPUs:seconds), submitted 0.4 s apart.
JOBS=(1:8 2:12 4:6 1:15 2:5 4:10 1:3 2:18 4:4 1:11 2:7 4:14 1:20 2:9 4:5 1:6 2:13 4:8 1:4 2:16 4:3 1:10 2:6 4:12)
t0=$(date +%s.%N)
i=0
for js in "${JOBS[@]}"; do
  g=${js%%:*}; s=${js##*:}
  "$B/blox" submit --name "j$i" --gpus "$g" --duration-s "$s" -- \
    "$B/blox-toy-job" --duration-s "$s" --iteration-s 0.02 > /dev/null || echo "submit j$i failed"
  i=$((i + 1))
  sleep 0.4
  if [ "$MODE" = worker-kill ] && [ "$i" = 15 ]; then
    kill -9 "${WP[b]}"; date +%s.%N > worker-killed
    sleep 1
    worker b
  fi
done
# Right after the last submission: what `status --start` says.
"$B/blox" status --start > status-start.txt 2>&1
if [ "$MODE" = scheduler-kill ]; then
  sleep $((8 - $(date +%s) + ${t0%.*})) 2>/dev/null
  kill -9 $SP; wait $SP 2>/dev/null
  date +%s.%N > scheduler-killed
  sleep "${GAP:-2}"
  "$B/blox" scheduler --config sched.toml --log info > sched2.log 2>&1 &
  SP=$!
fi
# Until every job has ended (at most 150 s).
for _ in $(seq 1 300); do
  sleep 0.5
  st=$("$B/blox" status 2>/dev/null) || continue
  n=$(echo "$st" | grep -cE '^ *(job-)?[0-9]+ .*(finished|failed|cancelled)')
  [ "$n" -ge 24 ] && break
done
"$B/blox" status > status.txt 2>&1
sleep 1.5
kill "${WP[@]}" 2>/dev/null; sleep 0.5; kill $SP 2>/dev/null; wait 2>/dev/null
"$B/blox" whatif --events events.jsonl --config sched.toml --out whatif > whatif.txt 2>&1
echo "== $POL $MODE: $OUT"
grep -E "^(actual|sched) |decisions" whatif.txt
echo "status --start right after the last submission:"
head -3 status-start.txt
python3 - <<'PY'
import json
ev = [json.loads(l) for l in open("events.jsonl")]
waits = [e["reason"] for e in ev if e["event"] == "waiting"]
behind = [w for w in waits if w.startswith("blocked behind")]
print(f"waiting events: {len(waits)}, {len(behind)} naming the job they wait behind"
      + (f", e.g. {behind[0]!r}" if behind else ""))
runs = [i for i in range(1, len(ev)) if ev[i]["round"] < ev[i - 1]["round"] or ev[i]["time_s"] < ev[i - 1]["time_s"]]
if runs:
    run = ev[runs[-1]:]
    start = run[0]["unix_s"] - run[0]["time_s"]
    first = next((e for e in run if e["event"] == "launched"), None)
    adopted = sum(e["event"] == "adopted" for e in run)
    if first:
        print(f"restarted scheduler: {adopted} jobs adopted, first relaunch {first['unix_s'] - start:.1f} s after it started")
PY
if [ -f worker-killed ]; then
  # Launches onto the killed worker's node after it went silent.
  python3 - "$(cat worker-killed)" <<'PY'
import json, sys
killed = float(sys.argv[1])
ev = [json.loads(l) for l in open("events.jsonl")]
node = next(e["node"] for e in ev if e["event"] == "node_joined" and e.get("worker", "").startswith("b-"))
late = [e for e in ev if e["event"] == "launched" and e.get("unix_s", 0) > killed
        and any(g["node"] == node for g in e["gpus"])]
failed = [e for e in ev if e["event"] in ("node_failed", "node_left") and e["node"] == node]
print(f"launches onto the killed worker's node after its kill: {len(late)}")
if failed:
    print(f"its node {failed[0]['event'].replace('node_', '')} {failed[0]['unix_s'] - killed:.1f} s after the kill")
PY
fi
