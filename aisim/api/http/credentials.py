"""Reading the credentials a request carries, one way for every personality."""

from __future__ import annotations


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (the scheme in any case, as RFC 7235 says);
    None when the header is missing or names another scheme."""
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip()
    return None
