// The official `openai` npm client against `cypris --no-ui` serving stories260k: models,
// completions and chat completions, streaming and not. Prints "PASS" or throws.
import OpenAI from "openai";
import assert from "node:assert/strict";

const port = process.argv[2];
const expected = process.argv[3];  // the model's greedy story
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "test-key" });

const models = await client.models.list();
assert.equal(models.data[0].id, "stories");

// Completions add no BOS unless asked; the story starts after BOS.
const prompt = "Once upon a time";
const completion = await client.completions.create({
  model: "stories", prompt, max_tokens: 24, temperature: 0, add_special_tokens: true,
});
const text = completion.choices[0].text;
assert.ok(text.length > 20, `short completion: ${text}`);
assert.ok(expected.startsWith(prompt + text), `not the greedy story: ${JSON.stringify(text)}`);
assert.equal(completion.usage.completion_tokens, 24);

let streamed = "";
const stream = await client.completions.create({
  model: "stories", prompt, max_tokens: 24, temperature: 0, add_special_tokens: true, stream: true,
});
for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? "";
assert.equal(streamed, text);

const chat = await client.chat.completions.create({
  model: "stories", messages: [{ role: "user", content: "Tell me a story." }], max_tokens: 12, temperature: 0,
});
assert.equal(chat.choices[0].message.role, "assistant");
assert.equal(chat.usage.completion_tokens, 12);

let chatStreamed = "";
const chatStream = await client.chat.completions.create({
  model: "stories", messages: [{ role: "user", content: "Tell me a story." }], max_tokens: 12, temperature: 0,
  stream: true,
});
for await (const chunk of chatStream) chatStreamed += chunk.choices[0]?.delta?.content ?? "";
assert.equal(chatStreamed, chat.choices[0].message.content);

// A wrong key is refused with the client's AuthenticationError.
const bad = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "wrong" });
await assert.rejects(() => bad.models.list(), (e) => e.status === 401);
console.log("PASS");
