"""The pipeline: what runs the book's code for real, on the floor above it.

Floors, each importing only the ones below it:

    tools/ (programs) -> pipeline/ -> annotated_transformer_lib (the book) -> atkit/

The book is the notebook's library cells, exported by nbexport.py into the committed
module `annotated_transformer_lib`; it defines the model, the loss, the step and the
loop as the reader reads them. `atkit` holds what needs neither the book nor this
package (settings, files, checkpoints' format, the fast kernels, the page's code).
This package imports the book by name and puts its pieces to work: configs made and
checked (`config`), a config's data with the book's vocabularies (`data`), the
resumable run around the book's loop (`run`), Part 4's table (`table`), Part 5's
check of data parallelism (`parallel`) and reading an exported model back (`export`).
No module below calls up into it: there is no hook, registry or callback.

The notebook's demo cells may import it; its library cells never do.
"""

from pipeline import config, data, export, parallel, run, table
from pipeline.config import config_from_dict, model_config, run_config
from pipeline.data import prepare_data, vocab_from_state
from pipeline.export import load_exported
from pipeline.run import averaged_model, best_model, model_from_checkpoint, train

__all__ = [
    "averaged_model",
    "best_model",
    "config",
    "config_from_dict",
    "data",
    "export",
    "load_exported",
    "model_config",
    "model_from_checkpoint",
    "parallel",
    "prepare_data",
    "run",
    "run_config",
    "table",
    "train",
    "vocab_from_state",
]
