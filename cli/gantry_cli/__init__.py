"""The `gantry` command line and Python SDK (`from gantry_cli.sdk import Gantry`).

Standalone: it talks to a Gantry server over HTTP and websockets only, and imports
nothing of the platform.
"""

__version__ = "0.1.0"
