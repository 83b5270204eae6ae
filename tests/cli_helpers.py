"""Running ``batchfit`` in-process from tests."""

from __future__ import annotations

from planner.cli.main import main


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``batchfit ARGV`` in-process: (exit code, stdout, stderr).

    argparse rejects bad flags by raising SystemExit(2); that counts as the exit code.
    """
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err
