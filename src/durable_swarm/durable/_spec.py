"""The run spec: a durable run's workflow input, which is its replay contract.

Every durable run is started with one `RunSpec` (stored by DBOS as the workflow's input, as
JSON): `DurableSwarm` builds it from a `RunRequest` (`RunSpec.of_request`), `DurableClient` from
an agent's name, and a run delegating to a sub-agent for its child. The workflow reads it back
with `RunSpec.from_json`, which also reads the input of runs logged by earlier releases.

Versions of the spec (its `schema_version`; this library reads every one of them):
1. A plain dict without `schema_version` (releases before it): `agent`, `messages`,
   `context_variables`, `model_override`, `stream`, `debug`, `max_turns`, `execute_tools`,
   `after_work`, `agents`, and when the starter set them `model_retries`, `prices`,
   `max_result_chars`, `budget` (`None`: no budget; absent: the process's default), `traceparent`,
   `parent`, `tool_call_id`. Such a run belongs to the swarm named "default".
2. The same keys plus `schema_version` and `swarm`, the name of the `DurableSwarm` whose client,
   model and limits the run uses wherever it resumes. An option the starter left to the swarm
   (a thin client's run: no `model_retries`, `prices`, `max_result_chars` or `budget`) is not
   written, and is taken from that swarm when the run executes.

3. The same keys plus, when set, `session` (the session the run continues: its messages come
   first in `messages`, and the run adds its own to it when it succeeds), `session_version`
   (the session's version those messages are, see `_sessions.SessionStore.finish`) and
   `compact_at` (its token budget, see `durable_swarm.compaction`). A run that sets neither
   is written as version 2, so releases before sessions still run it.

The keys keep their names and places from version to version: the CLI, the console and SQL
queries (`_listing`) read `agent`, `messages`, `context_variables` and `parent` from any run.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .. import _registry
from ..errors import DurableSwarmError
from ..usage import Budget

if TYPE_CHECKING:
    from ..loop import RunRequest

__all__ = [
    "DEFAULT_SWARM",
    "SPEC_VERSION",
    "RunSpec",
    "agent_ref",
    "check_swarm_name",
    "encode_max_turns",
    "encode_target",
    "spec_version",
]

# The latest version of the spec this library writes and reads (see the module docstring);
# a run without a session or a token budget is written as version 2 (`spec_version`).
SPEC_VERSION = 3
# The swarm a run belongs to when its starter names none (and every run of version 1).
DEFAULT_SWARM = "default"


def check_swarm_name(name: Any) -> str:
    """`name` if it can name a swarm (a non-empty str), else a `DurableSwarmError` saying so."""
    if not isinstance(name, str) or not name.strip():
        raise DurableSwarmError(
            f"A swarm's name must be a non-empty str, not {name!r}: runs record it to find "
            "their swarm's client and limits in any process (e.g. name='support')."
        )
    return name


def agent_ref(agent: Any) -> dict[str, str]:
    """How the log names an agent: its name and the fingerprint of its definition."""
    return {"name": agent.name, "fingerprint": _registry.fingerprint(agent)}


def encode_target(target: Any) -> dict[str, Any] | None:
    """A handoff target as JSON: an agent (name + fingerprint), an agent name, an option, or a
    module-level function (by name, registered in this process: see `_registry.function_name`)."""
    if target is None:
        return None
    # The agent types load the tool machinery: only where runs start (a reader never needs it).
    from ..handoffs import AfterWork, AfterWorkOption
    from ..tools import is_agent

    if isinstance(target, AfterWork):
        target = target.agent
    if is_agent(target):
        return agent_ref(target)
    if isinstance(target, AfterWorkOption):
        return {"option": target.value}
    if isinstance(target, str):
        return {"name": target}
    name = _registry.register_function(target)
    if name is not None:
        return {"callable": name}
    raise DurableSwarmError(
        f"Cannot record handoff target {target!r} in a durable run: use an agent, an agent "
        "name, an AfterWorkOption, or a module-level function."
    )


def encode_max_turns(max_turns: float) -> int | None:
    """`max_turns` as JSON: None stands for infinity. A fraction is rounded up: the loop goes
    on while fewer messages than `max_turns` were added, and a count is a whole number."""
    return None if math.isinf(max_turns) else math.ceil(max_turns)


def spec_version(session: str | None, compact_at: int | str | None) -> int:
    """The version a run's spec is written as: 3 with a session or a token budget (a release
    before them would run it without), else 2, which every release since swarms reads."""
    return SPEC_VERSION if session is not None or compact_at is not None else 2


def _unreadable(what: str, value: Any) -> DurableSwarmError:
    return DurableSwarmError(
        f"This run's input (its spec) is not one durable-swarm wrote: {what} is {value!r}. "
        "Was the run started by another program on this database? Cancel it."
    )


@dataclass(frozen=True)
class RunSpec:
    """A durable run's input: what it starts from, which swarm it belongs to, and its options.

    `agent` and the entries of `agents` name agents (`agent_ref`); `after_work` is a handoff
    target as `encode_target` writes it; `max_turns` None means no limit. `swarm` names the
    `DurableSwarm` whose model client the run uses, and whose `model`, `model_retries`,
    `prices`, `max_result_chars` and default budget fill in the options left None here.
    A run's `model_override` None means the swarm's model for a run, the agent's own model for a
    sub-agent (`parent` set), as in-memory sub-agents do. `budget` None means the swarm's
    default budget; `Budget()` (no limits) means none.
    """

    agent: Mapping[str, Any]
    messages: list[dict[str, Any]]
    context_variables: dict[str, Any] = field(default_factory=dict)
    swarm: str = DEFAULT_SWARM
    model_override: str | None = None
    stream: bool = False
    debug: bool = False
    max_turns: int | None = None
    execute_tools: bool = True
    after_work: Mapping[str, Any] | None = None
    agents: tuple[Mapping[str, Any], ...] = ()
    budget: Budget | None = None
    model_retries: int | None = None
    prices: Mapping[str, Mapping[str, float]] | None = None
    max_result_chars: int | None = None
    traceparent: str | None = None
    parent: str | None = None
    tool_call_id: str | None = None
    session: str | None = None
    session_version: int | None = None
    compact_at: int | str | None = None
    schema_version: int = 2  # `spec_version(session, compact_at)`

    @classmethod
    def of_request(
        cls,
        run: RunRequest,
        *,
        swarm: str,
        model: str | None,
        model_retries: int,
        budget: Budget | None,
        prices: Mapping[str, Mapping[str, float]],
        max_result_chars: int,
        compact_at: int | str | None = None,
    ) -> RunSpec:
        """The spec of `run` started on the swarm named `swarm`, whose options are given (a
        `DurableSwarm`'s): they are stored, so the run keeps them wherever it resumes. The
        run's messages and context are copied, as they are when the run starts (a session's
        starter puts the session's messages first)."""
        budget_of_tokens = run.compact_at if run.compact_at is not None else compact_at
        return cls(
            agent=agent_ref(run.agent),
            messages=copy.deepcopy(run.messages),
            context_variables=copy.deepcopy(run.context_variables or {}),
            swarm=swarm,
            model_override=run.model_override or model,
            stream=run.stream,
            debug=run.debug,
            max_turns=encode_max_turns(run.max_turns),
            execute_tools=run.execute_tools,
            after_work=encode_target(run.after_work),
            agents=tuple(agent_ref(a) for a in run.agents),
            budget=run.budget or budget,
            model_retries=model_retries,
            prices=copy.deepcopy(dict(prices)),
            max_result_chars=max_result_chars,
            session=run.session,
            compact_at=budget_of_tokens,
            schema_version=spec_version(run.session, budget_of_tokens),
        )

    @classmethod
    def by_name(
        cls,
        agent: str,
        messages: list[dict[str, Any]],
        context_variables: dict[str, Any] | None,
        *,
        swarm: str = DEFAULT_SWARM,
        model_override: str | None = None,
        stream: bool = False,
        debug: bool = False,
        max_turns: int | None = None,
        execute_tools: bool = True,
        budget: Budget | None = None,
        traceparent: str | None = None,
        session: str | None = None,
        compact_at: int | str | None = None,
    ) -> RunSpec:
        """The spec of a run a thin client starts by agent name: the options it does not give
        are the swarm's, read where the run executes."""
        return cls(
            agent={"name": agent, "fingerprint": None},
            messages=copy.deepcopy(messages),
            context_variables=copy.deepcopy(context_variables or {}),
            swarm=check_swarm_name(swarm),
            model_override=model_override,
            stream=stream,
            debug=debug,
            max_turns=max_turns,
            execute_tools=execute_tools,
            budget=budget,
            traceparent=traceparent,
            session=session,
            compact_at=compact_at,
            schema_version=spec_version(session, compact_at),
        )

    def sub_agent(
        self,
        delegate: Any,
        task: str,
        *,
        parent: str,
        tool_call_id: str | None,
        model_retries: int,
        prices: Mapping[str, Mapping[str, float]],
        max_result_chars: int,
        budget: Budget | None,
        traceparent: str | None,
    ) -> RunSpec:
        """The spec of the sub-agent `delegate` given `task` by run `parent` (this spec's run):
        it belongs to the same swarm and runs with its parent's options; its model is its
        agent's own."""
        return RunSpec(
            agent=agent_ref(delegate),
            messages=[{"role": "user", "content": task}],
            swarm=self.swarm,
            budget=budget,
            model_retries=model_retries,
            prices=copy.deepcopy(dict(prices)),
            max_result_chars=max_result_chars,
            traceparent=traceparent,
            parent=parent,
            tool_call_id=tool_call_id,
        )

    def with_traceparent(self, traceparent: str | None) -> RunSpec:
        """This spec, its spans joining the trace `traceparent` names."""
        return replace(self, traceparent=traceparent)

    def to_json(self) -> dict[str, Any]:
        """The spec as stored (the workflow's input). Options left to the swarm are not written,
        so that a release that does not know `swarm` reads them as its own defaults."""
        data: dict[str, Any] = {
            "schema_version": self.schema_version,
            "swarm": self.swarm,
            "agent": dict(self.agent),
            "messages": self.messages,
            "context_variables": self.context_variables,
            "model_override": self.model_override,
            "stream": self.stream,
            "debug": self.debug,
            "max_turns": self.max_turns,
            "execute_tools": self.execute_tools,
            "after_work": dict(self.after_work) if self.after_work is not None else None,
            "agents": [dict(a) for a in self.agents],
        }
        optional = {
            "budget": self.budget.to_json() if self.budget is not None else None,
            "model_retries": self.model_retries,
            "prices": self.prices,
            "max_result_chars": self.max_result_chars,
            "traceparent": self.traceparent,
            "parent": self.parent,
            "tool_call_id": self.tool_call_id,
            "session": self.session,
            "session_version": self.session_version,
            "compact_at": self.compact_at,
        }
        data.update({key: value for key, value in optional.items() if value is not None})
        return data

    @staticmethod
    def swarm_of(data: Any) -> str:
        """The name of the swarm a stored spec's run belongs to ("default" for a spec of version
        1, or one that cannot be read)."""
        if isinstance(data, Mapping) and isinstance(data.get("swarm"), str) and data["swarm"]:
            return str(data["swarm"])
        return DEFAULT_SWARM

    @classmethod
    def from_json(cls, data: Any) -> RunSpec:
        """A spec as `to_json` wrote it, or as an earlier release did (version 1: see the module
        docstring). A spec of a newer version raises an error that says to upgrade."""
        if not isinstance(data, Mapping):
            raise _unreadable("the spec", data)
        version = data.get("schema_version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise _unreadable("schema_version", version)
        if version > SPEC_VERSION:
            raise DurableSwarmError(
                f"This run was started by a newer durable-swarm (run spec version {version}; "
                f"this one reads up to {SPEC_VERSION}). Upgrade durable-swarm in this process "
                "to run it; the run stays as it is until then."
            )
        agent = data.get("agent")
        if not isinstance(agent, Mapping) or not isinstance(agent.get("name"), str):
            raise _unreadable("agent", agent)
        if "budget" not in data:
            budget = None  # the swarm's default
        elif data["budget"] is None:
            budget = Budget()  # version 1 wrote None for a run without a budget
        else:
            budget = Budget.from_json(data["budget"])
        agents = data.get("agents") or ()
        if not isinstance(agents, Sequence) or isinstance(agents, str):
            raise _unreadable("agents", agents)
        swarm = data.get("swarm", DEFAULT_SWARM) if version >= 2 else DEFAULT_SWARM
        return cls(
            agent=agent,
            messages=list(data.get("messages") or []),
            context_variables=dict(data.get("context_variables") or {}),
            swarm=check_swarm_name(swarm),
            model_override=data.get("model_override"),
            stream=bool(data.get("stream")),
            debug=bool(data.get("debug")),
            max_turns=data.get("max_turns"),
            execute_tools=bool(data.get("execute_tools", True)),
            after_work=data.get("after_work"),
            agents=tuple(agents),
            budget=budget,
            model_retries=data.get("model_retries"),
            prices=data.get("prices"),
            max_result_chars=data.get("max_result_chars") or None,
            traceparent=data.get("traceparent"),
            parent=data.get("parent"),
            tool_call_id=data.get("tool_call_id"),
            session=data.get("session"),
            session_version=data.get("session_version"),
            compact_at=data.get("compact_at"),
            schema_version=version,
        )
