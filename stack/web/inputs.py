"""Input types shared by the routes: text that can be stored, ids of a known shape.

A lone surrogate (``"\\ud800"``, legal in JSON, not encodable as UTF-8) used to reach
``body_digest`` and the database driver and come back as a 500. It is refused at the
edge instead, with a 422 that names the field. Paths and headers need no such check:
the server decodes them with replacement characters or as Latin-1, never to surrogates.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

__all__ = ["Text", "no_surrogates"]


def no_surrogates(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return value


Text = Annotated[str, AfterValidator(no_surrogates)]
"""Any string a client sends that the ledger stores or hashes."""
