"""Upload checks and the messages the page shows."""
import pytest

from shap_e.app.uploads import MESH_TYPES, PICTURE_TYPES, InputError, check_upload, public_message


@pytest.fixture
def uploads(tmp_path):
    root = tmp_path / "uploads"
    (root / "abc").mkdir(parents=True)
    return root


def test_an_upload_inside_the_folder_with_a_listed_type_under_the_limit_is_accepted(uploads):
    (uploads / "abc" / "chair.GLB").write_bytes(b"x" * 10)
    assert check_upload(str(uploads / "abc" / "chair.GLB"), MESH_TYPES, "mesh", 10, uploads).name == "chair.GLB"


@pytest.mark.parametrize("name,size,message", [
    (None, 0, r"upload a picture first \(.png, .jpg"),
    ("photo.gif", 5, r"photo.gif: a picture must be one of .png, .jpg, .jpeg, .webp, .bmp"),
    ("photo.png", 2 * 1024 * 1024 + 1,
     r"photo.png is 2.0 MB; uploads are limited to 2 MB \(shap-e app --max-upload-mb\)"),
])
def test_a_missing_unlisted_or_too_large_upload_is_refused_with_what_is_accepted(uploads, name, size, message):
    path = None
    if name:
        path = uploads / "abc" / name
        path.write_bytes(b"x" * size)
    with pytest.raises(InputError, match=message):
        check_upload(path and str(path), PICTURE_TYPES, "picture", 2 * 1024 * 1024, uploads)


def test_a_file_outside_the_upload_folder_is_never_read(uploads, tmp_path):
    (tmp_path / "secret.png").write_bytes(b"x")
    for path in (tmp_path / "secret.png", uploads / "abc" / ".." / ".." / "secret.png", uploads / "abc" / "gone.png"):
        with pytest.raises(InputError, match="the picture must be uploaded through the page"):
            check_upload(str(path), PICTURE_TYPES, "picture", 100, uploads)


@pytest.mark.parametrize("error,shown", [
    (ValueError("'/tmp/shap_e_app_x/uploads/ab/photo.png' is not an image Pillow can read"),
     "'photo.png' is not an image Pillow can read"),
    (ValueError("path='/home/me/a b.ply' does not exist\nmore detail"), "path='a b.ply' does not exist"),
    (FileNotFoundError(r"no asset file at 'C:\Users\me\chair.obj'"), "no asset file at 'chair.obj'"),
    (ValueError("guidance 3/4 is fine and so is a/b"), "guidance 3/4 is fine and so is a/b"),
    (ValueError(""), "ValueError"),
])
def test_messages_keep_their_first_line_and_lose_every_server_path(error, shown):
    assert public_message(error) == shown
