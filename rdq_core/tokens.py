"""Claim tokens: 128 random bits as 32 lowercase hex digits."""

from __future__ import annotations

import secrets


def new_token() -> str:
    """A fresh claim token: 32 lowercase hexadecimal digits from the OS's random source."""
    return secrets.token_hex(16)
