"""Dumps the per-GPU slowdown factors the PAL artifact's simulator gives a
cluster (hal-uw/blox-pal, branch `artifact`, `blox/cluster_state.py`).

Its simulated GPUs get, per performance class, a value drawn with Python's
`random.choice` (seeded 42 when the cluster state is made) from the class's
profile (`profiles.json` -> `aggregated_data/sim/*-longhorn-agg.csv`, `perf`
divided by its median): the profile's uuids never match a simulated GPU's
number. This runs that code itself, so the table is the artifact's exactly.

    python pal_factors.py ARTIFACT_DIR NODES GPUS_PER_NODE > factors.csv

With `--classed pmfirst` (or `pal`) it prints instead the classed factors
that placement's own `get_slowdown_factors` gives those GPUs (seeded
scikit-learn k-means; they depend on scikit-learn's version, which is
printed to stderr).

Needs pandas < 2 (the artifact calls DataFrame.append).
"""
import argparse
import contextlib
import os
import sys
import warnings


def main():
    p = argparse.ArgumentParser()
    p.add_argument("artifact")
    p.add_argument("nodes", type=int)
    p.add_argument("gpus_per_node", type=int)
    p.add_argument("--classed", choices=["pmfirst", "pal"])
    p.add_argument("--locality-penalty", type=float, default=1.7)
    a = p.parse_args()
    os.chdir(a.artifact)
    sys.path.insert(0, a.artifact)
    warnings.simplefilter("ignore")
    # The artifact prints as it goes: keep stdout for the table.
    with contextlib.redirect_stdout(sys.stderr):
        from blox.cluster_state import ClusterState

        c = ClusterState(None)
        nodes = [
            {"ipaddr": "", "numGPUs": a.gpus_per_node,
             "gpuUUIDs": "\n".join(str(i) for i in range(a.gpus_per_node))}
            for _ in range(a.nodes)
        ]
        c.update(nodes)
        df = c.gpu_df.reset_index(drop=True)
        if a.classed:
            import sklearn
            import pandas as pd

            print(f"scikit-learn {sklearn.__version__}", file=sys.stderr)
            if a.classed == "pmfirst":
                from placement.pmfirst import get_slowdown_factors

                by_class = get_slowdown_factors(df)
            else:
                from placement.pal import get_slowdown_factors

                _, by_class = get_slowdown_factors(df, a.locality_penalty)
            out = df[["GPU_ID", "Node_ID"]].copy()
            for key, d in by_class.items():
                out[f"PerfVar_{key}"] = d["sf"].values
            df = out
    cols = ["GPU_ID", "Node_ID"] + [k for k in df.columns if k.startswith("PerfVar_")]
    df[cols].to_csv(sys.stdout, index=False, float_format="%.17g")


if __name__ == "__main__":
    main()
