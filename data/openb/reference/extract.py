#!/usr/bin/env python3
"""Per-task placements of one run of the FGD authors' simulator, as CSV.

Usage: extract.py [--partial] EXPDIR > OUT.csv

EXPDIR is an experiment folder its run scripts write
(experiments/2023_0511/<trace>/<NN-Policy>/<tune>/<seed>/). The log gives each
task's node (`pod(ns/name) is scheduled to node(NNNN-name)`) or its failure;
the exported pod snapshot (`snapshot/ds01/InitSchedule/pod-snapshot.csv`)
gives its GPU indices. Columns: event (arrival order, from 0), task, node
(without the NNNN- prefix; empty if it failed), gpus (dash-joined indices),
frag (the cluster's fragment amount after the event, the log's "(origin)"
report, as printed).

With --partial (a run stopped before its end): the tasks its log has, GPU
indices left empty.
"""
import csv, glob, os, re, sys

partial = "--partial" in sys.argv[1:]
expdir = [a for a in sys.argv[1:] if a != "--partial"][0]
log = glob.glob(os.path.join(expdir, "log-*.log"))[0]
attempt = re.compile(r"\[(\d+)\] attempt to create pod\([^/]+/([^)]+)\)")
placed = re.compile(r"pod\([^/]+/([^)]+)\) is scheduled to node\(([^)]+)\)")
failed = re.compile(r"\[(\d+)\] failed to schedule pod\([^/]+/([^)]+)\)")
frag = re.compile(r"\[Report\]; Frag amount: ([0-9.]+); .*\(origin\)")
events = []
for line in open(log):
    if "level=info msg=" not in line:
        continue
    m = attempt.search(line)
    if m:
        events.append([int(m.group(1)), m.group(2), None, None])
        continue
    m = placed.search(line)
    if m:
        assert events and events[-1][1] == m.group(1), line
        events[-1][2] = m.group(2)[5:]
        continue
    m = failed.search(line)
    if m:
        assert events and events[-1][1] == m.group(2), line
        events[-1][2] = ""
        continue
    m = frag.search(line)
    if m and events and events[-1][3] is None:
        events[-1][3] = m.group(1)
gpus = {}
snap = os.path.join(expdir, "snapshot", "ds01", "InitSchedule", "pod-snapshot.csv")
if partial:
    # A run stopped early: its log's tasks, without the one it was placing
    # when stopped, and no GPU indices (the snapshot is written at the end).
    while events and (events[-1][2] is None or events[-1][3] is None):
        events.pop()
else:
    for row in csv.DictReader(open(snap)):
        gpus[row["pod"]] = row["gpu_index"]
out = csv.writer(sys.stdout, lineterminator="\n")
out.writerow(["event", "task", "node", "gpus", "frag"])
for i, (n, task, node, amount) in enumerate(events):
    assert n == i and node is not None and amount is not None, (n, task)
    out.writerow([n, task, node, gpus.get(task, "") if node else "", amount])
