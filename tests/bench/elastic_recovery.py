#!/usr/bin/env python3
"""Measures elastic recovery end to end on this machine: how long after a failure the
coordinator notices, how long until the job trains again, and how many steps it redoes.

A coordinator and 5 CPU workers (4 ranks of a (2,2,1) job and a spare) run on loopback;
checkpoints every 10 steps go to the coordinator's store. Two failures, one after the other:
  kill   SIGKILL of the worker daemon running rank 3 (its rank dies with it);
  hang   SIGSTOP of the training process of rank 1 (its daemon keeps heartbeating), found
         by the collective timeout and named by the watchdog.
Times come from the job's event log (coordinator clock) and this script's clock.

  bazel build //coordinator //worker //coordinator/cli:trainctl
  python3 tests/bench/elastic_recovery.py [--collective_timeout=5s]
"""
import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT / "bazel-bin"

SPEC = {
    "name": "recovery-bench",
    "model": {"num_layers": 4, "num_heads": 8, "hidden_size": 256, "seq_length": 128},
    "parallel": {"tensor": 2, "pipeline": 2, "micro_batch_size": 2, "global_batch_size": 8},
    "train": {"steps": 100000, "dropout": 0.1, "checkpoint_every": 10, "max_restarts": 5},
    "device": "DEVICE_CPU",
}


def trainctl(address, *args):
    out = subprocess.run([str(BIN / "coordinator/cli/trainctl"), f"--coordinator={address}", *args],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"trainctl {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def status(address, job):
    return json.loads(trainctl(address, "status", "--json", job))


def events(address, job):
    return [json.loads(line) for line in trainctl(address, "events", "--json", job).splitlines()]


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def rank_pid(worker_pid):
    children = pathlib.Path(f"/proc/{worker_pid}/task/{worker_pid}/children").read_text().split()
    return int(children[0])


def measure(address, job, workers, failure, t_fail_action, gen_before):
    """Waits for the next generation to train; returns the numbers of one recovery."""
    def failed_event():
        for e in events(address, job):
            if e["kind"] == "generation_failed" and f"generation {gen_before}:" in e["message"]:
                return e
        return None
    failed = wait_for(failed_event, 120, "the failure to be detected")
    t_detected = int(failed["unix_ms"]) / 1000
    step_at_failure = int(status(address, job).get("step", 0))

    def training_again():
        s = status(address, job)
        return s if int(s.get("generation", 0)) > gen_before and s["state"] == "JOB_STATE_RUNNING" else None
    wait_for(training_again, 300, "the job to train again")
    t_running = time.time()
    resume = [e for e in events(address, job) if e["kind"] == "resume"
              and f"generation {gen_before + 1} " in e["message"]]
    resume_step = int(re.search(r"checkpoint step (\d+)", resume[-1]["message"]).group(1)) if resume else 0
    named = re.findall(r"global rank \d+|\(rank \d+\)", failed["message"])
    return {
        "failure": failure,
        "detected_s": t_detected - t_fail_action,
        "training_again_s": t_running - t_fail_action,
        "resumed_from": resume_step,
        "steps_redone": max(0, step_at_failure - resume_step),
        "named": ", ".join(sorted(set(named))) or "-",
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--collective_timeout", default="5s")
    args = parser.parse_args()
    for binary in ("coordinator/coordinator", "worker/worker", "coordinator/cli/trainctl"):
        if not (BIN / binary).exists():
            sys.exit(f"{BIN / binary} missing: bazel build //coordinator //worker //coordinator/cli:trainctl")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="mtrain-recovery-"))
    procs = []
    try:
        coordinator = subprocess.Popen(
            [str(BIN / "coordinator/coordinator"), "--listen=127.0.0.1:0", "--http=",
             f"--state_dir={tmp}/state", "--heartbeat_interval=200ms", "--heartbeat_timeout=3s",
             "--lost_rank_grace=3s", f"--collective_timeout={args.collective_timeout}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(coordinator)
        line = coordinator.stdout.readline()
        address = line.strip().rsplit(" ", 1)[-1]
        workers = {}
        for i in range(5):
            w = subprocess.Popen([str(BIN / "worker/worker"), f"--coordinator={address}", "--device=cpu",
                                  f"--worker_id=w{i}", "--threads=1", f"--log_dir={tmp}/ranks"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(w)
            workers[f"w{i}"] = w
        wait_for(lambda: trainctl(address, "workers", "--json").count('"alive":true') == 5, 30, "workers")
        spec = tmp / "job.json"
        spec.write_text(json.dumps(SPEC))
        job = trainctl(address, "submit", str(spec)).strip()
        wait_for(lambda: int(status(address, job).get("step", 0)) >= 25, 600, "step 25")
        checkpoints = [json.loads(l) for l in trainctl(address, "checkpoints", "--json", job).splitlines()]
        size_mib = int(checkpoints[-1]["total_bytes"]) / 2**20
        results = []

        # 1. kill: the daemon of rank 3 and its rank, mid-step.
        victim = status(address, job)["workers"][3]
        t0 = time.time()
        workers[victim].send_signal(signal.SIGKILL)
        results.append(measure(address, job, workers, f"SIGKILL worker of rank 3", t0, 1))
        wait_for(lambda: int(status(address, job).get("step", 0)) >= results[-1]["resumed_from"] + 25,
                 600, "training to go on")

        # 2. hang: the training process of rank 1 stops; its daemon still heartbeats.
        victim = status(address, job)["workers"][1]
        pid = rank_pid(workers[victim].pid)
        t0 = time.time()
        os.kill(pid, signal.SIGSTOP)
        results.append(measure(address, job, workers, f"SIGSTOP rank 1 process", t0, 2))
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        trainctl(address, "cancel", job)

        print(f"model: 4 layers, hidden 256, seq 128, (t,p,d)=(2,2,1); checkpoint every 10 steps "
              f"({size_mib:.1f} MiB with AdamW moments); heartbeat timeout 3s, collective timeout "
              f"{args.collective_timeout}")
        print(f"{'failure':<26} {'detected':>9} {'training again':>15} {'resumed from':>13} "
              f"{'steps redone':>13}  named in the event")
        for r in results:
            print(f"{r['failure']:<26} {r['detected_s']:>8.1f}s {r['training_again_s']:>14.1f}s "
                  f"{r['resumed_from']:>13} {r['steps_redone']:>13}  {r['named']}")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()


if __name__ == "__main__":
    main()
