#!/usr/bin/env python3
"""ONES's own evaluation setting (Bian et al., SC'21, §4.1), built from the Pollux
artifact's profiles.

ONES ran 400 short jobs on 64 GPUs, Poisson arrivals every 30 s on average:
ImageNet subsets (10k-20k images), CIFAR-10 subsets (20k-40k) and BERT on GLUE
tasks (CoLA, MRPC, SST-2). The requested GPUs and batch sizes per class are the
ones of the authors' trace (`traces/trace_1.csv` in kurisusnowdeng/ones_sc21:
ImageNet 16 GPUs x 32, CIFAR 4 x 256 (VGG-16 4 x 128), CoLA/MRPC 2 x 16,
SST-2 8 x 32); epoch counts fall in the ranges of the authors' job history
(`traces/job_history.csv`: ImageNet and CIFAR jobs ran 20-40 epochs, GLUE jobs
5-6). Only these facts are used; no file of that repository is copied.

Each job is a *derived* application of the Pollux profiles,
`base(scale=S;epochs=E)`: the same measured step times, every epoch scaled to
the subset (blox-goodput `AppProfile::derive`). ImageNet subsets use the
`imagenet` profile (ResNet-50), CIFAR the `cifar10` profile (ResNet-18), GLUE
tasks the `bert` profile with the dataset scaled so GPU time matches: a GLUE
sample (sequence 128) costs the authors' measured ~50 samples/s per GPU, a
SQuAD sample of the profile ~13 samples/s per GPU at its largest local batch.

    python3 examples/ones-sc21/generate.py            # data/pollux/workloads-ones-sc21/
    python3 examples/ones-sc21/generate.py --seeds 1 --jobs 40 --out /tmp/w

Writes workload-<seed>.csv (Pollux workload format plus derived applications)
and, with --history, a job history that warm-starts ONES's predictor.
"""
import argparse
import csv
import os
import random

# Samples per epoch of the full datasets the profiles were measured on
# (progress of epoch 1 x the smallest validated batch: ImageNet 6406 x 200,
# CIFAR-10 391 x 128, SQuAD 7387 x 12).
FULL = {"imagenet": 6406 * 200, "cifar10": 391 * 128, "bert": 7387 * 12}
# GLUE samples cost this share of a SQuAD sample's GPU time (13 / 50 samples/s).
GLUE_COST = 13.0 / 50.0

# (class, share, base profile, dataset sizes, GPUs, per-GPU batch, epochs)
CLASSES = [
    ("imagenet", 0.35, "imagenet", [10000, 20000], 16, 32, (20, 40)),
    ("cifar", 0.25, "cifar10", [20000, 40000], 4, 256, (20, 40)),
    ("cifar-vgg16", 0.08, "cifar10", [20000, 40000], 4, 128, (20, 40)),
    ("cola", 0.11, "bert", [5000, 8000], 2, 16, (5, 6)),
    ("mrpc", 0.10, "bert", [3600], 2, 16, (5, 6)),
    ("sst2", 0.11, "bert", [10000, 20000], 8, 32, (5, 6)),
]


def draw(rng):
    r = rng.random() * sum(c[1] for c in CLASSES)
    for c in CLASSES:
        r -= c[1]
        if r <= 0:
            return c
    return CLASSES[-1]


def job(rng):
    name, _, base, sizes, gpus, local, (e0, e1) = draw(rng)
    size = rng.choice(sizes)
    epochs = rng.randint(e0, e1)
    cost = GLUE_COST if base == "bert" else 1.0
    scale = size * cost / FULL[base]
    app = f"{base}(scale={scale:.6g};epochs={epochs})"
    return name, app, gpus, gpus * local, epochs, FULL[base] * scale


def workload(seed, jobs, gap_s):
    rng = random.Random(seed)
    t, rows = 0.0, []
    for i in range(jobs):
        name, app, gpus, batch, _, _ = job(rng)
        rows.append((f"{name}-{i}", int(round(t)), app, gpus, batch))
        t += rng.expovariate(1.0 / gap_s)
    return rows


def metric_curve(traces, base):
    """Validation metric per epoch at the smallest validated batch."""
    files = sorted(
        (int(f[len("validation-"):-4]), f)
        for f in os.listdir(os.path.join(traces, base))
        if f.startswith("validation-") and f.endswith(".csv")
    )
    with open(os.path.join(traces, base, files[0][1])) as fh:
        return [float(r["metric"]) for r in csv.DictReader(fh)]


def history(traces, seed, jobs):
    """Past completed jobs of the same classes: one row per finished epoch."""
    rng = random.Random(seed)
    curves = {b: metric_curve(traces, b) for b in FULL}
    rows = []
    for k in range(jobs):
        _, app, _, _, epochs, epoch_size = job(rng)
        curve = curves[app.split("(")[0]]
        for e in range(1, epochs + 1):
            m = curve[min(e, len(curve)) - 1]
            rows.append((k, e, round(epoch_size, 3), epochs, m))
    return rows


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.normpath(os.path.join(here, "..", "..", "data", "pollux"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=8, help="workloads 1..N (default 8)")
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--gap-s", type=float, default=30.0, help="mean arrival gap")
    ap.add_argument("--out", default=os.path.join(data, "workloads-ones-sc21"))
    ap.add_argument("--history", default=os.path.join(data, "ones-sc21-history.csv"),
                    help="job history file ('' to skip)")
    ap.add_argument("--traces", default=os.path.join(data, "traces"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for s in range(1, a.seeds + 1):
        path = os.path.join(a.out, f"workload-{s}.csv")
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(["name", "time", "application", "num_replicas", "batch_size"])
            w.writerows(workload(s, a.jobs, a.gap_s))
        print(path)
    if a.history:
        with open(a.history, "w", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(["job", "epoch", "epoch_size", "total_epochs", "val_metric"])
            w.writerows(history(a.traces, 1000, 60))
        print(a.history)


if __name__ == "__main__":
    main()
