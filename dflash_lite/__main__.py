import sys

from . import zoo
from .cli import main

# ``python -m dflash_lite zoo ...`` is the zoo's own command line (``python -m dflash_lite.zoo``)
sys.exit(zoo.main(sys.argv[2:]) if sys.argv[1:2] == ["zoo"] else main())
