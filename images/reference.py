"""Parse OCI image references (`registry/repository:tag@digest`) the way container tools do.

The grammar is distribution's (github.com/distribution/reference): a name of
lowercase path components, an optional tag, an optional digest. The first
component is a registry host when it contains a dot or a colon or is
`localhost`; otherwise the image lives on Docker Hub (`docker.io`), where a
one-component name means `library/<name>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_REGISTRY = "docker.io"
DEFAULT_TAG = "latest"

_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_HOST = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"(?::[0-9]+)?$|^\[[0-9a-fA-F:.]+\](?::[0-9]+)?$"
)
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$")
_SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")
MAX_NAME_LENGTH = 255


class InvalidReference(ValueError):
    """The reference does not parse; the message says which part and why."""


@dataclass(frozen=True)
class Reference:
    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        """What to ask the registry's manifests endpoint for: the digest wins over the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    def with_digest(self, digest: str) -> Reference:
        return Reference(self.registry, self.repository, self.tag, digest)


def validate_digest(digest: str) -> str:
    if not _DIGEST.match(digest):
        raise InvalidReference(f"“{digest}” is not a digest (expected sha256:<64 hex digits>).")
    algorithm = digest.split(":", 1)[0]
    if algorithm == "sha256" and not _SHA256.match(digest):
        raise InvalidReference(f"“{digest}”: a sha256 digest has exactly 64 lowercase hex digits.")
    if algorithm not in ("sha256", "sha512"):
        raise InvalidReference(f"“{digest}”: unsupported digest algorithm {algorithm!r}.")
    return digest


def parse_reference(text: str, *, default_registry: str = DEFAULT_REGISTRY) -> Reference:
    """Parse `text` into a Reference, or raise InvalidReference saying what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidReference("Give an image reference, e.g. registry.example.org/team/image:tag.")
    text = text.strip()
    if any(c.isspace() for c in text):
        raise InvalidReference(f"“{text}”: an image reference has no spaces.")
    if "://" in text:
        raise InvalidReference(f"“{text}”: give the reference without a scheme (no http://).")

    digest = ""
    if "@" in text:
        text, digest = text.split("@", 1)
        validate_digest(digest)

    # A tag is after the last colon, unless that colon belongs to a host:port.
    tag = ""
    last_slash = text.rfind("/")
    colon = text.rfind(":")
    if colon > last_slash:
        text, tag = text[:colon], text[colon + 1 :]
        if not _TAG.match(tag):
            raise InvalidReference(
                f"“{tag}” is not a valid tag (letters, digits, _ . -, at most 128, "
                "not starting with . or -)."
            )

    parts = text.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry, path = parts[0], parts[1:]
        if not _HOST.match(registry):
            raise InvalidReference(f"“{registry}” is not a valid registry host.")
    else:
        registry, path = default_registry, parts
        if registry == DEFAULT_REGISTRY and len(path) == 1:
            path = ["library", *path]
    if not path or any(not p for p in path):
        raise InvalidReference(f"“{text}”: the repository name is empty or has an empty part.")
    for component in path:
        if not _COMPONENT.match(component):
            problem = "uppercase letters" if component != component.lower() else "characters"
            raise InvalidReference(
                f"“{component}” is not a valid repository name part ({problem} not allowed: "
                "use lowercase letters, digits and single . _ - between them)."
            )
    repository = "/".join(path)
    if len(registry) + 1 + len(repository) > MAX_NAME_LENGTH:
        raise InvalidReference(f"The image name is longer than {MAX_NAME_LENGTH} characters.")
    if not tag and not digest:
        tag = DEFAULT_TAG
    return Reference(registry=registry, repository=repository, tag=tag, digest=digest)
