"""A site with one slow async view beside Gantry's own pages, served by `config.asgi` in
tests/core/test_run.py: does a request that waits stall the others?"""
