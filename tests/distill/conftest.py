import pytest

from distill_fixtures import make_model_folder


@pytest.fixture
def model_dir(tmp_path):
    return make_model_folder(tmp_path / "model")
