#!/usr/bin/env python3
"""Summarises an `ncu --csv --print-units base` profile of decode steps by kernel.

Reads ncu's CSV on stdin (metrics gpu__time_duration.sum and dram__bytes_read.sum) and prints
one line per kernel name: launches, mean time, mean DRAM bytes read, and the bandwidth those
give. Kernels are serialised under ncu, so the times exclude launch overlap.
"""
import csv
import re
import sys
from collections import defaultdict


def short(name: str) -> str:
    name = re.sub(r"\(anonymous namespace\)::|vllm::cuda::", "", name)
    return name[:110]


def main() -> None:
    lines = [l for l in sys.stdin if l.startswith('"')]
    rows = csv.DictReader(lines)
    per_launch = defaultdict(dict)
    for r in rows:
        per_launch[(r["ID"], short(r["Kernel Name"]))][r["Metric Name"]] = float(
            r["Metric Value"].replace(",", ""))
    agg = defaultdict(lambda: [0, 0.0, 0.0])
    for (_, name), m in per_launch.items():
        a = agg[name]
        a[0] += 1
        a[1] += m.get("gpu__time_duration.sum", 0.0)
        a[2] += m.get("dram__bytes_read.sum", 0.0)
    total = sum(a[1] for a in agg.values())
    print(f"{'launches':>8} {'mean us':>8} {'mean MB':>8} {'GB/s':>7} {'% time':>6}  kernel")
    for name, (n, t_ns, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        bw = b / t_ns if t_ns else 0.0
        print(f"{n:>8} {t_ns / n / 1e3:>8.2f} {b / n / 1e6:>8.2f} {bw:>7.0f} {100 * t_ns / total:>6.1f}  {name}")


if __name__ == "__main__":
    main()
