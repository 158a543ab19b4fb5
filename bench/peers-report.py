#!/usr/bin/env python3
"""Turns bench/peers.sh's results.jsonl into docs/bench-peers.md and prints it.

    peers-report.py MODE GRAPHILE_VERSION PGQUEUER_VERSION RESULTS_JSONL OUTPUT_MD
"""
import datetime
import json
import os
import platform
import subprocess
import sys


def machine():
    cores = os.cpu_count()
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cores} cores, {model}"


def version(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    mode, gw_version, pgq_version, results_path, output = sys.argv[1:6]
    rows = [json.loads(line) for line in open(results_path) if line.strip()]
    by = {}
    for row in rows:
        by.setdefault(row["scenario"], []).append(row)

    problems = []
    for name in (
        "opgate_drain", "graphile_drain", "pgqueuer_drain",
        "opgate_end_to_end", "graphile_end_to_end", "pgqueuer_end_to_end",
    ):
        for row in by.get(name, []):
            if row["charged"] != row["jobs"]:
                problems.append(f"{name}: {row['jobs']} jobs but {row['charged']} charges")

    reg = by["registration"][0]
    opgate_reg = reg["opgate"]["requests_per_s"]
    gw_reg = reg["graphile_add_job_tps"]
    pgq_reg = reg["pgqueuer_enqueue_tps"]

    def best(name):
        return max(by[name], key=lambda r: r["per_s"])

    lines = [
        "# opgate beside a peer (`make bench-peers`)",
        "",
        "Produced by `make bench-peers` (`bench/peers.sh`): opgate, Graphile Worker and pgqueuer "
        "on the same work, one after the other, on one throwaway PostgreSQL with default settings "
        "(fsync and synchronous_commit on), all traffic on 127.0.0.1. The work: register a "
        "payment, then a worker calls provider-sim's `POST /v1/payments` with the payment's "
        "key as the Idempotency-Key and marks it done. Every drain and end-to-end figure "
        "counts only if provider-sim's ledger grew by exactly one charge per job.",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()} ({mode} run)",
        f"- machine: {machine()}",
        f"- {version(['postgres', '--version'])}; node {version(['node', '--version'])}; "
        f"graphile-worker {gw_version} (the newest release that runs on this Node.js); "
        f"{version([os.path.join(os.path.dirname(results_path), 'pgqueuer-venv', 'bin', 'python'), '--version'])}; "
        f"pgqueuer {pgq_version} with asyncpg (every package pinned in "
        "`bench/peers/pgqueuer/requirements.txt`)",
        "- opgate: intake and executor with their default flags. Graphile Worker: 32 concurrent "
        "jobs (its default is 1), its default job fetching, and again with a local queue of 32 "
        "jobs fetched per query and completions batched; the better of the two is its figure.",
        "- pgqueuer: one `QueueManager` process on one asyncpg connection (its `AsyncpgDriver`), "
        "at most 32 jobs in flight (`max_concurrent_tasks`; its default is no limit), its default "
        "`batch_size` of 10 jobs per dequeue and completion flush, and again 16, the most that 32 "
        "in flight allows (it wants at least twice the batch size); the better of the two is its "
        "figure. A failed call is retried by its `DatabaseRetryEntrypointExecutor`; the worker "
        "calls provider-sim with aiohttp. Its registration is pgbench running the statement "
        "pgqueuer's `Queries.enqueue` sends for one job with a `dedupe_key` (the one-row insert, "
        "its log row, and the NOTIFY of its statement trigger), taken from the installed "
        "pgqueuer with the job's values in place of the bind parameters. Its queue table is "
        "vacuumed before each drain's prefill, as opgate's outbox is.",
        "- End to end, the legs run interleaved (opgate, then each peer's two settings), twice: "
        "this machine's pace drifts by more than the ratios measured, so no system gets all of "
        "one slow stretch. Each system's figure is its best run.",
        "",
        "| work | opgate per s | Graphile Worker per s | opgate / Graphile Worker "
        "| pgqueuer per s | opgate / pgqueuer |",
        "|---|---:|---:|---:|---:|---:|",
        f"| registration, 32 clients (opgate over HTTP; the peers' `add_job` and enqueue "
        f"statement by pgbench, no HTTP) | {opgate_reg:.0f} | {gw_reg:.0f} | {opgate_reg / gw_reg:.2f} × "
        f"| {pgq_reg:.0f} | {opgate_reg / pgq_reg:.2f} × |",
    ]
    for label, ours, gw_name, pgq_name in (
        ("drain of a pre-filled queue, one worker process", "opgate_drain", "graphile_drain", "pgqueuer_drain"),
        ("end to end: 32 clients registering while the worker runs", "opgate_end_to_end",
         "graphile_end_to_end", "pgqueuer_end_to_end"),
    ):
        o, g, q = best(ours), best(gw_name), best(pgq_name)
        lines.append(
            f"| {label} ({o['jobs']} jobs) | {o['per_s']:.0f} | {g['per_s']:.0f} "
            f"(local queue {g['local_queue']}) | {o['per_s'] / g['per_s']:.2f} × "
            f"| {q['per_s']:.0f} (batch size {q['batch_size']}) | {o['per_s'] / q['per_s']:.2f} × |"
        )
    lines += ["", "Every opgate end-to-end run:", "", "| round | jobs | seconds | per s |", "|---:|---:|---:|---:|"]
    for row in by["opgate_end_to_end"]:
        lines.append(f"| {row.get('round', 1)} | {row['jobs']} | {row['seconds']:.2f} | {row['per_s']:.0f} |")
    lines += ["", "Every Graphile Worker run:", "", "| work | round | local queue | jobs | seconds | per s |", "|---|---:|---:|---:|---:|---:|"]
    for name in ("graphile_drain", "graphile_end_to_end"):
        for row in by[name]:
            lines.append(f"| {name.replace('graphile_', '').replace('_', ' ')} | {row.get('round', '')} | {row['local_queue']} | {row['jobs']} | {row['seconds']:.2f} | {row['per_s']:.0f} |")
    lines += [
        "",
        "Every pgqueuer run (retries: attempts its retry executor re-queued):",
        "",
        "| work | round | batch size | jobs | seconds | per s | retries |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in ("pgqueuer_drain", "pgqueuer_end_to_end"):
        for row in by[name]:
            lines.append(
                f"| {name.replace('pgqueuer_', '').replace('_', ' ')} | {row.get('round', '')} | {row['batch_size']} | {row['jobs']} "
                f"| {row['seconds']:.2f} | {row['per_s']:.0f} | {row['retries']} |"
            )
    for peer, name in (("Graphile Worker", "graphile_end_to_end"), ("pgqueuer", "pgqueuer_end_to_end")):
        e2e = best("opgate_end_to_end")["per_s"] / best(name)["per_s"]
        lines += [
            "",
            f"Target: opgate ≥ 2 × the peer's end-to-end throughput, against {peer}: "
            f"**{'met' if e2e >= 2 else 'missed'}** ({e2e:.2f} ×).",
        ]
    if problems:
        lines += ["", "**Ledger mismatches (figures above are not valid):** " + "; ".join(problems)]
    text = "\n".join(lines) + "\n"
    with open(output, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
