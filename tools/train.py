"""Train a preset of the notebook outside Jupyter; the same program runs under torchrun.

    python -m tools.train --preset cpu                     # Part 3's model
    python -m tools.train --preset ci --set epochs=2 --set n_train=200
    python -m tools.train --preset cpu --set vocab='bpe' --set tie='all'
    torchrun --standalone --nproc_per_node=2 -m tools.train --task copy --device cpu

The code is the notebook's `train_cli` (Part 5, called through `cli_main`), imported
from the module that nbexport.py generates, so this trains exactly what the notebook
trains.
"""

import sys

import nbexport

if __name__ == "__main__":
    sys.exit(nbexport.load().cli_main())
