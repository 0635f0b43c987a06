"""Train a preset of the notebook outside Jupyter; the same program runs under torchrun.

    python -m tools.train --preset cpu                     # Part 3's model
    python -m tools.train --preset ci --set steps=50 --set n_train=200
    python -m tools.train --preset cpu --set vocab='bpe' --set tie='all'
    torchrun --standalone --nproc_per_node=2 -m tools.train --task copy --device cpu

The program is atkit.cli, which runs the notebook's code (the module nbexport.py
generates from it), so this trains exactly what the notebook trains.
"""

import sys

from atkit import cli

if __name__ == "__main__":
    sys.exit(cli.main())
