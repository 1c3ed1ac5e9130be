#!/usr/bin/env python3
"""Wall time of one /v1/completions request whose `prompt` is a list of N prompts (issue #26 item 2).

Starts `cypris --no-ui` on the given model (CPU), sends lists of 1000, 2000 and 4000 short prompts
(max_tokens 1) one after another and prints the status and seconds of each: the time should grow
linearly with N. Extra arguments go to the server (e.g. --max-prompts-per-request 4000
--max-request-tokens 100000 to allow the longest list).

    tests/tools/prompt_list_timing.py build/app/cypris path/to/stories260k [server flags...]
"""
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def main():
    binary, model = sys.argv[1], sys.argv[2]
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cmd = [binary, "--no-ui", "--model", model, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
           "--threads", "2", "--cpu-kvcache-space", "0.05", "--disable-log-requests", "--disable-log-stats"]
    p = subprocess.Popen(cmd + sys.argv[3:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/version", timeout=2)
                break
            except Exception:  # noqa: BLE001 -- not up yet
                time.sleep(0.2)
        for n in (1000, 2000, 4000):
            body = json.dumps({"prompt": [f"Once {k}" for k in range(n)], "max_tokens": 1}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            t0 = time.time()
            try:
                with urllib.request.urlopen(req, timeout=300) as r:
                    status = r.status
                    r.read()
            except urllib.error.HTTPError as e:
                status = e.code
            print(f"{n} prompts: {status} in {time.time() - t0:.2f} s", flush=True)
    finally:
        p.terminate()
        p.wait(timeout=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
