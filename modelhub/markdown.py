"""Model cards: Markdown rendered to HTML, then sanitized (nh3), so a card can hold no script."""

import markdown as md
import nh3
from django.utils.safestring import mark_safe


def render_card(text: str) -> str:
    html = md.markdown(text or "", extensions=["fenced_code", "tables", "sane_lists"])
    return mark_safe(nh3.clean(html, link_rel="noopener noreferrer nofollow"))
