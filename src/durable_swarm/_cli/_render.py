"""How runs are shown: stable JSON for programs, a table and a timeline for people."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import datetime
from typing import Any

from .._terminal import INVISIBLE
from ..durable._runs import RunInfo, StepRecord
from ._style import Style, ago, clean, duration, local_time, preview

__all__ = [
    "JSON_SCHEMA_VERSION",
    "dumps",
    "new_timeline",
    "run_json",
    "run_table",
    "step_json",
    "step_lines",
    "summary_lines",
    "usage_of",
    "waiting_hint",
]

JSON_SCHEMA_VERSION = 1
# Fields of a run that only `show` has (`list` reads the status row alone).
_DETAIL_FIELDS = (
    "messages", "context_variables", "steps", "transitions", "decisions", "output", "rate_limit",
)  # fmt: skip
# DBOS bookkeeping that people do not need in a timeline (`--all` shows it).
BOOKKEEPING_KINDS = ("event", "timer", "stream", "dbos")


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


# JSON escapes C0 controls itself; these it would leave raw (DEL, C1, bidirectional overrides,
# invisible characters).
_RAW_IN_JSON = re.compile(f"[\x7f-\x9f{INVISIBLE}]")


def dumps(data: Any) -> str:
    """JSON text for programs: sorted keys, ISO 8601 times, non-ASCII kept except the characters
    a terminal could act on, which are `\\uXXXX` escapes like every control character."""
    text = json.dumps(data, default=_default, sort_keys=True, ensure_ascii=False)
    return _RAW_IN_JSON.sub(lambda m: json.dumps(m.group())[1:-1], text)  # \\uXXXX (pairs)


def step_json(step: StepRecord) -> dict[str, Any]:
    """One step as JSON: every field of `StepRecord`, plus `duration_ms`."""
    data = {f.name: getattr(step, f.name) for f in dataclasses.fields(step)}
    data["duration_ms"] = step.duration_ms
    return data


def usage_of(steps: list[StepRecord]) -> dict[str, int]:
    """Token usage summed over the model calls; how many model calls there were, and how many
    of them reported no usage (streamed calls usually do not)."""
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    totals = dict.fromkeys(("model_calls", "model_calls_without_usage", *keys), 0)
    for step in steps:
        if step.kind != "model" or not isinstance(step.output, dict):
            continue
        totals["model_calls"] += 1
        usage = step.output.get("usage") or {}
        if not usage:
            totals["model_calls_without_usage"] += 1
        for key in keys:
            totals[key] += int(usage.get(key) or 0)
    return totals


def run_json(info: RunInfo, *, detail: bool) -> dict[str, Any]:
    """A run as JSON: every field of `RunInfo` (`usage` and `usage_by_agent` as in
    `durable_swarm.usage.Usage`) and `cost_usd`; with `detail`, its steps (with durations) and
    usage with OpenAI's names too, else without the fields that only a full read has."""
    data = {f.name: getattr(info, f.name) for f in dataclasses.fields(info)}
    data["cost_usd"] = info.cost_usd
    if detail:
        data["steps"] = [step_json(s) for s in info.steps]
        usage = info.usage.to_json() if info.usage is not None else {}
        data["usage"] = {**usage, **usage_of(info.steps)}
    else:
        for name in _DETAIL_FIELDS:
            data.pop(name, None)
    data["schema_version"] = JSON_SCHEMA_VERSION
    return data


# --- people -----------------------------------------------------------------------------------


def _note(info: RunInfo) -> str:
    waiting = info.waiting_for or {}
    if info.status == "waiting_for_input":
        return f"asks: {waiting.get('prompt') or '?'}"
    if info.status == "waiting_for_approval":
        return f"approve? {_call_text(waiting.get('tool_call') or {})}"
    if info.error:
        return info.error
    return ""


def tokens_text(info: RunInfo) -> str:
    """A run's total tokens for a table cell ("-" when not read)."""
    return str(info.usage.total_tokens) if info.usage is not None else "-"


def cost_text(cost: float | None) -> str:
    """A cost in USD for people: `$0.0123`, `<$0.0001`, or `?` when unknown."""
    if cost is None:
        return "?"
    if 0 < cost < 0.0001:
        return "<$0.0001"
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"


def run_table(runs: list[RunInfo], style: Style, width: int = 160) -> list[str]:
    """The lines of a table of runs, newest first: id, status, agent, times, tokens, cost (`?`
    when a price or the usage is unknown), and what it waits for."""
    headers = ("RUN ID", "STATUS", "AGENT", "CREATED", "UPDATED", "TOKENS", "COST")
    rows = [
        (
            clean(r.run_id),
            clean(r.status),
            clean(r.agent or "-"),
            local_time(r.created_at),
            ago(r.updated_at),
            tokens_text(r),
            cost_text(r.cost_usd) if r.usage is not None else "-",
        )
        for r in runs
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    room = max(width - sum(widths) - 2 * len(widths), 20)
    lines = [
        style.paint(
            "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + "  NOTE", "bold"
        )
    ]
    for run, row in zip(runs, rows, strict=True):
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        cells[1] = style.status(row[1]) + cells[1][len(row[1]) :]
        note = _note(run)
        cells.append(style.paint(preview(note, room), "dim") if note else "")
        lines.append("  ".join(cells).rstrip())
    return lines


def _call_text(call: dict[str, Any]) -> str:
    """`name(a=1, b="x")` for a tool call."""
    function = call.get("function") or {}
    name = clean(function.get("name", "?"))
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except (TypeError, ValueError):
        return f"{name}({clean(function.get('arguments'))})"
    if not isinstance(arguments, dict):
        return f"{name}({clean(repr(arguments))})"
    shown = ", ".join(f"{clean(k)}={clean(dumps(v))}" for k, v in arguments.items())
    return f"{name}({shown})"


def summary_lines(info: RunInfo, style: Style) -> list[str]:
    """The head of `runs show`: status, agent, times, messages, tokens, and what it waits for."""
    usage = usage_of(info.steps)
    label = lambda text: style.paint(f"  {text:<10} ", "dim")  # noqa: E731
    lines = [f"{style.paint('Run ' + info.run_id, 'bold')}  {style.status(info.status)}"]
    lines.append(f"{label('agent')}{clean(info.agent or '-')}")
    created, updated = local_time(info.created_at), local_time(info.updated_at)
    lines.append(f"{label('created')}{created}  (updated {updated}, {ago(info.updated_at)})")
    if info.forked_from:
        lines.append(f"{label('forked from')}{clean(info.forked_from)}")
    if getattr(info, "parent", None):
        lines.append(f"{label('parent run')}{clean(getattr(info, 'parent', None))}")
    messages = len(info.messages)
    lines.append(f"{label('messages')}{messages} ({info.input_messages} given as input)")
    calls, unreported = usage["model_calls"], usage["model_calls_without_usage"]
    plural = "s" if calls != 1 else ""
    if calls and unreported == calls:
        lines.append(f"{label('tokens')}not reported by the model ({calls} model call{plural})")
    elif calls:
        missing = f", {unreported} without usage" if unreported else ""
        lines.append(
            f"{label('tokens')}{usage['total_tokens']} (prompt {usage['prompt_tokens']}, "
            f"completion {usage['completion_tokens']}) over {calls} model call{plural}{missing}"
        )
    if info.usage is not None and info.usage.cached_tokens:
        lines.append(f"{label('cached')}{info.usage.cached_tokens} input tokens from the cache")
    if calls:
        lines.append(f"{label('cost')}{cost_text(info.cost_usd)}" + _cost_note(info))
    if len(info.usage_by_agent) > 1:
        shares = ", ".join(
            f"{clean(name)} {u.total_tokens} tokens {cost_text(u.cost_usd)}"
            for name, u in info.usage_by_agent.items()
        )
        lines.append(f"{label('by agent')}{shares}")
    if info.context_variables:
        lines.append(f"{label('context')}{preview(dumps(info.context_variables), 90)}")
    if getattr(info, "encrypted", None):
        lines.append(
            f"{label('contents')}"
            + style.paint(
                f"encrypted (needs key {info.encrypted!r}): messages, context and step contents "
                "are not shown; set DURABLE_SWARM_ENCRYPTION_KEY to see them",
                "yellow",
            )
        )
    if info.error:
        lines.append(f"{label('error')}{style.paint(preview(info.error, 200), 'red')}")
    if info.problem:
        lines.append(f"{label('problem')}{style.paint(preview(info.problem, 200), 'yellow')}")
    if info.rate_limit:
        lines.append(f"{label('waiting')}{style.paint(rate_limit_text(info.rate_limit), 'yellow')}")
    return lines


def rate_limit_text(waiting: dict[str, Any]) -> str:
    """What a run waiting for a model limit waits for, in words (`RunInfo.rate_limit`)."""
    until = waiting.get("until")
    when = f", next look at {local_time(until)}" if until else ""
    why = waiting.get("paused_because")
    paused = f"; paused by a {clean(why)}" if why else ""
    return (
        f"for the rate limit of {clean(str(waiting.get('key')))} (a model call of agent "
        f"{clean(str(waiting.get('agent')))}, holding no worker slot{when}){paused}"
    )


def _cost_note(info: RunInfo) -> str:
    if info.cost_usd is not None:
        return ""
    unpriced = sorted(
        {
            str(s.output.get("model"))
            for s in info.steps
            if s.kind == "model" and isinstance(s.output, dict) and s.output.get("cost_usd") is None
        }
    )
    return f" (unknown price or usage for: {', '.join(unpriced)})" if unpriced else ""


def waiting_hint(info: RunInfo, style: Style) -> list[str]:
    """What the run waits for, and the command that answers it."""
    waiting = info.waiting_for or {}
    if info.status == "waiting_for_input":
        prompt = waiting.get("prompt") or "(no question given)"
        return [
            style.paint(f"⏸ waiting for input: {preview(prompt, 300)}", "magenta"),
            f"  answer with: durable-swarm runs send {clean(info.run_id)} 'your answer'",
        ]
    if info.status == "waiting_for_approval":
        call = waiting.get("tool_call") or {}
        run_id, call_id = clean(info.run_id), clean(call.get("id"))
        return [
            style.paint(f"⏸ waiting for approval of {_call_text(call)}", "magenta"),
            f"  approve: durable-swarm runs approve {run_id} {call_id}",
            f"  reject:  durable-swarm runs reject {run_id} {call_id} --message '...'",
        ]
    return []


class _Timeline:
    """Turns steps into lines, remembering tool call arguments and the context as it goes."""

    def __init__(self, style: Style) -> None:
        self.style = style
        self.calls: dict[str, dict[str, Any]] = {}
        # The context before the next tool call; unknown until the first tool call reports it
        # (a run's log keeps the context after each tool call, not the input context).
        self.context: dict[str, Any] | None = None

    def head(self, step: StepRecord, label: str, extra: str = "") -> str:
        kind_colors = {
            "model": "blue", "tool": "magenta", "handoff": "cyan", "wait": "yellow",
            "guardrail": "green", "compact": "green", "session": "green",
        }  # fmt: skip
        kind = self.style.paint(f"{step.kind:<9}", kind_colors.get(step.kind, "dim"))
        timing = self.style.paint(f"{duration(step.duration_ms):>9}", "dim")
        line = f"  #{step.step:<3} {kind} {clean(label):<28} {timing}"
        return f"{line}  {extra}".rstrip()

    def lines(self, step: StepRecord) -> list[str]:
        out = step.output if isinstance(step.output, dict) else {}
        handler = getattr(self, f"_{step.kind}", None)
        lines = handler(step, out) if handler else [self.head(step, step.name)]
        if step.error:
            lines.append("        " + self.style.paint(f"✗ {preview(step.error, 200)}", "red"))
        return lines

    def _model(self, step: StepRecord, out: dict[str, Any]) -> list[str]:
        usage = out.get("usage") or {}
        tokens = ""
        if usage:
            tokens = (
                f"{usage.get('total_tokens', 0)} tokens ({usage.get('prompt_tokens', 0)} in, "
                f"{usage.get('completion_tokens', 0)} out)"
            )
        shown = ", ".join(x for x in (out.get("model"), tokens) if x)  # the model it asked
        lines = [self.head(step, step.name, self.style.paint(shown, "dim"))]
        message = out.get("message") or {}
        if message.get("content"):
            lines.append(f"        {preview(message['content'], 110)}")
        for call in message.get("tool_calls") or []:
            self.calls[call.get("id", "")] = call
            lines.append("        → " + self.style.paint(_call_text(call), "magenta"))
        return lines

    def _tool(self, step: StepRecord, out: dict[str, Any]) -> list[str]:
        message = out.get("message") or {}
        call = self.calls.get(message.get("tool_call_id", ""))
        shown = _call_text(call) if call else clean(step.name)
        lines = [self.head(step, step.name)]
        result = message.get("content")
        lines.append(f"        {shown} = {preview(result if result is not None else '', 90)}")
        handoff = out.get("handoff") or {}
        if handoff.get("name"):
            lines.append("        " + self.style.paint(f"↪ hands off to {handoff['name']}", "cyan"))
        if out.get("ask"):
            lines.append(f"        ? asks the user: {preview(out['ask'], 90)}")
        changes = out.get("context_changes")
        if isinstance(changes, dict):  # the log holds what the tool changed
            lines += self._context_note(changes.get("set") or {}, changes.get("removed") or [])
            return lines
        context = out.get("context_variables")  # logs written before: the whole context
        if isinstance(context, dict) and self.context is None:
            self.context = dict(context)
        elif isinstance(context, dict) and self.context is not None and context != self.context:
            changed = {k: v for k, v in context.items() if self.context.get(k) != v}
            removed = [k for k in self.context if k not in context]
            self.context = dict(context)
            lines += self._context_note(changed, removed)
        return lines

    def _context_note(self, changed: dict[str, Any], removed: list[str]) -> list[str]:
        note = ", ".join(f"{k}={preview(dumps(v), 40)}" for k, v in changed.items())
        if removed:
            note = ", ".join(filter(None, [note, "removed " + ", ".join(removed)]))
        return ["        " + self.style.paint(f"context: {note}", "dim")]

    def _compact(self, step: StepRecord, out: dict[str, Any]) -> list[str]:
        """A compaction: how many messages it summarized, and the summary the model saw."""
        usage = out.get("usage") or {}
        tokens = f"{usage.get('total_tokens', 0)} tokens" if usage else "compactor"
        shown = f"{out.get('summarized', '?')} messages summarized"
        lines = [self.head(step, shown, self.style.paint(tokens, "dim"))]
        if out.get("summary"):
            lines.append(f"        {preview(out['summary'], 110)}")
        return lines

    def _session(self, step: StepRecord, out: dict[str, Any]) -> list[str]:
        """The session the run's conversation was added to."""
        extra = f"keeps {out.get('messages', '?')} messages" if out else ""
        return [self.head(step, step.name, self.style.paint(extra, "dim"))]

    def _handoff(self, step: StepRecord, out: dict[str, Any]) -> list[str]:
        source, target = out.get("source") or "?", out.get("target") or out.get("rule") or "?"
        reason = out.get("reason")
        extra = self.style.paint(preview(reason, 60), "dim") if reason else ""
        return [self.head(step, f"{source} → {target}", extra)]

    def _guardrail(self, step: StepRecord, out: dict[str, Any]) -> list[str]:
        checked = str(out.get("kind") or "").replace("_", " ")
        if out.get("tool"):
            checked = f"{checked} {out['tool']}"
        if not out:  # not recorded yet (the step failed or runs now)
            return [self.head(step, step.name)]
        if not out.get("tripped"):
            return [self.head(step, f"{step.name} passed", self.style.paint(checked, "dim"))]
        reason = preview(out.get("reason") or "no reason given", 110)
        return [
            self.head(step, f"{step.name} tripped", self.style.paint(checked, "dim")),
            "        " + self.style.paint(f"✗ {reason}", "red"),
        ]

    def _subagent(self, step: StepRecord, out: Any) -> list[str]:
        child = getattr(step, "child_run_id", None)
        return [self.head(step, step.name, f"child run {clean(child)}" if child else "")]

    def _wait(self, step: StepRecord, out: Any) -> list[str]:
        out = out if isinstance(out, dict) else {}
        if "text" in out:
            label, detail = "input", preview(out["text"], 80)
        elif "approved" in out:
            label = "approved" if out.get("approved") else "rejected"
            detail = preview(out.get("message") or "", 60)
        else:
            label, detail = ("received" if step.completed_at else "waiting"), ""
        if out.get("by"):
            detail = f"{detail} (by {clean(out['by'])})".strip()
        return [self.head(step, label, detail)]


def step_lines(
    steps: list[StepRecord],
    style: Style,
    *,
    everything: bool = False,
    timeline: _Timeline | None = None,
) -> list[str]:
    """The timeline of `steps`: model calls (tokens, answer, tool calls asked for), tool calls
    with arguments and result, handoffs and waits, each with its duration. DBOS bookkeeping
    steps (events, timers) are left out unless `everything`."""
    timeline = timeline or _Timeline(style)
    lines: list[str] = []
    for step in steps:
        if step.kind not in BOOKKEEPING_KINDS or everything:
            lines.extend(timeline.lines(step))
    return lines


def new_timeline(style: Style) -> _Timeline:
    """A timeline that can be fed steps a few at a time (for `runs watch`)."""
    return _Timeline(style)
