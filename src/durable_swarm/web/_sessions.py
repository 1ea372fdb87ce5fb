"""The sessions API: list, read, clear and delete the conversations runs continue."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ._console import ClientDep

router = APIRouter(tags=["sessions"])
"""`/api/sessions` and `/api/sessions/<name>` (with `/clear` and `/delete`)."""


@router.get("/api/sessions")
def list_sessions(
    client: ClientDep, limit: Annotated[int, Query(ge=1, le=1000)] = 200
) -> dict[str, Any]:
    """Sessions, most recently changed first, without their messages: `{"sessions":
    [{"name", "message_count", "runs", "last_run", "held_by", "compacted", ...}]}`."""
    found = client.list_sessions(limit=limit)
    return {"sessions": [{k: v for k, v in s.to_json().items() if k != "messages"} for s in found]}


@router.get("/api/sessions/{name:path}")
def get_session(name: str, client: ClientDep) -> dict[str, Any]:
    """One session with its messages (what its next run starts from); 404 if none."""
    return client.get_session(name).to_json()


@router.post("/api/sessions/{name:path}/clear")
def clear_session(name: str, client: ClientDep) -> dict[str, Any]:
    """Empty the session's conversation (409 while a run holds it)."""
    client.clear_session(name)
    return {"session": name, "cleared": True}


@router.post("/api/sessions/{name:path}/delete")
def delete_session(name: str, client: ClientDep) -> dict[str, Any]:
    """Delete the session (409 while a run holds it)."""
    client.delete_session(name)
    return {"session": name, "deleted": True}
