#!/usr/bin/env python3
"""Team figures of simulations (docs/RESULTS.md, "Teams and topology").

    python3 python/tools/team_figures.py --quotas CONFIG.toml DIR [DIR ...]

Each DIR is a `blox sim --out DIR` output (jobs.csv, rounds.csv,
events.jsonl); CONFIG.toml a config whose `[scheduling] teams` give the
quotas every run is judged by (also the runs that ignore teams). Prints one
Markdown row per DIR:

- avg and p99 JCT (hours);
- Jain's fairness index across teams of each team's mean slowdown
  (JCT / time holding GPUs), 1 = every team slowed alike;
- quota violations: hours, summed over teams, that a team held fewer GPUs
  than its quota while one of its jobs waited that would fit in the rest of
  its quota (from the event log, round by round);
- fragmentation: the mean largest job placeable within one rack over the
  rounds in which jobs waited (rounds.csv `largest_placeable`);
- lost work: GPU-hours of training done since the last checkpoint when a
  job was stopped (jobs.csv `lost_work_gpu_seconds`), and GPU-hours held
  while starting (start-ups and restarts, `gpu_seconds -
  productive_gpu_seconds`);
- preemptions.
"""

import argparse
import csv
import json
import sys
import tomllib
from pathlib import Path


def quotas_of(path):
    cfg = tomllib.loads(Path(path).read_text())
    s = cfg["scheduling"]
    q = {t["name"]: t["quota"] for t in s["teams"]}
    return q, s.get("default_team")


def team_of(spec, quotas, default):
    t = spec.get("team")
    return t if t in quotas else default


def violations(events_path, quotas, default):
    held = {t: 0 for t in quotas}
    gpus_of = {}  # job -> GPUs held now
    team = {}
    want = {}  # job -> GPUs asked
    waiting = set()
    last_t = None
    hours = 0.0
    rounds = {}
    # Group by round: state is judged at the end of each round.
    with open(events_path) as f:
        for line in f:
            e = json.loads(line)
            rounds.setdefault(e["time_s"], []).append(e)
    for t in sorted(rounds):
        if last_t is not None:
            dt = t - last_t
            for tm, q in quotas.items():
                if held[tm] >= q:
                    continue
                room = q - held[tm]
                if any(team[j] == tm and want[j] <= room for j in waiting):
                    hours += dt / 3600.0
        for e in rounds[t]:
            j, kind = e.get("job"), e["event"]
            if kind == "submitted":
                team[j] = team_of(e["spec"], quotas, default)
                want[j] = e["spec"]["requested_gpus"]
                waiting.add(j)
            elif kind in ("launched", "adopted"):
                tm = team.get(j)
                if tm is None:
                    continue
                held[tm] += len(e["gpus"]) - gpus_of.get(j, 0)
                gpus_of[j] = len(e["gpus"])
                waiting.discard(j)
            elif kind in ("preempted", "requeued"):
                tm = team.get(j)
                if tm is not None:
                    held[tm] -= gpus_of.pop(j, 0)
                    waiting.add(j)
            elif kind in ("finished", "failed", "cancelled", "rejected"):
                tm = team.get(j)
                if tm is not None:
                    held[tm] -= gpus_of.pop(j, 0)
                waiting.discard(j)
        last_t = t
    return hours


def jain(xs):
    xs = [x for x in xs if x > 0]
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if xs else float("nan")


def row(d, quotas, default):
    jobs = list(csv.DictReader(open(d / "jobs.csv")))
    jcts = sorted(float(j["jct_s"]) for j in jobs if j["jct_s"])
    slow = {}
    for j in jobs:
        if j["jct_s"] and float(j["run_time_s"]) > 0:
            tm = j["team"] if j["team"] in quotas else default
            slow.setdefault(tm, []).append(float(j["jct_s"]) / float(j["run_time_s"]))
    per_team = [sum(v) / len(v) for v in slow.values()]
    starting = sum(float(j["gpu_seconds"]) - float(j["productive_gpu_seconds"]) for j in jobs) / 3600
    lost = sum(float(j.get("lost_work_gpu_seconds") or 0) for j in jobs) / 3600
    preemptions = sum(int(j["preemptions"]) for j in jobs)
    rounds = list(csv.DictReader(open(d / "rounds.csv")))
    frag = [
        int(r["largest_placeable"])
        for r in rounds
        if int(r["queued_jobs"]) + int(r["waiting_jobs"]) > 0
    ]
    p99 = jcts[min(len(jcts) - 1, int(0.99 * len(jcts)))] if jcts else float("nan")
    return (
        f"| {d.name} | {sum(jcts) / len(jcts) / 3600:.2f} | {p99 / 3600:.1f} | "
        f"{jain(per_team):.3f} | {violations(d / 'events.jsonl', quotas, default):.1f} | "
        f"{sum(frag) / max(1, len(frag)):.1f} | {lost:.0f} | {starting:.0f} | {preemptions} |"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quotas", required=True)
    ap.add_argument("dirs", nargs="+", type=Path)
    a = ap.parse_args()
    quotas, default = quotas_of(a.quotas)
    print(
        "| run | avg JCT (h) | p99 JCT (h) | Jain (slowdown) | quota violations (team-h) "
        "| largest placeable in a rack (GPUs) | lost since checkpoint (GPU-h) | starting (GPU-h) | preemptions |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for d in a.dirs:
        print(row(d, quotas, default))
    return 0


if __name__ == "__main__":
    sys.exit(main())
