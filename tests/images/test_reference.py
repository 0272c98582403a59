import pytest

from images.reference import InvalidReference, parse_reference

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    "text,registry,repository,tag,digest",
    [
        ("ubuntu", "docker.io", "library/ubuntu", "latest", ""),
        ("pytorch/pytorch:2.7.1-cuda12.8", "docker.io", "pytorch/pytorch", "2.7.1-cuda12.8", ""),
        ("localhost:5000/gantry/mxnet:1.9.1", "localhost:5000", "gantry/mxnet", "1.9.1", ""),
        ("localhost/x", "localhost", "x", "latest", ""),
        ("ghcr.io/org/team/img@" + DIGEST, "ghcr.io", "org/team/img", "", DIGEST),
        ("127.0.0.1:5000/a/b:t@" + DIGEST, "127.0.0.1:5000", "a/b", "t", DIGEST),
        ("registry:5000/x", "registry:5000", "x", "latest", ""),
        ("reg.example/a__b/c-d.e_f", "reg.example", "a__b/c-d.e_f", "latest", ""),
    ],
)
def test_references_parse_into_their_parts(text, registry, repository, tag, digest):
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )
    assert parse_reference(str(ref)) == ref


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "Give an image reference"),
        ("ghcr.io/Org/img", "uppercase"),
        ("img:", "not a valid tag"),
        ("img:-bad", "not a valid tag"),
        ("a b", "no spaces"),
        ("https://reg.example/x", "without a scheme"),
        ("img@sha256:1234", "not a digest"),
        ("img@sha256:" + "AB" * 32, "64 lowercase hex"),
        ("reg.example//x", "empty"),
        ("reg.example/x--/y", "not a valid repository name part"),
        ("a" * 300, "longer than 255"),
    ],
)
def test_unparseable_references_say_what_is_wrong(text, message):
    with pytest.raises(InvalidReference, match=message):
        parse_reference(text)
