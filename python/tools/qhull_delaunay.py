"""Writes, for each application of a Pollux-style trace folder, the Delaunay
tetrahedralisation that Qhull (through scipy) builds over its throughput
points, so that blox-goodput can interpolate on exactly the same simplices.

The points are those the Pollux artifact interpolates over for placements it
has not measured: placements.csv averaged per (num_nodes, num_replicas,
local_bsz), in sorted order, then scalability.csv's rows in file order. Where
the points sit on a grid, many tetrahedralisations are equally Delaunay and
the interpolated step times depend on which one is used; only Qhull's own
choice reproduces the artifact.

Usage: python qhull_delaunay.py data/pollux/traces
Writes <app>/delaunay-points.csv and <app>/delaunay-simplices.csv.
Needs numpy, pandas and scipy (the shipped files were written with scipy
1.17; its LinearNDInterpolator holds the same simplices, and the artifact's
simulator run with it reproduces the artifact's published JCTs).
"""

import os
import sys

import pandas
from scipy.spatial import Delaunay

XS = ["num_nodes", "num_replicas", "local_bsz"]
YS = ["step_time", "sync_time"]


def points(app_dir):
    p = pandas.read_csv(os.path.join(app_dir, "placements.csv"))
    p["num_nodes"] = p.placement.apply(lambda c: len(str(c)))
    p["num_replicas"] = p.placement.apply(lambda c: sum(map(int, str(c))))
    grouped = p.groupby(XS)[YS].mean().reset_index()
    s = pandas.read_csv(os.path.join(app_dir, "scalability.csv"))
    return pandas.concat([grouped[XS + YS], s[XS + YS]], ignore_index=True)


def main(root):
    for app in sorted(os.listdir(root)):
        d = os.path.join(root, app)
        if not os.path.isfile(os.path.join(d, "scalability.csv")):
            continue
        df = points(d)
        # The options scipy's LinearNDInterpolator uses in three dimensions.
        tri = Delaunay(df[XS].values, qhull_options="Qbb Qc Qz Qt")
        df[XS].to_csv(os.path.join(d, "delaunay-points.csv"), index=False)
        pandas.DataFrame(tri.simplices, columns=["v0", "v1", "v2", "v3"]).to_csv(
            os.path.join(d, "delaunay-simplices.csv"), index=False
        )
        print(app, len(df), "points", len(tri.simplices), "simplices")


if __name__ == "__main__":
    main(sys.argv[1])
