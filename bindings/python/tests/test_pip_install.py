"""`pip install ./bindings/python` in a fresh virtual environment (only with ACCEL_TEST_PIP_INSTALL=1:
it needs PyPI for cffi and takes a while)."""

import os
import subprocess
import sys
import venv

import pytest

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(os.environ.get("ACCEL_TEST_PIP_INSTALL") != "1", reason="set ACCEL_TEST_PIP_INSTALL=1 to pip-install the package into a fresh venv "
                                                                            "(needs PyPI for cffi; slow)")
def test_pip_install_in_fresh_venv(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    subprocess.run([py, "-m", "pip", "install", "-q", PKG], check=True, env=env, timeout=600)
    code = ("import accel, os; print(accel.version()); print(os.path.dirname(accel.__file__)); "
            "import importlib.resources as r; print(r.files('accel').joinpath('py.typed').is_file())")
    env["ACCEL_LIBRARY"] = os.environ["ACCEL_LIBRARY"]
    out = subprocess.run([py, "-c", code], check=True, env=env, capture_output=True, text=True, cwd=str(tmp_path))
    version, where, typed = out.stdout.split()
    assert version == "0.1.0" and where.startswith(str(env_dir)) and typed == "True"
