#!/usr/bin/env python3
"""Time to first token per turn of a chat that re-sends the whole conversation every turn, as
SillyTavern does: 6 turns of 250 new prompt tokens (token ids, so the model may have no tokenizer)
plus a 30-token reply, against a Cypris server on 127.0.0.1:PORT. Prints (prompt tokens, seconds).

usage: chat_ttft.py PORT
"""
import json, random, sys, time, urllib.request
port = int(sys.argv[1])
random.seed(1)
conv = [1]
out = []
for turn in range(6):
    conv += [random.randrange(3, 30000) for _ in range(250)]
    body = json.dumps({"model": "m", "prompt": conv, "max_tokens": 1, "temperature": 0}).encode()
    t = time.time()
    r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"}))
    json.load(r)
    out.append((len(conv), round(time.time() - t, 3)))
    conv += [random.randrange(3, 30000) for _ in range(30)]  # the reply, re-sent next turn
print(out)
