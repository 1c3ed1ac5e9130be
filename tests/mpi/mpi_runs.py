#!/usr/bin/env python3
"""Cypris under mpirun (--distributed-executor-backend mpi), against one process and independent references.

usage: mpi_runs.py CASE CYPRIS_BINARY TESTDATA_DIR HAVE_MPI WORK_DIR

CASE:
  greedy_stories260k  mpirun -np 2 and -np 4 (-tp 2 / 4) give llama2.c's published greedy story, as one process does
  greedy_gguf         mpirun -np 2 on stories260k-Q8_0.gguf gives llama.cpp's greedy tokens, as one process does
  batched_solo        a server under mpirun -np 2: three prompts in one request = each alone = one process
  bench               cypris bench throughput and latency run under mpirun -np 2; with -pp 2 the throughput table
                      shows both stages busy
  worker_killed       a server under mpirun -np 2; the worker process is killed mid-request: the request ends
                      with an error and the whole job exits within bounded time
  worker_timeout      the same with mpirun told not to end the job (Open MPI 4's orte_enable_recovery): the
                      next request fails after CYPRIS_DISTRIBUTED_TIMEOUT and process 0 exits
  root_killed         process 0 is killed: the workers do not outlive it (the job ends within bounded time)
  worker_start_fails  a worker that fails while loading (after MPI started) ends the job with its error, quickly
  mismatch            processes started with different settings refuse to start, naming the process
  pp_greedy           pipeline stages across processes: mpirun -np 2 -pp 2 and -np 4 -tp 2 -pp 2 give the published
                      greedy story as one process does, and -np 2 -pp 2 llama.cpp's greedy tokens on the GGUF file
  pp_batched_solo     a server under mpirun -np 2 -pp 2: three prompts in one request (two micro-batches) = each
                      alone = one process
  pp_worker_killed    a server under mpirun -np 2 -pp 2; the stage-1 process is killed mid-request: the request ends
                      with an error and the whole job exits within bounded time
  gpu_greedy          (label gpu; needs 2 GPUs) mpirun -np 2 --device cuda, -tp 2 and -pp 2: NCCL across processes,
                      its unique id sent over MPI, gives one GPU process's greedy tokens

Exit 77 (ctest: skipped) when this build has no MPI or mpirun is not installed. mpirun runs with
--oversubscribe (CI has 2 cores) and, as root, with --allow-run-as-root.

Speculative decoding:
  spec_draft          mpirun -np 2 with a draft model (it runs in process 0) gives one process's greedy tokens;
                      a draft tensor-parallel size of 2 is refused by name
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

SKIP = 77


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def mpirun_prefix(np):
    cmd = [MPIRUN, "--oversubscribe", "-np", str(np)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")  # same as OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    return cmd


def run(cmd, timeout=240):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if p.returncode != 0:
        fail("{} exited {}\nstdout:\n{}\nstderr:\n{}".format(" ".join(cmd), p.returncode, p.stdout, p.stderr[-4000:]))
    return p.stdout


def parallel_args(np, pp):
    # np processes as pp stages of np / pp tensor-parallel ranks.
    args = ["--tensor-parallel-size", str(np // pp)]
    if pp > 1:
        args += ["--pipeline-parallel-size", str(pp)]
    return args


def generate_ids(model, np, extra, max_tokens, pp=1):
    args = [CYPRIS, "generate", "--model", model, "--prompt-ids", "1", "--skip-tokenizer-init", "--temperature", "0",
            "--max-tokens", str(max_tokens), "--ignore-eos", "--threads", "1"] + extra
    if np > 1:
        args = mpirun_prefix(np) + args + parallel_args(np, pp) + ["--distributed-executor-backend", "mpi"]
    out = run(args).strip().splitlines()
    ids = [line for line in out if re.fullmatch(r"[0-9]+(,[0-9]+)*", line.strip())]
    if len(ids) != 1:
        fail("no id line in the output of {}:\n{}".format(" ".join(args), "\n".join(out)))
    return [int(x) for x in ids[0].split(",")]


def generate_text(model, np, max_tokens, pp=1):
    args = [CYPRIS, "generate", "--model", model, "--prompt-ids", "1", "--temperature", "0", "--max-tokens",
            str(max_tokens), "--threads", "1"]
    if np > 1:
        args = mpirun_prefix(np) + args + parallel_args(np, pp)  # backend: mpi, from mpirun
    return run(args).strip()


def stories260k_one_process():
    """stories260k's folder and one process's 120 greedy tokens from BOS, checked against the published story."""
    model = os.path.join(TESTDATA, "models", "stories260k")
    with open(os.path.join(model, "expected_greedy_200_from_bos.txt")) as f:
        expected = f.read().strip()
    one = generate_text(model, 1, 120)
    if not one or not expected.startswith(one.lstrip()):
        fail("one process does not give the published story:\n{}".format(one))
    return model, one


def case_greedy_stories260k():
    model, one = stories260k_one_process()
    for np in (2, 4):
        got = generate_text(model, np, 120)
        if got != one:
            fail("mpirun -np {} gives\n{}\ninstead of one process's\n{}".format(np, got, one))
    print("ok: mpirun -np 2 and 4 give the published greedy story ({} chars)".format(len(one)))


def case_greedy_gguf():
    path = os.path.join(TESTDATA, "gguf", "stories260k-Q8_0.gguf")
    with open(os.path.join(TESTDATA, "gguf", "refs", "stories260k-Q8_0.json")) as f:
        ref = json.load(f)["greedy"]
    one = generate_ids(path, 1, [], len(ref))
    two = generate_ids(path, 2, [], len(ref))
    if one != ref:
        fail("one process departs from llama.cpp's greedy tokens: {} vs {}".format(one, ref))
    if two != ref:
        fail("mpirun -np 2 departs from llama.cpp's greedy tokens: {} vs {}".format(two, ref))
    print("ok: mpirun -np 2 gives llama.cpp's {} greedy tokens on stories260k-Q8_0.gguf".format(len(ref)))


def case_spec_draft():
    # A draft model under mpirun -np 2 runs unsharded in process 0 (the other process holds only the
    # target's shard): greedy tokens are one process's without speculation; a draft tensor-parallel
    # size of 2 is refused by name.
    model = os.path.join(TESTDATA, "models", "stories260k")
    spec = ["--speculative-model", model, "--num-speculative-tokens", "3"]
    one = generate_ids(model, 1, [], 60)
    two = generate_ids(model, 2, spec, 60)
    if two != one:
        fail("mpirun -np 2 with a draft model gives {} instead of one process's {}".format(two, one))
    args = mpirun_prefix(2) + [CYPRIS, "generate", "--model", model, "--prompt-ids", "1", "--skip-tokenizer-init",
                               "--temperature", "0", "--max-tokens", "8", "--threads", "1", "--tensor-parallel-size",
                               "2", "--distributed-executor-backend", "mpi", "-spec-draft-tp", "2"] + spec
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    if p.returncode == 0 or "--speculative-draft-tensor-parallel-size 2" not in p.stdout + p.stderr:
        fail("a draft tensor-parallel size of 2 under mpirun was not refused by name (exit {}):\n{}".format(
            p.returncode, (p.stdout + p.stderr)[-3000:]))
    print("ok: a draft model under mpirun -np 2 keeps one process's {} greedy tokens; -spec-draft-tp 2 is refused"
          .format(len(one)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, np, model, extra=(), log_name="server", mpirun_extra=(), env=None, pp=1):
        self.port = free_port()
        args = [CYPRIS, "--no-ui", "--model", model, "--host", "127.0.0.1", "--port", str(self.port),
                "--threads", "1"] + list(extra)
        if np > 1:
            args = mpirun_prefix(np) + list(mpirun_extra) + args + parallel_args(np, pp)
        self.log_path = os.path.join(WORK, log_name + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=env)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                fail("server exited {} while starting:\n{}".format(self.proc.returncode, self.text()))
            try:
                with urllib.request.urlopen("http://127.0.0.1:{}/health".format(self.port), timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        fail("server did not come up:\n" + self.text())

    def text(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()[-6000:]

    def post(self, path, body, timeout=120):
        req = urllib.request.Request("http://127.0.0.1:{}{}".format(self.port, path), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc.poll() is None:
            # The server's own stop: SIGTERM to process 0, which stops the others and ends the job.
            rank0 = ranks_of(self.proc.pid).get(0)
            if rank0 is not None:
                os.kill(rank0, signal.SIGTERM)
            else:
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def completions(server, prompts):
    body = {"model": server_model_name(server), "prompt": prompts, "max_tokens": 24, "temperature": 0,
            "ignore_eos": True}
    out = server.post("/v1/completions", body)
    return [c["text"] for c in sorted(out["choices"], key=lambda c: c["index"])]


def server_model_name(server):
    with urllib.request.urlopen("http://127.0.0.1:{}/v1/models".format(server.port), timeout=10) as r:
        return json.loads(r.read())["data"][0]["id"]


def case_batched_solo(pp=1):
    model = os.path.join(TESTDATA, "models", "stories260k")
    prompts = ["Once upon a time", "The little dog", "Lily and Ben went to the"]
    one = Server(1, model, log_name="one")
    try:
        reference = [completions(one, [p])[0] for p in prompts]
    finally:
        one.stop()
    s = Server(2, model, log_name="mpi2", pp=pp)
    try:
        batched = completions(s, prompts)
        solo = [completions(s, [p])[0] for p in prompts]
    finally:
        s.stop()
    what = "mpirun -np 2" + (" -pp {}".format(pp) if pp > 1 else "")
    if batched != solo:
        fail("under {}, batched {} != solo {}".format(what, batched, solo))
    if solo != reference:
        fail("under {}, {} != one process's {}".format(what, solo, reference))
    if s.proc.returncode != 0:
        fail("the mpirun job ended with {} after process 0 got SIGTERM:\n{}".format(s.proc.returncode, s.text()))
    if pp > 1 and "2 pipeline stages" not in s.text():
        fail("process 0 did not log its pipeline stages:\n" + s.text())
    print("ok: batched = solo = one process under {}: {}".format(what, solo))


def case_pp_batched_solo():
    case_batched_solo(pp=2)


def case_pp_greedy():
    model, one = stories260k_one_process()
    for np in (2, 4):
        got = generate_text(model, np, 120, pp=2)
        if got != one:
            fail("mpirun -np {} -pp 2 gives\n{}\ninstead of one process's\n{}".format(np, got, one))
    path = os.path.join(TESTDATA, "gguf", "stories260k-Q8_0.gguf")
    with open(os.path.join(TESTDATA, "gguf", "refs", "stories260k-Q8_0.json")) as f:
        ref = json.load(f)["greedy"]
    two = generate_ids(path, 2, [], len(ref), pp=2)
    if two != ref:
        fail("mpirun -np 2 -pp 2 departs from llama.cpp's greedy tokens: {} vs {}".format(two, ref))
    print("ok: mpirun -np 2 -pp 2 and -np 4 -tp 2 -pp 2 give the published greedy story, -np 2 -pp 2 llama.cpp's "
          "{} greedy tokens on stories260k-Q8_0.gguf".format(len(ref)))


def case_bench():
    model = os.path.join(TESTDATA, "models", "stories260k")
    out = run(mpirun_prefix(2) + [CYPRIS, "bench", "throughput", "--model", model, "--num-prompts", "4",
                                  "--input-len", "16", "--output-len", "16", "--threads", "1", "-tp", "2"])
    if "tokens/s" not in out and "requests/s" not in out:
        fail("bench throughput printed no throughput:\n" + out)
    out = run(mpirun_prefix(2) + [CYPRIS, "bench", "latency", "--model", model, "--input-len", "8", "--output-len",
                                  "8", "--batch-size", "1", "--num-iters", "2", "--num-iters-warmup", "1",
                                  "--threads", "1", "-tp", "2"])
    if "latency" not in out.lower():
        fail("bench latency printed no latency:\n" + out)
    # With two stages as two processes: both stages' utilisation reaches process 0's table (stage 1's
    # busy time travels with its logits).
    # (A model big enough that each stage's busy time shows in the table's two decimals.)
    folder = os.path.join(WORK, "slow-model")
    write_slow_model(folder)
    out = run(mpirun_prefix(2) + [CYPRIS, "bench", "throughput", "--model", folder, "--load-format", "dummy",
                                  "--num-prompts", "4", "--input-len", "64", "--output-len", "4", "--threads", "1",
                                  "-pp", "2"])
    busy = [float(m) for m in re.findall(r"^\| [01]: layers \[[0-9]+, [0-9]+\) on cpu \| ([0-9.]+) \|", out, re.M)]
    if len(busy) != 2 or min(busy) <= 0:
        fail("bench throughput under mpirun -np 2 -pp 2 does not show both stages busy:\n" + out)
    print("ok: bench throughput and latency under mpirun -np 2; -pp 2 stage busy seconds {}".format(busy))


def write_slow_model(folder):
    # Random weights (--load-format dummy) of a model big enough that one request runs for many
    # seconds on a loaded CI machine, with stories260k's tokenizer.
    os.makedirs(folder, exist_ok=True)
    src = os.path.join(TESTDATA, "models", "stories260k")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, name), folder)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
           "intermediate_size": 1536, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4,
           "vocab_size": 512, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float32", "bos_token_id": 1,
           "eos_token_id": 2}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)


def ranks_of(mpirun_pid):
    # The processes mpirun started (its children), by their OMPI_COMM_WORLD_RANK.
    ranks = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/{}/stat".format(d)) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            with open("/proc/{}/environ".format(d), "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            if b"OMPI_COMM_WORLD_RANK" in env:
                ranks[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(d)
        except (OSError, ValueError, IndexError):
            continue
    return ranks


def case_worker_killed(pp=1):
    folder = os.path.join(WORK, "slow-model")
    write_slow_model(folder)
    s = Server(2, folder, ["--load-format", "dummy", "--max-model-len", "4096"], log_name="killed", pp=pp)
    try:
        ranks = ranks_of(s.proc.pid)
        if 1 not in ranks:
            fail("cannot find the worker process (rank 1) among mpirun's children: {}".format(ranks))
        body = {"model": server_model_name(s), "prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0,
                "ignore_eos": True, "stream": True}
        req = urllib.request.Request("http://127.0.0.1:{}/v1/completions".format(s.port),
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = urllib.request.urlopen(req, timeout=60)
        first = resp.readline()
        while first.strip() == b"":
            first = resp.readline()
        if not first.startswith(b"data:"):
            fail("no first stream event: {!r}".format(first))
        killed_at = time.time()
        os.kill(ranks[1], signal.SIGKILL)
        rest = b""
        try:
            while True:
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
                if not chunk:
                    break
                rest += chunk
                if time.time() - killed_at > 30:
                    fail("the stream still runs 30 s after the worker was killed")
        except OSError:
            pass  # the server may close the connection after the error event
        try:
            s.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            fail("the job still runs 30 s after the worker was killed:\n" + s.text())
        elapsed = time.time() - killed_at
        log = s.text()
        events = [line[5:].strip() for line in rest.decode(errors="replace").splitlines() if line.startswith("data:")]
        finished_normally = any('"finish_reason": "length"' in e or '"finish_reason":"length"' in e for e in events)
        if finished_normally:
            fail("the request finished normally although its worker was killed")
        if not re.search(r"model step failed: .*(stopped by SIGTERM|did not answer|died)", log):
            fail("process 0 did not report the failed step:\n" + log)
        if s.proc.returncode == 0:
            fail("the job exited 0 after losing a process:\n" + log)
        errors = [e for e in events if "error" in e]
        print("ok: {} killed; the job ended {:.1f} s later (exit {}); stream errors: {}".format(
            "the stage-1 process" if pp > 1 else "worker", elapsed, s.proc.returncode, errors[:1]))
    finally:
        if s.proc.poll() is None:
            os.killpg(s.proc.pid, signal.SIGKILL)


def case_pp_worker_killed():
    case_worker_killed(pp=2)


def case_worker_timeout():
    version = subprocess.run([MPIRUN, "--version"], stdout=subprocess.PIPE, text=True).stdout
    if "Open MPI) 4." not in version:
        print("skipped: orte_enable_recovery is an Open MPI 4 parameter; this is " + version.splitlines()[0])
        sys.exit(SKIP)
    folder = os.path.join(WORK, "slow-model")
    write_slow_model(folder)
    env = dict(os.environ, CYPRIS_DISTRIBUTED_TIMEOUT="3")
    s = Server(2, folder, ["--load-format", "dummy"], log_name="timeout", env=env,
               mpirun_extra=["--mca", "orte_enable_recovery", "1", "-x", "CYPRIS_DISTRIBUTED_TIMEOUT"])
    try:
        ranks = ranks_of(s.proc.pid)
        if 1 not in ranks:
            fail("cannot find the worker process (rank 1) among mpirun's children: {}".format(ranks))
        os.kill(ranks[1], signal.SIGKILL)
        time.sleep(1)
        if s.proc.poll() is not None:
            print("skipped: mpirun ended the job although told not to")
            sys.exit(SKIP)
        t0 = time.time()
        try:
            out = s.post("/v1/completions", {"model": server_model_name(s), "prompt": "Once upon a time",
                                             "max_tokens": 50, "temperature": 0}, timeout=60)
            fail("a request without its worker succeeded: {}".format(out))
        except urllib.error.HTTPError as e:
            body = e.read().decode(errors="replace")
            if "did not answer within 3 s" not in body:
                fail("unclear error {}: {}".format(e.code, body))
        waited = time.time() - t0
        if waited > 30:
            fail("the error took {:.1f} s".format(waited))
        try:
            s.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            fail("process 0 still runs 30 s after the failed step:\n" + s.text())
        print("ok: without mpirun's help the request failed after {:.1f} s and the job ended".format(waited))
    finally:
        if s.proc.poll() is None:
            os.killpg(s.proc.pid, signal.SIGKILL)


def case_gpu_greedy():
    try:
        gpus = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        gpus = ""
    count = sum(1 for line in gpus.splitlines() if line.startswith("GPU "))
    if count < 2:
        print("skipped: NCCL across processes needs 2 GPUs, {} visible".format(count))
        sys.exit(SKIP)
    model = os.path.join(TESTDATA, "models", "stories260k")
    extra = ["--device", "cuda", "--dtype", "float32", "--enforce-eager"]
    one = generate_ids(model, 1, extra, 48)
    two = generate_ids(model, 2, extra, 48)
    if one != two:
        fail("mpirun -np 2 on GPUs gives {} instead of one GPU's {}".format(two, one))
    # Two pipeline stages, one GPU each: the hand-off GPU to GPU by NCCL send/recv, the logits over MPI.
    staged = generate_ids(model, 2, extra, 48, pp=2)
    if one != staged:
        fail("mpirun -np 2 -pp 2 on GPUs gives {} instead of one GPU's {}".format(staged, one))
    print("ok: mpirun -np 2 (-tp 2 and -pp 2) on two GPUs (NCCL) gives one GPU's {} greedy tokens".format(len(one)))


def case_root_killed():
    model = os.path.join(TESTDATA, "models", "stories260k")
    s = Server(2, model, log_name="root_killed")
    try:
        ranks = ranks_of(s.proc.pid)
        if 0 not in ranks or 1 not in ranks:
            fail("cannot find both processes among mpirun's children: {}".format(ranks))
        os.kill(ranks[0], signal.SIGKILL)
        t0 = time.time()
        try:
            s.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            fail("the job still runs 30 s after process 0 was killed:\n" + s.text())
        if os.path.exists("/proc/{}".format(ranks[1])):
            with open("/proc/{}/stat".format(ranks[1])) as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    fail("the worker outlived the job")
        print("ok: process 0 killed; the job ended {:.1f} s later (exit {})".format(time.time() - t0,
                                                                                   s.proc.returncode))
    finally:
        if s.proc.poll() is None:
            os.killpg(s.proc.pid, signal.SIGKILL)


def case_worker_start_fails():
    # The worker's --quantization-param-path is missing: it fails while loading, after MPI started and
    # the start-up checks passed, while process 0 goes on into the next collective.
    model = os.path.join(TESTDATA, "models", "stories260k")
    base = [CYPRIS, "generate", "--model", model, "--prompt-ids", "1", "--max-tokens", "4", "--threads", "1",
            "-tp", "2", "--kv-cache-dtype", "fp8"]
    missing = os.path.join(WORK, "no-such-scales.json")
    cmd = mpirun_prefix(1) + base + [":", "-np", "1"] + base + ["--quantization-param-path", missing]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        fail("the job still ran 60 s after a worker failed to start")
    elapsed = time.time() - t0
    if p.returncode == 0:
        fail("the job succeeded without its worker:\n" + p.stdout[-4000:])
    if "no-such-scales.json" not in p.stdout:
        fail("the worker's error is not in the output:\n" + p.stdout[-4000:])
    if elapsed > 30:
        fail("the job took {:.1f} s to end".format(elapsed))
    print("ok: a worker that cannot start ends the job in {:.1f} s with its error".format(elapsed))


def case_mismatch():
    model = os.path.join(TESTDATA, "models", "stories260k")
    # Process 1 gets another --block-size (an MPMD launch: "mpirun -np 1 A : -np 1 B").
    base = [CYPRIS, "generate", "--model", model, "--prompt-ids", "1", "--max-tokens", "4", "--threads", "1",
            "-tp", "2"]
    cmd = mpirun_prefix(1) + base + [":", "-np", "1"] + base + ["--block-size", "32"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if p.returncode == 0:
        fail("processes with different settings ran:\n" + p.stdout)
    if "process 1 (on" not in p.stdout or "different Cypris version, model config or engine settings" not in p.stdout:
        fail("no clear error naming process 1:\n" + p.stdout[-4000:])
    # Process 1 splits the model into pipeline stages where process 0 splits every layer (both worlds
    # have tp x pp = 2 processes): the start-up hash includes pp.
    tp_base = base[:-2]
    cmd = mpirun_prefix(1) + tp_base + ["-tp", "2"] + [":", "-np", "1"] + tp_base + ["-pp", "2"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if p.returncode == 0 or "process 1 (on" not in p.stdout:
        fail("-tp 2 beside -pp 2 was not refused naming process 1:\n" + p.stdout[-4000:])
    # Too few processes for -tp.
    p = subprocess.run(mpirun_prefix(2) + base[:-1] + ["4"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    if p.returncode == 0 or "mpirun started 2 processes, but --tensor-parallel-size 4" not in p.stdout:
        fail("-np 2 with -tp 4 was not refused clearly:\n" + p.stdout[-4000:])
    print("ok: mismatched processes and a wrong process count are refused with the process named")


def main():
    global CYPRIS, TESTDATA, WORK, MPIRUN
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    case, CYPRIS, TESTDATA, have_mpi, WORK = sys.argv[1:]
    if have_mpi not in ("ON", "1", "TRUE", "true"):
        print("skipped: this build has no MPI (CYPRIS_HAVE_MPI={})".format(have_mpi))
        return SKIP
    MPIRUN = shutil.which("mpirun") or shutil.which("mpiexec")
    if not MPIRUN:
        print("skipped: mpirun is not installed (apt-get install openmpi-bin)")
        return SKIP
    os.makedirs(WORK, exist_ok=True)
    cases = {"greedy_stories260k": case_greedy_stories260k, "greedy_gguf": case_greedy_gguf,
             "batched_solo": case_batched_solo, "bench": case_bench, "worker_killed": case_worker_killed,
             "worker_timeout": case_worker_timeout, "gpu_greedy": case_gpu_greedy, "root_killed": case_root_killed,
             "worker_start_fails": case_worker_start_fails, "pp_greedy": case_pp_greedy,
             "pp_batched_solo": case_pp_batched_solo, "pp_worker_killed": case_pp_worker_killed,
             "mismatch": case_mismatch}
    cases["spec_draft"] = case_spec_draft
    if case not in cases:
        print("unknown case {} (allowed: {})".format(case, ", ".join(cases)), file=sys.stderr)
        return 2
    cases[case]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
