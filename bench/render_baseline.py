#!/usr/bin/env python3
"""Python baseline: chat-template rendering throughput (conversations/second).

Renders the 300 conversations of fixtures/prompts/openai_messages.jsonl repeatedly with
Qwen3's template (enable_thinking=False, add_generation_prompt=True) and Kimi K2's template, and
prints conversations/s for:
  * transformers.utils.chat_template_utils.render_jinja_template, one call per conversation
    (what apply_chat_template(tokenize=False) does per request, minus the tokenizer object),
  * the same, one batched call for all 300 conversations,
  * the bare compiled jinja2 Template.render() (floor: no input copying / reasoning aliasing).

Uses transformers if importable (pip install transformers jinja2; no torch needed). Otherwise
it falls back to an exact emulation of transformers' jinja2 environment (same Environment
settings, tojson/raise_exception/strftime_now, {% generation %} accepted as a no-op) and says so.

Usage: python3 render_baseline.py [--fixtures FIXTURES_DIR] [--seconds 3]
(FIXTURES_DIR defaults to the repository's fixtures/ folder.)
"""
import argparse
import json
import os
import sys
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))


def find_fixtures(arg):
    path = arg or os.path.join(HERE, "..", "fixtures")
    if not os.path.isfile(os.path.join(path, "prompts", "openai_messages.jsonl")):
        sys.exit(f"fixtures not found in {path}: pass --fixtures PATH")
    return path


def load_backend():
    """Returns (name, render_batch(convs, template, **kw) -> list[str], compile(template) -> jinja2.Template)."""
    try:
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        from transformers.utils import chat_template_utils as ctu  # noqa: E402
        import transformers

        def render_batch(convs, template, **kw):
            out, _ = ctu.render_jinja_template(conversations=convs, chat_template=template, **kw)
            return out

        return f"transformers {transformers.__version__} render_jinja_template", render_batch, ctu._compile_jinja_template
    except ImportError:
        pass

    # Exact emulation of transformers' _cached_compile_jinja_template (v4.4x-v5.x) for templates without
    # {% generation %} tracking; render_jinja_template additionally deep-copies inputs, which we mimic.
    import copy
    import functools
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class AssistantTracker(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)

        def _gen(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    @functools.lru_cache
    def compile_template(src):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[AssistantTracker, jinja2.ext.loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = strftime_now
        return env.from_string(src)

    def render_batch(convs, template, tools=None, documents=None, add_generation_prompt=False, **kw):
        t = compile_template(template)
        return [t.render(messages=copy.deepcopy(c), tools=tools, documents=documents,
                         add_generation_prompt=add_generation_prompt, **kw) for c in convs]

    return f"jinja2 {jinja2.__version__} (emulated transformers env; transformers not installed)", render_batch, compile_template


def bench(fn, n_convs, seconds):
    fn()  # warm-up (compiles + caches the template)
    reps, t0 = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return reps * n_convs / dt, reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=None)
    ap.add_argument("--seconds", type=float, default=3.0, help="minimum wall time per measurement")
    args = ap.parse_args()
    fx = find_fixtures(args.fixtures)
    convs = [json.loads(l)["messages"] for l in open(os.path.join(fx, "prompts", "openai_messages.jsonl"), encoding="utf-8") if l.strip()]
    expected = {}
    for l in open(os.path.join(fx, "prompts", "qwen3_rendered.jsonl"), encoding="utf-8"):
        r = json.loads(l)
        expected[r["id"]] = r["text"]
    ids = [json.loads(l)["id"] for l in open(os.path.join(fx, "prompts", "openai_messages.jsonl"), encoding="utf-8") if l.strip()]

    def read_template(name):  # bytes as stored (some are CRLF); jinja2 normalises newlines itself
        with open(os.path.join(fx, "chat_templates", name), "rb") as f:
            return f.read().decode("utf-8")

    backend, render_batch, compile_template = load_backend()
    templates = [
        ("Qwen3 (Qwen-Qwen3-0.6B.jinja)", read_template("Qwen-Qwen3-0.6B.jinja"), {"enable_thinking": False}),
        ("Kimi K2 (moonshotai-Kimi-K2.jinja)", read_template("moonshotai-Kimi-K2.jinja"), {}),
    ]
    print(f"backend: {backend}; python {sys.version.split()[0]}; {len(convs)} conversations; >= {args.seconds}s per row")

    # sanity: Qwen3 output must equal qwen3_rendered.jsonl byte for byte
    out = render_batch(convs, templates[0][1], add_generation_prompt=True, enable_thinking=False)
    same = sum(o == expected[i] for o, i in zip(out, ids))
    print(f"check: Qwen3 rendering == qwen3_rendered.jsonl for {same}/{len(convs)} conversations")

    print(f"{'template':38} {'mode':34} {'conv/s':>10} {'us/conv':>9}")
    per_call = {}
    for label, src, extra in templates:
        kw = dict(add_generation_prompt=True, **extra)
        name = "render_jinja_template" if backend.startswith("transformers") else "emulated render"
        modes = [
            (f"{name}, 1 conv/call", lambda: [render_batch([c], src, **kw) for c in convs]),
            (f"{name}, {len(convs)}/call", lambda: render_batch(convs, src, **kw)),
        ]
        tpl = compile_template(src)
        modes.append(("bare jinja2 Template.render", lambda: [tpl.render(messages=c, tools=None, documents=None, **kw) for c in convs]))
        for mode, fn in modes:
            rate, reps = bench(fn, len(convs), args.seconds)
            print(f"{label:38} {mode:34} {rate:10.0f} {1e6 / rate:9.1f}")
            if mode.endswith("1 conv/call"):
                per_call[label.split(" (")[0]] = rate
    # Last line, for the benchmark that compares todod with it.
    print(json.dumps({"backend": backend, "per_conversation": per_call}))


if __name__ == "__main__":
    main()
