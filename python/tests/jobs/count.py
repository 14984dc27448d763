"""A pure-Python job for the tests: starts for --startup-s seconds, counts
--steps steps of --step-s seconds under its lease, checkpoints the count."""

import argparse
import sys
import time

from blox_client import Job

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, required=True)
p.add_argument("--step-s", type=float, default=0.05)
p.add_argument("--startup-s", type=float, default=0.0)
args = p.parse_args()

time.sleep(args.startup_s)  # importing and initialising, as a real job does
job = Job.from_env()
saved = job.load_checkpoint("count")
start = int(saved) if saved else 0
if job.env.resume:
    print(f"count.py: resumed at {start}", file=sys.stderr, flush=True)
done = start
it = job.iterate(range(start, args.steps))
for i in it:
    time.sleep(args.step_s)
    done = i + 1
    job.progress(done / args.steps)
job.save_checkpoint("count", str(done).encode())
if it.revoked:
    print(f"count.py: revoked at {done}", file=sys.stderr, flush=True)
elif done >= args.steps:
    job.finish()
