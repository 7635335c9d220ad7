import pytest
from pathlib import Path
import tiny_model
import test_inference_test as t
from test_inference_test import *  # noqa

@pytest.fixture(autouse=True)
def fake_asset(tmp_path_factory, monkeypatch):
    d = tiny_model.make_tiny_model(tmp_path_factory.mktemp("asset") / "base")
    from hermes_nb import home
    monkeypatch.setattr(home, "embedded_base_model_dir", lambda: d)
    monkeypatch.setattr(t, "make_tiny_model", lambda p: tiny_model.make_tiny_model(p, seed=1))
