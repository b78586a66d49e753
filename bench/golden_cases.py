#!/usr/bin/env python3
"""Writes fixtures/chat_templates/jinja2_cases.jsonl: golden renderings of
cases that cases.jsonl (made with transformers itself) does not cover, made
with transformers' renderer where it is installed, else with the exact
emulation of its jinja2 environment in render_baseline.py (the same
Environment settings, tojson, raise_exception, strftime_now). The lines have
cases.jsonl's shape, so the same Rust test reads both.

    python3 bench/golden_cases.py > fixtures/chat_templates/jinja2_cases.jsonl

Needs jinja2 (3.1). The first line of stderr names the renderer used; the
file's SOURCES.md entry says which made the committed file.
"""
import json
import os
import sys
from datetime import datetime
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from render_baseline import load_backend  # noqa: E402

TEMPLATES = os.path.join(HERE, "..", "fixtures", "chat_templates")
CONTEXT = {"bos_token": "<|bos|>", "eos_token": "<|eos|>",
           "unk_token": "<|unk|>", "pad_token": "<|pad|>"}
NOW = "2026-01-15T09:30:00"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city."},
        "unit": {"type": "string", "description": "celsius or fahrenheit."}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time now.",
    "parameters": {"type": "object", "properties": {}, "required": []}}}

# Cohere command-r-plus's tool_use template writes each call's arguments
# through `indent`, whose kept trailing newline minijinja used to drop.
CASES = [
    ("CohereForAI-c4ai-command-r-plus-tool_use.jinja", "one_tool_call", [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 18}"},
    ], [WEATHER], True),
    ("CohereForAI-c4ai-command-r-plus-tool_use.jinja", "two_tool_calls_nested_arguments", [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo and the time?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather",
                                              "arguments": {"city": "Oslo", "options": {"days": [1, 2], "unit": "celsius"}}}},
            {"type": "function", "function": {"name": "get_time", "arguments": {}}}]},
        {"role": "tool", "content": "sunny"},
        {"role": "tool", "content": "12:00"},
        {"role": "assistant", "content": "Sunny, and it is noon."},
        {"role": "user", "content": "Thanks!"},
    ], [WEATHER, TIME], True),
    ("CohereForAI-c4ai-command-r-plus-tool_use.jinja", "tool_call_without_generation_prompt", [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "tool_calls": [
            {"name": "get_time", "arguments": {"zone": "UTC\nline"}}]},
    ], [TIME], False),
]


def main():
    name, render_batch, _ = load_backend()
    print(f"rendered with {name}", file=sys.stderr)
    fixed = datetime.fromisoformat(NOW)
    for template_name, case, messages, tools, add_generation_prompt in CASES:
        with open(os.path.join(TEMPLATES, template_name), "rb") as f:
            template = f.read().decode("utf-8")
        line = {"template": template_name, "case": case, "messages": messages, "tools": tools,
                "add_generation_prompt": add_generation_prompt, "context": CONTEXT, "now": NOW}
        with mock.patch("render_baseline.datetime") as clock:
            clock.now.return_value = fixed
            try:
                [text] = render_batch([messages], template, tools=tools,
                                      add_generation_prompt=add_generation_prompt, **CONTEXT)
                line["expected"] = text
            except Exception as e:  # a raise_exception or an invalid operation
                line["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(line, ensure_ascii=False))


if __name__ == "__main__":
    main()
