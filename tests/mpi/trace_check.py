#!/usr/bin/env python3
"""Checks the merged --trace of a 2-process pipeline (tests/mpi/cli_check.sh):
one process per rank named "rank r: partition r", forward and backward events from both ranks,
events nesting per track, and one clock: rank 1 starts each batch's forward only after rank 0's
forward of that batch has ended (it needs the activations), within the clock alignment's error."""
import collections
import json
import sys

SKEW_US = 5000  # barrier exit skew on loopback is far below this
events = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
assert names.get(0) == "rank 0: partition 0", names
assert names.get(1001) == "rank 1: partition 1", names
spans = [e for e in events if e["ph"] == "X"]
forward = collections.defaultdict(dict)
for e in spans:
    if e["name"].startswith("F "):
        forward[e["pid"]][e["name"]] = e
for pid in (0, 1001):
    assert any(e["pid"] == pid and e["name"].startswith("B ") for e in spans), f"no backward on {pid}"
    assert forward[pid], f"no forward on pid {pid}"
tracks = collections.defaultdict(list)
for e in spans:
    tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
for key, intervals in tracks.items():
    intervals.sort()
    for (s0, e0), (s1, e1) in zip(intervals, intervals[1:]):
        assert s1 >= e0 - 1e-3 or e1 <= e0 + 1e-3, f"events overlap without nesting on {key}"
checked = 0
for name, later in forward[1001].items():
    earlier = forward[0].get(name)
    if earlier is None:
        continue
    assert later["ts"] + SKEW_US >= earlier["ts"] + earlier["dur"], \
        f"{name}: rank 1 starts at {later['ts']} before rank 0 ends at {earlier['ts'] + earlier['dur']}"
    checked += 1
assert checked > 0, "no batch traced on both ranks"
print(f"trace_check: {len(spans)} events, {checked} batches ordered across ranks")
