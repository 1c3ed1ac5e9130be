// The official `openai` npm client against `cypris --no-ui` serving stories260k: models,
// completions and chat completions, streaming and not, structured output (response_format
// json_schema) and tool calls (a named tool_choice, streamed and not). Prints "PASS" or throws.
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

// Structured output: the client's json_schema response_format gives JSON that parses and fits.
const personSchema = {
  type: "object",
  properties: { mood: { enum: ["happy", "sad", "sleepy"] }, age: { type: "integer", minimum: 1, maximum: 99 } },
  required: ["mood", "age"],
  additionalProperties: false,
};
const structured = await client.chat.completions.create({
  model: "stories", messages: [{ role: "user", content: "How is the cat?" }], max_tokens: 80, temperature: 0.7,
  seed: 5, response_format: { type: "json_schema", json_schema: { name: "cat", schema: personSchema, strict: true } },
  guided_whitespace_pattern: "",
});
assert.equal(structured.choices[0].finish_reason, "stop", JSON.stringify(structured.choices[0]));
const cat = JSON.parse(structured.choices[0].message.content);
assert.ok(["happy", "sad", "sleepy"].includes(cat.mood), JSON.stringify(cat));
assert.ok(Number.isInteger(cat.age) && cat.age >= 1 && cat.age <= 99, JSON.stringify(cat));

// Tool calls: a named tool_choice is enforced; the client reads message.tool_calls, and the
// streamed deltas rebuild the same call.
const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "Weather of a city",
    parameters: { type: "object", properties: { city: { enum: ["Paris", "Rome"] } }, required: ["city"],
                  additionalProperties: false },
  },
}];
const toolRequest = {
  model: "stories", messages: [{ role: "user", content: "Weather?" }], tools, max_tokens: 40, temperature: 0,
  tool_choice: { type: "function", function: { name: "get_weather" } }, guided_whitespace_pattern: "",
};
const toolAnswer = await client.chat.completions.create(toolRequest);
const call = toolAnswer.choices[0].message.tool_calls?.[0];
assert.ok(call, JSON.stringify(toolAnswer.choices[0]));
assert.equal(call.type, "function");
assert.equal(call.function.name, "get_weather");
assert.ok(["Paris", "Rome"].includes(JSON.parse(call.function.arguments).city), call.function.arguments);
let streamedName = "", streamedArgs = "";
for await (const chunk of await client.chat.completions.create({ ...toolRequest, stream: true })) {
  for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
    streamedName += d.function?.name ?? "";
    streamedArgs += d.function?.arguments ?? "";
  }
}
assert.equal(streamedName, "get_weather");
assert.deepEqual(JSON.parse(streamedArgs), JSON.parse(call.function.arguments));

// A wrong key is refused with the client's AuthenticationError.
const bad = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "wrong" });
await assert.rejects(() => bad.models.list(), (e) => e.status === 401);
console.log("PASS");
