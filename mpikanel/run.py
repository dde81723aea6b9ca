"""``python -m mpikanel.run``: mpiexec with the settings the installed MPI needs on a workstation.

    python -m mpikanel.run -n 16 -- python -m mpikanel.train --sync ssp
    python -m mpikanel.run -n 4 --bind-to none -- python my_script.py     # mpiexec flags pass through
    python -m mpikanel.run --print-env                                      # the settings, as shell exports
    python -m mpikanel.run --install-config                                 # write them into this venv's Open MPI

Everything before ``--`` goes to mpiexec unchanged, everything after it is the program (a leading
``python``/``python3`` becomes this interpreter, so the venv's Python runs). The launcher is
``$MPIEXEC`` when set, else the ``mpiexec`` next to this Python (the venv's MPI wheel), else the one
on PATH. Command and environment come from :func:`mpikanel.comm.environment.mpiexec_launch`, as
for the benchmarks and the tests; the environment gets
:func:`~mpikanel.comm.environment.launcher_environment`: Open MPI may start more ranks than cores
and, as root, may run at all; idle ranks of every MPI family sleep instead of spinning. Settings already in the environment win. Plain ``mpiexec``, ``mpirun`` and ``srun``
keep working; this launcher only saves typing those settings.

``--install-config`` appends the oversubscription default to the venv's Open MPI launcher
configuration (``<prefix>/etc/prte-mca-params.conf``), so that a plain ``mpiexec`` of that venv
oversubscribes too (root still needs the environment: Open MPI reads that only from there).
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from .comm.environment import OVERSUBSCRIBE, MpiexecNotFound, launcher_defaults, launcher_environment, mpiexec_launch

USAGE = "usage: python -m mpikanel.run [MPIEXEC ARGS...] -- PROGRAM [ARGS...]  |  --print-env  |  --install-config"
_CONFIG_LINE = "rmaps_default_mapping_policy = :oversubscribe"


def install_config(prefix: str | None = None) -> Path | None:
    """Append the oversubscription default to <prefix>/etc/prte-mca-params.conf if Open MPI is there."""
    conf = Path(prefix or sys.prefix) / "etc" / "prte-mca-params.conf"
    if not conf.exists():
        return None
    text = conf.read_text()
    if _CONFIG_LINE not in text:
        conf.write_text(text + ("" if text.endswith("\n") or not text else "\n")
                        + "# added by python -m mpikanel.run --install-config: more ranks than cores\n"
                        + _CONFIG_LINE + "\n")
    return conf


def build_launch(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """[mpiexec, *mpiexec args, *program] and its environment; raises SystemExit on a missing ``--``."""
    if "--" not in argv:
        raise SystemExit(f"mpikanel.run: error: no '--' before the program\n{USAGE}")
    i = argv.index("--")
    launcher_args, program = argv[:i], argv[i + 1:]
    if not program:
        raise SystemExit(f"mpikanel.run: error: no program after '--'\n{USAGE}")
    try:
        # $MPIEXEC first; nothing inherited is dropped: this launcher starts the job the user asked for
        return mpiexec_launch(program, launcher_args, mpiexec=os.environ.get("MPIEXEC") or None,
                              env=launcher_environment())
    except MpiexecNotFound as exc:
        raise SystemExit(f"mpikanel.run: error: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    """Exec mpiexec with the launcher environment (never returns on success)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if argv == ["--print-env"]:
        env = launcher_environment()
        for key in sorted({**launcher_defaults(), **OVERSUBSCRIBE}):
            print(f"export {key}={shlex.quote(env[key])}")
        return 0
    if argv == ["--install-config"]:
        conf = install_config()
        print(f"mpikanel.run: {conf}" if conf else f"mpikanel.run: no Open MPI configuration under {sys.prefix}")
        return 0
    cmd, env = build_launch(argv)
    sys.stdout.flush()
    os.execve(cmd[0], cmd, env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
