#!/usr/bin/env python3
"""Independent judge for guided-decoding outputs (tests/integration/serving/guided_decoding_test.cpp).

Reads JSON lines {"kind": "jsonschema"|"lark"|"json", "spec": ..., "outputs": [...], "finished": [...]}
and checks every finished output with a tool that is not Cypris's:
  jsonschema: Debian's python3-jsonschema (Draft 2020-12 with its format checker; time and
              date-time by an RFC 3339 check written here, as Debian lacks rfc3339-validator)
  lark:       Debian's python3-lark (Earley parser, dynamic lexer), start rule "start"
  json:       Python's json module (llama.cpp's json.gbnf outputs must parse as JSON)
Prints one line per failure and a summary; exit status 0 only when every finished output passes.
Exit 77 when a judge package is missing (the test then skips).
"""
import datetime
import json
import re
import sys

try:
    import jsonschema
    import lark
except ImportError as e:  # the test skips
    print(f"guided_judge: {e}; install python3-jsonschema python3-lark", file=sys.stderr)
    sys.exit(77)


# RFC 3339 full-time and date-time (Debian has no rfc3339-validator, without which jsonschema leaves
# these formats unchecked): the ABNF's shape as a regex, the field ranges by Python's datetime.
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"


def _is_time(s):
    if not isinstance(s, str):
        return True
    if not re.fullmatch(_TIME, s):
        return False
    datetime.time.fromisoformat(s.replace("z", "Z").replace(":60", ":59"))
    return True


def _is_datetime(s):
    if not isinstance(s, str):
        return True
    m = re.fullmatch(r"([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt](.*)", s)
    if not m:
        return False
    datetime.date.fromisoformat(m.group(1))
    return _is_time(m.group(2))


def format_checker():
    fc = jsonschema.FormatChecker()
    fc.checkers = dict(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)  # date, email, ipv4, uuid, ...
    fc.checks("time", raises=ValueError)(_is_time)
    fc.checks("date-time", raises=ValueError)(_is_datetime)
    return fc


def main(path):
    bad = checked = unfinished = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            case = json.loads(line)
            kind, spec = case["kind"], case["spec"]
            if kind == "jsonschema":
                validator = jsonschema.Draft202012Validator(spec, format_checker=format_checker())
            elif kind == "lark":
                parser = lark.Lark(spec, start="start", parser="earley", lexer="dynamic")
            for text, finished in zip(case["outputs"], case["finished"]):
                if not finished:
                    unfinished += 1
                    if unfinished <= 3:  # a sample, to see why outputs run long
                        print(f"cut by max_tokens [{kind}]: {json.dumps(text[:200])}")
                    continue
                checked += 1
                try:
                    if kind == "jsonschema":
                        errors = sorted(validator.iter_errors(json.loads(text)), key=str)
                        if errors:
                            raise ValueError(errors[0].message)
                    elif kind == "lark":
                        parser.parse(text)
                    elif kind == "json":
                        json.loads(text)
                    else:
                        raise ValueError(f"unknown kind {kind}")
                except Exception as e:  # noqa: BLE001 - any failure is a finding
                    bad += 1
                    print(f"INVALID [{kind}] {json.dumps(text)}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    print(f"guided_judge: {checked} finished outputs checked, {bad} invalid, {unfinished} cut by max_tokens")
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
