#!/usr/bin/env python3
"""Time to first token per turn of a SillyTavern-style chat that outgrows the context: every turn
re-sends the system prompt and the conversation, and once it would pass BUDGET tokens the oldest
messages after the system prompt are dropped (as SillyTavern trims its history). Token ids, so the
model may have no tokenizer: a 200-token system prompt, 250 new tokens per user message, a 30-token
reply (random ids, re-sent next turn as the reply). Against a Cypris server on 127.0.0.1:PORT; each
turn is a completion with max_tokens 1, so its time is the time to the first token. Prints one line
per turn: turn, prompt tokens, dropped messages so far, seconds.

usage: chat_trim_ttft.py PORT [TURNS] [BUDGET]
"""
import json, random, sys, time, urllib.request

port = int(sys.argv[1])
turns = int(sys.argv[2]) if len(sys.argv) > 2 else 12
budget = int(sys.argv[3]) if len(sys.argv) > 3 else 1900
rng = random.Random(1)
ids = lambda n: [rng.randrange(3, 30000) for _ in range(n)]
system = [1] + ids(199)
history = []  # messages (user, then reply), oldest first
dropped = 0
for turn in range(turns):
    user = ids(250)
    while history and len(system) + sum(map(len, history)) + len(user) > budget:
        history.pop(0)  # the oldest message goes
        dropped += 1
    prompt = system + [t for m in history for t in m] + user
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    t = time.time()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    json.load(urllib.request.urlopen(req))
    print(turn + 1, len(prompt), dropped, round(time.time() - t, 3), flush=True)
    history += [user, ids(30)]
