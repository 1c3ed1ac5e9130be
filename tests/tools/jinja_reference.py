#!/usr/bin/python3
"""Reference renderings for the chat-template interpreter's language tests.

Renders the snippets below with Python Jinja2 set up like transformers' apply_chat_template
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson,
raise_exception, strftime_now fixed at 2024-07-26 00:00:00) and writes
tests/fixtures/chat_template/jinja_snippets.json: [{"template", "context", "expected" | "error"}].
Run with Debian's python3 (python3-jinja2): /usr/bin/python3 tests/tools/jinja_reference.py
"""
import datetime
import json
import os

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise ValueError(message)

    def strftime_now(fmt):
        return datetime.datetime(2024, 7, 26, 0, 0, 0).strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


D = {"name": "x", "args": {"b": 2, "a": [1, 2.5, None, True]}, "text": "héllo \"q\"\n"}
MSGS = [{"role": "system", "content": "S"}, {"role": "user", "content": " Hi "},
        {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "Q?"}]

SNIPPETS = [
    # literals and printing
    ("{{ 1 }}|{{ 1.0 }}|{{ 0.1 }}|{{ 1e20 }}|{{ 1.5e-7 }}|{{ -0.0 }}|{{ 123456789.125 }}", {}),
    ("{{ none }}|{{ None }}|{{ true }}|{{ False }}|{{ undefined_var }}|", {}),
    ("{{ [1, 'a', none, true, 2.0] }}|{{ {'k': 'v', 'n': [1]} }}|{{ (1,) }}|{{ (1, 'b') }}|{{ () }}", {}),
    ("{{ \"it's\" }}|{{ ['it\\'s', 'say \"x\"', 'both \\' \"'] }}|{{ ['a\\nb\\t\\\\'] }}", {}),
    ("{{ 'a' 'b' }}|{{ '\\u00e9\\x41\\101' }}|{{ 'tab\\there' }}", {}),
    ("{{ d }}", {"d": D}),
    # arithmetic
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }}", {}),
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'a' ~ 1 ~ none }} {{ -2 ** 2 }}", {}),
    ("{{ 1 + 1.5 }} {{ true + 1 }} {{ 10 - 2.5 }} {{ [1] + [2, 3] }} {{ 3 * 'x' }}", {}),
    # comparisons and logic
    ("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 'a' != 'a' }}", {}),
    ("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ not 1 in [1] }}", {}),
    ("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' or [] }} {{ none and 1 }} {{ not none }}", {}),
    ("{{ 'yes' if x else 'no' }} {{ 'a' if not x }}|{{ 1 if x else 2 if y else 3 }}", {"x": 0, "y": 1}),
    ("{{ d == e }} {{ d == f }} {{ [d] == [e] }}", {"d": {"a": 1, "b": [2]}, "e": {"b": [2], "a": 1}, "f": {"a": 1}}),
    # attribute / item access, slices
    ("{{ d.name }} {{ d['args']['a'][1] }} {{ d.args.a.0 }} {{ d.missing }}|{{ d.missing is defined }}", {"d": D}),
    ("{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-2] }} {{ xs[10] }}|{{ xs[1:10:3] }} {{ xs[5:1:-2] }}",
     {"xs": list(range(8))}),
    ("{{ s[1:] }}|{{ s[::-1] }}|{{ s[-1] }}|{{ s[:3] }}|{{ s|length }}", {"s": "héllo wörld"}),
    ("{{ d.items is callable }}{{ d['items'] }}|{{ d.get('items') }}|{{ d.get('zz', 'dflt') }}|{{ d.get('zz') }}",
     {"d": {"items": [1]}}),
    # tests
    ("{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ 1 is number }} {{ 1.5 is float }}",
     {"x": 1}),
    ("{{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 3 is odd }} {{ 4 is even }}", {}),
    ("{{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 1 is integer }} {{ true is integer }} {{ true is boolean }}", {}),
    ("{{ x is true }} {{ x is false }} {{ 'a' is equalto 'a' }} {{ 2 is eq 3 }} {{ range is callable }} {{ 'ab' is lower }}",
     {"x": True}),
    ("{{ [1] is sequence }} {{ 1 is sequence }} {{ none is mapping }} {{ x is not none }} {{ 1 is in [1, 2] }}", {"x": 0}),
    # filters
    ("{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ [1, 2, 3]|length }}|{{ 'héllo'|count }}|{{ {'a': 1}|length }}", {}),
    ("{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ [] | tojson }}|{{ {} | tojson(indent=4) }}|{{ 'é\\u0001'|tojson }}",
     {"d": D}),
    ("{{ d|tojson(sort_keys=true) }}|{{ d|tojson(ensure_ascii=true) }}|{{ d|tojson(separators=(',', ':')) }}",
     {"d": D}),
    ("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}|{{ d|items|list }}", {"d": {"b": 1, "a": 2}}),
    ("{{ [1, 2, 3]|join(', ') }}|{{ xs|join('-', attribute='n') }}|{{ 'abc'|join('.') }}",
     {"xs": [{"n": 1}, {"n": 2}]}),
    ("{{ x|default('d') }}|{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ ''|d('e', boolean=true) }}|{{ 0|d(5) }}",
     {}),
    ("{{ 'hello world'|upper }}|{{ 'HeLLo'|lower }}|{{ 'hello wORLD-x (y)'|title }}|{{ 'hELLO wORLD'|capitalize }}", {}),
    ("{{ 'aaa'|replace('a', 'b') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ [3, 1, 2]|first }}|{{ [3, 1, 2]|last }}|{{ 'xyz'|first }}",
     {}),
    ("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}|{{ ms|rejectattr('role', 'eq', 'user')|list|length }}",
     {"ms": MSGS}),
    ("{{ ms|selectattr('content')|list|length }}|{{ ms|map(attribute='role')|unique|list }}|{{ ms|map(attribute='zz', default='-')|join }}",
     {"ms": MSGS + [{"role": "tool", "content": ""}]}),
    ("{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('odd')|list }}|{{ [0, 1, '', 'a']|select|list }}|{{ ['a','B']|map('upper')|list }}",
     {}),
    ("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}|{{ 'a\\n'|indent }}|", {}),
    ("{{ 1|string ~ 2 }}|{{ '42'|int + 1 }}|{{ '4.5'|float }}|{{ 'x'|int }}|{{ 3.9|int }}|{{ '0x1'|int(7) }}|{{ 2|float }}", {}),
    ("{{ 'abc'|list }}|{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ xs|sort(attribute='n')|map(attribute='n')|list }}",
     {"xs": [{"n": 2}, {"n": 1}]}),
    ("{{ [1, 2]|reverse|list }}|{{ 'abc'|reverse }}|{{ -3|abs }}|{{ 2.567|round }}|{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ 2.1|round(0, 'ceil') }}",
     {}),
    ("{{ ['a', 'A', 'b', 'a']|unique|list }}|{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ [1, 2, 3]|batch(2, 0)|list }}", {}),
    ("{{ {'b': 1, 'a': 2}|dictsort }}|{{ 'one two  three'|wordcount }}|{{ 'x'|safe }}|{{ [1, 5, 2]|max }}|{{ [1, 5, 2]|min }}|{{ [1, 2]|sum }}",
     {}),
    ("{{ '<a href=\"x\">'|e }}|{{ 'abc'|center(7) }}|{{ d|attr('name') }}", {"d": D}),
    # string methods
    ("{{ ' a '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ '\\n\\na\\n'.strip('\\n') }}|", {}),
    ("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }}",
     {}),
    ("{{ 'ab'.upper() }} {{ 'AB'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'aXa'.replace('a', '') }}",
     {}),
    ("{{ 'abcabc'.find('c') }} {{ 'abc'.find('z') }} {{ 'abcabc'.count('bc') }} {{ '{} and {}'.format(1, 'x') }} {{ '{a}!'.format(a=2) }}",
     {}),
    ("{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
     {"c": "<think>\nreason\n</think>\n\nanswer"}),
    ("{{ '-'.join(['a', 'b']) }} {{ 'a\\nb'.splitlines() }} {{ 'x'.rsplit('.', 1) }} {{ 'a.b.c'.rsplit('.', 1) }}", {}),
    ("{{ d.keys()|list }} {{ d.values()|list }} {% for k, v in d.items() %}{{ k }}:{{ v }},{% endfor %}", {"d": {"z": 1, "a": 2}}),
    # for loops
    ("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
     {"xs": "abc"}),
    ("{% for x in xs %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('o', 'e') }}]{% endfor %}", {"xs": [1, 2, 3]}),
    ("{% for x in xs if x is odd %}{{ x }}{{ loop.index }}{{ loop.last }},{% else %}empty{% endfor %}", {"xs": [1, 2, 3, 4, 5]}),
    ("{% for x in xs %}{{ x }}{% else %}empty{% endfor %}|{% for x in none_var %}{{ x }}{% endfor %}|{% for c in 'ab' %}{{ c }}{% endfor %}",
     {"xs": []}),
    ("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}{% for x in range(3) %}{{ x }}{% endfor %}{% for x in range(1, 10, 4) %}{{ x }}{% endfor %}",
     {}),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     {}),
    ("{% for r in rows %}{% for c in r %}{{ loop.index }}{{ c }}{% endfor %}/{{ loop.index }};{% endfor %}",
     {"rows": [["a", "b"], ["c"]]}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }},{% endfor %}{{ x }}", {}),
    ("{% for m in ms %}{{ m.role }}{% if not loop.last %}, {% endif %}{% endfor %}", {"ms": MSGS}),
    # set, namespace, scoping
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}{% set s %}in {{ a }} block{% endset %}[{{ s }}]", {}),
    ("{% set ns = namespace(n=0, found=false) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }} {{ ns.found }}",
     {}),
    ("{% set ns = namespace() %}{% set ns.x = 'v' %}{{ ns.x }}{% if true %}{% set y = 2 %}{% endif %}{{ y }}", {}),
    ("{% set s | upper %}shout {{ 1 }}{% endset %}{{ s }}", {}),
    ("{% set messages = messages[1:] %}{{ messages|length }} {{ messages[0].content }}", {"messages": MSGS}),
    # macros and call
    ("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(greeting='Yo', name='C') }}",
     {}),
    ("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}|{% set r = f(2) %}{{ r|length }}", {}),
    ("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inside {{ 1 + 1 }}{% endcall %}", {}),
    ("{% macro m() %}{% set local = 1 %}{{ outer }}{% endmacro %}{% set outer = 'o' %}{{ m() }}{{ local is defined }}", {}),
    ("{% macro lst(a, b=[1]) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ lst(1) }}", {}),
    ("{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}),
    ("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}", {}),
    ("{% raw %}{{ not rendered }} {% if %}{% endraw %}|", {}),
    ("{# comment #}a{# another\nline #}b", {}),
    # whitespace control: trim_blocks, lstrip_blocks, -, +
    ("<ul>\n  {% for x in xs %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n", {"xs": [1, 2]}),
    ("a  {%- if true -%}  b  {%- endif -%}  c\n  {{- 'd' -}}  \n e", {}),
    ("line1\n    {% if true %}\n    kept\n    {% endif %}\nline2\n", {}),
    ("x {% if true %}same line{% endif %} y\n  {%+ if true %}plus{% endif +%}\nz", {}),
    ("  {# c #}\nA\n{{ 'v' }}\n{% if true %}B{% endif %}\n\n", {}),
    ("{% for m in ms %}\n{{ m.role }}: {{ m.content | trim }}\n{% endfor %}\n", {"ms": MSGS}),
    ("a\r\nb\r\n{% if true %}\r\nc{% endif %}", {}),
    # globals
    ("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('%B %d, %Y %A %a %H:%M:%S %j %p') }}", {}),
    ("{{ dict(a=1, b='x') }}|{{ range(5)|list }}|{{ range(5, 0, -2)|list }}|{{ namespace(a=1).a }}", {}),
    # errors
    ("{{ raise_exception('custom failure') }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ undefined_name + 1 }}", {}),
    ("{{ undefined_fn() }}", {}),
    ("{% for x in 5 %}{% endfor %}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{% set x = 1 %}{% set x.attr = 2 %}", {}),
    ("{{ none.attr }}|{{ none['k'] is defined }}", {}),
    ("{{ 'a' in none }}", {}),
    # second batch: precedence, undefined, more filters and whitespace corners
    ("{{ 2 * 3 ** 2 }} {{ 2 ** 3 ** 2 }} {{ -1|abs }} {{ 10 / 4 }} {{ 10 / 5 }} {{ 2 ** 62 }} {{ not 1 == 2 }} {{ 1 + 2 ~ 3 }}", {}),
    ("{{ x in ('a', 'b') }} {{ not x is defined }} {{ x is string and x|length > 0 }} {{ [1, 2, 3][-1:] }} {{ 'abc'[1] }}", {"x": "a"}),
    ("{% macro f(a, b=a * 2) %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }} {{ f(1, 5) }} {{ f(b=3, a=2) }}", {}),
    ("{% set ns = namespace(c=0) %}{% macro bump() %}{% set ns.c = ns.c + 1 %}{% endmacro %}{{ bump() }}{{ bump() }}{{ ns.c }}", {}),
    ("{% for o in [1, 2] %}{% set outer = loop %}{% for i in 'ab' %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}", {}),
    ("{{ 1.0|tojson }} {{ 1e20|tojson }} {{ 3|float|tojson }} {{ '\\U0001F600 é'|tojson }} {{ '\\U0001F600'|tojson(ensure_ascii=true) }} {{ 'a\\tb\\x7f'|tojson }}", {}),
    ("{{ 'é' < 'z' }} {{ 'Z' < 'a' }} {{ 'ab' < 'abc' }} {{ none is none }} {{ u is none }} {{ u == none }} {{ u is undefined }}", {}),
    ("{{ m[0]['content'][0]['text'] }}|{{ m[0].content[1].type }}", {"m": [{"role": "user", "content": [{"type": "text", "text": "T"}, {"type": "image"}]}]}),
    ("{% for x in d %}{{ x }}{% endfor %}|{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}|{{ d|dictsort(by='value', reverse=true) }}", {"d": {"b": 1, "a": 2, "c": 0}}),
    ("{% for x in xs if x > 1 %}{{ loop.length }}{{ loop.revindex }}{% endfor %}|{{ loop is defined }}", {"xs": [1, 2, 3]}),
    ("{{ none|string }}|{{ u|string }}|{{ u|length }}|{{ u|upper }}|{{ u ~ 'a' }}|{{ u|join(',') }}|{{ u|list }}|{{ u|default('a') }}|{% for x in u %}{{ x }}{% endfor %}", {}),
    ("{{ 1 if 0 }}|{{ 'a' if none is none }}|{{ u in [1] }}|{{ [] if true else 2 }}", {}),
    ("{% if true %}\n\nA{% endif %}\n\tB\n\t{% if true %}\n\tC\n\t{% endif %}\n  {{ 'D' }}\nE {% if true %}\nF{% endif %}", {}),
    ("{%- for m in ms -%}\n  [{{- m.role -}}]\n{%- endfor -%}\n  {#- c -#}  \nZ", {"ms": MSGS}),
    ("{%- raw -%}  {{ x }}  {%- endraw -%}  |{%raw%}a{%endraw%}", {}),
    ("{% set ns = namespace(items=[]) %}{% for i in range(3) %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.items }}{{ ns.items|tojson }}", {}),
    ("{{ range(3)|map('string')|join(',') }}|{{ ms|selectattr('role', 'in', ['user', 'system'])|list|length }}|{{ [1, 2]|join }}|{{ 'x12'|int }}", {"ms": MSGS}),
    ("{{ '%s and %d'|format('a', 3) }}|{{ '%05.2f%%'|format(3.14159) }}|{{ '%r'|format('q') }}", {}),
    ("{{ {'a': 1}.a }}|{{ {'a': {'b': [1, {'c': 'deep'}]}}['a'].b[1].c }}|{{ {'a': 1}['a'] is defined }}|{{ {'a': 1}['z'] is defined }}", {}),
    ("{% set x %}\n  multi\n  line\n{% endset %}[{{ x }}]", {}),
    ("{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}{% if not a and not b %}N{% endif %}", {"a": 0, "b": 0, "c": 1}),
    ("{{ xs|sum }} {{ xs|sum(start=10) }} {{ ys|sum(attribute='v') }} {{ xs|max }} {{ ['b', 'A']|max }} {{ ['b', 'A']|min }}", {"xs": [1, 2.5], "ys": [{"v": 1}, {"v": 2}]}),
    ("{{ 'Hello World'|replace('o', '0')|lower|capitalize }}|{{ ('a' ~ 'b')|upper }}|{{ 'a b'|title|replace(' ', '_') }}", {}),
    ("{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{{ '' if loop.last else ',' }}{% endfor %}|{{ range(0)|list }}|{{ range(-3)|list }}", {}),
    ("{{ tools|tojson(indent=4) }}", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}, "required": []}}}]}),
    ("{% raw %}\nA{% endraw %}\nB|{% raw -%}\n  C{% endraw %}", {}),
    ("{{ not (xs|select('none')) }} {{ 'y' if xs|reject else 'n' }} {{ xs|map('string')|list }} {{ none|map('upper')|list }}",
     {"xs": [1, 2]}),
    ("{{ 2|round }} {{ false|round }} {{ 2.5|round }} {{ 3.5|round }} {{ 'ab' is lower }} {{ '' is lower }} {{ [1] is lower }} {{ 'A1' is upper }}", {}),
    ("{{ [u, none, xs['zz']] }}", {"xs": {}}),
    ("{{ 'a' in u }}", {}),
    ("{{ u|tojson }}", {}),
    ("{{ u < 1 }}", {}),
    ("{{ [1, 2]|first|upper }}", {}),
    ("{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("{{ 'x' * 'y' }}", {}),
    ("{{ {'a': 1} + {'b': 2} }}", {}),
    ("{{ 1 < 'a' }}", {}),
]


def main():
    env = make_env()
    out = []
    for template, context in SNIPPETS:
        entry = {"template": template, "context": context}
        try:
            entry["expected"] = env.from_string(template).render(**context)
        except Exception as e:  # noqa: BLE001 - any failure is an expected error
            entry["error"] = f"{type(e).__name__}: {e}"
        out.append(entry)
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "chat_template", "jinja_snippets.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} snippets to {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
