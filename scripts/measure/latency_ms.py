"""Prints one latency of a `snowmint bench` report, in ms.

    python3 scripts/measure/latency_ms.py REPORT p50|p99|max
"""
import re
import sys

line = next(l for l in open(sys.argv[1]) if l.startswith("latency"))
value = re.search(sys.argv[2] + r" ([0-9.]+)(ns|µs|ms|s)\b", line)
scale = {"ns": 1e-6, "µs": 1e-3, "ms": 1.0, "s": 1e3}[value.group(2)]
print(f"{float(value.group(1)) * scale:.3f}")
