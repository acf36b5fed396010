"""
jinja_cases.py — writes tests/chat/jinja_cases.json, the expectations of
tests/unit/engine/model/test_jinja.c: small templates that each exercise one
part of Jinja (whitespace control, scoping, loops, filters, tests, methods,
operators, Undefined, Markup, macros), rendered by transformers' own
compiled environment (`_compile_jinja_template`, i.e. jinja2's immutable
sandbox as apply_chat_template configures it). A case whose reference raises
is stored as {"error": true}: we must fail there too.

Run with a Python that has transformers (e.g. .venv/clients/bin/python):
    .venv/clients/bin/python tests/chat/jinja_cases.py
"""
import json
from pathlib import Path

from transformers.utils.chat_template_utils import _compile_jinja_template

MSGS = [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi ü"},
        {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]
V = {"messages": MSGS, "d": {"b": 2, "a": 1, "items": 3}, "s": "  Hello, World  ", "n": 7, "f": 2.5,
     "l": [3, 1, 2], "e": [], "none": None, "t": True, "u8": "héllo wörld 🦙"}

CASES = [
    # whitespace control: trim_blocks, lstrip_blocks, -, +
    ("a\n  {% if true %}\n  b\n  {% endif %}\n  c\n", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("a\n  {%+ if true %}b{% endif +%}\nc", {}),
    ("x {{- ' y ' -}} z", {}),
    ("{# comment #}\n  {#- c2 -#}  x\n", {}),
    ("{% raw %}{{ not evaluated }}{% endraw %}", {}),
    ("line1\r\nline2\r{{ 'x' }}\n", {}),
    ("  {% set x = 1 %}\n{{ x }}", {}),
    # scoping
    ("{% for i in [1,2] %}{% if i == 1 %}{% set x = 'a' %}{% endif %}[{{ x }}]{% endfor %}{{ x }}", {}),
    ("{% set x = 'o' %}{% for i in [1,2] %}[{{ x }}]{% set x = i %}{% endfor %}{{ x }}", {}),
    ("{% if true %}{% set y = 3 %}{% endif %}{{ y }}", {}),
    ("{% set ns = namespace(a=1, b=[]) %}{% for i in range(4) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}", {}),
    ("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    ("{% set a, b = 1, 'two' %}{{ b }}{{ a }}", {}),
    ("{% set blk %}  inner {{ n }}  {% endset %}[{{ blk }}]", V),
    ("{% set blk | trim | upper %}  inner  {% endset %}[{{ blk }}]", {}),
    # loops
    ("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
     "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", V),
    ("{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}>{{ m.role }}>"
     "{{ loop.nextitem.role if loop.nextitem is defined else '-' }} {% endfor %}", V),
    ("{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }}:{{ loop.length }} {% endfor %}", V),
    ("{% for x in e %}x{% else %}empty{% endfor %}", V),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", V),
    ("{% for k in d %}{{ k }}{% endfor %}", V),
    ("{% for c in 'abc' %}{{ c }}.{% endfor %}", {}),
    ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}", {}),
    ("{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}", V),
    # printing values as Python does
    ("{{ [1, 'a', none, true, 1.5, {'k': 'v'}, (1,), ('x', 2)] }}", {}),
    ("{{ 1.0 }} {{ 1e20 }} {{ 1/3 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 123456789012345678 }} {{ -0.0 }}", {}),
    ("{{ \"it's\" }} {{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\t', 'nl\\n', 'é', '\\x07'] }}", {}),
    ("{{ none }}|{{ true }}|{{ undefined_thing }}|{{ d }}", V),
    # operators
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 7.5 // 2 }}", {}),
    ("{{ 'ab' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ true + 1 }}", {}),
    ("{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}),
    ("{{ 'a' in 'cat' }} {{ 2 in l }} {{ 'a' in d }} {{ 'z' not in d }} {{ 'x' in undefined_thing }}", V),
    ("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ not e }} {{ 'a' if false }}|{{ 'a' if false else 'b' }}", V),
    ("{{ -n }} {{ +f }} {{ -(1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 ** -1 }}", V),
    ("{{ '%s and %d' % ('x', 3) }} {{ '%s' % 'one' }}", {}),
    ("{{ 'x' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ undefined_thing + 1 }}", {}),
    # attributes, items, slices
    ("{{ d.a }} {{ d['b'] }} {{ d.items is callable }} {{ d['items'] }} {{ d.zz is defined }} {{ d.get('a') }} {{ d.get('q', 9) }}", V),
    ("{{ l[0] }} {{ l[-1] }} {{ l[5] is defined }} {{ l[1:] }} {{ l[:-1] }} {{ l[::2] }} {{ l[::-1] }} {{ l[-2:] }}", V),
    ("{{ u8[1:4] }}|{{ u8[-1] }}|{{ u8[::-1] }}|{{ u8|length }}|{{ u8[3:1] }}", V),
    ("{{ messages[0]['content'] }} {{ messages.0.role }}", V),
    ("{{ undefined_thing.attr }}", {}),
    ("{{ d.zz.yy }}", V),
    ("{{ none.attr is defined }}", {}),
    ("{{ l.append(4) }}", V),
    ("{{ d.update({}) }}", V),
    # string methods
    ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ s.upper() }}|{{ s.lower() }}", V),
    ("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}", {}),
    ("{{ s.startswith('  He') }} {{ s.endswith(('x', '  ')) }} {{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }}", V),
    ("{{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'abc'.find('z') }}", {}),
    ("{{ 'a-b'.join(['x', 'y']) }} {{ '{} and {}'.format(1, 'two') }} {{ '{0}{name}'.format('a', name='b') }}", {}),
    ("{{ 'abc'.count('b') }} {{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ 'a\\nb\\r\\nc'.splitlines() }}", {}),
    ("{{ '<think>x</think>rest'.split('</think>')[-1].lstrip('\\n') }} {{ 'x'.removeprefix('x') }}", {}),
    # filters
    ("{{ s|trim }}|{{ s|length }}|{{ l|length }}|{{ d|length }}|{{ undefined_thing|length }}|{{ s|count }}", V),
    ("{{ l|join(', ') }} {{ l|first }} {{ l|last }} {{ l|sort }} {{ l|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }}", V),
    ("{{ l|list }} {{ 'ab'|list }} {{ d|list }} {{ l|reverse|list }} {{ 'abc'|reverse }} {{ [1, 2, 1, 3]|unique|list }}", V),
    ("{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }}", V),
    ("{{ [0, 1, '', 'a', none]|select|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('even')|list }}", {}),
    ("{{ ['a', 'b']|map('upper')|list }} {{ messages|map(attribute='content')|map('trim')|join('|') }}", V),
    ("{{ undefined_thing|default('dflt') }} {{ ''|default('e', true) }} {{ none|default('n') }} {{ 0|d(5, true) }}", {}),
    ("{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }} {{ d|items|list }}", V),
    ("{{ 'Hello World'|upper }} {{ 'Hello'|lower }} {{ 'hello-world foo'|title }} {{ 'aBc'|capitalize }}", {}),
    ("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}", {}),
    ("{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 'q'|float }} {{ 3|float }}", {}),
    ("{{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(method='ceil') }}", {}),
    ("{{ 'a b'|replace(' ', '_') }} {{ 5|string }} {{ none|string }} {{ l|string }} {{ 'x'|safe }}", V),
    ("{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ [1, 2, 3]|sum }} {{ 'one two three'|wordcount }}", {}),
    ("{{ {'a': 1, 'b': [1, 2.5, none, true, 'x\"y\\u2028z\\n']}|tojson }}", {}),
    ("{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ l|tojson(separators=(',', ':')) }}|{{ [] | tojson(indent=4) }}", V),
    ("{{ u8|tojson }} {{ u8|tojson(ensure_ascii=true) }} {{ 'ctrl\\x01\\x7f'|tojson }}", V),
    ("{{ undefined_thing|tojson }}", {}),
    ("{{ l|map('string')|tojson }}", V),
    ("{{ messages|selectattr('role', 'equalto', 'user')|length }}", V),
    ("{{ 'x'|nosuchfilter }}", {}),
    ("{{ 'x' is nosuchtest }}", {}),
    ("{% if false %}{{ 'x'|nosuchfilter }}{% endif %}ok{{ 'y'|nosuchfilter if false }}", {}),
    ("{% if true %}{{ 'x'|nosuchfilter }}{% endif %}", {}),
    ("{% if false %}{% for i in l %}{{ i|nosuchfilter }}{% endfor %}{% endif %}", V),
    # tests
    ("{{ n is number }} {{ n is integer }} {{ f is float }} {{ t is boolean }} {{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ l is sequence }}", V),
    ("{{ none is none }} {{ undefined_thing is defined }} {{ undefined_thing is undefined }} {{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }}", V),
    ("{{ d is sequence }} {{ undefined_thing is iterable }} {{ t is true }} {{ false is false }} {{ 1 is sameas 1 }} {{ none is sameas none }}", V),
    ("{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ n is eq 7 }} {{ n is ne 7 }} {{ n is gt 3 }} {{ n is lt 3 }} {{ 2 is in [1, 2] }}", V),
    ("{{ raise_exception is callable }} {{ s is not string }} {{ none is not none }}", V),
    # Markup (|safe) and +
    ("{{ 'Use \\''|safe + \"it's <b>\" + '\\''|safe }}", {}),
    ("{{ '<a>'|e }} {{ ('x'|safe ~ '<y>') }} {{ '<a>'|safe|e }}", {}),
    # macros and call blocks
    ("{% macro f(a, b=2, c='x') %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ f(1) }}{{ f(1, 3) }}{{ f(1, c='z') }}", {}),
    ("{% macro f(a) %}{{ a }}{{ missing }}{% endmacro %}{{ f() }}|{{ f(1) }}", {}),
    ("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}inside {{ n }}{% endcall %}", V),
    ("{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k }}*{{ fact(k - 1) }}{% endif %}{% endmacro %}{{ fact(4) }}", {}),
    ("{% filter upper %}hello {{ n }}{% endfilter %}", V),
    ("{% generation %}gen {{ n }}{% endgeneration %}", V),
    # globals
    ("{{ raise_exception('Conversation roles must alternate') }}", {}),
    ("{{ range(3)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ range(100000)|length }}", {}),
    ("{{ range(100001)|length }}", {}),
    ("{{ strftime_now('%Y') | length }}", {}),
    # syntax errors
    ("{% for x in l %}", V),
    ("{% endif %}", {}),
    ("{{ 'unterminated }}", {}),
    ("{% include 'x' %}", {}),
]


def main():
    out = []
    for tmpl, vars_ in CASES:
        try:
            text = _compile_jinja_template(tmpl).render(**vars_)
            out.append({"template": tmpl, "vars": vars_, "text": text})
        except Exception as e:
            out.append({"template": tmpl, "vars": vars_, "error": True, "reference_error": f"{type(e).__name__}: {e}"})
    path = Path(__file__).resolve().parent / "jinja_cases.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{len(out)} cases -> {path}")


if __name__ == "__main__":
    main()
