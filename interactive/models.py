"""What the interactive sessions keep in the database."""

from django.db import models
from django.utils import timezone


class NotebookTicket(models.Model):
    """A redeemed notebook ticket (interactive/proxy.py): its nonce, so that it opens once.

    Tickets are signed and expire in a minute; a row is written when one is redeemed
    (the unique nonce makes a second redemption fail, in whichever process it comes)
    and rows older than that are deleted as new ones arrive.
    """

    nonce = models.CharField(max_length=64, unique=True)
    redeemed_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self):
        return self.nonce
