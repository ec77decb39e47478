"""The sandbox chat templates render in, with a budget over the whole render.

A GGUF's `tokenizer.chat_template` is code from whoever uploaded the file. It runs in
jinja2's immutable sandbox (no attribute escapes, no mutation of the caller's objects),
and on top of that every render gets one `Budget`:

- iterations: every loop item, every function, macro, method or filter call counts one,
  across the whole render (jinja2 caps one `range`, not three nested ones);
- size: every output expression (root, macro body, `{% set %}` block) adds its length to
  the output; every intermediate string, list, dict (`~`, `+`, `*`, `%`, call and filter
  results) must itself stay within the output limit; integers within `MAX_INT_BITS`;
  size arguments (`center`, `ljust`, `batch`, ...) within the output limit;
- time: a wall-clock cap, checked at every counted step, as the last guard;
- depth: calls nested at most `MAX_CALL_DEPTH` deep (a macro calling itself forever), far
  below the interpreter's recursion limit: a RecursionError unwinding through jinja2's
  generators can recurse again in their clean-up, which Python 3.8 ends with a fatal
  "stack overflow" abort instead of an exception.

Exceeding a limit raises `AprError(E008)` naming the limit. The output limit grows with
the conversation (`OUTPUT_PER_INPUT` characters of output per character of input), so a
long but honest conversation renders. The counters are inserted by rewriting the parsed
template (loop iterables, output expressions and `~` go through internal filters a
template cannot redefine), so they count however the template nests its loops.
"""
from __future__ import annotations

import functools
import re
import string
import threading
import time
from typing import Any, Dict, Iterator, NamedTuple, Optional

from ..errors import AprError, ErrorCode

MAX_TEMPLATE_CHARS = 256 * 1024     # real templates are < 32 KiB
MAX_INT_BITS = 1 << 16
OUTPUT_PER_INPUT = 4
# Calls and filters whose integer arguments are sizes of what they build.
_SIZE_ARGUMENT_CALLS = frozenset(["center", "ljust", "rjust", "zfill", "expandtabs",
                                  "indent", "wordwrap", "batch", "slice", "truncate"])
# printf-style conversions with their width and precision ('*' takes them from the args).
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(\*|\d+)?(?:\.(\*|\d+))?[a-zA-Z%]")


class Limits(NamedTuple):
    """The budget of one render: loop iterations + calls, output characters (before the
    conversation's share is added) and wall-clock seconds."""

    iterations: int = 1000000
    output: int = 1 << 20
    seconds: float = 1.0


DEFAULT_LIMITS = Limits()


MAX_CALL_DEPTH = 48        # nested template calls (each costs jinja2 several frames)


class Budget:
    """What one render has used; `step`, `output`, `value` and `enter` raise E008 past a
    limit."""

    __slots__ = ("limits", "iterations", "written", "max_output", "started", "deadline",
                 "depth")

    def __init__(self, limits: Limits, input_chars: int = 0) -> None:
        self.limits = limits
        self.iterations = 0
        self.written = 0
        self.max_output = limits.output + OUTPUT_PER_INPUT * max(input_chars, 0)
        self.started = time.monotonic()
        self.deadline = self.started + limits.seconds
        self.depth = 0                 # calls now running inside one another

    def _exceeded(self, limit: str, message: str, **context: Any) -> AprError:
        return AprError(ErrorCode.MEMORY, "chat template exceeded its {} limit: {}".format(
            limit, message), limit=limit, **context)

    def step(self) -> None:
        self.iterations += 1
        if self.iterations > self.limits.iterations:
            raise self._exceeded("iterations", "more than {} loop iterations and calls".format(
                self.limits.iterations), iterations=self.limits.iterations)
        if time.monotonic() > self.deadline:
            raise self._exceeded("time", "rendering took over {} s".format(
                self.limits.seconds), seconds=self.limits.seconds)

    def enter(self) -> None:
        """One call deeper (the caller leaves with `depth -= 1`)."""
        if self.depth >= MAX_CALL_DEPTH:
            raise self._exceeded("recursion", "calls nested over {} deep".format(
                MAX_CALL_DEPTH), depth=MAX_CALL_DEPTH)
        self.depth += 1

    def output(self, chars: int) -> None:
        self.written += chars
        if self.written > self.max_output:
            raise self._exceeded("output", "more than {} characters written".format(
                self.max_output), output=self.max_output)

    def value(self, value: Any) -> Any:
        """`value` unchanged when it is within the size limits."""
        if isinstance(value, int) and not isinstance(value, bool):
            if value.bit_length() > MAX_INT_BITS:
                raise self._exceeded("size", "an integer of over {} bits".format(MAX_INT_BITS))
        elif isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
            if len(value) > self.max_output:
                raise self._exceeded("size", "a value of {} items or characters (limit "
                                     "{})".format(len(value), self.max_output),
                                     output=self.max_output)
        return value

    def size_arguments(self, args: Any, kwargs: Dict[str, Any]) -> None:
        for arg in list(args) + list(kwargs.values()):
            if isinstance(arg, int) and not isinstance(arg, bool) and \
                    abs(arg) > self.max_output:
                raise self._exceeded("size", "a size argument of {}".format(arg),
                                     output=self.max_output)

    def format_widths(self, text: str, args: Any, kwargs: Dict[str, Any],
                      percent: bool) -> None:
        """Refuse a format string whose widths or precisions would build a value over the
        limit (`'{:>3000000000}'.format(x)`, `'%3000000000d' % x`) before it is built."""
        if not isinstance(text, str):
            return
        numbers, from_args = [], False
        if percent:
            for match in _PERCENT_SPEC.finditer(text):
                numbers.extend(g for g in match.groups() if g and g != "*")
                from_args = from_args or "*" in match.groups()
        else:
            try:
                fields = list(string.Formatter().parse(text))
            except ValueError:
                return                  # str.format itself will refuse it
            for _, _, spec, _ in fields:
                numbers.extend(re.findall(r"\d+", spec or ""))
                from_args = from_args or "{" in (spec or "")
        for number in numbers:
            if len(number) > 12 or int(number) > self.max_output:
                raise self._exceeded("size", "a format width of {}".format(number),
                                     output=self.max_output)
        if from_args:
            values = args if isinstance(args, (tuple, list)) else [args]
            self.size_arguments(values, kwargs if isinstance(kwargs, dict) else {})

    def product(self, left: Any, right: Any) -> None:
        """Refuse `left * right` before it is built when it would be too large."""
        count = right if isinstance(left, (str, bytes, list, tuple)) else left
        seq = left if isinstance(left, (str, bytes, list, tuple)) else right
        if isinstance(seq, (str, bytes, list, tuple)) and isinstance(count, int):
            if len(seq) * max(count, 0) > self.max_output:
                raise self._exceeded("size", "a repeated value of {} x {}".format(
                    len(seq), count), output=self.max_output)
        elif _is_int(left) and _is_int(right) and \
                left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise self._exceeded("size", "an integer of over {} bits".format(MAX_INT_BITS))

    def power(self, base: Any, exponent: Any) -> None:
        if _is_int(base) and _is_int(exponent) and abs(base) > 1 and \
                exponent * base.bit_length() > MAX_INT_BITS:
            raise self._exceeded("size", "an integer of over {} bits".format(MAX_INT_BITS))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_local = threading.local()


def _budget() -> Budget:
    budget = getattr(_local, "budget", None)
    if budget is None:      # rendering outside `render_bounded` is not allowed
        raise AprError(ErrorCode.ARGUMENT, "chat templates render only through "
                       "render_bounded")
    return budget


class _Counted:
    """A loop's iterable that counts each item against the budget (and keeps `len`)."""

    __slots__ = ("_items", "_budget")

    def __init__(self, items: Any, budget: Budget) -> None:
        self._items = items
        self._budget = budget

    def __iter__(self) -> Iterator[Any]:
        step = self._budget.step
        for item in self._items:
            step()
            yield item

    def __len__(self) -> int:
        return len(self._items)


def render_bounded(compiled: Any, variables: Dict[str, Any], limits: Limits = DEFAULT_LIMITS,
                   input_chars: int = 0) -> str:
    """`compiled` (a template of `environment()`) rendered with `variables` under a fresh
    budget of `limits`; E008 when it exceeds one."""
    budget = Budget(limits, input_chars)
    previous = getattr(_local, "budget", None)
    _local.budget = budget
    try:
        parts = []
        for chunk in compiled.generate(variables):
            parts.append(chunk)
        return "".join(parts)
    finally:
        _local.budget = previous


def environment() -> Optional[Any]:
    """The bounded sandbox environment (one per process), or None without jinja2."""
    global _environment
    try:
        import jinja2  # noqa: F401  (the import is the availability test)
    except ImportError:
        return None
    if _environment is None:
        _environment = _make_environment()
    return _environment


_environment: Any = None


def _pass_context(function: Any) -> Any:
    """Mark a filter as taking the context, which also keeps jinja2 from evaluating it
    at compile time (a constant-folded counter would count nothing)."""
    import jinja2
    marker = getattr(jinja2, "pass_context", None) or getattr(jinja2, "contextfilter")
    return marker(function)


def _loop_filter(context: Any, items: Any) -> Any:
    return _Counted(items, _budget())


def _output_filter(context: Any, value: Any) -> Any:
    budget = _budget()
    budget.output(len(value) if isinstance(value, str) else len(str(value)))
    return value


def _size_filter(context: Any, value: Any) -> Any:
    return _budget().value(value)


def guard_filter(name: str, function: Any) -> Any:
    """`function` as a filter that counts a step and checks its arguments and result."""
    pass_arg = getattr(function, "jinja_pass_arg", None) is not None or any(
        getattr(function, flag, False) for flag in
        ("contextfilter", "evalcontextfilter", "environmentfilter"))
    checks_sizes = name in _SIZE_ARGUMENT_CALLS
    first = 1 if pass_arg else 0

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        if checks_sizes:
            budget.size_arguments(args[first + 1:], kwargs)
        elif name == "format" and len(args) > first:      # value % args
            budget.format_widths(args[first], args[first + 1:], kwargs, percent=True)
        return budget.value(function(*args, **kwargs))
    return guarded


def _check_format(text: str, args: Any, kwargs: Any) -> None:
    if not kwargs and len(args) == 1 and isinstance(args[0], dict):    # format_map
        kwargs = args[0]
    _budget().format_widths(text, args, kwargs if isinstance(kwargs, dict) else {},
                            percent=False)


def _make_environment() -> Any:
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """transformers' `{% generation %}...{% endgeneration %}` (it marks the assistant's
        tokens for training masks): rendered as its body, in a scope of its own."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    internal = {"apr_loop": _loop_filter, "apr_out": _output_filter,
                "apr_size": _size_filter}

    def wrap(node: Any, name: str) -> Any:
        return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)

    def bound(node: Any) -> Any:
        """Route loop iterables, output expressions and `~` through the counters."""
        for field, value in node.iter_fields():
            if isinstance(value, nodes.Node):
                setattr(node, field, concat_checked(bound(value)))
            elif isinstance(value, list):
                setattr(node, field, [concat_checked(bound(v)) if isinstance(v, nodes.Node)
                                      else v for v in value])
        if isinstance(node, nodes.For):
            node.iter = wrap(node.iter, "apr_loop")
        elif isinstance(node, nodes.Output):
            node.nodes = [wrap(child, "apr_out") for child in node.nodes]
        return node

    def concat_checked(node: Any) -> Any:
        return wrap(node, "apr_size") if isinstance(node, nodes.Concat) else node

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["+", "-", "*", "/", "//", "%", "**"])

        def _parse(self, source: str, name: Optional[str], filename: Optional[str]) -> Any:
            if len(source) > MAX_TEMPLATE_CHARS:
                raise AprError(ErrorCode.MEMORY, "chat template is {} characters, over the "
                               "limit of {}".format(len(source), MAX_TEMPLATE_CHARS),
                               limit="template")
            tree = bound(super()._parse(source, name, filename))
            tree.set_environment(self)
            return tree

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            budget = _budget()
            if operator == "*":
                budget.product(left, right)
            elif operator == "**":
                budget.power(left, right)
            elif operator == "%":
                budget.format_widths(left, right, right, percent=True)
            return budget.value(super().call_binop(context, operator, left, right))

        # str.format / format_map: jinja2 < 3.1.5 routes calls to format_string, later
        # versions wrap the bound method at attribute access (wrap_str_format).
        def format_string(self, s: str, args: Any, kwargs: Any, format_func: Any = None
                          ) -> str:
            _check_format(s, args, kwargs)
            return super().format_string(s, args, kwargs, format_func)

        def wrap_str_format(self, value: Any) -> Any:
            wrapper = super().wrap_str_format(value)
            if wrapper is None:
                return None
            text = getattr(value, "__self__", "")

            def checked(*args: Any, **kwargs: Any) -> str:
                _check_format(text, args, kwargs)
                return wrapper(*args, **kwargs)
            return checked

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
            budget = _budget()
            budget.step()
            if getattr(__obj, "__name__", None) in _SIZE_ARGUMENT_CALLS:
                budget.size_arguments(args, kwargs)
            budget.enter()
            try:
                return budget.value(super().call(__context, __obj, *args, **kwargs))
            finally:
                budget.depth -= 1

    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True,
                             extensions=[Generation, loopcontrols])
    env.globals.pop("lipsum", None)     # lipsum(n) builds n paragraphs in one call
    env.filters = {name: guard_filter(name, f) for name, f in env.filters.items()}
    for name, function in internal.items():
        env.filters[name] = _pass_context(function)
    return env


__all__ = ["Limits", "DEFAULT_LIMITS", "Budget", "environment", "render_bounded",
           "guard_filter", "MAX_TEMPLATE_CHARS", "MAX_CALL_DEPTH"]
