"""File names people upload: one spelling (NFKC), and nothing that reads as something else.

A name is kept as its NFKC form, so `‥` (two-dot leader) and `．．` (full-width stops)
become the `..` they look like, and `／` / `＼` the separators, which the path checks then
refuse. Characters that still only look like a separator after NFKC (division slash
`∕`, fraction slash `⁄`, big solidus, set minus, …) are refused outright, as are the
names Windows keeps for devices (`CON`, `nul.txt`, `COM1`…: unusable on a Windows
client that downloads them) and names of nothing but spaces and dots.
"""

import re
import unicodedata

from django.core.exceptions import ValidationError

# Characters that read as "/" or "\" (NFKC leaves them as they are).
SEPARATOR_LOOKALIKES = {
    "\u2044": "fraction slash ⁄",
    "\u2215": "division slash ∕",
    "\u2216": "set minus ∖",
    "\u29f5": "reverse solidus operator ⧵",
    "\u29f8": "big solidus ⧸",
    "\u29f9": "big reverse solidus ⧹",
    "\u2571": "box drawing diagonal ╱",
    "\u2572": "box drawing diagonal ╲",
    "\u27cb": "mathematical rising diagonal ⟋",
    "\u27cd": "mathematical falling diagonal ⟍",
    "\u3033": "vertical kana repeat mark 〳",
}
# Device names: with any extension, in any case, with spaces or dots after the name.
WINDOWS_DEVICE = re.compile(r"^(CON|PRN|AUX|NUL|COM[0-9¹²³]|LPT[0-9¹²³]) *(\..*)?$", re.IGNORECASE)


def normal_name(name: str) -> str:
    """`name` in NFKC: the one spelling Gantry keeps and compares."""
    return unicodedata.normalize("NFKC", name)


def check_segments(path: str, shown: str) -> None:
    """Refuse what NFKC leaves that still misleads; `path` is NFKC already, "/"-separated."""
    for char in path:
        if char in SEPARATOR_LOOKALIKES:
            raise ValidationError(
                f"{shown}: “{SEPARATOR_LOOKALIKES[char]}” looks like a folder separator; "
                "use / to separate folders."
            )
    for segment in path.split("/"):
        if segment and not segment.strip(" ."):
            raise ValidationError(f"{shown}: a name may not be only spaces and dots.")
        if WINDOWS_DEVICE.match(segment.rstrip(" .")):
            raise ValidationError(
                f"{shown}: “{segment}” is a device name on Windows (CON, PRN, AUX, NUL, "
                "COM1–9, LPT1–9); pick another name."
            )
