"""Sums an `ncu --csv --metrics gpu__time_duration.sum` capture (tools/gpu/ncu.sh) by kernel
name and launch shape, largest first; `--tail N` keeps only the last N launches (one step of
a loop)."""

import argparse
import collections
import csv
import io


def launches(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')
    rows = csv.DictReader(io.StringIO(text[start:])) if start >= 0 else []
    for r in rows:
        if r.get("Metric Name") == "gpu__time_duration.sum":
            scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(r["Metric Unit"], 1.0)
            yield r["Kernel Name"][:60], r["Grid Size"], r["Block Size"], float(r["Metric Value"].replace(",", "")) * scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--tail", type=int, default=0)
    a = ap.parse_args()
    rows = list(launches(a.csv))
    if a.tail:
        rows = rows[-a.tail:]
    total = sum(r[3] for r in rows)
    groups = collections.defaultdict(list)
    for name, grid, block, us in rows:
        groups[(name, grid, block)].append(us)
    print(f"{len(rows)} launches, {total:.1f} us")
    for (name, grid, block), v in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:40]:
        v.sort()
        print(f"{sum(v):10.1f} us {len(v):5d}x median {v[len(v) // 2]:8.2f}  {name} grid {grid} block {block}")


if __name__ == "__main__":
    main()
