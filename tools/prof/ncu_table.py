#!/usr/bin/env python3
"""Per-kernel time table from an `ncu --csv --metrics gpu__time_duration.sum` log.

usage: ncu_table.py NCU_CSV [TOP] [LAST_N_KERNELS | step]
("step": the kernels of the last decode step, after the second-to-last sampling kernel.)
Groups kernels by their demangled name (template arguments cut), sums the measured time,
and prints count, total, mean and share, largest first.
"""
import csv
import re
import sys
from collections import defaultdict


def short(name):
    name = re.sub(r"\(.*", "", name)                 # arguments
    name = re.sub(r"^void ", "", name)
    name = name.replace("<unnamed>::", "")
    name = re.sub(r"<.*>$", lambda m: m.group(0)[:24], name)  # template arguments, trimmed
    return name.strip()[:70]


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    last = sys.argv[3] if len(sys.argv) > 3 else "0"  # only the last N kernels (0: all), or "step"
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        scale = {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "nsecond": 1e-3}.get(unit, 1e-3)
        rows.append((short(r["Kernel Name"]), v * scale))
    if last == "step":
        samples = [i for i, (k, _) in enumerate(rows) if "SampleKernel" in k]
        gaps = [b - a for a, b in zip(samples, samples[1:])]
        if gaps:
            # One sampling launch per step, or a pair (then the gaps alternate short, long).
            period = gaps[-1] + gaps[-2] if len(gaps) >= 2 and min(gaps[-2:]) < 10 else gaps[-1]
            rows = rows[samples[-1] + 1 - period:samples[-1] + 1]
    elif int(last):
        rows = rows[-int(last):]
    agg = defaultdict(lambda: [0, 0.0])
    for k, us in rows:
        agg[k][0] += 1
        agg[k][1] += us
    total = sum(a[1] for a in agg.values())
    print(f"{len(rows)} kernels, {total/1000:.3f} ms in all")
    print(f"{'kernel':70s} {'count':>6s} {'total_us':>10s} {'mean_us':>9s} {'share':>6s}")
    for k, (n, us) in sorted(agg.items(), key=lambda x: -x[1][1])[:top]:
        print(f"{k:70s} {n:6d} {us:10.1f} {us/n:9.2f} {100*us/total:5.1f}%")


if __name__ == "__main__":
    main()
