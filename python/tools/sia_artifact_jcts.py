"""Per-job JCTs from a log of the Sia artifact's simulator.

`sia-simulator/multi_simulator.py ... --output=LOG` writes one JSON record a
round; the last one lists every job with its submission and completion time.
This prints `name,jct_s` (completion - submission, in the workload's order of
names as the log lists them), the format of data/sia/results/*.csv.

    python3 python/tools/sia_artifact_jcts.py LOG > data/sia/results/sia-philly-1.csv
"""

import json
import sys


def main(path: str) -> None:
    last = None
    with open(path) as f:
        for line in f:
            if line.strip():
                last = line
    if last is None:
        sys.exit(f"{path}: no records")
    jobs = json.loads(last)["submitted_jobs"]
    print("name,jct_s")
    for j in jobs:
        if j["completion_time"] is None:
            sys.exit(f"{path}: {j['name']} has not completed: the run was cut short")
        print(f"{j['name']},{j['completion_time'] - j['submission_time']}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: sia_artifact_jcts.py LOG")
    main(sys.argv[1])
