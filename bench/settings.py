"""The load benchmark's settings: Gantry's own, with one GPU the machine does not have.

In a lab, jobs run on GPU nodes, not on the web server's machine. The benchmark keeps
it that way: its first job (`sleep`) holds the one GPU, so the jobs the simulated users
submit ask for a GPU and wait in the queue, admitted never, until they are cancelled,
as on a busy cluster. Without it each submit would start real processes here, and the
benchmark would measure Python start-up competing with the web workers for two cores.
"""

from config.settings import *  # noqa: F403

GANTRY_LOCAL_FAKE_GPUS = 1
