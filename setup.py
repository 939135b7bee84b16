"""Build step only (metadata lives in pyproject.toml): package the repository's board scripts.

Why: ``board_scripts/`` at the top of the repository is the single source of the shell code that runs
on a board; an installed rkdet needs it inside the package. This copies ``board_scripts/*.sh`` into
``rkdet/board_scripts/`` of the wheel at build time (``rkdet.boardinfo.scripts.board_scripts_dir`` finds
it there, or the checkout's copy in an editable/source run), so nothing is copied by hand.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE = Path(__file__).resolve().parent / "board_scripts"


class BuildPyWithBoardScripts(build_py):
    """build_py, plus board_scripts/*.sh -> <build_lib>/rkdet/board_scripts/."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads the checkout's copy
            return
        scripts = sorted(SOURCE.glob("*.sh"))
        if not scripts:
            raise SystemExit(f"{SOURCE}: no *.sh to package (MANIFEST.in must graft board_scripts)")
        dest = Path(self.build_lib) / "rkdet" / "board_scripts"
        self.mkpath(str(dest))
        for script in scripts:
            self.copy_file(str(script), str(dest / script.name))


setup(cmdclass={"build_py": BuildPyWithBoardScripts})
