"""``python -m dflash_lite``: the commands of :mod:`dflash_lite.cli`, and ``zoo ...``, the zoo's."""
import sys

from . import zoo
from .cli import main

sys.exit(zoo.main(sys.argv[2:]) if sys.argv[1:2] == ["zoo"] else main())
