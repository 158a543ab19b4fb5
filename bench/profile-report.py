"""docs/profile.md from bench/profile.sh's results: instructions per request by build,
the functions that spent them, and PostgreSQL's time per statement."""

import datetime
import json
import os
import platform
import subprocess
import sys

results_path, doc_path = sys.argv[1], sys.argv[2]
runs = [json.loads(line) for line in open(results_path) if line.strip()]


def per_request(run):
    """Instructions per new operation, per replay (its prefill's new operations taken
    off), and per drained operation."""
    new = run["intake_new_ir"] / run["requests"]
    replay = (run["intake_replay_ir"] - run["replay_prefill"] * new) / run["requests"]
    drain = run["executor_drain_ir"] / run["drained"]
    return new, replay, drain


def postgres_version():
    try:
        return subprocess.run(["postgres", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


lines = [
    "# Where a request's time goes (`make bench-profile`)",
    "",
    "Produced by `make bench-profile` (`bench/profile.sh`): release binaries under callgrind "
    "on a throwaway PostgreSQL with pg_stat_statements loaded, 8 clients, all traffic on "
    "127.0.0.1. Instruction counts are repeatable for the same binary and inputs however "
    "busy the machine is, so builds compare by them; PostgreSQL's milliseconds are "
    "timings and move with the machine.",
    "",
    f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
    f"- {platform.machine()}; {postgres_version()}",
    f"- {runs[0]['requests']} new operations, {runs[0]['requests']} replays "
    f"(after {runs[0]['replay_prefill']} registrations to replay) and a drain of "
    f"{runs[0]['drained']} payments per build",
    "",
    "## Instructions per request (millions)",
    "",
]
table_start = len(lines)
lines += [
    "| build | intake, new operation | intake, replay | executor, drained operation |",
    "|---|---:|---:|---:|",
]
first = None
for run in runs:
    new, replay, drain = per_request(run)
    if first is None:
        first = (new, replay, drain)
        cells = [f"{v / 1e6:.3f}" for v in (new, replay, drain)]
    else:
        cells = [f"{v / 1e6:.3f} ({v / f:.2f} ×)" for v, f in zip((new, replay, drain), first)]
    lines.append(f"| {run['label']} | " + " | ".join(cells) + " |")

# The table alone, for make bench's docs/benchmarks.md.
table_end = len(lines)
with open(os.path.join(os.path.dirname(results_path), "instructions.md"), "w") as table:
    table.write("\n".join(lines[table_start:table_end]) + "\n")

for run in runs:
    lines += ["", f"## {run['label']}: the functions that spent the most, themselves", ""]
    for path, title, count in (
        ("intake_new", "intake, new operations", run["requests"]),
        ("intake_replay", "intake, replays (with their prefill)", run["requests"] + run["replay_prefill"]),
        ("executor_drain", "executor, drain", run["drained"]),
    ):
        total = run[f"{path}_ir"]
        lines += [f"{title}:", "", "| share | instructions per request | function |", "|---:|---:|---|"]
        for entry in run[f"{path}_top"]:
            ir = int(entry["ir"])
            name = entry["function"].replace("|", "\\|")
            if len(name) > 110:
                name = name[:107] + "…"
            lines.append(f"| {100 * ir / total:.1f} % | {ir / count:,.0f} | `{name}` |")
        lines += ["", "PostgreSQL, the statements of that run:", ""]
        lines += ["| statement | calls | mean ms | buffer hits per call |", "|---|---:|---:|---:|"]
        for s in run[f"{path}_sql"][:6]:
            text = s["statement"].replace("|", "\\|")
            lines.append(f"| `{text}` | {s['calls']} | {s['mean_ms']} | {s['hits_per_call']} |")
        lines.append("")

with open(doc_path, "w") as doc:
    doc.write("\n".join(lines).rstrip() + "\n")
