"""File names are kept in NFKC, and names that read as something they are not are
refused with a message saying why: look-alikes of `..` and of the folder separator,
Windows device names, names of only spaces (core.names)."""

import pytest
from django.core.exceptions import ValidationError

from datasets.models import UploadSession
from datasets.services import uploads

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path,says",
    [
        ("‥/x.txt", ".. path segments"),  # two-dot leader: NFKC reads it as ".."
        ("．．/x.txt", ".. path segments"),  # full-width full stops
        ("a/‥", ".. path segments"),
        ("..∕x.txt", "division slash"),
        ("..⁄x.txt", "fraction slash"),
        ("a∖b", "set minus"),
        ("..／x.txt", ".. path segments"),  # full-width solidus: NFKC "/"
        ("a＼b", "not \\"),  # full-width reverse solidus: NFKC "\"
        ("CON", "device name"),
        ("con.txt", "device name"),
        ("data/LPT1", "device name"),
        ("nul .csv", "device name"),
        ("COM¹", "device name"),
        ("   ", "only spaces and dots"),
        ("a/ /b", "only spaces and dots"),
        ("...", "only spaces and dots"),
    ],
)
def test_look_alike_and_reserved_names_are_refused_with_the_reason(owner, dataset, path, says):
    with pytest.raises(ValidationError) as refused:
        uploads.start_upload(owner, dataset, files=[{"path": path, "size": 1}])
    assert says in str(refused.value), refused.value
    assert not UploadSession.objects.exists()


def test_a_name_is_kept_in_nfkc_and_the_message_shows_how_it_was_read(owner, dataset):
    session = uploads.start_upload(
        owner, dataset, files=[{"path": "ﬁgures/e\u0301te\u0301.csv", "size": 1}]  # ligature, NFD
    )
    assert list(session.files.values_list("path", flat=True)) == ["figures/été.csv"]
    with pytest.raises(ValidationError, match=r"'‥/x' \(read as '\.\./x'\)"):
        uploads.start_upload(owner, dataset, files=[{"path": "‥/x", "size": 1}])


def test_ordinary_names_with_dots_and_spaces_still_pass(owner, dataset):
    names = ["my data/a b.csv", "v1.2/.hidden", "console.log", "CONFIG", "com10.txt", "a..b"]
    session = uploads.start_upload(owner, dataset, files=[{"path": n, "size": 1} for n in names])
    assert sorted(session.files.values_list("path", flat=True)) == sorted(names)


def test_the_api_answers_400_with_the_reason_and_opens_nothing(owner, dataset, api_for):
    response = api_for(owner).post(
        "/api/v1/uploads/", {"dataset": dataset.pk, "files": [{"path": "．．/x.txt", "size": 1}]}, format="json"
    )
    assert response.status_code == 400
    assert ".. path segments" in str(response.json())
    assert not UploadSession.objects.exists()


def test_model_files_follow_the_same_rule(owner, project):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from modelhub import services as hub_services

    model = hub_services.create_model(owner, project, name="digits")
    for name in ("‥/x.pt", "..∕x.pt", "AUX.pt", "  "):
        with pytest.raises(ValidationError):
            hub_services.upload_version(owner, model, [(name, SimpleUploadedFile("x", b"x"))])
    assert not model.versions.exists()
