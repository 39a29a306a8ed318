"""The base of every scenario model: camelCase keys, no unknown keys, immutable, documented.

Field descriptions come from attribute docstrings (`use_attribute_docstrings`), so the text a
reader sees in the code is the text the JSON Schema publishes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

PLANNED_KEY = "x-aisim-status"
"""Schema keyword marking a field or a variant whose behaviour is not simulated yet."""


class Spec(BaseModel):
    """A node of the scenario document."""

    def planned_values(self) -> list[tuple[str, str, str]]:
        """(field, what, issue) for values this node holds whose behaviour is not built yet (enum members
        accepted ahead of their implementation), `what` naming the value; none by default."""
        return []

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        use_attribute_docstrings=True,
        validate_default=False,
        regex_engine="python-re",
    )


def planned(issue: str) -> dict[str, Any]:
    """Schema extras for something the language accepts but the simulator does not honour yet.

    `aisim validate` warns when a scenario uses it, naming the issue that will build it.
    """
    return {PLANNED_KEY: "planned", "x-aisim-planned-by": issue}


def planned_field(*args: Any, issue: str, **kwargs: Any) -> Any:
    """A `Field(...)` marked `x-aisim-status: planned` (see `planned`)."""
    return Field(*args, json_schema_extra=planned(issue), **kwargs)


def is_planned(extra: Any) -> str | None:
    """The issue named by a planned marker, or None when `extra` carries no marker."""
    if isinstance(extra, dict) and extra.get(PLANNED_KEY) == "planned":
        return str(extra.get("x-aisim-planned-by", "a later issue"))
    return None
