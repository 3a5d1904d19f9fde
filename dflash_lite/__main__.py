"""``python -m dflash_lite`` and the ``dflash-lite`` script: :mod:`dflash_lite.cli` and ``zoo``."""
import sys

from . import zoo
from .cli import main


def run(argv: list[str] | None = None) -> int:
    """``zoo ...`` to :func:`~dflash_lite.zoo.main`, the rest to :func:`~dflash_lite.cli.main`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return zoo.main(argv[1:]) if argv[:1] == ["zoo"] else main(argv)


if __name__ == "__main__":
    sys.exit(run())
