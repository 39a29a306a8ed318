"""The Responses API's stored responses (`store: true`), one store for the whole server."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .protocol import Message

MAX_STORED = 10_000
"""Responses a server keeps for `GET /v1/responses/{id}` and `previous_response_id`: the most recent ones."""


@dataclass
class StoredResponse:
    body: dict[str, Any]
    """The response object, as `GET /v1/responses/{id}` returns it."""
    messages: list[Message]
    """The conversation up to and including this response's output, without `instructions` (OpenAI does not
    carry them over to the next turn): what a request naming it as `previous_response_id` continues."""
    owner: str | None = None
    """The name of the API key that created it (None without keys): only that key reads, continues or deletes
    it; to any other the id does not exist (404), as between OpenAI projects."""


class ResponseStore:
    """The responses created with `store: true` (the default). A server runs for days, so the store is bounded:
    it keeps the `MAX_STORED` (10,000) most recent responses and forgets the oldest, which then answer 404 as
    responses past OpenAI's retention do. Each entry's conversation fits the model's context window (a longer
    one is refused before it is stored), which bounds an entry's size too."""

    def __init__(self, limit: int = MAX_STORED) -> None:
        self.limit = limit
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, response_id: str, stored: StoredResponse) -> None:
        self._items[response_id] = stored
        while len(self._items) > self.limit:
            self._items.popitem(last=False)

    def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        """The response `owner` (an API key's name) stored under this id, or None."""
        stored = self._items.get(response_id)
        return stored if stored is not None and stored.owner == owner else None

    def delete(self, response_id: str, owner: str | None) -> bool:
        if self.get(response_id, owner) is None:
            return False
        del self._items[response_id]
        return True
