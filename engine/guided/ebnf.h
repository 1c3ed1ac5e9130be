// Grammar-text front ends for guided decoding:
//  - GBNF, llama.cpp's format as KoboldCpp users send it ("grammar"): `name ::= ...` rules, "..."
//    literals, [...] classes, ".", ( ), * + ? {m,n}, # comments; the start rule is `root`.
//  - Lark-style EBNF as vLLM's guided_grammar takes it: `rule: ...` / `TERMINAL: ...`, "..."(i),
//    /regex/, "a".."z", [optional], ( ), * + ? ~ n(..m), `-> alias` (ignored), // comments,
//    %import common.NAME (the usual terminals), %ignore (allowed between the items of rules, as
//    Lark's lexer would skip it); the start rule is `start`. The text a grammar accepts is what
//    Lark's Earley parser with the dynamic lexer accepts.
// Errors name the line and column.
#pragma once

#include <string_view>

#include "engine/guided/grammar.h"

namespace cypris::guided {

Grammar gbnf_grammar(std::string_view text, const std::string& what = "grammar");
Grammar lark_grammar(std::string_view text, const std::string& what = "guided_grammar");

}  // namespace cypris::guided
