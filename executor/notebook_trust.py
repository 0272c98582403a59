"""Jupyter's pre-save hook for notebooks Gantry serves: nothing saved is ever trusted.

JupyterLab runs a trusted cell's HTML and JavaScript outputs, and Jupyter signs (trusts)
a notebook whenever every code cell of a saved notebook says ``trusted``. In a shared
notebook that lets whoever writes a file run script in the browser of whoever opens it.
Gantry starts JupyterLab with ``--ContentsManager.pre_save_hook`` naming `never_trusted`
(and an in-memory signature store), so no save can make a notebook trusted: outputs are
shown as untrusted (sanitized, no scripts) until someone re-runs the cells themselves.
"""


def never_trusted(model, **kwargs):
    """Drop ``metadata.trusted`` from every cell of a notebook about to be saved."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    for cell in model["content"].get("cells") or []:
        metadata = cell.get("metadata") if isinstance(cell, dict) else None
        if isinstance(metadata, dict):
            metadata.pop("trusted", None)
