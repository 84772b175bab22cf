"""``$AGENTLAB_EXTENSIONS``: the user's modules, by name or by file path, and one error line for a bad one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cli_helpers import run_cli

from agentlab.extensions import EXTENSIONS_ENV, ExtensionError, extension_entries, load_extensions
from agentlab.policies import arms

ARM_MODULE = '''
from agentlab.policies.arms import Arm, register_arm

register_arm(Arm("{name}", role="lossy", build=lambda settings, model: [], description="an extension's arm"))
'''


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.delenv(EXTENSIONS_ENV, raising=False)
    added: list[str] = []
    yield added
    for name in added:
        arms.ARMS.pop(name, None)
        sys.modules.pop(name, None)


def test_the_variable_is_read_in_order_each_entry_once_and_the_old_name_is_not(clean_env: list[str]) -> None:
    env = {EXTENSIONS_ENV: "a, b,,b", "AGENTLAB_TASK_MODULES": "c"}
    assert extension_entries(env) == ["a", "b"]
    assert extension_entries({}) == []


def test_a_file_path_loads_from_any_directory(clean_env: list[str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "ext_by_path.py").write_text(ARM_MODULE.format(name="ext_by_path_arm"))
    clean_env.extend(["ext_by_path", "ext_by_path_arm"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(EXTENSIONS_ENV, "elsewhere/ext_by_path.py")
    assert arms.generic_arm("ext_by_path_arm") is not None  # found through the lookup, not a manual import
    assert load_extensions() == ["ext_by_path"]  # a second call imports nothing new
    assert "ext_by_path_arm+recall" in arms.generic_names()


def test_a_misspelt_module_is_one_error_line(clean_env: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EXTENSIONS_ENV, "no_such_policy_module")
    with pytest.raises(ExtensionError, match=r"'no_such_policy_module' named in \$AGENTLAB_EXTENSIONS was not found"):
        load_extensions()
    code, out, err = run_cli("list")
    assert code == 2
    assert err.startswith("error: extension module 'no_such_policy_module'") and err.count("\n") == 1
    assert "Traceback" not in err


def test_a_module_that_raises_on_import_names_the_exception(clean_env: list[str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ext_broken.py").write_text("import no_such_dependency_xyz\n")
    clean_env.append("ext_broken")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(EXTENSIONS_ENV, "ext_broken")
    with pytest.raises(ExtensionError, match="failed on import: ModuleNotFoundError: No module named 'no_such_dependency_xyz'"):
        load_extensions()


def test_a_missing_file_is_named(clean_env: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EXTENSIONS_ENV, str(tmp_path / "absent.py"))
    with pytest.raises(ExtensionError, match="absent.py' named in \\$AGENTLAB_EXTENSIONS does not exist"):
        load_extensions()
