#!/usr/bin/env python3
"""Gavel's own simulation setting (OSDI'20 §7.2), built from the throughputs
Gavel measured (data/gavel/throughputs.csv, see data/gavel/README.md).

Workloads follow the job generator of Gavel's artifact (`scheduler/utils.py`
in stanford-futuredata/gavel, read, not copied):

- arrivals: Poisson, RATE jobs per hour;
- job type: uniform over Gavel's job table (ResNet-18/50, Transformer, LM and
  Recommendation at several batch sizes, A3C, CycleGAN); ResNet-50 at batch
  size 128 is left out because it does not fit on a K80 (throughput 0 there,
  and a simulated job here may be placed on any type);
- run time on one V100: 10^U(1.5, 3) minutes for 80 % of jobs, 10^U(3, 4)
  minutes for the rest;
- GPUs (with --multi-gpu): 1 (70 %), 2 (10 %), 4 (15 %) or 8 (5 %); a job of
  more than one GPU is of a type Gavel runs distributed (ResNet, Transformer,
  LM). The run time is then the run time on that many V100s.

Each job's speed on each GPU type, relative to a V100, is its throughput there
over its V100 throughput (one GPU; Gavel's multi-GPU measurements are not
vendored, so a job of k GPUs keeps its one-GPU ratios). `--speeds` prints
them as the `[sim.model_type_speed]` table of examples/configs/gavel/*.toml.

    python3 examples/gavel/generate.py --all            # data/gavel/workloads/*.csv
    python3 examples/gavel/generate.py --rate 3 --jobs 1000 --seed 1 > w.csv
    python3 examples/gavel/generate.py --speeds
"""

import argparse
import csv
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "data", "gavel")
TYPES = ["V100", "P100", "K80"]
DISTRIBUTED = ("ResNet-18", "ResNet-50", "Transformer", "LM")
# The bundled workloads (--all): single-GPU jobs (Gavel's Fig. 9) and
# multi-GPU jobs (Fig. 10), each at a moderate and a high load.
ALL = [("single", 3.0), ("single", 6.0), ("multi", 1.5), ("multi", 2.5)]
SEEDS = range(1, 5)
JOBS = 1000


def slug(job_type):
    """`ResNet-50 (batch size 16)` -> `resnet50-bs16`; `A3C` -> `a3c`."""
    family, _, rest = job_type.partition(" (batch size ")
    name = family.lower().replace("-", "")
    return f"{name}-bs{rest.rstrip(')')}" if rest else name


def throughputs():
    """{job_type: {gpu_type: steps/s}} from data/gavel/throughputs.csv."""
    out = {}
    with open(os.path.join(DATA, "throughputs.csv"), newline="") as f:
        for row in csv.DictReader(f):
            out.setdefault(row["job_type"], {})[row["gpu_type"]] = float(row["steps_per_s"])
    return out


def job_types(tp):
    """Gavel's job table in its order, less the types that cannot run on every type."""
    return [t for t in tp if all(tp[t].get(g, 0.0) > 0.0 for g in TYPES)]


def speeds(tp):
    return {slug(t): {g: tp[t][g] / tp[t]["V100"] for g in TYPES} for t in job_types(tp)}


def scale_factor(rng):
    r = rng.uniform(0, 1)
    if 0.7 <= r <= 0.8:
        return 2
    if 0.8 <= r <= 0.95:
        return 4
    if 0.95 <= r:
        return 8
    return 1


def duration_s(rng):
    if rng.random() >= 0.8:
        return 60 * 10 ** rng.uniform(3, 4)
    return 60 * 10 ** rng.uniform(1.5, 3)


def workload(tp, rate, jobs, seed, multi_gpu, out):
    rng = random.Random(seed)
    types = job_types(tp)
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["job_id", "arrival_s", "num_gpus", "duration_s", "model", "name"])
    t = 0.0
    for i in range(jobs):
        t += rng.expovariate(rate / 3600.0)
        gpus = scale_factor(rng) if multi_gpu else 1
        run = duration_s(rng)
        while True:
            jt = rng.choice(types)
            if gpus == 1 or jt.startswith(DISTRIBUTED):
                break
        w.writerow([i, f"{t:.1f}", gpus, f"{run:.1f}", slug(jt), f"{slug(jt)}-{i}"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=3.0, help="jobs per hour")
    p.add_argument("--jobs", type=int, default=JOBS)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--multi-gpu", action="store_true")
    p.add_argument("--speeds", action="store_true", help="print [sim.model_type_speed]")
    p.add_argument("--all", action="store_true", help="write data/gavel/workloads/")
    a = p.parse_args()
    tp = throughputs()
    if a.speeds:
        print("[sim.model_type_speed]")
        for m, s in speeds(tp).items():
            cells = ", ".join(f"{g} = {s[g]:.4f}" for g in TYPES)
            print(f'"{m}" = {{ {cells} }}')
        return
    if a.all:
        d = os.path.join(DATA, "workloads")
        os.makedirs(d, exist_ok=True)
        for kind, rate in ALL:
            for seed in SEEDS:
                name = os.path.join(d, f"{kind}-{rate:g}jph-seed{seed}.csv")
                with open(name, "w") as f:
                    workload(tp, rate, JOBS, seed, kind == "multi", f)
                print(f"wrote {os.path.relpath(name)}", file=sys.stderr)
        return
    workload(tp, a.rate, a.jobs, a.seed, a.multi_gpu, sys.stdout)


if __name__ == "__main__":
    main()
