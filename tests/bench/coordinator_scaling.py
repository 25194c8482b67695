#!/usr/bin/env python3
"""The coordinator's scaling curve (issue 37): tests/bench/coordinator_load.sh at several fleet
sizes, each at the default 1 s heartbeat with one step metric a second per rank, then one
table (markdown) and one plot (PNG) of heartbeat p50/p99, the coordinator's CPU, RSS and
threads, and SubmitJob's latency against the number of workers.

  python3 tests/bench/coordinator_scaling.py [--workers 64,256,1024,2048,4096]
      [--seconds 20] [--png docs/coordinator_scaling.png]

The plot needs matplotlib (`pip install matplotlib`); without it only the table is printed.
Each size runs against a fresh coordinator; the client shares the machine's cores with it.
"""
import argparse
import pathlib
import re
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
LOAD = HERE / "coordinator_load.sh"


def run(workers, seconds, extra):
    """One coordinator_load run; its report as a dict of the numbers this script plots."""
    command = [str(LOAD), f"--workers={workers}", "--heartbeat_ms=1000", "--steps_per_second=1",
               f"--seconds={seconds}", *extra]
    done = subprocess.run(command, capture_output=True, text=True)
    text = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{text[-3000:]}")
    row = {"workers": workers}

    def rpc(name):
        match = re.search(rf"^\| {re.escape(name)} \| (\d+) \| (\d+) \| ([\d-]+) \| [^|]+ \| "
                          r"([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", text, re.M)
        if not match:
            raise RuntimeError(f"no {name} row in:\n{text[-3000:]}")
        return {"count": int(match[1]), "errors": int(match[2]), "rate": match[3],
                "p50": float(match[4]), "p99": float(match[5]), "max": float(match[6])}

    row["heartbeat"] = rpc("Heartbeat")
    row["metrics"] = rpc("ReportMetrics Write")
    row["submit"] = rpc("SubmitJob")
    match = re.search(r"coordinator \(pid \d+\): (\d+)% of one core .*; (\d+) threads; RSS (\d+) MiB",
                      text)
    row["cpu"], row["threads"], row["rss"] = int(match[1]), int(match[2]), int(match[3])
    match = re.search(r"this client: (\d+)% of one core", text)
    row["client_cpu"] = int(match[1])
    match = re.search(r"the last ([\d.]+) s after SubmitJob returned", text)
    row["assigned_s"] = float(match[1]) if match else float("nan")
    match = re.search(r"\(([\d.]+) rows/s, ([\d.]+) fsyncs/s\)", text)
    row["fsyncs"] = float(match[2]) if match else float("nan")
    return row


def table(rows):
    lines = ["| workers | heartbeats answered /s (offered) | heartbeat p50 ms | p99 ms | "
             "metric writes /s | SubmitJob ms | all assigned after s | coordinator CPU | "
             "threads | RSS MiB | client CPU | errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        hb = r["heartbeat"]
        errors = hb["errors"] + r["metrics"]["errors"] + r["submit"]["errors"]
        lines.append(
            f"| {r['workers']} | {hb['rate']} ({r['workers']}) | {hb['p50']:.2f} | "
            f"{hb['p99']:.2f} | {r['metrics']['rate']} | {r['submit']['p50']:.1f} | "
            f"{r['assigned_s']:.2f} | {r['cpu']}% | {r['threads']} | {r['rss']} | "
            f"{r['client_cpu']}% | {errors} |")
    return "\n".join(lines)


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib): no plot", file=sys.stderr)
        return False
    workers = [r["workers"] for r in rows]
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    axes[0].plot(workers, [r["heartbeat"]["p50"] for r in rows], "o-", label="heartbeat p50")
    axes[0].plot(workers, [r["heartbeat"]["p99"] for r in rows], "o-", label="heartbeat p99")
    axes[0].plot(workers, [r["submit"]["p50"] for r in rows], "s--", label="SubmitJob")
    axes[0].axhline(20, color="grey", linestyle=":", label="goal: p99 20 ms")
    axes[0].set_ylabel("ms")
    axes[0].set_yscale("log")
    axes[1].plot(workers, [r["cpu"] for r in rows], "o-", label="coordinator")
    axes[1].plot(workers, [r["client_cpu"] for r in rows], "o--", label="load client")
    axes[1].axhline(100, color="grey", linestyle=":", label="one core")
    axes[1].set_ylabel("% of one core")
    axes[2].plot(workers, [r["rss"] for r in rows], "o-", label="RSS MiB")
    axes[2].plot(workers, [r["threads"] for r in rows], "s-", label="threads")
    axes[2].set_ylabel("MiB / threads")
    for ax, title in zip(axes, ["latency", "CPU", "memory and threads"]):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("simulated workers (1 heartbeat/s, 1 step metric/s each)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
    figure.suptitle("Coordinator at scale, client and coordinator on the same 2 cores")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", default="64,256,1024,2048,4096")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--png", default="")
    args, extra = parser.parse_known_args()
    rows = []
    for n in (int(w) for w in args.workers.split(",")):
        print(f"coordinator_scaling: {n} workers ...", file=sys.stderr, flush=True)
        rows.append(run(n, args.seconds, extra))
    print(table(rows))
    if args.png and plot(rows, args.png):
        print(f"\nplot: {args.png}")


if __name__ == "__main__":
    main()
