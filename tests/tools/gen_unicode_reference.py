#!/usr/bin/env python3
"""Writes tests/fixtures/unicode/reference.json: what Python (unicodedata, str.casefold, str.lower)
and Perl's \\p{Alphabetic} and \\p{N} say about every assigned code point, for
tests/unit/tokenizer/unicode_test.cpp to compare engine/tokenizer/unicode.* (utf8proc) against.
Both must use the same Unicode version (Debian 12: 14.0.0 in each; the script checks).

Only the code points whose answer is not the identity are listed; "assigned" bounds what the test
checks (the code points Python's Unicode version assigns; Hangul syllables, whose decomposition is
arithmetic, are checked through a sample in "strings"). Run:
  python3 tests/tools/gen_unicode_reference.py > tests/fixtures/unicode/reference.json
"""
import json
import random
import sys
import unicodedata

import subprocess

HANGUL = range(0xAC00, 0xD7A4)
PERL_VERSION = subprocess.run(['perl', '-MUnicode::UCD', '-e', 'print Unicode::UCD::UnicodeVersion()'],
                              check=True, capture_output=True, text=True).stdout
assert PERL_VERSION == unicodedata.unidata_version, (PERL_VERSION, unicodedata.unidata_version)
# Rust's char::is_alphanumeric is Alphabetic or Numeric (general category N*).
PERL_WORD = subprocess.run(
    ['perl', '-e', 'for my $c (0..0x10FFFF) { next if $c >= 0xD800 && $c < 0xE000; '
     'print "$c\\n" if chr($c) =~ /[\\p{Alphabetic}\\p{N}_]/ }'],
    check=True, capture_output=True, text=True).stdout
word = set(int(line) for line in PERL_WORD.split())


def ranges(cps):
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


assigned = [cp for cp in range(0x110000)
            if not 0xD800 <= cp < 0xE000 and cp not in HANGUL and unicodedata.category(chr(cp)) != 'Cn']

maps = {'lower': str.lower, 'casefold': str.casefold}
for form in ('NFC', 'NFD', 'NFKC', 'NFKD'):
    maps[form.lower()] = lambda s, f=form: unicodedata.normalize(f, s)

ref = {'unicode_version': unicodedata.unidata_version, 'assigned': ranges(assigned),
       'word': ranges(cp for cp in assigned if cp in word)}
for name, fn in maps.items():
    ref[name] = [[cp, fn(chr(cp))] for cp in assigned if fn(chr(cp)) != chr(cp)]

# Strings: starters with runs of combining marks in random order (canonical reordering and
# composition across blocked marks), Hangul jamo and syllables, compatibility characters.
rng = random.Random(25)
marks = [cp for cp in assigned if unicodedata.combining(chr(cp))][:400]
starters = [ord(c) for c in 'aeiouAEOUsSqQnNcCzZ'] + [0x3B1, 0x3C9, 0x415, 0x1100, 0x1161, 0x11A8, 0xAC00, 0xD4DB,
                                                   0x212B, 0x1E9B, 0xFB01, 0x2460, 0xFF21, 0x3300, 0xDF, 0x130]
strings = []
for _ in range(300):
    s = ''
    for _ in range(rng.randint(1, 4)):
        s += chr(rng.choice(starters))
        s += ''.join(chr(rng.choice(marks if rng.random() < 0.7 else [0x301, 0x323, 0x308, 0x307, 0x31B]))
                     for _ in range(rng.randint(0, 3)))
    strings.append(s)
strings += [chr(cp) for cp in rng.sample(HANGUL, 50)] + ['\u1100\u1161\u11a8', '\u1112\u1161\u11ab\u1100\u1173\u11af']
ref['strings'] = [{'s': s, **{name: fn(s) for name, fn in maps.items() if name != 'lower'}} for s in strings]

json.dump(ref, sys.stdout, ensure_ascii=False, separators=(',', ':'))
sys.stdout.write('\n')
