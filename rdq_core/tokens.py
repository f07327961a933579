"""Claim tokens: 128 random bits as 32 lowercase hex digits."""

from __future__ import annotations

import secrets


def new_token() -> str:
    return secrets.token_hex(16)
