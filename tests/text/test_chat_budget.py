"""Chat templates render under one budget per render (apr_core/text/chat_sandbox.py): exact
step counts at the limit, and every hostile template ends in a coded error, fast, having
run no code of its own."""
import time

import pytest

from apr_core.errors import AprError, ErrorCode
from apr_core.text.chat import render_chat
from apr_core.text.chat_probe import describe_template, probe_template
from apr_core.text.chat_sandbox import Limits

from requires import needs

pytestmark = needs("jinja2")       # the sandbox is jinja2's; without it templates are built-ins

USER = [{"role": "user", "content": "hi"}]


def _limit_of(template, limits=None, messages=USER):
    with pytest.raises(AprError) as caught:
        render_chat(messages, template, limits=limits)
    return caught.value


@pytest.mark.parametrize("n", [1, 10, 1000])
def test_iterations_are_counted_exactly(n):
    # range() is one call, then n loop items: n + 1 steps.
    template = "{% for i in range(" + str(n) + ") %}{% endfor %}ok"
    assert render_chat(USER, template, limits=Limits(iterations=n + 1)) == "ok"
    err = _limit_of(template, Limits(iterations=n))
    assert err.code is ErrorCode.MEMORY and err.context["limit"] == "iterations"


def test_nested_loops_count_across_the_render():
    # items 30 + 900 + 27,000, range calls 1 + 30 + 900: 28,861 steps; each range is tiny.
    template = ("{% for a in range(30) %}{% for b in range(30) %}{% for c in range(30) %}"
                "{% endfor %}{% endfor %}{% endfor %}ok")
    assert render_chat(USER, template, limits=Limits(iterations=28861)) == "ok"
    assert _limit_of(template, Limits(iterations=28860)).context["limit"] == "iterations"


def test_output_limit_counts_every_output_and_grows_with_the_input():
    template = "{% for i in range(100) %}{{ messages[0]['content'] }}{% endfor %}"
    long = [{"role": "user", "content": "x" * 1000}]
    # 100 KB of output from 1 KB of input: over a 10 KB base + 4 x input, under 500 KB.
    err = _limit_of(template, Limits(output=10000), long)
    assert err.context["limit"] == "output"
    assert len(render_chat(long, template, limits=Limits(output=100000))) == 100000
    # what a macro writes into a discarded buffer counts too
    buffered = ("{% macro m() %}{% for i in range(1000) %}xxxxxxxxxx{% endfor %}{% endmacro %}"
                "{% set x = m() %}ok")
    assert _limit_of(buffered, Limits(output=5000)).context["limit"] == "output"
    assert render_chat(USER, buffered, limits=Limits(output=20000)) == "ok"


def test_time_limit_is_the_last_guard():
    exponential = ("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                   "{% endmacro %}{{ f(40) }}")
    start = time.perf_counter()
    err = _limit_of(exponential, Limits(iterations=10 ** 9, seconds=0.2))
    assert err.context["limit"] == "time"
    assert time.perf_counter() - start < 1.0


def test_call_depth_is_bounded_below_the_interpreters_recursion_limit():
    """A macro calling itself is stopped by the budget's call depth, never by a
    RecursionError (whose unwinding through jinja2's generators Python 3.8 can turn into a
    fatal abort); honest nesting up to the limit renders."""
    from apr_core.text.chat_sandbox import MAX_CALL_DEPTH
    deep = "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}x{% endmacro %}{{ f(N) }}"
    assert render_chat(USER, deep.replace("N", str(MAX_CALL_DEPTH - 1))) == "x" * MAX_CALL_DEPTH
    err = _limit_of(deep.replace("N", str(MAX_CALL_DEPTH)))
    assert err.code is ErrorCode.MEMORY and err.context["limit"] == "recursion"
    assert err.context["depth"] == MAX_CALL_DEPTH
    # the budget, not the interpreter (a RecursionError has no depth), stops a macro
    # calling itself
    err = _limit_of("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}")
    assert err.context["limit"] == "recursion" and err.context["depth"] == MAX_CALL_DEPTH


HOSTILE = {
    "nested loops": ("{% for a in range(100000) %}{% for b in range(100000) %}"
                     "{% for c in range(100000) %}{% endfor %}{% endfor %}{% endfor %}", "E008"),
    "string bomb": ("{{ 'a' * 10000000000 }}", "E008"),
    "doubling": ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}", "E008"),
    "plus doubling": ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                      "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}", "E008"),
    "recursion": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "E008"),
    "exponential macro": ("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}"
                          "{% endif %}{% endmacro %}{{ f(64) }}", "E008"),
    "big integer": ("{% set ns = namespace(x=3) %}{% for i in range(64) %}"
                    "{% set ns.x = ns.x * ns.x %}{% endfor %}{{ ns.x }}", "E008"),
    "power": ("{{ 7 ** 100000000 }}", "E008"),
    "pad filter": ("{{ 'a'|center(3000000000) }}", "E008"),
    "pad method": ("{{ 'a'.ljust(3000000000) }}", "E008"),
    "format width": ("{{ '{:>3000000000}'.format(1) }}", "E008"),
    "nested format width": ("{{ '{:>{w}}'.format(1, w=3000000000) }}", "E008"),
    "percent width": ("{{ '%3000000000d' % 1 }}", "E008"),
    "format filter width": ("{{ '%3000000000d'|format(1) }}", "E008"),
    "batch": ("{{ [1]|batch(1000000000, 'x')|list|length }}", "E008"),
    "list bomb": ("{% for i in (range(100000)|list) * 100000 %}{% endfor %}", "E008"),
    "mro": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "E001"),
    "cycler globals": ("{{ cycler.__init__.__globals__.os.system('touch CANARY') }}", "E001"),
    "joiner globals": ("{{ joiner.__init__.__globals__.os.system('touch CANARY') }}", "E001"),
    "namespace globals": ("{{ namespace.__init__.__globals__.os.system('touch CANARY') }}",
                          "E001"),
    "attr chain": ("{{ (()|attr('__class__')|attr('__base__')|attr('__subclasses__'))() }}",
                   "E001"),
    "format fields": ("{{ '{0.__class__.__init__.__globals__}'.format(cycler) }}", "E001"),
    "include": ("{% include '/etc/passwd' %}", "E001"),
    "lipsum": ("{{ lipsum(1000000000) }}", "E001"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_templates_end_in_coded_errors(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    template, code = HOSTILE[name]
    start = time.perf_counter()
    for attempt in (render_chat, probe_template):
        with pytest.raises(AprError) as caught:
            attempt(USER, template) if attempt is render_chat else attempt(template)
        assert caught.value.code.name == code, str(caught.value)
    assert time.perf_counter() - start < 2 * 2.0
    assert not (tmp_path / "CANARY").exists()
    assert describe_template(template)["check"].startswith(code)


def test_probe_accepts_templates_that_reject_a_shape_on_purpose():
    # Mistral-style: no system role, roles must alternate; the probe tries the next shape.
    template = ("{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
                "{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
                "[{{ m['role'] }}]{{ m['content'] }}{% endfor %}")
    info = probe_template(template)
    assert info["system"] is False and info["turns"] == 3
    with pytest.raises(AprError) as caught:
        probe_template("{{ raise_exception('never') }}")
    assert caught.value.code is ErrorCode.FORMAT
    with pytest.raises(AprError) as caught:
        probe_template("{{ messages[0]['content'] }}")      # drops the user's message
    assert "drops the user's message" in str(caught.value)


def test_describe_template_names_the_builtin_it_renders_like():
    chatml = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
              "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
              "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    info = describe_template(chatml)
    assert info == {"present": True, "chars": len(chatml), "family": "chatml",
                    "builtin": "chatml", "check": "ok"}
    assert describe_template(chatml.replace("'\n'}}", "'\n\n'}}"))["builtin"] is None
    assert describe_template(None)["present"] is False
