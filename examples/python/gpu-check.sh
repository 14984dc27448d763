#!/usr/bin/env bash
# The live runtime on a real GPU (docs/RUNTIME.md, "On a real GPU"): one
# `blox scheduler` (LAS, 2 s rounds, both tokens), one `blox worker` whose
# GPUs come from NVML, and PyTorch jobs (examples/python/train.py) submitted
# through `blox submit`. It checks, and prints PASS or FAIL for each:
#
#   1. NVML: the worker registers the node's GPUs by name;
#   2. jobs run as `--job-user nobody` (when that account can import torch),
#      and one that tries to read the workers' token is refused;
#   3. three training jobs on one GPU under LAS are preempted, resume from
#      their checkpoints and all finish;
#   4. a worker SIGSTOPped under a running job: the job stops itself when its
#      lease runs out (the GPU holds no process of it while the worker hangs),
#      and after SIGCONT it resumes from its checkpoint and finishes.
#
# Usage (repository root): BLOX=target/release/blox examples/python/gpu-check.sh
# Results go to $OUT (default /tmp/blox-gpu-check): summary.txt, and
# logs.tar.gz with the scheduler's and worker's logs, events.jsonl, the
# status tables and each launch's stderr.
set -u
BLOX=$(readlink -f "${BLOX:-target/release/blox}")
OUT=${OUT:-/tmp/blox-gpu-check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/blox-gpu.XXXXXX)
chmod 755 "$W"
S="$OUT/summary.txt"
: >"$S"
say() { echo "$*" | tee -a "$S"; }
fails=0
check() { # check NAME COND-EXIT-STATUS
    if [ "$2" -eq 0 ]; then say "PASS $1"; else say "FAIL $1"; fails=$((fails + 1)); fi
}
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
    sleep 1
    local L="$W/logs"
    mkdir -p "$L"
    cp "$W"/*.log "$W"/events.jsonl "$OUT"/status-*.txt "$L"/ 2>/dev/null
    find "$W/wd" -name stderr -path '*launch-*' 2>/dev/null | while read -r f; do
        d=${f#"$W/wd/jobs/"}
        cp "$f" "$L/stderr-$(echo "${d%/stderr}" | tr / _)" 2>/dev/null
    done
    tar -C "$W" -czf "$OUT/logs.tar.gz" logs
}
trap cleanup EXIT

say "== $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi -L 2>&1 | tee -a "$S"
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tee -a "$S"
"$BLOX" --version 2>&1 | tee -a "$S"

cp -r python/blox_client examples/python/train.py "$W/"
mkdir -p "$W/wd" "$W/cache" && chmod 1777 "$W/cache"
chmod -R a+rX "$W"
export PYTHONPATH="$W${PYTHONPATH:+:$PYTHONPATH}" XDG_CACHE_HOME="$W/cache" PYTHONDONTWRITEBYTECODE=1
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$W/token"
 head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$W/worker-token")
cat >"$W/sched.toml" <<EOF
[run]
round_s = 2.0
[scheduling]
policy = "las"
[placement]
policy = "consolidated"
[runtime]
listen = "127.0.0.1:50071"
state = "state.redb"
checkpoint_dir = "ckpt"
grace_s = 10
heartbeat_s = 1
worker_timeout_s = 5
lease_s = 2.5
fence_grace_s = 1.5
token_file = "token"
worker_token_file = "worker-token"
EOF
ADDR=127.0.0.1:50071
B() { local sub=$1; shift; "$BLOX" "$sub" --scheduler "$ADDR" --token-file "$W/token" "$@"; }

gpu_args=()
command -v nvidia-smi >/dev/null || gpu_args=(--gpus 1) # a dry run without a GPU
user_args=(--allow-root-jobs)
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1 &&
    setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$PY" -c 'import torch' 2>/dev/null; then
    user_args=(--job-user nobody)
fi
say "jobs run with: ${user_args[*]}"

"$BLOX" scheduler --config "$W/sched.toml" --log info >"$W/scheduler.log" 2>&1 &
PIDS+=($!)
sleep 1
"$BLOX" worker --scheduler "$ADDR" --token-file "$W/worker-token" --workdir "$W/wd" \
    --name gpu-node "${gpu_args[@]}" "${user_args[@]}" --log info >"$W/worker.log" 2>&1 &
WORKER=$!
PIDS+=($WORKER)

wait_for() { # wait_for SECONDS COMMAND...: until COMMAND succeeds
    local end=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -ge $end ] && return 1
        sleep 1
    done
}
status() { B status 2>/dev/null; }
ended() { # ended N: N jobs finished
    [ "$(status | grep -c ' finished ')" -ge "$1" ]
}

# 1. NVML
wait_for 30 sh -c "'$BLOX' status --scheduler $ADDR --token-file '$W/token' | grep -q 'gpu-node.*alive'"
status | tee "$OUT/status-registered.txt" >/dev/null
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [ -n "$gpu_name" ]; then
    grep -q "GPUs (${gpu_name})" "$OUT/status-registered.txt"
    check "1 the worker registered its GPUs from NVML (${gpu_name})" $?
else
    say "SKIP 1: no nvidia-smi (a dry run on ${gpu_args[*]})"
fi

# 2. A job cannot read the workers' token.
B submit --name thief --gpus 1 -- /bin/cat "$W/worker-token" >/dev/null
# 3. Three training jobs on one GPU under LAS.
for i in 1 2 3; do
    B submit --name "train-$i" --gpus 1 -- "$PY" "$W/train.py" --steps 1500 \
        --step-sleep-s 0.01 --checkpoint-every 50 >/dev/null
done
wait_for 200 ended 3
status | tee "$OUT/status-after-las.txt" >/dev/null
thief_err=$(find "$W/wd" -path '*/1/launch-*' -name stderr -exec cat {} + 2>/dev/null)
if [ "${user_args[0]}" = "--job-user" ]; then
    echo "$thief_err" | grep -q "Permission denied"
    check "2 a job run as nobody cannot read the workers' token (${thief_err})" $?
else
    say "SKIP 2: jobs run as root here (nobody cannot import torch)"
fi
[ "$(grep -c ' train-[123] .* finished ' "$OUT/status-after-las.txt")" -eq 3 ]
check "3a three PyTorch jobs finished under LAS on one GPU" $?
launches=$(cat "$W/events.jsonl" 2>/dev/null | grep -c '"event":"launched"')
resumed=$(cat "$W"/wd/jobs/*/*/launch-*/stderr 2>/dev/null | grep -c "resumed at step")
[ "$resumed" -ge 1 ]
check "3b preempted jobs resumed from checkpoints (${launches} launches, ${resumed} resumes)" $?
grep -h "starting on\|resumed at\|done" "$W"/wd/jobs/*/*/launch-*/stderr 2>/dev/null | sort | uniq -c | tee -a "$S"

# 4. A hung worker: the job fences itself.
B submit --name hang --gpus 1 -- "$PY" "$W/train.py" --steps 3000 \
    --step-sleep-s 0.01 --checkpoint-every 50 >/dev/null
wait_for 60 sh -c "grep -qs 'starting on' '$W'/wd/jobs/*/5/launch-*/stderr"
sleep 8 # past its start-up and a few checkpoints
job_pids() { ps -eo pid=,stat=,args= | awk '$2 !~ /Z/ && /train.py --steps 3000/ && !/awk/ {print $1}'; }
before=$(job_pids | tr '\n' ' ')
kill -STOP "$WORKER"
t0=$SECONDS
wait_for 15 sh -c "[ -z \"\$(ps -eo stat=,args= | awk '\$1 !~ /Z/ && /train.py --steps 3000/ && !/awk/')\" ]"
gone=$?
after_s=$((SECONDS - t0))
gpu_procs=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr '\n' ' ')
sleep 3
kill -CONT "$WORKER"
[ "$gone" -eq 0 ] && [ -n "$before" ]
check "4a the job (pids ${before}) stopped itself ${after_s} s into the worker's hang; GPU processes then: [${gpu_procs}]" $?
wait_for 90 ended 4
grep -q ' hang .* finished ' <(status)
check "4b after SIGCONT the job resumed and finished" $?
grep -h "resumed at\|lease\|done" "$W"/wd/jobs/*/5/launch-*/stderr 2>/dev/null | tee -a "$S"
status | tee "$OUT/status-end.txt"
! grep -q "policy error" "$OUT/status-end.txt"
check "4c no policy decision was refused while the worker was away" $?
say "== ${fails} check(s) failed"
exit "$fails"
