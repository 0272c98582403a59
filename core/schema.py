"""OpenAPI schema post-processing: document the error answers every endpoint can give."""

ERROR_BODY = {
    "type": "object",
    "description": "`detail` for a general error, or one list of messages per field.",
    "additionalProperties": True,
}
ERRORS = {
    "400": "The request is invalid; the body says which fields and why.",
    "401": "Not signed in, or the token is invalid, expired or revoked.",
    "403": "Signed in, but this token or role may not do this.",
    "404": "No such object among those you can see.",
    "429": "Too many requests; retry later.",
}


def add_error_responses(result, generator, request, public):
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            responses = operation.setdefault("responses", {})
            for status, description in ERRORS.items():
                responses.setdefault(
                    status,
                    {"description": description, "content": {"application/json": {"schema": ERROR_BODY}}},
                )
    return result
