#!/usr/bin/env python3
"""Writes study-workload.csv, the workload of the 16,384-GPU failures study
(docs/RELIABILITY.md): a few hero jobs of 1,024 to 8,192 GPUs, weeks long, over
a stream of Philly-shaped jobs (GPU counts and durations drawn from the
Philly digest, Poisson arrivals) for 54 days. Deterministic (seeded).

    python3 examples/configs/failures/make_study_workload.py

Columns: job_id,arrival_s,num_gpus,duration_s (the `csv` workload kind).
"""
import csv
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
PHILLY = os.path.join(HERE, "../../../data/pollux/traces/philly.csv")
DAY = 86400.0

# (GPUs, days of work, arrival day): two 8k pre-training runs, two 4k, and
# 1-2k runs arriving over the study, so that heroes keep most of the
# cluster busy, as on a pre-training fleet.
HEROES = [
    (8192, 30, 0.0),
    (4096, 21, 0.0),
    (2048, 14, 1.0),
    (1024, 10, 2.0),
    (1024, 10, 13.0),
    (2048, 14, 16.0),
    (4096, 20, 22.0),
    (8192, 18, 32.0),
    (1024, 10, 40.0),
]
SMALL_PER_HOUR = 30
STUDY_DAYS = 54


def main():
    rng = random.Random(37)
    with open(PHILLY) as f:
        philly = [(int(r["num_gpus"]), float(r["duration"])) for r in csv.DictReader(f)]
    jobs = [(day * DAY, g, days * DAY) for g, days, day in HEROES]
    t = 0.0
    while True:
        t += rng.expovariate(SMALL_PER_HOUR / 3600.0)
        if t >= STUDY_DAYS * DAY:
            break
        g, d = rng.choice(philly)
        jobs.append((round(t, 1), g, max(d, 1.0)))
    jobs.sort(key=lambda j: j[0])
    out = os.path.join(HERE, "study-workload.csv")
    with open(out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["job_id", "arrival_s", "num_gpus", "duration_s"])
        for i, (a, g, d) in enumerate(jobs):
            w.writerow([i, f"{a:.1f}", g, f"{d:.1f}"])
    print(f"{len(jobs)} jobs -> {out}")


if __name__ == "__main__":
    main()
