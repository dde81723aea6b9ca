"""Classification data loading: each worker reads only its own row range where the format allows.

spec.py names a source (DataSpec), sources/ reads one format each (synthetic, libsvm, npz/HDF5,
Fashion-MNIST IDX), describe.py gives the training part's shape and classes, shard.py loads a
worker's rows, the test set or a whole file, validate.py checks what was read, permute.py is
--permute-features.
"""

from .describe import DataInfo, describe
from .permute import feature_permutation, unpermute_linear
from .shard import Shard, load_rows, load_test, read_file, shard_range
from .sources.idx import DEFAULT_FASHION_DIR
from .sources.libsvm import LABEL_PLACEHOLDERS
from .sources.synthetic import SPARSE_VALUES, SYNTHETIC_CHUNK
from .spec import DataSpec, data_spec

__all__ = ["DEFAULT_FASHION_DIR", "LABEL_PLACEHOLDERS", "SPARSE_VALUES", "SYNTHETIC_CHUNK", "DataInfo", "DataSpec",
           "Shard", "data_spec", "describe", "feature_permutation", "load_rows", "load_test", "read_file",
           "shard_range", "unpermute_linear"]
