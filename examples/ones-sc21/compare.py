#!/usr/bin/env python3
"""Average JCT per policy over an ONES-sc21 sweep, without the first 5 % of jobs
(by arrival) of each workload, as ONES's evaluation does (SC'21 §4.2).

    blox sweep examples/configs/ones-sc21/sweep.toml --out results/ones-sc21
    python3 examples/ones-sc21/compare.py results/ones-sc21
    python3 examples/ones-sc21/compare.py results/ones-sc21 --by-class workload-1
    python3 examples/ones-sc21/compare.py results/ones-sc21 --by-class all

With --by-class W: mean JCT, queueing and GPU-hours per job class (the name's
prefix) and policy on workload W (`all`: every workload), all jobs.
"""
import csv
import glob
import os
import sys
from collections import defaultdict


def trimmed_mean_jct_h(path, drop=0.05):
    rows = list(csv.DictReader(open(path)))
    rows.sort(key=lambda r: (float(r["arrival_s"]), int(r["job_id"])))
    rows = rows[int(len(rows) * drop):]
    done = [float(r["jct_s"]) for r in rows if r["status"] == "finished"]
    return sum(done) / max(len(done), 1) / 3600.0, len(done), len(rows)


def by_class(root, workload):
    """Per class and policy over workload W's cells (`all`: every workload)."""
    print("| class | policy | avg JCT (h) | avg queueing (h) | GPU-hours a job | jobs |")
    print("|---|---|---|---|---|---|")
    rows = {}
    pattern = "*" if workload == "all" else workload
    for jobs in sorted(glob.glob(os.path.join(root, "**", pattern, "jobs.csv"), recursive=True)):
        policy = os.path.basename(os.path.dirname(os.path.dirname(jobs)))
        for r in csv.DictReader(open(jobs)):
            cls = r["name"].rsplit("-", 1)[0]
            rows.setdefault((cls, policy), []).append(r)
    for (cls, policy), rs in sorted(rows.items()):
        mean_h = lambda k: sum(float(r[k]) for r in rs) / len(rs) / 3600.0
        print(
            f"| {cls} | {policy} | {mean_h('jct_s'):.3f} | {mean_h('queueing_s'):.3f} "
            f"| {mean_h('gpu_seconds'):.3f} | {len(rs)} |"
        )


def main():
    args = sys.argv[1:]
    if "--by-class" in args:
        i = args.index("--by-class")
        by_class(args[0] if i > 0 else "results/ones-sc21", args[i + 1])
        return
    root = args[0] if args else "results/ones-sc21"
    per = defaultdict(dict)
    for jobs in sorted(glob.glob(os.path.join(root, "**", "jobs.csv"), recursive=True)):
        cell = os.path.relpath(os.path.dirname(jobs), root).split(os.sep)
        policy, workload = cell[-2], cell[-1]
        per[policy][workload] = trimmed_mean_jct_h(jobs)
    if not per:
        sys.exit(f"no jobs.csv under {root}")
    base = {p: sum(v[0] for v in w.values()) / len(w) for p, w in per.items()}
    print("| policy | avg JCT (h), first 5 % dropped | vs ONES | workloads | unfinished |")
    print("|---|---|---|---|---|")
    ones = base.get("ones")
    for p in sorted(base, key=base.get):
        rel = f"{(base[p] / ones - 1) * 100:+.1f} %" if ones else "-"
        unfinished = sum(v[2] - v[1] for v in per[p].values())
        print(f"| {p} | {base[p]:.3f} | {rel} | {len(per[p])} | {unfinished} |")


if __name__ == "__main__":
    main()
