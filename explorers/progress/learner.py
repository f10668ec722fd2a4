"""Who a learner is, without a login: a random id the browser keeps, typed elsewhere as a resume code.

The id is 160 random bits in base32 (32 letters and digits), made by `secrets`: it cannot be guessed
or enumerated. It is a secret the learner holds, like a password, so the store never sees it: rows are
filed under its SHA-256 digest, and a copy of the database names no learner. Nothing maps a digest back.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets

ID_LENGTH = 32  # base32 letters: 20 bytes
_ID = re.compile(rf"[A-Z2-7]{{{ID_LENGTH}}}")
_SEPARATORS = re.compile(r"[\s-]+")
MAX_CODE_CHARS = 48  # the code as shown (with dashes), and a little room for spaces


def new_id() -> str:
    return base64.b32encode(secrets.token_bytes(20)).decode()


def is_id(text: str) -> bool:
    return isinstance(text, str) and bool(_ID.fullmatch(text))


def resume_code(learner_id: str) -> str:
    """The id in groups of four, to read out or type on another device."""
    return "-".join(learner_id[i : i + 4] for i in range(0, len(learner_id), 4))


def parse_code(text: str) -> str | None:
    """The id a typed resume code names (any case, with or without dashes and spaces), or None when it is not one."""
    if not isinstance(text, str) or len(text) > MAX_CODE_CHARS:
        return None
    candidate = _SEPARATORS.sub("", text).upper()
    return candidate if is_id(candidate) else None


def digest(learner_id: str) -> str:
    """What the store files a learner's rows under (64 hex digits)."""
    if not is_id(learner_id):
        raise ValueError("not a learner id")
    return hashlib.sha256(f"pytorch-explorer-learner:{learner_id}".encode()).hexdigest()
