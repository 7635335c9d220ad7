"""Environment packages as ``openenv init`` and ``vf-init`` make them (tests/scaffolds.py) are listed by their
framework's name for them, with the environments path at the folder holding them, at the package, or at its inner
package folder; a ``vf-init`` project installed with pip into the verifiers Python is listed by its id; and they
are read as their frameworks read them (the manifest's app, the project's id)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from scaffolds import addition_vf, python_with_installed, two_step_openenv
from side_envs import REPO_ROOT, side_env_python

from hermes_nb.frameworks.verifiers.handoff import taskset_id
from hermes_nb.frameworks.verifiers.interpreter import VERIFIERS_PYTHON_VAR
from hermes_nb.selection import discovery

# The OpenEnv Python's import of openenv (the app's) takes several seconds on a quiet two-core machine.
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("scaffolded")
    two_step_openenv(parent)
    addition_vf(parent)
    return parent


def _listed(path: Path) -> dict[str, tuple[str, str]]:
    environments, problems = discovery.scan([path])
    assert problems == []
    return {e.name: (e.framework, e.class_name) for e in environments}


def test_the_folder_holding_scaffolded_packages_lists_each_by_its_framework_name(packages: Path) -> None:
    assert _listed(packages) == {
        "two_step": ("openenv", "TwoStepEnvironment"),
        "peer-addition": ("verifiers", "PeerAdditionTaskset"),
    }


@pytest.mark.parametrize("inner", ["two_step", "two_step/server"])
def test_an_openenv_package_or_its_server_folder_on_the_path_lists_it_by_its_manifest_name(
    packages: Path, inner: str
) -> None:
    assert _listed(packages / inner) == {"two_step": ("openenv", "TwoStepEnvironment")}


@pytest.mark.parametrize("inner", ["peer_addition", "peer_addition/peer_addition"])
def test_a_vf_init_project_or_its_package_on_the_path_lists_it_by_its_id(packages: Path, inner: str) -> None:
    assert _listed(packages / inner) == {"peer-addition": ("verifiers", "PeerAdditionTaskset")}


def test_renaming_a_package_in_its_manifest_renames_it_in_the_listing(tmp_path: Path) -> None:
    package = two_step_openenv(tmp_path, "renamed")
    manifest = package / "openenv.yaml"
    manifest.write_text(manifest.read_text().replace("name: renamed", "name: called_otherwise"))

    assert list(_listed(tmp_path)) == ["called_otherwise"]


def test_a_vf_init_taskset_runs_by_its_project_id_from_the_project_folder(packages: Path) -> None:
    file = packages / "peer_addition" / "peer_addition" / "taskset.py"

    assert taskset_id(str(file)) == ("peer-addition", (packages / "peer_addition").resolve())


def test_the_openenv_app_of_a_package_is_its_manifest_app_with_both_import_idioms_working(packages: Path) -> None:
    file = packages / "two_step" / "server" / "two_step_environment.py"
    probe = (
        "import sys; from hermes_nb.frameworks.openenv.app_main import load_app; "
        f"app = load_app({str(file)!r}); print(type(app).__name__, sys.modules['two_step.server.app'].__name__)"
    )
    python = side_env_python("openenv")
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=env, cwd=packages.parent)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["FastAPI", "two_step.server.app"]


def test_a_vf_init_project_installed_with_pip_is_listed_by_its_id_and_run_as_its_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = python_with_installed(addition_vf(tmp_path / "src", "installed-addition"), tmp_path / "venv")
    monkeypatch.setenv(VERIFIERS_PYTHON_VAR, str(python))
    discovery.clear_cache()

    environments, _ = discovery.scan([tmp_path / "elsewhere"])

    [listed] = [e for e in environments if e.name == "installed-addition"]
    assert listed.framework == "verifiers" and "site-packages" in listed.file
    assert taskset_id(listed.file) == ("installed_addition", Path(listed.file).parent.parent)
