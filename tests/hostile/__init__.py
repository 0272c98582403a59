"""Hostile inputs for every form and every API endpoint.

Oversized fields, wrong types, unicode edge cases, path traversal in file names and
archives, huge uploads and malformed job specs: each is answered with a clear 4xx and
changes nothing (no row in any table, no file in storage, no field of the object the
request named). A hostile value a field may legitimately hold (an emoji name, say) may
be accepted, and then must come back exactly as sent.

The API's write operations are read from the OpenAPI schema, and the pages that take a
POST from the URL configuration, so an endpoint or form added later fails
`test_every_write_endpoint_has_a_base_body` or `test_every_page_that_takes_a_post_is_probed`
until it is given valid values (BASES or FORM_PAGES in world.py); from then on it gets the
whole treatment. Each probe runs in a savepoint that is rolled back, so every probe starts
from the same world.

The corpus is in corpus.py. Not the full cross product: each field gets the values that
most surely break its kind of field, plus a slice of the rest that moves along from one
endpoint (or page) to the next, so that every value meets every kind of field somewhere
and the package stays quick.

One module per surface:

- test_api.py: every write operation of the schema, field by field, and whole bodies
  (malformed, mistyped, too deep, too large).
- test_job_specs.py: malformed job and prediction specs, through the API and through the
  submit form.
- test_uploads.py: file names, archives, parts and sizes.
- test_forms.py: every server-rendered page that takes a POST.
- test_executor_api.py: the executor's endpoints (a job's token; not in the schema).

Shared by them: conftest.py (the world every probe runs in, built once per module),
world.py (one probe and its refusal checks, the schema's write operations and a body each
accepts, the forms' reading and valid values), state.py (what a refused request must
leave alone).
"""
