// Generates tests/fixtures/tokenizer/<name>.jsonl: deterministic random texts (prose, code, digits,
// whitespace runs, CJK, emoji, combining marks, special tokens) and random id sequences, encoded and
// decoded by an independent implementation, @huggingface/tokenizers (JS), on testdata's tokenizer.json.
// One place where the JS port departs from the Rust library (which Transformers and vLLM use), so
// the fixtures avoid it: an invalid run of <0xXX> byte tokens is decoded lossily instead of one
// U+FFFD per byte. So random ids for byte-fallback vocabularies use byte tokens only as runs that
// spell a valid character.
// Usage (from a folder where `npm install @huggingface/tokenizers@0.2.0` was run):
//   node gen_tokenizer_reference.mjs <testdata>/tokenizers <out dir>
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "fs";

const [base, outDir] = process.argv.slice(2);

// xorshift32: deterministic across runs and platforms.
let state = 0x12345678;
function rnd() {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state / 4294967296;
}
const pick = (arr) => arr[Math.floor(rnd() * arr.length)];
const int = (n) => Math.floor(rnd() * n);

const words = ["the", "of", "and", "Hello", "world", "don't", "it's", "we'll", "I've", "model", "tokenizer",
  "naïve", "café", "Zürich", "Ελληνικά", "русский", "日本語", "中文", "한국어", "ภาษาไทย", "हिन्दी", "العربية",
  "CamelCase", "snake_case", "x86_64", "e.g.", "U.S.A.", "--flag", "http://example.com/a?b=c"];
const pieces = [
  () => pick(words),
  () => String(int(1e9)),
  () => " ".repeat(1 + int(5)),
  () => pick(["\n", "\n\n", "\r\n", "\t", " \t ", "\n   \n"]),
  () => pick(["if (x) {", "}", "return a->b;", "def f(self):", "    pass", "#include <x.h>", "a += b[i] * 2;"]),
  () => String.fromCodePoint(0x4e00 + int(3000)) + String.fromCodePoint(0x4e00 + int(3000)),
  () => String.fromCodePoint(0x1f600 + int(80)) + pick(["", "\u200d\u{1f525}", "\ufe0f"]),
  () => pick(["e\u0301", "a\u030a", "\u1100\u1161", "s\u0307\u0323", "\u212b", "o\u0308\u0304"]),
  () => pick(["!!!", "...", "''", "\"\"", "???", "~~", "«»", "—", "…"]),
];

function makeText(specials) {
  let t = "";
  const n = 3 + int(40);
  for (let i = 0; i < n; i++) {
    if (specials.length && int(25) === 0) t += pick(specials);
    t += pick(pieces)();
    if (int(3) !== 0) t += " ";
  }
  return t;
}

for (const name of ["llama2-spm", "llama3-bpe", "qwen2-bpe", "gpt2-bpe"]) {
  const dir = `${base}/${name}`;
  const tj = JSON.parse(fs.readFileSync(`${dir}/tokenizer.json`, "utf8"));
  const tc = JSON.parse(fs.readFileSync(`${dir}/tokenizer_config.json`, "utf8"));
  const tok = new Tokenizer(tj, tc);
  const specials = tj.added_tokens.filter((t) => t.special).slice(0, 8).map((t) => t.content);
  const byteId = (b) => tj.model.vocab["<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">"];
  const byteFallback = !!tj.model.byte_fallback;
  let vocabSize = 0;
  for (const id of Object.values(tj.model.vocab)) vocabSize = Math.max(vocabSize, id + 1);
  for (const t of tj.added_tokens) vocabSize = Math.max(vocabSize, t.id + 1);
  const out = [];
  for (let i = 0; i < 60; i++) {
    const text = makeText(specials);
    out.push({ text, ids: tok.encode(text, { add_special_tokens: false }).ids,
               ids_special: tok.encode(text).ids });
  }
  for (let i = 0; i < 60; i++) {
    const ids = [];
    const n = 1 + int(30);
    for (let k = 0; k < n; k++) {
      if (!byteFallback) {
        ids.push(int(3) === 0 ? int(Math.min(vocabSize, 300)) : int(vocabSize));
      } else if (int(4) === 0) {
        const ch = String.fromCodePoint(pick([0x80 + int(0x700), 0x4e00 + int(3000), 0x1f600 + int(80)]));
        for (const b of new TextEncoder().encode(ch)) ids.push(byteId(b));
      } else {
        let id;
        do id = int(vocabSize); while (id >= 3 && id < 259);
        ids.push(id);
      }
    }
    out.push({ ids, text: tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
               text_skip: tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }) });
  }
  fs.writeFileSync(`${outDir}/${name}.jsonl`, out.map((o) => JSON.stringify(o)).join("\n") + "\n");
}
