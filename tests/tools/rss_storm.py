#!/usr/bin/env python3
"""RSS of `cypris --no-ui` before and after a storm of requests (issue #26 item 4).

Starts the server on stories260k (CPU), reads its resident memory (VmRSS) when idle, sends a
bounded storm of large requests from many client threads at once -- lists of prompts, long
banned_strings lists (each request's phrases distinct), long prompts -- then reads VmRSS again
once the engine is idle, and the peak (VmHWM). Standard library only.

    tests/tools/rss_storm.py build/app/cypris /work/shared/testdata/models/stories260k \
        [--requests 240] [--clients 24] [--env MALLOC_ARENA_MAX=64]

Prints one line per phase and a JSON summary. Exit 0 when every request was answered (200, or a
400 for the ones meant to be refused); 1 otherwise. Every wait is bounded.
"""
import argparse
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def threads_of(pid):
    return len(os.listdir(f"/proc/{pid}/task"))


def post(port, path, body, timeout=120):
    data = json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code
    except Exception:  # noqa: BLE001 -- a refused or reset connection counts as unanswered
        return 0


def metric(port, name):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + "{"):
                    return float(line.rsplit(" ", 1)[1])
    except Exception:  # noqa: BLE001
        return None
    return None


def wait_idle(port, pid, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        running = metric(port, "aphrodite:num_requests_running")
        waiting = metric(port, "aphrodite:num_requests_waiting")
        if running == 0 and waiting == 0:
            time.sleep(2.0)  # the engine trims its heap when it goes idle
            return True
        time.sleep(0.2)
    return False


def storm_body(i, rng, list_size=256):
    kind = i % 3
    if kind == 0:  # a list of prompts
        return {"prompt": [f"Once upon a time {i}-{k}" for k in range(list_size)], "max_tokens": 4}, 200
    if kind == 1:  # distinct banned strings near the limits (1800 phrases, ~60 KB of the 64 KiB)
        phrases = ["".join(rng.choice("abcdefghijklmnop") for _ in range(30)) + str(k) for k in range(1800)]
        return {"prompt": "Once upon a time", "max_tokens": 8, "banned_strings": phrases}, 200
    # refused cheaply: banned_strings over the byte limit (100 x 1000 bytes)
    return {"prompt": "Once upon a time", "max_tokens": 8,
            "banned_strings": ["x" * 999 + str(k) for k in range(100)]}, 400


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cypris")
    ap.add_argument("model")
    ap.add_argument("--requests", type=int, default=240)
    ap.add_argument("--clients", type=int, default=24)
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server's environment")
    # A small KV cache: the engine touches its blocks as it cycles through them, which would
    # otherwise show up as growth that is not the heap's.
    ap.add_argument("--server-arg", action="append", default=[], help="an extra flag for the server (repeat)")
    ap.add_argument("--list-size", type=int, default=256, help="prompts in each list request")
    ap.add_argument("--kv-gib", default="0.02", help="--cpu-kvcache-space of the server")
    args = ap.parse_args()

    env = dict(os.environ)
    for kv in args.env:
        k, v = kv.split("=", 1)
        env[k] = v
    port = free_port()
    cmd = [args.cypris, "--no-ui", "--model", args.model, "--host", "127.0.0.1", "--port", str(port),
           "--device", "cpu", "--threads", "2", "--cpu-kvcache-space", args.kv_gib,
           "--disable-log-requests", "--disable-log-stats"] + args.server_arg
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if proc.poll() is not None:
                print(proc.stderr.read().decode()[-2000:], file=sys.stderr)
                return 1
            if metric(port, "aphrodite:num_requests_running") is not None:
                break
            time.sleep(0.2)
        # Warm up: one of each kind, so the "before" figure holds what a served request leaves.
        rng = random.Random(26)
        for i in range(3):
            body, _ = storm_body(i, rng, args.list_size)
            post(port, "/v1/completions", body)
        wait_idle(port, proc.pid)
        before = rss_kib(proc.pid)
        print(f"idle after warm-up: RSS {before / 1024:.1f} MiB, threads {threads_of(proc.pid)}")

        results = []
        lock = threading.Lock()
        next_i = [0]

        def client(seed):
            r = random.Random(seed)
            while True:
                with lock:
                    i = next_i[0]
                    next_i[0] += 1
                if i >= args.requests:
                    return
                body, want = storm_body(i, r, args.list_size)
                got = post(port, "/v1/completions", body)
                with lock:
                    results.append((got, want))

        t0 = time.time()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        for t in threads:
            t.start()
        peak_during = 0
        while any(t.is_alive() for t in threads):
            peak_during = max(peak_during, rss_kib(proc.pid))
            time.sleep(0.1)
        storm_s = time.time() - t0
        print(f"storm: {args.requests} requests from {args.clients} clients in {storm_s:.1f} s; "
              f"RSS peak seen {peak_during / 1024:.1f} MiB, threads {threads_of(proc.pid)}")
        idle = wait_idle(port, proc.pid)
        after = rss_kib(proc.pid)
        hwm = rss_kib(proc.pid, "VmHWM")
        print(f"idle after the storm: RSS {after / 1024:.1f} MiB (VmHWM {hwm / 1024:.1f} MiB)")
        bad = [(g, w) for g, w in results if g != w]
        summary = {"requests": args.requests, "clients": args.clients, "list_size": args.list_size,
                   "env": args.env, "kv_gib": args.kv_gib, "server_args": args.server_arg,
                   "rss_before_mib": round(before / 1024, 1), "rss_after_mib": round(after / 1024, 1),
                   "rss_peak_mib": round(hwm / 1024, 1), "storm_s": round(storm_s, 1),
                   "idle": idle, "unexpected_statuses": bad[:10], "num_unexpected": len(bad)}
        print(json.dumps(summary))
        return 0 if not bad and idle else 1
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
