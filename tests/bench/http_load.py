#!/usr/bin/env python3
"""Measures the coordinator's HTTP port (/metrics) under idle connections and load.

Starts a coordinator on free loopback ports with a temporary state directory (or uses
--url), then runs four scenarios for --seconds each and prints, per scenario, the requests
answered 200 / sent, latency percentiles (connect to last byte, one request per
connection) and requests/s, and (for a coordinator it started) the coordinator's CPU
over the scenario (one core = 100%), its threads and RSS:

  idle0      one client in a loop, nothing else connected;
  idle200    the same while --idle connections are held open: they connect and send
             nothing, or (every fourth) half a request line a byte at a time; one the
             server drops is reopened at once, as an attacker would;
  load50     --clients clients in a loop at once;
  idle+load  both together.

Each client comes from its own loopback address (127.1.0.1 and up), the idle
connections from --idle_sources others (127.2.0.1 and up; default 8: 25 each, within the
coordinator's limit of 32 per client address, so it holds them all; with 1 it keeps 32
and refuses the rest, which the holder reopens at once, a connection storm; 40 sources
with --idle=1000 overflow its 512 connections in all). A request that gets no answer
within --timeout seconds counts as failed. The last column: idle connections open at the
end / reopened after the server closed them.

--coordinator may name any program that takes --listen, --http and --state_dir and
prints `coordinator metrics on URL`, e.g. a prototype server to compare HTTP libraries
(docs/PERFORMANCE.md, issue 37).

  bazel build //coordinator
  python3 tests/bench/http_load.py [--seconds=10] [--idle=200] [--clients=50]
"""
import argparse
import os
import pathlib
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT / "bazel-bin"


def start_coordinator(binary, state_dir):
    log = open(os.path.join(state_dir, "coordinator.log"), "w+")
    process = subprocess.Popen(
        [binary, "--listen=127.0.0.1:0", "--http=127.0.0.1:0",
         f"--state_dir={state_dir}/state"],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        log.seek(0)
        match = re.search(r"coordinator metrics on (http://\S+)", log.read())
        if match:
            return process, match.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.1)
    log.seek(0)
    sys.exit(f"http_load.py: the coordinator did not start:\n{log.read()}")


def process_usage(pid):
    """(CPU seconds so far, threads, RSS MiB) of process `pid`, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    return cpu, int(status["Threads"]), int(status["VmRSS"].split()[0]) / 1024


def one_request(host, port, path, source, timeout):
    """Returns (ok, seconds) for one GET on a fresh connection."""
    start = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout,
                                      source_address=(source, 0)) as sock:
            sock.settimeout(max(0.1, timeout - (time.monotonic() - start)))
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                         .encode())
            chunks = []
            while True:
                remaining = timeout - (time.monotonic() - start)
                if remaining <= 0:
                    return False, time.monotonic() - start
                sock.settimeout(remaining)
                data = sock.recv(65536)
                if not data:
                    break
                chunks.append(data)
        response = b"".join(chunks)
        return response.startswith(b"HTTP/1.1 200 "), time.monotonic() - start
    except OSError:
        return False, time.monotonic() - start


class IdleConnections:
    """Holds `count` connections that send nothing or trickle half a request line,
    reopening each one the server closes, until stop()."""

    def __init__(self, host, port, count, sources):
        self.host, self.port, self.count, self.sources = host, port, count, sources
        self.selector = selectors.DefaultSelector()
        self.stopping = threading.Event()
        self.reopened = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self, index):
        try:
            sock = socket.create_connection(
                (self.host, self.port), timeout=5,
                source_address=(f"127.2.0.{1 + index % self.sources}", 0))
        except OSError:
            return False
        sock.setblocking(False)
        # Every fourth trickles "GET /metr" one byte a second; the rest stay silent.
        trickle = b"GET /metr" if index % 4 == 0 else b""
        self.selector.register(sock, selectors.EVENT_READ, [index, trickle])
        return True

    def _run(self):
        pending = list(range(self.count))
        last_trickle = 0.0
        while not self.stopping.is_set():
            # Reopen what was dropped (a refused connect is retried on the next pass).
            pending = [i for i in pending if not self._open(i)]
            for key, _ in self.selector.select(timeout=0.2):
                # Readable: the server answered (408, 503) or closed it; either way reopen.
                try:
                    key.fileobj.recv(65536)
                except OSError:
                    pass
                self.selector.unregister(key.fileobj)
                key.fileobj.close()
                pending.append(key.data[0])
                self.reopened += 1
            now = time.monotonic()
            if now - last_trickle >= 1.0:
                last_trickle = now
                for key in list(self.selector.get_map().values()):
                    if key.data[1]:
                        try:
                            key.fileobj.send(key.data[1][:1])
                            key.data[1] = key.data[1][1:]
                        except OSError:
                            pass
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()

    def open_count(self):
        return len(self.selector.get_map())

    def start(self):
        self.thread.start()
        # Let them all connect before measuring.
        deadline = time.monotonic() + 10
        while self.open_count() < self.count and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self):
        self.stopping.set()
        self.thread.join()


def run_clients(host, port, path, clients, seconds, timeout):
    latencies, failures = [], [0]
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client(index):
        source = f"127.1.0.{1 + index}"
        while time.monotonic() < end:
            ok, elapsed = one_request(host, port, path, source, timeout)
            with lock:
                if ok:
                    latencies.append(elapsed)
                else:
                    failures[0] += 1

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, failures[0], time.monotonic() - start


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="measure this URL instead of starting a coordinator")
    parser.add_argument("--coordinator", default=str(BIN / "coordinator/coordinator"),
                        help="the coordinator binary to start (without --url)")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--idle_sources", type=int, default=8,
                        help="loopback addresses the idle connections come from (1 to 250)")
    parser.add_argument("--timeout", type=float, default=10)
    args = parser.parse_args()

    coordinator = None
    with tempfile.TemporaryDirectory(prefix="http_load.") as state_dir:
        url = args.url
        if url is None:
            coordinator, base = start_coordinator(args.coordinator, state_dir)
            url = base
        parsed = urllib.parse.urlsplit(url)
        host, port, path = parsed.hostname, parsed.port, parsed.path or "/"
        print(f"{url}: {args.seconds:g} s per scenario, request timeout {args.timeout:g} s")
        print(f"{'scenario':<10} {'ok/sent':>11} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
              f"{'max ms':>8} {'req/s':>8} {'idle open/reopened':>18}"
              + ("  coordinator CPU% threads RSS MiB" if coordinator else ""))
        try:
            for name, idle, clients in (("idle0", 0, 1), (f"idle{args.idle}", args.idle, 1),
                                        (f"load{args.clients}", 0, args.clients),
                                        ("idle+load", args.idle, args.clients)):
                holder = None
                usage_before = process_usage(coordinator.pid) if coordinator else None
                if idle:
                    holder = IdleConnections(host, port, idle, args.idle_sources)
                    holder.start()
                latencies, failed, wall = run_clients(host, port, path, clients, args.seconds,
                                                      args.timeout)
                idle_note = ""
                if holder:
                    idle_note = f"{holder.open_count()}/{holder.reopened}"
                usage_note = ""
                if coordinator:
                    # Taken while the idle connections are still open.
                    cpu, threads, rss = process_usage(coordinator.pid)
                    busy = 100 * (cpu - usage_before[0]) / wall
                    usage_note = f"  {busy:15.0f} {threads:7d} {rss:7.0f}"
                if holder:
                    holder.stop()
                latencies.sort()
                ms = [1000 * percentile(latencies, q) for q in (0.5, 0.9, 0.99)]
                ms.append(1000 * latencies[-1] if latencies else float("nan"))
                sent = len(latencies) + failed
                print(f"{name:<10} {len(latencies):>5}/{sent:<5} {ms[0]:8.1f} {ms[1]:8.1f} "
                      f"{ms[2]:8.1f} {ms[3]:8.1f} {len(latencies) / wall:8.1f} {idle_note:>18}"
                      f"{usage_note}",
                      flush=True)
        finally:
            if coordinator is not None:
                coordinator.send_signal(signal.SIGTERM)
                try:
                    coordinator.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    coordinator.kill()
                    coordinator.wait()


if __name__ == "__main__":
    main()
