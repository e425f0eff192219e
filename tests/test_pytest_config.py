"""The suite's own pytest settings (pyproject.toml): a passing test's tmp_path is removed when it
ends, a failing test's stays for inspection (a full run otherwise leaves gigabytes under /tmp)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INNER = '''
def test_passes(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"0" * 1024)

def test_fails(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"0" * 1024)
    assert False
'''


def test_a_passing_tests_tmp_path_is_removed_and_a_failing_tests_kept(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    basetemp = tmp_path / "base"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
                           "--basetemp", str(basetemp), str(tmp_path / "test_inner.py")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout + proc.stderr
    left = sorted(p.name for p in basetemp.iterdir() if not p.is_symlink())  # pytest links "<name>current"
    assert left == ["test_fails0"], left
    assert (basetemp / "test_fails0" / "weights.bin").is_file()
