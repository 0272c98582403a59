"""State changes for datasets, one module per use case. Views, the API, the CLI's
endpoints and the tasks call these; none writes a dataset model directly. Import a
function from the module that owns it:

- `paths`: file paths and names (`clean_path`), the limits every use case shares
- `quotas`: a tenant's dataset storage quota and what it holds
- `catalog`: create, edit and delete datasets
- `versions`: the one place a version is born (`create_version`), copies, a job's outputs
- `uploads`: upload sessions (start, parts, status, commit, abort)
- `staging`: the parts of an upload in storage (bounds, multipart uploads, discarding)
- `commits`: the commit task: parts become blobs, the upload becomes a version
- `archives`: zip / tar uploads, checked and unpacked into a version
- `bucket_imports`: a copy of an allowed bucket prefix as a version
- `inputs`: dataset versions as job inputs (at submit, and for the executor)
- `cleanup`: abandoned uploads and unreferenced blobs

A version is only ever created by `versions.create_version`, in one transaction with all
of its files, after every blob it names is in storage: there is no half-committed version.
"""
