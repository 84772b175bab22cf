"""Artifact names and owner ids: what a name may be, the user scope, and the errors.

A name is a relative, slash-separated path such as ``report.md`` or ``tool-results/call_7``. It
is refused (:class:`InvalidArtifactName`, one line naming the fix) when it is empty, longer than
:data:`MAX_NAME_LENGTH` characters, absolute (``/etc/x``, a Windows drive such as ``C:``), walks up or
sideways (a ``..`` or ``.`` segment, an empty segment as in ``a//b``), or holds NUL or another
control character. Backslashes are refused outright, so a name means the same on every system.

**User scope.** A name that starts with :data:`USER_PREFIX` (``user:``) belongs to the user, not
to one session: every session of that (app, user) reads and revises the same artifact, and
``list`` shows it in each of them. Without the prefix a name is scoped to its session. The prefix
is part of the name (``user:profile.json`` is listed and loaded under that name).

App, user and session ids are refused too when they could not be one folder name of the durable
backend (empty, a slash or backslash, NUL, ``.`` or ``..``, over :data:`MAX_ID_LENGTH`), so no id
can address another owner's folder.
"""

from __future__ import annotations

import re

#: The prefix of a user-scoped name: shared by every session of the (app, user).
USER_PREFIX = "user:"
#: Longest accepted name, in characters.
MAX_NAME_LENGTH = 255
#: Longest accepted app, user or session id, in characters (a folder name's limit on common file systems).
MAX_ID_LENGTH = 255

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")


class ArtifactError(ValueError):
    """Any refused artifact operation; the message is one line that names the fix."""


class InvalidArtifactName(ArtifactError):
    """A name (or an app, user or session id) the service refuses."""


class ArtifactTooLarge(ArtifactError):
    """The data is over the service's size limit."""


class ArtifactNotFound(ArtifactError, LookupError):
    """No artifact (or no such revision) under that name."""


class ArtifactOwnershipError(ArtifactError):
    """The write would land in a folder that is not the owner's (another user's artifact)."""


def is_user_scoped(name: str) -> bool:
    """Whether ``name`` is user-scoped (starts with :data:`USER_PREFIX`)."""
    return name.startswith(USER_PREFIX)


def check_name(name: object) -> str:
    """``name`` when it is an acceptable artifact name; else :class:`InvalidArtifactName`."""
    if not isinstance(name, str) or not name:
        raise InvalidArtifactName(f"artifact name must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidArtifactName(f"artifact name is {len(name)} characters, over the limit of {MAX_NAME_LENGTH}; "
                                  "use a shorter name")
    if "\x00" in name:
        raise InvalidArtifactName(f"artifact name {name!r} contains NUL; remove it")
    if _CONTROL.search(name):
        raise InvalidArtifactName(f"artifact name {name!r} contains a control character; use printable characters")
    path = name[len(USER_PREFIX):] if is_user_scoped(name) else name
    if not path:
        raise InvalidArtifactName(f"artifact name {name!r} has nothing after {USER_PREFIX!r}; name the file")
    if "\\" in path:
        raise InvalidArtifactName(f"artifact name {name!r} contains a backslash; separate folders with '/'")
    if path.startswith("/") or _DRIVE.match(path):
        raise InvalidArtifactName(f"artifact name {name!r} is an absolute path; use a relative name such as "
                                  "'reports/day1.md'")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            what = "an empty segment" if not segment else f"a {segment!r} segment"
            raise InvalidArtifactName(f"artifact name {name!r} has {what} (no path walk); use a plain relative "
                                      "name such as 'reports/day1.md'")
    return name


def check_id(kind: str, value: object) -> str:
    """``value`` when it is an acceptable app, user or session id (``kind`` names which); else an error."""
    if not isinstance(value, str) or not value:
        raise InvalidArtifactName(f"{kind} must be a non-empty string, got {value!r}")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidArtifactName(f"{kind} is {len(value)} characters, over the limit of {MAX_ID_LENGTH}")
    if value in (".", "..") or "/" in value or "\\" in value or _CONTROL.search(value):
        raise InvalidArtifactName(f"{kind} {value!r} cannot name a folder (no '/', '\\', '.', '..' or control "
                                  "characters); use a plain id")
    return value


__all__ = [
    "MAX_ID_LENGTH",
    "MAX_NAME_LENGTH",
    "USER_PREFIX",
    "ArtifactError",
    "ArtifactNotFound",
    "ArtifactOwnershipError",
    "ArtifactTooLarge",
    "InvalidArtifactName",
    "check_id",
    "check_name",
    "is_user_scoped",
]
